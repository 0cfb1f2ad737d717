"""What otelsse reads of a request body: its ``stream`` flag and its ``model``, never content.

A body may be megabytes of messages, so it is never parsed: two regular-expression searches over
its bytes, or over the pieces of a body that passes by in parts (a server's app or the proxy reads
it), each searched with the tail of the one before.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

__all__ = ["RequestFields", "RequestScan", "request_fields"]

_STREAM_TRUE = re.compile(rb'"stream"\s*:\s*true')
# A JSON string value of at most 256 characters; inside a string (content) the quotes would be
# escaped, so message text cannot match.
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\\x00-\x1f]|\\.){1,256})"')


class RequestFields(NamedTuple):
    """What otelsse reads of a JSON request body: identifiers, never content."""

    #: The body says ``"stream": true``.
    stream: bool
    #: Its ``model`` field (``gen_ai.request.model``), when it is a short string.
    model: str | None


def request_fields(body: object) -> RequestFields:
    """``stream`` and ``model`` of a JSON request body, read without parsing it: two regular
    expression searches over the bytes (the body may be megabytes of messages)."""
    if type(body) is bytes:  # what every client holds: no conversion, no copy
        data = body
    elif isinstance(body, dict):
        model = body.get("model")
        model = model if isinstance(model, str) and 0 < len(model) <= 256 else None
        return RequestFields(body.get("stream") is True, model)
    elif isinstance(body, str):
        data = body.encode("utf-8", "replace")
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    else:
        return RequestFields(False, None)
    stream = b'"stream"' in data and _STREAM_TRUE.search(data) is not None
    found = _MODEL.search(data) if b'"model"' in data else None
    return RequestFields(stream, None if found is None else _json_string(found.group(1)))


class RequestScan:
    """``request_fields`` of a body that passes in pieces (a server's app or a proxy reads it):
    each piece is searched with the tail of the one before, so a field cut between two pieces
    is found, and nothing of the body is kept beyond that tail."""

    # Enough for a ``"model": "..."`` pair (256 characters, each at most a 6-byte JSON escape).
    _TAIL = 2048

    __slots__ = ("_tail", "model", "stream")

    def __init__(self) -> None:
        self._tail = b""
        self.stream = False
        self.model: str | None = None

    def feed(self, piece: bytes) -> None:
        window = self._tail + piece
        found = request_fields(window)
        self.stream = self.stream or found.stream
        if self.model is None:
            self.model = found.model
        self._tail = window[-self._TAIL :]

    @property
    def fields(self) -> RequestFields:
        return RequestFields(self.stream, self.model)


def _json_string(raw: bytes) -> str | None:
    if b"\\" not in raw:  # no escape (nearly every model name): the bytes are the text
        try:
            return raw.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes
        except UnicodeDecodeError:
            return None
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None
