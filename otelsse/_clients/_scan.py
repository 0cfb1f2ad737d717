"""What otelsse reads of a request body: its ``stream`` flag and its ``model``, never content;
and, for a JSON-RPC request, its ``method``, ``id`` and ``params.name``.

A body may be megabytes of messages, so it is never parsed for the first two: two
regular-expression searches over its bytes, or over the pieces of a body that passes by in parts
(a server's app or the proxy reads it), each searched with the tail of the one before.

A JSON-RPC body is read only when asked (a request no route claims by its URL, asking for SSE),
and parsed only up to ``MAX_RPC_BODY_BYTES``: a search for ``"id"`` could find a key nested in
``params``, and a wrong id would judge a whole answer truncated. A longer body's identifiers
stay unknown, which every route that reads them must bear.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

__all__ = [
    "MAX_RPC_BODY_BYTES",
    "RequestFields",
    "RequestScan",
    "RpcFields",
    "request_fields",
    "rpc_fields",
]

#: The longest JSON-RPC body whose identifiers are read (MCP and A2A requests are a few hundred
#: bytes; a tool call's arguments rarely reach this).
MAX_RPC_BODY_BYTES = 64 * 1024
# The longest ``method`` and ``params.name`` kept: protocol vocabulary, never free text.
_MAX_RPC_NAME_CHARS = 128

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


class RpcFields(NamedTuple):
    """A JSON-RPC request body's identifiers (each None when absent or not a short string)."""

    #: Its ``method`` (``"tools/call"``, ``"message/stream"``).
    method: str | None = None
    #: Its ``id``: a string or an integer, as JSON-RPC 2.0 allows; None for a notification.
    id: str | int | None = None
    #: Its ``params.name`` (the tool of MCP's ``tools/call``, the prompt of ``prompts/get``).
    name: str | None = None


def rpc_fields(body: object) -> RpcFields:
    """The identifiers of a JSON-RPC request body (bytes, text or an already-built object);
    all None for anything else, a batch, or a body past ``MAX_RPC_BODY_BYTES``."""
    if isinstance(body, (str, bytes, bytearray, memoryview)):
        raw = body.encode("utf-8", "replace") if isinstance(body, str) else bytes(body)
        if len(raw) > MAX_RPC_BODY_BYTES or b'"jsonrpc"' not in raw:
            return RpcFields()
        try:
            body = json.loads(raw)
        except ValueError:
            return RpcFields()
    if not isinstance(body, dict) or "jsonrpc" not in body:
        return RpcFields()
    rpc_id = body.get("id")
    params = body.get("params")
    return RpcFields(
        _short(body.get("method")),
        rpc_id if type(rpc_id) in (str, int) else None,
        _short(params.get("name")) if isinstance(params, dict) else None,
    )


def _short(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= _MAX_RPC_NAME_CHARS else None


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
    is found, and nothing of the body is kept beyond that tail; but a body's first
    ``MAX_RPC_BODY_BYTES``, for ``rpc``."""

    # Enough for a ``"model": "..."`` pair (256 characters, each at most a 6-byte JSON escape).
    _TAIL = 2048

    __slots__ = ("_head", "_tail", "model", "stream")

    def __init__(self) -> None:
        self._tail = b""
        # The body so far while it may be a JSON-RPC request short enough to read; None past it.
        self._head: bytearray | None = bytearray()
        self.stream = False
        self.model: str | None = None

    def feed(self, piece: bytes) -> None:
        window = self._tail + piece
        found = request_fields(window)
        self.stream = self.stream or found.stream
        if self.model is None:
            self.model = found.model
        self._tail = window[-self._TAIL :]
        head = self._head
        if head is not None:
            if len(head) + len(piece) > MAX_RPC_BODY_BYTES:
                self._head = None
            else:
                head += piece

    @property
    def rpc(self) -> RpcFields:
        """The JSON-RPC identifiers of the body fed so far (read once it is whole)."""
        return RpcFields() if self._head is None else rpc_fields(self._head)

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
