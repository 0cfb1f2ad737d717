"""Deferred feeding: an observer keeps reads and replays them into the monitor in batches, and
the stream's span says exactly what feeding each read as it came would have said.

A fake clock (one new reading per ``time.perf_counter()`` call) makes each read's arrival time
known; the expected report is a ``StreamMonitor`` fed the same reads with the same readings, then
closed how and when the observer's stream ended. Every way a stream ends is driven with the end
falling inside a batch, on its bound and past it, for plain and gzip-coded bodies (a coded body
whose coding breaks ends at the read that broke it, as ``transport``).
"""

from __future__ import annotations

import gc
import gzip
import itertools
import zlib
from collections.abc import Iterator

import httpx
import pytest

from otelsse import StreamMonitor, semconv
from otelsse._clients import RequestFields, RpcFields, get_client
from otelsse._monitor import StreamError
from otelsse._observe import Settings, Watch
from otelsse._observe import _stream as _observer
from otelsse._observe._stream import DEFERRED_BYTES, DEFERRED_READS
from otelsse._telemetry import Telemetry, span_attributes
from tests._fixtures import read_fixture
from tests._otel import Telemetry as SDK
from tests.instrumentation.test_lifecycle import spans_ended

ROUTE = "anthropic.messages"
URL = httpx.URL("https://api.anthropic.com/v1/messages")


class Clock:
    """``time.perf_counter`` for the observer: a new, known reading per call."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)
        self.readings: list[float] = []

    def __call__(self) -> float:
        reading = next(self._ticks) * 0.001 + 100.0
        self.readings.append(reading)
        return reading


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_observer.time, "perf_counter", fake)
    return fake


@pytest.fixture
def sdk() -> Iterator[SDK]:
    telemetry = SDK()
    yield telemetry
    telemetry.tracer_provider.shutdown()


def _reads(body: bytes, count: int) -> list[bytes]:
    """``body`` cut into ``count`` reads of nearly equal size (the last ones may be empty)."""
    size = -(-len(body) // count)
    return [body[i * size : (i + 1) * size] for i in range(count)]


def _watch(sdk: SDK) -> Watch:
    settings = Settings(Telemetry(sdk.tracer_provider, sdk.meter_provider))
    watch = settings.watch(
        get_client("httpx"),
        "POST",
        URL,
        URL.path,
        "",
        body=lambda: RequestFields(True, "m"),
        rpc=RpcFields,
        header=lambda name: None,
    )
    assert watch is not None
    assert watch.expects_sse
    return watch


def _expected(
    clock: Clock, reads: list[bytes], fed: int, error: StreamError | None, end_at: int = -1
) -> dict[str, object]:
    """What feeding the first ``fed`` reads one by one and ending at reading ``end_at`` says."""
    readings = clock.readings
    monitor = StreamMonitor(ROUTE, started_at=readings[0])
    for chunk, now in zip(reads[:fed], readings[1 : fed + 1], strict=True):
        monitor.feed(chunk, now)
    return dict(span_attributes(monitor.close(readings[end_at], error=error)))


def _stream_attributes(sdk: SDK) -> dict[str, object]:
    return dict(sdk.stream_span().attributes or {})


def _subset(expected: dict[str, object], seen: dict[str, object]) -> dict[str, object]:
    return {key: seen.get(key) for key in expected}


ENDINGS: list[tuple[StreamError | None, str]] = [
    (None, "eof"),
    ("transport", "fail"),
    ("timeout", "fail"),
    ("cancelled", "close"),
    ("cancelled", "collected"),
]
# Where the stream ends relative to the batch bound: inside the first batch, exactly on it, just
# past it, and several batches in.
READ_COUNTS = [3, DEFERRED_READS, DEFERRED_READS + 1, 3 * DEFERRED_READS + 5]


@pytest.mark.parametrize("count", READ_COUNTS)
@pytest.mark.parametrize(("error", "how"), ENDINGS)
def test_a_deferred_stream_reports_what_feeding_each_read_would(
    sdk: SDK, clock: Clock, count: int, error: StreamError | None, how: str
) -> None:
    reads = _reads(read_fixture("real/anthropic-text.sse"), count)
    # An unfinished stream (every ending but EOF) stops part-way through its reads.
    fed = count if how == "eof" else max(1, count - 2)
    watch = _watch(sdk)
    observer = watch.response(200, {"content-type": "text/event-stream"}, body_decoded=True)
    assert observer is not None
    holder = _Response()
    observer.end_when_collected(holder)
    for chunk in reads[:fed]:
        observer.feed(chunk)
    if how == "eof":
        observer.finish()
    elif how == "fail":
        observer.fail(httpx.ReadTimeout("t") if error == "timeout" else httpx.ReadError("r"))
    elif how == "close":
        observer.finish("cancelled")
    else:
        del holder
        gc.collect()
        spans_ended(sdk, 1)  # on otelsse's own thread, at the reading taken at collection
    assert _subset(expected := _expected(clock, reads, fed, error), _stream_attributes(sdk)) == (
        expected
    )


class _Response:
    """Something an application may drop: the observer ends its stream when it is collected."""


@pytest.mark.parametrize("count", [2, DEFERRED_READS + 3])
def test_a_read_over_the_byte_bound_is_replayed_at_once(sdk: SDK, clock: Clock, count: int) -> None:
    # One read past DEFERRED_BYTES replays the batch by itself, before the stream ends.
    body = read_fixture("real/anthropic-text.sse")
    padding = b": " + b"k" * DEFERRED_BYTES + b"\n"
    reads = [padding, *_reads(body, count)]
    observer = _watch(sdk).response(200, {"content-type": "text/event-stream"}, body_decoded=True)
    assert observer is not None
    observer.feed(reads[0])
    assert observer.monitor.chunk_count == 1  # replayed: the bound is in bytes, not only reads
    for chunk in reads[1:]:
        observer.feed(chunk)
    observer.finish()
    expected = _expected(clock, reads, len(reads), None)
    assert expected[semconv.OUTCOME] == "complete"
    assert _subset(expected, _stream_attributes(sdk)) == expected


@pytest.mark.parametrize("count", [3, DEFERRED_READS + 3])
def test_a_coded_body_is_decoded_at_replay_with_each_read_s_clock(
    sdk: SDK, clock: Clock, count: int
) -> None:
    body = read_fixture("real/anthropic-text.sse")
    coded = gzip.compress(body)
    reads = _reads(coded, count)
    seen = _observe_gzip(sdk, reads)
    assert seen[semconv.OUTCOME] == "complete"
    assert seen[semconv.BYTES_RECEIVED] == len(body)
    # The first decoded byte reached the monitor at the clock reading of the read that held it.
    inflate = zlib.decompressobj(wbits=31)
    first = next(i for i, chunk in enumerate(reads) if inflate.decompress(chunk))
    readings = clock.readings
    assert seen[semconv.TIME_TO_FIRST_BYTE] == pytest.approx(readings[first + 1] - readings[0])


def _observe_gzip(sdk: SDK, reads: list[bytes]) -> dict[str, object]:
    """The span of a gzip-coded stream the observer was fed ``reads`` of, then ended at EOF."""
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    observer = _watch(sdk).response(200, headers, body_decoded=False)
    assert observer is not None
    for chunk in reads:
        observer.feed(chunk)
    observer.finish()
    return _stream_attributes(sdk)


def test_a_coding_that_breaks_ends_the_stream_at_the_read_that_broke_it(
    sdk: SDK, clock: Clock
) -> None:
    body = read_fixture("real/anthropic-text.sse")
    coded = bytearray(gzip.compress(body))
    coded[len(coded) // 2 :] = b"\x07" * (len(coded) - len(coded) // 2)  # invalid from midway
    reads = _reads(bytes(coded), 8)
    broken = _first_failing(zlib.decompressobj(wbits=31), reads)
    seen = _observe_gzip(sdk, reads)
    assert seen[semconv.OUTCOME] == "truncated"
    # It ended at the clock reading of the read that broke, not at finish() (the last reading).
    readings = clock.readings
    assert seen[semconv.DURATION] == pytest.approx(readings[broken + 1] - readings[0])
    assert broken + 1 < len(readings) - 1


def _first_failing(inflate: zlib._Decompress, reads: list[bytes]) -> int:
    """The index of the first read ``inflate`` refuses (the test's input must have one)."""
    for index, chunk in enumerate(reads):
        try:
            inflate.decompress(chunk)
        except zlib.error:
            return index
    raise AssertionError("the corrupted body decoded")


def test_reads_wait_at_most_the_bound_before_the_monitor_hears_them(sdk: SDK) -> None:
    # The bound is what a stream holds: DEFERRED_READS reads (or DEFERRED_BYTES), never more.
    reads = _reads(read_fixture("real/anthropic-text.sse"), 2 * DEFERRED_READS)
    observer = _watch(sdk).response(200, {"content-type": "text/event-stream"}, body_decoded=True)
    assert observer is not None
    heard = []
    for chunk in reads:
        observer.feed(chunk)
        heard.append(observer.monitor.chunk_count)
    assert heard == [0] * (DEFERRED_READS - 1) + [DEFERRED_READS] * DEFERRED_READS + [
        sum(map(bool, reads))
    ]
    observer.finish()
    assert _stream_attributes(sdk)[semconv.OUTCOME] == "complete"
