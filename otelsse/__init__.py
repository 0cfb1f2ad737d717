"""otelsse: stream-integrity observability for LLM Server-Sent Events.

``otelsse.instrument()`` observes every SSE response the application reads through httpx,
httpx2, requests or aiohttp, and records one span and a set of metrics per stream. The sans-IO core
(``SSEParser``, ``StreamMonitor`` and the routes) turns response bytes into events and one
``StreamReport`` whose ``outcome`` says how the stream really ended; the enforcing reader
(``read_stream``) releases a stream's text and tool calls only once it has; the tool gate
(``ToolGate``) runs a call only once it provably completed, validated and was approved, once.
Strict mode (``instrument(strict=True)``, ``with otelsse.strict():``) makes a stream the
instrumentation refuses raise in the application's own read.
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._core.events import SSEEvent
from ._core.framing import SSEParser
from ._exceptions import OtelSSEError, ParserClosedError
from ._monitor import Limits, Outcome, StreamMonitor, StreamReport
from ._reader import (
    AsyncStreamReader,
    StreamFault,
    StreamReader,
    StreamResult,
    TextDelta,
    ToolCallResult,
    aread_stream,
    read_stream,
)
from ._strict import STRICT_DEFAULT, strict
from ._version import __version__
from .gate import (
    CallKey,
    Decision,
    GateCall,
    GateResult,
    IllegalTransition,
    Ledger,
    LedgerEntry,
    MemoryLedger,
    SQLiteLedger,
    ToolCallState,
    ToolCallView,
    ToolGate,
)
from .routes import Route, detect_route, register_route

if _TYPE_CHECKING:
    from ._instrumentor import SSEInstrumentor, instrument, uninstrument
    from ._telemetry import span_attributes

__all__ = [
    "STRICT_DEFAULT",
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
    "span_attributes",
    "strict",
    "uninstrument",
]


#: Names loaded on first use, so that ``import otelsse`` (the sans-IO core, the enforcing reader
#: and the gate) loads no OpenTelemetry SDK pieces or wrapt: name -> its private module.
_LAZY = {
    "SSEInstrumentor": "_instrumentor",
    "instrument": "_instrumentor",
    "span_attributes": "_telemetry",
    "uninstrument": "_instrumentor",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otelsse' has no attribute {name!r}")
    value = getattr(_import_module(f"{__name__}.{module}"), name)
    value.__module__ = "otelsse"
    globals()[name] = value
    return value


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
