"""``otelsse demo`` as a process: its first line, how a signal stops it, a dead OTLP endpoint.

Each test runs ``python -m otelsse demo`` with its stdout and stderr in one pipe, so its lines
arrive in the order it wrote them, and reads them as they come.

1. The first line says what is starting (how many streams, how many at a time, the fake
   provider's address, the clients) and comes before any stream's result (a progress line).
2. SIGINT or SIGTERM stops the demo cleanly, exit status 0 and no traceback, wherever it lands:
   - the moment "metrics stay up ...; Ctrl-C to stop" appears, the earliest a user can answer
     it. A signal there once raised KeyboardInterrupt outside the ``try`` meant for it in some
     of the tries (a race), so each signal is sent there ``ATTEMPTS`` times, on runs whose one
     stream needs no SDK (about a second each);
   - the moment the first line appears, in the set-up (importing an SDK): the summary follows,
     and the metrics are not held up for scraping;
   - while streams run (``--duration inf``, which only a signal ends): the streams running
     finish, and the last progress line counts as many streams as the summary.
3. An ``--otlp-endpoint`` where nothing listens (a closed port of 127.0.0.1), over gRPC and over
   HTTP: the run completes well before its bound; one line says that the endpoint is
   unreachable, and nothing of the exporters' own is shown; the pace line's time (the summary
   JSON's ``elapsed``) is the streams' own: no longer than from the first line to the last
   progress line, between which the demo sets up and streams, and after which it exports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from otelsse._demo.run import Summary, plan, print_summary
from tests._helpers import WELL_BEFORE
from tests._server import MAX_WAIT
from tests.sre._e2e import free_port

pytestmark = pytest.mark.e2e  # the demo, run as a user runs it

#: Seconds each demo process gets, from its start to its exit; each ends well before. Twice
#: the servers' bound: a run of every client imports and builds every SDK first (openai's,
#: anthropic's and boto3's about 7 s of a loaded machine's 2 cores; cohere's and google-genai's
#: nearly as much again, measured), and still ends its streams after the signal.
BOUND = 2 * MAX_WAIT
#: Tries of each signal at the "Ctrl-C to stop" line (before the fix, about half failed).
ATTEMPTS = 4
#: The SDK clients: importing one and building its models is the slow part of the set-up.
SDKS = ("openai", "anthropic", "cohere", "genai")
#: Every client with a set-up: boto3's session loads its service model too (under a second).
SET_UP = (*SDKS, "boto3")
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
#: A progress line: the streams done so far, and their outcomes.
PROGRESS = re.compile(r"  \d+(/\d+)? streams\b")
CLIENTS = "the openai, anthropic, cohere and google-genai SDKs, boto3, httpx, httpx2 and requests"
SPEED = "(--speed 4: the fake provider's waits divided by 4)"


def _seed(streams: int, *, sdk: bool) -> int:
    """A seed whose first ``streams`` jobs include an SDK's client (seconds of set-up to do),
    or no client with any set-up."""
    for seed in itertools.count():
        clients = [job.client for job in itertools.islice(plan(seed), streams)]
        found = any(client.startswith(SDKS if sdk else SET_UP) for client in clients)
        if found == sdk:
            return seed
    raise AssertionError("not reached: the plan is endless")


@dataclasses.dataclass
class Demo:
    """A running demo: its lines so far, and when each arrived."""

    process: subprocess.Popen[str]
    began: float
    lines: list[str] = dataclasses.field(default_factory=list)
    arrived: list[float] = dataclasses.field(default_factory=list)

    def _read(self) -> Iterator[str]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self.arrived.append(time.monotonic())
            yield self.lines[-1]

    def read_until(self, wanted: Callable[[str], object], what: str) -> str:
        """Read up to the first line ``wanted`` accepts, and return it."""
        for line in self._read():
            if wanted(line):
                return line
        raise AssertionError(f"no {what}; exit status {self.process.wait()}: {self.lines}")

    def finish(self) -> int:
        """Read to the end; the exit status, well before the bound."""
        for _ in self._read():
            pass
        status = self.process.wait()
        took = time.monotonic() - self.began
        assert took < BOUND * WELL_BEFORE, f"the demo took {took:.1f} s of its {BOUND} s bound"
        assert not any(line.startswith("Traceback") for line in self.lines), self.output
        return status

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def send(self, number: int) -> None:
        self.process.send_signal(number)


@contextlib.contextmanager
def _demo(*arguments: str) -> Iterator[Demo]:
    """``python -m otelsse demo ARGUMENTS``, aborted if it is still running at the bound."""
    process = subprocess.Popen(
        [sys.executable, "-m", "otelsse", "demo", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # SIGABRT makes faulthandler print where every thread of the demo was.
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    # The bound of every read: aborting the demo ends its output.
    watchdog = threading.Timer(BOUND, process.send_signal, (signal.SIGABRT,))
    watchdog.start()
    try:
        yield Demo(process, time.monotonic())
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
        process.communicate()


def _banner(amount: str) -> re.Pattern[str]:
    return re.compile(
        rf"otelsse demo: {amount}, 4 at a time, from a fake provider at http://127\.0\.0\.1:\d+"
        rf" with {re.escape(CLIENTS)}, instrumented by otelsse {re.escape(SPEED)}"
    )


def _printed(summary_file: Path) -> list[str]:
    """The summary's lines as the demo prints them, from the JSON it wrote."""
    document = json.loads(summary_file.read_text())
    summary = Summary(**{field.name: document[field.name] for field in dataclasses.fields(Summary)})
    out = io.StringIO()
    print_summary(summary, out)
    return out.getvalue().splitlines()


# -- the first line --------------------------------------------------------------------------


def test_the_first_line_says_what_starts_before_any_stream_result() -> None:
    with _demo("--streams", "2", "--speed", "4", "--seed", str(_seed(2, sdk=False))) as demo:
        demo.read_until(PROGRESS.match, "progress line")
        assert demo.finish() == 0
    first, *_ = demo.lines
    assert _banner("2 streams").fullmatch(first), first
    assert PROGRESS.match(demo.lines[1]), demo.lines


# -- signals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(ATTEMPTS))
@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_as_the_metrics_stay_up_stops_the_demo_cleanly(name: str, attempt: int) -> None:
    seed = _seed(1, sdk=False)
    with _demo(
        "--streams", "1", "--speed", "4", "--seed", str(seed), "--prometheus-port", "0"
    ) as demo:
        line = demo.read_until(lambda line: line.endswith("Ctrl-C to stop"), "Ctrl-C line")
        demo.send(SIGNALS[name])  # at once: the race was right after the line
        status = demo.finish()
    assert re.fullmatch(r"metrics stay up at http://127\.0\.0\.1:\d+/metrics; Ctrl-C to stop", line)
    assert (status, demo.lines[-1]) == (0, line), demo.lines  # nothing after it


@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_in_the_set_up_stops_the_demo_with_its_summary(name: str) -> None:
    seed = _seed(1, sdk=True)
    with _demo(
        "--streams", "1", "--speed", "4", "--seed", str(seed), "--prometheus-port", "0"
    ) as demo:
        demo.read_until(_banner("1 stream").fullmatch, "first line")
        demo.send(SIGNALS[name])
        status = demo.finish()
    assert status == 0, demo.lines
    # The summary ends the output: the metrics are not held up for scraping.
    assert demo.lines[-1].startswith("in short "), demo.lines


def test_sigterm_while_streams_run_ends_the_demo_with_its_summary(tmp_path: Path) -> None:
    summary_file = tmp_path / "summary.json"
    arguments = ("--duration", "inf", "--speed", "4", "--summary-json", str(summary_file))
    with _demo(*arguments, "--prometheus-port", "0") as demo:
        demo.read_until(PROGRESS.match, "progress line")
        demo.send(signal.SIGTERM)
        status = demo.finish()
    assert status == 0, demo.lines
    printed = _printed(summary_file)
    assert demo.lines[-len(printed) :] == printed  # the summary ends the output
    final = [line for line in demo.lines if PROGRESS.match(line)][-1]
    assert final.split()[0] == str(json.loads(summary_file.read_text())["total"])


# -- an OTLP endpoint nothing listens on -----------------------------------------------------


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_unreachable_otlp_endpoint_is_said_once_and_costs_the_streams_nothing(
    protocol: str, tmp_path: Path
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # bound and closed: nothing listens there
    summary_file = tmp_path / "summary.json"
    # SDK clients: a set-up of seconds between the first line and the first stream.
    seed = _seed(4, sdk=True)
    with _demo(
        *("--streams", "4", "--speed", "4", "--seed", str(seed)),
        *("--otlp-endpoint", endpoint, "--otlp-protocol", protocol),
        *("--summary-json", str(summary_file)),
    ) as demo:
        assert demo.finish() == 0, demo.lines
    unreachable = (
        f"OTLP ({protocol}): {endpoint} is unreachable (an export failed); the run goes on, and"
        " further export errors are not shown"
    )
    assert demo.lines.count(unreachable) == 1, demo.lines
    # Every other line is the demo's own: no warning of the exporters'.
    first, *rest = [line for line in demo.lines if line != unreachable and not PROGRESS.match(line)]
    assert _banner("4 streams").fullmatch(first), first
    printed = _printed(summary_file)
    assert rest == [f"OTLP ({protocol}): {endpoint}", *printed]
    # The pace: the streams' time, which the last progress line ends, and no export's.
    last = max(i for i, line in enumerate(demo.lines) if PROGRESS.match(line))
    elapsed = json.loads(summary_file.read_text())["elapsed"]
    assert elapsed <= demo.arrived[last] - demo.arrived[0], demo.lines
