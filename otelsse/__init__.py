"""otelsse: stream-integrity observability for LLM Server-Sent Events.

The sans-IO core (``SSEParser``, ``StreamMonitor`` and the routes) turns response bytes into
events and one ``StreamReport`` whose ``outcome`` says how the stream really ended; the enforcing
reader (``read_stream``) releases a stream's text and tool calls only once it has.
"""

from ._exceptions import OtelSSEError, ParserClosedError
from ._framing import SSEParser
from .events import SSEEvent
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
from .routes import RouteAdapter, detect_route, register_route
from .version import __version__

__all__ = [
    "AsyncStreamReader",
    "Limits",
    "OtelSSEError",
    "Outcome",
    "ParserClosedError",
    "RouteAdapter",
    "SSEEvent",
    "SSEParser",
    "StreamFault",
    "StreamMonitor",
    "StreamReader",
    "StreamReport",
    "StreamResult",
    "TextDelta",
    "ToolCallResult",
    "__version__",
    "aread_stream",
    "detect_route",
    "read_stream",
    "register_route",
]

for _name in __all__:
    _value = globals()[_name]
    if hasattr(_value, "__module__"):
        try:
            _value.__module__ = "otelsse"
        except (AttributeError, TypeError):
            pass
del _name, _value
