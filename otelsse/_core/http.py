"""The one HTTP rule the core owns: which responses can be a stream at all.

A streaming route must be answered with a 2xx status that has a body and the route's media
type (``text/event-stream``; AWS's event stream for Bedrock). A non-2xx status is the server
saying no, in HTTP's words: ``rate_limited`` for a 429 (the caller's quota), ``http_error`` for
any other (an HTML 502 from a proxy, a 401, a 503); an SRE must tell those apart from a broken
stream. A 2xx that is not a
stream (the wrong media type, a 204) is a ``protocol_error``. All are decided at the headers.
The answer to a HEAD request has no body, whatever its headers say, so it is no stream at all.
The instrumentation and the enforcing reader both ask here.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Literal

__all__ = [
    "StreamViolation",
    "accepts_event_stream",
    "is_event_stream",
    "may_stream",
    "media_type",
    "retry_after",
    "stream_violation",
]

#: Why a response cannot be the stream that was asked for: ``rate_limited`` (429),
#: ``http_status`` (any other non-2xx), ``no_content`` (a 2xx without a body) or ``media_type``.
#: The first two are outcomes of their own; the last two are protocol errors.
StreamViolation = Literal["rate_limited", "http_status", "no_content", "media_type"]

#: Longest ``Retry-After`` believed, in seconds (a day): a larger or malformed value is a
#: server's bug, not advice.
MAX_RETRY_AFTER = 86400.0

EVENT_STREAM = "text/event-stream"

#: 2xx statuses whose response has no body by definition (RFC 9110 §15.3.5, §15.3.6).
_NO_CONTENT = frozenset({204, 205})


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower case, without parameters."""
    return "" if content_type is None else content_type.split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value names ``text/event-stream`` (parameters ignored)."""
    return media_type(content_type) == EVENT_STREAM


def accepts_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` value lists ``text/event-stream`` among its media ranges (an MCP
    client's is ``application/json, text/event-stream``: RFC 9110 §12.5.1)."""
    if accept is None or EVENT_STREAM not in accept.lower():
        return False
    return any(media_type(member) == EVENT_STREAM for member in accept.split(","))


def may_stream(method: str) -> bool:
    """Whether the answer to a request with this method can have a body (RFC 9110 §9.3.2)."""
    return method.upper() != "HEAD"


def stream_violation(
    status: int, content_type: str | None, expected: str = EVENT_STREAM
) -> StreamViolation | None:
    """Why a response with this status and ``Content-Type`` is not a stream of the ``expected``
    media type (the route's: SSE unless it declares another); None if it is.

    The status is judged first: an error page's media type is a consequence of the error, and
    a status without a body (204, 205, 304) cannot carry a stream whatever its media type.
    """
    if status == 429:
        return "rate_limited"
    if not 200 <= status < 300:
        return "http_status"
    if status in _NO_CONTENT:
        return "no_content"
    if media_type(content_type) != expected:
        return "media_type"
    return None


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks the caller to wait, from ``retry-after-ms`` (OpenAI's) or
    ``Retry-After`` (delta-seconds or an HTTP-date, RFC 9110 §10.2.3); None when absent or not
    believable (negative, malformed, over a day)."""
    seconds: float | None = None
    millis = headers.get("retry-after-ms")
    if millis:
        seconds = _number(millis)
        seconds = None if seconds is None else seconds / 1000
    value = headers.get("retry-after")
    if seconds is None and value:
        value = value.strip()
        seconds = _number(value)
        if seconds is None:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
            if when.tzinfo is None:
                return None
            seconds = max(0.0, when.timestamp() - (time.time() if now is None else now))
    if seconds is None or not 0 <= seconds <= MAX_RETRY_AFTER:
        return None
    return seconds


def _number(text: str) -> float | None:
    try:
        value = float(text.strip()[:32])
    except ValueError:
        return None
    return value if math.isfinite(value) else None
