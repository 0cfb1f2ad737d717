"""ASGI middleware: the ``otelsse.stream`` span and metrics for the SSE streams an app serves.

    request ──> OtelSSEMiddleware ──> app            (receive passes through; the body is scanned
                                                       for ``model`` only as the app reads it)
    app ──> http.response.start (text/event-stream) ──> a span and a StreamObserver
    app ──> http.response.body ──> the observer, after the server took it
    end, exactly once: the last body (the monitor's verdict), http.disconnect or a failed send
    (``cancelled``), or the app raising (the stream was cut)

The stream is observed by the same ``StreamObserver`` as a client's response: same monitor,
content-decoding, attributes, metrics and containment.

Pure ASGI, no framework: Starlette, FastAPI and sse-starlette apps, and the proxy's inbound side,
all speak it. Observing never alters: every message, exception and the receive channel pass
through unchanged, and a failure of otelsse is counted in ``otelsse.instrumentation.errors``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanKind, TracerProvider

from . import semconv
from ._clients import RequestScan, stream_error
from ._core.http import accepts_event_stream, is_event_stream
from ._monitor import Limits, StreamError
from ._observe import StreamObserver, StreamStart, route_labels
from ._telemetry import Telemetry
from .routes import AUTO, Request, Route, match_route, protocol_request

__all__ = ["ASGIApp", "OtelSSEMiddleware"]

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class OtelSSEMiddleware:
    """Wrap an ASGI app; every ``text/event-stream`` response it sends gets one ``otelsse.stream``
    span and the stream metrics, as the in-process instrumentation gives them.

    Args:
        app: the ASGI application.
        tracer_provider, meter_provider: None for the global providers.
        limits: the monitor's ceilings per stream (``Limits()`` by default).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.app = app
        self.telemetry = Telemetry(tracer_provider, meter_provider)
        self.limits = Limits() if limits is None else limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        try:
            exchange = _Exchange(self, scope)
        except Exception as exc:
            self.telemetry.count_error(exc, "send")
            await self.app(scope, receive, send)
            return
        await exchange.run(receive, send)


class _Exchange:
    """One request: its route, the model it names, and its stream once the app answers SSE."""

    __slots__ = (
        "_app",
        "_ended",
        "_headers",
        "_host",
        "_kind",
        "_limits",
        "_model",
        "_observer",
        "_parent",
        "_port",
        "_request",
        "_route",
        "_rpc_id",
        "_scan",
        "_scope",
        "_start_time",
        "_started_at",
        "_telemetry",
    )

    def __init__(self, middleware: OtelSSEMiddleware, scope: Scope) -> None:
        self._app = middleware.app
        self._scope = scope
        self._telemetry = middleware.telemetry
        self._limits = middleware.limits
        self._started_at = time.perf_counter()
        self._start_time = time.time_ns()
        headers = _headers(scope)
        # server.address and server.port: what the client asked for (its Host), as on the client
        # side; the socket's own address only when the request names none.
        authority = headers.get("host", "")
        host, _, port = authority.rpartition(":")
        if not host or not port.isdigit():  # no port (an IPv6 literal's colons are not one)
            host, port = authority, ""
        self._host = host.lower()
        self._port: int | None = int(port) if port else _DEFAULT_PORTS.get(str(scope.get("scheme")))
        if not authority and scope.get("server"):
            self._host, self._port = str(scope["server"][0]), scope["server"][1]
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope.get("path", "")
        query = scope.get("query_string", b"").decode("latin-1")
        method = scope.get("method", "GET").upper()
        self._request = Request(method, self._host.strip("[]"), path, query)
        self._route: type[Route] | None = match_route(self._request)
        # Asking for SSE at a path no route knows: the body's JSON-RPC method and the declared
        # headers may tell, once the app has read the body (at its answer).
        self._headers = (
            headers if self._route is None and accepts_event_stream(headers.get("accept")) else None
        )
        if self._route is not None and self._route.request_headers:
            self._request = protocol_request(self._request, None, None, headers.get)
        # An HTTP server instrumentation around this middleware (opentelemetry-instrumentation-
        # asgi) already made the SERVER span of this request: the stream is observed inside it.
        # Otherwise this span is the request's only one here, and continues the caller's trace.
        current = otel_context.get_current()
        local = trace.get_current_span(current).get_span_context()
        if local.is_valid and not local.is_remote:
            self._parent, self._kind = current, SpanKind.INTERNAL
        else:
            self._parent, self._kind = propagate.extract(headers, context=current), SpanKind.SERVER
        scanned = self._route is not None or self._headers is not None
        self._scan: RequestScan | None = RequestScan() if scanned else None
        self._model: str | None = None
        self._rpc_id: str | int | None = None
        #: The observer of the app's event stream, once it answered with one.
        self._observer: StreamObserver | None = None
        self._ended = False

    async def run(self, receive: Receive, send: Send) -> None:
        async def observed_receive() -> Message:
            message = await receive()
            try:
                self._received(message)
            except Exception as exc:
                self._telemetry.count_error(exc, "feed")
            return message

        async def observed_send(message: Message) -> None:
            try:
                await send(message)
            except BaseException:
                # The server could not deliver: the client is gone.
                self._end("cancelled")
                raise
            try:
                self._sent(message)
            except Exception as exc:
                if self._observer is not None:
                    self._observer.broken = True
                self._telemetry.count_error(exc, "feed")

        try:
            await self._app(self._scope, observed_receive, observed_send)
        except BaseException as exc:
            self._end(stream_error(exc))
            raise
        # The app returned without its last body message: the server cuts the response.
        self._end("transport")

    def _received(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.disconnect":
            self._end("cancelled")
        elif kind == "http.request" and self._scan is not None:
            # Only the app's own reads pass here: the body is never read for otelsse.
            self._scan.feed(bytes(message.get("body", b"")))
            self._model = self._scan.model
            if self._model is not None and self._observer is not None:
                self._observer.named_model(self._model)
            if not message.get("more_body"):
                self._identify()
                self._scan = None
            elif self._model is not None and self._headers is None:
                self._scan = None

    def _identify(self) -> None:
        """The request body is whole (or the answer began): a request no route claimed by its
        path may be claimed by what its body and headers name."""
        if self._headers is None or self._scan is None:
            return
        rpc = self._scan.rpc
        self._request = protocol_request(self._request, rpc.method, rpc.name, self._headers.get)
        self._rpc_id = rpc.id
        self._route = match_route(self._request)
        self._headers = None

    def _sent(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self._start(message)
        elif kind == "http.response.body" and self._observer is not None:
            body = message.get("body", b"")
            if body:
                self._observer.feed(bytes(body))
            if not message.get("more_body", False):
                self._end(None)

    def _start(self, message: Message) -> None:
        headers = _headers(message)
        if not is_event_stream(headers.get("content-type")) or self._ended:
            return
        self._identify()  # an app that answers before reading all of the body
        route = AUTO if self._route is None else self._route.full_name()
        status = int(message["status"])
        attributes = self._attributes(status)
        span = self._telemetry.tracer.start_span(
            semconv.SPAN_NAME,
            context=self._parent,
            kind=self._kind,
            attributes={semconv.ROUTE: route, **attributes},
            start_time=self._start_time,
        )
        start = StreamStart(
            telemetry=self._telemetry,
            limits=self._limits,
            route=route,
            span=span,
            context=self._parent,
            started_at=self._started_at,
            span_attributes=attributes,
            status=status,
            request_model=self._model,
            request=None if self._route is None else self._request,
            rpc_id=self._rpc_id,
        )
        self._observer = observer = StreamObserver(start, active=True)
        observer.decode_as(headers.get("content-encoding"))

    def _attributes(self, status: int) -> dict[str, Any]:
        s = semconv
        attributes: dict[str, Any] = {}
        route = self._route
        if route is not None:
            if route.provider is not None:
                attributes[s.GEN_AI_PROVIDER_NAME] = route.provider
            if route.operation is not None:
                attributes[s.GEN_AI_OPERATION_NAME] = route.operation
            attributes.update(route_labels(route, self._request))
        if self._model is not None:
            attributes[s.GEN_AI_REQUEST_MODEL] = self._model[: s.MAX_IDENTIFIER_CHARS]
        if self._host:
            attributes[s.SERVER_ADDRESS] = self._host[: s.MAX_IDENTIFIER_CHARS]
        if self._port is not None:
            attributes[s.SERVER_PORT] = self._port
        attributes[s.HTTP_RESPONSE_STATUS_CODE] = status
        return attributes

    def _end(self, error: StreamError | None) -> None:
        """End the stream, if one is observed: None at its last body. Only the first call counts
        (the observer's rule). Never raises: it runs where the app's own exception is on its way
        out."""
        self._ended = True
        if self._observer is not None:
            self._observer.finish(error)


def _headers(holder: Message) -> dict[str, str]:
    """A scope's or a response start's headers by lower-case name (a repeated header: its last
    value)."""
    return {
        bytes(name).decode("latin-1").lower(): bytes(value).decode("latin-1")
        for name, value in holder.get("headers", ())
    }
