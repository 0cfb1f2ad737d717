"""otelsse: stream-integrity observability for LLM Server-Sent Events."""

from ._exceptions import OtelSSEError, ParserClosedError
from ._framing import SSEParser
from .events import SSEEvent
from .version import __version__

__all__ = ["OtelSSEError", "ParserClosedError", "SSEEvent", "SSEParser", "__version__"]
