"""The one HTTP rule the core owns: which responses can be a stream at all.

A streaming route must be answered with a 2xx status that has a body and the
``text/event-stream`` media type; anything else (an HTML 502 from a proxy, a JSON 429, a 204) is
a ``protocol_error`` decided at the headers. The answer to a HEAD request has no body, whatever
its headers say, so it is no stream at all. The instrumentation and the enforcing reader both
ask here.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["StreamViolation", "is_event_stream", "may_stream", "media_type", "stream_violation"]

#: Why a response cannot be the stream that was asked for.
StreamViolation = Literal["status", "media_type"]

EVENT_STREAM = "text/event-stream"

#: 2xx statuses whose response has no body by definition (RFC 9110 §15.3.5, §15.3.6).
_NO_CONTENT = frozenset({204, 205})


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower case, without parameters."""
    return "" if content_type is None else content_type.split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value names ``text/event-stream`` (parameters ignored)."""
    return media_type(content_type) == EVENT_STREAM


def may_stream(method: str) -> bool:
    """Whether the answer to a request with this method can have a body (RFC 9110 §9.3.2)."""
    return method.upper() != "HEAD"


def stream_violation(status: int, content_type: str | None) -> StreamViolation | None:
    """Why a response with this status and ``Content-Type`` is not a stream; None if it is.

    The status is judged first: an error page's media type is a consequence of the error, and
    a status without a body (204, 205, 304) cannot carry a stream whatever its media type.
    """
    if not 200 <= status < 300 or status in _NO_CONTENT:
        return "status"
    if not is_event_stream(content_type):
        return "media_type"
    return None
