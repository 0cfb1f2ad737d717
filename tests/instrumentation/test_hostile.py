"""A hostile or broken server, through the six clients: what it costs otelsse and what it is
called.

Each test serves its body from ``SSEServer`` (tests/_server.py, raw sockets on 127.0.0.1) and
reads it with httpx, httpx2 (sync and async), requests or aiohttp (the harness of
tests/_clients.py), with otelsse instrumented against a real OpenTelemetry SDK (the ``otel``
fixture). The same read with otelsse uninstrumented is the reference: the application's bytes
and exceptions must not change.

- A compression bomb read raw (what a gateway forwarding bytes does, so otelsse decodes it
  itself) costs otelsse a few of the monitor's ceilings of memory (``tracemalloc``'s peak, over
  the reference run's), whatever the coding: gzip, deflate, brotli, zstd. When the parser stops
  at a ceiling, decoding stops; a bomb of valid events is decoded and parsed to its end.
- A body that is not valid in its ``Content-Encoding`` is the peer's fault, with one verdict for
  every client and read style, and no instrumentation error.
- An answer that has no body by definition is no stream: a HEAD answer gets no span, and a 204,
  205 on a streaming route is a ``protocol_error``, a 304 (not 2xx) an ``http_error``.
"""

from __future__ import annotations

import functools
import gzip
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import brotli
import pytest
import zstandard
from opentelemetry.trace import StatusCode

import otelsse
from otelsse import semconv
from otelsse._monitor import Limits
from tests._clients import (
    CLIENTS,
    App,
    AsyncSession,
    Client,
    Got,
    Session,
    Style,
    fetch,
    run,
    uninstrumented,
)
from tests._fixtures import read_fixture
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "/v1/chat/completions"
#: A path no route claims: only the SSE media type makes the answer a stream (route ``generic``).
UNKNOWN_PATH = "/v1/internal/generate"

#: The monitor's ceilings in these tests: small, so that a bomb is thousands of them.
CEILING = 64 * 1024
LIMITS = Limits(max_line_bytes=CEILING, max_event_bytes=CEILING)
#: What otelsse may add to the reference run's peak memory: a few ceilings.
MEMORY_BOUND = 8 * CEILING

#: The plain bodies of the bombs, 16 MiB each: one endless line, or events to the end.
BOMB_SIZE = 16 * 1024 * 1024
EVENT = b"data: " + b"x" * 1018 + b"\n\n"  # 1 KiB


def endless_line() -> bytes:
    return b"data: " + b"x" * (BOMB_SIZE - 6)


def endless_events() -> bytes:
    return EVENT * (BOMB_SIZE // len(EVENT))


CODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": functools.partial(brotli.compress, quality=1),  # the best quality takes seconds
    "zstd": zstandard.ZstdCompressor().compress,
}


@functools.cache
def coded(body: Callable[[], bytes], coding: str) -> bytes:
    return CODERS[coding](body())


def raw_style(client: Client) -> Style:
    """The client's read of the coded bytes as they came (``Client.raw_style``), 8 KiB at a
    time."""
    return client.raw_style.sized(8192)


@pytest.fixture
def ceilings(otel: Telemetry) -> Telemetry:
    """``otel`` with the small ``LIMITS``."""
    otelsse.uninstrument()
    return otel.install(limits=LIMITS)


def peak(read: Callable[[], Got]) -> tuple[Got, int]:
    """What ``read`` got, and the peak of memory it allocated while it ran."""
    tracemalloc.start()
    try:
        got = read()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def reference(otel: Telemetry, read: Callable[[], Got]) -> tuple[Got, int]:
    """``peak(read)`` with otelsse uninstrumented; then instrumented with ``LIMITS`` again."""
    with uninstrumented(otel):
        result = peak(read)
    otelsse.uninstrument()  # uninstrumented() instruments again with the default limits
    otel.install(limits=LIMITS)
    return result


def attributes(otel: Telemetry) -> dict[str, Any]:
    return dict(otel.stream_span().attributes or {})


# --------------------------------------------------------------------------------------------
# Compression bombs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", list(CODERS))
def test_a_bomb_read_raw_costs_a_few_ceilings_and_is_cut_at_one(
    ceilings: Telemetry, server: SSEServer, client: Client, coding: str
) -> None:
    wire = coded(endless_line, coding)
    url = server.route(CHAT, Reply(wire, piece=4096, headers=(("Content-Encoding", coding),)))
    style = raw_style(client)
    expected, reference_peak = reference(ceilings, lambda: fetch(client, url, style))

    got, observed_peak = peak(lambda: fetch(client, url, style))

    assert got.seen == expected.seen == (wire, None)
    assert observed_peak - reference_peak < MEMORY_BOUND
    span = attributes(ceilings)
    assert span[semconv.OUTCOME] == "buffer_limit"
    assert span[semconv.BUFFER_LIMIT_STAGE] == "line"
    # Decoding stopped with the parser: a piece past the ceiling, not the 16 MiB.
    assert span[semconv.BYTES_RECEIVED] <= 2 * CEILING + 64 * 1024
    assert ceilings.instrumentation_errors() == 0


@pytest.mark.parametrize("coding", list(CODERS))
def test_a_bomb_of_valid_events_is_parsed_to_its_end_in_a_few_ceilings(
    ceilings: Telemetry, server: SSEServer, sync_client: Client, coding: str
) -> None:
    wire = coded(endless_events, coding)
    headers = (("Content-Encoding", coding),)
    url = server.route(UNKNOWN_PATH, Reply(wire, piece=4096, headers=headers))
    style = raw_style(sync_client)
    expected, reference_peak = reference(ceilings, lambda: fetch(sync_client, url, style))

    got, observed_peak = peak(lambda: fetch(sync_client, url, style))

    assert got.seen == expected.seen == (wire, None)
    assert observed_peak - reference_peak < MEMORY_BOUND
    span = attributes(ceilings)
    assert span[semconv.OUTCOME] == "eof_unverified"
    assert span[semconv.EVENT_COUNT] == BOMB_SIZE // len(EVENT)
    assert span[semconv.BYTES_RECEIVED] == BOMB_SIZE // len(EVENT) * len(EVENT)


# --------------------------------------------------------------------------------------------
# A body its coding cannot undo
# --------------------------------------------------------------------------------------------


def corrupt_gzip() -> bytes:
    """A recorded chat stream in gzip, 16 bytes flipped in the middle."""
    wire = gzip.compress(read_fixture("real/openai-chat-text.sse"))
    middle = len(wire) // 2
    flipped = bytes(b ^ 0x5A for b in wire[middle : middle + 16])
    return wire[:middle] + flipped + wire[middle + 16 :]


#: Each client reading decoded and raw; aiohttp raw only: before a body it cannot decode fails,
#: it hands over as much as timing lets it, and on a kept-alive connection it sometimes never
#: reports the failure and waits out the read timeout (without otelsse too).
CORRUPT_READS = [
    (c, raw) for c in CLIENTS for raw in (False, True) if raw or c.library != "aiohttp"
]


@pytest.mark.parametrize(
    ("client", "raw"),
    CORRUPT_READS,
    ids=[f"{c}-{'raw' if r else 'decoded'}" for c, r in CORRUPT_READS],
)
def test_a_corrupt_gzip_body_is_truncated_for_every_client_and_never_otelsse_s_fault(
    otel: Telemetry, server: SSEServer, client: Client, raw: bool
) -> None:
    """The application reading decoded bytes gets its client's decoding error; one reading the
    coded bytes gets them as they came. Either way the stream went no further than the bytes
    that could be decoded: ``truncated``, as a body cut by the network is."""
    wire = corrupt_gzip()
    url = server.route(CHAT, Reply(wire, piece=101, headers=(("Content-Encoding", "gzip"),)))
    style = raw_style(client) if raw else client.default_style
    with uninstrumented(otel):
        reference = fetch(client, url, style)

    got = fetch(client, url, style)

    assert got.seen == reference.seen
    assert (got.error is None) is raw
    span = otel.stream_span()
    assert (span.attributes or {})[semconv.OUTCOME] == "truncated"
    assert span.status.status_code is StatusCode.ERROR
    assert otel.instrumentation_errors() == 0
    assert otel.active_streams() == 0


# --------------------------------------------------------------------------------------------
# Answers without a body
# --------------------------------------------------------------------------------------------


def _head_sync(http: Session, url: str) -> int:
    return http.head(url, headers={"accept": "text/event-stream"})


async def _head_async(http: AsyncSession, url: str) -> int:
    return await http.head(url, headers={"accept": "text/event-stream"})


@pytest.mark.parametrize("path", [CHAT, UNKNOWN_PATH])
def test_a_head_answer_is_no_stream(
    otel: Telemetry, server: SSEServer, client: Client, path: str
) -> None:
    url = server.route(path, Reply(b"", framing="length"))  # text/event-stream, no body

    assert run(client, App(_head_sync, _head_async), url) == 200

    assert otel.spans(None) == []
    assert otel.points(semconv.STREAMS.name) == []
    assert otel.points(semconv.STREAMS_ACTIVE.name) == []
    assert otel.instrumentation_errors() == 0


@pytest.mark.parametrize(
    ("status", "reason", "outcome"),
    [
        (204, "No Content", "protocol_error"),  # a 2xx that cannot carry the stream
        (205, "Reset Content", "protocol_error"),
        (304, "Not Modified", "http_error"),  # the server answered in HTTP's words: not 2xx
    ],
)
def test_a_bodiless_status_on_a_streaming_route_is_refused_at_its_headers(
    otel: Telemetry, server: SSEServer, client: Client, status: int, reason: str, outcome: str
) -> None:
    url = server.route(CHAT, Reply(b"", status, reason, framing="length"))
    with uninstrumented(otel):
        reference = fetch(client, url)

    got = fetch(client, url)

    assert got.seen == reference.seen == (b"", None)
    assert got.status == status
    span = otel.stream_span()
    attributes = span.attributes or {}
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status
    assert span.status.status_code is StatusCode.ERROR
    assert otel.active_streams() == 0
