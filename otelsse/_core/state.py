"""What a route tells the monitor about one stream: ``StreamState`` and its tool-call accumulators.

A route (``otelsse.routes.Route``) turns provider envelopes into calls on ``StreamState``, the
vocabulary every route shares:

    part_open        open_part(key) for a new choice, content block or output index
    text_delta       text(key, chunk, reasoning=...)
    refusal          refusal(key, chunk), or refused_without_text() for a refusal stop
    item_open        open_tool(call_id, name, empty_means=..., kind=...) -> ToolCall
    tool_args_delta  tool_args(call, fragment)
    item_close       close_tool(call, parsed=..., whole=...)
    usage            usage(input_tokens, output_tokens)
    identity         identify(model, response_id)
    stop             stop(reason, success)
    answer finished  answer_finished(): every part has its final stop, nothing is open; only
                     the route's terminal event (``[DONE]``, ``message_stop``) may still come
    terminal         terminal()
    error            provider_error(code)
    keepalive        nothing to record (the event is counted like any other)
    unknown          unknown()

plus ``payload_invalid()`` and ``protocol_violation(name)`` for input the route cannot accept
(including values of the wrong JSON type: text and argument fragments must be strings, keys
integers),
and ``anomaly(name)`` for oddities that are counted but do not change the outcome. The monitor
reads the state at the end of the stream to decide its outcome.

Calls are direct method calls rather than signal objects: one event may produce several of them
and this is the hot path.
"""

from __future__ import annotations

from typing import Any

from .events import SSEEvent
from .json import JSONDecodeError, has_trailing_data, loads

__all__ = [
    "CUSTOM", "FUNCTION", "INVALID_JSON", "SERVER", "TRAILING_DATA", "StreamState", "ToolCall",
]  # fmt: skip

# How an accumulated argument string is judged.
_UNCHECKED = 0
_VALID = 1
_INVALID = 2

#: A call the application is asked to run, its arguments one JSON value.
FUNCTION = "function"
#: A call the application is asked to run, its input free text (OpenAI ``custom_tool_call``).
CUSTOM = "custom"
#: A call the provider runs itself (web search, code execution, MCP): never the application's.
SERVER = "server"

#: Why a call's arguments are not one JSON value: not JSON at all, or one value and more after
#: it (trailing data, including argument bytes sent after the call closed).
INVALID_JSON = "invalid_json"
TRAILING_DATA = "trailing_data"


def _utf8_len(text: str) -> int:
    # JSON strings may hold lone surrogates ("\\ud800"): counted, never an error.
    return len(text.encode("utf-8", "surrogatepass"))


class ToolCall:
    """Argument fragments of one tool call, keyed by the provider's own identity in the adapter."""

    __slots__ = (
        "_closed_as", "arguments", "byte_count", "call_id", "closed", "closed_by", "empty_means",
        "fragments", "kind", "name", "problem", "response_id", "size", "verdict",
    )  # fmt: skip

    def __init__(
        self, call_id: str | None, name: str | None, empty_means: Any, kind: str = FUNCTION
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.kind = kind
        self.fragments: list[str] = []
        self.size = 0
        self.closed = False
        #: The SSE event type of the event that closed the call (its item's terminal event).
        self.closed_by: str | None = None
        #: The response's id as the call closed; None if it had not arrived by then.
        self.response_id: str | None = None
        # What empty arguments mean: Anthropic's ``input`` from content_block_start, else None
        # (a fresh ``{}``: no arguments).
        self.empty_means = empty_means
        # The parsed arguments once the call closed with valid JSON.
        self.arguments: Any = None
        self.verdict = _UNCHECKED
        #: Why the arguments are not valid: ``INVALID_JSON`` or ``TRAILING_DATA``; else None.
        self.problem: str | None = None
        # UTF-8 bytes of the closed call's argument text (counted when text is collected, for
        # the reader and the gate); None when it came as an object.
        self.byte_count: int | None = None
        # (valid, arguments, problem) as the call closed, kept once bytes came after its close.
        self._closed_as: tuple[bool, Any, str | None] | None = None

    @property
    def valid(self) -> bool:
        return self.verdict == _VALID

    def as_closed(self) -> tuple[bool, Any, str | None]:
        """Whether the arguments were one JSON value, the arguments and their problem as the call
        closed, whatever bytes came after: what a decision taken at its item's end saw, however
        the stream was read (the later bytes make the call trailing data from then on)."""
        if self._closed_as is not None:
            return self._closed_as
        return self.valid, self.arguments, self.problem

    def buffered_bytes(self) -> int | None:
        """UTF-8 bytes of the arguments received: the whole text once closed, else so far."""
        if self.closed:
            return self.byte_count
        return sum(_utf8_len(fragment) for fragment in self.fragments)


class StreamState:
    """Everything a route has established about one stream so far (the vocabulary above).

    Ceilings (``max_tool_chars`` per call, ``max_tool_calls``, ``max_text_chars`` of kept text,
    ``max_parts`` distinct choices, blocks or outputs) come from the monitor's ``Limits``;
    breaching one sets ``limit_stage`` and parsing stops. Everything a stream adds to the state
    is bounded by one of them.
    ``collect_text`` is False in observe mode: text is then counted by nobody and kept nowhere.
    """

    __slots__ = (
        "anomalies",
        "answer_done",
        "collect_text",
        "error_code",
        "event",
        "finish_reasons",
        "input_tokens",
        "limit_stage",
        "max_parts",
        "max_text_chars",
        "max_tool_calls",
        "max_tool_chars",
        "output_deltas",
        "output_tokens",
        "part_count",
        "payload_error",
        "protocol_error",
        "provider_error_seen",
        "rate_limited",
        "reasoning",
        "refusals",
        "refused",
        "response_id",
        "response_model",
        "stop_reason",
        "stop_success",
        "terminal_seen",
        "text_chars",
        "texts",
        "tool_calls",
        "unknown_count",
    )

    def __init__(
        self,
        *,
        collect_text: bool,
        max_tool_chars: int,
        max_tool_calls: int,
        max_text_chars: int,
        max_parts: int = 1024,
    ) -> None:
        self.collect_text = collect_text
        self.max_tool_chars = max_tool_chars
        self.max_tool_calls = max_tool_calls
        self.max_text_chars = max_text_chars
        self.max_parts = max_parts
        #: The event being interpreted (set by the monitor before the route reads it).
        self.event: SSEEvent | None = None
        self.part_count = 0
        self.texts: dict[int, list[str]] = {}
        self.reasoning: dict[int, list[str]] = {}
        # Refusal text is kept apart: it is not the answer.
        self.refusals: dict[int, list[str]] = {}
        self.refused = False
        self.text_chars = 0
        #: Pieces of model output so far: non-empty text, reasoning or refusal deltas, client
        #: tool calls opened and argument fragments (what "time to first token" waits for).
        self.output_deltas = 0
        self.tool_calls: list[ToolCall] = []
        self.terminal_seen = False
        #: The route said the answer is whole before its terminal event (``answer_finished``).
        self.answer_done = False
        self.stop_reason: str | None = None
        # None until a stop is declared; then whether the route counts it as success.
        self.stop_success: bool | None = None
        self.finish_reasons: list[str] = []
        self.provider_error_seen = False
        #: The provider's error in the stream was its throttling of the caller (the quota an
        #: HTTP 429 reports at the headers).
        self.rate_limited = False
        self.error_code: str | None = None
        self.payload_error = False
        self.protocol_error = False
        self.limit_stage: str | None = None
        self.unknown_count = 0
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.response_model: str | None = None
        self.response_id: str | None = None
        self.anomalies: dict[str, int] = {}

    # -- parts and text -----------------------------------------------------------------------

    def open_part(self, key: Any) -> bool:
        """Admit a choice, content block or output index the route has not seen before.

        False when it cannot be admitted: a key that is not an integer (a payload error), or
        one part more than ``max_parts`` (a ceiling). The route then ignores what it keys.
        """
        if type(key) is not int:
            self.payload_error = True
            return False
        self.part_count += 1
        if self.part_count > self.max_parts:
            self.limit_stage = self.limit_stage or "accumulator"
            return False
        return True

    def close_part(self) -> None:
        """A part closed for good (its key is never reused): it no longer counts against
        ``max_parts``, which then bounds the parts open at once (a contract that opens a block
        per delta, Nova's, has no other bound on them)."""
        self.part_count -= 1

    def text(self, key: int, chunk: Any, reasoning: bool = False) -> None:
        # Judged in observe mode too, so that the monitor and the reader agree.
        if type(chunk) is not str:
            self.payload_error = True
            return
        if chunk:
            self.output_deltas += 1
        if self.collect_text:
            self._keep(self.reasoning if reasoning else self.texts, key, chunk)

    def refusal(self, key: int, chunk: Any) -> None:
        """Refusal text: the model declined. Kept apart from the answer, never mixed into it."""
        if type(chunk) is not str:
            self.payload_error = True
            return
        self.refused = True
        if chunk:
            self.output_deltas += 1
        if self.collect_text:
            self._keep(self.refusals, key, chunk)

    def refused_without_text(self) -> None:
        """The provider says the model refused (a stop reason), with no refusal text."""
        self.refused = True

    def _keep(self, store: dict[int, list[str]], key: int, chunk: str) -> None:
        self.text_chars += len(chunk)
        if self.text_chars > self.max_text_chars:
            self.limit_stage = self.limit_stage or "text"
            return
        parts = store.get(key)
        if parts is None:
            store[key] = [chunk]
        else:
            parts.append(chunk)

    # -- tool calls -------------------------------------------------------------------------

    def open_tool(
        self, call_id: Any, name: Any, empty_means: Any = None, kind: str = FUNCTION
    ) -> ToolCall:
        """A new call; ``kind`` is ``FUNCTION``, ``CUSTOM`` (free-text input) or ``SERVER``."""
        if not (call_id is None or type(call_id) is str) or not (name is None or type(name) is str):
            self.payload_error = True
            call_id = name = None
        call = ToolCall(call_id, name, empty_means, kind)
        if kind != SERVER:
            self.output_deltas += 1
        if len(self.tool_calls) >= self.max_tool_calls:
            self.limit_stage = self.limit_stage or "accumulator"
            return call  # counted nowhere: parsing is over once a ceiling is hit
        self.tool_calls.append(call)
        return call

    def tool_args(self, call: ToolCall, fragment: Any) -> None:
        if type(fragment) is not str:
            self.payload_error = True
            return
        if not fragment:
            return
        self.output_deltas += 1
        if call.closed:
            # Seed 001: bytes after a call closed are trailing data, so its arguments are not
            # exactly one value any more, whatever the first value was.
            if call._closed_as is None:
                call._closed_as = call.as_closed()
            call.verdict = _INVALID
            call.arguments = None
            call.problem = TRAILING_DATA
            self.anomaly("arguments_after_close")
            return
        call.size += len(fragment)
        if call.size > self.max_tool_chars:
            self.limit_stage = self.limit_stage or "accumulator"
            call.fragments = []
            return
        call.fragments.append(fragment)

    def close_tool(self, call: ToolCall, parsed: Any = None, *, whole: str | None = None) -> None:
        """Close a call and judge its arguments: exactly one JSON value (a ``CUSTOM`` call's input
        is text and is not judged).

        ``parsed`` is for providers that send arguments already as a JSON object (Gemini);
        ``whole`` is the complete argument string when no fragments were streamed.
        """
        if call.closed:
            return
        call.closed = True
        call.response_id = self.response_id
        if self.event is not None:
            call.closed_by = self.event.event
        if parsed is not None:
            call.arguments, call.verdict = parsed, _VALID
            return
        if not (whole is None or type(whole) is str):
            self.payload_error = True
            whole = None
        text = "".join(call.fragments) if call.fragments else (whole or "")
        call.fragments = []
        if self.collect_text:  # only the reader and the tool gate report it
            call.byte_count = _utf8_len(text)
        if call.kind == CUSTOM:
            call.arguments, call.verdict = text, _VALID
            return
        if not text.strip():
            # No argument text is a call without arguments, on every route: Anthropic streams
            # an empty ``partial_json`` for one (its ``input`` from ``content_block_start``
            # stands), and OpenAI-compatible servers send ``""`` for a tool that takes no
            # parameters. Whether the tool accepts none is its schema's to say (reader, gate).
            empty = call.empty_means
            call.arguments, call.verdict = ({} if empty is None else empty), _VALID
            return
        try:
            call.arguments, call.verdict = loads(text), _VALID
        except JSONDecodeError:
            call.verdict = _INVALID
            call.problem = TRAILING_DATA if has_trailing_data(text) else INVALID_JSON

    # -- the rest of the vocabulary -----------------------------------------------------------

    def stop(self, reason: str, success: bool) -> None:
        if len(self.finish_reasons) < self.max_parts:
            self.finish_reasons.append(reason)
        # The worst stop wins: one non-success choice makes the stream non-success.
        if self.stop_success is None or (self.stop_success and not success):
            self.stop_reason, self.stop_success = reason, success

    def final_stop(self, reason: str, success: bool, *, open_parts: bool) -> None:
        """The answer's one final stop, in a contract whose parts must all close before it
        (Anthropic's ``message_delta``, Bedrock's ``messageStop``): a part still open is a
        protocol error under a success stop, and an anomaly under another (a cut-off answer's
        expected shape); with none open, the answer is finished."""
        if open_parts:
            if success:
                self.protocol_violation("stop_with_open_block")
            else:
                self.anomaly("block_open_at_stop")
        self.stop(reason, success)
        if not open_parts:
            self.answer_finished()

    def answer_finished(self) -> None:
        """Every part of the answer has its final stop and nothing is open: what is left of the
        contract is its terminal event, which carries no content. A stream that ends cleanly
        here is ``terminal_missing``, not ``truncated``; one the application closes here
        stopped after the answer ended, not in the middle of it."""
        self.answer_done = True

    def terminal(self) -> None:
        self.terminal_seen = True

    def provider_error(self, code: Any, *, rate_limited: bool = False) -> None:
        """The provider reported an error in the stream; ``code`` is its code or type if any
        (a string or number as sent; telemetry cuts it to its attribute limit).
        ``rate_limited``: the contract types that error as throttling of the caller."""
        self.provider_error_seen = True
        self.rate_limited = self.rate_limited or rate_limited
        if self.error_code is None and isinstance(code, (str, int)) and not isinstance(code, bool):
            self.error_code = str(code)

    def usage(self, input_tokens: Any, output_tokens: Any) -> None:
        # Snapshots are cumulative on every route that repeats them: replace, never add.
        if type(input_tokens) is int:
            self.input_tokens = input_tokens
        if type(output_tokens) is int:
            self.output_tokens = output_tokens

    def identify(self, model: Any, response_id: Any) -> None:
        if self.response_model is None and isinstance(model, str) and model:
            self.response_model = model
        if self.response_id is None and isinstance(response_id, str) and response_id:
            self.response_id = response_id

    def payload_invalid(self) -> None:
        self.payload_error = True

    def protocol_violation(self, name: str) -> None:
        self.protocol_error = True
        self.anomaly(name)

    def unknown(self) -> None:
        self.unknown_count += 1

    def anomaly(self, name: str) -> None:
        self.anomalies[name] = self.anomalies.get(name, 0) + 1
