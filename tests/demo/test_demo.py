"""``otelsse demo`` runs the planned mix and its summary says exactly what happened.

1. ``plan(seed)`` is repeatable, deals ``SCENARIO_DECK`` in every block of 50 jobs, never asks
   for an ``UNSUPPORTED`` pair and only uses each route's clients.
2. ``histogram_quantile`` matches hand-computed values and, on generated histograms
   (hypothesis), a transliteration of Prometheus' ``bucketQuantile`` (promql/quantile.go).
3. ``run_demo`` in-process (its own SDK providers; never inside the ``otel`` fixture) with a
   seed whose first 24 jobs deal every scenario: the summary's streams per route and outcome
   equal the plan mapped through ``EXPECTED_OUTCOME``, tool calls equal the plan's, the
   application errors are exactly those ``client_raises`` predicts (a truncated body's framing
   is random per stream, so those sit between two exact bounds, and every failure is either an
   application error or a silent one), the printed table and truncation line say the same, and
   otelsse is uninstrumented afterwards. In ``--duration`` mode the total is the number of jobs
   the progress line reports, and those jobs are the plan's first ones.
   The same seed at another ``--speed`` (a second run) prints the same last line, "in short",
   whose numbers follow from the plan, and a pace line naming each run's speed.
4. The command line: a subprocess run's ``--summary-json`` equals the printed summary;
   ``--provider-only`` serves until SIGINT or SIGTERM and exits 0; invalid arguments exit 2,
   and so do a port the demo cannot listen on and a summary file it cannot write, with one line
   on stderr, before anything starts. docs/users/demo.md's sample is the default seed's.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelsse import semconv
from otelsse._cli import main
from otelsse._clients import CLIENT_MODULES, get_client
from otelsse._demo.provider import (
    DEFAULT_MODELS,
    EXPECTED_OUTCOME,
    UNSUPPORTED,
    request_for,
)
from otelsse._demo.run import (
    CLIENTS,
    ROUTES,
    SCENARIO_DECK,
    DemoOptions,
    Job,
    ListenError,
    Summary,
    histogram_quantile,
    missing_library,
    plan,
    print_summary,
    run_demo,
)
from tests._demo_clients import client_raises
from tests._server import MAX_WAIT

pytestmark = pytest.mark.e2e  # the demo, run

DECK_SIZE = sum(SCENARIO_DECK.values())
STREAMS = 24


def _jobs(seed: int, count: int) -> list[Job]:
    return list(itertools.islice(plan(seed), count))


def _first_seed_dealing_every_scenario(count: int) -> int:
    return next(
        s for s in range(1000) if {j.scenario for j in _jobs(s, count)} == set(SCENARIO_DECK)
    )


# -- the plan ------------------------------------------------------------------------------------

SEEDS = [0, 7, 2024]


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_is_repeatable_for_a_seed(seed: int) -> None:
    assert _jobs(seed, 3 * DECK_SIZE) == _jobs(seed, 3 * DECK_SIZE)
    assert _jobs(seed, DECK_SIZE) != _jobs(seed + 1, DECK_SIZE)


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_deals_the_deck_in_every_block_of_50(seed: int) -> None:
    assert DECK_SIZE == 50
    jobs = _jobs(seed, 10 * DECK_SIZE)
    assert [job.number for job in jobs] == list(range(1, len(jobs) + 1))
    for start in range(0, len(jobs), DECK_SIZE):
        assert Counter(job.scenario for job in jobs[start : start + DECK_SIZE]) == SCENARIO_DECK


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_uses_only_supported_pairs_and_each_routes_clients(seed: int) -> None:
    for job in _jobs(seed, 10 * DECK_SIZE):
        assert (job.route, job.scenario) not in UNSUPPORTED, job
        assert job.client in ROUTES[job.route][1], job
        assert job.model == DEFAULT_MODELS[job.route]
        assert job.request_id == f"req_demo_{job.number}"
    assert {client for _, clients in ROUTES.values() for client in clients} == set(CLIENTS)


# -- histogram_quantile --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "bounds", "counts", "expected"),
    [
        # cumulative 2 4 8 8: rank 4 ends the (1, 2] bucket; rank 6 is halfway through (2, 4]
        (0.5, [1, 2, 4], [2, 2, 4, 0], 2.0),
        (0.75, [1, 2, 4], [2, 2, 4, 0], 3.0),
        # the first bucket interpolates from 0, not from -Inf
        (0.5, [10, 20], [4, 0, 0], 5.0),
        (0.1, [10, 20], [4, 0, 0], 1.0),
        # a rank in the +Inf bucket is the highest finite bound
        (0.99, [1, 2], [10, 0, 1], 2.0),
        (0.5, [1, 2], [0, 0, 5], 2.0),
        # empty buckets between: the rank lands in the first bucket that reaches it
        (0.5, [1, 2, 4, 8], [2, 0, 0, 2, 0], 1.0),
        (0.75, [1, 2, 4, 8], [2, 0, 0, 2, 0], 6.0),
        # a uniform fill of (0, 100] in ten buckets
        (0.5, list(range(10, 101, 10)), [10] * 10 + [0], 50.0),
        (0.95, list(range(10, 101, 10)), [10] * 10 + [0], 95.0),
        # no observations
        (0.5, [1, 2], [0, 0, 0], None),
        (0.5, [], [], None),
    ],
)
def test_histogram_quantile_hand_computed(
    q: float, bounds: list[float], counts: list[int], expected: float | None
) -> None:
    assert histogram_quantile(q, bounds, counts) == pytest.approx(expected)


def _prometheus_bucket_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float:
    """Prometheus 2.42 ``bucketQuantile`` for 0 < q <= 1, on OpenTelemetry's per-bucket counts
    turned into its cumulative ``le`` buckets (the last one +Inf)."""
    buckets = list(zip([*bounds, math.inf], itertools.accumulate(counts), strict=True))
    observations = buckets[-1][1]
    if len(buckets) < 2 or observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(buckets) - 1) if buckets[i][1] >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


@st.composite
def _histograms(draw: st.DrawFn) -> tuple[list[float], list[int]]:
    bounds = draw(
        st.one_of(
            st.just(list(semconv.STREAM_TIME_TO_FIRST_EVENT.buckets or ())),
            st.lists(st.floats(1e-3, 1e4), min_size=1, max_size=16, unique=True).map(sorted),
        )
    )
    counts = draw(st.lists(st.integers(0, 50), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    return bounds, counts


@given(st.floats(0, 1, exclude_min=True), _histograms())
def test_histogram_quantile_matches_prometheus(
    q: float, histogram: tuple[list[float], list[int]]
) -> None:
    bounds, counts = histogram
    expected = _prometheus_bucket_quantile(q, bounds, counts)
    got = histogram_quantile(q, bounds, counts)
    if math.isnan(expected):
        assert got is None
    else:
        assert got == pytest.approx(expected, rel=1e-9)


# -- run_demo ------------------------------------------------------------------------------------


class Table(NamedTuple):
    rows: dict[str, dict[str, int]]  # route (and "total") -> outcome -> count, as printed
    totals: dict[str, int]  # the "streams" column


def _table(text: str) -> Table:
    """The streams table ``print_summary`` prints."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("route "))
    _, _, *outcomes = lines[start].split()
    rows: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for line in itertools.takewhile(str.strip, lines[start + 2 :]):
        name, streams, *counts = line.split()
        totals[name] = int(streams)
        rows[name] = {o: int(c) for o, c in zip(outcomes, counts, strict=True) if int(c)}
    return Table(rows, totals)


def _nonzero(streams: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    nonzero = {route: {o: n for o, n in counts.items() if n} for route, counts in streams.items()}
    return {route: counts for route, counts in nonzero.items() if counts}


def _expected_streams(jobs: list[Job]) -> dict[str, dict[str, int]]:
    streams: dict[str, dict[str, int]] = {}
    for job in jobs:
        counts = streams.setdefault(job.route, {})
        outcome = EXPECTED_OUTCOME[job.scenario]
        counts[outcome] = counts.get(outcome, 0) + 1
    return streams


def _patched_methods() -> dict[tuple[type, str], Any]:
    """What each method otelsse patches is right now (the class's own attribute)."""
    found = {}
    for library in CLIENT_MODULES:
        for owner, method, _ in get_client(library).targets():
            found[owner, method] = vars(owner)[method]
    return found


def _streams_done(progress: str) -> str:
    """ "<done>/<planned>" (or "<done>") from the final progress line, which must not count a
    stream as "unknown" (one whose span the demo could not find by its request id)."""
    final = progress.splitlines()[-1]
    match = re.fullmatch(r"\s*(\d+(?:/\d+)?) streams\b(.*)", final)
    assert match, final
    assert "unknown" not in match[2], final
    return match[1]


@dataclasses.dataclass(frozen=True)
class DemoRun:
    jobs: list[Job]
    summary: Summary
    out: str
    progress: str
    methods_before: dict[tuple[type, str], Any]
    methods_after: dict[tuple[type, str], Any]


def _demo_run(speed: float) -> DemoRun:
    seed = _first_seed_dealing_every_scenario(STREAMS)
    options = DemoOptions(streams=STREAMS, speed=speed, seed=seed, concurrency=4)
    out, progress = io.StringIO(), io.StringIO()
    before = _patched_methods()
    summary = run_demo(options, out=out, progress=progress)
    after = _patched_methods()
    return DemoRun(
        _jobs(seed, STREAMS), summary, out.getvalue(), progress.getvalue(), before, after
    )


@pytest.fixture(scope="module")
def demo_run() -> DemoRun:
    return _demo_run(speed=4)


@pytest.fixture(scope="module")
def faster_run() -> DemoRun:
    """The same seed again, at twice the speed."""
    return _demo_run(speed=8)


def test_run_demo_counts_the_planned_outcomes_per_route(demo_run: DemoRun) -> None:
    summary = demo_run.summary
    assert summary.total == STREAMS
    assert _nonzero(summary.streams) == _expected_streams(demo_run.jobs)
    per_route = {route: sum(counts.values()) for route, counts in summary.streams.items()}
    assert per_route == Counter(job.route for job in demo_run.jobs)
    scenarios = Counter(job.scenario for job in demo_run.jobs)
    assert (summary.tool_calls_valid, summary.tool_calls_invalid) == (
        scenarios["tool_call"],
        scenarios["tool_call_invalid"],
    )
    assert summary.time_to_first_output_p50 is not None
    assert summary.time_to_first_output_p95 is not None
    assert summary.time_to_first_output_p50 <= summary.time_to_first_output_p95


def test_run_demo_counts_what_the_application_saw(demo_run: DemoRun) -> None:
    summary, jobs = demo_run.summary, demo_run.jobs
    # A truncated body's framing is drawn per stream (chunked: the client raises; close: it
    # does not); everything else is exact.
    always = sum(client_raises(job, "close") for job in jobs)
    at_most = sum(client_raises(job, "chunked") for job in jobs)
    assert always <= summary.app_errors <= at_most
    failures = sum(EXPECTED_OUTCOME[job.scenario] in semconv.ERROR_OUTCOMES for job in jobs)
    assert summary.app_errors + summary.silent_failures == failures


def test_run_demo_prints_the_summary_it_returns(demo_run: DemoRun) -> None:
    table = _table(demo_run.out)
    expected = _expected_streams(demo_run.jobs)
    assert {route: row for route, row in table.rows.items() if route != "total"} == expected
    assert table.totals == {
        **{route: sum(counts.values()) for route, counts in expected.items()},
        "total": STREAMS,
    }
    assert table.rows["total"] == Counter(EXPECTED_OUTCOME[job.scenario] for job in demo_run.jobs)
    truncated = sum(job.scenario == "truncated" for job in demo_run.jobs)
    [line] = [line for line in demo_run.out.splitlines() if line.startswith("truncation rate")]
    assert line.endswith(f" {truncated / STREAMS:.1%} ({truncated} of {STREAMS} streams)")
    assert _streams_done(demo_run.progress) == f"{STREAMS}/{STREAMS}"


def test_run_demo_uninstruments_at_the_end(demo_run: DemoRun) -> None:
    assert demo_run.methods_after == demo_run.methods_before
    assert httpx.Client.send is demo_run.methods_before[httpx.Client, "send"]
    assert not hasattr(httpx.Client.send, "__wrapped__")


def _line(text: str, label: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(label + " ")]
    return line


def test_run_demo_ends_with_the_same_plain_line_for_the_same_seed(
    demo_run: DemoRun, faster_run: DemoRun
) -> None:
    """Which stream fails, and how a cut body is framed (so whether the application noticed),
    follows from the seed: the last line is the same in every run, whatever the speed and
    whatever order the concurrent requests reach the provider in."""
    last = demo_run.out.splitlines()[-1]
    assert faster_run.out.splitlines()[-1] == last
    failed = sum(EXPECTED_OUTCOME[job.scenario] in semconv.ERROR_OUTCOMES for job in demo_run.jobs)
    summary = demo_run.summary
    assert last == (
        f"in short               {failed} of {STREAMS} streams went wrong (cut off, stalled,"
        f" refused or broken); the application got an error for {summary.app_errors} of them"
        f" and noticed nothing wrong with the other {summary.silent_failures}: only otelsse did"
    )


def test_run_demo_shows_its_speed_and_pace(demo_run: DemoRun, faster_run: DemoRun) -> None:
    for run, speed in ((demo_run, 4), (faster_run, 8)):
        assert _line(run.out, "pace") == (
            f"pace                   {STREAMS} streams in {run.summary.elapsed:.1f} s,"
            f" 4 at a time; --speed {speed}: the fake provider's waits divided by {speed}"
        )
        banner = run.out.splitlines()[0]
        assert banner.endswith(f"(--speed {speed}: the fake provider's waits divided by {speed})")
        assert run.summary.speed == speed


DEMO_DOC = Path(__file__).resolve().parents[2] / "docs" / "users" / "demo.md"


def test_the_docs_sample_is_what_the_default_seed_prints() -> None:
    """docs/users/demo.md quotes a run of ``python -m otelsse demo``: its table, truncation, tool
    calls and last line are what the default seed's plan makes (which streams fail, and how,
    follows from the seed; the runs above show it), its first line is the banner."""
    sample = DEMO_DOC.read_text(encoding="utf-8").split("$ python -m otelsse demo\n", 1)[1]
    sample = sample.split("```", 1)[0]
    options = DemoOptions()
    jobs = _jobs(options.seed, options.streams)
    table = _table(sample)
    assert {route: row for route, row in table.rows.items() if route != "total"} == (
        _expected_streams(jobs)
    )
    assert table.totals["total"] == options.streams
    truncated = sum(job.scenario == "truncated" for job in jobs)
    assert _line(sample, "truncation rate").endswith(
        f" {truncated / options.streams:.1%} ({truncated} of {options.streams} streams)"
    )
    calls = Counter(job.scenario for job in jobs)
    assert _line(sample, "tool calls").endswith(
        f" {calls['tool_call']} valid, {calls['tool_call_invalid']} invalid"
    )
    failed = sum(EXPECTED_OUTCOME[job.scenario] in semconv.ERROR_OUTCOMES for job in jobs)
    last = re.fullmatch(
        rf"in short +{failed} of {options.streams} streams went wrong \(cut off, stalled,"
        r" refused or broken\); the application got an error for (\d+) of them and noticed"
        r" nothing wrong with the other (\d+): only otelsse did",
        sample.splitlines()[-1],
    )
    assert last, sample.splitlines()[-1]
    errors, silent = map(int, last.groups())
    assert errors + silent == failed
    always = sum(client_raises(job, "close") for job in jobs)
    assert always <= errors <= sum(client_raises(job, "chunked") for job in jobs)
    assert re.fullmatch(
        rf"otelsse demo: {options.streams} streams, {options.concurrency} at a time, from a fake"
        r" provider at http://127\.0\.0\.1:\d+ with the openai, anthropic, cohere and"
        r" google-genai SDKs, boto3, httpx, httpx2 and requests, instrumented by otelsse"
        r" \(--speed 1: the fake provider's own pace\)",
        sample.splitlines()[0],
    )


def _summary(outcomes: dict[str, int], app_errors: int, silent_failures: int) -> Summary:
    return Summary(
        streams={"openai.chat_completions": outcomes},
        time_to_first_output_p50=None,
        time_to_first_output_p95=None,
        tool_calls_valid=0,
        tool_calls_invalid=0,
        app_errors=app_errors,
        silent_failures=silent_failures,
        elapsed=2.0,
        concurrency=1,
        speed=1.0,
    )


@pytest.mark.parametrize(
    ("summary", "last", "pace"),
    [
        (
            _summary({"complete": 5, "incomplete": 1}, 0, 0),
            "none of the 6 streams went wrong",
            "--speed 1: the fake provider's own pace",
        ),
        (
            _summary({"complete": 3, "timeout": 2}, 2, 0),
            "2 of 5 streams went wrong (cut off, stalled, refused or broken); the application"
            " got an error for each of them",
            "--speed 1: the fake provider's own pace",
        ),
        (
            _summary({"truncated": 1}, 0, 1),
            "1 of 1 streams went wrong (cut off, stalled, refused or broken); the application"
            " noticed none of them: only otelsse did",
            "--speed 1: the fake provider's own pace",
        ),
    ],
)
def test_the_summary_ends_in_plain_words(summary: Summary, last: str, pace: str) -> None:
    out = io.StringIO()
    print_summary(summary, out)
    assert out.getvalue().splitlines()[-1] == f"in short               {last}"
    assert _line(out.getvalue(), "pace").endswith(f"; {pace}")


def test_run_demo_for_a_duration_summarizes_the_jobs_it_ran() -> None:
    seed = 3
    progress = io.StringIO()
    options = DemoOptions(duration=3, speed=4, seed=seed, concurrency=4)
    summary = run_demo(options, out=io.StringIO(), progress=progress)
    done = int(_streams_done(progress.getvalue()))  # no "/<planned>" for a duration
    assert done >= 1
    assert summary.total == done
    assert _nonzero(summary.streams) == _expected_streams(_jobs(seed, done))


@pytest.mark.parametrize(
    "missing",
    [
        "otelsse_nowhere",  # a library
        "otelsse_nowhere.genai",  # a module of a package that is missing (google.genai's google)
        "json.otelsse_nowhere",  # a missing module of a package that is there
    ],
)
def test_missing_library_names_the_first_client_library_not_installed(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert missing_library() is None
    monkeypatch.setattr("otelsse._demo.run.CLIENT_LIBRARIES", ("httpx", missing, "requests"))
    assert missing_library() == missing


# -- the command line ----------------------------------------------------------------------------


def _otelsse(*argv: str) -> list[str]:
    return [sys.executable, "-m", "otelsse", *argv]


def test_cli_demo_writes_the_summary_it_prints(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    result = subprocess.run(
        _otelsse(
            "demo", "--streams", "10", "--speed", "4", "--seed", "7", "--summary-json", str(path)
        ),
        capture_output=True,
        text=True,
        timeout=MAX_WAIT * 4,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    fields = {field.name for field in dataclasses.fields(Summary)}
    summary = Summary(**{name: document[name] for name in fields})
    assert document["total"] == summary.total == 10
    assert document["truncation_rate"] == summary.truncation_rate
    assert document["failure_rate"] == summary.failure_rate
    printed = io.StringIO()
    print_summary(summary, printed)
    assert printed.getvalue() in result.stdout  # every number printed is the JSON's
    assert _nonzero(summary.streams) == _expected_streams(_jobs(7, 10))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _poll_until_served(process: subprocess.Popen[str], url: str, body: dict[str, Any]) -> str:
    """POST until the provider answers (it is starting up) or the process exits."""
    for _ in range(int(MAX_WAIT / 0.05)):
        try:
            return httpx.post(url, json=body, timeout=MAX_WAIT).raise_for_status().text
        except httpx.ConnectError:
            try:
                process.wait(timeout=0.05)  # a pause between attempts, unless it exited
            except subprocess.TimeoutExpired:
                continue
            break
    raise AssertionError(f"the provider never answered; exit status {process.poll()}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_cli_provider_only_serves_until_sigint_or_sigterm(stop: signal.Signals) -> None:
    # A child inherits an ignored or blocked signal: say so if the test itself is the cause.
    assert signal.getsignal(stop) is not signal.SIG_IGN
    assert stop not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    port = _free_port()
    process = subprocess.Popen(
        _otelsse("demo", "--provider-only", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # On a hang, SIGABRT makes faulthandler print where every thread of the child was.
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        path, body = request_for("openai.chat_completions", "gpt-4o-mini", tools=False)
        text = _poll_until_served(process, f"http://127.0.0.1:{port}{path}", body)
        assert text.endswith("data: [DONE]\n\n")
        process.send_signal(stop)
        try:
            stdout, stderr = process.communicate(timeout=MAX_WAIT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            stdout, stderr = process.communicate(timeout=MAX_WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert f"fake provider at http://127.0.0.1:{port}" in stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--streams", "0"],
        ["--streams", "5", "--duration", "3"],
        ["--duration", "-1"],
        ["--concurrency", "0"],
        ["--speed", "0"],
    ],
)
def test_cli_demo_rejects_invalid_arguments(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", *argv])
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def _exits_at_once(*argv: str) -> str:
    """Run ``otelsse demo ARGV``; assert it exits 2 with one line on stderr; return that line."""
    result = subprocess.run(
        _otelsse("demo", *argv), capture_output=True, text=True, timeout=MAX_WAIT, check=False
    )
    assert result.returncode == 2, result
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("otelsse demo: error: "), line
    return line


@pytest.mark.parametrize(
    "argv",
    [["--provider-only", "--port", "99999"], ["--prometheus-port", "99999"]],
    ids=["port", "prometheus-port"],
)
def test_cli_demo_rejects_a_port_out_of_range(argv: list[str]) -> None:
    line = _exits_at_once(*argv)
    assert line.endswith(f"{argv[-2]} 99999: not a port number (0 to 65535)")


@pytest.mark.parametrize(
    "argv",
    [["--provider-only", "--port"], ["--prometheus-port"]],
    ids=["port", "prometheus-port"],
)
def test_cli_demo_rejects_a_port_in_use(argv: list[str], taken_port: int) -> None:
    line = _exits_at_once(*argv, str(taken_port))
    assert line.endswith(
        f"{argv[-1]} {taken_port}: cannot listen on 127.0.0.1:{taken_port} (Address already in use)"
    )


def test_run_demo_reports_a_metrics_port_taken_at_start(taken_port: int) -> None:
    """Taken after the command line checked it: the demo stops before instrumenting anything."""
    before = _patched_methods()
    options = DemoOptions(streams=1, prometheus_port=taken_port)
    with pytest.raises(ListenError) as raised:
        run_demo(options, out=io.StringIO(), progress=io.StringIO())
    host, port, error = raised.value.args
    assert (host, port, error.strerror) == ("127.0.0.1", taken_port, "Address already in use")
    assert _patched_methods() == before


def test_cli_demo_provider_only_reports_a_port_taken_at_start(
    taken_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken between the check and the start: skip the check to stand for that moment."""
    monkeypatch.setattr("otelsse._cli._port_problem", lambda flag, host, port: None)
    assert main(["demo", "--provider-only", "--port", str(taken_port)]) == 2
    assert capsys.readouterr().err == (
        f"otelsse demo: error: --port {taken_port}: cannot listen on 127.0.0.1:{taken_port}"
        " (Address already in use)\n"
    )


@pytest.mark.parametrize("argv", [["--host", "0.0.0.0"], ["--port", "8400"]])
def test_cli_demo_takes_host_and_port_only_with_provider_only(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *argv]) == 2
    assert capsys.readouterr().err == (
        "otelsse demo: error: --host and --port only apply with --provider-only: the demo's own"
        " fake provider listens on a free port of 127.0.0.1, for the demo's clients only\n"
    )


def test_cli_demo_checks_the_summary_file_before_it_runs(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    for path, why in [
        (tmp_path / "missing" / "summary.json", "No such file or directory"),
        (a_file / "summary.json", "Not a directory"),
    ]:
        line = _exits_at_once("--summary-json", str(path))
        assert line == (
            f"otelsse demo: error: --summary-json {path}: cannot write in {path.parent} ({why})"
        )
    line = _exits_at_once("--summary-json", str(tmp_path))
    assert line == f"otelsse demo: error: --summary-json {tmp_path}: is a directory"
