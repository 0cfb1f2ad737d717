"""The stream monitor: bytes in, one ``StreamReport`` with one ``Outcome`` out.

    StreamMonitor.feed(chunk, now)  -> framer (the route's) -> route adapter -> StreamState
    StreamMonitor.close(now, error) -> StreamReport

Sans-IO: the monitor reads no clock (timestamps are passed in, so tests are deterministic),
performs no I/O and imports nothing outside the standard library and this package.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ._core.events import SSEEvent
from ._core.framers import FRAMERS
from ._core.framing import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES
from ._core.http import StreamViolation
from ._core.state import SERVER, StreamState
from ._exceptions import ParserClosedError
from .routes import Route, make_adapter

__all__ = [
    "VIOLATION_OUTCOMES",
    "Limits",
    "Outcome",
    "StreamError",
    "StreamMonitor",
    "StreamReport",
]

#: How a stream ended when it did not end at a clean EOF: the connection was lost, the client's
#: read deadline fired, or the application stopped reading. Each client module maps its own
#: exceptions onto these.
StreamError = Literal["transport", "timeout", "cancelled"]

# A shape the route did not expect (a missing key, a string where an object belongs) raises one
# of these inside an adapter; the event is then a payload error, never an exception for the app.
_SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError, IndexError)


class Outcome(str, enum.Enum):
    """How a stream ended; exactly one per stream (a public contract: docs/users/outcomes.md)."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    TRUNCATED = "truncated"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PROVIDER_ERROR = "provider_error"
    PROTOCOL_ERROR = "protocol_error"
    DECODE_ERROR = "decode_error"
    PAYLOAD_ERROR = "payload_error"
    BUFFER_LIMIT = "buffer_limit"
    EOF_UNVERIFIED = "eof_unverified"
    TERMINAL_MISSING = "terminal_missing"
    INTERNAL_ERROR = "internal_error"
    RATE_LIMITED = "rate_limited"
    HTTP_ERROR = "http_error"

    def __str__(self) -> str:
        return self.value


#: How a response that failed the route's HTTP contract at its headers ends (``_core.http``).
VIOLATION_OUTCOMES: Mapping[StreamViolation, Outcome] = {
    "rate_limited": Outcome.RATE_LIMITED,
    "http_status": Outcome.HTTP_ERROR,
    "no_content": Outcome.PROTOCOL_ERROR,
    "media_type": Outcome.PROTOCOL_ERROR,
}


@dataclass(frozen=True, slots=True)
class Limits:
    """Ceilings on everything the monitor holds for one stream.

    Breaching one stops parsing with outcome ``buffer_limit``; in observe mode the application's
    stream is never affected.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    #: Characters of one tool call's accumulated arguments.
    max_tool_argument_chars: int = 8 * 1024 * 1024
    #: Tool calls in one stream.
    max_tool_calls: int = 1024
    #: Characters of text kept by the enforcing reader (observe mode keeps none).
    max_text_chars: int = 64 * 1024 * 1024
    #: Distinct choices, content blocks or output items in one stream (each costs state).
    max_parts: int = 1024
    #: Events in one stream; None for no ceiling. Events cost time, not memory, so observe mode
    #: has none; an enforcing reader facing an untrusted peer sets one (stage ``events``).
    max_events: int | None = None


@dataclass(frozen=True, slots=True)
class StreamReport:
    """Everything the core knows about one finished stream. Never holds content.

    Times are in seconds, computed from the ``now`` values given to the monitor; None where no
    timestamp was given or the moment never came. Every field but the route and the outcome has
    a default, so a report of a stream nothing is known about is one line.
    """

    route: str
    outcome: Outcome
    #: The route's host profile (a named variant of its contract), None for the contract itself.
    route_profile: str | None = None
    terminal_seen: bool = False
    stop_reason: str | None = None
    finish_reasons: tuple[str, ...] = ()
    chunk_count: int = 0
    bytes_received: int = 0
    decoded_char_count: int = 0
    event_count: int = 0
    comment_count: int = 0
    unknown_event_count: int = 0
    pending_line_chars: int = 0
    pending_event_chars: int = 0
    discarded_event: bool = False
    open_accumulator_count: int = 0
    tool_call_count: int = 0
    tool_call_invalid_count: int = 0
    #: Calls the provider ran itself (web search, code execution, MCP); not in ``tool_call_count``.
    server_tool_call_count: int = 0
    #: The model refused (OpenAI ``refusal``, Anthropic ``stop_reason: refusal``).
    refusal: bool = False
    buffer_limit_stage: str | None = None
    decode_error_count: int = 0
    provider_error_code: str | None = None
    error: StreamError | None = None
    time_to_first_byte: float | None = None
    time_to_first_event: float | None = None
    #: To the read that brought the first piece of model output (text, reasoning, refusal, a
    #: client tool call or its arguments): the time to first token a user waits for.
    time_to_first_output: float | None = None
    #: Mean time between pieces of output after the first; None with fewer than two.
    time_per_output_chunk: float | None = None
    #: Pieces of model output (``time_to_first_output`` says what counts).
    output_delta_count: int = 0
    max_inter_event_gap: float | None = None
    duration: float | None = None
    provider_name: str | None = None
    #: ``gen_ai.operation.name`` of the route's calls.
    operation_name: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    anomalies: Mapping[str, int] = field(default_factory=dict)


class StreamMonitor:
    """Watches one streamed response: ``feed(chunk, now)`` as bytes arrive, then ``close()``.

    Args:
        route: a route name (see ``otelsse.routes.route_names()``; ``"auto"`` sniffs the
            contract from the first events), a ``Route`` class, or a fresh ``Route`` instance.
        limits: ceilings on every buffer; ``Limits()`` when None.
        started_at: when the request was sent, in the same clock as the ``now`` values; times
            are measured from it. Defaults to the first ``now`` given.
        collect_text: keep text deltas in memory (the enforcing reader does; observe mode not).
        stop_at_end: stop parsing right after the route's last event (its terminal, or a fatal
            error), as if the bytes had ended there; ``ended`` then says so. The enforcing
            reader stops reading there; observe mode judges whatever the application reads.

    Raises:
        KeyError: unknown route name.
        ParserClosedError: ``feed()`` or ``close()`` after ``close()``.
    """

    __slots__ = (
        "_adapter",
        "_closed",
        "_first_byte_at",
        "_first_event_at",
        "_first_output_at",
        "_headers_refused",
        "_last_event_at",
        "_last_output_at",
        "_max_events",
        "_max_gap",
        "_on_event",
        "_parser",
        "_simple",
        "_started_at",
        "_state",
        "_stop_at_end",
        "bytes_received",
        "chunk_count",
        "event_count",
    )

    def __init__(
        self,
        route: str | type[Route] | Route = "generic",
        *,
        limits: Limits | None = None,
        started_at: float | None = None,
        collect_text: bool = False,
        stop_at_end: bool = False,
    ) -> None:
        limits = limits or Limits()
        self._adapter = route if isinstance(route, Route) else make_adapter(route)
        self._on_event = self._adapter.on_event
        # The framer of the media type the route's streams have (SSE, AWS event stream).
        self._parser = FRAMERS[self._adapter.media_type](
            max_line_bytes=limits.max_line_bytes, max_event_bytes=limits.max_event_bytes
        )
        self._state = StreamState(
            collect_text=collect_text,
            max_tool_chars=limits.max_tool_argument_chars,
            max_tool_calls=limits.max_tool_calls,
            max_text_chars=limits.max_text_chars,
            max_parts=limits.max_parts,
        )
        self._started_at = started_at
        self._stop_at_end = stop_at_end
        self._max_events = limits.max_events
        # Neither an event ceiling nor a stop at the end: a read of one event takes a short cut.
        self._simple = limits.max_events is None and not stop_at_end
        self._first_byte_at: float | None = None
        self._first_event_at: float | None = None
        self._last_event_at: float | None = None
        self._first_output_at: float | None = None
        self._last_output_at: float | None = None
        self._max_gap: float | None = None
        self._headers_refused: Outcome | None = None
        self._closed = False
        self.chunk_count = 0
        self.bytes_received = 0
        self.event_count = 0

    @property
    def state(self) -> StreamState:
        """What the route has established so far (for the enforcing reader)."""
        return self._state

    @property
    def terminal_seen(self) -> bool:
        """The route's terminal event has arrived."""
        return self._state.terminal_seen

    @property
    def stopped(self) -> bool:
        """Parsing stopped at a ceiling: later bytes are counted, never parsed."""
        return self._parser.limit_exceeded is not None

    @property
    def ended(self) -> bool:
        """With ``stop_at_end``: the route's last event has arrived and parsing stopped there."""
        return self._parser.ended

    @property
    def route(self) -> str:
        """The route name; for ``"auto"``, the contract sniffed so far (``generic`` until then)."""
        return self._adapter.resolved().name

    @property
    def route_class(self) -> type[Route]:
        """The route judging the stream; for ``"auto"``, the one sniffed so far."""
        return type(self._adapter.resolved())

    def feed(self, chunk: bytes, now: float | None = None) -> list[SSEEvent]:
        """Take the next bytes as the application read them; return the events they completed.

        Never raises on bad input: whatever the bytes are, they end up in the report.
        """
        # The parser raises ParserClosedError after close(), and returns nothing once stopped.
        events = self._parser.feed(chunk)
        if not chunk:
            return events
        self.chunk_count += 1
        self.bytes_received += len(chunk)
        if now is not None and self._first_byte_at is None:
            self._first_byte_at = now
            if self._started_at is None:
                self._started_at = now
        if not events:
            return events
        if len(events) == 1 and self._simple:
            state = self._state
            outputs = state.output_deltas
            # One read, one event (the live token stream), in observe mode: the loop below
            # without the ceilings and the stop that only the enforcing reader sets.
            state.event = event = events[0]
            try:
                self._on_event(event, state)
            except _SHAPE_ERRORS:
                state.payload_invalid()
            if state.limit_stage is not None:
                self._parser.stop(state.limit_stage, events_used=1)
            self._parser.judged()
            self.event_count += 1
            if now is not None:
                self._clock(now, state.output_deltas > outputs)
            return events
        return self._judge(events, now)

    def _judge(self, events: list[SSEEvent], now: float | None) -> list[SSEEvent]:
        """Let the route read the events one read completed, within the ceilings and up to
        the route's end; return those it read."""
        state = self._state
        outputs = state.output_deltas
        max_events = self._max_events
        usable = len(events)
        breached = max_events is not None and self.event_count + usable > max_events
        if breached and max_events is not None:
            # Parsing stops right after the first event past the ceiling (so that where it
            # stops does not depend on the chunking), and that event is not judged.
            usable = max_events - self.event_count
            events = events[:usable]
        self.event_count += usable
        on_event, adapter = self._on_event, self._adapter
        # Only the enforcing reader stops at the route's end: observe mode pays nothing.
        stop_at_end = self._stop_at_end and not adapter.resolved().ended
        handled = 0
        for handled, event in enumerate(events, 1):
            state.event = event
            try:
                on_event(event, state)
            except _SHAPE_ERRORS:
                state.payload_invalid()
            if state.limit_stage is not None:
                # A route's ceiling stops parsing at this event, as if the read ended here:
                # the events after it are not judged, however the bytes were chunked.
                self._parser.stop(state.limit_stage, events_used=handled)
                break
            if stop_at_end and adapter.resolved().ended:
                self._parser.end_after(handled)
                break
        else:
            if breached:
                self._parser.stop("events", events_used=usable + 1)
        self._parser.judged()
        if handled < usable:
            self.event_count -= usable - handled
            events = events[:handled]
        if now is not None and events:
            self._clock(now, state.output_deltas > outputs)
        return events

    def _clock(self, now: float, output: bool) -> None:
        """A read completed events at ``now`` (and brought model output, if ``output``)."""
        last = self._last_event_at
        if last is None:
            self._first_event_at = now
        elif self._max_gap is None or now - last > self._max_gap:
            self._max_gap = now - last
        self._last_event_at = now
        if output:
            if self._first_output_at is None:
                self._first_output_at = now
            self._last_output_at = now

    def refuse(self, violation: StreamViolation) -> None:
        """The response failed the route's HTTP contract at its headers (``stream_violation``):
        its outcome is decided here, whatever else the monitor is told."""
        outcome = VIOLATION_OUTCOMES[violation]
        if outcome is Outcome.PROTOCOL_ERROR:
            self._state.protocol_violation(violation)
        else:
            self._headers_refused = outcome

    def close(self, now: float | None = None, *, error: StreamError | None = None) -> StreamReport:
        """Declare the end of the stream and return its report.

        Args:
            now: the time the stream ended.
            error: None for a clean EOF; ``"transport"`` (connection lost), ``"timeout"`` (the
                client's read deadline fired) or ``"cancelled"`` (the application stopped
                reading) when it ended otherwise.

        In observe mode (``collect_text`` False) the application reads the bytes itself, so
        when it stops reading, the pending event whose lines have all ended has been read by
        it (a line-based client acts on ``data: [DONE]`` as its line ends) and is judged as
        received; and a stream it closes after the route said its answer was finished
        (``answer_finished``) is judged by its stop reason, not ``cancelled``. The enforcing
        reader hands out only what it accepted, so neither applies to it.
        """
        if self._closed:
            raise ParserClosedError("close() after close()")
        parser, state = self._parser, self._state
        if error == "cancelled" and not state.collect_text:
            pending = parser.dispatch_pending()
            if pending:
                self._judge(pending, now)
        self._closed = True
        parser.close()
        if state.limit_stage is None:
            state.limit_stage = parser.limit_exceeded
        if state.limit_stage is None:
            self._adapter.on_close(state)
        adapter = self._adapter.resolved()
        # A call the provider ran itself is counted apart; its arguments are judged all the same
        # (a broken argument stream is a broken stream), so the outcome weighs every call.
        client_calls = [call for call in state.tool_calls if call.kind != SERVER]
        server_tools = len(state.tool_calls) - len(client_calls)
        invalid_tools = sum(1 for call in client_calls if call.closed and not call.valid)
        open_tools = sum(1 for call in client_calls if not call.closed)
        unusable = sum(1 for call in state.tool_calls if not call.valid)
        outcome = self._classify(error, adapter, unusable)
        start = self._started_at
        first_event = self._first_event_at
        outputs = state.output_deltas
        first_output, last_output = self._first_output_at, self._last_output_at
        per_output: float | None = None
        if outputs > 1 and first_output is not None and last_output is not None:
            per_output = (last_output - first_output) / (outputs - 1)
        return StreamReport(
            route=adapter.name,
            outcome=outcome,
            route_profile=adapter.profile,
            terminal_seen=state.terminal_seen,
            stop_reason=state.stop_reason,
            finish_reasons=tuple(state.finish_reasons),
            chunk_count=self.chunk_count,
            bytes_received=self.bytes_received,
            decoded_char_count=parser.decoded_chars,
            event_count=self.event_count,
            comment_count=parser.comment_count,
            unknown_event_count=state.unknown_count,
            pending_line_chars=parser.pending_line_chars,
            pending_event_chars=parser.pending_event_chars,
            discarded_event=parser.discarded_event,
            open_accumulator_count=open_tools,
            tool_call_count=len(client_calls),
            tool_call_invalid_count=invalid_tools,
            server_tool_call_count=server_tools,
            refusal=state.refused,
            buffer_limit_stage=state.limit_stage,
            decode_error_count=parser.decode_error_count,
            provider_error_code=state.error_code,
            error=error,
            time_to_first_byte=_since(start, self._first_byte_at),
            time_to_first_event=_since(start, first_event),
            time_to_first_output=_since(start, first_output),
            time_per_output_chunk=per_output,
            output_delta_count=outputs,
            max_inter_event_gap=self._max_gap
            if self._max_gap is not None
            else (0.0 if first_event is not None else None),
            duration=_since(start, now),
            provider_name=adapter.provider,
            operation_name=adapter.operation,
            response_model=state.response_model,
            response_id=state.response_id,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            anomalies=dict(state.anomalies),
        )

    def fault(self) -> Outcome | None:
        """The error the stream already has, whatever bytes come next (strict mode raises at
        the read that made it certain), or None.

        The first rules of ``close()``'s order: each is a fact no later byte undoes, so a stream
        with one never ends accepted (a later byte may only find a fault ranked above it).
        """
        state = self._state
        unusable_tools = 0
        if state.terminal_seen or state.answer_done:
            unusable_tools = sum(1 for call in state.tool_calls if not call.valid)
        return self._fault(unusable_tools)

    def _fault(self, unusable_tools: int) -> Outcome | None:
        """The first rules of the outcome's order: the faults a stream cannot outgrow."""
        state, parser = self._state, self._parser
        if self._headers_refused is not None:
            return self._headers_refused
        if state.limit_stage is not None or parser.limit_exceeded is not None:
            return Outcome.BUFFER_LIMIT
        if state.protocol_error:
            return Outcome.PROTOCOL_ERROR
        if state.payload_error:
            return Outcome.PAYLOAD_ERROR
        if state.provider_error_seen:
            return Outcome.RATE_LIMITED if state.rate_limited else Outcome.PROVIDER_ERROR
        # Invalid arguments, or a call still open, under a success stop are a payload bug (the
        # enforcing reader refuses them too); under length/max_tokens they are the expected
        # shape of a cut-off answer, reported as incomplete below.
        answered = state.terminal_seen or state.answer_done
        if unusable_tools and answered and state.stop_success is not False:
            return Outcome.PAYLOAD_ERROR
        if parser.decode_error_count:
            return Outcome.DECODE_ERROR
        return None

    def _classify(self, error: StreamError | None, adapter: Route, unusable_tools: int) -> Outcome:
        """The one outcome, first match wins (the order docs/users/outcomes.md gives)."""
        fault = self._fault(unusable_tools)
        if fault is not None:
            return fault
        state, parser = self._state, self._parser
        pending = parser.discarded_event or parser.pending_line_chars > 0
        if pending or not state.terminal_seen:
            if error == "timeout":
                return Outcome.TIMEOUT
            if error == "cancelled":
                # Closed after the answer ended (the terminal event, which carries no content,
                # unread): judged by its stop below; before that, the answer was abandoned.
                if not (state.answer_done and not state.collect_text):
                    return Outcome.CANCELLED
            elif error is None and not pending:
                # A clean EOF at an event boundary: the answer is whole but its end marker is
                # missing (a server that never sends it, or a cut just before it: the same
                # bytes), or the route knows no terminal at all.
                if state.answer_done:
                    return Outcome.TERMINAL_MISSING
                if not adapter.has_terminal:
                    return Outcome.EOF_UNVERIFIED
                return Outcome.TRUNCATED
            else:
                return Outcome.TRUNCATED
        if state.stop_success is False:
            return Outcome.INCOMPLETE
        return Outcome.COMPLETE


def _since(start: float | None, moment: float | None) -> float | None:
    if start is None or moment is None:
        return None
    return max(0.0, moment - start)
