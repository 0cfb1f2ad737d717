"""Running the proxy: uvicorn (httptools and uvloop when installed) serving ``ProxyApp``, the
OpenTelemetry SDK it exports through, ``/metrics`` on its own port, and the drain at SIGTERM.

The engine was measured (``benchmarks/bench_proxy.py``, figures in ``benchmarks/README.md``):
uvicorn and aiohttp's server cost the same per event and per stream, and uvicorn speaks plain
ASGI, as the middleware does; aiohttp's client costs 2.5 to 5 times less CPU per event than
httpx's, so it reads the upstream.

Telemetry goes where the SDK's environment variables say (``_config.load_exports``: OTLP,
the console, or nowhere, each signal by its own); the resource from ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (service name ``otelsse-proxy`` by default). Once it listens, the
proxy says in one line where, and where it forwards to (``start_line``).

The connections are bounded where uvicorn's httptools protocol leaves them open
(``BoundedHttpProtocol``): the size of a request's head and the time to receive it, a request
body's silences, a connection with no request under way, and how many connections are open
at once, from the file descriptors the process has.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .._monitor import Outcome
from .._observe import strict_outcomes
from ._app import ProxyApp, UpstreamCut, refusal
from ._config import ConfigError, Export, Exports, ProxyConfig, load_exports

if sys.platform != "win32":
    import resource

__all__ = [
    "BoundedHttpProtocol",
    "Providers",
    "ProxyServer",
    "raise_descriptor_limit",
    "serve",
    "start_line",
]

_LOG = logging.getLogger("otelsse.proxy")


class Providers:
    """The SDK providers the proxy exports through: to ``exports``, and to Prometheus's scrape
    when ``metrics_listen`` is set."""

    def __init__(self, config: ProxyConfig, exports: Exports) -> None:
        resource = Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "otelsse-proxy"}
        )
        self.tracer_provider = TracerProvider(resource=resource)
        readers: list[MetricReader] = []
        if config.metrics_listen is not None:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            host, port = config.metrics_listen
            start_http_server(port, host)
            readers.append(PrometheusMetricReader())
        for export in exports.traces.exports:
            self.tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(export)))
        for export in exports.metrics.exports:
            readers.append(PeriodicExportingMetricReader(_metric_exporter(export)))
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource)

    def shutdown(self) -> None:
        """Flush and stop: spans and metric points still buffered are exported now."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


# Each exporter is given its endpoint (the one the start line names); it reads its headers,
# timeout, compression and certificates from the environment itself.
def _span_exporter(export: Export) -> SpanExporter:
    if export.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if export.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=export.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    return HTTPSpanExporter(endpoint=export.endpoint)


def _metric_exporter(export: Export) -> MetricExporter:
    if export.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if export.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=export.endpoint)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HTTPMetricExporter,
    )

    return HTTPMetricExporter(endpoint=export.endpoint)


class _QuietCuts(logging.Filter):
    """uvicorn logs an app's exception with its traceback; an upstream that broke off is the
    proxy's normal business (it logged one line and the span says it), not a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, UpstreamCut)


#: File descriptors kept for the process itself, beyond two a stream: the listening sockets,
#: the exporters' connections, the resolver's, the event loop's, stdio, and the connections
#: being refused (each needs a descriptor to be told no).
FD_RESERVE = 64


def raise_descriptor_limit(max_streams: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as Go's runtime does at start since
    1.19: the soft limit is a relic of ``select``, which the proxy does not use) and return it.

    Raises ConfigError when it cannot carry ``max_streams``: each stream holds two descriptors,
    the client's connection and the upstream's, and ``FD_RESERVE`` are kept besides.
    """
    if sys.platform == "win32":  # no such limit
        return sys.maxsize
    needed = 2 * max_streams + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit is capped by the kernel (Linux's fs.nr_open, macOS's OPEN_MAX):
    # then ask for what is needed.
    for target in (hard, needed):
        if target == resource.RLIM_INFINITY or (soft != resource.RLIM_INFINITY and target <= soft):
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        soft = target
        break
    if soft == resource.RLIM_INFINITY:
        return sys.maxsize
    if soft < needed:
        fits = (soft - FD_RESERVE) // 2
        lower = f"give --max-streams {fits} or fewer, or " if fits >= 1 else ""
        raise ConfigError(
            f"max_streams {max_streams} needs {needed} file descriptors (2 a stream and "
            f"{FD_RESERVE} for the process), but the limit is {soft} (hard {hard}): {lower}"
            "raise the hard limit (ulimit -Hn, or the container's nofile)"
        )
    return soft


class _Clock:
    """A deadline on the loop: ``expired`` runs ``seconds`` after the last ``start``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, seconds: float, expired: Callable[[], None]
    ) -> None:
        self._loop, self._seconds, self._expired = loop, seconds, expired
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start(self) -> None:
        self.stop()
        self._timer = self._loop.call_later(self._seconds, self._expire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        self._expired()


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds it does not set. The parsing stays
    httptools'; this only counts bytes and keeps clocks:

    - a request's head (request line and header fields) is read up to ``max_header_bytes``:
      past it, 431 (RFC 6585 §5), or 414 when the request line itself has not ended (RFC 9112
      §3: a server "MUST respond with a 414 (URI Too Long)" to a target longer than it parses);
    - from its first byte, a head has ``header_timeout`` seconds, and a body may be silent for
      ``body_timeout`` seconds while the proxy waits for it; then 408 (RFC 9110 §15.5.9, with
      "close": the request's framing is lost);
    - a connection with no request under way, a new one too, is closed after the keep-alive
      timeout (uvicorn arms that clock only after a response);
    - past ``max_connections`` open connections, a new one is answered 503 with
      ``retry-after`` at once and closed, so the streams under way keep the descriptors their
      upstream connections need.

    Each answer is the proxy's own JSON error, and the connection is closed after it.
    """

    def __init__(
        self,
        *args: Any,
        proxy: ProxyConfig,
        max_connections: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._proxy = proxy
        self._max_connections = max_connections
        #: Reading a request's head, or waiting for its first byte; False while its body is read.
        self._in_head = True
        self._head_bytes = 0
        self._request_line_ended = False
        self._head_clock = _Clock(self.loop, proxy.header_timeout, self._head_late)
        self._body_clock = _Clock(self.loop, proxy.body_timeout, self._body_late)
        #: Answered (or closing after the response under way): nothing more is read.
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._max_connections:
            self._refuse("too_many_connections")
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_clock.stop()
        self._body_clock.stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        if not self._in_head:
            self._body_clock.start()  # it measures the client's silence
            super().data_received(data)
            return
        room = self._proxy.max_header_bytes - self._head_bytes
        if room == 0:  # more head than the bound, and it has not ended
            self._refuse("header_too_large" if self._request_line_ended else "uri_too_long")
            return
        if not self._head_clock.running:
            self._head_clock.start()
        # Only what fits is parsed: httptools holds a header field whole until it ends.
        fits, rest = data[:room], data[room:]
        self._head_bytes += len(fits)
        self._request_line_ended = self._request_line_ended or b"\n" in fits
        super().data_received(fits)
        if rest:
            self.data_received(rest)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._head_clock.running:  # a pipelined head that began in the previous read
            self._head_clock.start()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_clock.stop()
        super().on_headers_complete()
        self._body_clock.start()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_clock.stop()
        self._in_head, self._head_bytes, self._request_line_ended = True, 0, False

    def _head_late(self) -> None:
        self._refuse("request_timeout")

    def _body_late(self) -> None:
        if self.flow.read_paused:
            # The proxy stopped reading (its upstream takes the body slowly, or a pipelined
            # request waits its turn): the silence is not the client's.
            self._body_clock.start()
        else:
            self._refuse("request_timeout")

    def _refuse(self, kind: str) -> None:
        """Answer the request being read with the proxy's error ``kind`` and close."""
        self._refused = True
        self._head_clock.stop()
        self._body_clock.stop()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if self._in_head:
                # A pipelined head behind a response still going out: that one ends first.
                cycle.keep_alive = False
                return
            # This request's body: for the app the client is gone (its sends go nowhere).
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:  # the upstream answered already: too late for a 408
                self.transport.close()
                return
        status, headers, body = refusal(kind)
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n" for name, value in headers]
        self.transport.write(b"".join([*head, b"connection: close\r\n\r\n", body]))
        self.transport.close()


class ProxyServer(uvicorn.Server):
    """uvicorn serving ``app`` on its ``listen`` address; ``on_listening`` is called with the
    address once it listens there.

    SIGTERM/SIGINT start the drain: ``/readyz`` fails, no new connection is taken, requests in
    flight get ``drain_timeout`` seconds. Then each one still running is cancelled, once: the
    app answers it (a 503 ``shutdown``, or the connection cut mid-stream; its span says
    ``otelsse.cancel_reason=shutdown``) and it ends; the connections still open then are closed,
    and the lifespan shutdown closes the upstream connections.

    Raises ConfigError when the file descriptors cannot carry ``max_streams``."""

    def __init__(
        self, app: ProxyApp, on_listening: Callable[[tuple[str, int]], None] | None = None
    ) -> None:
        super().__init__(_uvicorn_config(app, raise_descriptor_limit(app.config.max_streams)))
        self.proxy = app
        self._on_listening = on_listening
        self._drain_end: asyncio.Task[None] | None = None
        error_log = logging.getLogger("uvicorn.error")
        if not any(isinstance(known, _QuietCuts) for known in error_log.filters):
            error_log.addFilter(_QuietCuts())

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on (the port chosen, when ``listen`` said 0)."""
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_listening is not None:
            self._on_listening(self.address)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it re-raises the signal once drained, which would kill the process
        # before the exporters flush. A second Ctrl-C still forces the exit.
        self.proxy.draining = True
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # The drain's deadline is kept here, not by uvicorn's timeout_graceful_shutdown: at
        # that one uvicorn logs an ERROR and goes on to the lifespan shutdown, closing the
        # upstream connections, without waiting for the requests it has just cancelled.
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(self.proxy.config.drain_timeout, self._drain_ran_out)
        try:
            await super().shutdown(sockets)  # waits for every connection and request to end
        finally:
            deadline.cancel()

    def _drain_ran_out(self) -> None:
        requests = list(self.server_state.tasks)
        if requests:
            _LOG.warning(
                "drain_timeout %gs ran out: %d request(s) still in flight cancelled "
                "(otelsse.cancel_reason=shutdown)",
                self.proxy.config.drain_timeout,
                len(requests),
            )
        for connection in list(self.server_state.connections):
            if connection.transport.get_write_buffer_size():
                # Its client is not taking what was sent: an answer written now would wait
                # for it, and the drain with it.
                connection.transport.abort()
        for task in requests:
            task.cancel()
        self._drain_end = asyncio.ensure_future(self._close_connections(requests))

    async def _close_connections(self, requests: list[asyncio.Task[None]]) -> None:
        """Once the cancelled ``requests`` answered and ended, close the connections left: the
        drain is over."""
        if requests:
            await asyncio.wait(requests)
        for connection in list(self.server_state.connections):
            connection.transport.abort()


def _uvicorn_config(app: ProxyApp, fd_limit: int) -> uvicorn.Config:
    """uvicorn's settings for the proxy: httptools bounded (``BoundedHttpProtocol``), uvloop
    when installed, no header of its own (the upstream's ``date`` and ``server`` pass
    through), no access log (its lines carry query strings)."""
    config = app.config
    host, port = config.listen
    protocol = functools.partial(
        BoundedHttpProtocol,
        proxy=config,
        # every stream's upstream connection, and the reserve, come out of the same limit
        max_connections=fd_limit - FD_RESERVE - config.max_streams,
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http=protocol,  # type: ignore[arg-type]  # a factory: uvicorn only calls it
        lifespan="on",
        access_log=False,
        server_header=False,
        date_header=False,
        # typed int, but uvicorn hands them to asyncio, which takes seconds as a float
        timeout_keep_alive=config.keep_alive_timeout,  # type: ignore[arg-type]
        timeout_graceful_shutdown=None,  # the drain's deadline is ProxyServer's
        log_level="warning",
    )


def _shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket other processes may bind too (SO_REUSEPORT): the kernel spreads the
    connections among them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def serve(config: ProxyConfig, announce: Callable[[str], None] | None = None) -> int:
    """Run the proxy until SIGTERM or Ctrl-C has drained it; returns the exit status.

    ``announce`` is given the start line (``start_line``) once the proxy listens.

    Raises ConfigError, before anything listens, when the telemetry's environment variables
    name what the proxy cannot export with (``load_exports``), or when the file descriptors
    cannot carry ``max_streams``."""
    exports = load_exports(os.environ)
    raise_descriptor_limit(config.max_streams)
    providers = Providers(config, exports)
    app = ProxyApp(
        config,
        tracer_provider=providers.tracer_provider,
        meter_provider=providers.meter_provider,
    )

    def listening(address: tuple[str, int]) -> None:
        if announce is not None:
            announce(start_line(config, address, exports))

    server = ProxyServer(app, listening)
    try:
        server.run(sockets=[_shared_socket(*config.listen)] if config.reuse_port else None)
    finally:
        providers.shutdown()
    return 0 if server.started else 1


def start_line(config: ProxyConfig, address: tuple[str, int], exports: Exports) -> str:
    """One line saying where the proxy listens (``address``), the upstreams it forwards to,
    where ``/metrics`` is served, and where each signal is exported."""
    upstreams = ", ".join(
        f"{upstream.name} → {upstream.base}{_strict_note(config.strict_for(upstream))}"
        for upstream in config.upstreams
    )
    scrape = "off" if config.metrics_listen is None else _http(*config.metrics_listen) + "/metrics"
    return (
        f"listening on {_http(*address)}; upstreams: {upstreams}; /metrics: {scrape}; "
        f"traces: {exports.traces}; metrics: {exports.metrics}"
    )


def _strict_note(strict: frozenset[Outcome]) -> str:
    """`` (strict)`` after an upstream strict mode is on for, naming its outcomes unless they
    are the default ones."""
    if not strict:
        return ""
    if strict == strict_outcomes(True):
        return " (strict)"
    return f" (strict: {', '.join(sorted(outcome.value for outcome in strict))})"


def _http(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
