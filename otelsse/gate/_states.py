"""A tool call's states and the one table of the moves between them.

    RECEIVING -> ITEM_OPEN -> ITEM_TERMINAL -> PARSED -> SCHEMA_VALID
        -> POLICY_APPROVED -> EXECUTED | EXECUTION_FAILED | NEEDS_RECONCILIATION | REPLAYED
        -> POLICY_DENIED | NEEDS_APPROVAL
    any state before POLICY_APPROVED -> QUARANTINED
    POLICY_APPROVED -> QUARANTINED (identity_collision: the ledger holds another call's claim)

``move`` is the only way a state changes; the gate's records (``_records.py``) call it.
"""

from __future__ import annotations

import enum

from .._exceptions import OtelSSEError

__all__ = ["FINAL_STATES", "TRANSITIONS", "UNDECIDED", "IllegalTransition", "ToolCallState", "move"]


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
#: Every legal move: the only table of them. Anything else is a bug in the gate and raises
#: ``IllegalTransition``.
TRANSITIONS: dict[ToolCallState, frozenset[ToolCallState]] = {
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
FINAL_STATES = frozenset(set(ToolCallState) - set(TRANSITIONS))
#: States a call can still be quarantined from: read, not yet decided by the policy.
UNDECIDED = frozenset({_S.RECEIVING, _S.ITEM_OPEN, _S.ITEM_TERMINAL, _S.PARSED, _S.SCHEMA_VALID})


class IllegalTransition(OtelSSEError):
    """A record was asked to make a move ``TRANSITIONS`` does not allow: a bug in otelsse."""


def move(state: ToolCallState, to: ToolCallState, what: str) -> ToolCallState:
    """``to``, if the table allows the move from ``state``; ``what`` names the call in the
    error.

    Raises:
        IllegalTransition: the table does not allow it.
    """
    if to not in TRANSITIONS.get(state, ()):
        raise IllegalTransition(f"{what}: {state} -> {to}")
    return to
