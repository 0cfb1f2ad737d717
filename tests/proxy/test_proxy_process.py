"""``otelsse proxy`` as a process: its start line, its flags and config file, SIGTERM's drain,
``/metrics`` on its own port, and export (OTLP, the console) by the standard environment
variables."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from otelsse._demo.provider import JOB_HEADER, SCENARIO_HEADER, FakeProvider
from tests._helpers import joined, waited
from tests.sre._otlp import RECEIVERS, Received, http_receiver

from .conftest import MAX_WAIT, wait_for

pytestmark = pytest.mark.e2e  # subprocesses: the proxy as its command line runs it

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o-mini", "stream": True}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: Runs ``otelsse ARGS`` with the soft and hard RLIMIT_NOFILE it is given (a hard limit of -1:
#: the one this process has), as a container's ``nofile`` would start it.
_UNDER_LIMIT = """\
import resource, runpy, sys
soft, hard = int(sys.argv[1]), int(sys.argv[2])
if hard < 0:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
sys.argv = ["otelsse", *sys.argv[3:]]
runpy.run_module("otelsse", run_name="__main__")
"""


def proxy_command(port: int, *flags: str, nofile: tuple[int, int] | None = None) -> list[str]:
    """The command line of ``otelsse proxy`` on ``port``; under ``nofile`` (soft, hard) if given."""
    start = ["-m", "otelsse"] if nofile is None else ["-c", _UNDER_LIMIT, *map(str, nofile)]
    return [sys.executable, *start, "proxy", "--listen", f"127.0.0.1:{port}", *flags]


class _Output:
    """What a process writes to one of its pipes, read as it comes by a thread of its own (a
    pipe nobody reads would stall the process once full)."""

    def __init__(self, pipe: IO[str], name: str) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), name=name, daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        with pipe:
            for line in pipe:
                self.lines.append(line)

    def text(self) -> str:
        """All of it, once the process has ended (its pipe closed)."""
        joined(self._thread, MAX_WAIT)
        return "".join(self.lines)


@dataclasses.dataclass
class ProxyRun:
    """An ``otelsse proxy`` process serving on ``base``, as its start line says."""

    process: subprocess.Popen[str]
    base: str
    start_line: str
    stdout: _Output
    stderr: _Output

    def stop(self) -> int:
        """SIGTERM; its exit status, once it drained and flushed its telemetry."""
        self.process.send_signal(signal.SIGTERM)
        return waited(self.process.wait, MAX_WAIT)


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    """The proxy's environment: this one's, and ``env``. Its telemetry is what a test gives
    it, never ``OTEL_*`` variables the tests happen to run under."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**inherited, **(env or {})}


_LISTENING = re.compile(r"otelsse proxy: listening on (http://127\.0\.0\.1:(\d+));")


@contextlib.contextmanager
def running_proxy(
    *flags: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    nofile: tuple[int, int] | None = None,
) -> Iterator[ProxyRun]:
    """``otelsse proxy`` on ``port`` (a free one by default; 0: the one it picks), under
    ``nofile`` if given, once its start line said where it listens, it listens there itself,
    and ``/healthz`` answers; killed if still running."""
    port = free_port() if port is None else port
    process = subprocess.Popen(
        proxy_command(port, *flags, nofile=nofile),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(env),
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout = _Output(process.stdout, "proxy stdout")
    stderr = _Output(process.stderr, "proxy stderr")
    try:
        wait_for(lambda: stderr.lines or process.poll() is not None, "the start line")
        started = _LISTENING.match(stderr.lines[0]) if stderr.lines else None
        assert started, stderr.lines or stderr.text()  # its error, once it exited
        base, listened = started[1], int(started[2])
        assert port in (0, listened), stderr.lines[0]

        def up() -> bool:
            assert process.poll() is None, stderr.lines
            if not listens(process.pid, listened):  # with --reuse-port another one may answer
                return False
            try:
                return httpx.get(base + "/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, "the proxy process to serve")
        yield ProxyRun(process, base, stderr.lines[0], stdout, stderr)
    finally:
        if process.poll() is None:
            process.kill()
        waited(process.wait, MAX_WAIT)
        stdout.text(), stderr.text()  # both read to their end


@contextlib.contextmanager
def proxy_process(
    *flags: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    nofile: tuple[int, int] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``running_proxy``'s process and base URL."""
    with running_proxy(*flags, env=env, port=port, nofile=nofile) as run:
        yield run.process, run.base


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` has a TCP socket listening on ``port`` (Linux's /proc: the
    listening sockets of the port, and the process's open sockets)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rpartition(":")[2], 16) == port:
                    inodes.add(f"socket:[{inode}]")
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") in inodes:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def spans_in(received: Received) -> list[dict[str, object]]:
    """Every exported span as its name, kind and attributes (plain values)."""
    found = []
    with received.lock:
        requests = list(received.traces)
    for request in requests:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    found.append({"name": span.name, "kind": span.kind, **attributes})
    return found


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


@pytest.fixture(scope="module")
def slow_provider() -> Iterator[FakeProvider]:
    """Answers at the provider's real pace: a stream lasts long enough to be in flight."""
    with FakeProvider("127.0.0.1", 0, seed=3, stall=10.0, speed=1.0) as running:
        yield running


@dataclasses.dataclass
class Drain:
    """A proxy process sent SIGTERM while a stream was in flight."""

    run: ProxyRun
    rest: Iterator[bytes]  # the stream's body after its first chunk
    received: Received  # what the proxy exported over OTLP

    def stream_spans(self) -> list[dict[str, object]]:
        return [s for s in spans_in(self.received) if s["name"] == "otelsse.stream"]

    def exit_status(self) -> int:
        return waited(self.run.process.wait, MAX_WAIT)

    def logged(self) -> list[str]:
        """Its stderr after the start line, once it exited: a drain is no crash, so never an
        ERROR line nor a traceback."""
        lines = self.run.stderr.text().splitlines()[1:]
        assert not any("ERROR" in line or "Traceback" in line for line in lines), lines
        return lines


@contextlib.contextmanager
def sigterm_mid_stream(
    provider: FakeProvider, drain_timeout: str, scenario: str, job: str
) -> Iterator[Drain]:
    with (
        http_receiver() as (endpoint, received),
        running_proxy(
            "--upstream",
            f"fake={provider.base_url}",
            "--drain-timeout",
            drain_timeout,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        ) as run,
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream(
            "POST",
            f"{run.base}/fake{CHAT}",
            json=BODY,
            headers={SCENARIO_HEADER: scenario, JOB_HEADER: job},
        ) as response,
    ):
        chunks = response.iter_raw()
        assert next(chunks)
        run.process.send_signal(signal.SIGTERM)
        yield Drain(run, chunks, received)


def test_sigterm_lets_a_stream_in_flight_finish_then_exits_0(
    slow_provider: FakeProvider,
) -> None:
    with sigterm_mid_stream(slow_provider, "20", "complete", "1") as drain:
        # no new connection is taken once draining
        wait_for(lambda: not _accepts(drain.run.base), "the listener to close")
        rest = b"".join(drain.rest)  # the stream in flight still ends whole
        assert rest.endswith(b"data: [DONE]\n\n")
        assert drain.exit_status() == 0
        assert drain.logged() == []  # a drain that ended in time says nothing
        # flushed before the exit
        assert [s["otelsse.outcome"] for s in drain.stream_spans()] == ["complete"]


def _accepts(base: str) -> bool:
    host, port = base.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def test_past_the_drain_timeout_a_stream_is_cancelled_for_shutdown(
    slow_provider: FakeProvider,
) -> None:
    # "timeout" stalls for 10 s: the drain of 0.5 s runs out first
    with sigterm_mid_stream(slow_provider, "0.5", "timeout", "2") as drain:
        with pytest.raises(httpx.RemoteProtocolError):  # cut, never a clean end
            b"".join(drain.rest)
        assert drain.exit_status() == 0
        # one line says so, as a warning: the drain running out is no error
        assert drain.logged() == [
            "drain_timeout 0.5s ran out: 1 request(s) still in flight cancelled"
            " (otelsse.cancel_reason=shutdown)"
        ]
        (stream,) = drain.stream_spans()
    assert stream["otelsse.outcome"] == "cancelled"
    assert stream["otelsse.cancel_reason"] == "shutdown"


def test_metrics_are_served_on_their_own_port(provider: FakeProvider) -> None:
    metrics_port = free_port()
    with proxy_process(
        "--upstream",
        f"fake={provider.base_url}",
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
    ) as (_, base):
        for scenario in ("complete", "rate_limited"):
            httpx.post(
                f"{base}/fake{CHAT}", json=BODY, headers={SCENARIO_HEADER: scenario}, timeout=30
            )
        scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert httpx.get(f"{base}/metrics").status_code == 404  # not on the clients' port
    outcomes = {
        sample.labels["otelsse_outcome"]: sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == "otelsse_streams_total" and sample.value
    }
    assert outcomes == {"complete": 1.0, "rate_limited": 1.0}


def test_a_config_file_with_flags_over_it(provider: FakeProvider, tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    settings = 'listen = "127.0.0.1:1"\nmax_streams = 7\n'
    config.write_text(f'{settings}\n[upstreams.fake]\nurl = "{provider.base_url}"\n')
    with proxy_process("--config", str(config)) as (_, base):  # --listen wins over the file
        answer = httpx.post(
            f"{base}/fake{CHAT}", json=BODY, headers={SCENARIO_HEADER: "complete"}, timeout=30
        )
        assert answer.status_code == 200


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "no upstream"),
        (["--upstream", "openai"], "expected NAME=URL"),
        (["--upstream", "healthz=http://x"], "upstream name 'healthz'"),
        (["--upstream", "a=http://user:pw@x"], "credentials in the URL"),
        (["--upstream", "a=ftp://x"], "not an http(s) URL"),
        (["--upstream", "a=http://ex\u202eample.com"], "not an http(s) URL"),  # yarl refuses
        (["--upstream", "a=http://x?key=1"], "no query"),
        (["--upstream", "a=http://x", "--upstream", "a=http://y"], "given twice"),
        (["--upstream", "a=http://x", "--listen", "nowhere"], "expected HOST:PORT"),
        (["--config", "/nonexistent/proxy.toml"], "--config /nonexistent/proxy.toml"),
    ],
)
def test_a_setting_it_cannot_start_with_is_one_line_and_exit_2(flags: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otelsse", "proxy", *flags],
        capture_output=True,
        text=True,
        timeout=MAX_WAIT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("otelsse proxy: error: "), done.stderr
    assert says in done.stderr
    assert done.stderr.count("\n") == 1


def test_processes_sharing_a_port_each_serve_and_one_leaving_leaves_the_others(
    provider: FakeProvider,
) -> None:
    port = free_port()
    flags = ("--upstream", f"fake={provider.base_url}", "--reuse-port")
    with contextlib.ExitStack() as stack:
        first, base = stack.enter_context(proxy_process(*flags, port=port))
        second, _ = stack.enter_context(proxy_process(*flags, port=port))

        def answered() -> int:
            with httpx.Client(timeout=30) as client:  # a new connection each time
                return client.post(
                    f"{base}/fake{CHAT}", json=BODY, headers={SCENARIO_HEADER: "complete"}
                ).status_code

        assert [answered() for _ in range(4)] == [200] * 4
        first.send_signal(signal.SIGTERM)
        assert waited(first.wait, MAX_WAIT) == 0
        assert [answered() for _ in range(4)] == [200] * 4  # the other one serves them all
        assert second.poll() is None


def test_each_signal_follows_its_own_variables(provider: FakeProvider) -> None:
    with http_receiver() as (endpoint, received):
        # one endpoint for both, but metrics turned off (a pod whose /metrics is scraped)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_METRICS_EXPORTER": "none"}
        with proxy_process("--upstream", f"fake={provider.base_url}", env=env) as (process, base):
            httpx.post(
                f"{base}/fake{CHAT}", json=BODY, headers={SCENARIO_HEADER: "complete"}, timeout=30
            )
            process.send_signal(signal.SIGTERM)
            assert waited(process.wait, MAX_WAIT) == 0
        assert [s["otelsse.outcome"] for s in spans_in(received) if "otelsse.outcome" in s] == [
            "complete"
        ]
        assert received.metrics == []


# -- the start line, and where telemetry goes -------------------------------------------------

_UNSET = "none (set OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_{}_EXPORTER=console)"


def _telemetry(case: str, endpoint: str) -> tuple[dict[str, str], str, str]:
    """The environment of ``case`` (an OTLP receiver on ``endpoint``), and what the start line
    says of traces and of metrics."""
    if case == "nothing set":
        return {}, _UNSET.format("TRACES"), _UNSET.format("METRICS")
    if case == "console":
        both = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"}
        return both, "console", "console"
    if case == "http/protobuf":  # the default protocol; credentials are never said
        with_credentials = endpoint.replace("http://", "http://user:secret@")
        return (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": with_credentials},
            f"otlp http/protobuf → {endpoint}/v1/traces",
            f"otlp http/protobuf → {endpoint}/v1/metrics",
        )
    # grpc, for traces only: the signal's own variables over the common ones
    return (
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_METRICS_EXPORTER": "none",
        },
        f"otlp grpc → {endpoint}",
        "none",
    )


def _console_documents(text: str) -> list[dict[str, object]]:
    """The JSON documents the console exporters printed, one after another."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


@pytest.mark.parametrize("case", ["nothing set", "console", "http/protobuf", "grpc"])
def test_the_start_line_says_where_it_listens_forwards_and_exports(
    provider: FakeProvider, case: str
) -> None:
    metrics_port = free_port()
    protocol = "grpc" if case == "grpc" else "http/protobuf"
    with RECEIVERS[protocol]() as (endpoint, received):
        env, traces, metrics = _telemetry(case, endpoint)
        with running_proxy(
            "--upstream",
            f"fake={provider.base_url}",
            "--upstream",
            "openai=https://api.openai.com/v1/",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            env=env,
            port=0,  # the line says the port it picked
        ) as run:
            assert run.start_line == (
                f"otelsse proxy: listening on {run.base}; upstreams: fake → {provider.base_url}, "
                f"openai → https://api.openai.com/v1; "
                f"/metrics: http://127.0.0.1:{metrics_port}/metrics; "
                f"traces: {traces}; metrics: {metrics}\n"
            )
            # each address it names is served there
            scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert scrape.status_code == 200
            answer = httpx.post(
                f"{run.base}/fake{CHAT}", json=BODY, headers={SCENARIO_HEADER: "complete"}
            )
            assert answer.status_code == 200
            assert run.stop() == 0
            # the telemetry went where the line said, and only there
            printed = _console_documents(run.stdout.text())
            assert run.stderr.text() == run.start_line
    exported = [s for s in spans_in(received) if s["name"] == "otelsse.stream"]
    if case == "console":
        (span,) = [d for d in printed if d.get("name") == "otelsse.stream"]
        assert span["attributes"]["otelsse.outcome"] == "complete"  # type: ignore[index]
        assert any("resource_metrics" in document for document in printed)
        assert exported == []
    else:
        assert printed == []
        outcomes = [s["otelsse.outcome"] for s in exported]
        assert outcomes == ([] if case == "nothing set" else ["complete"])
        assert bool(received.metrics) == (case == "http/protobuf")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER 'zipkin': "),
        ({"OTEL_METRICS_EXPORTER": "console,prometheus"}, "--metrics-listen"),
        ({"OTEL_TRACES_EXPORTER": "console,none"}, "none goes alone"),
        (
            {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL 'http/json': ",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
            "OTEL_EXPORTER_OTLP_ENDPOINT 'collector:4318': expected an http(s) URL",
        ),
    ],
    ids=["zipkin", "prometheus", "none-in-a-list", "http/json", "no-scheme"],
)
def test_telemetry_it_cannot_export_with_is_one_line_and_exit_2(
    env: dict[str, str], says: str
) -> None:
    done = subprocess.run(
        proxy_command(free_port(), "--upstream", "a=http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=MAX_WAIT,
        check=False,
        env=_environment(env),
    )
    assert done.returncode == 2
    assert done.stderr.startswith("otelsse proxy: error: "), done.stderr
    assert says in done.stderr
    assert done.stderr.count("\n") == 1
