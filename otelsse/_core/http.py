"""The one HTTP rule the core owns: which responses can be a stream at all.

A streaming route must be answered with a 2xx status and the ``text/event-stream`` media type;
anything else (an HTML 502 from a proxy, a JSON 429) is a ``protocol_error`` decided at the
headers. The instrumentation and the enforcing reader both ask here.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["StreamViolation", "is_event_stream", "media_type", "stream_violation"]

#: Why a response cannot be the stream that was asked for.
StreamViolation = Literal["status", "media_type"]

EVENT_STREAM = "text/event-stream"


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower case, without parameters."""
    return "" if content_type is None else content_type.split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value names ``text/event-stream`` (parameters ignored)."""
    return media_type(content_type) == EVENT_STREAM


def stream_violation(status: int, content_type: str | None) -> StreamViolation | None:
    """Why a response with this status and ``Content-Type`` is not a stream; None if it is.

    The status is judged first: an error page's media type is a consequence of the error.
    """
    if not 200 <= status < 300:
        return "status"
    if not is_event_stream(content_type):
        return "media_type"
    return None
