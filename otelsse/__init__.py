"""otelsse: stream-integrity observability for LLM Server-Sent Events.

``otelsse.instrument()`` observes every SSE response the application reads through httpx,
httpx2 or requests, and records one span and a set of metrics per stream. The sans-IO core
(``SSEParser``, ``StreamMonitor`` and the routes) turns response bytes into events and one
``StreamReport`` whose ``outcome`` says how the stream really ended; the enforcing reader
(``read_stream``) releases a stream's text and tool calls only once it has; the tool gate
(``ToolGate``) runs a call only once it provably completed, validated and was approved, once.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._core.events import SSEEvent
from ._core.framing import SSEParser
from ._exceptions import OtelSSEError, ParserClosedError
from .gate import (
    Decision,
    GateCall,
    GateResult,
    IllegalTransition,
    ToolCallState,
    ToolCallView,
    ToolGate,
)
from .ledger import CallKey, Ledger, LedgerEntry, MemoryLedger, SQLiteLedger
from .monitor import Limits, Outcome, StreamMonitor, StreamReport
from .reader import (
    AsyncStreamReader,
    StreamFault,
    StreamReader,
    StreamResult,
    TextDelta,
    ToolCallResult,
    aread_stream,
    read_stream,
)
from .routes import Route, detect_route, register_route
from .version import __version__

if _TYPE_CHECKING:
    from .instrumentation import SSEInstrumentor

__all__ = [
    "AsyncStreamReader",
    "CallKey",
    "Decision",
    "GateCall",
    "GateResult",
    "IllegalTransition",
    "Ledger",
    "LedgerEntry",
    "Limits",
    "MemoryLedger",
    "OtelSSEError",
    "Outcome",
    "ParserClosedError",
    "Route",
    "SQLiteLedger",
    "SSEEvent",
    "SSEInstrumentor",
    "SSEParser",
    "StreamFault",
    "StreamMonitor",
    "StreamReader",
    "StreamReport",
    "StreamResult",
    "TextDelta",
    "ToolCallResult",
    "ToolCallState",
    "ToolCallView",
    "ToolGate",
    "__version__",
    "aread_stream",
    "detect_route",
    "instrument",
    "read_stream",
    "register_route",
    "uninstrument",
]


def instrument(**options: _Any) -> None:
    """Observe SSE responses read through httpx, httpx2 and requests from now on.

    Idempotent and silent: a second call changes nothing (``uninstrument()`` first to change
    options). Options: see ``SSEInstrumentor``; ``opentelemetry-instrument`` does the same with
    none.
    """
    from .instrumentation import SSEInstrumentor

    instrumentor = SSEInstrumentor()
    # BaseInstrumentor would log a warning on the second call; "idempotent" means no noise.
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(**options)


def uninstrument() -> None:
    """Undo ``instrument()``: every patched method is restored."""
    from .instrumentation import SSEInstrumentor

    SSEInstrumentor().uninstrument()


def __getattr__(name: str) -> _Any:
    # Lazy, so that ``import otelsse`` (the sans-IO core) loads no OpenTelemetry or wrapt.
    if name == "SSEInstrumentor":
        from .instrumentation import SSEInstrumentor

        SSEInstrumentor.__module__ = "otelsse"
        return SSEInstrumentor
    raise AttributeError(f"module 'otelsse' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


for _name in __all__:
    _value = globals().get(_name)
    if hasattr(_value, "__module__"):
        try:
            _value.__module__ = "otelsse"
        except (AttributeError, TypeError):
            pass
del _name, _value
