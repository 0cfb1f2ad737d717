"""Applications that close the stream themselves, the moment they have what they wanted.

Line-based readers act on a line as soon as it ends: ``data: [DONE]``, the data line of an
Anthropic ``message_stop`` or of an error event. Many close the response right there, before the
blank line that would dispatch the event. The server here holds that blank line (and the rest),
so the close happens with the event's lines read and its dispatch pending: the event was read by
the application and is judged as received. A close in the middle of the answer stays
``cancelled``. Each reader is a real client reading a real server on 127.0.0.1, instrumented
against a real SDK.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import pytest
import requests

from otelsse import semconv
from tests._helpers import waited
from tests._otel import Telemetry
from tests._server import MAX_WAIT, Reply, SSEServer


def _data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def _named(name: str, payload: Any) -> bytes:
    return b"event: " + name.encode() + b"\n" + _data(payload)


_CHAT = _data(_chunk({"content": "Hi"})) + b"\n" + _data(_chunk({}, "stop")) + b"\n"
_MESSAGES = b"\n".join(
    (
        _named("message_start", {"type": "message_start", "message": {"id": "m", "model": "c"}}),
        _named("content_block_start", {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        _named("content_block_delta", {"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "Hi"}}),
        _named("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _named("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": 1}}),
        b"",
    )
)  # fmt: skip

#: (body the server holds at its end, path, the line the application stops at, the outcome):
#: the server sends the body, then waits before the blank line and whatever would follow.
CASES = {
    "chat-done-line": (_CHAT + b"data: [DONE]\n", "/v1/chat/completions", "data: [DONE]",
                       "complete"),
    "chat-error-line": (
        _data(_chunk({"content": "Hi"})) + b"\n"
        + _data({"error": {"type": "server_error", "code": "overloaded", "message": "x"}}),
        "/v1/chat/completions", '{"error"', "provider_error",
    ),
    "messages-stop-line": (
        _MESSAGES + _named("message_stop", {"type": "message_stop"}), "/v1/messages",
        '{"type": "message_stop"', "complete",
    ),
    "messages-error-line": (
        _MESSAGES.split(b"event: content_block_stop")[0]
        + _named("error", {"type": "error", "error": {"type": "overloaded_error"}}),
        "/v1/messages", '{"type": "error"', "provider_error",
    ),
    # Stopping in the middle of the answer is abandoning it.
    "chat-mid-answer": (_data(_chunk({"content": "Hi"})) + b"\n", "/v1/chat/completions",
                        '"Hi"', "cancelled"),
}  # fmt: skip
REQUEST = {"model": "m", "stream": True}


def _httpx(url: str, stop: Callable[[str], bool]) -> None:
    with httpx.Client() as client, client.stream("POST", url, json=REQUEST) as response:
        for line in response.iter_lines():
            if stop(line):
                break


def _requests(url: str, stop: Callable[[str], bool]) -> None:
    with requests.Session() as session, session.post(url, json=REQUEST, stream=True) as response:
        for line in response.iter_lines(decode_unicode=True):
            if stop(line):
                break


def _aiohttp(url: str, stop: Callable[[str], bool]) -> None:
    async def read() -> None:
        async with aiohttp.ClientSession() as session, session.post(url, json=REQUEST) as response:
            async for line in response.content:
                if stop(line.decode()):
                    break

    asyncio.run(read())


LINE_READERS = {"httpx": _httpx, "requests": _requests, "aiohttp": _aiohttp}


@pytest.mark.parametrize("reader", sorted(LINE_READERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_line_based_reader_that_closes_at_a_line_is_judged_by_what_it_read(
    otel: Telemetry, server: SSEServer, reader: str, case: str
) -> None:
    body, path, marker, outcome = CASES[case]
    url = server.route(path, Reply(body + b"\n" + _CHAT, hold_at=len(body)))
    seen: list[str] = []

    def stop(line: str) -> bool:
        seen.append(line)
        return marker in line

    LINE_READERS[reader](url, stop)
    # The server held the blank line after the stop line (it holds there as it sends the line).
    assert waited(server.held.wait, MAX_WAIT)
    assert marker in seen[-1]
    span = otel.stream_span()
    attributes = span.attributes or {}
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes[semconv.BYTES_RECEIVED] <= len(body)
    assert otel.nonzero_outcomes() == {outcome: 1}
