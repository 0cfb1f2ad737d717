"""The tool-execution gate: a model's tool call runs only once it provably completed, validated
and was approved, and at most once, across restarts.

    gate = ToolGate(tools, policy, SQLiteLedger("calls.db"))
    result = gate.run(response, execute={"get_weather": get_weather})

``_states.py`` holds a call's states and the one table of moves between them; ``_records.py``
the records (``GateCall``, ``GateResult``) and what a policy sees; ``_gate.py`` the gate, which
reads a stream through the enforcing reader's step API; ``_ledger.py`` where decisions and
results persist; ``_telemetry.py`` its spans and metric, from the records alone.
"""

from ._gate import ToolGate
from ._ledger import CallKey, Ledger, LedgerEntry, MemoryLedger, SQLiteLedger
from ._records import ERROR_CLASSES, Decision, GateCall, GateResult, ToolCallView
from ._states import FINAL_STATES, IllegalTransition, ToolCallState

__all__ = [
    "ERROR_CLASSES",
    "FINAL_STATES",
    "CallKey",
    "Decision",
    "GateCall",
    "GateResult",
    "IllegalTransition",
    "Ledger",
    "LedgerEntry",
    "MemoryLedger",
    "SQLiteLedger",
    "ToolCallState",
    "ToolCallView",
    "ToolGate",
]
