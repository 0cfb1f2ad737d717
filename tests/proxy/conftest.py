"""The proxy for real on 127.0.0.1, in front of the demo's fake provider.

``provider``: the fake provider (``otelsse._demo.provider``), its scenarios picked per request
by the ``x-otelsse-demo-scenario`` header. ``proxy``: a ``ProxyApp`` served by uvicorn
(``ProxyServer``, the server ``otelsse proxy`` runs) on a free port of a background thread,
with the upstream ``fake`` pointing at the provider and an in-memory OpenTelemetry SDK
(``proxy.otel``). ``start_proxy`` runs one with other settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from otelsse import semconv
from otelsse._demo.provider import FakeProvider
from otelsse.proxy import ProxyApp, ProxyConfig, Upstream
from otelsse.proxy._server import ProxyServer
from tests._helpers import joined, soon, waited
from tests._otel import Telemetry

#: The longest any test waits for something the proxy does in the background.
MAX_WAIT = 30.0
#: How long the provider's ``timeout`` scenario stays silent: past every client's read timeout
#: in these tests (``CLIENT_TIMEOUT``), within the proxy's idle timeout.
STALL = 4.0
CLIENT_TIMEOUT = 1.5


def wait_for(condition: Callable[[], object], what: str, timeout: float = MAX_WAIT) -> None:
    soon(condition, timeout, what)


@dataclasses.dataclass
class RunningProxy:
    """A proxy serving on ``base`` (``http://127.0.0.1:PORT``)."""

    app: ProxyApp
    server: ProxyServer
    otel: Telemetry
    base: str

    def url(self, upstream: str = "fake", path: str = "") -> str:
        return f"{self.base}/{upstream}{path}"

    def stream_spans(self, count: int = 1) -> list[ReadableSpan]:
        """The ``otelsse.stream`` spans, once ``count`` of them ended (the proxy ends a span
        after its last byte went out, maybe after the client saw it)."""
        wait_for(lambda: len(self.otel.spans()) >= count, f"{count} stream span(s)")
        return self.otel.spans()

    def server_spans(self, count: int = 1) -> list[ReadableSpan]:
        """The proxy's SERVER spans, once ``count`` of them ended."""

        def found() -> list[ReadableSpan]:
            return [s for s in self.otel.spans(None) if s.kind is SpanKind.SERVER]

        wait_for(lambda: len(found()) >= count, f"{count} server span(s)")
        return found()

    def outcome(self) -> str:
        """The outcome of the one stream observed."""
        (span,) = self.stream_spans()
        return str((span.attributes or {})[semconv.OUTCOME])


@contextlib.contextmanager
def start_proxy(config: ProxyConfig, **app_options: Any) -> Iterator[RunningProxy]:
    """Serve ``config`` (its ``listen`` port 0 picks a free one) until the block ends."""
    otel = Telemetry()
    app = ProxyApp(
        config,
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        **app_options,
    )
    server = ProxyServer(app)
    thread = threading.Thread(target=server.run, name="otelsse-proxy")
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), "the proxy to start")
        assert server.started, "the proxy did not start"
        yield RunningProxy(app, server, otel, f"http://127.0.0.1:{server.address[1]}")
    finally:
        server.should_exit = True
        joined(thread, MAX_WAIT)  # the proxy stopped
        otel.tracer_provider.shutdown()
        otel.meter_provider.shutdown()


def proxy_config(provider: FakeProvider, **settings: Any) -> ProxyConfig:
    """The proxy's settings for these tests: the upstream ``fake``, on a free port."""
    upstreams = settings.pop("upstreams", (Upstream("fake", provider.base_url),))
    return ProxyConfig(upstreams=upstreams, listen=("127.0.0.1", 0), **settings)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """One request as an upstream received it."""

    method: str
    target: str  # path and query, as sent
    headers: list[tuple[str, str]]  # names in lower case, in order
    body: bytes


class ThreadedUpstream:
    """An aiohttp server on a background thread of its own, every method and path answered by
    the subclass's ``_handle``; ``close()`` stops it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        assert waited(ready.wait, MAX_WAIT)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def base(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        joined(self._thread, MAX_WAIT)


class RecordingUpstream(ThreadedUpstream):
    """Keeps every request it gets (chunked bodies too) and answers each with ``reply`` as an
    SSE stream."""

    def __init__(self, reply: bytes = b"data: [DONE]\n\n") -> None:
        self.received: list[Recorded] = []
        self._reply = reply
        super().__init__()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        headers = [(k.lower(), v) for k, v in request.headers.items()]
        body = await request.read()
        self.received.append(Recorded(request.method, request.raw_path, headers, body))
        return web.Response(body=self._reply, content_type="text/event-stream")


@pytest.fixture
def recording() -> Iterator[RecordingUpstream]:
    upstream = RecordingUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


def config_for(base: str, **settings: Any) -> ProxyConfig:
    """Settings forwarding the upstream ``up`` to ``base``, on a free port."""
    return ProxyConfig(upstreams=(Upstream("up", base),), listen=("127.0.0.1", 0), **settings)


@pytest.fixture(scope="session")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider("127.0.0.1", 0, seed=11, stall=STALL, speed=20.0) as running:
        yield running


@pytest.fixture
def proxy(provider: FakeProvider) -> Iterator[RunningProxy]:
    with start_proxy(proxy_config(provider)) as running:
        yield running
