"""The instrumentation's server matrix: every fixture and every misbehaviour through five clients.

An application posts ``{"stream": true, ...}`` with httpx, httpx2 (each sync and async) or requests
to ``SSEServer`` (tests/_server.py: raw sockets on 127.0.0.1, bodies written in pieces, Nagle
off), reads the body in one of the ways real applications do, and keeps whatever it got: the
bytes/text/lines, or the client's own exception. otelsse is instrumented against a real
OpenTelemetry SDK (the ``otel`` fixture: in-memory span exporter and metric reader).

It proves, per client:

1. every shared fixture (served on its route's path with seeded-random pieces of 7..1500 bytes
   and a seeded-random body framing) reaches the application byte for byte, and gives exactly
   one ended CLIENT span whose route/outcome/stop reason are the fixture's expected ones, whose
   content-free counts equal an offline ``StreamMonitor`` reading of the same bytes, and whose
   metric points (outcome counter with every outcome pre-created at 0, the four histograms with
   semconv's units and buckets, tool calls, active streams, instrumentation errors) agree with it;
2. a misbehaving server (cut mid-event, mid-UTF-8, mid-CRLF, inside a chunk, a stall past the
   read timeout, an HTML 502 / JSON 429 on a streaming route, gzip/deflate bodies, gzip cut short,
   an endless line) gives the right outcome, while the application gets the same bytes and the
   same exception as without instrumentation (the same read with otelsse uninstrumented, in the
   same test, is the reference) and the exception is the client's own class;
3. every read style (httpx ``iter_*``/``read``/async twins/``stream=False``; requests
   ``iter_content``/``iter_lines``/``raw.*``/``.content``/``.text``/``stream=False``), on a
   plain and a gzip body, ends one complete span and hands over what the uninstrumented read gives;
4. a non-SSE answer passes through untouched (no span, no stream metric, same object types),
   while an SSE answer on an unknown path, without any stream flag, is observed and its route
   sniffed.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import ssl
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest
import requests
from opentelemetry.trace import SpanKind, StatusCode

import otelsse
from otelsse import semconv
from otelsse.monitor import Outcome, StreamMonitor
from tests._fixtures import EXPECTED, read_fixture, fixture_names
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"
GEMINI = "gemini.generate_content"
GENERIC = "generic"

#: A path no built-in route claims: only the response's media type can make it a stream.
UNKNOWN_PATH = "/v2/chat"
#: The path each route is served on, so that the request alone names the route.
ROUTE_PATHS = {
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    ANTHROPIC: "/v1/messages",
    GEMINI: "/v1beta/models/m:streamGenerateContent?alt=sse",
    GENERIC: UNKNOWN_PATH,
}

STREAMING = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
NOT_STREAMING = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

#: The client's read timeout where the server stalls on purpose (as in test_reader.py).
STALL_TIMEOUT = 1.5
#: Every URL here is http://, so TLS is never used; one shared context spares each client the
#: ~60 ms of loading the CA bundle.
TLS = ssl.create_default_context()
#: Every other read timeout: generous, a loaded machine must not turn a test into a timeout.
READ_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# The five clients and the ways an application reads a body
# --------------------------------------------------------------------------------------------


def _until_empty(read: Callable[[], bytes]) -> Iterator[bytes]:
    while chunk := read():
        yield chunk


async def _aread(response: Any) -> AsyncIterator[bytes]:
    yield await response.aread()


#: httpx/httpx2 ``Client.stream(...)`` response -> what the application pulls from it.
SYNC_STYLES: dict[str, Callable[[Any], Iterable[Any]]] = {
    "iter_bytes": lambda r: r.iter_bytes(),
    "iter_text": lambda r: r.iter_text(),
    "iter_lines": lambda r: r.iter_lines(),
    "iter_raw": lambda r: r.iter_raw(),
    "read": lambda r: [r.read()],
}
ASYNC_STYLES: dict[str, Callable[[Any], AsyncIterator[Any]]] = {
    "aiter_bytes": lambda r: r.aiter_bytes(),
    "aiter_text": lambda r: r.aiter_text(),
    "aiter_lines": lambda r: r.aiter_lines(),
    "aiter_raw": lambda r: r.aiter_raw(),
    "aread": _aread,
}
# requests leaves ``raw.decode_content`` False, so the raw.* styles read the coded bytes.
REQUESTS_STYLES: dict[str, Callable[[Any], Iterable[Any]]] = {
    "iter_content(None)": lambda r: r.iter_content(chunk_size=None),
    "iter_content(1)": lambda r: r.iter_content(chunk_size=1),
    "iter_content(512)": lambda r: r.iter_content(chunk_size=512),
    "iter_content(65536)": lambda r: r.iter_content(chunk_size=65536),
    "iter_lines": lambda r: r.iter_lines(),
    "raw.read()": lambda r: [r.raw.read()],
    "raw.read(333)": lambda r: _until_empty(lambda: r.raw.read(333)),
    "raw.read1()": lambda r: _until_empty(r.raw.read1),
    "raw.stream(1024)": lambda r: r.raw.stream(1024),
    "content": lambda r: [r.content],
    "text": lambda r: [r.text],
}
#: Styles that hand the application the body before content-decoding.
RAW_STYLES = {
    "iter_raw",
    "aiter_raw",
    "raw.read()",
    "raw.read(333)",
    "raw.read1()",
    "raw.stream(1024)",
}
LINE_STYLES = {"iter_lines", "aiter_lines"}
#: ``client.post(...)`` / ``requests.post(..., stream=False)``: the client reads the body itself.
UNSTREAMED = "unstreamed"


@dataclass(frozen=True)
class Client:
    library: str  # "httpx" | "httpx2" | "requests"
    is_async: bool = False

    @property
    def id(self) -> str:
        return f"{self.library}-async" if self.is_async else self.library

    @property
    def module(self) -> Any:
        return {"httpx": httpx, "httpx2": httpx2, "requests": requests}[self.library]

    @property
    def styles(self) -> list[str]:
        if self.library == "requests":
            styles = list(REQUESTS_STYLES)
        else:
            styles = list(ASYNC_STYLES if self.is_async else SYNC_STYLES)
        return [*styles, UNSTREAMED]

    @property
    def default_style(self) -> str:
        return self.styles[0]


CLIENTS = (
    Client("httpx"),
    Client("httpx", is_async=True),
    Client("httpx2"),
    Client("httpx2", is_async=True),
    Client("requests"),
)
CLIENT_PARAMS = [pytest.param(client, id=client.id) for client in CLIENTS]
STYLE_PARAMS = [
    pytest.param(client, style, id=f"{client.id}-{style}")
    for client in CLIENTS
    for style in client.styles
]

#: The client's own exception when the connection drops ("transport") or the read deadline
#: fires ("timeout") while the application reads in its default style.
CLIENT_ERRORS: dict[tuple[str, str], type[BaseException]] = {
    ("httpx", "transport"): httpx.RemoteProtocolError,
    ("httpx", "timeout"): httpx.ReadTimeout,
    ("httpx2", "transport"): httpx2.RemoteProtocolError,
    ("httpx2", "timeout"): httpx2.ReadTimeout,
    ("requests", "transport"): requests.exceptions.ChunkedEncodingError,
    ("requests", "timeout"): requests.exceptions.ConnectionError,
}


@dataclass
class Got:
    """What the application saw: the status, what it read, the exception it caught, the types."""

    style: str
    parts: list[Any] = field(default_factory=list)
    status: int | None = None
    error: BaseException | None = None
    #: (type of the response, type of its body source: httpx ``.stream``, requests ``.raw``)
    types: tuple[type, type] | None = None
    #: The same by ``__class__``: what ``isinstance`` sees (a transparent proxy passes on its
    #: target's class).
    classes: tuple[type, type] | None = None

    def headers_in(self, response: Any, source: Any) -> None:
        self.status = response.status_code
        self.types = (type(response), type(source))
        self.classes = (response.__class__, source.__class__)

    @property
    def data(self) -> bytes | str | tuple[Any, ...]:
        """Everything read, joined (lines kept apart: their split is part of the result)."""
        if self.style in LINE_STYLES:
            return tuple(self.parts)
        if self.parts and isinstance(self.parts[0], str):
            return "".join(self.parts)
        return b"".join(self.parts)


def fetch(
    client: Client,
    url: str,
    style: str | None = None,
    *,
    payload: dict[str, Any] = STREAMING,
    read_timeout: float = READ_TIMEOUT,
    on_headers: Callable[[], None] = lambda: None,
) -> Got:
    """POST ``payload`` as JSON with ``client`` and read the answer in ``style``, like an app.

    ``on_headers`` runs once the response headers are in, before the application reads a byte.
    Any exception the client raises is caught and kept, exactly as the application got it.
    """
    got = Got(style or client.default_style)
    if client.library == "requests":
        _fetch_requests(url, got, payload, read_timeout, on_headers)
    elif client.is_async:
        asyncio.run(_afetch_httpx(client.module, url, got, payload, read_timeout, on_headers))
    else:
        _fetch_httpx(client.module, url, got, payload, read_timeout, on_headers)
    return got


def _fetch_httpx(
    module: Any,
    url: str,
    got: Got,
    payload: dict[str, Any],
    read_timeout: float,
    on_headers: Callable[[], None],
) -> None:
    timeout = module.Timeout(READ_TIMEOUT, read=read_timeout)
    with module.Client(timeout=timeout, verify=TLS) as http:
        try:
            if got.style == UNSTREAMED:
                response = http.post(url, json=payload)
                got.headers_in(response, response.stream)
                on_headers()
                got.parts.append(response.content)
                return
            with http.stream("POST", url, json=payload) as response:
                got.headers_in(response, response.stream)
                on_headers()
                for part in SYNC_STYLES[got.style](response):
                    got.parts.append(part)
        except Exception as exc:
            got.error = exc


async def _afetch_httpx(
    module: Any,
    url: str,
    got: Got,
    payload: dict[str, Any],
    read_timeout: float,
    on_headers: Callable[[], None],
) -> None:
    timeout = module.Timeout(READ_TIMEOUT, read=read_timeout)
    async with module.AsyncClient(timeout=timeout, verify=TLS) as http:
        try:
            if got.style == UNSTREAMED:
                response = await http.post(url, json=payload)
                got.headers_in(response, response.stream)
                on_headers()
                got.parts.append(response.content)
                return
            async with http.stream("POST", url, json=payload) as response:
                got.headers_in(response, response.stream)
                on_headers()
                async for part in ASYNC_STYLES[got.style](response):
                    got.parts.append(part)
        except Exception as exc:
            got.error = exc


def _fetch_requests(
    url: str,
    got: Got,
    payload: dict[str, Any],
    read_timeout: float,
    on_headers: Callable[[], None],
) -> None:
    streamed = got.style != UNSTREAMED
    try:
        with requests.post(
            url, json=payload, stream=streamed, timeout=(READ_TIMEOUT, read_timeout)
        ) as response:
            got.headers_in(response, response.raw)
            on_headers()
            for part in REQUESTS_STYLES[got.style if streamed else "content"](response):
                got.parts.append(part)
    except Exception as exc:
        got.error = exc


def uninstrumented(otel: Telemetry, client: Client, url: str, **kwargs: Any) -> Got:
    """``fetch`` with otelsse taken out: the reference for "the app sees no difference"."""
    otelsse.uninstrument()
    try:
        got = fetch(client, url, **kwargs)
    finally:
        otel.install()
    assert otel.spans() == [], "the reference run was observed: otelsse was still on"
    assert otel.points(semconv.STREAMS.name) == []
    return got


def error_signature(error: BaseException | None) -> list[object]:
    """An exception's type and message, and the types along its cause/context chain.

    The chain's messages are left out: anyio names its cancel scope by address in them.
    """
    if error is None:
        return []
    signature: list[object] = [type(error), str(error)]
    link = error.__cause__ or error.__context__
    while link is not None and len(signature) < 10:
        signature.append(type(link))
        link = link.__cause__ or link.__context__
    return signature


# --------------------------------------------------------------------------------------------
# What one observed stream must have exported
# --------------------------------------------------------------------------------------------

#: (histogram, the span attribute holding the value it must have recorded)
HISTOGRAMS = (
    (semconv.STREAM_DURATION, semconv.DURATION),
    (semconv.STREAM_TIME_TO_FIRST_EVENT, semconv.TIME_TO_FIRST_EVENT),
    (semconv.STREAM_MAX_INTER_EVENT_GAP, semconv.MAX_INTER_EVENT_GAP),
    (semconv.STREAM_EVENTS, semconv.EVENT_COUNT),
    (semconv.STREAM_BYTES, semconv.BYTES_RECEIVED),
)
#: Span attributes that depend on timing or network reads, not on the bytes.
CLOCKED = {
    semconv.CHUNK_COUNT,
    semconv.TIME_TO_FIRST_BYTE,
    semconv.TIME_TO_FIRST_EVENT,
    semconv.MAX_INTER_EVENT_GAP,
    semconv.DURATION,
}
#: Span attributes taken from the HTTP exchange rather than from the body.
FROM_HTTP = {
    semconv.HTTP_RESPONSE_STATUS_CODE,
    semconv.SERVER_ADDRESS,
    semconv.SERVER_PORT,
    semconv.REQUEST_ID,
}


def check_stream(
    otel: Telemetry,
    server: SSEServer,
    *,
    route: str,
    outcome: str,
    status: int = 200,
    bytes_received: int | None = None,
) -> dict[str, Any]:
    """Exactly one ended span with these values, and metric points that agree with it."""
    span = otel.stream_span()
    attributes: dict[str, Any] = dict(span.attributes or {})
    assert span.end_time is not None
    assert span.kind is SpanKind.CLIENT
    assert attributes[semconv.ROUTE] == route
    assert attributes[semconv.OUTCOME] == outcome
    assert isinstance(attributes[semconv.TERMINAL_SEEN], bool)
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status
    assert attributes[semconv.SERVER_ADDRESS] == "127.0.0.1"
    assert attributes[semconv.SERVER_PORT] == server.port
    if bytes_received is not None:
        assert attributes[semconv.BYTES_RECEIVED] == bytes_received
    if outcome in semconv.ERROR_OUTCOMES:
        assert span.status.status_code is StatusCode.ERROR
        assert attributes[semconv.ERROR_TYPE] == outcome
    else:
        assert span.status.status_code is StatusCode.UNSET
        assert semconv.ERROR_TYPE not in attributes
    moments = (semconv.TIME_TO_FIRST_BYTE, semconv.TIME_TO_FIRST_EVENT, semconv.DURATION)
    timings = [attributes[key] for key in moments if key in attributes]
    assert timings == sorted(timings)  # first byte <= first event <= end, on one clock
    check_metrics(otel, attributes)
    return attributes


def check_metrics(otel: Telemetry, span: dict[str, Any]) -> None:
    # The metric series of this stream: the span's values for the metric attribute keys.
    series = {key: span[key] for key in semconv.METRIC_ATTRIBUTES if key in span}

    assert otel.streams_by_outcome().keys() == {outcome.value for outcome in Outcome}
    assert otel.nonzero_outcomes() == {span[semconv.OUTCOME]: 1}
    (counted,) = [p for p in otel.points(semconv.STREAMS.name) if p.value]
    assert counted.attributes == series
    assert counted.unit == semconv.STREAMS.unit

    for spec, key in HISTOGRAMS:
        points = otel.points(spec.name)
        if key not in span:
            assert points == [], spec.name
            continue
        (point,) = points
        assert (point.value, point.sum) == (1, span[key]), spec.name
        assert point.unit == spec.unit
        assert point.bucket_bounds == spec.buckets
        assert point.attributes == series

    assert otel.active_streams() == 0
    assert otel.instrumentation_errors() == 0

    calls = otel.points(semconv.TOOL_CALLS.name)
    assert all(p.unit == semconv.TOOL_CALLS.unit for p in calls)
    assert sum(p.value for p in calls) == span[semconv.TOOL_CALL_COUNT]
    # A call whose arguments never closed cannot be counted as valid.
    invalid = span[semconv.TOOL_CALL_INVALID_COUNT] + span[semconv.OPEN_ACCUMULATOR_COUNT]
    assert sum(p.value for p in calls if p.attributes[semconv.TOOL_CALL_VALID] is False) == invalid


def offline_attributes(route: str, body: bytes) -> dict[str, Any]:
    """The span attributes a monitor gives for ``body`` read in one piece, without a clock."""
    monitor = StreamMonitor(route)
    monitor.feed(body)
    return dict(monitor.close().to_attributes())


# --------------------------------------------------------------------------------------------
# 1. Every shared fixture through every client
# --------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as srv:
        yield srv


#: Outcomes that say whether the route's terminal event arrived (a provider error may or not).
TERMINAL_SEEN = {"complete": True, "incomplete": True, "truncated": False, "eof_unverified": False}


def realistic_reply(name: str, body: bytes) -> Reply:
    """Pieces of 7..1500 bytes and a body framing, seeded by the fixture's name."""
    rng = random.Random(name)
    return Reply(
        body, piece=rng.randint(7, 1500), framing=rng.choice(["chunked", "length", "close"])
    )


@pytest.mark.parametrize("client", CLIENT_PARAMS)
@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_through_every_client(
    otel: Telemetry, server: SSEServer, client: Client, name: str
) -> None:
    expected = EXPECTED[name]
    body = read_fixture(name)
    url = server.route(ROUTE_PATHS[expected.route], realistic_reply(name, body))

    got = fetch(client, url)

    assert got.error is None
    assert got.status == 200
    assert got.data == body
    span = check_stream(
        otel, server, route=expected.route, outcome=expected.outcome, bytes_received=len(body)
    )
    assert span.get(semconv.STOP_REASON) == expected.stop_reason
    if expected.outcome in TERMINAL_SEEN:
        assert span[semconv.TERMINAL_SEEN] is TERMINAL_SEEN[expected.outcome]
    # Everything the bytes decide is what an offline reading of the same bytes gives.
    offline = offline_attributes("auto" if expected.route == GENERIC else expected.route, body)
    assert {k: span.get(k) for k in offline.keys() - CLOCKED} == {
        k: offline[k] for k in offline.keys() - CLOCKED
    }
    assert span.keys() - offline.keys() <= CLOCKED | FROM_HTTP


# --------------------------------------------------------------------------------------------
# 2. A misbehaving server
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One misbehaviour: what is served where, and what the application and the span must get."""

    path: str
    reply: Reply
    route: str
    outcome: str
    #: The body as the application reads it when every byte arrives (after content-decoding).
    decoded: bytes
    #: "transport" / "timeout": the client's own error the application must catch; None: EOF.
    raises: str | None = None
    status: int = 200
    read_timeout: float = READ_TIMEOUT
    buffer_limit_stage: str | None = None


def _middle(offsets: list[int], length: int) -> int:
    return min(offsets, key=lambda offset: abs(offset - length // 2))


def _event_starts(body: bytes) -> list[int]:
    separator = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    starts, at = [], 0
    while (found := body.find(separator, at)) != -1:
        at = found + len(separator)
        starts.append(at)
    return starts[:-1]  # the last separator ends the body


def _cut(name: str, path: str, route: str, cut: int, **reply: Any) -> Case:
    body = read_fixture(name)
    raises = None if reply.get("framing") == "close" else "transport"
    return Case(path, Reply(body, cut=cut, **reply), route, "truncated", body[:cut], raises)


def mid_event() -> Case:
    body = read_fixture("real/openai-chat-text.sse")
    cut = _middle(_event_starts(body), len(body)) + 9  # 9 bytes into an event
    return _cut("real/openai-chat-text.sse", ROUTE_PATHS[CHAT], CHAT, cut, piece=64)


def mid_utf8() -> Case:
    # Connection: close framing, so the cut is a clean EOF to the client: no exception, and
    # only the monitor can tell that the body stopped inside a character.
    name = "real/openai-responses-reasoning-function-call-text.sse"
    body = read_fixture(name)
    lead = next(i for i, byte in enumerate(body) if byte >= 0xC0)
    assert body[lead : lead + 3].decode("utf-8")  # a three-byte character starts there
    return _cut(name, ROUTE_PATHS[RESPONSES], RESPONSES, lead + 1, piece=97, framing="close")


def mid_crlf() -> Case:
    name = "real/gemini-thinking.sse"
    body = read_fixture(name)
    crlfs = [i for i in range(len(body) - 1) if body[i : i + 2] == b"\r\n"]
    cut = _middle(crlfs, len(body)) + 1  # between CR and LF
    assert body[cut - 1 : cut + 1] == b"\r\n"
    return _cut(name, ROUTE_PATHS[GEMINI], GEMINI, cut, piece=211, framing="close")


def inside_chunk() -> Case:
    name = "real/anthropic-text-and-two-tool-use.sse"
    cut = len(read_fixture(name)) // 2 + 100  # the last chunk (500 bytes) is announced in full
    return _cut(name, ROUTE_PATHS[ANTHROPIC], ANTHROPIC, cut, piece=500, cut_inside_chunk=True)


def stall() -> Case:
    body = read_fixture("real/openai-responses-function-call.sse")
    cut = len(body) // 2
    reply = Reply(body, piece=150, cut=cut, after_cut="stall")
    return Case(
        ROUTE_PATHS[RESPONSES], reply, RESPONSES, "timeout", body[:cut], "timeout",
        read_timeout=STALL_TIMEOUT,
    )  # fmt: skip


def html_502() -> Case:
    page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n"
    reply = Reply(page, 502, "Bad Gateway", "text/html", framing="length")
    return Case(ROUTE_PATHS[CHAT], reply, CHAT, "protocol_error", page, status=502)


def json_429() -> Case:
    error = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    reply = Reply(
        error, 429, "Too Many Requests", "application/json", headers=(("Retry-After", "1"),)
    )
    return Case(ROUTE_PATHS[ANTHROPIC], reply, ANTHROPIC, "protocol_error", error, status=429)


PARALLEL_TOOLS = "real/openai-chat-parallel-tool-calls.sse"


def _deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


CODECS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # as the RFC says: zlib-wrapped
    "deflate-raw": _deflate_raw,  # as some servers send it: bare DEFLATE, same header
}


def coded(codec: str) -> Case:
    body = read_fixture(PARALLEL_TOOLS)
    encoding = codec.removesuffix("-raw")
    reply = Reply(CODECS[codec](body), piece=101, headers=(("Content-Encoding", encoding),))
    return Case(ROUTE_PATHS[CHAT], reply, CHAT, "complete", body)


def gzip_cut() -> Case:
    body = read_fixture(PARALLEL_TOOLS)
    wire = gzip.compress(body)
    reply = Reply(
        wire, piece=101, framing="length", cut=len(wire) // 2,
        headers=(("Content-Encoding", "gzip"),),
    )  # fmt: skip
    # What arrives decodes to some prefix of the body; the client's own decoder says which.
    return Case(ROUTE_PATHS[CHAT], reply, CHAT, "truncated", body, "transport")


def endless_line() -> Case:
    body = b"data: " + b"x" * (9 * 1024 * 1024)  # longer than the 8 MiB line ceiling
    reply = Reply(body, piece=256 * 1024, framing="close")
    return Case(ROUTE_PATHS[CHAT], reply, CHAT, "buffer_limit", body, buffer_limit_stage="line")


MISBEHAVIOURS: dict[str, Callable[[], Case]] = {
    "mid-event": mid_event,
    "mid-utf8": mid_utf8,
    "mid-crlf": mid_crlf,
    "inside-chunk": inside_chunk,
    "stall": stall,
    "html-502": html_502,
    "json-429": json_429,
    "gzip": lambda: coded("gzip"),
    "deflate": lambda: coded("deflate"),
    "deflate-raw": lambda: coded("deflate-raw"),
    "gzip-cut": gzip_cut,
    "endless-line": endless_line,
}


@pytest.mark.parametrize("client", CLIENT_PARAMS)
@pytest.mark.parametrize("misbehaviour", list(MISBEHAVIOURS))
def test_a_misbehaving_server(
    otel: Telemetry, server: SSEServer, client: Client, misbehaviour: str
) -> None:
    case = MISBEHAVIOURS[misbehaviour]()
    url = server.route(case.path, case.reply)
    reference = uninstrumented(otel, client, url, read_timeout=case.read_timeout)
    spans_at_headers: list[int] = []

    got = fetch(
        client,
        url,
        read_timeout=case.read_timeout,
        on_headers=lambda: spans_at_headers.append(len(otel.spans())),
    )

    # The application's view is exactly the uninstrumented one: bytes, status, exception.
    assert got.status == reference.status == case.status
    assert got.data == reference.data
    assert error_signature(got.error) == error_signature(reference.error)
    if case.raises is None:
        assert got.error is None
        assert got.data == case.decoded
    else:
        assert type(got.error) is CLIENT_ERRORS[client.library, case.raises]
        assert isinstance(got.data, bytes)
        assert case.decoded.startswith(got.data)  # a client may drop a partial chunk's bytes
    # A body that is not a stream is judged at its headers, before the application reads it.
    assert spans_at_headers == [1 if case.outcome == "protocol_error" else 0]
    span = check_stream(
        otel,
        server,
        route=case.route,
        outcome=case.outcome,
        status=case.status,
        # The monitor counts the bytes the application got, after content-decoding.
        bytes_received=None if case.status != 200 else len(got.data),
    )
    assert span.get(semconv.BUFFER_LIMIT_STAGE) == case.buffer_limit_stage


# --------------------------------------------------------------------------------------------
# 3. Every read style
# --------------------------------------------------------------------------------------------

#: Small, complete, with multi-byte characters that the pieces below split.
READ_FIXTURE = "real/anthropic-server-tool-empty-input.sse"


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
@pytest.mark.parametrize(("client", "style"), STYLE_PARAMS)
def test_every_read_style(
    otel: Telemetry, server: SSEServer, client: Client, style: str, encoding: str
) -> None:
    body = read_fixture(READ_FIXTURE)
    wire = body
    headers: tuple[tuple[str, str], ...] = ()
    if encoding == "gzip":
        wire, headers = gzip.compress(body), (("Content-Encoding", "gzip"),)
    url = server.route(ROUTE_PATHS[ANTHROPIC], Reply(wire, piece=97, headers=headers))
    reference = uninstrumented(otel, client, url, style=style)

    got = fetch(client, url, style)

    assert got.error is reference.error is None
    assert got.status == 200
    assert got.classes == reference.classes
    assert got.data == reference.data
    if isinstance(got.data, bytes):
        assert got.data == (wire if style in RAW_STYLES else body)
    span = check_stream(otel, server, route=ANTHROPIC, outcome="complete", bytes_received=len(body))
    assert span[semconv.STOP_REASON] == EXPECTED[READ_FIXTURE].stop_reason


# --------------------------------------------------------------------------------------------
# 4. What is not a stream passes through; an SSE answer nobody announced is still observed
# --------------------------------------------------------------------------------------------

JSON_BODY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'


@pytest.mark.parametrize("client", CLIENT_PARAMS)
@pytest.mark.parametrize(
    ("path", "payload"),
    [
        pytest.param(UNKNOWN_PATH, STREAMING, id="json-on-unknown-path"),
        pytest.param(ROUTE_PATHS[CHAT], NOT_STREAMING, id="unstreamed-chat-completion"),
    ],
)
def test_a_json_answer_passes_through_untouched(
    otel: Telemetry, server: SSEServer, client: Client, path: str, payload: dict[str, Any]
) -> None:
    url = server.route(path, Reply(JSON_BODY, content_type="application/json", framing="length"))
    reference = uninstrumented(otel, client, url, payload=payload)

    got = fetch(client, url, payload=payload)

    assert got.error is reference.error is None
    assert got.data == reference.data == JSON_BODY
    assert got.types == reference.types  # the response and its body source were not wrapped
    assert otel.spans(None) == []
    assert otel.points(semconv.STREAMS.name) == []
    assert otel.points(semconv.STREAMS_ACTIVE.name) == []
    assert otel.instrumentation_errors() == 0


@pytest.mark.parametrize("client", CLIENT_PARAMS)
@pytest.mark.parametrize(
    "name",
    [
        "real/openai-chat-text.sse",
        "real/openai-responses-text.sse",
        "real/anthropic-text.sse",
        "real/gemini-text.sse",
    ],
)
def test_an_sse_answer_on_an_unknown_path_is_observed_and_its_route_sniffed(
    otel: Telemetry, server: SSEServer, client: Client, name: str
) -> None:
    expected = EXPECTED[name]
    body = read_fixture(name)
    url = server.route(UNKNOWN_PATH, realistic_reply(name, body))

    got = fetch(client, url, payload=NOT_STREAMING)

    assert got.error is None
    assert got.data == body
    span = check_stream(
        otel, server, route=expected.route, outcome=expected.outcome, bytes_received=len(body)
    )
    assert span[semconv.STOP_REASON] == expected.stop_reason
