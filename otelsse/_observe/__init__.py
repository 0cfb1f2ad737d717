"""Observing streams: the same for the client instrumentation, the ASGI middleware and the proxy.

Request time (``_request.py``): ``Settings`` (what ``instrument()`` was given) decides which
requests to watch, and a ``Watch`` carries one from its send to its response headers. Stream time
(``_stream.py``): a ``StreamObserver``, made from a ``StreamStart``, reads one body into a
``StreamMonitor`` as the application reads it and ends its span and metrics exactly once.
``_content.py`` undoes a body's ``Content-Encoding`` where a tap sees it coded.
"""

from .._strict import strict_outcomes
from ._request import GenAISpan, Settings, Watch, genai_neighbour
from ._stream import StreamObserver, StreamStart, Strict, route_labels

__all__ = [
    "GenAISpan",
    "Settings",
    "StreamObserver",
    "StreamStart",
    "Strict",
    "Watch",
    "genai_neighbour",
    "route_labels",
    "strict_outcomes",
]
