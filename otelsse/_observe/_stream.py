"""Stream time: observing one stream's body, the same for a client's response, a response an
ASGI app serves and one the proxy relays.

    StreamStart ──> StreamObserver            (the span already started, the route to read by)
    body reads ── StreamObserver.feed(chunk)   (the tee, as the application reads)
    end ── StreamObserver.finish(error)  exactly once: EOF, close, error
           strict mode (``Strict``): feed() or finish() at EOF raises the refusal once the
           verdict is certain and refused; the stream has ended by then
           the body's source collected, or still open at exit ── by _Reaper, off the collector

Everything here is contained: a failure is counted in ``otelsse.instrumentation.errors`` and
what the application reads is left exactly as it was. Strict mode's refusal is the one exception
that reaches the application, on purpose.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from .. import semconv
from .._clients import stream_error
from .._monitor import Limits, Outcome, StreamError, StreamMonitor, StreamReport
from .._telemetry import CallFacts, MetricAttributes, Telemetry, span_attributes
from ..routes import Request, Route, make_adapter
from ._content import ContentDecoder, CorruptContent, UnsupportedEncoding, content_decoder

if TYPE_CHECKING:
    from ..recorder import FlightRecorder, Tape

__all__ = ["StreamObserver", "StreamStart", "Strict"]

#: Reads an observer keeps, each with its clock reading, before replaying them into the monitor
#: at once: running the monitor between every two reads of the application's own code costs
#: about twice what it costs in a run. Bounded by count and by bytes (the memory a stream holds).
DEFERRED_READS = 32
DEFERRED_BYTES = 16 * 1024
#: How long the exit handler waits for the reaper to end the streams queued before it (a span
#: processor exporting synchronously may take a while); then it ends what is left itself.
EXIT_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class Strict:
    """Strict mode for one stream: what it refuses, and how."""

    #: The outcomes refused.
    outcomes: frozenset[Outcome]
    #: The exception to raise in the application's read for a refused stream's report.
    refusal: Callable[[StreamReport], BaseException]
    #: A cut the client library raised for counts as refused too (the proxy, which answers it
    #: in the route's own protocol); in-process, the library's own exception already reaches
    #: the application.
    cuts: bool = False


def route_labels(route: type[Route], request: Request) -> dict[str, str]:
    """``route.labels(request)``, each value cut to what a metric attribute may hold."""
    limit = semconv.MAX_METRIC_VALUE_CHARS
    return {key: value[:limit] for key, value in route.labels(request).items() if value}


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStart:
    """What observing one stream starts from, whoever watched its request."""

    telemetry: Telemetry
    limits: Limits
    #: The route name the monitor reads by (``auto`` to sniff it from the events).
    route: str
    #: The stream's ``otelsse.stream`` span, already started.
    span: Span
    #: The context the span was started in (its parent).
    context: Context
    #: ``perf_counter()`` when the request was sent: the stream's timings count from it.
    started_at: float
    #: Set on the span at its end, with the report's (the observer adds to it).
    span_attributes: dict[str, Any]
    #: The response's HTTP status; None when no response came.
    status: int | None = None
    #: ``gen_ai.request.model`` from the request.
    request_model: str | None = None
    #: What the route was told the request is (``Route.on_request``); None when no route
    #: claimed it (the stream is sniffed).
    request: Request | None = None
    #: The JSON-RPC ``id`` of the request's body, when its route needed it read.
    rpc_id: str | int | None = None
    #: What a GenAI neighbour records for this call (``semconv.NEIGHBOURS``), left to it.
    owned: frozenset[str] = frozenset()
    #: A GenAI neighbour's span to copy otelsse's own attributes onto at the end
    #: (``instrument(genai_span="attach")``).
    attach_to: Span | None = None
    recorder: FlightRecorder | None = None
    #: Strict mode, when on for this stream.
    strict: Strict | None = None
    #: The process the stream belongs to: a forked child ends none of its parent's streams.
    pid: int = dataclasses.field(default_factory=os.getpid)


class StreamObserver:
    """One response's tap target: the monitor, the span, and ending both exactly once."""

    __slots__ = (
        "_active_attributes",
        "_decoder",
        "_deferred",
        "_deferred_at",
        "_deferred_bytes",
        "_finalizer",
        "_now",
        "_parsing",
        "_start",
        "_strict",
        "_tape",
        "_telemetry",
        "_unended",
        "broken",
        "labels",
        "monitor",
        "refused",
        "report",
        "request_model",
    )

    def __init__(self, start: StreamStart, *, active: bool = False) -> None:
        """``active``: counted in ``otelsse.streams.active`` until it ends (a stream refused at
        its headers, or a request that failed before any, never was)."""
        telemetry = start.telemetry
        self._telemetry = telemetry
        self._start = start
        #: ``gen_ai.request.model``; a server's app may name it after its answer began.
        self.request_model = start.request_model
        route = start.route
        adapter = make_adapter(route)
        #: The route's labels of the request (``Route.labels``), for its metric series.
        self.labels: Mapping[str, str] = {}
        if start.request is not None:
            try:
                adapter.on_request(start.request, start.rpc_id)
                self.labels = route_labels(type(adapter), start.request)
            except Exception as exc:
                telemetry.count_error(exc, "route")
        self.monitor = StreamMonitor(adapter, limits=start.limits, started_at=start.started_at)
        self._tape: Tape | None = None
        if start.recorder is not None:
            try:
                self._tape = start.recorder.start(route, start.started_at)
            except Exception as exc:
                telemetry.count_error(exc, "record")
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
        self._strict = start.strict
        #: The stream's report, once it has ended.
        self.report: StreamReport | None = None
        #: Strict mode refused the stream (set as it ends; ``Strict`` says which endings count).
        self.refused = False
        if active:
            self._active_attributes = {semconv.ROUTE: route}
            if semconv.SERVER_ADDRESS in start.span_attributes:
                address = start.span_attributes[semconv.SERVER_ADDRESS]
                self._active_attributes[semconv.SERVER_ADDRESS] = address
            telemetry.stream_started(self._active_attributes)

    def named_model(self, model: str) -> None:
        """The request named its model only once its answer had begun (a server's app reads its
        body when it likes): the span and the metrics carry it all the same."""
        self.request_model = model
        cut = model[: semconv.MAX_IDENTIFIER_CHARS]
        self._start.span_attributes[semconv.GEN_AI_REQUEST_MODEL] = cut

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
                content_encoding, self._feed_decoded, decoded_piece(self._start.limits)
            )
        except UnsupportedEncoding as exc:
            # Counted, and the stream reported as internal_error: its body cannot be judged.
            self._telemetry.count_error(exc, "content_encoding")
            self.broken = True

    def feed(self, chunk: bytes) -> None:
        """The application just read ``chunk``. Never raises, but in strict mode.

        The read is kept with its clock reading and replayed into the monitor with the next
        ones (``DEFERRED_READS``/``DEFERRED_BYTES``) or at the stream's end, whichever comes
        first: timings and outcome are those of feeding each read as it came. In strict mode
        each read is judged as it comes: one that makes a refused fault certain ends the stream
        and raises the refusal instead of handing the read on.
        """
        if not self._unended:
            return
        strict = self._strict
        if strict is not None:
            self._judge_now(chunk, strict)
            return
        deferred = self._deferred
        deferred.append(chunk)
        self._deferred_at.append(time.perf_counter())
        self._deferred_bytes += len(chunk)
        if len(deferred) >= DEFERRED_READS or self._deferred_bytes >= DEFERRED_BYTES:
            undecodable = self._replay()
            if undecodable is not None and self._claim():
                self._end(undecodable, "transport", None)

    def _judge_now(self, chunk: bytes, strict: Strict) -> None:
        """Strict mode's ``feed``: the read judged at once; a refused fault it made certain
        ends the stream and raises."""
        now = time.perf_counter()
        if self._decoder is None and self._tape is None and self._parsing and not self.broken:
            try:  # the common case, without the replay's bookkeeping
                self.monitor.feed(chunk, now)
            except Exception as exc:
                self.broken = True
                self._telemetry.count_error(exc, "feed")
                return
        else:
            self._deferred.append(chunk)
            self._deferred_at.append(now)
            undecodable = self._replay()
            if undecodable is not None:
                if self._claim():
                    self._end(undecodable, "transport", None)
                return
        if self._faulted(strict) and self._claim():
            self._refuse(self._end(now, None, None))

    def _faulted(self, strict: Strict) -> bool:
        """Whether the monitor already has a fault strict mode refuses."""
        if self.broken:
            return False
        try:
            return self.monitor.fault() in strict.outcomes
        except Exception as exc:
            self.broken = True
            self._telemetry.count_error(exc, "feed")
            return False

    def _refuse(self, report: StreamReport | None) -> None:
        """Raise strict mode's refusal of the stream that just ended with ``report``, if it is
        refused."""
        strict = self._strict
        if report is not None and strict is not None and _refused(report, strict):
            raise strict.refusal(report)

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
        """Reading raised ``error`` (which the caller re-raises): end accordingly. Telling what
        ``error`` is never raises into the application's read: a failure to is counted, and the
        stream ends as a lost connection."""
        try:
            ending = stream_error(error)
        except Exception as exc:
            self._telemetry.count_error(exc, "feed")
            ending = "transport"
        self.finish(ending)

    def finish(self, error: StreamError | None = None, *, reason: str | None = None) -> None:
        """End the stream: None at EOF, else how it ended (``reason``: why it was cancelled,
        when the caller knows). Only the first ending counts, whichever thread it comes from.
        In strict mode, a clean EOF with a refused verdict raises the refusal (the application's
        read that met the EOF raises it, before its client can report a clean end)."""
        if self._claim():
            report = self._conclude(time.perf_counter(), error, reason)
            if error is None:
                self._refuse(report)

    def _conclude(
        self, now: float, error: StreamError | None, reason: str | None
    ) -> StreamReport | None:
        """End the claimed stream at ``now``, once the reads it kept are replayed (a read the
        body could not decode ends it there)."""
        if self._deferred and os.getpid() == self._start.pid:
            undecodable = self._replay()
            if undecodable is not None:
                now, error, reason = undecodable, "transport", None
        return self._end(now, error, reason)

    def _end(
        self, now: float, error: StreamError | None, reason: str | None
    ) -> StreamReport | None:
        """End the claimed stream at ``now``: its span, metrics and recording. Returns its
        report (None in a forked child, which ends none of its parent's streams)."""
        _REAPER.forget(self)
        if os.getpid() != self._start.pid:
            # A forked child inherited this stream (and ends it at its exit or collection): its
            # span and metrics are the parent's alone.
            return None
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
        self.report = report
        start = self._start
        attributes = start.span_attributes
        if reason is not None:
            attributes[semconv.CANCEL_REASON] = reason
        strict = self._strict
        if strict is not None and _refused(report, strict):
            self.refused = True
            attributes[semconv.STRICT_RAISED] = True
        if self._tape is not None:
            self._keep_recording(report)
        span = start.span
        if start.attach_to is not None:
            try:
                _attach(start.attach_to, report)
            except Exception as exc:
                telemetry.count_error(exc, "end_span")
        call = CallFacts(
            server_address=attributes.get(semconv.SERVER_ADDRESS),
            request_model=self.request_model,
            labels=self.labels,
            status_code=start.status,
            owned=start.owned,
            context=trace.set_span_in_context(span, start.context),
        )
        telemetry.finish_stream(span, report, attributes, call, self._active_attributes)
        return report

    def _keep_recording(self, report: StreamReport) -> None:
        """Hand the stream's tape to the flight recorder; its id goes on the span."""
        recorder, tape = self._start.recorder, self._tape
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
            self._start.span_attributes[semconv.RECORDING_ID] = recording


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


def _refused(report: StreamReport, strict: Strict) -> bool:
    """Whether strict mode refuses the stream ``report`` tells of: its outcome is refused and
    the stream ended at EOF or at the fault (or, with ``cuts``, at a cut the client raised for)."""
    if report.outcome not in strict.outcomes:
        return False
    return report.error is None or (strict.cuts and report.error == "transport")


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
