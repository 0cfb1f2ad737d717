"""The tool-execution gate (seed 001): a tool runs only once its call provably completed,
validated and was approved, and at most once.

    stream bytes -> enforcing reader (monitor, route, accumulators) -> one record per call:

    RECEIVING -> ITEM_OPEN -> ITEM_TERMINAL -> PARSED -> SCHEMA_VALID
        -> POLICY_APPROVED -> EXECUTED | EXECUTION_FAILED | NEEDS_RECONCILIATION | REPLAYED
        -> POLICY_DENIED | NEEDS_APPROVAL
    any state before POLICY_APPROVED -> QUARANTINED
    POLICY_APPROVED -> QUARANTINED (identity_collision: the ledger holds another call's claim)

``ToolGate.run()`` reads one stream (one attempt of a run) and walks every call the application
is asked to run through these states; ``_TRANSITIONS`` is the only way a record changes state.
A call reaches the executor only from ``POLICY_APPROVED``, only after the response's terminal
event (or, with ``run_at="item"`` on a route that proves item completion, after the call's own
terminal event), and only once the ledger has durably recorded the decision. A call is keyed by
run id, response id and provider call id (``CallKey``; its position in the response when the
provider gave it no id), and the ledger keeps its fingerprint (a digest of its tool name and
arguments): the same key with the same fingerprint is a replay, with another fingerprint a
different call, which is quarantined (``identity_collision``) unless the call had no provider
identity at all (neither response id nor call id): the position is then the gate's own guess,
and the call is keyed by its position and fingerprint instead, so that a retry's different call
runs, and that very call only once.

Records, spans, metrics and the ledger hold ids, names, sizes, statuses and short error classes:
never arguments, never results. The parsed arguments reach only the policy and the executor.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import json
import time
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._core.stack import on_fresh_stack
from ._core.state import CUSTOM, INVALID_JSON, SERVER, TRAILING_DATA, ToolCall
from ._exceptions import OtelSSEError
from ._tools import ToolRegistry, ToolSchemas
from .ledger import DECIDED, FAILED, SUCCEEDED, CallKey, Ledger, LedgerEntry, MemoryLedger
from .monitor import Limits, Outcome, StreamReport
from .reader import AsyncStreamReader, StreamFault, StreamReader, StreamResult, _Reader
from .routes import Route

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .telemetry import GateTelemetry

__all__ = [
    "Decision",
    "GateCall",
    "GateResult",
    "IllegalTransition",
    "ToolCallState",
    "ToolCallView",
    "ToolGate",
]


class ToolCallState(str, enum.Enum):
    """Where one tool call stands between "bytes arrived" and "the tool ran"."""

    #: The stream named the call.
    RECEIVING = "receiving"
    #: Its argument accumulator is open: bytes may still arrive.
    ITEM_OPEN = "item_open"
    #: The provider declared the call complete (its item's terminal event).
    ITEM_TERMINAL = "item_terminal"
    #: Its whole argument buffer is exactly one JSON object (or a custom tool's text).
    PARSED = "parsed"
    #: It names a registered tool and its arguments pass that tool's JSON Schema.
    SCHEMA_VALID = "schema_valid"
    #: The policy approved it: the only state from which the executor is called.
    POLICY_APPROVED = "policy_approved"
    #: The executor returned.
    EXECUTED = "executed"
    #: Final: never run. The stream failed before the call was proven (timeout, disconnect,
    #: error, missing terminal) or its arguments were unusable (invalid JSON, trailing data,
    #: unregistered tool, schema failure, duplicate id), or, once approved, the ledger held
    #: another call under its identity (identity collision).
    QUARANTINED = "quarantined"
    #: Final: the policy refused it (or failed, which refuses).
    POLICY_DENIED = "policy_denied"
    #: Final for this run: the policy wants a human to decide; not run.
    NEEDS_APPROVAL = "needs_approval"
    #: Final: the executor raised.
    EXECUTION_FAILED = "execution_failed"
    #: Final: the ledger holds a decision for this call with no result (a process died while it
    #: ran): its side effect is unknown, so it is never run again automatically.
    NEEDS_RECONCILIATION = "needs_reconciliation"
    #: Final: the ledger holds this call's result already (a replayed stream, a second gate).
    REPLAYED = "replayed"

    def __str__(self) -> str:
        return self.value


_S = ToolCallState
#: Every legal move. Anything else is a bug in the gate and raises ``IllegalTransition``.
_TRANSITIONS: dict[ToolCallState, frozenset[ToolCallState]] = {
    _S.RECEIVING: frozenset({_S.ITEM_OPEN, _S.QUARANTINED}),
    _S.ITEM_OPEN: frozenset({_S.ITEM_TERMINAL, _S.QUARANTINED}),
    _S.ITEM_TERMINAL: frozenset({_S.PARSED, _S.QUARANTINED}),
    _S.PARSED: frozenset({_S.SCHEMA_VALID, _S.QUARANTINED}),
    _S.SCHEMA_VALID: frozenset(
        {_S.POLICY_APPROVED, _S.POLICY_DENIED, _S.NEEDS_APPROVAL, _S.QUARANTINED}
    ),
    _S.POLICY_APPROVED: frozenset(
        {_S.EXECUTED, _S.EXECUTION_FAILED, _S.NEEDS_RECONCILIATION, _S.REPLAYED, _S.QUARANTINED}
    ),
}
#: States a call never leaves (``POLICY_APPROVED`` too, when no executor was given for it).
FINAL_STATES = frozenset(set(ToolCallState) - set(_TRANSITIONS))


class IllegalTransition(OtelSSEError):
    """A record was asked to make a move ``_TRANSITIONS`` does not allow: a bug in otelsse."""


class Decision(str, enum.Enum):
    """What a policy returns (the plain strings are accepted too)."""

    APPROVE = "approve"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


# Short error classes of a record (``error.type``), besides the reader's fault codes and the
# argument problems ``invalid_json`` and ``trailing_data``.
ARGUMENTS_NOT_OBJECT = "arguments_not_object"
UNREGISTERED_TOOL = "unregistered_tool"
DUPLICATE_CALL_ID = "duplicate_call_id"
SCHEMA_INVALID = "schema_invalid"
POLICY_DENIED = "policy_denied"
POLICY_ERROR = "policy_error"
NO_EXECUTOR = "no_executor"
EXECUTION_ERROR = "execution_error"
#: The ledger holds a claim of this call's key by a call with another fingerprint (another
#: tool or other arguments: a provider reusing ids), or by one from before ledgers kept them.
IDENTITY_COLLISION = "identity_collision"
#: Every error class a record can carry besides a ``StreamFault`` code: a closed set.
ERROR_CLASSES: tuple[str, ...] = (
    INVALID_JSON, TRAILING_DATA, ARGUMENTS_NOT_OBJECT, UNREGISTERED_TOOL, DUPLICATE_CALL_ID,
    SCHEMA_INVALID, POLICY_DENIED, POLICY_ERROR, NO_EXECUTOR, EXECUTION_ERROR,
    IDENTITY_COLLISION,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """What a policy sees of one call: its name, its parsed arguments and its ids."""

    name: str
    arguments: Any = field(repr=False)
    call_id: str
    response_id: str
    run_id: str
    attempt: int
    #: ``"function"`` (``arguments`` a JSON object) or ``"custom"`` (``arguments`` is text).
    kind: str


Policy = Callable[[ToolCallView], "Decision | str | Awaitable[Decision | str]"]
Executor = Callable[[Any], Any]


class GateCall:
    """One call's record (seed 001): ids, tool name, sizes, statuses and a short error class.

    Never the arguments. ``output`` holds what the executor returned, in memory only (for the
    caller's follow-up request); it is in no record, span, metric or ledger row.
    """

    __slots__ = (
        "_call",
        "_claimed",
        "_state",
        "attempt",
        "buffer_bytes",
        "error_class",
        "exception_type",
        "execution_status",
        "finished_at",
        "history",
        "json_status",
        "kind",
        "opened_at",
        "output",
        "policy_decision",
        "position",
        "response_id",
        "route",
        "run_id",
        "schema_keyword",
        "schema_status",
        "stream_event",
        "terminal_seen",
        "trailing_data",
    )

    def __init__(self, call: ToolCall, position: int, run_id: str, attempt: int) -> None:
        self._call = call
        self._state = ToolCallState.RECEIVING
        #: Every state the call passed through, in order.
        self.history: list[ToolCallState] = [self._state]
        self.run_id = run_id
        self.attempt = attempt
        #: The call's position among this response's calls (its id when the provider gave none).
        self.position = position
        self.response_id: str | None = None
        self.kind = call.kind
        self.opened_at = time.time_ns()
        self.buffer_bytes: int | None = None
        #: ``valid``, ``invalid``, ``not_object``, ``text`` (a custom tool) or ``unchecked``.
        self.json_status = "unchecked"
        self.trailing_data = False
        #: ``valid``, ``invalid``, ``none`` (no schema registered) or ``unchecked``.
        self.schema_status = "unchecked"
        #: The JSON Schema keyword the arguments failed (``required``, ``maximum``...).
        self.schema_keyword: str | None = None
        #: The policy's answer (``approve``, ``deny``, ``needs_approval``), None before it.
        self.policy_decision: str | None = None
        #: ``succeeded``, ``failed``, or the ledger's status for a call not run now.
        self.execution_status: str | None = None
        self.error_class: str | None = None
        #: The executor's exception type, for ``EXECUTION_FAILED`` (``error_class`` is closed).
        self.exception_type: str | None = None
        self.finished_at: int | None = None
        self._claimed: CallKey | None = None  # the key the ledger was asked to claim
        #: The route that judged the stream, and whether its terminal event arrived.
        self.route: str | None = None
        self.terminal_seen = False
        #: The SSE event type read last when the call's item ended (or it was quarantined).
        self.stream_event: str | None = None
        self.output: Any = None

    @property
    def state(self) -> ToolCallState:
        return self._state

    @property
    def call_id(self) -> str | None:
        """The provider's call id (``call_...``, ``toolu_...``), None when it sent none. Some
        servers send it after the first argument bytes: it is read from the accumulator."""
        return self._call.call_id

    @property
    def tool_name(self) -> str | None:
        return self._call.name

    @property
    def key(self) -> CallKey:
        """The call's identity in the ledger: its position (``#N``) when the provider sent no
        call id; once claimed, the key it was claimed under (``#N:<fingerprint>`` for a call
        without any provider identity that another call's claim held at its position)."""
        if self._claimed is not None:
            return self._claimed
        call_id = self.call_id if self.call_id is not None else f"#{self.position}"
        return CallKey(self.run_id, self.response_id or "", call_id)

    @property
    def identified(self) -> bool:
        """Whether the provider gave the call any identity: a call id or a response id."""
        return self.call_id is not None or bool(self.response_id)

    def fingerprint(self) -> str:
        """A digest of the parsed call, to tell a replay from another call under one key: of
        its run id (equal calls of two runs do not share one), kind, tool name and arguments
        as canonical JSON. Not content: nothing of the arguments can be read back from it."""
        call = self._call
        text = _canonical_json([self.run_id, call.kind, call.name, call.arguments])
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    @property
    def final(self) -> bool:
        return self._state in FINAL_STATES

    def advance(self, to: ToolCallState, error_class: str | None = None) -> None:
        """Move to ``to``; raises ``IllegalTransition`` for a move the table does not allow."""
        if to not in _TRANSITIONS.get(self._state, ()):
            raise IllegalTransition(f"tool call {self.position}: {self._state} -> {to}")
        self._state = to
        self.history.append(to)
        if error_class is not None:
            self.error_class = error_class
        if to in FINAL_STATES:
            self.finished_at = time.time_ns()

    def quarantine(self, error_class: str) -> None:
        """Stop the call short of execution, its buffer never parsed as a complete call."""
        call = self._call
        if self.buffer_bytes is None:
            self.buffer_bytes = call.buffered_bytes()
        self.advance(ToolCallState.QUARANTINED, error_class)

    def record(self) -> dict[str, Any]:
        """The seed's sanitized record: JSON-ready, without arguments or output."""
        finished = self.finished_at if self.finished_at is not None else time.time_ns()
        return {
            "observed_at": _rfc3339(finished),
            "run_id": self.run_id,
            "attempt": self.attempt,
            "response_id": self.response_id,
            "item_id": self.call_id,
            "model_route": self.route,
            "stream_event": self.stream_event,
            "tool_name": self.tool_name,
            "state": self._state.value,
            "buffer_bytes": self.buffer_bytes,
            "terminal_seen": self.terminal_seen,
            "json_status": self.json_status,
            "trailing_data": self.trailing_data,
            "schema_status": self.schema_status,
            "policy_status": self.policy_decision,
            "execution_state": self.execution_status,
            "error_class": self.error_class,
        }

    def __repr__(self) -> str:
        return (
            f"GateCall(call_id={self.call_id!r}, tool_name={self.tool_name!r}, "
            f"state={self._state.value}, error_class={self.error_class!r})"
        )


@dataclass(frozen=True, slots=True)
class GateResult:
    """One attempt: its calls' records and what the stream's reading found."""

    run_id: str
    attempt: int
    calls: tuple[GateCall, ...]
    #: The accepted stream (text, usage...), None when it was refused.
    stream: StreamResult | None = field(repr=False)
    #: Why the stream was refused (a ``StreamFault`` code), None when it was accepted.
    fault: str | None
    report: StreamReport | None = field(repr=False)
    response_id: str | None = None
    #: The SSE event type of the last event read, the last call id seen, and why the stream
    #: ended early (``transport``, ``timeout``, ``cancelled`` or the client's exception type).
    last_event_type: str | None = None
    last_item_id: str | None = None
    disconnect_reason: str | None = None

    @property
    def executed(self) -> tuple[GateCall, ...]:
        return tuple(call for call in self.calls if call.state is ToolCallState.EXECUTED)

    @property
    def quarantined(self) -> tuple[GateCall, ...]:
        return tuple(call for call in self.calls if call.state is ToolCallState.QUARANTINED)


class ToolGate:
    """Runs a model's tool calls only once each provably completed, validated, was approved,
    and was durably recorded as decided; never twice.

    Args:
        tools: the registered tools: JSON Schemas by name (None for a tool without one), or an
            OpenAI or Anthropic ``tools`` list. Without it, the names given to ``execute=`` are
            the registered tools (without schemas). A call to any other name is quarantined.
        policy: ``policy(view) -> "approve" | "deny" | "needs_approval"`` (or a ``Decision``;
            async allowed in ``arun``), given a ``ToolCallView``; approve-all when None. An
            exception or any other answer denies the call.
        ledger: where decisions and results persist (``SQLiteLedger(path)`` across processes
            and restarts); a ``MemoryLedger`` of this gate's own when None.
        run_at: ``"response"`` (the default): calls are decided once the response's terminal
            event arrived. ``"item"``: on a route that proves a call complete before the
            response ends (``Route.proves_item_end``), each call is decided at its own terminal
            event; elsewhere this falls back to ``"response"``.
        limits, accept_stop_reasons, idle_timeout, deadline, drain: as for ``read_stream``.
        tracer_provider, meter_provider: None for the global ones.
    """

    def __init__(
        self,
        tools: ToolSchemas | None = None,
        policy: Policy | None = None,
        ledger: Ledger | None = None,
        *,
        run_at: str = "response",
        limits: Limits | None = None,
        accept_stop_reasons: Iterable[str] | None = None,
        idle_timeout: float | None = None,
        deadline: float | None = None,
        drain: bool = False,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if run_at not in ("response", "item"):
            raise ValueError(f"run_at must be 'response' or 'item', not {run_at!r}")
        from .telemetry import GateTelemetry

        self.registry = None if tools is None else ToolRegistry(tools)
        self.policy = policy
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.run_at = run_at
        self._reading: dict[str, Any] = {
            "limits": limits,
            "accept_stop_reasons": accept_stop_reasons,
            "idle_timeout": idle_timeout,
            "deadline": deadline,
            "drain": drain,
        }
        self._telemetry: GateTelemetry = GateTelemetry(tracer_provider, meter_provider)

    def run(
        self,
        source: Iterable[bytes] | Any,
        route: str | type[Route] | None = None,
        *,
        execute: Mapping[str, Executor] | None = None,
        run_id: str | None = None,
    ) -> GateResult:
        """Read one stream (one attempt of ``run_id``, a fresh one when None) and decide each of
        its calls.

        ``source`` is what ``read_stream`` takes: a response or an iterable of bytes. A refused
        stream is not an exception: ``result.fault`` holds its code (a response refused for its
        status or media type has no calls).
        ``execute`` maps tool names to callables taking the parsed arguments (a custom tool's
        text); what one returns is kept in its record's ``output``. An executor that raises
        ends its call ``EXECUTION_FAILED``; a ``BaseException`` (cancellation, an interrupt)
        propagates, the call left decided in the ledger (``NEEDS_RECONCILIATION`` next time).
        """
        executors = dict(execute or {})
        for name, executor in executors.items():
            if inspect.iscoroutinefunction(executor):
                raise TypeError(f"executor {name!r} is async: use arun()")
        attempt = _Attempt(self, executors, run_id)
        with attempt.recording():
            try:
                reader = StreamReader(source, route, **self._reading)
            except StreamFault as fault:
                return attempt.refused(fault)
            while not reader._ended:
                reader._step()
                for record in attempt.observe(reader):
                    attempt.execute(record, attempt.decide(record))
            attempt.settle(reader)
            for record in attempt.ready():
                attempt.execute(record, attempt.decide(record))
            return attempt.result(reader)

    async def arun(
        self,
        source: AsyncIterable[bytes] | Any,
        route: str | type[Route] | None = None,
        *,
        execute: Mapping[str, Executor] | None = None,
        run_id: str | None = None,
    ) -> GateResult:
        """The async twin of ``run``: executors and the policy may be sync or async."""
        attempt = _Attempt(self, dict(execute or {}), run_id)
        with attempt.recording():
            try:
                reader = AsyncStreamReader(source, route, **self._reading)
            except StreamFault as fault:
                return attempt.refused(fault)
            while not reader._ended:
                await reader._step()
                for record in attempt.observe(reader):
                    await attempt.aexecute(record, await attempt.adecide(record))
            attempt.settle(reader)
            for record in attempt.ready():
                await attempt.aexecute(record, await attempt.adecide(record))
            return attempt.result(reader)


class _Attempt:
    """One stream read by a gate: its records, and the moves that change them."""

    def __init__(self, gate: ToolGate, executors: dict[str, Executor], run_id: str | None) -> None:
        self._gate = gate
        self._executors = executors
        self._registered = (
            gate.registry.names if gate.registry is not None else frozenset(executors)
        )
        self.run_id = run_id if run_id is not None else uuid.uuid4().hex
        self.attempt, self._earlier_spans = gate.ledger.start_attempt(self.run_id)
        self.calls: list[GateCall] = []
        self._seen = 0  # calls of the stream looked at, server calls included
        self._early = False  # deciding at each call's own terminal event (run_at="item")
        self._fault: StreamFault | None = None
        self._result: GateResult | None = None
        self._last_event: str | None = None  # the SSE event type last read, for the records
        self._open: list[GateCall] = []  # records whose item has not ended yet

    @contextmanager
    def recording(self) -> Iterator[None]:
        """The attempt's span, current while the stream is read and its calls decided; on the
        way out (an exception included) every call is recorded. An exception from the read or
        an executor leaves every call not yet decided quarantined as ``cancelled``."""
        telemetry = self._gate._telemetry
        span = telemetry.start_attempt(self, self._earlier_spans)
        context = span.get_span_context()
        if context.is_valid:  # later attempts of the run link to it, across restarts too
            ledger = self._gate.ledger
            ledger.set_attempt_span(self.run_id, self.attempt, (context.trace_id, context.span_id))
        try:
            with telemetry.current(span):
                yield
        except BaseException:
            self.abandon(Outcome.CANCELLED.value)
            raise
        finally:
            telemetry.end_attempt(span, self, self._result)

    # -- reading -----------------------------------------------------------------------------

    def observe(self, reader: _Reader) -> list[GateCall]:
        """Take note of what the stream did to its calls since the last look: calls opened,
        items ended. With ``run_at="item"`` on a route that proves item completion, check the
        calls whose item ended and return those now ready for the policy."""
        monitor = reader.monitor
        state = monitor.state
        for call in state.tool_calls[self._seen :]:
            self._seen += 1
            if call.kind == SERVER:
                continue  # run by the provider: never the application's to run
            record = GateCall(call, len(self.calls), self.run_id, self.attempt)
            record.advance(ToolCallState.ITEM_OPEN)
            self.calls.append(record)
            self._open.append(record)
        if self._open and any(record._call.closed for record in self._open):
            for record in self._open:
                if record._call.closed:
                    self._item_ended(record, state.response_id)
            self._open = [record for record in self._open if not record._call.closed]
        if self._gate.run_at != "item" or not monitor.route_class.proves_item_end:
            return []
        self._early = True
        # A call is keyed by its response's id: one whose id has not arrived yet (a resumed
        # stream) waits for the response's end.
        return [
            record
            for record in self.calls
            if record.state is ToolCallState.ITEM_TERMINAL
            and record.response_id is not None
            and self._check(record)
        ]

    def settle(self, reader: _Reader) -> None:
        """The stream was judged: if it was accepted, check every call whose item ended; if
        refused, quarantine every call not yet decided with the fault's code, none of them
        parsed as a complete call (an argument problem the accumulator found is kept)."""
        try:
            reader._verdict()
        except StreamFault as fault:
            self._fault = fault
        self._last_event = reader._enforcer.last_event_type
        response_id = reader.monitor.state.response_id
        for record in self.calls:
            if record.response_id is None:
                record.response_id = response_id
            if record.state is not ToolCallState.ITEM_TERMINAL:
                continue
            if self._fault is None:
                self._check(record)
            elif not record._call.valid:
                self._refuse_arguments(record)
        if self._fault is not None:
            self.abandon(self._fault.code)

    def abandon(self, error_class: str) -> None:
        """Quarantine every call not yet decided, with its byte count and ids."""
        for record in self.calls:
            if record.state in _UNDECIDED:
                if record.stream_event is None:
                    record.stream_event = self._last_event
                record.quarantine(error_class)

    def ready(self) -> list[GateCall]:
        """Calls that passed every check and wait for the policy, in stream order."""
        return [record for record in self.calls if record.state is ToolCallState.SCHEMA_VALID]

    def _item_ended(self, record: GateCall, response_id: str | None) -> None:
        call = record._call
        record.response_id = response_id
        record.stream_event = call.closed_by
        record.buffer_bytes = call.byte_count
        record.advance(ToolCallState.ITEM_TERMINAL)

    def _refuse_arguments(self, record: GateCall) -> None:
        """Quarantine a call whose arguments are not one JSON value, or had more bytes after
        the call closed (trailing data)."""
        problem = record._call.problem
        record.json_status = "invalid"
        record.trailing_data = problem == TRAILING_DATA
        record.quarantine(problem or INVALID_JSON)

    def _check(self, record: GateCall) -> bool:
        """From the item's terminal event to ``SCHEMA_VALID`` (True), or ``QUARANTINED``."""
        call = record._call
        if not call.valid:
            self._refuse_arguments(record)
            return False
        if call.kind == CUSTOM:
            record.json_status = "text"
        elif isinstance(call.arguments, dict):
            record.json_status = "valid"
        else:
            record.json_status = "not_object"
            record.quarantine(ARGUMENTS_NOT_OBJECT)
            return False
        record.advance(ToolCallState.PARSED)
        if record.tool_name not in self._registered:
            record.quarantine(UNREGISTERED_TOOL)
            return False
        registry = self._gate.registry
        if registry is None or call.kind == CUSTOM or not registry.has_schema(record.tool_name):
            record.schema_status = "none"
        else:
            keyword = registry.schema_error(record.tool_name, call.arguments)
            if keyword is not None:
                record.schema_status, record.schema_keyword = "invalid", keyword
                record.quarantine(SCHEMA_INVALID)
                return False
            record.schema_status = "valid"
        if self._early and self._id_taken(record):
            # Decided early, a call cannot wait for the reader's duplicate check at the end.
            record.quarantine(DUPLICATE_CALL_ID)
            return False
        record.advance(ToolCallState.SCHEMA_VALID)
        return True

    def _id_taken(self, record: GateCall) -> bool:
        """Whether another call of this response with ``record``'s id was checked already
        (whichever opened first: items may interleave and close in any order)."""
        return record.call_id is not None and any(
            other is not record
            and other.call_id == record.call_id
            and other.state not in (ToolCallState.ITEM_OPEN, ToolCallState.ITEM_TERMINAL)
            for other in self.calls
        )

    # -- deciding and running ----------------------------------------------------------------

    def _view(self, record: GateCall) -> ToolCallView:
        key = record.key
        return ToolCallView(
            name=record.tool_name or "",
            arguments=record._call.arguments,
            call_id=key.call_id,
            response_id=key.response_id,
            run_id=self.run_id,
            attempt=self.attempt,
            kind=record.kind,
        )

    def decide(self, record: GateCall) -> Executor | None:
        """Ask the policy; return the executor to call now (None: not to run)."""
        policy = self._gate.policy
        answer: Any = Decision.APPROVE
        if policy is not None:
            try:
                answer = policy(self._view(record))
                if inspect.isawaitable(answer):
                    _discard(answer)
                    answer = None  # an async policy in a sync run: it decided nothing
            except Exception:
                answer = None
        return self._apply(record, answer)

    async def adecide(self, record: GateCall) -> Executor | None:
        policy = self._gate.policy
        answer: Any = Decision.APPROVE
        if policy is not None:
            try:
                answer = policy(self._view(record))
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception:
                answer = None
        return self._apply(record, answer)

    def _apply(self, record: GateCall, answer: Any) -> Executor | None:
        """Move a checked call by its policy's answer (None, or anything but a ``Decision``
        value: the policy failed, which denies); then claim it in the ledger if approved."""
        try:
            decision = Decision(answer)
        except ValueError:
            record.policy_decision = Decision.DENY.value
            record.advance(ToolCallState.POLICY_DENIED, POLICY_ERROR)
            return None
        record.policy_decision = decision.value
        if decision is Decision.DENY:
            record.advance(ToolCallState.POLICY_DENIED, POLICY_DENIED)
            return None
        if decision is Decision.NEEDS_APPROVAL:
            record.advance(ToolCallState.NEEDS_APPROVAL)
            return None
        record.advance(ToolCallState.POLICY_APPROVED)
        executor = self._executors.get(record.tool_name or "")
        if executor is None:
            record.error_class = NO_EXECUTOR
            record.finished_at = time.time_ns()
            return None
        # The decision is durable before the executor runs: at most once, across restarts.
        fingerprint = record.fingerprint()
        key = record.key
        found = self._claim(key, record, fingerprint)
        if (
            found is not None
            and found.fingerprint not in (None, fingerprint)
            and not record.identified
        ):
            # No provider identity: the position was the gate's guess, and another call of the
            # run holds it (a retry's different answer). This call's identity is its own.
            key = CallKey(key.run_id, key.response_id, f"{key.call_id}:{fingerprint}")
            found = self._claim(key, record, fingerprint)
        record._claimed = key
        if found is None:
            return executor
        if found.fingerprint != fingerprint:
            # Another call's claim (or one too old to tell): running this one could repeat a
            # side effect, and taking it for a replay would report a result it never had.
            record.quarantine(IDENTITY_COLLISION)
            return None
        record.execution_status = found.status
        to = ToolCallState.NEEDS_RECONCILIATION if found.status == DECIDED else _S.REPLAYED
        record.advance(to)
        return None

    def _claim(self, key: CallKey, record: GateCall, fingerprint: str) -> LedgerEntry | None:
        return self._gate.ledger.claim(
            key, attempt=self.attempt, tool_name=record.tool_name, fingerprint=fingerprint
        )

    def execute(self, record: GateCall, executor: Executor | None) -> None:
        if executor is None:
            return
        try:
            output = executor(record._call.arguments)
        except Exception as error:
            self._executed(record, None, error)
            return
        self._executed(record, output, None)

    async def aexecute(self, record: GateCall, executor: Executor | None) -> None:
        if executor is None:
            return
        try:
            output = executor(record._call.arguments)
            if inspect.isawaitable(output):
                output = await output
        except Exception as error:
            self._executed(record, None, error)
            return
        self._executed(record, output, None)

    def _executed(self, record: GateCall, output: Any, error: Exception | None) -> None:
        ledger = self._gate.ledger
        if error is None:
            ledger.finish(record.key, SUCCEEDED)
            record.output = output
            record.execution_status = SUCCEEDED
            record.advance(ToolCallState.EXECUTED)
        else:
            record.exception_type = type(error).__name__
            ledger.finish(record.key, FAILED, record.exception_type)
            record.execution_status = FAILED
            record.advance(ToolCallState.EXECUTION_FAILED, EXECUTION_ERROR)

    # -- the result --------------------------------------------------------------------------

    def refused(self, fault: StreamFault) -> GateResult:
        """The response was refused before its body was read (its status or media type)."""
        self._fault = fault
        self._result = GateResult(
            run_id=self.run_id, attempt=self.attempt, calls=(), stream=None, fault=fault.code,
            report=None,
        )  # fmt: skip
        return self._result

    def result(self, reader: _Reader) -> GateResult:
        fault = self._fault
        report = fault.report if fault is not None else reader._verdict().report
        state = reader.monitor.state
        disconnect = None
        if fault is not None and report is not None:
            # The client's exception, else how the read ended, else a clean close that came
            # before the terminal event.
            cause = fault.__cause__
            disconnect = type(cause).__name__ if cause is not None else report.error
            if disconnect is None and not (report.terminal_seen or reader.monitor.ended):
                disconnect = "eof"
        for record in self.calls:
            record.route = None if report is None else report.route
            record.terminal_seen = report is not None and report.terminal_seen
        self._result = GateResult(
            run_id=self.run_id,
            attempt=self.attempt,
            calls=tuple(self.calls),
            stream=None if fault is not None else reader._verdict(),
            fault=None if fault is None else fault.code,
            report=report,
            response_id=state.response_id,
            last_event_type=reader._enforcer.last_event_type,
            last_item_id=next(
                (call.call_id for call in reversed(state.tool_calls) if call.call_id), None
            ),
            disconnect_reason=disconnect,
        )
        return self._result


#: States a call can still be quarantined from: read, not yet decided by the policy.
_UNDECIDED = frozenset({_S.RECEIVING, _S.ITEM_OPEN, _S.ITEM_TERMINAL, _S.PARSED, _S.SCHEMA_VALID})


def _rfc3339(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{moment}.{fraction // 1000:06d}Z"


def _canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys, no spaces and ASCII only (escaped lone surrogates
    included). Arguments nest up to the reader's 256 levels, which may be more than what remains
    of the caller's stack: then on a fresh one."""
    dump = functools.partial(
        json.dumps, value, sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    try:
        return dump()
    except RecursionError:
        return on_fresh_stack(dump)


def _discard(awaitable: Any) -> None:
    """Close a coroutine a sync policy returned by mistake, so that it warns of nothing."""
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()
