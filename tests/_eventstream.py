"""AWS event-stream frames for tests, built by the format's definition (not by otelsse's parser).

A frame: total length, headers length, prelude CRC-32, headers (name length, name, type 7 =
string, value length, value), payload, message CRC-32; integers big-endian (AWS, "Event stream
encoding", https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html).
Bedrock sends three string headers per frame, in this order (every recorded body in
``tests/fixtures/real/bedrock-*.eventstream``).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "chunk",
    "error_frame",
    "event",
    "exception",
    "frame",
    "frame_ends",
    "frames",
    "header",
]

JSON = "application/json"


def header(name: str, value: str) -> bytes:
    """One string header."""
    raw_name, raw_value = name.encode(), value.encode()
    value_length = struct.pack(">H", len(raw_value))
    return bytes([len(raw_name)]) + raw_name + b"\x07" + value_length + raw_value


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One whole frame with string headers."""
    block = b"".join(header(name, value) for name, value in headers.items())
    prelude = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + block + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(name: str, payload: Mapping[str, Any] | bytes) -> bytes:
    """An ``event`` frame, as Bedrock sends it (a JSON object payload unless bytes are given)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return frame({":event-type": name, ":content-type": JSON, ":message-type": "event"}, body)


def exception(name: str, message: str = "an error") -> bytes:
    """An ``exception`` frame of the union member ``name`` (``throttlingException``)."""
    return frame(
        {":exception-type": name, ":content-type": JSON, ":message-type": "exception"},
        json.dumps({"message": message}).encode(),
    )


def error_frame(code: str, message: str = "an error") -> bytes:
    """An unmodelled ``error`` frame."""
    return frame({":error-code": code, ":error-message": message, ":message-type": "error"}, b"")


def chunk(model_event: Mapping[str, Any]) -> bytes:
    """An InvokeModelWithResponseStream ``chunk``: the model's own event, base64 in ``bytes``."""
    encoded = base64.b64encode(json.dumps(model_event).encode()).decode()
    return event("chunk", {"bytes": encoded})


def frame_ends(body: bytes) -> list[int]:
    """The offset where each whole frame of ``body`` ends (by the lengths in its preludes)."""
    ends, at = [], 0
    while at + 4 <= len(body):
        at += struct.unpack_from(">I", body, at)[0]
        ends.append(at)
    return ends


def frames(body: bytes) -> Iterator[bytes]:
    """``body`` one frame per read."""
    start = 0
    for end in frame_ends(body):
        yield body[start:end]
        start = end
