"""A stream the application never closes still ends its span, exactly once, promptly.

The application leaves each stream open after its first chunk, in every way it can lose one:
dropped at once (read or not), left in a reference cycle that only the cyclic collector frees
(what the openai SDK's ``Stream`` is, with its own generator), kept alive by a traceback and
then let go, left by a thread that has finished, by a task that has finished, or by an event
loop that has closed. Each case opens many streams (``STREAMS`` where a collection or a closing
loop ends them, whose timing varies), each under a span of its own, so that an ending lost now
and then (one stream in forty, as seen through a RAG framework's OpenAI client) shows here
every run: every parent has exactly one ended ``otelsse.stream`` span, ``cancelled``, every
stream was counted once and none stays active.

Where the application still holds a stream (a traceback it keeps) or the collector has not
run (a cycle, with collection off), nothing has ended yet; once it is gone, every span ends
within ``ENDED_WAIT`` of the collection that freed it. A finalizer never ends a stream in the
collector's own context: the collection may strike while the thread holds a lock that ending
a span takes again (``test_a_collection_under_a_telemetry_lock_...``). Two endings racing from
two threads end it once, as the first. A body read through its source alone (requests'
``response.raw``), the response dropped, is observed to its end.

At interpreter exit (a subprocess, ``tests/apps/abandoning_app.py``): streams still open are
ended before the SDK's exit handler shuts its exporters down, so the exported file holds one
``cancelled`` span per stream, even when a weakref finalizer existed before the SDK did.

Where the client itself holds a stream the application let go of (``Client.holds_abandoned``:
aiohttp, whose connection in the session's pool holds the response), nothing has ended then: the
session's close lets them go, and they end when collected. ``test_aiohttp.py`` has its other
ends (the rest of the body arriving).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from otelsse import semconv
from otelsse._clients import RequestFields, RpcFields, get_client
from otelsse._monitor import StreamMonitor
from otelsse._observe import Settings
from otelsse._telemetry import Telemetry as OtelsseTelemetry
from tests._clients import CLIENTS, App, AsyncSession, Client, Session, run
from tests._helpers import joined, waited
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.instrumentation.test_lifecycle import (
    BODY,
    ENDED_WAIT,
    EVENT_WAIT,
    FIRST_EVENT_END,
    PATH,
    PIECE,
    AppError,
    ended_once,
    sdk_trace_warnings,
    spans_ended,
)

#: Streams per case that a collection or a closing loop ends: enough that a loss striking one
#: stream in forty shows in every run.
STREAMS = 50
#: Streams per case that the application's own last reference ends, at a point it chose.
FEW_STREAMS = 10
#: The repository root: the exit subprocess imports ``tests`` and otelsse from there.
ROOT = Path(__file__).resolve().parents[2]


def collect() -> None:
    """``gc.collect()``. A requests response left in a cycle leaks its socket, which says so
    when collected (``ResourceWarning``, with otelsse or without): the application's warning,
    not what these tests look at."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def held(server: SSEServer) -> str:
    """A stream held after its first event: what the application reads never ends it."""
    return server.route(PATH, Reply(BODY, piece=PIECE, hold_at=FIRST_EVENT_END))


class _Cycle:
    """What the application leaves behind: a response and its iterator, in a reference cycle."""

    def __init__(self, left: object) -> None:
        self.left = left
        self.me = self


@dataclass
class Streams:
    """Opens streams for one case: each under an application span, its first chunk read."""

    otel: Telemetry
    url: str
    #: The application span of each stream opened, by span id.
    parents: list[int] = field(default_factory=list)

    def parent(self) -> Any:
        span = self.otel.tracer_provider.get_tracer("app").start_as_current_span("app")
        return span

    def open(self, http: Session, read: bool = True) -> tuple[Any, Iterator[bytes] | None]:
        with self.parent() as span:
            self.parents.append(span.get_span_context().span_id)
            response = http.send(self.url)
        if not read:
            return response, None
        chunks = iter(http.chunks(response))
        next(chunks)
        return response, chunks

    async def aopen(
        self, http: AsyncSession, read: bool = True
    ) -> tuple[Any, AsyncIterator[bytes] | None]:
        with self.parent() as span:
            self.parents.append(span.get_span_context().span_id)
            response = await http.send(self.url)
        if not read:
            return response, None
        chunks = aiter(http.chunks(response))
        await anext(chunks)
        return response, chunks


# -- how the application leaves a stream (kept: what it still holds, until the test lets go) --


def _dropped_unread(http: Session, streams: Streams, kept: list[object]) -> None:
    streams.open(http, read=False)


async def _adropped_unread(http: AsyncSession, streams: Streams, kept: list[object]) -> None:
    await streams.aopen(http, read=False)


def _dropped_part_read(http: Session, streams: Streams, kept: list[object]) -> None:
    streams.open(http)


async def _adropped_part_read(http: AsyncSession, streams: Streams, kept: list[object]) -> None:
    await streams.aopen(http)


def _in_a_cycle(http: Session, streams: Streams, kept: list[object]) -> None:
    _Cycle(streams.open(http))


async def _ain_a_cycle(http: AsyncSession, streams: Streams, kept: list[object]) -> None:
    _Cycle(await streams.aopen(http))


async def _aunread_in_a_cycle(http: AsyncSession, streams: Streams, kept: list[object]) -> None:
    # Unread: no async generator of its own, which the closing loop would close.
    _Cycle(await streams.aopen(http, read=False))


def _held_by_a_traceback(http: Session, streams: Streams, kept: list[object]) -> None:
    def read_then_fail() -> None:
        left = streams.open(http)  # noqa: F841 -- held by this frame, which the traceback keeps
        raise AppError("the application gave up, keeping the error")

    try:
        read_then_fail()
    except AppError as exc:
        kept.append(exc)  # its traceback holds the frame that holds the response


async def _aheld_by_a_traceback(http: AsyncSession, streams: Streams, kept: list[object]) -> None:
    async def read_then_fail() -> None:
        left = await streams.aopen(http)  # noqa: F841 -- as above
        raise AppError("the application gave up, keeping the error")

    try:
        await read_then_fail()
    except AppError as exc:
        kept.append(exc)


def _left_by_a_finished_thread(http: Session, streams: Streams, kept: list[object]) -> None:
    thread = threading.Thread(target=streams.open, args=(http,))
    thread.start()
    joined(thread, EVENT_WAIT)


async def _left_by_a_finished_task(
    http: AsyncSession, streams: Streams, kept: list[object]
) -> None:
    async def read() -> None:
        await streams.aopen(http)

    await asyncio.create_task(read())


@dataclass(frozen=True)
class Leaving:
    """One way of leaving a stream open, in the dialects it exists in."""

    sync: Callable[[Session, Streams, list[object]], None] | None
    async_: Callable[[AsyncSession, Streams, list[object]], Awaitable[None]] | None
    #: Freed only by the cyclic collector (collection is off while the streams are left).
    cyclic: bool = False
    #: Async: the event loop closes before the test lets go of the streams.
    after_the_loop: bool = False

    @property
    def count(self) -> int:
        return STREAMS if self.cyclic or self.after_the_loop else FEW_STREAMS


LEAVINGS = {
    "dropped-unread": Leaving(_dropped_unread, _adropped_unread),
    "dropped-part-read": Leaving(_dropped_part_read, _adropped_part_read),
    "reference-cycle": Leaving(_in_a_cycle, _ain_a_cycle, cyclic=True),
    "kept-by-a-traceback": Leaving(_held_by_a_traceback, _aheld_by_a_traceback),
    "finished-thread": Leaving(_left_by_a_finished_thread, None),
    "finished-task": Leaving(None, _left_by_a_finished_task),
    # The loop's asyncgen shutdown closes the body iterators: they end there.
    "part-read-past-a-closed-loop": Leaving(None, _ain_a_cycle, after_the_loop=True),
    "unread-past-a-closed-loop": Leaving(
        None, _aunread_in_a_cycle, cyclic=True, after_the_loop=True
    ),
}
CASES = [
    (client, name)
    for client in CLIENTS
    for name, leaving in LEAVINGS.items()
    if (leaving.async_ if client.is_async else leaving.sync) is not None
]


def ended_once_each(
    otel: Telemetry, parents: list[int], caplog: pytest.LogCaptureFixture, outcome: str
) -> None:
    """Each parent has exactly one ended stream span with ``outcome``; each stream was counted
    once and none is active; the SDK saw no span ended twice."""
    spans = spans_ended(otel, len(parents))
    children: dict[int, list[ReadableSpan]] = {parent: [] for parent in parents}
    for span in spans:
        assert span.parent is not None
        children[span.parent.span_id].append(span)
    ended = {parent: [_outcome(span) for span in found] for parent, found in children.items()}
    assert ended == {parent: [outcome] for parent in parents}
    assert otel.nonzero_outcomes() == {outcome: len(parents)}
    assert otel.active_streams() == 0
    assert sdk_trace_warnings(caplog) == []


def _outcome(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get(semconv.OUTCOME))


@pytest.fixture
def collection_off() -> Iterator[None]:
    """No automatic collection while the test leaves its streams: only ``gc.collect()`` frees a
    cycle, so what ends before it ended by another path."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize(("client", "leaving"), CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_a_stream_left_open_ends_its_span_once_when_the_application_lets_go(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    collection_off: None,
    client: Client,
    leaving: str,
) -> None:
    how = LEAVINGS[leaving]
    streams = Streams(otel, held(server))
    kept: list[object] = []

    def still_held() -> None:
        """A stream the application still holds, or that no collection freed, is open."""
        if kept or how.cyclic:
            assert otel.spans() == []
            assert otel.active_streams() == how.count
        kept.clear()
        collect()

    if client.is_async:
        assert how.async_ is not None
        leave = how.async_

        async def main() -> None:
            async with AsyncSession(client) as http:
                for _ in range(how.count):
                    await leave(http, streams, kept)
                if not how.after_the_loop:
                    still_held()
                    if client.holds_abandoned:
                        # aiohttp's connections hold them, let go of by the application and
                        # collected: still open until the session's close lets them go (garbage
                        # then, in cycles of aiohttp's own).
                        assert otel.spans() == []
                        assert otel.active_streams() == how.count
                        await http.let_go()
                        collect()
                    await asyncio.to_thread(spans_ended, otel, how.count)

        asyncio.run(main())
        if how.after_the_loop:
            still_held()
    else:
        assert how.sync is not None
        with Session(client) as http:
            for _ in range(how.count):
                how.sync(http, streams, kept)
            still_held()
            spans_ended(otel, how.count)  # while the client is still open

    assert len(streams.parents) == how.count
    ended_once_each(otel, streams.parents, caplog, "cancelled")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_abandoned_openai_stream_is_a_cycle_and_ends_once_when_collected(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    collection_off: None,
    is_async: bool,
) -> None:
    """openai's ``Stream`` holds the generator that holds it: an application (or a framework
    over the SDK) that stops iterating and drops it leaves garbage only the collector frees."""
    streams = Streams(otel, held(server))
    options = {"base_url": server.url("/v1"), "api_key": "test", "max_retries": 0}
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    def abandon(sdk: openai.OpenAI) -> None:
        with streams.parent() as span:
            streams.parents.append(span.get_span_context().span_id)
            stream = sdk.chat.completions.create(**request)
        next(iter(stream))

    async def aabandon(sdk: openai.AsyncOpenAI) -> None:
        with streams.parent() as span:
            streams.parents.append(span.get_span_context().span_id)
            stream = await sdk.chat.completions.create(**request)
        await anext(aiter(stream))

    def still_held() -> None:
        assert otel.spans() == []  # each is garbage, but only the cyclic collector frees it
        collect()

    if is_async:

        async def main() -> None:
            async with openai.AsyncOpenAI(**options) as sdk:
                for _ in range(STREAMS):
                    await aabandon(sdk)
                # The SDK's ``__aiter__`` generator, dropped, holds its stream until the loop ran
                # the aclose() that asyncio's generator finalizer scheduled: a step to create
                # its task, one to run it.
                for _ in range(2):
                    await asyncio.sleep(0)
                still_held()
                await asyncio.to_thread(spans_ended, otel, STREAMS)

        asyncio.run(main())
    else:
        with openai.OpenAI(**options) as sdk:
            for _ in range(STREAMS):
                abandon(sdk)
            still_held()
            spans_ended(otel, STREAMS)

    assert len(streams.parents) == STREAMS
    ended_once_each(otel, streams.parents, caplog, "cancelled")


def _read_the_source_alone_sync(http: Session, url: str) -> bytes:
    source = http.client.body_source(http.send(url))  # the response is dropped here
    collect()
    return source.read() if http.client.library == "requests" else b"".join(source)  # type: ignore[no-any-return]


async def _read_the_source_alone_async(http: AsyncSession, url: str) -> bytes:
    source = http.client.body_source(await http.send(url))
    collect()
    return b"".join([chunk async for chunk in source])


#: Read ``response.raw`` (requests) or ``response.stream`` (httpx) to its end, the response gone.
READ_THE_SOURCE_ALONE = App(_read_the_source_alone_sync, _read_the_source_alone_async)


def test_a_body_read_through_its_source_alone_is_observed_to_its_end(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture, client: Client
) -> None:
    """What the application reads through is what it holds: a body's source (requests'
    ``response.raw``) read to its end after the response was dropped is ``complete``, not
    ended as abandoned when the response went."""
    url = server.route(PATH, Reply(BODY, piece=PIECE))

    assert run(client, READ_THE_SOURCE_ALONE, url) == BODY

    span = ended_once(otel, "complete")  # at EOF, by the read itself
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == len(BODY)
    assert sdk_trace_warnings(caplog) == []


def test_of_two_endings_racing_from_two_threads_the_first_ends_the_stream(
    otel: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader's thread reaches EOF while another thread closes the stream (a watchdog, a
    cancel button, the reaper): the first ending claims the stream, even while it is still
    replaying the reads it kept; the second changes nothing."""
    settings = Settings(OtelsseTelemetry(otel.tracer_provider, otel.meter_provider))
    url = httpx.URL("https://api.openai.com/v1/chat/completions")
    watch = settings.watch(
        get_client("httpx"), "POST", url, url.path, "",
        body=lambda: RequestFields(True, "m"), rpc=RpcFields, header=lambda name: None,
    )  # fmt: skip
    assert watch is not None
    observer = watch.response(200, {"content-type": "text/event-stream"}, body_decoded=True)
    assert observer is not None
    observer.feed(BODY)  # kept, to be replayed at the end
    replaying, go_on = threading.Event(), threading.Event()
    feed = StreamMonitor.feed

    def slow_feed(monitor: StreamMonitor, chunk: bytes, now: float | None = None) -> Any:
        if threading.current_thread() is reader:
            replaying.set()
            assert waited(go_on.wait, EVENT_WAIT)
        return feed(monitor, chunk, now)

    monkeypatch.setattr(StreamMonitor, "feed", slow_feed)
    reader = threading.Thread(target=observer.finish)  # EOF
    reader.start()
    assert waited(replaying.wait, EVENT_WAIT)
    observer.finish("cancelled")  # the close, while the EOF is being replayed
    go_on.set()
    joined(reader, EVENT_WAIT)

    span = ended_once(otel, "complete")
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == len(BODY)


class _CollectsUnderALock(SpanProcessor):
    """A span processor that holds a non-reentrant lock while it allocates, as the SDK's metric
    aggregations and processors do, and that a collection strikes there (``gc.collect()`` stands
    for the allocation that triggers it). Ending a span takes the same lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: For each stream span that ended: whether its end could take the lock.
        self.took_the_lock: list[bool] = []
        self.stream_ended = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == "collect-here":
            with self.lock:
                collect()
        elif span.name == semconv.SPAN_NAME:
            # Bounded: a collection that ended the stream in this thread would wait on itself.
            took = self.lock.acquire(timeout=ENDED_WAIT)
            self.took_the_lock.append(took)
            if took:
                self.lock.release()
            self.stream_ended.set()


def test_a_collection_under_a_telemetry_lock_ends_the_stream_once_the_lock_is_free(
    otel: Telemetry,
    server: SSEServer,
    caplog: pytest.LogCaptureFixture,
    collection_off: None,
    sync_client: Client,
) -> None:
    processor = _CollectsUnderALock()
    otel.tracer_provider.add_span_processor(processor)
    streams = Streams(otel, held(server))

    with Session(sync_client) as http:
        _Cycle(streams.open(http))
        otel.tracer_provider.get_tracer("app").start_span("collect-here").end()
        assert waited(processor.stream_ended.wait, ENDED_WAIT * 2)
        [span] = otel.spans()

    assert processor.took_the_lock == [True]
    assert _outcome(span) == "cancelled"
    assert sdk_trace_warnings(caplog) == []


# -- interpreter exit ---------------------------------------------------------------------------


def test_streams_still_open_at_exit_are_exported_once_each_as_cancelled(
    server: SSEServer, tmp_path: Path
) -> None:
    """A process leaves one stream per client open (in reference cycles it never collects;
    aiohttp's held by its open session; the async ones past their closed event loop) and exits.
    A weakref finalizer existed before its SDK did (a scratch directory), so weakref's own exit
    handler runs after the SDK's shutdown: the streams must be ended before that shutdown, which
    exports one ``cancelled`` span for each."""
    url = held(server)
    exported = tmp_path / "spans.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tests.apps.abandoning_app", url, str(exported)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=EVENT_WAIT * 3,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    opened = json.loads(done.stdout)  # client -> the id of the span it opened its stream under
    spans = [json.loads(line) for line in exported.read_text().splitlines()]
    streams = [span for span in spans if span["name"] == semconv.SPAN_NAME]
    by_parent = {client: [s["outcome"] for s in streams if s["parent"] == parent]
                 for client, parent in opened.items()}  # fmt: skip
    assert by_parent == {client: ["cancelled"] for client in opened}
    assert len(streams) == len(opened) == len(CLIENTS)
