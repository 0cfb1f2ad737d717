"""Request time: which requests to watch, and each watched request until its response headers.

    a client's send wrapper ── Settings.begin/watch(client, ...) ──> Watch   (before the send)
    headers ── Watch.observe(response, tap) ──> StreamObserver (``_stream.py``), installed by the
               client's tap; or Watch.failed(error) when no response came

Client-neutral: a response is read only through its ``Client`` (``otelsse._clients``), and a
route only through its ``Route`` declarations. Everything here is contained: a failure is counted
in ``otelsse.instrumentation.errors`` and the application's request, response and exceptions are
left exactly as they were.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span

from .. import semconv
from .._clients import URL, Client, RequestFields, RpcFields, Tap, stream_error
from .._core.http import (
    EVENT_STREAM,
    accepts_event_stream,
    is_event_stream,
    may_stream,
    retry_after,
    stream_violation,
)
from .._monitor import Limits, Outcome
from .._strict import fault_class, refusal, scoped_outcomes
from .._telemetry import Telemetry
from ..routes import AUTO, Request, Route, match_route, protocol_request
from ._stream import StreamObserver, StreamStart, Strict, route_labels

if TYPE_CHECKING:
    from ..recorder import FlightRecorder

__all__ = ["GenAISpan", "Settings", "Watch", "genai_neighbour"]

_W = TypeVar("_W")

#: What otelsse does beside another instrumentation's GenAI span (``instrument(genai_span=)``):
#: ``beside`` leaves to it what it owns; ``attach`` also copies otelsse's own stream-integrity
#: attributes onto it, when it is still open at the stream's end.
GenAISpan = Literal["beside", "attach"]
#: True while a watched request is being sent (a context variable of its own: cheaper than a
#: value in the OpenTelemetry context, which only a span needs).
_SENDING: ContextVar[bool] = ContextVar("otelsse_sending", default=False)
#: Attribute keys that mark a span as a GenAI call (``gen_ai.system`` before semconv v1.37).
_GENAI_MARKS = (semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME, "gen_ai.system")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``instrument()`` was given; shared by every wrapper."""

    telemetry: Telemetry
    limits: Limits = dataclasses.field(default_factory=Limits)
    excluded_urls: re.Pattern[str] | None = None
    genai_span: GenAISpan = "beside"
    recorder: FlightRecorder | None = None
    #: The outcomes strict mode refuses (``otelsse._strict``); empty: off. A request sent in a
    #: ``strict()`` block takes the block's instead.
    strict: frozenset[Outcome] = frozenset()
    #: A cut the client library raised for is refused too (the proxy: see ``Strict.cuts``).
    strict_cuts: bool = False

    def begin(self, make: Callable[..., _W | None], *args: Any) -> _W | None:
        """``make(self, *args)``, the watch of a request about to be sent; None to leave the
        request alone (instrumentation suppressed, URL excluded, or otelsse failed: counted)."""
        # A client sending on behalf of another watched one (httpx on LiteLLM's aiohttp
        # transport) is the same request: only the outermost client observes it.
        if _SENDING.get() or not is_instrumentation_enabled():
            return None
        try:
            return make(self, *args)
        except Exception as exc:
            self.telemetry.count_error(exc, "send")
            return None

    def watch(
        self,
        client: Client,
        method: str,
        url: URL,
        path: str,
        query: str,
        *,
        body: Callable[[], RequestFields],
        rpc: Callable[[], RpcFields],
        header: Callable[[str], str | None],
    ) -> Watch | None:
        """Decide, before sending, whether this request may be a stream to observe.

        ``url`` is the client's URL object (made text only when needed); ``body`` (the JSON
        body's ``stream`` flag and ``model``) and ``header`` (a request header's value by its
        lower-case name) are asked only for a request on a known route, or one that asks for
        SSE (``rpc``, the JSON-RPC body's identifiers, only then: see ``Request``). Returns None
        for an excluded
        URL and for a request whose answer has no body (HEAD). A request that a known streaming
        route expects to be SSE (``"stream": true``, an SSE ``Accept``, or a URL that always
        streams) gets its span now, so the HTTP client span nests under it; any other request
        is watched only for an SSE response, and gets its span then.
        """
        if not may_stream(method):
            return None
        if self.excluded_urls is not None and self.excluded_urls.search(str(url)):
            return None
        request = Request(method.upper(), url.host, path, query)
        route = match_route(request)
        if route is None:
            if not accepts_event_stream(header("accept")):
                return Watch(self, client, url, None, False, None)
            # Asking for SSE at a URL no route knows: a protocol served at any path (JSON-RPC)
            # may be told by its body's method and its declared headers.
            found = rpc()
            request = protocol_request(request, found.method, found.name, header)
            route = match_route(request)
            if route is None:
                return Watch(self, client, url, None, False, None)
            # Such a protocol's server may answer with one JSON body instead (an MCP client asks
            # for ``application/json, text/event-stream`` and must take either): only a request
            # that asks for SSE alone expects a stream; any other is observed if it gets one.
            expects_sse = is_event_stream(header("accept"))
            model = body().model
            return Watch(self, client, url, route, expects_sse, model, request, found.id)
        if route.request_headers:
            request = protocol_request(request, None, None, header)
        url_model = route.url_model(request)
        if url_model is not None and route.always_streams(request):
            # The URL says all the body would (Gemini's, Bedrock's): it is not read.
            return Watch(self, client, url, route, True, url_model, request)
        fields = body()
        expects_sse = (
            fields.stream or is_event_stream(header("accept")) or route.always_streams(request)
        )
        model = url_model or fields.model
        return Watch(self, client, url, route, expects_sse, model, request)


def genai_neighbour(span: Span) -> tuple[str, frozenset[str]] | None:
    """The instrumentation scope of ``span`` and what it owns (``semconv.NEIGHBOURS``) when it
    is another instrumentation's GenAI span, else None.

    Only a recording SDK span shows its attributes; a sampled-out one cannot be told apart.
    """
    attributes = getattr(span, "attributes", None) if span.is_recording() else None
    if not attributes or not any(mark in attributes for mark in _GENAI_MARKS):
        return None
    scope = getattr(getattr(span, "instrumentation_scope", None), "name", None) or "unknown"
    if scope == semconv.SCOPE_NAME:
        return None
    known = semconv.NEIGHBOURS.get(scope)
    return scope, semconv.UNKNOWN_NEIGHBOUR_OWNS if known is None else known.owns


class Watch:
    """A request otelsse may observe, from send until its response headers arrive."""

    __slots__ = (
        "_sending",
        "_token",
        "client",
        "context",
        "expects_sse",
        "neighbour",
        "neighbour_scope",
        "owned",
        "pid",
        "request",
        "request_model",
        "route",
        "rpc_id",
        "settings",
        "span",
        "start_time",
        "started_at",
        "strict",
        "url",
    )

    def __init__(
        self,
        settings: Settings,
        client: Client,
        url: URL,
        route: type[Route] | None,
        expects_sse: bool,
        request_model: str | None,
        request: Request | None = None,
        rpc_id: str | int | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.url = url
        self.route = route
        self.expects_sse = expects_sse
        self.request_model = request_model
        #: What the route was told the request is (None for a request no route claimed).
        self.request = request
        #: The JSON-RPC ``id`` of its body, when the route needed it read.
        self.rpc_id = rpc_id
        #: The outcomes strict mode refuses for this request (empty: off), as at its send.
        scoped = scoped_outcomes()
        self.strict = settings.strict if scoped is None else scoped
        self.started_at = time.perf_counter()
        self.start_time = time.time_ns()
        # A process forked from this one inherits the watch and its stream; they stay ours.
        self.pid = os.getpid()
        self.context: Context = otel_context.get_current()
        # Another instrumentation's GenAI span around this call (openai-v2, anthropic's own):
        # looked for only once the call is known to stream, as most requests never do.
        self.neighbour: Span | None = None
        self.neighbour_scope = ""
        self.owned: frozenset[str] = frozenset()
        self.span: Span | None = None
        if expects_sse:
            self._find_neighbour()
            self.span = settings.telemetry.start_span(self._server_attributes())

    def _find_neighbour(self) -> None:
        parent = trace.get_current_span(self.context)
        found = genai_neighbour(parent)
        if found is not None:
            self.neighbour = parent
            self.neighbour_scope, self.owned = found

    def _server_attributes(self) -> dict[str, Any]:
        """What is known before the response: set at the span's start, where samplers see it."""
        s = semconv
        attributes: dict[str, Any] = {}
        route = self.route
        if route is not None:
            attributes[s.ROUTE] = route.name
            if route.provider is not None:
                attributes[s.GEN_AI_PROVIDER_NAME] = route.provider
            if route.operation is not None:
                attributes[s.GEN_AI_OPERATION_NAME] = route.operation
            if self.request is not None:
                attributes.update(route_labels(route, self.request))
        if self.request_model is not None:
            attributes[s.GEN_AI_REQUEST_MODEL] = self.request_model[: s.MAX_IDENTIFIER_CHARS]
        if self.neighbour is not None:
            attributes[s.GENAI_NEIGHBOUR] = self.neighbour_scope[: s.MAX_CODE_CHARS]
        url = self.url
        if url.host:
            attributes[semconv.SERVER_ADDRESS] = url.host
        attributes[semconv.SERVER_PORT] = url.port or (443 if url.scheme == "https" else 80)
        return attributes

    def learned(self, fields: RequestFields) -> None:
        """What the request body said, read as it was sent rather than before (a proxy streams
        the body on): a body asking for a stream makes the stream expected; its model is named."""
        if self.route is None:
            return
        if self.request_model is None and fields.model is not None:
            self.request_model = fields.model
            if self.span is not None:
                model = fields.model[: semconv.MAX_IDENTIFIER_CHARS]
                self.span.set_attribute(semconv.GEN_AI_REQUEST_MODEL, model)
        if fields.stream and not self.expects_sse:
            # As if known at send: the span starts then, and a failure before the answer ends it.
            self.expects_sse = True
            self._find_neighbour()
            self.span = self.settings.telemetry.start_span(
                self._server_attributes(), context=self.context, start_time=self.start_time
            )

    def __enter__(self) -> Watch:
        """Around the client's send: an expected stream's span is current (so the HTTP client
        span nests under it), an exception before any response ends it, and a client the send
        runs on knows it is not the first to watch this request."""
        self._sending: Token[bool] = _SENDING.set(True)
        self._token = None
        if self.span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self.span, self.context))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
        _SENDING.reset(self._sending)
        if self.span is not None and error is not None:
            self.failed(error)

    def observe(self, response: Any, tap: Tap) -> None:
        """The response headers are in: observe its body if it is a stream. Never raises, but
        strict mode's refusal of a body the client already read.

        A body the client already read (``stream=False``) is observed at once; otherwise
        ``tap(response, observer)``, the client's, installs the tee and returns the body source
        it put in the response, whatever the body is read through (and which the response
        holds): once nothing holds it, nothing can read the body.
        """
        client = self.client
        try:
            headers = client.headers(response)
            if not self.expects_sse and not is_event_stream(headers.get("content-type")):
                return  # most responses: nothing more to look at
            body = client.consumed_body(response)
            observer = self.response(
                client.status(response),
                headers,
                body_decoded=body is not None or not client.taps_coded_body,
            )
            if observer is None:
                return
            if body is None:
                observer.end_when_collected(tap(response, observer))
                return
        except Exception as exc:
            self.contain(exc)
            return
        # The client read the whole body while sending (requests' stream=False): strict mode's
        # refusal, if any, is raised from the send, where the application's read happened.
        observer.feed(body)
        observer.finish()

    def failed(self, error: BaseException, *, reason: str | None = None) -> None:
        """The request raised before any response (connect error, timeout): end the span
        (``reason``: why it was cancelled, when the caller knows)."""
        if self.span is not None:
            observer = StreamObserver(self._start(self._server_attributes()))
            observer.finish(stream_error(error), reason=reason)

    def contain(self, error: Exception) -> None:
        """otelsse itself failed around the send: count it and end the span it started."""
        self.settings.telemetry.count_error(error, "send")
        if self.span is not None and self.span.is_recording():
            observer = StreamObserver(self._start(self._server_attributes()))
            observer.broken = True
            observer.finish()

    def response(
        self,
        status: int,
        headers: Mapping[str, str],
        *,
        body_decoded: bool,
    ) -> StreamObserver | None:
        """The response headers arrived: return the observer for its body, or None.

        ``headers`` is the client's case-insensitive mapping. ``body_decoded`` says whether the
        tap sees the body after content-decoding (else the observer decodes it).
        """
        content_type = headers.get("content-type")
        if not self.expects_sse:
            if not is_event_stream(content_type):
                return None
            self._find_neighbour()
        span_attributes = self._server_attributes()
        span_attributes[semconv.HTTP_RESPONSE_STATUS_CODE] = status
        for name in semconv.REQUEST_ID_HEADERS:
            request_id = headers.get(name)
            if request_id:
                span_attributes[semconv.REQUEST_ID] = _printable(request_id)
                break
        expected = EVENT_STREAM if self.route is None else self.route.media_type
        violation = stream_violation(status, content_type, expected)
        if violation is not None:
            # A streaming route answered with something else (an HTML 502, a JSON 429): the
            # stream failed at its headers; its body is the application's, not a stream.
            wait = retry_after(headers)
            if wait is not None:
                span_attributes[semconv.RETRY_AFTER] = wait
            observer = StreamObserver(self._start(span_attributes, status))
            observer.monitor.refuse(violation)
            observer.finish(None)
            return None
        observer = StreamObserver(self._start(span_attributes, status, strict=True), active=True)
        if not body_decoded:
            observer.decode_as(headers.get("content-encoding"))
        return observer

    def _start(
        self, span_attributes: dict[str, Any], status: int | None = None, *, strict: bool = False
    ) -> StreamStart:
        """What observing this request's stream starts from: its span (started now if the
        request was not expected to stream), the route to read it by, its attributes; and, for
        a body to read (``strict``), strict mode when it is on. A stream refused at its headers
        is the SDK's to raise for: its body is the application's."""
        settings = self.settings
        # A request no route claimed is observed only as SSE: its events will tell.
        route = AUTO if self.route is None else self.route.full_name()  # with its profile
        span = self.span or settings.telemetry.start_span(
            {semconv.ROUTE: route, **span_attributes},
            context=self.context,
            start_time=self.start_time,
        )
        attach = self.neighbour if settings.genai_span == "attach" else None
        return StreamStart(
            telemetry=settings.telemetry,
            limits=settings.limits,
            route=route,
            span=span,
            context=self.context,
            started_at=self.started_at,
            span_attributes=span_attributes,
            status=status,
            request_model=self.request_model,
            request=self.request,
            rpc_id=self.rpc_id,
            owned=self.owned,
            attach_to=attach,
            recorder=settings.recorder,
            strict=self._strict() if strict and self.strict else None,
            pid=self.pid,
        )

    def _strict(self) -> Strict:
        cls = fault_class(self.client)
        return Strict(
            self.strict, lambda report: refusal(cls, report), cuts=self.settings.strict_cuts
        )


def _printable(value: str) -> str:
    return "".join(c for c in value[: semconv.MAX_REQUEST_ID_CHARS] if c.isprintable())
