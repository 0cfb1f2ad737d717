"""The instrumentation's lifecycle, transparency, identity and containment, over real HTTP.

Every test starts ``SSEServer`` (tests/_server.py, raw sockets on 127.0.0.1) serving a recorded
OpenAI chat stream on ``/v1/chat/completions`` and reads it with ``"stream": true`` through each
of the six clients (httpx, httpx2, each sync and async, requests and aiohttp: the harness in
tests/_clients.py), instrumented by the ``otel`` fixture against a real OpenTelemetry SDK with
in-memory exporters. The application side is written the way applications are: ``for``/``async
for`` over the body, ``with``/``async with``, ``close()``, ``break``, exceptions, task
cancellation, dropping the response. A response aiohttp itself holds once the application
dropped it (``Client.holds_abandoned``) ends when aiohttp lets it go.

What it proves:

- Lifecycle: every way a stream can end (EOF, ``close()``, ``with`` exit, an application error,
  cancellation, garbage collection, a cut connection, a read timeout) ends the ``otelsse.stream``
  span exactly once (one exported span and no SDK "ended span" warning) with the right outcome
  and status, and ``otelsse.streams.active`` returns to 0. The span is checked at the moment it
  must already have ended (e.g. right after ``close()`` while the iterator is still alive), so a
  later end by garbage collection cannot make a test pass.
- Transparency: same response type, same stream types (``isinstance``), headers, status, request,
  context managers; no read-ahead (a held body and ``bytes_received`` prove otelsse saw only what
  the application read); the application's span stays current while it iterates.
- Identity: Hypothesis draws server write sizes, framings and application read sizes; the chunks
  the application receives are the same with and without otelsse (a real uninstrumented run
  against the same server first).
- Containment: with the monitor or the telemetry made to fail, the application's bytes and
  exceptions are unchanged, the failure is counted and logged once, and the span still ends once.

Baselines come from really uninstrumenting (``otelsse.uninstrument()``, checked to leave no
wrapper) and instrumenting again; every test starts with each client method wrapped exactly once.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import gzip
import importlib
import json
import logging
import os
import socket
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

from otelsse import semconv
from otelsse._clients import _httpx
from otelsse._clients._tee import proxy
from otelsse._monitor import StreamMonitor
from otelsse._observe import _stream
from otelsse._telemetry import Telemetry as OtelsseTelemetry
from tests import _clients
from tests._clients import (
    ASYNC_CLIENTS,
    CLIENTS,
    READ,
    STALL_TIMEOUT,
    App,
    AsyncSession,
    Client,
    Session,
    uninstrumented,
    wrapping_depths,
)
from tests._fixtures import read_fixture
from tests._helpers import soon, waited
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests._tiers import examples

#: The parts of otelsse a containment test breaks on purpose (otelsse internals: repoint here),
#: and the ``otelsse.instrumentation.stage`` each failure is counted under.
FAILURES = {
    "monitor.feed": (StreamMonitor, "feed", "feed"),
    "monitor.close": (StreamMonitor, "close", "finish"),
    "telemetry.end_span": (OtelsseTelemetry, "end_span", "end_span"),
}

PATH = "/v1/chat/completions"
BODY = read_fixture("real/openai-chat-text.sse")
#: Where the first event ends: a hold or a stall there leaves a well-formed, unfinished stream.
FIRST_EVENT_END = BODY.index(b"\n\n") + 2
PIECE = 300
#: Bound for waiting on something that has already been set in motion.
EVENT_WAIT = 10.0
#: Bound for a stream to end once the application let go of it (its response collected): well
#: below every client's read timeout (``READ_TIMEOUT``), which would end it otherwise.
ENDED_WAIT = 2.0


def run(client: Client, app: App, *args: Any, **options: Any) -> Any:
    """The harness's ``run``, reading by default in the client's first sized style (``iter_raw``,
    ``aiter_raw``, ``iter_content``): the lowest-level read that takes a size."""
    return _clients.run(client, app, *args, style=client.sized_styles[0], **options)


@pytest.fixture(autouse=True)
def instrumented_once(otel: Telemetry) -> None:
    """Each test starts with every client method wrapped exactly once.

    A wrapper left by an earlier test's ``uninstrument()`` would add a span, a tap and an SDK
    warning per request, and stack up test after test; fail at once instead.
    """
    assert wrapping_depths() == [1] * len(CLIENTS), "uninstrument() left wrappers behind"


def sdk_trace_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the SDK's tracer complained about, e.g. "Calling end() on an ended span"."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("opentelemetry.sdk.trace") and record.levelno >= logging.WARNING
    ]


def outcome(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get(semconv.OUTCOME))


def ended_once(otel: Telemetry, expected: str) -> ReadableSpan:
    """The one ended stream span, with ``expected`` outcome and the status it implies."""
    span = otel.stream_span()
    assert outcome(span) == expected
    status = StatusCode.ERROR if expected in semconv.ERROR_OUTCOMES else StatusCode.UNSET
    assert span.status.status_code is status
    assert otel.active_streams() == 0
    return span


def opened(otel: Telemetry) -> None:
    """The headers are in and the body is not finished: one active stream, no span ended."""
    assert otel.active_streams() == 1
    assert not otel.spans()


def spans_ended(otel: Telemetry, count: int) -> list[ReadableSpan]:
    """The stream spans, once ``count`` have ended: a stream the application let go of ends on
    otelsse's own thread, promptly (asserted: well within ``ENDED_WAIT``)."""

    def ended() -> list[ReadableSpan]:
        spans = otel.spans()
        return spans if len(spans) >= count else []

    return soon(ended, ENDED_WAIT, f"{count} streams ended")


# --------------------------------------------------------------------------------------------
# 1. Lifecycle: every end ends the span exactly once
# --------------------------------------------------------------------------------------------


def _exhaust_then_close_sync(http: Session, url: str, otel: Telemetry) -> bytes:
    response = http.send(url)
    opened(otel)
    data = b"".join(http.chunks(response))
    ended_once(otel, "complete")  # EOF itself ends it, before any close()
    response.close()
    response.close()
    return data


async def _exhaust_then_close_async(http: AsyncSession, url: str, otel: Telemetry) -> bytes:
    response = await http.send(url)
    opened(otel)
    data = b"".join([chunk async for chunk in http.chunks(response)])
    ended_once(otel, "complete")
    await http.close(response)
    await http.close(response)
    return data


def _exhaust_in_with_sync(http: Session, url: str, otel: Telemetry) -> bytes:
    with http.stream(url) as response:
        opened(otel)
        data = b"".join(http.chunks(response))
        ended_once(otel, "complete")
    return data


async def _exhaust_in_with_async(http: AsyncSession, url: str, otel: Telemetry) -> bytes:
    async with http.stream(url) as response:
        opened(otel)
        data = b"".join([chunk async for chunk in http.chunks(response)])
        ended_once(otel, "complete")
    return data


def _close_early_sync(http: Session, url: str, otel: Telemetry) -> bytes:
    response = http.send(url)
    opened(otel)
    chunks = http.chunks(response)
    first: bytes = next(chunks)
    response.close()
    ended_once(otel, "cancelled")  # by close() itself: ``chunks`` is still alive
    del chunks
    return first


async def _close_early_async(http: AsyncSession, url: str, otel: Telemetry) -> bytes:
    response = await http.send(url)
    opened(otel)
    chunks = http.chunks(response)
    first: bytes = await chunks.__anext__()
    await http.close(response)
    ended_once(otel, "cancelled")
    await http.close_chunks(chunks)
    return first


def _break_in_with_sync(http: Session, url: str, otel: Telemetry) -> bytes:
    with http.stream(url) as response:
        opened(otel)
        chunks = http.chunks(response)
        for chunk in chunks:
            first: bytes = chunk
            break
    ended_once(otel, "cancelled")  # by the ``with`` exit: ``chunks`` is still alive
    del chunks
    return first


async def _break_in_with_async(http: AsyncSession, url: str, otel: Telemetry) -> bytes:
    async with http.stream(url) as response:
        opened(otel)
        chunks = http.chunks(response)
        async for chunk in chunks:
            first: bytes = chunk
            break
    ended_once(otel, "cancelled")
    await http.close_chunks(chunks)
    return first


class AppError(Exception):
    """The application's own failure inside its loop."""


def _raise_in_loop_sync(http: Session, url: str, otel: Telemetry) -> bytes:
    error = AppError("the application gave up")

    def app() -> None:
        with http.stream(url) as response:
            opened(otel)
            for _ in http.chunks(response):
                raise error

    with pytest.raises(AppError) as caught:
        app()
    assert caught.value is error  # unchanged: not wrapped or replaced
    ended_once(otel, "cancelled")  # while the exception (and its traceback) is still alive
    return b""


async def _raise_in_loop_async(http: AsyncSession, url: str, otel: Telemetry) -> bytes:
    error = AppError("the application gave up")

    async def app() -> None:
        async with http.stream(url) as response:
            opened(otel)
            async for _ in http.chunks(response):
                raise error

    with pytest.raises(AppError) as caught:
        await app()
    assert caught.value is error
    ended_once(otel, "cancelled")
    return b""


#: Each case, and whether the application reads to EOF (else it stops at its first chunk).
LIFECYCLE = {
    "exhaust-then-close-twice": (App(_exhaust_then_close_sync, _exhaust_then_close_async), True),
    "exhaust-in-with": (App(_exhaust_in_with_sync, _exhaust_in_with_async), True),
    "close-before-eof": (App(_close_early_sync, _close_early_async), False),
    "with-and-break": (App(_break_in_with_sync, _break_in_with_async), False),
    "app-exception-in-loop": (App(_raise_in_loop_sync, _raise_in_loop_async), False),
}


def held_after_first_event(to_eof: bool) -> int | None:
    """``hold_at`` for a stream the application stops early: its first chunk can then never
    hold the whole body (and the terminal event), however late the client gets to read."""
    return None if to_eof else FIRST_EVENT_END


@pytest.mark.parametrize("case", list(LIFECYCLE))
def test_each_way_of_ending_ends_the_span_exactly_once(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    client: Client,
    case: str,
) -> None:
    app, to_eof = LIFECYCLE[case]
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=held_after_first_event(to_eof)))

    data = run(client, app, url, otel)

    if to_eof:
        assert data == BODY
    else:  # what the application read before it stopped: a prefix of the first event
        assert BODY[:FIRST_EVENT_END].startswith(data)
    gc.collect()  # whatever the application left behind is gone: still the one span
    ended_once(otel, "complete" if to_eof else "cancelled")
    assert sdk_trace_warnings(caplog) == []


def _abandon_sync(
    http: Session, url: str, otel: Telemetry, read: int, expected: str, held: bool
) -> None:
    response = http.send(url)
    opened(otel)
    if read:
        chunks = http.chunks(response)
        got = 0
        for chunk in chunks:
            got += len(chunk)
            if got >= read:  # stop before EOF: the next read would be the end of the body
                break
        del chunks, chunk
    del response
    gc.collect()
    spans_ended(otel, 1)  # by collection itself, while the client is still open
    ended_once(otel, expected)


async def _abandon_async(
    http: AsyncSession, url: str, otel: Telemetry, read: int, expected: str, held: bool
) -> None:
    response = await http.send(url)
    opened(otel)
    if read:
        chunks = http.chunks(response)
        got = 0
        async for chunk in chunks:
            got += len(chunk)
            if got >= read:
                break
        del chunks, chunk
    del response
    gc.collect()
    if http.client.holds_abandoned and held:
        # aiohttp's connection holds the response until aiohttp lets it go: the body has not
        # ended (the server holds it), so the session's close does. The response is then
        # garbage in a cycle of aiohttp's own (its body reader's end-of-body callback).
        opened(otel)
        await http.let_go()
        gc.collect()
    # The loop finalizes an abandoned async generator by scheduling its aclose(): let it run.
    # (aiohttp: the body that all arrived ends, and with it aiohttp's hold on the response.)
    await asyncio.to_thread(spans_ended, otel, 1)
    ended_once(otel, expected)


@pytest.mark.parametrize(
    ("read", "expected"),
    [(0, "cancelled"), (1, "cancelled"), (len(BODY), "complete")],
    ids=["unread", "part-read", "terminal-read-but-not-eof"],
)
def test_an_abandoned_response_ends_its_span_when_collected(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    client: Client,
    read: int,
    expected: str,
) -> None:
    """Collected once the application dropped it, or, where the client itself holds an
    abandoned response (``Client.holds_abandoned``: aiohttp), once the client lets it go."""
    hold_at = held_after_first_event(read == len(BODY))
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=hold_at))

    app = App(_abandon_sync, _abandon_async)
    run(client, app, url, otel, read, expected, hold_at is not None)

    ended_once(otel, expected)  # and closing the client did not end anything again
    assert sdk_trace_warnings(caplog) == []


def test_cancelling_the_task_that_awaits_the_next_chunk_ends_the_span_once(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, async_client: Client
) -> None:
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=FIRST_EVENT_END))

    async def main() -> None:
        async with AsyncSession(async_client, style=async_client.sized_styles[0]) as http:
            await cancel_while_reading(http)

    async def cancel_while_reading(http: AsyncSession) -> None:
        response = await http.send(url)
        everything_before_the_hold = asyncio.Event()

        async def consume() -> None:
            got = 0
            async for chunk in http.chunks(response):
                got += len(chunk)
                if got == FIRST_EVENT_END:
                    # No await until the next read, which waits on the held body: when the
                    # test runs again, this task is parked inside that read.
                    everything_before_the_hold.set()

        task = asyncio.create_task(consume())
        await everything_before_the_hold.wait()
        assert await asyncio.to_thread(server.held.wait, EVENT_WAIT)
        opened(otel)  # measured while the server holds the body
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        ended_once(otel, "cancelled")
        await http.close(response)  # the application's own close afterwards: still once

    asyncio.run(main())

    ended_once(otel, "cancelled")
    assert sdk_trace_warnings(caplog) == []


# aiohttp runs on asyncio only; httpx's AsyncClient runs on anyio, hence on trio too.
@pytest.mark.parametrize("async_client", [c for c in ASYNC_CLIENTS if c.runs_under_trio], ids=str)
def test_a_stream_cancelled_under_trio_is_cancelled(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, async_client: Client
) -> None:
    """httpx's AsyncClient runs under trio through anyio; cancelling its cancel scope raises
    trio's ``Cancelled`` inside the read that waits on the held body."""
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=FIRST_EVENT_END))

    async def main() -> None:
        async with (
            AsyncSession(async_client, style=async_client.sized_styles[0]) as http,
            trio.open_nursery() as nursery,
        ):
            everything_before_the_hold = trio.Event()

            async def consume() -> None:
                async with http.stream(url) as response:
                    got = 0
                    async for chunk in http.chunks(response):
                        got += len(chunk)
                        if got == FIRST_EVENT_END:
                            everything_before_the_hold.set()  # the next read waits on the hold

            nursery.start_soon(consume)
            await everything_before_the_hold.wait()
            assert await trio.to_thread.run_sync(server.held.wait, EVENT_WAIT)
            opened(otel)
            nursery.cancel_scope.cancel()

    trio.run(main)

    ended_once(otel, "cancelled")
    assert sdk_trace_warnings(caplog) == []


class _EndsTo(SpanProcessor):
    """Appends ``pid span_id`` to a file for each span that ends, in whichever process: what a
    forked child ends reaches the parent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        with self.path.open("a") as file:
            file.write(f"{os.getpid()} {span.context.span_id}\n")


def _as_a_forked_child(path: Path, otel: Telemetry, drop: Callable[[], None]) -> None:
    """In the child: ``drop`` the inherited stream, collect it, record what the child's
    telemetry counted, and exit as a process does (exit handlers and finalizers run)."""
    code = 1
    try:
        drop()
        gc.collect()
        counted = {"streams": otel.nonzero_outcomes(), "active": otel.active_streams()}
        with path.open("a") as file:
            file.write(f"child {json.dumps(counted)}\n")
        atexit._run_exitfuncs()
        code = 0
    finally:
        os._exit(code)


def test_a_forked_child_never_ends_or_counts_the_streams_it_inherited(
    otel: Telemetry, server: SSEServer, sync_client: Client, tmp_path: Path
) -> None:
    ends = tmp_path / "ends"
    otel.tracer_provider.add_span_processor(_EndsTo(ends))
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=FIRST_EVENT_END))

    with Session(sync_client, style=sync_client.sized_styles[0]) as http:
        response = http.send(url)
        chunks = iter(http.chunks(response))
        first = next(chunks)
        opened(otel)

        def drop() -> None:
            nonlocal response, chunks
            del response, chunks

        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a process with threads (the test server's); the
            # child runs no thread and only exits.
            warnings.simplefilter("ignore", DeprecationWarning)
            child = os.fork()
        if child == 0:
            _as_a_forked_child(ends, otel, drop)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
        opened(otel)  # the child left the parent's stream alone
        server.release.set()
        rest = b"".join(chunks)
        response.close()

    assert first + rest == BODY
    span = ended_once(otel, "complete")
    assert span.context is not None
    assert ends.read_text().splitlines() == [
        'child {"streams": {}, "active": 1}',  # inherited: the parent's stream, still open
        f"{os.getpid()} {span.context.span_id}",
    ]


def _cut(body: bytes) -> int:
    """A cut in the middle of ``body`` on a piece boundary, after at least one event."""
    return max(FIRST_EVENT_END, len(body) // 2) // PIECE * PIECE


def test_a_transport_error_is_truncated_and_reaches_the_app_unchanged(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, client: Client
) -> None:
    cut = _cut(BODY)
    url = server.route(PATH, Reply(BODY, piece=PIECE, cut=cut))
    with uninstrumented(otel):
        baseline = run(client, READ, url)

    observed = run(client, READ, url)

    assert baseline.error is not None  # the cut really failed the read
    assert observed.seen == baseline.seen  # same bytes, same exception type and message
    span = ended_once(otel, "truncated")
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == len(observed.data)
    assert sdk_trace_warnings(caplog) == []


@pytest.mark.e2e  # waits out a read timeout per client
def test_a_read_timeout_on_a_stall_is_a_timeout(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, client: Client
) -> None:
    url = server.route(PATH, Reply(BODY, cut=FIRST_EVENT_END, after_cut="stall"))

    observed = run(client, READ, url, read_timeout=STALL_TIMEOUT)

    assert server.stalled.is_set()
    assert observed.data == BODY[:FIRST_EVENT_END]
    assert observed.error is not None
    assert type(observed.error) is client.raises("timeout").raised
    ended_once(otel, "timeout")
    assert sdk_trace_warnings(caplog) == []


def test_a_request_that_fails_before_its_headers_ends_its_span_once(
    otel: Telemetry, caplog: pytest.LogCaptureFixture, client: Client
) -> None:
    # A port nothing listens on: the connection is refused before any response exists.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    url = f"http://127.0.0.1:{port}{PATH}"
    with uninstrumented(otel):
        baseline = run(client, READ, url)

    observed = run(client, READ, url)

    assert baseline.error is not None
    assert observed.seen == baseline.seen
    span = ended_once(otel, "truncated")
    attributes = span.attributes or {}
    assert attributes[semconv.BYTES_RECEIVED] == 0
    assert attributes[semconv.SERVER_PORT] == port
    assert semconv.HTTP_RESPONSE_STATUS_CODE not in attributes
    [point] = [p for p in otel.points(semconv.STREAMS.name) if p.value]
    assert point.attributes[semconv.SERVER_ADDRESS] == "127.0.0.1"
    assert sdk_trace_warnings(caplog) == []


# --------------------------------------------------------------------------------------------
# 2. Transparency
# --------------------------------------------------------------------------------------------


def describe(client: Client, response: Any) -> dict[str, Any]:
    """What the application can see of a response before reading its body."""
    source = client.body_source(response)  # httpx .stream, requests .raw, aiohttp .content
    return {
        # What the anthropic SDK asks of an httpx body on every event (its tracing wrapper's
        # hook); None elsewhere (getattr's default).
        "probed": getattr(source, "stream_observer", None),
        "type": type(response),
        "body source isinstance": isinstance(source, client.source_class),
        "body source class": source.__class__,
        # requests' ``raw`` is an ``io.IOBase``.
        "raw readable": source.readable() if client.library == "requests" else None,
        "status": client.status(response),
        "headers": sorted((k.lower(), v) for k, v in response.headers.items()),
        "request": client.request_line(response),
    }


def _describe_sync(http: Session, url: str) -> tuple[dict[str, Any], bytes]:
    with http.stream(url) as response:
        seen = describe(http.client, response)
        return seen, b"".join(http.chunks(response))


async def _describe_async(http: AsyncSession, url: str) -> tuple[dict[str, Any], bytes]:
    async with http.stream(url) as response:
        seen = describe(http.client, response)
        return seen, b"".join([chunk async for chunk in http.chunks(response)])


def test_the_response_keeps_its_type_stream_type_headers_and_request(
    otel: Telemetry, server: SSEServer, client: Client
) -> None:
    url = server.route(PATH, Reply(BODY, piece=PIECE, headers=(("x-request-id", "req-1"),)))
    app = App(_describe_sync, _describe_async)
    with uninstrumented(otel):
        baseline = run(client, app, url)

    seen, data = run(client, app, url)

    assert (seen, data) == baseline
    assert seen["type"] is client.response_class
    assert seen["body source isinstance"] is True
    assert seen["status"] == 200
    assert ("content-type", "text/event-stream") in seen["headers"]
    assert seen["request"] == ("POST", url)
    ended_once(otel, "complete")  # the tap was in place all along


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
@pytest.mark.parametrize("present", [True, False])
def test_the_tap_answers_an_sdk_s_probe_as_its_stream_would(library: str, present: bool) -> None:
    # The anthropic SDK wraps the body to end its own span and looks for the wrapper's
    # ``stream_observer`` per event: a tap under that wrapper must show it, and show None
    # (getattr's default) where the stream has none.
    module = importlib.import_module(library)
    observer = object()

    class Body(module.SyncByteStream, module.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            if present:
                self.stream_observer = observer

    for tap in (_httpx._SyncStreamTap, _httpx._AsyncStreamTap):
        tapped = proxy(tap)(Body(), None)  # type: ignore[arg-type]
        assert getattr(tapped, "stream_observer", None) is (observer if present else None)
        assert isinstance(tapped, Body)


def test_uninstrument_takes_otelsse_out_and_instrument_puts_it_back_once(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The baselines in this module rely on it: ``otelsse.uninstrument()`` (as the ``otel``
    fixture calls it after every test) unwraps every method, and instrumenting again wraps each
    once, so a stream makes exactly one span and no wrapper of an earlier test is left."""
    url = server.route(PATH, Reply(BODY, piece=PIECE))
    with uninstrumented(otel):  # which asserts that nothing is wrapped and no span is made
        for client in CLIENTS:
            baseline = run(client, READ, url)
            assert baseline.seen == (BODY, None)

    assert wrapping_depths() == [1] * len(CLIENTS)  # wrapped again, once
    for client in CLIENTS:
        assert run(client, READ, url).data == BODY
    assert [outcome(span) for span in otel.spans()] == ["complete"] * len(CLIENTS)
    assert sdk_trace_warnings(caplog) == []


def test_a_requests_raw_body_used_as_a_context_manager_is_still_observed(
    otel: Telemetry, server: SSEServer
) -> None:
    """urllib3's ``HTTPResponse`` is an ``io.IOBase``: ``with response.raw as raw`` is valid."""
    url = server.route(PATH, Reply(BODY, piece=PIECE))

    with (
        Session(Client("requests")) as http,
        http.stream(url) as response,
        response.raw as raw,
    ):
        assert isinstance(raw, urllib3.response.HTTPResponse)
        data = raw.read()

    assert data == BODY
    span = ended_once(otel, "complete")
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == len(BODY)


def _readinto(raw: Any) -> bytes:
    data, buffer = b"", bytearray(100)
    while size := raw.readinto(buffer):
        data += buffer[:size]
    return data


def _json(raw: Any) -> Any:
    try:
        return raw.json()
    except ValueError as exc:  # the body is SSE, not JSON: the application's own error
        return repr(exc)


#: Each way an application can read a requests body through ``response.raw`` (urllib3's
#: ``HTTPResponse``, an ``io.IOBase``), to its end.
RAW_READS: dict[str, Callable[[Any], Any]] = {
    "read(0)-then-read()": lambda raw: raw.read(0) + raw.read(),
    "read(100)": lambda raw: b"".join(iter(lambda: raw.read(100), b"")),
    # The first read takes the whole coded body, so urllib3 holds decoded bytes for the next.
    "read(1000)-decoded": lambda raw: b"".join(
        iter(lambda: raw.read(1000, decode_content=True), b"")
    ),
    "read1": lambda raw: b"".join(iter(raw.read1, b"")),
    "readinto": _readinto,
    "readline": lambda raw: b"".join(iter(raw.readline, b"")),
    "readline(7)": lambda raw: b"".join(iter(lambda: raw.readline(7), b"")),
    "readlines": lambda raw: b"".join(raw.readlines()),
    # urllib3 drops what its line iterator had buffered past the hint: the application gets
    # only the first lines, then nothing.
    "readlines(100)": lambda raw: b"".join(b"".join(part) for part in iter(
        lambda: raw.readlines(100), []
    )),
    "iteration": lambda raw: b"".join(raw),
    "next": lambda raw: b"".join(iter(lambda: next(raw, b""), b"")),
    "stream": lambda raw: b"".join(raw.stream(100)),
    "data": lambda raw: raw.data,
    "json": _json,
}  # fmt: skip


def _read_raw(http: Session, url: str, otel: Telemetry, how: str) -> tuple[Any, int]:
    """Read ``response.raw`` to its end; return what the application got and how many spans
    had ended when it was done, before it closed the response."""
    response = http.send(url)
    try:
        got = RAW_READS[how](response.raw)
        return got, len(otel.spans())
    finally:
        response.close()


@pytest.mark.parametrize("coding", ["identity", "gzip"])
@pytest.mark.parametrize("how", list(RAW_READS))
def test_every_read_of_a_requests_raw_body_is_observed_and_its_end_is_the_end(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, how: str, coding: str
) -> None:
    """Whatever the read, the monitor gets exactly what the application got (the coded bytes
    decoded), a zero-size read is not the end, and the read that finds the end ends the span:
    ``complete`` when the application got the whole body."""
    coded = coding == "gzip"
    wire = gzip.compress(BODY) if coded else BODY
    headers = (("Content-Encoding", "gzip"),) if coded else ()
    # A body of known length: urllib3 may then close its connection while decoded bytes wait.
    url = server.route(PATH, Reply(wire, piece=PIECE, framing="length", headers=headers))
    requests = Client("requests")
    with uninstrumented(otel), Session(requests) as http:
        reference, _ = _read_raw(http, url, otel, how)

    with Session(requests) as http:
        got, ended = _read_raw(http, url, otel, how)

    assert got == reference
    assert ended == 1  # by the application's last read, before close()
    whole = got in (BODY, wire) or not isinstance(got, bytes)  # json() read the whole body
    span = ended_once(otel, "complete" if whole else "truncated")
    # What the monitor got: the body decoded, or as much of it as the application got.
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == (len(BODY) if whole else len(got))
    assert sdk_trace_warnings(caplog) == []


def _first_read_sync(http: Session, url: str, server: SSEServer, otel: Telemetry, n: int) -> bytes:
    response = http.send(url)  # returns with the headers while the server holds the body
    assert waited(server.held.wait, EVENT_WAIT)
    assert not server.release.is_set()
    opened(otel)  # measured while held
    data = next(http.chunks(response)) if n else b""
    response.close()
    return data


async def _first_read_async(
    http: AsyncSession, url: str, server: SSEServer, otel: Telemetry, n: int
) -> bytes:
    response = await http.send(url)
    assert await asyncio.to_thread(server.held.wait, EVENT_WAIT)
    assert not server.release.is_set()
    opened(otel)
    data = await http.chunks(response).__anext__() if n else b""
    await http.close(response)
    return data


@pytest.mark.parametrize(
    ("hold_at", "reads"),
    [(0, 0), (FIRST_EVENT_END, 0), (FIRST_EVENT_END, 1)],
    ids=["body-held", "first-event-sent-unread", "first-event-sent-one-read"],
)
def test_otelsse_reads_nothing_the_application_did_not_read(
    otel: Telemetry, server: SSEServer, client: Client, hold_at: int, reads: int
) -> None:
    """Send returns at the headers while the server holds the body (with ``hold_at=0`` a send
    that read ahead would wait for the body); afterwards the monitor has seen exactly the bytes
    the application read, although the first event was already in the socket."""
    url = server.route(PATH, Reply(BODY, piece=PIECE, hold_at=hold_at))

    data = run(client, App(_first_read_sync, _first_read_async), url, server, otel, reads)

    assert BODY.startswith(data)  # the application's first read is the body's first bytes
    assert bool(data) == bool(reads)
    span = ended_once(otel, "cancelled")
    attributes = span.attributes or {}
    assert attributes[semconv.BYTES_RECEIVED] == len(data)
    assert attributes[semconv.CHUNK_COUNT] == reads
    assert len(server.received) == 1


#: Small application reads, so the body is many iterations whatever the network does.
CONTEXT_READ_SIZE = 100


def _context_sync(http: Session, url: str, otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("app")
    before = otel_context.get_current()
    with tracer.start_as_current_span("app") as app_span:
        with http.stream(url) as response:
            assert trace.get_current_span() is app_span
            for _ in http.chunks(response, size=CONTEXT_READ_SIZE):
                assert trace.get_current_span() is app_span
                with tracer.start_as_current_span("inside"):
                    pass
        assert trace.get_current_span() is app_span
    assert otel_context.get_current() is before


async def _context_async(http: AsyncSession, url: str, otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("app")
    before = otel_context.get_current()
    with tracer.start_as_current_span("app") as app_span:
        async with http.stream(url) as response:
            assert trace.get_current_span() is app_span
            async for _ in http.chunks(response, size=CONTEXT_READ_SIZE):
                assert trace.get_current_span() is app_span
                with tracer.start_as_current_span("inside"):
                    pass
        assert trace.get_current_span() is app_span
    assert otel_context.get_current() is before


def test_the_applications_span_stays_current_while_it_reads_the_body(
    otel: Telemetry, server: SSEServer, client: Client
) -> None:
    url = server.route(PATH, Reply(BODY, piece=PIECE))

    run(client, App(_context_sync, _context_async), url, otel)

    stream = ended_once(otel, "complete")
    [app] = otel.spans("app")
    inside = otel.spans("inside")
    assert len(inside) > len(BODY) // CONTEXT_READ_SIZE
    assert app.context is not None
    for span in [stream, *inside]:
        assert span.parent is not None
        assert span.parent.span_id == app.context.span_id


# --------------------------------------------------------------------------------------------
# 3. Identity under random server and application chunkings
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # 25 examples, each a reference and an observed run, per client
@settings(
    max_examples=examples(25),
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    piece=st.integers(1, 700),
    framing=st.sampled_from(["chunked", "length", "close"]),
    mode=st.sampled_from([0, 1]),
    size=st.none() | st.integers(1, 1024),
)
def test_the_application_gets_the_same_chunks_with_and_without_otelsse(
    otel: Telemetry,
    server: SSEServer,
    client: Client,
    piece: int,
    framing: str,
    mode: int,
    size: int | None,
) -> None:
    url = server.route(PATH, Reply(BODY, piece=piece, framing=framing))  # type: ignore[arg-type]
    style = client.sized_styles[mode].sized(size)
    with uninstrumented(otel):
        baseline = run(client, READ, url, style)

    observed = run(client, READ, url, style)

    assert baseline.error is None
    assert baseline.data == BODY
    if size is None or style.at_most_size:  # network-sized pieces: only the bytes are fixed
        assert observed.seen == (baseline.data, None)
        assert size is None or max(map(len, observed.parts)) <= size
    else:
        assert observed.exact == baseline.exact
    ended_once(otel, "complete")
    otel.exporter.clear()


# --------------------------------------------------------------------------------------------
# 4. Containment: otelsse failing never reaches the application
# --------------------------------------------------------------------------------------------


class InjectedFailure(Exception):
    """Raised by the part of otelsse a test breaks on purpose."""


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise InjectedFailure("broken on purpose")


#: How many streams each containment test reads: the debug log must appear once, not per stream.
STREAMS = 2


def test_a_read_error_otelsse_cannot_tell_still_reaches_the_application_as_it_was(
    otel: Telemetry, server: SSEServer, monkeypatch: pytest.MonkeyPatch, client: Client
) -> None:
    """Telling what a failed read raised happens inside the application's read, before the
    exception goes on: a failure to tell is counted and the stream ends as a lost connection,
    and the application gets its own exception, never otelsse's (the demo once handed an
    AttributeError out of a half-imported library in place of requests' ChunkedEncodingError)."""
    url = server.route(PATH, Reply(BODY, piece=PIECE, cut=_cut(BODY)))
    with uninstrumented(otel):
        baseline = run(client, READ, url)
    monkeypatch.setattr(_stream, "stream_error", _fail)

    observed = run(client, READ, url)

    assert baseline.error is not None
    assert observed.seen == baseline.seen
    assert [outcome(span) for span in otel.spans()] == ["truncated"]
    assert {stage: n for stage, n in otel.errors_by_stage().items() if n} == {"feed": 1}


@pytest.mark.parametrize("failing", list(FAILURES))
@pytest.mark.parametrize("body", ["complete", "cut"])
def test_a_failure_inside_otelsse_is_contained_counted_and_logged_once(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    client: Client,
    failing: str,
    body: str,
) -> None:
    caplog.set_level(logging.DEBUG, logger="otelsse")
    reply = Reply(BODY, piece=PIECE, cut=_cut(BODY) if body == "cut" else None)
    url = server.route(PATH, reply)
    with uninstrumented(otel):
        baseline = run(client, READ, url)
    owner, method, stage = FAILURES[failing]
    monkeypatch.setattr(owner, method, _fail)

    observed = [run(client, READ, url) for _ in range(STREAMS)]

    assert (baseline.error is None) == (body == "complete")
    # Same bytes, same exception, and nothing of otelsse's raised into the application.
    assert [read.seen for read in observed] == [baseline.seen] * STREAMS
    errors = otel.points(semconv.INSTRUMENTATION_ERRORS.name)
    # Every stage's series exists (at 0 until it fails); only the failing stage counted.
    assert {p.attributes[semconv.INSTRUMENTATION_STAGE] for p in errors} == set(
        semconv.INSTRUMENTATION_STAGES
    )
    assert {p.attributes[semconv.INSTRUMENTATION_STAGE] for p in errors if p.value} == {stage}
    assert sum(p.value for p in errors) == STREAMS
    logged = [r for r in caplog.records if r.name == "otelsse"]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert logged[0].levelno == logging.DEBUG
    assert "InjectedFailure" in logged[0].getMessage()
    # Each stream's span is still ended, once, as internal_error, and no stream stays active.
    assert {
        "outcomes": [outcome(span) for span in otel.spans()],
        "active": otel.active_streams(),
        "sdk warnings": sdk_trace_warnings(caplog),
    } == {"outcomes": ["internal_error"] * STREAMS, "active": 0, "sdk warnings": []}
