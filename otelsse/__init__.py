"""otelsse: stream-integrity observability for LLM Server-Sent Events.

The sans-IO core (``SSEParser``, ``StreamMonitor`` and the routes) turns response bytes into
events and one ``StreamReport`` whose ``outcome`` says how the stream really ended.
"""

from ._exceptions import OtelSSEError, ParserClosedError
from ._framing import SSEParser
from .events import SSEEvent
from .monitor import Limits, Outcome, StreamMonitor, StreamReport
from .routes import RouteAdapter, detect_route, register_route
from .version import __version__

__all__ = [
    "Limits",
    "OtelSSEError",
    "Outcome",
    "ParserClosedError",
    "RouteAdapter",
    "SSEEvent",
    "SSEParser",
    "StreamMonitor",
    "StreamReport",
    "__version__",
    "detect_route",
    "register_route",
]
