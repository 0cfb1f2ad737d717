"""AG-UI, the Agent-User Interaction Protocol, over HTTP + SSE: an agent's run as JSON events.

Sources: the AG-UI 1.0 specification, whose text is ag-ui-protocol/ag-ui ``docs/spec/1.1/`` at
commits ``9c75abd0`` and ``ac097900`` (1.1 "only adds to 1.0": one optional field,
``encryptedValueType``, ``changelog.mdx``), and its schema as generated into the PyPI package
``ag-ui-protocol`` 1.0.0 (``ag_ui/_generated/models.py``, from
https://ag-ui.com/spec/1.0/schema.json). Pages below are under ``docs/spec/1.1/``.

The wire (``basic/transports/http-sse.mdx``): a ``POST`` of the run input to the agent's own
endpoint, any path, answered ``200`` with ``text/event-stream``; each event's ``data`` is exactly
one protocol event as a JSON object whose ``type`` names it (SCREAMING_SNAKE, fields camelCase);
``event:``, ``id:`` and ``retry:`` are ignored. The package's ``EventEncoder`` writes
``data: <json>\\n\\n`` and nothing else.

Recognition: there is no path to match (``matches`` claims nothing), so a stream is recognised by
its first event: "A stream MUST begin with ``RUN_STARTED`` or ``RUN_ERROR``"
(``events/lifecycle.mdx``). ``sniff_payload`` claims those two and ``RUN_FINISHED``, each with the
fields the schema requires of it (``threadId`` and ``runId``; ``message``).

Terminal rule (``events/lifecycle.mdx``; ``basic/transports/index.mdx`` §Truncation): a run ends
with ``RUN_FINISHED`` or ``RUN_ERROR``; a stream MAY carry several runs in sequence (a replayed
thread), and "the producer closes the response body after the last run's terminal event". So the
terminal is judged at the stream's end (``on_close``): the last run closed is the terminal seen;
a stream that ends inside a run ("a connection that drops without a terminal event") is truncated,
whatever runs closed before it (the TypeScript client fails "a SECOND run left open after a first
one closed": ``sdks/typescript/packages/client/src/agent/__tests__/
agent-truncated-stream.test.ts``).
A stream closed by the application after its last run's terminal event is judged by that event.

Stops (``RUN_FINISHED.outcome``, a union on ``type``; "an absent outcome means success"):
``success`` (absent too) and ``interrupt`` (the run paused for outside input and is closed:
``basic/patterns/interrupt-resume.mdx``; a new run resumes it) are success stops; ``cancelled``
("stopped before it completed ... MUST NOT report a stopped run as success", §Cancelled runs) is
not: ``incomplete``. An outcome ``type`` the schema does not name is kept as the stop reason and
counted an anomaly (``unknown_run_outcome``): "an outcome a consumer does not recognise is
stripped ... and an absent outcome means success". ``RUN_ERROR`` is the run's own failure:
``provider_error``, its ``code`` the error code; it also ends whatever was open (open tool calls
stay unfinished). A late ``RUN_ERROR`` after ``RUN_FINISHED`` "MUST treat the run as failed". A
stream carrying several runs is judged by all of them: the worst stop wins, and a ``RUN_ERROR`` in
any run is the stream's provider error. ``usage`` on either terminal (one entry per provider and
model, "a consumer that only wants totals sums across the entries") is summed over entries and
runs; the model is identified where a run's entries name exactly one.

Protocol errors, each fatal to the consumer (``events/lifecycle.mdx`` §Error Handling,
``basic/patterns/streaming.mdx``, ``events/text-messages.mdx``, ``events/tool-calls.mdx``,
``events/reasoning.mdx``, ``events/subagents.mdx``): an event before ``RUN_STARTED``; after a run
closed, anything but ``RUN_STARTED`` (or one late ``RUN_ERROR`` after ``RUN_FINISHED``); a
``RUN_STARTED`` inside a run; an item (text message, tool call, reasoning message or span, step by
owner and ``stepName``, announced subagent) opened while open, continued or closed while not open,
or still open at ``RUN_FINISHED``; a continuation whose ``subagentRunId`` disagrees with its
opener's; and in the chunked form a first chunk without its ``messageId`` (``toolCallId`` and
``toolCallName`` for a call), a continuation repeating an opener's field with another value, or an
untagged continuation several subagents' chunk streams could continue. A malformed known value (a
required field missing or of the wrong type) is a payload error; an event ``type`` no version names
is counted unknown and judged no further ("drops an unknown event", ``changelog.mdx`` item 6).

Chunks (``TEXT_MESSAGE_CHUNK``, ``TOOL_CALL_CHUNK``, ``REASONING_MESSAGE_CHUNK``) are read as the
triads they expand to (``basic/patterns/streaming.mdx`` §The chunked form): one chunk stream per
lane (the parent agent's, or a subagent's by ``subagentRunId``), whose synthesized end comes with a
chunk opening another item in the lane, any message, tool-call, step, state, custom or reasoning
event in the lane (``RAW``, ``ACTIVITY_*``, ``REASONING_ENCRYPTED_VALUE`` and ``SUBAGENT_STARTED``
close nothing), its subagent's end, or a run-level event (``RUN_*``, ``MESSAGES_SNAPSHOT``), which
ends every lane. The retired 0.x ``THINKING_*`` events, which "are translated at the compatibility
boundary, not dropped" (``changelog.mdx`` item 4), are read as the one reasoning span and message
they could carry (they have no ids).

Tool calls: ``TOOL_CALL_START`` opens one by ``toolCallId``, ``TOOL_CALL_ARGS`` deltas concatenate
to its argument text, ``TOOL_CALL_END`` closes it. The protocol carries that text "conventionally
a JSON document" without validating it; otelsse judges it as on every route (exactly one JSON
value under a success stop), since that is what whoever executes the call parses. A closed call
"MAY be reopened by a new ``TOOL_CALL_START`` with the same ``toolCallId``, and further arguments
append" (``events/tool-calls.mdx``): the accumulator cannot take bytes after its close, so a
reopened call's further arguments are judged trailing data, and ``TOOL_CALL_END`` does not prove a
call complete before its run ends (``proves_item_end`` is False).

Not a provider: ``gen_ai.provider.name`` stays unset. AG-UI is a protocol between an application
and an agent, which may call any number of model providers in one run (``usage`` names one per
entry); the operation is ``invoke_agent`` (OpenTelemetry semantic conventions,
``gen_ai.operation.name``: "Invoke GenAI agent", ``docs/registry/attributes/gen-ai.md``).

Strict mode's error event: none (``strict_error_event`` stays None). The reference client does
not raise on ``RUN_ERROR``: ``runAgent()`` "resolves" and reports it to subscribers
(``sdks/typescript/packages/client/src/agent/__tests__/agent-run-error.test.ts``), while a body
cut before a terminal event makes it reject ("ended without a terminal event", the truncation
test above), which is what the proxy's cut gives.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.state import StreamState, ToolCall
from ._base import Redaction, Route, handles, parse_object

__all__ = ["AGUIRoute"]

# What a run is at, between events.
_IDLE = 0  # no run yet
_ACTIVE = 1  # RUN_STARTED, not yet closed
_FINISHED = 2  # closed by RUN_FINISHED (a late RUN_ERROR may still fail it)
_FAILED = 3  # closed by RUN_ERROR

_RUN_STARTED = "RUN_STARTED"
_RUN_FINISHED = "RUN_FINISHED"
_RUN_ERROR = "RUN_ERROR"

# The run's own boundaries: the sequence check leaves them to their handlers.
_RUN_BOUNDARIES = frozenset({_RUN_STARTED, _RUN_ERROR})
# Run-level events end every chunk stream (RUN_ERROR abandons them instead: its handler).
_END_EVERY_LANE = frozenset({_RUN_STARTED, _RUN_FINISHED, "MESSAGES_SNAPSHOT"})
# Events that stand aside from chunk assembly, and those that end a chunk stream by their own
# rule (chunks, subagents' lifecycle, RUN_ERROR).
_CLOSE_NO_LANE = frozenset(
    {
        "RAW",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "REASONING_ENCRYPTED_VALUE",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
        "TEXT_MESSAGE_CHUNK",
        "TOOL_CALL_CHUNK",
        "REASONING_MESSAGE_CHUNK",
        _RUN_ERROR,
    }
)
# The events that continue an item an untagged event names: their lane is its opener's.
_CONTINUES_MESSAGE = frozenset({"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"})
_CONTINUES_REASONING = frozenset({"REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END"})
_CONTINUES_CALL = frozenset({"TOOL_CALL_ARGS", "TOOL_CALL_END"})

# The three chunked families, and the field that names their item.
_TEXT = "text_message"
_REASONING = "reasoning_message"
_TOOL = "tool_call"
_CHUNK_IDS = {_TEXT: "messageId", _REASONING: "messageId", _TOOL: "toolCallId"}
# What a continuation chunk may repeat of its opener, only with the same value.
_CHUNK_FIELDS = {
    _TEXT: ("role", "name"),
    _REASONING: (),
    _TOOL: ("toolCallName", "parentMessageId"),
}

# The roles whose text is not the agent's answer. An absent role means ``assistant``
# (``events/text-messages.mdx``), and so does one the schema does not name, which a consumer
# strips as unrecognised (``changelog.mdx`` item 6).
_OTHER_ROLES = frozenset({"developer", "system", "user"})
# RUN_FINISHED.outcome types (the schema's RunFinishedOutcome).
_SUCCESS = "success"
_INTERRUPT = "interrupt"
_CANCELLED = "cancelled"
_KNOWN_OUTCOMES = frozenset({_SUCCESS, _INTERRUPT, _CANCELLED})

# What the flight recorder keeps (``Redaction``): what this route judges by. Words: event and
# outcome types, roles, the error code, usage entries' model. Ids: the values it compares for
# equality (items, owners, steps, the fields a chunk may repeat; the run, which identifies the
# response). Opaque: payloads the protocol carries without reading them.
_WORDS = frozenset({"type", "role", "code", "model"})
_IDS = frozenset({
    "runId", "messageId", "toolCallId", "toolCallName", "parentMessageId", "name", "stepName",
    "subagentRunId",
})  # fmt: skip
_OPAQUE = frozenset({
    "input", "result", "snapshot", "messages", "content", "value", "event", "patch", "rawEvent",
    "metadata", "responseSchema", "encryptedValue",
})  # fmt: skip


# The top-level fields this route reads whose value, on every event that has them, is a string
# (identifiers, names, roles, the error code). ``envelope`` refuses an event where one is of
# another type, so the handlers read them as ``str | None``. A null is absent: the 0.x Python SDK
# wrote ``null`` for every optional field it did not set, which a consumer's compatibility shim
# takes as absent (``basic/index.mdx`` §Absent means absent).
_STRING_FIELDS = frozenset({
    "threadId", "runId", "messageId", "toolCallId", "toolCallName", "parentMessageId",
    "subagentRunId", "stepName", "role", "name", "code", "message",
})  # fmt: skip


def _required(payload: dict[str, Any], key: str, state: StreamState) -> str | None:
    """A required string field, or None after reporting the event malformed."""
    value = payload.get(key)
    if type(value) is str:
        return value
    state.payload_invalid()
    return None


class _Chunk:
    """The item a lane's chunk stream is assembling: its family, id and opener's fields."""

    __slots__ = ("family", "fields", "item_id")

    def __init__(self, family: str, item_id: str, fields: dict[str, str | None]) -> None:
        self.family = family
        self.item_id = item_id
        self.fields = fields


class AGUIRoute(Route):
    name: ClassVar[str] = "agui.run"
    operation: ClassVar[str | None] = "invoke_agent"
    success_stops: ClassVar[frozenset[str]] = frozenset({_SUCCESS, _INTERRUPT})
    redaction: ClassVar[Redaction | None] = Redaction(
        words=_WORDS, ids=_IDS, usage=frozenset({"usage"}), fragments=frozenset({"delta"}),
        opaque=_OPAQUE,
    )  # fmt: skip

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        kind = payload.get("type")
        if kind in (_RUN_STARTED, _RUN_FINISHED):
            return "threadId" in payload and "runId" in payload
        return kind == _RUN_ERROR and "message" in payload

    def __init__(self) -> None:
        super().__init__()
        self._run = _IDLE
        # The next key of an item admitted to the state (``StreamState.open_part``): every open
        # item counts against ``max_parts`` until it closes.
        self._next_key = 0
        # What the current run has open, each with its owner (``subagentRunId``, None for the
        # parent agent): text messages (key, owner, whether its text is the answer), reasoning
        # messages and spans (key, owner), tool calls, steps by (owner, stepName), announced
        # subagents; the 0.x thinking span and message (their keys, None when closed).
        self._messages: dict[str, tuple[int, str | None, bool]] = {}
        self._reasoning: dict[str, tuple[int, str | None]] = {}
        self._spans: dict[str, tuple[int, str | None]] = {}
        self._calls: dict[str, tuple[ToolCall, str | None]] = {}
        self._closed_calls: dict[str, tuple[ToolCall, str | None]] = {}
        self._steps: dict[tuple[str | None, str], int] = {}
        self._subagents: dict[str, int] = {}
        self._thinking: int | None = None
        self._thinking_message: int | None = None
        # Lane (owner) -> the item its chunk stream is assembling.
        self._lanes: dict[str | None, _Chunk] = {}
        # Token counts summed over usage entries and runs; None until one is reported.
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None

    # -- sequence ----------------------------------------------------------------------------

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        payload = parse_object(event, state)
        if payload is None:
            return None
        kind = payload.get("type")
        if type(kind) is not str:
            state.payload_invalid()  # ``type`` is required
            return None
        if kind not in self.handlers:
            return kind, payload  # unknown: dropped, counted
        for key, value in payload.items():
            if key in _STRING_FIELDS and not (value is None or type(value) is str):
                state.payload_invalid()  # a malformed known value: the event is refused
                return None
        if kind not in _RUN_BOUNDARIES:
            if self._run == _IDLE:
                state.protocol_violation("event_before_run_started")  # read on all the same
            elif self._run != _ACTIVE:
                state.protocol_violation("event_after_run_closed")
                return None
        if kind in _END_EVERY_LANE:
            self._end_lanes(state)
        elif kind not in _CLOSE_NO_LANE:
            self._end_lane(self._lane_of(kind, payload), state)
        return kind, payload

    def _lane_of(self, kind: str, payload: dict[str, Any]) -> str | None:
        """The lane an event is in: its ``subagentRunId``, else the owner of the item it
        continues ("an untagged continuation continues whatever the opener owns"), else the
        parent agent's."""
        tag = payload.get("subagentRunId")
        if tag is not None or not self._lanes:
            return tag
        items: dict[str, Any]
        if kind in _CONTINUES_MESSAGE:
            items, key = self._messages, "messageId"
        elif kind in _CONTINUES_REASONING:
            items, key = self._reasoning, "messageId"
        elif kind in _CONTINUES_CALL:
            items, key = self._calls, "toolCallId"
        else:
            return None
        item_id = payload.get(key)
        opened = None if item_id is None else items.get(item_id)
        return None if opened is None else opened[1]

    def _admit(self, state: StreamState) -> int | None:
        """A key for a new open item, or None when the state cannot admit one more."""
        key = self._next_key
        self._next_key += 1
        return key if state.open_part(key) else None

    def _owned(self, owner: str | None, payload: dict[str, Any], state: StreamState) -> None:
        """A continuation must not carry an owner other than its opener's."""
        tag = payload.get("subagentRunId")
        if tag is not None and tag != owner:
            state.protocol_violation("owner_mismatch")

    # -- the run -------------------------------------------------------------------------------

    @handles(_RUN_STARTED)
    def _on_run_started(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._run == _ACTIVE:
            state.protocol_violation("run_started_during_run")
            return
        self._run = _ACTIVE
        _required(payload, "threadId", state)
        state.identify(None, _required(payload, "runId", state))

    @handles(_RUN_FINISHED)
    def _on_run_finished(self, payload: dict[str, Any], state: StreamState) -> None:
        # Every chunk stream has just ended; what is still open was opened explicitly.
        for family, items in (
            (_TEXT, self._messages),
            (_REASONING, self._reasoning),
            ("reasoning", self._spans),
            (_TOOL, self._calls),
            ("step", self._steps),
            ("subagent", self._subagents),
        ):
            if items:
                state.protocol_violation(f"{family}_open_at_run_finished")
        if self._thinking is not None or self._thinking_message is not None:
            state.protocol_violation("thinking_open_at_run_finished")
        self._end_run(state)
        self._run = _FINISHED
        _required(payload, "threadId", state)
        _required(payload, "runId", state)
        self._usage(payload, state)
        outcome = payload.get("outcome")
        if outcome is None:
            state.stop(_SUCCESS, True)  # absent means success
            return
        kind = outcome.get("type") if type(outcome) is dict else None
        if type(kind) is not str:
            state.payload_invalid()
            return
        if kind == _INTERRUPT:
            interrupts = outcome.get("interrupts")
            if type(interrupts) is not list or not interrupts:
                state.payload_invalid()  # at least one: the schema's minItems
                return
        elif kind not in _KNOWN_OUTCOMES:
            state.anomaly("unknown_run_outcome")
        state.stop(kind, kind != _CANCELLED)

    @handles(_RUN_ERROR)
    def _on_run_error(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._run == _FAILED:
            state.protocol_violation("event_after_run_closed")
            return
        self._end_run(state)  # "RUN_ERROR ends whatever was still open along with the run"
        self._run = _FAILED
        _required(payload, "message", state)
        state.provider_error(payload.get("code"))
        self._usage(payload, state)

    def _end_run(self, state: StreamState) -> None:
        """Forget everything the run had open: run-scoped tracking does not cross runs. Open
        tool calls stay unfinished."""
        closed = len(self._messages) + len(self._reasoning) + len(self._spans)
        closed += len(self._steps) + len(self._subagents)
        closed += (self._thinking is not None) + (self._thinking_message is not None)
        for _ in range(closed):
            state.close_part()
        for items in (
            self._messages, self._reasoning, self._spans, self._calls, self._closed_calls,
            self._steps, self._subagents, self._lanes,
        ):  # fmt: skip
            items.clear()
        self._thinking = self._thinking_message = None

    def _usage(self, payload: dict[str, Any], state: StreamState) -> None:
        """Add a terminal event's usage entries to the stream's token counts."""
        entries = payload.get("usage")
        if entries is None:
            return
        if type(entries) is not list:
            state.payload_invalid()
            return
        models: set[str] = set()
        for entry in entries:
            if type(entry) is not dict:
                state.payload_invalid()
                return
            for key, total in (("inputTokens", 0), ("outputTokens", 1)):
                count = entry.get(key)
                if count is None:
                    continue  # "a consumer MUST NOT read an absent count as zero"
                if type(count) is not int or count < 0:
                    state.payload_invalid()
                elif total == 0:
                    self._input_tokens = (self._input_tokens or 0) + count
                else:
                    self._output_tokens = (self._output_tokens or 0) + count
            model = entry.get("model")
            if type(model) is str:
                models.add(model)
            elif model is not None:
                state.payload_invalid()
        state.usage(self._input_tokens, self._output_tokens)
        if len(models) == 1:
            state.identify(models.pop(), None)

    def on_close(self, state: StreamState) -> None:
        # The last run's terminal event is the stream's; a run still open was cut.
        if self._run == _FINISHED or self._run == _FAILED:
            state.terminal()

    # -- steps and subagents -------------------------------------------------------------------

    @handles("STEP_STARTED")
    def _on_step_started(self, payload: dict[str, Any], state: StreamState) -> None:
        name = _required(payload, "stepName", state)
        if name is None:
            return
        step = (payload.get("subagentRunId"), name)
        if step in self._steps:
            state.protocol_violation("step_already_open")
            return
        key = self._admit(state)
        if key is not None:
            self._steps[step] = key

    @handles("STEP_FINISHED")
    def _on_step_finished(self, payload: dict[str, Any], state: StreamState) -> None:
        name = _required(payload, "stepName", state)
        if name is None:
            return
        # Steps are per owner: a STEP_FINISHED closes its own owner's step of that name.
        step = (payload.get("subagentRunId"), name)
        if self._steps.pop(step, None) is None:
            state.protocol_violation("step_not_open")
        else:
            state.close_part()

    @handles("SUBAGENT_STARTED")
    def _on_subagent_started(self, payload: dict[str, Any], state: StreamState) -> None:
        invocation = _required(payload, "subagentRunId", state)
        if invocation is None:
            return
        if invocation in self._subagents:
            state.protocol_violation("subagent_already_open")
            return
        key = self._admit(state)
        if key is not None:
            self._subagents[invocation] = key

    @handles("SUBAGENT_FINISHED", "SUBAGENT_ERROR")
    def _on_subagent_ended(self, payload: dict[str, Any], state: StreamState) -> None:
        invocation = _required(payload, "subagentRunId", state)
        if invocation is None:
            return
        # Its chunk stream ends with it. A producer may attribute events to an invocation it
        # never announced, so ending one that is not open is no violation.
        self._end_lane(invocation, state)
        if self._subagents.pop(invocation, None) is not None:
            state.close_part()
        if payload.get("type") == "SUBAGENT_ERROR":
            # It ends the invocation, not the run: "A parent agent MAY handle a failed
            # subagent and continue".
            state.anomaly("subagent_error")

    # -- text messages -------------------------------------------------------------------------

    @handles("TEXT_MESSAGE_START")
    def _on_text_start(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is not None:
            self._open_message(message, payload, state)

    def _open_message(self, message: str, payload: dict[str, Any], state: StreamState) -> bool:
        if message in self._messages:
            state.protocol_violation("text_message_already_open")
            return False
        role = payload.get("role")
        key = self._admit(state)
        if key is None:
            return False
        owner = payload.get("subagentRunId")
        self._messages[message] = (key, owner, role not in _OTHER_ROLES)
        return True

    @handles("TEXT_MESSAGE_CONTENT")
    def _on_text_content(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is None:
            return
        opened = self._messages.get(message)
        if opened is None:
            state.protocol_violation("text_message_not_open")
            return
        key, owner, output = opened
        self._owned(owner, payload, state)
        self._text(key, output, payload.get("delta"), state)

    @staticmethod
    def _text(key: int, output: bool, delta: Any, state: StreamState) -> None:
        if output:
            state.text(key, delta)
        elif type(delta) is not str:
            state.payload_invalid()

    @handles("TEXT_MESSAGE_END")
    def _on_text_end(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is None:
            return
        opened = self._messages.pop(message, None)
        if opened is None:
            state.protocol_violation("text_message_not_open")
            return
        self._owned(opened[1], payload, state)
        state.close_part()

    # -- reasoning -----------------------------------------------------------------------------

    @handles("REASONING_START")
    def _on_reasoning_start(self, payload: dict[str, Any], state: StreamState) -> None:
        span = _required(payload, "messageId", state)
        if span is None:
            return
        if span in self._spans:
            state.protocol_violation("reasoning_already_open")
            return
        key = self._admit(state)
        if key is not None:
            self._spans[span] = (key, payload.get("subagentRunId"))

    @handles("REASONING_END")
    def _on_reasoning_end(self, payload: dict[str, Any], state: StreamState) -> None:
        span = _required(payload, "messageId", state)
        if span is None:
            return
        opened = self._spans.pop(span, None)
        if opened is None:
            state.protocol_violation("reasoning_not_open")
            return
        self._owned(opened[1], payload, state)
        state.close_part()

    @handles("REASONING_MESSAGE_START")
    def _on_reasoning_message_start(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is not None:
            self._open_reasoning(message, payload, state)

    def _open_reasoning(self, message: str, payload: dict[str, Any], state: StreamState) -> bool:
        if message in self._reasoning:
            state.protocol_violation("reasoning_message_already_open")
            return False
        key = self._admit(state)
        if key is None:
            return False
        self._reasoning[message] = (key, payload.get("subagentRunId"))
        return True

    @handles("REASONING_MESSAGE_CONTENT")
    def _on_reasoning_content(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is None:
            return
        opened = self._reasoning.get(message)
        if opened is None:
            state.protocol_violation("reasoning_message_not_open")
            return
        self._owned(opened[1], payload, state)
        state.text(opened[0], payload.get("delta"), reasoning=True)

    @handles("REASONING_MESSAGE_END")
    def _on_reasoning_message_end(self, payload: dict[str, Any], state: StreamState) -> None:
        message = _required(payload, "messageId", state)
        if message is None:
            return
        opened = self._reasoning.pop(message, None)
        if opened is None:
            state.protocol_violation("reasoning_message_not_open")
            return
        self._owned(opened[1], payload, state)
        state.close_part()

    # The retired 0.x thinking events: no ids, so one span and one message at a time.

    @handles("THINKING_START")
    def _on_thinking_start(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._thinking is not None:
            state.protocol_violation("thinking_already_open")
            return
        self._thinking = self._admit(state)

    @handles("THINKING_END")
    def _on_thinking_end(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._thinking is None:
            state.protocol_violation("thinking_not_open")
            return
        self._thinking = None
        state.close_part()

    @handles("THINKING_TEXT_MESSAGE_START")
    def _on_thinking_message_start(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._thinking_message is not None:
            state.protocol_violation("thinking_message_already_open")
            return
        self._thinking_message = self._admit(state)

    @handles("THINKING_TEXT_MESSAGE_CONTENT")
    def _on_thinking_content(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._thinking_message is None:
            state.protocol_violation("thinking_message_not_open")
            return
        state.text(self._thinking_message, payload.get("delta"), reasoning=True)

    @handles("THINKING_TEXT_MESSAGE_END")
    def _on_thinking_message_end(self, payload: dict[str, Any], state: StreamState) -> None:
        if self._thinking_message is None:
            state.protocol_violation("thinking_message_not_open")
            return
        self._thinking_message = None
        state.close_part()

    # -- tool calls ----------------------------------------------------------------------------

    @handles("TOOL_CALL_START")
    def _on_tool_start(self, payload: dict[str, Any], state: StreamState) -> None:
        call_id = _required(payload, "toolCallId", state)
        name = _required(payload, "toolCallName", state)
        if call_id is not None and name is not None:
            self._open_call(call_id, name, payload, state)

    def _open_call(
        self, call_id: str, name: str, payload: dict[str, Any], state: StreamState
    ) -> bool:
        if call_id in self._calls:
            state.protocol_violation("tool_call_already_open")
            return False
        reopened = self._closed_calls.pop(call_id, None)
        if reopened is not None:
            # "further arguments append" to the closed call: see the module docstring.
            state.anomaly("tool_call_reopened")
            self._calls[call_id] = reopened
            return True
        call = state.open_tool(call_id, name)
        self._calls[call_id] = (call, payload.get("subagentRunId"))
        return True

    @handles("TOOL_CALL_ARGS")
    def _on_tool_args(self, payload: dict[str, Any], state: StreamState) -> None:
        call_id = _required(payload, "toolCallId", state)
        if call_id is None:
            return
        opened = self._calls.get(call_id)
        if opened is None:
            state.protocol_violation("tool_call_not_open")
            return
        self._owned(opened[1], payload, state)
        state.tool_args(opened[0], payload.get("delta"))

    @handles("TOOL_CALL_END")
    def _on_tool_end(self, payload: dict[str, Any], state: StreamState) -> None:
        call_id = _required(payload, "toolCallId", state)
        if call_id is None:
            return
        opened = self._calls.pop(call_id, None)
        if opened is None:
            state.protocol_violation("tool_call_not_open")
            return
        self._owned(opened[1], payload, state)
        self._close_call(call_id, opened, state)

    def _close_call(
        self, call_id: str, opened: tuple[ToolCall, str | None], state: StreamState
    ) -> None:
        state.close_tool(opened[0])
        self._closed_calls[call_id] = opened

    @handles("TOOL_CALL_RESULT")
    def _on_tool_result(self, payload: dict[str, Any], state: StreamState) -> None:
        # A message of its own; it does not reopen the call it answers.
        _required(payload, "messageId", state)
        _required(payload, "toolCallId", state)

    # -- chunks --------------------------------------------------------------------------------

    @handles("TEXT_MESSAGE_CHUNK")
    def _on_text_chunk(self, payload: dict[str, Any], state: StreamState) -> None:
        chunk = self._chunk(_TEXT, payload, state)
        if chunk is not None:
            opened = self._messages.get(chunk.item_id)
            delta = payload.get("delta")
            if opened is not None and delta is not None:
                self._text(opened[0], opened[2], delta, state)

    @handles("REASONING_MESSAGE_CHUNK")
    def _on_reasoning_chunk(self, payload: dict[str, Any], state: StreamState) -> None:
        chunk = self._chunk(_REASONING, payload, state)
        if chunk is not None:
            opened = self._reasoning.get(chunk.item_id)
            delta = payload.get("delta")
            if opened is not None and delta is not None:
                state.text(opened[0], delta, reasoning=True)

    @handles("TOOL_CALL_CHUNK")
    def _on_tool_chunk(self, payload: dict[str, Any], state: StreamState) -> None:
        chunk = self._chunk(_TOOL, payload, state)
        if chunk is not None:
            opened = self._calls.get(chunk.item_id)
            delta = payload.get("delta")
            if opened is not None and delta is not None:
                state.tool_args(opened[0], delta)

    def _chunk(self, family: str, payload: dict[str, Any], state: StreamState) -> _Chunk | None:
        """The item a chunk continues or opens (as the triad it stands for), or None when it
        is rejected."""
        item_id = payload.get(_CHUNK_IDS[family])
        tag = payload.get("subagentRunId")
        lane = tag
        if tag is None:
            candidates = [
                owner
                for owner, chunk in self._lanes.items()
                if chunk.family == family and (item_id is None or chunk.item_id == item_id)
            ]
            if None in candidates or not candidates:
                lane = None  # the parent's stream, or a new item in the parent's lane
            elif len(candidates) == 1:
                lane = candidates[0]
            elif item_id is None:
                state.protocol_violation("chunk_ambiguous")  # no unique referent
                return None
        current = self._lanes.get(lane)
        if (
            current is not None
            and current.family == family
            and (item_id is None or item_id == current.item_id)
        ):
            for field in _CHUNK_FIELDS[family]:
                value = payload.get(field)
                established = current.fields.get(field)
                if value is not None and established is not None and value != established:
                    state.protocol_violation("chunk_field_conflict")
            return current
        self._end_lane(lane, state)
        fields = {field: payload.get(field) for field in _CHUNK_FIELDS[family]}
        if item_id is None:
            state.protocol_violation("first_chunk_without_id")
            return None
        if family == _TEXT:
            # A message opened without a role is an assistant's: a later role contradicts it.
            fields["role"] = fields["role"] or "assistant"
            opened = self._open_message(item_id, payload, state)
        elif family == _REASONING:
            opened = self._open_reasoning(item_id, payload, state)
        else:
            name = fields["toolCallName"]
            if name is None:
                state.protocol_violation("first_chunk_without_id")
                return None
            opened = self._open_call(item_id, name, payload, state)
        if not opened:
            return None
        chunk = self._lanes[lane] = _Chunk(family, item_id, fields)
        return chunk

    def _end_lane(self, lane: str | None, state: StreamState) -> None:
        """The synthesized end of the item a lane's chunk stream was assembling."""
        chunk = self._lanes.pop(lane, None)
        if chunk is None:
            return
        item_id = chunk.item_id
        if chunk.family == _TOOL:
            opened_call = self._calls.pop(item_id, None)
            if opened_call is not None:
                self._close_call(item_id, opened_call, state)
            return
        items: dict[str, Any] = self._messages if chunk.family == _TEXT else self._reasoning
        if items.pop(item_id, None) is not None:  # an explicit event may have closed it
            state.close_part()

    def _end_lanes(self, state: StreamState) -> None:
        for lane in list(self._lanes):
            self._end_lane(lane, state)

    # -- standalone events: no rule but the lane they end (in ``envelope``) --------------------

    @handles(
        "STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA", "RAW", "CUSTOM", "REASONING_ENCRYPTED_VALUE",
    )  # fmt: skip
    def _on_standalone(self, payload: dict[str, Any], state: StreamState) -> None:
        pass
