"""The gate's records: what one call went through (``GateCall``), what one attempt found
(``GateResult``), and what a policy sees (``ToolCallView``).

Ids, names, sizes, statuses and short error classes: never arguments, never results (a
record's ``output`` is the executor's return value, in memory only).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._core.stack import on_fresh_stack
from .._core.state import ToolCall
from .._monitor import StreamReport
from .._reader import StreamResult
from .._tools import TOOL_CALL_FAULTS
from ._ledger import CallKey
from ._states import FINAL_STATES, ToolCallState, move

__all__ = [
    "ERROR_CLASSES",
    "EXECUTION_ERROR",
    "IDENTITY_COLLISION",
    "NO_EXECUTOR",
    "POLICY_DENIED",
    "POLICY_ERROR",
    "Decision",
    "Executor",
    "GateCall",
    "GateResult",
    "Policy",
    "ToolCallView",
]


class Decision(str, enum.Enum):
    """What a policy returns (the plain strings are accepted too)."""

    APPROVE = "approve"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


# A record's short error class (``error.type``): one of ``TOOL_CALL_FAULTS`` (what is wrong with
# the call itself, in the enforcing reader's words), one of these, or a ``StreamFault`` code.
POLICY_DENIED = "policy_denied"
POLICY_ERROR = "policy_error"
NO_EXECUTOR = "no_executor"
EXECUTION_ERROR = "execution_error"
#: The ledger holds a claim of this call's key by a call with another fingerprint (another
#: tool or other arguments: a provider reusing ids), or by one from before ledgers kept them.
IDENTITY_COLLISION = "identity_collision"
#: Every error class a record can carry besides a ``StreamFault`` code: a closed set.
ERROR_CLASSES: tuple[str, ...] = (
    *TOOL_CALL_FAULTS, POLICY_DENIED, POLICY_ERROR, NO_EXECUTOR, EXECUTION_ERROR,
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
    """One call's record: ids, tool name, sizes, statuses and a short error class.

    Never the arguments in what it records. ``arguments`` (what the gate decided on, for the
    policy and the executor) and ``output`` (what the executor returned, for the caller's
    follow-up request) are in memory only: in no record, span, metric or ledger row.
    """

    __slots__ = (
        "_call",
        "_claimed",
        "_state",
        "arguments",
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
        #: The parsed arguments the gate checked and decided on (None until checked).
        self.arguments: Any = None
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
        text = _canonical_json([self.run_id, call.kind, call.name, self.arguments])
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    @property
    def final(self) -> bool:
        return self._state in FINAL_STATES

    def advance(self, to: ToolCallState, error_class: str | None = None) -> None:
        """Move to ``to``; raises ``IllegalTransition`` for a move the table does not allow."""
        self._state = move(self._state, to, f"tool call {self.position}")
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
