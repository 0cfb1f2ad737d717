"""What every client shares: which requests to watch, and one observer per watched response.

    a client's send wrapper ── Settings.watch(client, ...) ──> Watch   (before the request goes out)
    headers ── Watch.observe(response, tap) ──> StreamObserver, installed by the client's tap
    body reads ── StreamObserver.feed(chunk)     (the tee, as the application reads)
    end ── StreamObserver.finish(error)  exactly once: EOF, close, error
           the body's source collected, or still open at exit ── by _Reaper, off the collector

Client-neutral: a response is read only through its ``Client`` (``_client.py``), and a route only
through its ``Route`` declarations.

Everything here is contained: a failure is counted in ``otelsse.instrumentation.errors`` and
the application's request, response and exceptions are left exactly as they were.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, Literal, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span

from .. import semconv
from .._core.http import is_event_stream, may_stream, retry_after, stream_violation
from ..monitor import Limits, Outcome, StreamError, StreamMonitor, StreamReport
from ..routes import AUTO, Request, Route, match_route
from ..telemetry import CallFacts, MetricAttributes, Telemetry, span_attributes
from ._client import Client, RequestFields, stream_error
from ._content import ContentDecoder, CorruptContent, UnsupportedEncoding, content_decoder

if TYPE_CHECKING:
    from ..recorder import FlightRecorder, Tape

__all__ = [
    "URL",
    "GenAISpan",
    "Settings",
    "StreamObserver",
    "Watch",
    "decoded_piece",
    "genai_neighbour",
]

#: What otelsse does beside another instrumentation's GenAI span (``instrument(genai_span=)``):
#: ``beside`` leaves to it what it owns; ``attach`` also copies otelsse's own stream-integrity
#: attributes onto it, when it is still open at the stream's end.
GenAISpan = Literal["beside", "attach"]
#: True while a watched request is being sent (a context variable of its own: cheaper than a
#: value in the OpenTelemetry context, which only a span needs).
_SENDING: ContextVar[bool] = ContextVar("otelsse_sending", default=False)
#: Attribute keys that mark a span as a GenAI call (``gen_ai.system`` before semconv v1.37).
_GENAI_MARKS = (semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME, "gen_ai.system")
#: Reads an observer keeps, each with its clock reading, before replaying them into the monitor
#: at once: running the monitor between every two reads of the application's own code costs
#: about twice what it costs in a run. Bounded by count and by bytes (the memory a stream holds).
DEFERRED_READS = 32
DEFERRED_BYTES = 16 * 1024
#: How long the exit handler waits for the reaper to end the streams queued before it (a span
#: processor exporting synchronously may take a while); then it ends what is left itself.
EXIT_WAIT = 5.0


class URL(Protocol):
    """What the watch needs of a request URL (httpx's ``URL`` has it; see ``_requests.py``); its
    ``str()`` is the whole URL, matched against ``excluded_urls``."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...
    @property
    def scheme(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``instrument()`` was given; shared by every wrapper."""

    telemetry: Telemetry
    limits: Limits = dataclasses.field(default_factory=Limits)
    excluded_urls: re.Pattern[str] | None = None
    genai_span: GenAISpan = "beside"
    recorder: FlightRecorder | None = None

    def begin(self, make: Callable[..., Watch | None], *args: Any) -> Watch | None:
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
        accept: Callable[[], str | None],
    ) -> Watch | None:
        """Decide, before sending, whether this request may be a stream to observe.

        ``url`` is the client's URL object (made text only when needed); ``body`` (the JSON
        body's ``stream`` flag and ``model``) and ``accept`` are asked only for a request on a
        known route. Returns None for an excluded
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
            return Watch(self, client, url, None, False, None)
        fields = body()
        expects_sse = fields.stream or is_event_stream(accept()) or route.always_streams(request)
        model = route.url_model(request) or fields.model
        return Watch(self, client, url, route, expects_sse, model)


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
        "request_model",
        "route",
        "settings",
        "span",
        "start_time",
        "started_at",
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
    ) -> None:
        self.settings = settings
        self.client = client
        self.url = url
        self.route = route
        self.expects_sse = expects_sse
        self.request_model = request_model
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

    def observe(self, response: Any, tap: Callable[[Any, StreamObserver], object]) -> None:
        """The response headers are in: observe its body if it is a stream. Never raises.

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
            if body is not None:
                observer.feed(body)
                observer.finish()
            else:
                observer.end_when_collected(tap(response, observer))
        except Exception as exc:
            self.contain(exc)

    def failed(self, error: BaseException, *, reason: str | None = None) -> None:
        """The request raised before any response (connect error, timeout): end the span
        (``reason``: why it was cancelled, when the caller knows)."""
        if self.span is not None:
            observer = StreamObserver(self, self._route_name(), self._server_attributes())
            observer.finish(stream_error(error), reason=reason)

    def contain(self, error: Exception) -> None:
        """otelsse itself failed around the send: count it and end the span it started."""
        self.settings.telemetry.count_error(error, "send")
        if self.span is not None and self.span.is_recording():
            observer = StreamObserver(self, self._route_name(), self._server_attributes())
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
        route = self._route_name()
        span_attributes = self._server_attributes()
        span_attributes[semconv.HTTP_RESPONSE_STATUS_CODE] = status
        for name in semconv.REQUEST_ID_HEADERS:
            request_id = headers.get(name)
            if request_id:
                span_attributes[semconv.REQUEST_ID] = _printable(request_id)
                break
        violation = stream_violation(status, content_type)
        if violation is not None:
            # A streaming route answered with something else (an HTML 502, a JSON 429): the
            # stream failed at its headers; its body is the application's, not a stream.
            wait = retry_after(headers)
            if wait is not None:
                span_attributes[semconv.RETRY_AFTER] = wait
            observer = StreamObserver(self, route, span_attributes, status=status)
            observer.monitor.refuse(violation)
            observer.finish(None)
            return None
        observer = StreamObserver(self, route, span_attributes, status=status, active=True)
        if not body_decoded:
            observer.decode_as(headers.get("content-encoding"))
        return observer

    def _route_name(self) -> str:
        # A request no route claimed is observed only as SSE: its events will tell.
        return AUTO if self.route is None else self.route.full_name()  # with its profile


def _printable(value: str) -> str:
    return "".join(c for c in value[: semconv.MAX_REQUEST_ID_CHARS] if c.isprintable())


class StreamObserver:
    """One response's tap target: the monitor, the span, and ending both exactly once."""

    __slots__ = (
        "_active_attributes",
        "_decoder",
        "_deferred",
        "_deferred_at",
        "_deferred_bytes",
        "_finalizer",
        "_limits",
        "_now",
        "_parsing",
        "_pid",
        "_span",
        "_span_attributes",
        "_status",
        "_tape",
        "_telemetry",
        "_unended",
        "_watch",
        "broken",
        "monitor",
    )

    def __init__(
        self,
        watch: Watch,
        route: str,
        span_attributes: dict[str, Any],
        *,
        status: int | None = None,
        active: bool = False,
    ) -> None:
        telemetry = watch.settings.telemetry
        self._telemetry = telemetry
        self._watch = watch
        self._status = status
        self._span = watch.span or telemetry.start_span(
            {semconv.ROUTE: route, **span_attributes},
            context=watch.context,
            start_time=watch.start_time,
        )
        self._limits = watch.settings.limits
        self.monitor = StreamMonitor(route, limits=self._limits, started_at=watch.started_at)
        recorder = watch.settings.recorder
        self._tape: Tape | None = None
        if recorder is not None:
            try:
                self._tape = recorder.start(route, watch.started_at)
            except Exception as exc:
                telemetry.count_error(exc, "record")
        self._span_attributes = span_attributes
        self._pid = watch.pid
        self._decoder: ContentDecoder | None = None  # set by decode_as() for coded bodies
        # Reads not yet given to the monitor, and when each arrived (see DEFERRED_READS).
        self._deferred: list[bytes] = []
        self._deferred_at: list[float] = []
        self._deferred_bytes = 0
        self._now = 0.0  # the clock reading of the read being decoded (_feed_decoded)
        # Popped by whichever ending comes first (see _claim): a stream ends exactly once.
        self._unended: list[None] = [None]
        self.broken = False
        # False once the monitor can use no more of a coded body: its parser stopped at a
        # ceiling, so decoding further would only cost.
        self._parsing = True
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._active_attributes: MetricAttributes | None = None
        if active:
            self._active_attributes = {semconv.ROUTE: route}
            if semconv.SERVER_ADDRESS in span_attributes:
                address = span_attributes[semconv.SERVER_ADDRESS]
                self._active_attributes[semconv.SERVER_ADDRESS] = address
            telemetry.stream_started(self._active_attributes)

    def end_when_collected(self, source: object) -> None:
        """End as ``cancelled`` if the application drops the body's ``source`` (with its
        response) without closing it, or if it is still open when the interpreter exits.

        The source, not the response: an application may keep only what it reads (requests'
        ``response.raw``, aiohttp's ``response.content``) and drop the response.
        """
        finalizer = weakref.finalize(source, self._collected)
        # Not weakref's own exit handler: it may run after the SDK's has shut the exporters down
        # (whichever was registered first runs last). The reaper's runs before (see _Reaper).
        finalizer.atexit = False
        self._finalizer = finalizer
        _REAPER.watch(self)

    def _collected(self) -> None:
        """The source's finalizer: the application dropped it. Runs wherever the collection
        struck, so it only claims the stream and hands it to the reaper (see _Reaper)."""
        if self._claim():
            _REAPER.collected(self, time.perf_counter())

    def _end_collected(self, collected_at: float) -> None:
        """End the stream ``_collected`` claimed: cancelled, when it was collected."""
        try:
            self._conclude(collected_at, "cancelled", None)
        except Exception as exc:  # contained like every ending (the reaper's thread goes on)
            self._telemetry.count_error(exc, "finish")

    def _claim(self) -> bool:
        """Take the one right to end this stream: False when an ending took it already. One
        atomic ``list.pop``, no lock, so that a finalizer may call it from inside any lock."""
        try:
            self._unended.pop()
        except IndexError:
            return False
        return True

    def decode_as(self, content_encoding: str | None) -> None:
        """Decode what the tap sees by ``content_encoding`` before the monitor gets it."""
        try:
            self._decoder = content_decoder(
                content_encoding, self._feed_decoded, decoded_piece(self._limits)
            )
        except UnsupportedEncoding as exc:
            # Counted, and the stream reported as internal_error: its body cannot be judged.
            self._telemetry.count_error(exc, "content_encoding")
            self.broken = True

    def feed(self, chunk: bytes) -> None:
        """The application just read ``chunk``. Never raises.

        The read is kept with its clock reading and replayed into the monitor with the next
        ones (``DEFERRED_READS``/``DEFERRED_BYTES``) or at the stream's end, whichever comes
        first: timings and outcome are those of feeding each read as it came.
        """
        if not self._unended:
            return
        deferred = self._deferred
        deferred.append(chunk)
        self._deferred_at.append(time.perf_counter())
        self._deferred_bytes += len(chunk)
        if len(deferred) >= DEFERRED_READS or self._deferred_bytes >= DEFERRED_BYTES:
            undecodable = self._replay()
            if undecodable is not None and self._claim():
                self._end(undecodable, "transport", None)

    def _replay(self) -> float | None:
        """Give the monitor the reads kept so far, each with its own clock reading. Returns the
        clock reading of a read whose content could not be decoded, where the stream ends, or
        None."""
        chunks, times = self._deferred, self._deferred_at
        self._deferred, self._deferred_at, self._deferred_bytes = [], [], 0
        if self.broken or not self._parsing:
            return None
        monitor, tape, decoder = self.monitor, self._tape, self._decoder
        now = 0.0
        try:
            if decoder is None:
                # Every chunk is counted, even once parsing stopped: bytes_received is the
                # application's whole read.
                feed = monitor.feed
                for chunk, now in zip(chunks, times, strict=True):
                    feed(chunk, now)
                    if tape is not None:
                        tape.write(chunk, now)
            else:
                for chunk, now in zip(chunks, times, strict=True):
                    self._now = now
                    decoder.write(chunk)
        except _ParsingStopped:
            self._parsing = False
            self._decoder = None
        except CorruptContent:
            # The peer's fault, not otelsse's: the stream ends at that read, as it does for an
            # application whose client decodes the body and raises.
            return now
        except Exception as exc:
            self.broken = True
            self._telemetry.count_error(exc, "feed")
        return None

    def _feed_decoded(self, piece: bytes) -> None:
        monitor, now = self.monitor, self._now
        monitor.feed(piece, now)
        if self._tape is not None:
            self._tape.write(piece, now)
        # Nothing more is worth decoding once the parser stopped at a ceiling.
        if monitor.stopped:
            raise _ParsingStopped

    def fail(self, error: BaseException) -> None:
        """Reading raised ``error`` (which the caller re-raises): end accordingly."""
        self.finish(stream_error(error))

    def finish(self, error: StreamError | None = None, *, reason: str | None = None) -> None:
        """End the stream: None at EOF, else how it ended (``reason``: why it was cancelled,
        when the caller knows). Only the first ending counts, whichever thread it comes from."""
        if self._claim():
            self._conclude(time.perf_counter(), error, reason)

    def _conclude(self, now: float, error: StreamError | None, reason: str | None) -> None:
        """End the claimed stream at ``now``, once the reads it kept are replayed (a read the
        body could not decode ends it there)."""
        if self._deferred and os.getpid() == self._pid:
            undecodable = self._replay()
            if undecodable is not None:
                now, error, reason = undecodable, "transport", None
        self._end(now, error, reason)

    def _end(self, now: float, error: StreamError | None, reason: str | None) -> None:
        """End the claimed stream at ``now``: its span, metrics and recording."""
        _REAPER.forget(self)
        if os.getpid() != self._pid:
            # A forked child inherited this stream (and ends it at its exit or collection): its
            # span and metrics are the parent's alone.
            return
        telemetry = self._telemetry
        try:
            if self._finalizer is not None:
                self._finalizer.detach()
            report = self.monitor.close(now, error=error)
            if self.broken:
                report = dataclasses.replace(report, outcome=Outcome.INTERNAL_ERROR)
        except Exception as exc:
            telemetry.count_error(exc, "finish")
            report = _internal_error_report(self.monitor)
        watch = self._watch
        attributes = self._span_attributes
        if reason is not None:
            attributes[semconv.CANCEL_REASON] = reason
        if self._tape is not None:
            self._keep_recording(report)
        span = self._span
        if watch.neighbour is not None and watch.settings.genai_span == "attach":
            try:
                _attach(watch.neighbour, report)
            except Exception as exc:
                telemetry.count_error(exc, "end_span")
        call = CallFacts(
            server_address=attributes.get(semconv.SERVER_ADDRESS),
            request_model=watch.request_model,
            status_code=self._status,
            owned=watch.owned,
            context=trace.set_span_in_context(span, watch.context),
        )
        telemetry.finish_stream(span, report, attributes, call, self._active_attributes)

    def _keep_recording(self, report: StreamReport) -> None:
        """Hand the stream's tape to the flight recorder; its id goes on the span."""
        recorder, tape = self._watch.settings.recorder, self._tape
        self._tape = None
        if recorder is None or tape is None:
            return
        try:
            recording = recorder.keep(
                tape,
                report,
                on_prune_failure=lambda exc: self._telemetry.count_error(exc, "record"),
            )
        except Exception as exc:
            self._telemetry.count_error(exc, "record")
            return
        if recording is not None:
            self._span_attributes[semconv.RECORDING_ID] = recording


#: What the reaper's thread is handed: a claimed stream and when its body source was collected,
#: or an event to set once it got there.
_Queued = tuple[StreamObserver, float] | threading.Event


class _Reaper:
    """Ends the streams nobody closes: those whose body source was collected, and at exit those
    still open. One per process, with one thread, started with the first stream.

    A finalizer runs wherever a collection strikes: in any thread, at any allocation, perhaps
    while that thread holds a lock that ending a span takes again (the SDK's metric
    aggregations and span processors hold non-reentrant locks while they allocate). Ending the
    stream there could deadlock, so the finalizer only claims the stream and queues it, on a
    ``SimpleQueue``, whose ``put`` may be called from weakref callbacks; this thread ends it.

    At exit, ``end_all`` ends what is queued and every stream still open, as ``cancelled``,
    before the SDK's own exit handler shuts its exporters down: exit handlers run last
    registered first, and this one is registered again as each stream starts, so it runs before
    that of any provider that existed then. A process forked from this one ends none of the
    streams it inherited (see ``StreamObserver._end``) and starts its own thread when it needs one.
    """

    def __init__(self) -> None:
        #: Streams that may be abandoned, until they end: bounded by the streams open at once.
        self._open: set[StreamObserver] = set()
        self._queue: SimpleQueue[_Queued] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0  # the process the thread runs in
        self._starting = threading.Lock()
        if hasattr(os, "register_at_fork"):  # a lock held at a fork stays held in the child
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._starting = threading.Lock()

    def watch(self, observer: StreamObserver) -> None:
        """``observer``'s stream is open, and ends at its collection or at exit if not before."""
        self._open.add(observer)
        if self._pid != os.getpid():
            self._start()
        atexit.unregister(self.end_all)
        atexit.register(self.end_all)

    def _start(self) -> None:
        with self._starting:
            if self._pid == os.getpid():
                return
            queue: SimpleQueue[_Queued] = SimpleQueue()
            thread = threading.Thread(
                target=self._run, args=(queue,), name="otelsse-reaper", daemon=True
            )
            try:
                thread.start()
            except RuntimeError:  # no thread to be had: collected streams end where collected
                return
            self._queue, self._thread, self._pid = queue, thread, os.getpid()

    def collected(self, observer: StreamObserver, collected_at: float) -> None:
        """``observer``, claimed, lost its body source at ``collected_at``. Safe anywhere."""
        if self._pid == os.getpid():
            self._queue.put((observer, collected_at))
        else:  # no thread in this process: none could start, or a forked child's inherited
            observer._end_collected(collected_at)  # stream (which ends nothing there)

    def forget(self, observer: StreamObserver) -> None:
        """``observer``'s stream is ending."""
        self._open.discard(observer)

    @staticmethod
    def _run(queue: SimpleQueue[_Queued]) -> None:
        while True:
            _end_queued(queue.get())

    def end_all(self) -> None:
        """The interpreter exits: end every stream queued or still open."""
        thread = self._thread
        if self._pid == os.getpid() and thread is not None and thread.is_alive():
            # The thread may be ending one: let it finish what was queued before this marker.
            done = threading.Event()
            self._queue.put(done)
            done.wait(EXIT_WAIT)
        while True:  # what a stuck thread, or one of the parent process, left
            try:
                _end_queued(self._queue.get_nowait())
            except Empty:
                break
        for observer in list(self._open):
            observer.finish("cancelled")


def _end_queued(item: _Queued) -> None:
    if isinstance(item, threading.Event):
        item.set()
    else:
        observer, collected_at = item
        observer._end_collected(collected_at)


_REAPER = _Reaper()


def _attach(neighbour: Span, report: StreamReport) -> None:
    """Copy otelsse's own stream-integrity facts onto a neighbour's GenAI span (never its
    ``gen_ai.*`` ones, nor its status): only while it is open."""
    if neighbour.is_recording():
        facts = span_attributes(report)
        neighbour.set_attributes(
            {key: value for key, value in facts.items() if key.startswith("otelsse.")}
        )


class _ParsingStopped(Exception):
    """Raised through a content decoder to stop it: the monitor takes no more."""


def decoded_piece(limits: Limits) -> int:
    """The most a content decoder hands the monitor at once: a piece just past the parser's
    ceilings is enough to reach them, and above 64 KiB a piece only costs memory."""
    return min(64 * 1024, max(limits.max_line_bytes, limits.max_event_bytes) + 1)


def _internal_error_report(monitor: StreamMonitor) -> StreamReport:
    """What can still be said of a stream whose monitor failed: its counts, and that it failed."""
    return StreamReport(
        route=monitor.route,
        outcome=Outcome.INTERNAL_ERROR,
        chunk_count=monitor.chunk_count,
        bytes_received=monitor.bytes_received,
        event_count=monitor.event_count,
    )
