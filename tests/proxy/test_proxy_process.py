"""``otelsse proxy`` as a process: its flags and config file, SIGTERM's drain, ``/metrics`` on
its own port and OTLP export by the standard environment variables."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from otelsse._demo.provider import JOB_HEADER, SCENARIO_HEADER, FakeProvider
from tests._helpers import waited
from tests.sre._otlp import Received, http_receiver

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


@contextlib.contextmanager
def proxy_process(
    *flags: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    nofile: tuple[int, int] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``otelsse proxy`` on ``port`` (a free one by default), under ``nofile`` if given, once
    it listens there itself and ``/healthz`` answers; killed if still running."""
    port = port or free_port()
    process = subprocess.Popen(
        proxy_command(port, *flags, nofile=nofile),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, process.communicate()
        if not listens(process.pid, port):  # with --reuse-port another one may answer
            return False
        try:
            return httpx.get(base + "/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, "the proxy process to serve")
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=MAX_WAIT)


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

    process: subprocess.Popen[str]
    base: str
    rest: Iterator[bytes]  # the stream's body after its first chunk
    received: Received  # what the proxy exported over OTLP

    def stream_spans(self) -> list[dict[str, object]]:
        return [s for s in spans_in(self.received) if s["name"] == "otelsse.stream"]


@contextlib.contextmanager
def sigterm_mid_stream(
    provider: FakeProvider, drain_timeout: str, scenario: str, job: str
) -> Iterator[Drain]:
    with (
        http_receiver() as (endpoint, received),
        proxy_process(
            "--upstream",
            f"fake={provider.base_url}",
            "--drain-timeout",
            drain_timeout,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        ) as (process, base),
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream(
            "POST",
            f"{base}/fake{CHAT}",
            json=BODY,
            headers={SCENARIO_HEADER: scenario, JOB_HEADER: job},
        ) as response,
    ):
        chunks = response.iter_raw()
        assert next(chunks)
        process.send_signal(signal.SIGTERM)
        yield Drain(process, base, chunks, received)


def test_sigterm_lets_a_stream_in_flight_finish_then_exits_0(
    slow_provider: FakeProvider,
) -> None:
    with sigterm_mid_stream(slow_provider, "20", "complete", "1") as drain:
        # no new connection is taken once draining
        wait_for(lambda: not _accepts(drain.base), "the listener to close")
        rest = b"".join(drain.rest)  # the stream in flight still ends whole
        assert rest.endswith(b"data: [DONE]\n\n")
        assert waited(drain.process.wait, MAX_WAIT) == 0
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
        assert waited(drain.process.wait, MAX_WAIT) == 0
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
