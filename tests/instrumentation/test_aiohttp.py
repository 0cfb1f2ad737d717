"""aiohttp's own: what only its ``ClientSession`` has, beyond the shared client tests.

aiohttp is one of the harness's clients (tests/_clients.py), so every shared client test runs on
it, its abandoned responses held by their connections until the session's close lets them go
(``Client.holds_abandoned``). Here: ``release()`` and ``close()`` after EOF and before it, and
leaving ``async with`` in a break; an abandoned response let go when the rest of its body
arrives; ``readexactly`` past the end, ``response.json()``, ``auto_decompress=False`` on one
request; and otelsse's enforcing reader over an observed aiohttp response.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
from typing import Any

import pytest

from otelsse import semconv
from otelsse._reader import aread_stream
from tests._clients import AsyncSession, Client
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.instrumentation.test_lifecycle import (
    BODY,
    FIRST_EVENT_END,
    PATH,
    PIECE,
    ended_once,
    opened,
    spans_ended,
)
from tests.instrumentation.test_span_ends import STREAMS, Streams, ended_once_each

AIOHTTP = Client("aiohttp", is_async=True)


def run(main: Any, **session: Any) -> Any:
    """``main(http)`` on a fresh aiohttp session of the harness."""

    async def go() -> Any:
        async with AsyncSession(AIOHTTP, **session) as http:
            return await main(http)

    return asyncio.run(go())


def served(server: SSEServer, **reply: Any) -> str:
    return server.route(PATH, Reply(BODY, piece=PIECE, **reply))


# -- how a stream ends ----------------------------------------------------------------------


def test_eof_then_release_twice_ends_once_complete(otel: Telemetry, server: SSEServer) -> None:
    url = served(server)

    async def main(http: AsyncSession) -> bytes:
        response = await http.send(url)
        opened(otel)
        data = b"".join([chunk async for chunk in response.content.iter_any()])
        ended_once(otel, "complete")
        response.release()
        response.close()
        return data

    assert run(main) == BODY
    ended_once(otel, "complete")


@pytest.mark.parametrize("end", ["release", "close", "async-with-break"])
def test_stopping_before_eof_is_cancelled(otel: Telemetry, server: SSEServer, end: str) -> None:
    url = served(server, hold_at=FIRST_EVENT_END)

    async def main(http: AsyncSession) -> None:
        if end == "async-with-break":
            async with http.stream(url) as response:
                async for _ in response.content.iter_any():
                    break
        else:
            response = await http.send(url)
            await response.content.readany()
            opened(otel)
            getattr(response, end)()
        ended_once(otel, "cancelled")

    run(main)
    gc.collect()
    ended_once(otel, "cancelled")


def test_an_abandoned_response_ends_when_its_body_ends(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp releases a response's connection when the rest of its body has arrived, unread:
    the response the application dropped is then collected, and its stream ends, while the
    session stays open."""
    streams = Streams(otel, served(server, hold_at=FIRST_EVENT_END))

    async def main(http: AsyncSession) -> None:
        for _ in range(STREAMS):
            await streams.aopen(http)  # its first chunk read, then dropped
        gc.collect()
        assert otel.spans() == []
        assert otel.active_streams() == STREAMS
        server.release.set()
        await asyncio.to_thread(spans_ended, otel, STREAMS)

    run(main)
    assert len(streams.parents) == STREAMS
    ended_once_each(otel, streams.parents, caplog, "cancelled")


def test_readexactly_past_the_end_raises_as_before_and_ends_complete(
    otel: Telemetry, server: SSEServer
) -> None:
    url = served(server)

    async def main(http: AsyncSession) -> tuple[bytes, int]:
        async with http.stream(url) as response:
            with pytest.raises(asyncio.IncompleteReadError) as short:
                await response.content.readexactly(len(BODY) + 1)
            return short.value.partial, short.value.expected

    assert run(main) == (BODY, len(BODY) + 1)
    ended_once(otel, "complete")


# -- what the application holds -------------------------------------------------------------


def test_a_json_body_read_with_json_is_unchanged(otel: Telemetry, server: SSEServer) -> None:
    body = b'{"error": {"message": "busy"}}'
    url = server.route(PATH, Reply(body, content_type="application/json", status=429))

    async def main(http: AsyncSession) -> Any:
        async with http.stream(url) as response:
            return await response.json()

    assert run(main) == {"error": {"message": "busy"}}
    span = otel.stream_span()
    assert (span.attributes or {})[semconv.HTTP_RESPONSE_STATUS_CODE] == 429


def test_auto_decompress_off_gets_the_coded_bytes_and_the_observer_decodes(
    otel: Telemetry, server: SSEServer
) -> None:
    coded = gzip.compress(BODY)
    url = server.route(PATH, Reply(coded, piece=PIECE, headers=(("content-encoding", "gzip"),)))

    async def main(http: AsyncSession) -> bytes:
        async with http.http.post(url, json={"stream": True}, auto_decompress=False) as response:
            return b"".join([chunk async for chunk in response.content.iter_any()])

    assert run(main) == coded
    span = ended_once(otel, "complete")
    # The events were counted: the observer decoded what the application got coded.
    assert (span.attributes or {})[semconv.EVENT_COUNT] > 1


# -- the enforcing reader -------------------------------------------------------------------


def test_the_enforcing_reader_reads_an_aiohttp_response(otel: Telemetry, server: SSEServer) -> None:
    url = served(server)

    async def main(http: AsyncSession) -> Any:
        async with http.stream(url) as response:
            return await aread_stream(response, idle_timeout=5.0)

    result = run(main)
    assert result.report.outcome.value == "complete"
    assert result.text
