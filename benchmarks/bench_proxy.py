"""What ``otelsse proxy`` adds to a stream: latency per event, CPU per event, memory per stream.

Run from the repository root::

    python benchmarks/bench_proxy.py            # full run, about 9.5 minutes on 2 cores
    python benchmarks/bench_proxy.py --quick    # about 3 minutes, shorter streams, noisier
    python benchmarks/bench_proxy.py --json out.json   # the figures as JSON too

Every party is its own process on 127.0.0.1, so none competes with another for a GIL:

- the upstream (this file with ``--upstream-server``): a minimal HTTP/1.1 server (uvloop,
  httptools' request parser, raw stream writes) answering
  ``POST /v1/chat/completions?events=N&rate=R`` with an OpenAI chat stream of N events (role
  chunk, text deltas, finish chunk, ``data: [DONE]``; the token text of
  ``bench_instrumentation.openai_body``), one HTTP chunk per event, paced at R events/s per
  stream (0: as fast as the socket takes them). Each JSON event carries, as its last field,
  ``"sent_ns"``: ``time.monotonic_ns()`` read just before the upstream wrote it (Linux's
  monotonic clock is system-wide, so it compares across processes);
- the servers compared, each a subprocess reached at ``/bench/...``: ``otelsse proxy`` itself
  (``python -m otelsse proxy``: uvicorn + httptools + uvloop serving ``ProxyApp``, aiohttp
  forwarding; no OTEL_* variables, so spans and metrics go to SDK providers without an
  exporter: every span and measurement is still made), and three bare pass-throughs written
  here (this file with ``--serve ENGINE``) that forward status, headers and chunks and observe
  nothing: the floor (the proxy's engine: uvicorn + httptools + uvloop, an aiohttp session
  configured as the proxy's), aiohttp.web + aiohttp (on uvloop), and uvicorn + httpx
  (``aiter_raw``);
- the load generator (this file with ``--load``): aiohttp on uvloop, opening N concurrent
  streams through the server, started at seeded random times within a ramp (so that their
  pacing phases are independent), and N twin streams straight to the upstream at the same
  time, each half a pacing interval after its twin. Per event it records arrival time -
  ``sent_ns``; added latency = through - direct of the same run, per percentile, so that both
  sides see the same machine at the same moment. Latency counts the steady state: events sent
  from 0.5 s after every stream has its first event until the first stream ends (no connection
  being set up). Every stream is checked: every event, ``[DONE]``, nothing left over.

The upstream and the load generator run with the garbage collector off (the upstream collects
when it has no connection): their pauses would read as the server's latency. The servers keep
theirs. This machine's cores are shared by all three (and by anything else running): 1,000
streams at 50 events/s each (50,000 events/s) is more than one core of any of these servers
relays, so the 1,000-stream run paces 5 events/s per stream (5,000 events/s, as 100 x 50/s)
with shorter streams; it measures holding 1,000 streams open, the 100-stream run the rate.

CPU per event is the server process's utime + stime (``/proc/PID/stat``, all threads) over the
run, divided by the events the load generator received through it. Memory per open stream is
the server's ``VmRSS`` (``/proc/PID/status``) with 1,000 streams open at 0.5 events/s (each
has read 2 events), minus its RSS before they were opened (a fresh process, warmed by 10
streams), divided by 1,000. The streams one core holds at 50 events/s each is computed, not
loaded: 1 s / (CPU per event at 100 streams x 50).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure the working tree's otelsse, as PYTHONPATH=. does

from _child import serving_child  # noqa: E402
from bench_parsers import SEED, _version, git_revision  # noqa: E402

from otelsse.proxy._app import HOP_BY_HOP  # noqa: E402  the floor drops what the proxy drops

EVENTS = 2000  # a full stream: role chunk, 1,997 deltas, finish chunk, [DONE]
US = "\u00b5s"  # micro sign, spelled out so the source stays ASCII
# Latency counts the events sent from SETTLE_S after every stream has its first event until the
# first stream ends: all N streams are open, none is being set up.
SETTLE_S = 0.5
STAMP = b',"sent_ns":'
REQUEST = {
    "model": "gpt-4.1-2025-04-14",
    "messages": [{"role": "user", "content": "Write a long answer."}],
    "stream": True,
}
# Headers an HTTP client adds when the request lacks them: the client's request stays its own.
AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")

# ---------------------------------------------------------------------------------------------
# The upstream: a cheap paced SSE server (child process)
# ---------------------------------------------------------------------------------------------


class _Stamped:
    """The events of an N-event stream, split where the upstream writes its send time."""

    def __init__(self) -> None:
        self._bodies: dict[int, tuple[bytes | None, ...]] = {}
        self.connections = 0  # open now

    def events(self, n: int) -> tuple[bytes | None, ...]:
        """Each JSON event without its closing ``}`` + blank line, ending in ``,"sent_ns":``;
        None for ``data: [DONE]``."""
        if n not in self._bodies:
            from bench_instrumentation import openai_body

            events = openai_body(max(n - 3, 0)).events
            assert all(e.endswith(b"}\n\n") for e in events[:-1])
            assert events[-1] == _DONE
            self._bodies[n] = (*(e[:-3] + STAMP for e in events[:-1]), None)
        return self._bodies[n]


class _Request:
    """httptools' callbacks for one request: the target and whether it is complete."""

    def __init__(self) -> None:
        self.url = b""
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        self.complete = True


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\nx-request-id: req_bench\r\ntransfer-encoding: chunked\r\n\r\n"
)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
_DONE = b"data: [DONE]\n\n"


async def _upstream_connection(
    stamped: _Stamped, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    import httptools

    loop = asyncio.get_running_loop()
    stamped.connections += 1
    try:
        while True:
            request = _Request()
            parser = httptools.HttpRequestParser(request)
            while not request.complete:
                data = await reader.read(65536)
                if not data:
                    return
                parser.feed_data(data)
            path, _, query = request.url.decode("latin-1").partition("?")
            if path != "/v1/chat/completions":
                writer.write(_NOT_FOUND)
                continue
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            events = stamped.events(int(params.get("events", EVENTS)))
            rate = float(params.get("rate", 0))
            writer.write(_SSE_HEAD)
            start = loop.time()
            for i, prefix in enumerate(events):
                if rate:
                    delay = start + i / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if writer.transport.is_closing():
                    return  # the client left: nothing reads this stream any more
                # The send time is read last, just before the write.
                stamp = b"%b%d}\n\n" % (prefix, time.monotonic_ns()) if prefix else _DONE
                writer.write(b"%x\r\n%b\r\n" % (len(stamp), stamp))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return  # the client left mid-stream
    except asyncio.CancelledError:
        return  # the benchmark is over: streams still paced out to a stopped server end here
    finally:
        writer.close()
        stamped.connections -= 1
        if not stamped.connections:
            gc.collect()  # between runs: the collector is off so that no run sees its pauses


async def _serve_upstream() -> None:
    stamped = _Stamped()
    stamped.events(EVENTS)
    server = await asyncio.start_server(
        lambda r, w: _upstream_connection(stamped, r, w), "127.0.0.1", 0, backlog=4096
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    # Serve until the parent closes our stdin (or dies): no orphan outlives the benchmark.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    server.close()


# ---------------------------------------------------------------------------------------------
# Bare pass-throughs: forward, observe nothing (child processes)
# ---------------------------------------------------------------------------------------------


def _split_target(raw_path: bytes) -> tuple[bytes, bytes]:
    """``/NAME/rest`` as (NAME, ``/rest``)."""
    _, _, rest = raw_path.partition(b"/")
    name, _, rest = rest.partition(b"/")
    return name, b"/" + rest


def _request_headers(raw: Any) -> list[tuple[str, str]]:
    return [
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k.lower() not in HOP_BY_HOP
    ]


def _skipped(headers: list[tuple[str, str]]) -> list[str]:
    sent = {name.lower() for name, _ in headers}
    return [name for name in AUTO_HEADERS if name.lower() not in sent]


def _aiohttp_session() -> Any:
    """Configured as ``ProxyApp`` configures its session."""
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60),
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=120),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )


class _AsgiPassThrough:
    """An ASGI app forwarding ``/NAME/...`` to the upstream with aiohttp or httpx."""

    def __init__(self, upstream: str, client: str) -> None:
        self.upstream = upstream
        self.client = client
        self.session: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    if self.client == "aiohttp":
                        self.session = _aiohttp_session()
                    else:
                        import httpx

                        self.session = httpx.AsyncClient(
                            limits=httpx.Limits(
                                max_connections=None, max_keepalive_connections=None
                            ),
                            timeout=httpx.Timeout(10, read=120, pool=None),
                            trust_env=False,
                        )
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await (
                        self.session.close() if self.client == "aiohttp" else self.session.aclose()
                    )
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        name, rest = _split_target(scope.get("raw_path") or scope["path"].encode("latin-1"))
        if name == b"healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        query = scope.get("query_string", b"")
        url = self.upstream + (rest + (b"?" + query if query else b"")).decode("latin-1")
        headers = _request_headers(scope["headers"])
        # The client leaving cancels the relay, as a real proxy must (else it reads on).
        relay, left = asyncio.current_task(), False

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            assert relay is not None
            relay.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            if self.client == "aiohttp":
                await self._relay_aiohttp(scope["method"], url, headers, body, send)
            else:
                await self._relay_httpx(scope["method"], url, headers, body, send)
        except asyncio.CancelledError:
            if not left:
                raise
            assert relay is not None
            relay.uncancel()
        finally:
            watcher.cancel()

    async def _relay_aiohttp(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes, send: Any
    ) -> None:
        from yarl import URL

        async with self.session.request(
            method,
            URL(url, encoded=True),
            headers=headers,
            data=body or None,
            allow_redirects=False,
            skip_auto_headers=_skipped(headers),
        ) as response:
            head = [(k, v) for k, v in response.raw_headers if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status, "headers": head})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay_httpx(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes, send: Any
    ) -> None:
        request = self.session.build_request(method, url, headers=headers, content=body or None)
        response = await self.session.send(request, stream=True)
        try:
            head = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": head}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _serve_uvicorn(app: Any, host: str, port: int) -> None:
    """uvicorn with the settings ``otelsse.proxy`` runs it with."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        server_header=False,
        date_header=False,
        log_level="warning",
    )


def _serve_aiohttp_web(upstream: str, host: str, port: int) -> None:
    import aiohttp
    import uvloop
    from aiohttp import web
    from yarl import URL

    async def forward(request: web.Request) -> web.StreamResponse:
        name, rest = _split_target(request.raw_path.encode("latin-1"))
        if name == b"healthz":
            return web.Response(text="ok")
        body = await request.read()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        headers = [(k, v) for k, v in headers if k.lower().encode() not in HOP_BY_HOP]
        async with sessions[0].request(
            request.method,
            URL(upstream + rest.decode("latin-1"), encoded=True),
            headers=headers,
            data=body or None,
            allow_redirects=False,
            skip_auto_headers=_skipped(headers),
        ) as upstream_response:
            response = web.StreamResponse(status=upstream_response.status)
            for k, v in upstream_response.raw_headers:
                if k.lower() not in HOP_BY_HOP:
                    response.headers.add(k.decode("latin-1"), v.decode("latin-1"))
            await response.prepare(request)
            try:
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                return response  # the client left
            await response.write_eof()
            return response

    sessions: list[Any] = []

    async def session_context(app: web.Application) -> Any:
        sessions.append(_aiohttp_session())
        yield
        await sessions[0].close()

    app = web.Application()
    app.cleanup_ctx.append(session_context)
    app.router.add_route("*", "/{tail:.*}", forward)
    web.run_app(
        app, host=host, port=port, access_log=None, print=None, loop=uvloop.new_event_loop()
    )


ENGINES = {
    "floor": "uvicorn + httptools + uvloop, aiohttp client",
    "aiohttp-web": "aiohttp.web server (uvloop), aiohttp client",
    "uvicorn-httpx": "uvicorn + httptools + uvloop, httpx client (aiter_raw)",
}


def _serve_pass_through(engine: str, listen: str, upstream: str) -> None:
    host, _, port = listen.rpartition(":")
    if engine == "floor":
        _serve_uvicorn(_AsgiPassThrough(upstream, "aiohttp"), host, int(port))
    elif engine == "uvicorn-httpx":
        _serve_uvicorn(_AsgiPassThrough(upstream, "httpx"), host, int(port))
    else:
        _serve_aiohttp_web(upstream, host, int(port))


# ---------------------------------------------------------------------------------------------
# The load generator (child process)
# ---------------------------------------------------------------------------------------------


def _percentile(ordered: list[int], q: float) -> float:
    """Nearest rank, in microseconds."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


class _Side:
    """What the streams to one URL received: events, reads, latencies, errors."""

    def __init__(self, url: str, streams: int, expected: int) -> None:
        self.url = url
        self.streams = streams
        self.expected = expected
        self.sent = array("q")  # sent_ns of each timed event
        self.latencies = array("q")  # its arrival - sent_ns
        self.events = self.reads = self.held = 0
        self.errors: list[str] = []

    def summary(self, start: int, end: int) -> dict[str, Any]:
        """Latencies of the events sent from ``start`` to ``end`` (ns): the steady state."""
        ordered = sorted(
            x for t, x in zip(self.sent, self.latencies, strict=True) if start <= t <= end
        )
        out: dict[str, Any] = {
            "streams": self.streams,
            "events": self.events,
            "expected_events": self.expected,
            "reads": self.reads,
            "timed_events": len(ordered),
            "errors": len(self.errors),
            "error_samples": self.errors[:5],
        }
        if ordered:
            out["latency_us"] = {
                "p50": _percentile(ordered, 0.50),
                "p90": _percentile(ordered, 0.90),
                "p99": _percentile(ordered, 0.99),
                "p999": _percentile(ordered, 0.999),
                "max": ordered[-1] / 1000,
                "mean": sum(ordered) / len(ordered) / 1000,
            }
        return out


async def _load(
    url: str, baseline: str | None, streams: int, events: int, rate: float, ramp: float, hold: int
) -> None:
    """N streams to ``url`` and, with ``baseline``, N more at the same time straight to the
    upstream, each half a pacing interval after its twin; prints ``ready``, starts at ``go``,
    prints the summary as one JSON line.

    With ``hold``, every stream stops reading after ``hold`` events and stays open: ``open`` is
    printed once all are there, and they close at the next line on stdin."""
    import aiohttp

    loop = asyncio.get_running_loop()
    query = f"/v1/chat/completions?events={events}&rate={rate:g}"
    body = json.dumps(REQUEST).encode()
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": "Bearer sk-bench",
    }
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
        auto_decompress=False,
    )
    expected = streams * (hold or events)
    sides = [_Side(url, streams, expected)]
    if baseline is not None:
        sides.append(_Side(baseline, streams, expected))
    all_held, release = asyncio.Event(), asyncio.Event()
    # The steady state: from when every stream has its first event to when the first one ends.
    window = {"open": 0, "end": 2**63 - 1}

    async def one(side: _Side, delay: float) -> None:
        await asyncio.sleep(delay)
        got, done, pending = 0, False, b""
        sent, latencies = side.sent, side.latencies
        async with session.post(side.url + query, data=body, headers=headers) as response:
            if response.status != 200:
                side.errors.append(f"status {response.status}")
                return
            async for chunk in response.content.iter_any():
                now = time.monotonic_ns()
                side.reads += 1
                *complete, pending = (pending + chunk).split(b"\n\n")
                for event in complete:
                    got += 1
                    mark = event.rfind(STAMP)
                    if mark >= 0:
                        stamp = int(event[mark + len(STAMP) : -1])
                        sent.append(stamp)
                        latencies.append(now - stamp)
                        if got == 1:
                            window["open"] = max(window["open"], now)
                    elif event == b"data: [DONE]":
                        done = True
                        window["end"] = min(window["end"], now)
                if hold and got >= hold:
                    side.events += got
                    side.held += 1
                    if sum(s.held for s in sides) == streams * len(sides):
                        all_held.set()
                    await release.wait()
                    return  # leaving the block closes the connection mid-stream
        side.events += got
        if got != events or not done or pending:
            side.errors.append(f"{got} events of {events}, [DONE] {done}, {len(pending)} B left")

    readline = lambda: loop.run_in_executor(None, sys.stdin.readline)  # noqa: E731
    print("ready", flush=True)
    await readline()
    started = time.monotonic()
    # Seeded random starts within the ramp: the streams' pacing phases are independent, as real
    # streams' are (evenly spaced starts would fire many streams in the same instant). A twin
    # starts half a pacing interval after its stream.
    rng = random.Random(SEED)
    offset = 0.5 / rate if rate else 0.0
    starts = [rng.uniform(0, ramp) for _ in range(streams)]
    tasks = [
        asyncio.ensure_future(one(side, start + i * offset))
        for start in starts
        for i, side in enumerate(sides)
    ]
    if hold:
        waiting = asyncio.ensure_future(all_held.wait())
        finished = asyncio.ensure_future(asyncio.gather(*tasks, return_exceptions=True))
        await asyncio.wait([waiting, finished], return_when=asyncio.FIRST_COMPLETED)
        print("open" if all_held.is_set() else "failed", flush=True)
        await readline()
        release.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.monotonic() - started
    for n, outcome in enumerate(outcomes):
        if isinstance(outcome, BaseException):
            sides[n % len(sides)].errors.append(f"{type(outcome).__name__}: {outcome}")
    await session.close()
    start = window["open"] + int(SETTLE_S * 1e9)
    if start >= window["end"]:  # too short to have a steady state: every event counts
        start, window["end"] = 0, 2**63 - 1
    summary: dict[str, Any] = {
        "wall_s": wall,
        "window_s": (window["end"] - start) / 1e9 if start else None,
    }
    summary["through"] = sides[0].summary(start, window["end"])
    if baseline is not None:
        summary["direct"] = sides[1].summary(start, window["end"])
    print(json.dumps(summary), flush=True)


# ---------------------------------------------------------------------------------------------
# The orchestrator: processes, /proc readings
# ---------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of proc(5)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    """The environment without OTEL_* settings (no exporter: the SDK still records everything)
    and with the working tree first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    return env


def stop(child: subprocess.Popen[Any]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextlib.contextmanager
def upstream_process() -> Iterator[tuple[str, int]]:
    command = [sys.executable, __file__, "--upstream-server"]
    with serving_child(command, child_env()) as (port, pid):
        yield f"http://127.0.0.1:{port}", pid


@dataclass
class Server:
    key: str
    label: str
    engine: str
    process: subprocess.Popen[Any] | None = None
    url: str = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, upstream: str, *extra: str) -> None:
        port = free_port()
        if self.key == "proxy":
            argv = [
                sys.executable, "-m", "otelsse", "proxy", "--upstream", f"bench={upstream}",
                "--listen", f"127.0.0.1:{port}", "--max-streams", "5000", "--idle-timeout", "120",
                *extra,
            ]  # fmt: skip
        else:
            argv = [sys.executable, __file__, "--serve", self.key]
            argv += ["--listen", f"127.0.0.1:{port}", "--upstream", upstream]
        self.process = subprocess.Popen(argv, env=child_env(), cwd=ROOT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.process.returncode}: {argv}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label} did not answer /healthz within 60 s")
            time.sleep(0.1)
        self.url = f"{base}/bench"

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None


def servers() -> list[Server]:
    return [
        Server("proxy", "otelsse proxy", "uvicorn + httptools + uvloop, aiohttp client; observing"),
        *(Server(key, f"pass-through {key}", engine) for key, engine in ENGINES.items()),
    ]


@dataclass(frozen=True)
class Level:
    key: str
    streams: int
    events: int
    rate: float  # events/s per stream; 0 = as fast as possible
    ramp: float  # stream starts spread evenly over this many seconds

    @property
    def label(self) -> str:
        pace = f"{self.rate:g}/s" if self.rate else "unpaced"
        return f"{self.streams:,} x {self.events:,} ev @ {pace}"


def levels(quick: bool) -> list[Level]:
    """1, 100 and 1,000 concurrent streams paced; an unpaced run for throughput; many short
    streams for what a stream costs besides its events (set-up and teardown)."""
    if quick:
        return [
            Level("1", 1, 500, 50, 0),
            Level("100", 100, 300, 50, 1.0),
            Level("1000", 1000, 50, 5, 2.0),
            Level("unpaced", 20, EVENTS, 0, 0),
            Level(SHORT, 300, 10, 0, 2.0),
        ]
    return [
        Level("1", 1, EVENTS, 50, 0),
        Level("100", 100, EVENTS, 50, 1.0),
        Level("1000", 1000, 200, 5, 2.0),
        Level("unpaced", 50, EVENTS, 0, 0),
        Level(SHORT, 500, 10, 0, 2.0),
    ]


SHORT = "short"


# The streams held open for the memory figure: slowly paced, all streaming.
MEMORY_STREAMS, MEMORY_RATE, MEMORY_HOLD = 1000, 0.5, 2


@dataclass
class Run:
    level: Level
    server: str
    through: dict[str, Any]  # the load generator's summary of the streams through the server
    direct: dict[str, Any]  # ... and of their twins straight to the upstream
    server_cpu_s: float
    upstream_cpu_s: float
    loadgen_cpu_s: float
    wall_s: float

    @property
    def events(self) -> int:
        return int(self.through["events"])

    @property
    def cpu_us_per_event(self) -> float:
        return self.server_cpu_s / self.events * 1e6

    def latency(self, q: str, side: str = "through") -> float | None:
        if not self.level.rate:
            return None  # unpaced: the figure is queueing, not latency
        summary = self.through if side == "through" else self.direct
        return float(summary["latency_us"][q])

    def added(self, q: str) -> float | None:
        through, direct = self.latency(q), self.latency(q, "direct")
        return None if through is None or direct is None else through - direct

    def to_json(self) -> dict[str, Any]:
        return {
            "level": asdict(self.level),
            "server": self.server,
            "through": self.through,
            "direct": self.direct,
            "server_cpu_s": self.server_cpu_s,
            "upstream_cpu_s": self.upstream_cpu_s,
            "loadgen_cpu_s": self.loadgen_cpu_s,
            "wall_s": self.wall_s,
            "cpu_us_per_event": self.cpu_us_per_event,
            "added_p50_us": self.added("p50"),
            "added_p99_us": self.added("p99"),
        }


def load_process(
    url: str, level: Level, baseline: str | None = None, hold: int = 0
) -> subprocess.Popen[str]:
    argv = [
        sys.executable, __file__, "--load", url, "--streams", str(level.streams),
        "--events", str(level.events), "--rate", repr(level.rate), "--ramp", repr(level.ramp),
        "--hold", str(hold),
    ]  # fmt: skip
    if baseline is not None:
        argv += ["--baseline", baseline]
    child = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("the load generator did not start")
    return child


def _tell(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()


def _summary(child: subprocess.Popen[str], what: str) -> dict[str, Any]:
    """The load generator's summary line, checked: every stream got every event it asked for,
    ``[DONE]`` included, with nothing left over."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        child.wait(60)
        raise RuntimeError(f"{what}: the load generator exited with {child.returncode}")
    load: dict[str, Any] = json.loads(line)
    for side in ("through", "direct"):
        got = load.get(side)
        if got is not None and (got["errors"] or got["events"] != got["expected_events"]):
            raise RuntimeError(
                f"{what} ({side}): {got['errors']} errors, {got['events']} of "
                f"{got['expected_events']} events: {got['error_samples']}"
            )
    return load


def _finish(child: subprocess.Popen[str], what: str) -> dict[str, Any]:
    load = _summary(child, what)
    child.wait(60)
    return load


def run_load(level: Level, target: Server, upstream: str, upstream_pid: int) -> Run:
    """``level`` through ``target`` with twin streams straight to the upstream; CPU time of
    every process over the run."""
    child = load_process(target.url, level, baseline=upstream)
    pids = [target.pid, upstream_pid, child.pid]
    before = [cpu_seconds(pid) for pid in pids]
    started = time.monotonic()
    _tell(child, "go")
    load = _summary(child, f"{level.label} {target.label}")  # its CPU is read before it exits
    wall = time.monotonic() - started
    used = [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
    child.wait(60)
    return Run(level, target.key, load["through"], load["direct"], *used, wall)


def warm_up(target: Server) -> None:
    """Lazy imports, pools and caches first, outside every figure."""
    child = load_process(target.url, Level("warm-up", 10, 200, 0, 0))
    _tell(child, "go")
    _finish(child, f"{target.label} warm-up")


@dataclass
class MemoryPoint:
    server: str
    streams: int
    rss_before_kib: int
    rss_open_kib: int

    @property
    def kib_per_stream(self) -> float:
        return (self.rss_open_kib - self.rss_before_kib) / self.streams


def measure_memory(server: Server, upstream: str) -> MemoryPoint:
    """A fresh server, warmed by a few streams; RSS before, and with ``MEMORY_STREAMS`` slowly
    paced streams open (each has read ``MEMORY_HOLD`` events)."""
    server.start(upstream)
    try:
        warm_up(server)
        time.sleep(1)
        before = rss_kib(server.pid)
        level = Level("memory", MEMORY_STREAMS, EVENTS, MEMORY_RATE, 2.0)
        child = load_process(server.url, level, hold=MEMORY_HOLD)
        _tell(child, "go")
        assert child.stdout is not None
        held = child.stdout.readline().strip() == "open"
        if held:
            time.sleep(0.5)
            samples = []
            for _ in range(5):
                samples.append(rss_kib(server.pid))
                time.sleep(0.1)
        _tell(child, "close")
        _finish(child, f"{server.label} memory")
        if not held:
            raise RuntimeError(f"{server.label}: the streams could not all be held open")
        return MemoryPoint(server.key, MEMORY_STREAMS, before, max(samples))
    finally:
        server.stop()


def verify_observed(upstream: str) -> dict[str, float]:
    """A separate proxy with ``/metrics`` shows that the path measured is observed: its streams
    counter says ``complete`` for each stream sent through it."""
    metrics_port = free_port()
    proxy = Server("proxy", "otelsse proxy (verification, with /metrics)", "")
    proxy.start(upstream, "--metrics-listen", f"127.0.0.1:{metrics_port}")
    try:
        child = load_process(proxy.url, Level("verify", 3, 200, 0, 0))
        _tell(child, "go")
        _finish(child, "verification")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        proxy.stop()
    outcomes: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("otelsse_streams_total{") and "openai.chat_completions" in line:
            labels, _, value = line.rpartition(" ")
            outcome = labels.partition('otelsse_outcome="')[2].partition('"')[0]
            if float(value):  # every outcome's series is there from the start, at 0
                outcomes[outcome] = outcomes.get(outcome, 0) + float(value)
    if outcomes != {"complete": 3.0}:
        raise RuntimeError(f"the proxy did not observe the streams as expected: {outcomes}")
    return outcomes


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import otelsse

    dists = ("uvicorn", "httptools", "uvloop", "aiohttp", "httpx", "opentelemetry-sdk", "msgspec")
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "otelsse": otelsse.__version__,
        "git": git_revision(),
        "versions": {d: _version(d) for d in dists},
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_server(server: Server, runs: list[Run]) -> None:
    print(f"{server.label}: {server.engine}")
    header = (
        f"  {'streams x events @ pace':<25} {'events':>9} {'ev/read':>7} "
        f"{'through p50/p99 ' + US:>20} {'direct p50/p99 ' + US:>19} "
        f"{'added p50/p99 ' + US:>18} {'CPU ' + US + '/ev':>10}  CPU use srv/up/load"
    )
    print(header)
    for run in runs:
        pairs = [
            (run.latency("p50"), run.latency("p99")),
            (run.latency("p50", "direct"), run.latency("p99", "direct")),
            (run.added("p50"), run.added("p99")),
        ]
        latency = [f"{_num(a)} / {_num(b)}" for a, b in pairs]
        use = "/".join(
            f"{cpu / run.wall_s:.0%}"
            for cpu in (run.server_cpu_s, run.upstream_cpu_s, run.loadgen_cpu_s)
        )
        print(
            f"  {run.level.label:<25} {run.events:>9,} {run.events / run.through['reads']:>7.2f} "
            f"{latency[0]:>20} {latency[1]:>19} {latency[2]:>18} "
            f"{run.cpu_us_per_event:>10.1f}  {use}"
        )


def capacity(cpu_us_per_event: float, rate: float = 50) -> float:
    """Streams at ``rate`` events/s that one second of CPU per second relays (computed)."""
    return 1e6 / (cpu_us_per_event * rate)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="short run (noisier)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    # The child processes: this file re-executed.
    ap.add_argument("--upstream-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--serve", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--listen", help=argparse.SUPPRESS)
    ap.add_argument("--upstream", help=argparse.SUPPRESS)
    ap.add_argument("--load", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--events", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--ramp", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--hold", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.upstream_server or args.load:
        # The instruments are not measured: a collection pausing them would show up as latency
        # of the server under test (its own collector stays on: its pauses are its own).
        gc.disable()
    if args.upstream_server:
        import uvloop

        uvloop.run(_serve_upstream())
        return 0
    if args.load:
        import uvloop

        uvloop.run(
            _load(
                args.load, args.baseline, args.streams, args.events, args.rate, args.ramp, args.hold
            )
        )
        return 0
    if args.serve:
        _serve_pass_through(args.serve, args.listen, args.upstream)
        return 0
    return orchestrate(args.quick, args.json)


def orchestrate(quick: bool, json_path: str | None) -> int:
    missing = [m for m in ("uvicorn", "httptools", "uvloop", "aiohttp", "httpx") if not _has(m)]
    if missing:
        sys.stderr.write(
            f"bench_proxy needs {', '.join(missing)}: pip install -e '.[proxy]' httpx\n"
        )
        return 2
    env = environment()
    plan = levels(quick)
    print(
        f"otelsse {env['otelsse']} @ {env['git']} | Python {env['python']} on {env['platform']}, "
        f"{env['cpu_count']} CPUs, load average "
        + " ".join(f"{x:.2f}" for x in env["load_average_at_start"])
        + f" | {env['date']}"
    )
    print(", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    print(f"mode: {'quick' if quick else 'full'}")
    print(
        f"All processes share this machine's {env['cpu_count']} CPUs: the upstream, the load "
        "generator and the server under test (and anything else running here), so latencies\n"
        "include waiting for a CPU. Each stream through the server has a twin straight to the "
        "upstream, started half a pacing interval later, in the same load generator:\n"
        "added latency = through - direct of the same run, per percentile, over the steady state "
        f"(events sent from {SETTLE_S:g} s after all streams are open until the first ends).\n"
        "The upstream and the load generator run with the garbage collector off; the servers "
        "keep theirs. 1,000 streams at 50 events/s each is more than\none core relays: the "
        "1,000-stream run paces 5 events/s per stream (5,000 events/s in all, as 100 x 50/s)."
    )
    started = time.monotonic()
    runs: list[Run] = []
    memory: list[MemoryPoint] = []
    targets = servers()
    with upstream_process() as (upstream, upstream_pid):
        observed = verify_observed(upstream)
        print(
            "The proxy observes what is measured: a separate proxy with --metrics-listen counted "
            f"otelsse.streams {observed} for the 3 streams sent through it."
        )
        try:
            for target in targets:
                target.start(upstream)
                warm_up(target)
            for i, level in enumerate(plan):
                # The order rotates level by level, so no server always runs first or last.
                for target in targets[i % len(targets) :] + targets[: i % len(targets)]:
                    run = run_load(level, target, upstream, upstream_pid)
                    runs.append(run)
                    print(
                        f"  {level.label} through {target.label}: added p99 "
                        f"{_num(run.added('p99'))} {US}, {run.cpu_us_per_event:.1f} {US}/event "
                        f"({time.monotonic() - started:.0f} s)",
                        file=sys.stderr,
                    )
        finally:
            for target in targets:
                target.stop()
        for target in targets:
            memory.append(measure_memory(target, upstream))
            print(
                f"  memory {target.label}: {memory[-1].kib_per_stream:.1f} KiB/stream "
                f"({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
    elapsed = time.monotonic() - started
    env["load_average_at_end"] = os.getloadavg()
    report(plan, targets, runs, memory)
    print(
        f"\ntotal time: {elapsed:.0f} s; load average at end "
        + " ".join(f"{x:.2f}" for x in env["load_average_at_end"])
    )
    if json_path:
        payload = {
            "environment": env,
            "mode": "quick" if quick else "full",
            "elapsed_s": elapsed,
            "runs": [run.to_json() for run in runs],
            "memory": [
                {**asdict(point), "kib_per_stream": point.kib_per_stream} for point in memory
            ],
        }
        Path(json_path).write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
        print(f"wrote {json_path}")
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def report(
    plan: list[Level], targets: list[Server], runs: list[Run], memory: list[MemoryPoint]
) -> None:
    def run_of(server: str, level: str) -> Run:
        return next(r for r in runs if r.server == server and r.level.key == level)

    print()
    print(
        f"Per server: events relayed; ev/read = events per read at the load generator; latency "
        f"per event = arrival - upstream send time ({US}, paced runs only);\nCPU {US}/ev = the "
        "server's utime+stime over the run / events relayed; CPU use = each process's CPU time / "
        "wall time (server / upstream / load generator, the last two serving both twins)."
    )
    for target in targets:
        print()
        print_server(target, [run_of(target.key, level.key) for level in plan])

    floor = "floor"
    paced_key = "100"
    print()
    print(
        "Ratios: CPU per event / the floor's (the same engine forwarding without observing); "
        "added latency at p99 in the same run; memory per open stream."
    )
    long = [lv for lv in plan if lv.key != SHORT]
    header = f"  {'server':<26}" + "".join(f" {'CPU/ev ' + lv.key:>14}" for lv in long)
    header += f" {'ms/stream':>12}"
    header += "".join(f" {'+p99 ' + lv.key:>10}" for lv in plan if lv.rate)
    header += f" {'KiB/stream':>13} {'streams/core@50/s':>18}"
    print(header)
    mem = {point.server: point for point in memory}

    def per_stream_ms(server: str) -> float:
        run = run_of(server, SHORT)
        return run.server_cpu_s / run.level.streams * 1e3

    for target in targets:
        cells = []
        for level in long:
            run, base = run_of(target.key, level.key), run_of(floor, level.key)
            ratio = run.cpu_us_per_event / base.cpu_us_per_event
            cells.append(f"{run.cpu_us_per_event:>6.1f} {ratio:>5.2f}x")
        stream_ms = per_stream_ms(target.key)
        cells.append(f"{stream_ms:>4.2f} {stream_ms / per_stream_ms(floor):>5.2f}x")
        added = [_num(run_of(target.key, lv.key).added("p99")) for lv in plan if lv.rate]
        point = mem[target.key]
        mem_ratio = point.kib_per_stream / mem[floor].kib_per_stream
        streams = capacity(run_of(target.key, paced_key).cpu_us_per_event)
        print(
            f"  {target.label:<26}"
            + "".join(f" {c:>14}" for c in cells[:-1])
            + f" {cells[-1]:>12}"
            + "".join(f" {a:>10}" for a in added)
            + f" {point.kib_per_stream:>6.1f} {mem_ratio:>5.2f}x {streams:>18,.0f}"
        )
    short = run_of(floor, SHORT).level
    print(
        f"ms/stream = the server's CPU time per stream in the {short.label} run (set-up and "
        f"teardown; its {short.events} events included).\nstreams/core@50/s is computed, not "
        f"loaded: 1 s / (CPU per event in the {run_of(floor, paced_key).level.label} run x 50 "
        "events/s)."
    )
    print()
    print(
        f"Memory: VmRSS of a fresh server (warmed by 10 streams) before, and with "
        f"{MEMORY_STREAMS:,} streams open at {MEMORY_RATE:g} events/s each (each has read "
        f"{MEMORY_HOLD} events), max of 5 samples"
    )
    for target in targets:
        point = mem[target.key]
        print(
            f"  {target.label:<28} {point.rss_before_kib / 1024:>7.1f} MiB -> "
            f"{point.rss_open_kib / 1024:>7.1f} MiB: {point.kib_per_stream:>6.1f} KiB/stream"
        )

    proxy = "proxy"
    at_1000 = run_of(proxy, "1000")
    paced = run_of(proxy, paced_key)
    cpu_ratio = paced.cpu_us_per_event / run_of(floor, paced_key).cpu_us_per_event
    added_1000 = at_1000.added("p99")
    per_stream = mem[proxy].kib_per_stream
    goals = [
        (
            added_1000 is not None and added_1000 <= 1000,
            f"p99 added latency per event at {at_1000.level.streams:,} concurrent streams: "
            f"{_num(added_1000)} {US} (goal <= 1,000 {US})",
        ),
        (
            cpu_ratio <= 2.0,
            f"proxy CPU per event / the floor's, {paced.level.label}: {cpu_ratio:.2f}x "
            f"({paced.cpu_us_per_event:.1f} vs {run_of(floor, paced_key).cpu_us_per_event:.1f} "
            f"{US}) (goal <= 2.00x)",
        ),
        (
            per_stream <= 64,
            f"memory per open stream: {per_stream:.1f} KiB (goal <= 64 KiB)",
        ),
    ]
    floor_added = run_of(floor, "1000").added("p99")
    print()
    print("Goals")
    for met, text in goals:
        print(f"  [{'MET' if met else 'NOT MET':>7}] {text}")
    others = ", ".join(
        f"{run_of(proxy, lv.key).cpu_us_per_event / run_of(floor, lv.key).cpu_us_per_event:.2f}x "
        f"at {lv.label}"
        for lv in plan
        if lv.key != paced_key
    )
    print(f"  [   INFO] proxy CPU per event / the floor's elsewhere: {others}")
    print(
        f"  [   INFO] p99 added latency at {at_1000.level.streams:,} streams through the floor "
        f"(no observing) in its own run: {_num(floor_added)} {US}"
    )
    print(
        f"  [   INFO] streams one core holds at 50 events/s, computed: "
        f"{capacity(paced.cpu_us_per_event):,.0f} (the floor: "
        f"{capacity(run_of(floor, paced_key).cpu_us_per_event):,.0f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
