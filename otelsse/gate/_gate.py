"""``ToolGate``: a tool runs only once its call provably completed, validated and was approved,
and at most once.

    stream bytes -> enforcing reader (monitor, route, accumulators) -> one record per call,
    walked through the states of ``_states.py``

``ToolGate.run()`` reads one stream (one attempt of a run) through the reader's step API and
walks every call the application is asked to run through the states; ``_states.TRANSITIONS`` is
the only table of moves.
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

import inspect
import time
import uuid
from collections.abc import AsyncIterable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._core.state import CUSTOM, INVALID_JSON, SERVER, TRAILING_DATA
from .._monitor import Limits, Outcome
from .._reader import AsyncStreamReader, StreamFault, StreamReader
from .._tools import (
    ARGUMENTS_NOT_OBJECT,
    DUPLICATE_TOOL_CALL_ID,
    TOOL_SCHEMA_ERROR,
    UNREGISTERED_TOOL,
    ToolRegistry,
    ToolSchemas,
)
from ..routes import Route
from ._ledger import DECIDED, FAILED, SUCCEEDED, CallKey, Ledger, LedgerEntry, MemoryLedger
from ._records import (
    EXECUTION_ERROR,
    IDENTITY_COLLISION,
    NO_EXECUTOR,
    POLICY_DENIED,
    POLICY_ERROR,
    Decision,
    Executor,
    GateCall,
    GateResult,
    Policy,
    ToolCallView,
)
from ._states import UNDECIDED, ToolCallState

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._telemetry import GateTelemetry

__all__ = ["ToolGate"]

_S = ToolCallState


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
        # Here, not at import: ``import otelsse`` loads no OpenTelemetry.
        from ._telemetry import GateTelemetry

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
            while reader.step():
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
            while await reader.step():
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
        span = telemetry.start_attempt(self.run_id, self.attempt, self._earlier_spans)
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
            telemetry.end_attempt(span, self.calls, self._result)

    # -- reading -----------------------------------------------------------------------------

    def observe(self, reader: StreamReader | AsyncStreamReader) -> list[GateCall]:
        """Take note of what the stream did to its calls since the last look: calls opened,
        items ended. With ``run_at="item"`` on a route that proves item completion, check the
        calls whose item ended and return those now ready for the policy."""
        for call in reader.tool_calls[self._seen :]:
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
                    self._item_ended(record)
            self._open = [record for record in self._open if not record._call.closed]
        if self._gate.run_at != "item" or not reader.monitor.route_class.proves_item_end:
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

    def settle(self, reader: StreamReader | AsyncStreamReader) -> None:
        """The stream was judged: if it was accepted, check every call whose item ended; if
        refused, quarantine every call not yet decided with the fault's code, none of them
        parsed as a complete call (an argument problem the accumulator found is kept)."""
        try:
            reader.verdict()
        except StreamFault as fault:
            self._fault = fault
        self._last_event = reader.last_event_type
        response_id = reader.response_id
        for record in self.calls:
            if record.response_id is None:
                record.response_id = response_id
            if record.state is not ToolCallState.ITEM_TERMINAL:
                continue
            if self._fault is None:
                self._check(record)
            elif not record._call.valid:
                self._refuse_arguments(record, record._call.problem)
        if self._fault is not None:
            self.abandon(self._fault.code)

    def abandon(self, error_class: str) -> None:
        """Quarantine every call not yet decided, with its byte count and ids."""
        for record in self.calls:
            if record.state in UNDECIDED:
                if record.stream_event is None:
                    record.stream_event = self._last_event
                record.quarantine(error_class)

    def ready(self) -> list[GateCall]:
        """Calls that passed every check and wait for the policy, in stream order."""
        return [record for record in self.calls if record.state is ToolCallState.SCHEMA_VALID]

    def _item_ended(self, record: GateCall) -> None:
        call = record._call
        # The id as the call closed, not as the read that closed it ended: a decision taken at
        # the item's end sees what came before it, however the stream was read.
        record.response_id = call.response_id
        record.stream_event = call.closed_by
        record.buffer_bytes = call.byte_count
        record.advance(ToolCallState.ITEM_TERMINAL)

    def _refuse_arguments(self, record: GateCall, problem: str | None) -> None:
        """Quarantine a call whose arguments are not one JSON value, or had more bytes after
        the call closed (trailing data)."""
        record.json_status = "invalid"
        record.trailing_data = problem == TRAILING_DATA
        record.quarantine(problem or INVALID_JSON)

    def _check(self, record: GateCall) -> bool:
        """From the item's terminal event to ``SCHEMA_VALID`` (True), or ``QUARANTINED``."""
        call = record._call
        # Decided at its item's end, a call is judged as it closed: bytes after its close, in
        # the same read or a later one, cannot change a decision taken then (chunking never
        # does); decided at the response's end, it is judged with everything that came.
        valid, arguments, problem = (
            call.as_closed() if self._early else (call.valid, call.arguments, call.problem)
        )
        if not valid:
            self._refuse_arguments(record, problem)
            return False
        record.arguments = arguments
        if call.kind == CUSTOM:
            record.json_status = "text"
        elif isinstance(arguments, dict):
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
            keyword = registry.schema_error(record.tool_name, arguments)
            if keyword is not None:
                record.schema_status, record.schema_keyword = "invalid", keyword
                record.quarantine(TOOL_SCHEMA_ERROR)
                return False
            record.schema_status = "valid"
        if self._early and self._id_taken(record):
            # Decided early, a call cannot wait for the reader's duplicate check at the end.
            record.quarantine(DUPLICATE_TOOL_CALL_ID)
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
            arguments=record.arguments,
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
            output = executor(record.arguments)
        except Exception as error:
            self._executed(record, None, error)
            return
        self._executed(record, output, None)

    async def aexecute(self, record: GateCall, executor: Executor | None) -> None:
        if executor is None:
            return
        try:
            output = executor(record.arguments)
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

    def result(self, reader: StreamReader | AsyncStreamReader) -> GateResult:
        fault = self._fault
        report = fault.report if fault is not None else reader.verdict().report
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
            stream=None if fault is not None else reader.verdict(),
            fault=None if fault is None else fault.code,
            report=report,
            response_id=reader.response_id,
            last_event_type=reader.last_event_type,
            last_item_id=next(
                (call.call_id for call in reversed(reader.tool_calls) if call.call_id), None
            ),
            disconnect_reason=disconnect,
        )
        return self._result


def _discard(awaitable: Any) -> None:
    """Close a coroutine a sync policy returned by mistake, so that it warns of nothing."""
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()
