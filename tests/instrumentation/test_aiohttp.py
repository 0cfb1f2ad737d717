"""aiohttp's ``ClientSession``: the shared client tests run on it, and what they cannot say.

The shared tests (matrix, privacy, hostile, lifecycle) are collected here again with the
``client``/``async_client``/``client_style`` fixtures narrowed to aiohttp; those whose bodies
call another client's API (httpx's ``aclose()``, ``aiter_raw``) have their aiohttp twins below.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
from typing import Any

import aiohttp
import pytest

from otelsse import semconv
from otelsse._reader import aread_stream
from tests._clients import AIOHTTP, AsyncSession, Client, Style, uninstrumented
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.instrumentation.test_hostile import (  # noqa: F401 -- collected here for aiohttp
    ceilings,
    test_a_bodiless_status_on_a_streaming_route_is_refused_at_its_headers,
    test_a_bomb_of_valid_events_is_parsed_to_its_end_in_a_few_ceilings,
)
from tests.instrumentation.test_lifecycle import (  # noqa: F401 -- collected here for aiohttp
    BODY,
    EVENT_WAIT,
    FIRST_EVENT_END,
    PATH,
    PIECE,
    ended_once,
    opened,
    sdk_trace_warnings,
    spans_ended,
    test_a_failure_inside_otelsse_is_contained_counted_and_logged_once,
    test_a_read_timeout_on_a_stall_is_a_timeout,
    test_a_request_that_fails_before_its_headers_ends_its_span_once,
    test_a_transport_error_is_truncated_and_reaches_the_app_unchanged,
    test_the_application_gets_the_same_chunks_with_and_without_otelsse,
    test_the_applications_span_stays_current_while_it_reads_the_body,
)
from tests.instrumentation.test_matrix import (  # noqa: F401 -- collected here for aiohttp
    test_a_json_answer_passes_through_untouched,
    test_a_misbehaving_server,
    test_an_sse_answer_on_an_unknown_path_is_observed_and_its_route_sniffed,
    test_every_fixture_through_every_client,
    test_every_read_style,
)
from tests.instrumentation.test_privacy import (  # noqa: F401 -- collected here for aiohttp
    every_log,
    test_a_contained_failure_does_not_leak_its_message,
    test_a_request_id_is_recorded_without_non_printable_characters,
    test_no_marker_reaches_spans_metrics_or_logs,
)
from tests.instrumentation.test_span_ends import STREAMS, Streams, _Cycle, ended_once_each

# Not collected here: test_privacy's test_the_search_would_see_a_marker (aiohttp's own logs never
# quote a URL, so the capture's self-check has no marker from the HTTP stack to find).


@pytest.fixture
def client() -> Client:
    return AIOHTTP


@pytest.fixture
def async_client() -> Client:
    return AIOHTTP


@pytest.fixture(params=AIOHTTP.styles, ids=str)
def client_style(request: pytest.FixtureRequest) -> tuple[Client, Style]:
    return AIOHTTP, request.param


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


def test_cancelling_the_reading_task_is_cancelled(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = served(server, hold_at=FIRST_EVENT_END)

    async def main(http: AsyncSession) -> None:
        response = await http.send(url)
        first = asyncio.Event()

        async def consume() -> None:
            got = 0
            async for chunk in response.content.iter_any():
                got += len(chunk)
                if got == FIRST_EVENT_END:
                    first.set()

        task = asyncio.create_task(consume())
        await first.wait()
        assert await asyncio.to_thread(server.held.wait, EVENT_WAIT)
        opened(otel)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        ended_once(otel, "cancelled")
        response.release()

    run(main)
    ended_once(otel, "cancelled")
    assert sdk_trace_warnings(caplog) == []


async def _leave(http: AsyncSession, streams: Streams, how: str) -> None:
    """Open a stream and leave it open, ``how``: unread, after its first chunk, in a cycle."""
    response, chunks = await streams.aopen(http, read=how != "unread")
    if how == "reference-cycle":
        _Cycle((response, chunks))


@pytest.mark.parametrize("how", ["unread", "part-read", "reference-cycle"])
def test_an_abandoned_response_is_held_by_its_connection_and_ends_when_the_session_closes(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """aiohttp keeps a response it has not finished alive: its connection's body reader holds
    the response's end-of-body callback, and the session's pool holds the connection. Dropped
    by the application, it is not garbage, and its stream is still open (connection held,
    ``otelsse.streams.active`` counts it) until aiohttp lets it go: here when the session
    closes its connections (also: the body ends, the connection drops, a read timeout)."""
    streams = Streams(otel, served(server, hold_at=FIRST_EVENT_END))

    async def main(http: AsyncSession) -> None:
        for _ in range(STREAMS):
            await _leave(http, streams, how)
        gc.collect()
        assert otel.spans() == []
        assert otel.active_streams() == STREAMS

    run(main)  # which closes the session
    gc.collect()  # the cycles, if any: free once aiohttp dropped the responses
    assert len(streams.parents) == STREAMS
    ended_once_each(otel, streams.parents, caplog, "cancelled")


def test_an_abandoned_response_ends_when_its_body_ends(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp releases a response's connection when the rest of its body has arrived, unread:
    the response the application dropped is then collected, and its stream ends, while the
    session stays open."""
    streams = Streams(otel, served(server, hold_at=FIRST_EVENT_END))

    async def main(http: AsyncSession) -> None:
        for _ in range(STREAMS):
            await _leave(http, streams, "part-read")
        assert otel.spans() == []
        server.release.set()
        await asyncio.to_thread(spans_ended, otel, STREAMS)

    run(main)
    assert len(streams.parents) == STREAMS
    ended_once_each(otel, streams.parents, caplog, "cancelled")


def test_a_body_read_through_its_content_alone_is_observed_to_its_end(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An application may keep ``response.content`` and drop the response: aiohttp lets the
    response go at the body's end, inside the read that reaches it, which must still end the
    stream ``complete`` with every byte."""
    url = served(server)

    async def main(http: AsyncSession) -> bytes:
        content = (await http.send(url)).content
        data: bytes = await content.read()
        return data

    assert run(main) == BODY
    span = ended_once(otel, "complete")
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == len(BODY)
    assert sdk_trace_warnings(caplog) == []


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


def test_the_response_and_its_content_keep_their_types(otel: Telemetry, server: SSEServer) -> None:
    url = served(server)

    async def main(http: AsyncSession) -> tuple[Any, ...]:
        async with http.stream(url) as response:
            seen = (
                type(response),
                isinstance(response.content, aiohttp.StreamReader),
                response.content.__class__,
                response.status,
                response.method,
                str(response.url),
            )
            return (*seen, await response.read())

    with uninstrumented(otel):
        baseline = run(main)
    seen = run(main)
    assert seen == baseline
    assert seen[:3] == (aiohttp.ClientResponse, True, aiohttp.StreamReader)
    ended_once(otel, "complete")


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
