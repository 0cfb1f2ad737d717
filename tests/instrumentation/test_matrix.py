"""The instrumentation's server matrix: every fixture and every misbehaviour through six clients.

An application posts ``{"stream": true, ...}`` with httpx, httpx2 (each sync and async), requests
or aiohttp to ``SSEServer`` (tests/_server.py: raw sockets on 127.0.0.1, bodies written in
pieces, Nagle off), reads the body in one of the ways real applications do, and keeps whatever
it got: the bytes/text/lines, or the client's own exception (the clients, their read styles and
exceptions are the harness's: tests/_clients.py). otelsse is instrumented against a real
OpenTelemetry SDK (the ``otel`` fixture: in-memory span exporter and metric reader).

It proves, per client:

1. every shared fixture (served on its route's path with seeded-random pieces of 7..1500 bytes
   and a seeded-random body framing) reaches the application byte for byte, and gives exactly
   one ended CLIENT span whose route/outcome/stop reason are the fixture's expected ones, whose
   content-free counts equal an offline ``StreamMonitor`` reading of the same bytes, and whose
   metric points (outcome counter with the alerted outcomes pre-created at 0, the histograms with
   semconv's units and buckets, tool calls, active streams, instrumentation errors) agree with it;
2. a misbehaving server (cut mid-event, mid-UTF-8, mid-CRLF, inside a chunk, a stall past the
   read timeout, an HTML 502 / JSON 429 on a streaming route, gzip/deflate bodies, gzip cut short,
   an endless line) gives the right outcome, while the application gets the same bytes and the
   same exception as without instrumentation (the same read with otelsse uninstrumented, in the
   same test, is the reference) and the exception is the client's own class;
3. every read style (httpx ``iter_*``/``read``/async twins/``stream=False``; requests
   ``iter_content``/``iter_lines``/``raw.*``/``.content``/``.text``/``stream=False``; aiohttp
   ``response.content``'s reads and iterators, ``auto_decompress=False``, ``read()``/``text()``),
   on a plain and a gzip body, ends one complete span and hands over what the uninstrumented
   read gives;
4. a non-SSE answer passes through untouched (no span, no stream metric, same object types),
   while an SSE answer on an unknown path, without any stream flag, is observed and its route
   sniffed.
"""

from __future__ import annotations

import gzip
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from otelsse import semconv
from otelsse._monitor import StreamMonitor
from otelsse._telemetry import span_attributes
from tests._clients import (
    READ_TIMEOUT,
    STALL_TIMEOUT,
    STREAMING,
    Client,
    Style,
    fetch,
    uninstrumented,
)
from tests._fixtures import EXPECTED, fixture_names, read_fixture
from tests._helpers import event_ends
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"
GEMINI = "gemini.generate_content"
GENERIC = "generic"
AGUI = "agui.run"

#: A path no built-in route claims: only the response's media type can make it a stream.
UNKNOWN_PATH = "/v1/internal/generate"
#: The path each route is served on, so that the request alone names the route.
ROUTE_PATHS = {
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    ANTHROPIC: "/v1/messages",
    GEMINI: "/v1beta/models/m:streamGenerateContent?alt=sse",
    GENERIC: UNKNOWN_PATH,
    AGUI: "/agent",  # an AG-UI agent's own path: no route claims it, its first event tells
    # served at any path, told by a request's JSON-RPC body: these plain requests name none, so
    # their streams are sniffed
    "mcp.streamable_http": "/mcp",
    "a2a.stream": "/a2a",
    "cohere.chat": "/v2/chat",
    "gemini.interactions": "/v1beta/interactions",
}

NOT_STREAMING = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


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
    (semconv.STREAM_TIME_TO_FIRST_OUTPUT, semconv.TIME_TO_FIRST_OUTPUT),
    (semconv.STREAM_MAX_INTER_EVENT_GAP, semconv.MAX_INTER_EVENT_GAP),
    (semconv.STREAM_EVENTS, semconv.EVENT_COUNT),
    (semconv.STREAM_BYTES, semconv.BYTES_RECEIVED),
)
#: Span attributes that depend on timing or network reads, not on the bytes.
CLOCKED = {
    semconv.CHUNK_COUNT,
    semconv.TIME_TO_FIRST_BYTE,
    semconv.TIME_TO_FIRST_EVENT,
    semconv.TIME_TO_FIRST_OUTPUT,
    semconv.TIME_PER_OUTPUT_CHUNK,
    semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    semconv.MAX_INTER_EVENT_GAP,
    semconv.DURATION,
}
#: Span attributes taken from the HTTP exchange rather than from the body.
FROM_HTTP = {
    semconv.HTTP_RESPONSE_STATUS_CODE,
    semconv.SERVER_ADDRESS,
    semconv.SERVER_PORT,
    semconv.REQUEST_ID,
    semconv.RETRY_AFTER,
    semconv.GEN_AI_REQUEST_MODEL,
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
    # The metric series of this stream: the span's values for the metric attribute keys; the
    # status only where it caused the outcome.
    outcome = span[semconv.OUTCOME]
    series = {key: span[key] for key in semconv.METRIC_ATTRIBUTES if key in span}
    if outcome not in ("rate_limited", "http_error"):
        series.pop(semconv.HTTP_RESPONSE_STATUS_CODE, None)
    histogram = {key: span[key] for key in semconv.HISTOGRAM_ATTRIBUTES if key in span}

    assert otel.streams_by_outcome().keys() == semconv.ALERTED_OUTCOMES | {outcome}
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
        assert point.attributes == histogram
    check_genai_metrics(otel, span)

    assert otel.active_streams() == 0
    assert otel.instrumentation_errors() == 0

    calls = otel.points(semconv.TOOL_CALLS.name)
    assert all(p.unit == semconv.TOOL_CALLS.unit for p in calls)
    server = [p for p in calls if p.attributes[semconv.TOOL_CALL_KIND] == semconv.TOOL_CALL_SERVER]
    assert sum(p.value for p in server) == span[semconv.SERVER_TOOL_CALL_COUNT]
    calls = [p for p in calls if p.attributes[semconv.TOOL_CALL_KIND] == semconv.TOOL_CALL_CLIENT]
    assert sum(p.value for p in calls) == span[semconv.TOOL_CALL_COUNT]
    # A call whose arguments never closed cannot be counted as valid.
    invalid = span[semconv.TOOL_CALL_INVALID_COUNT] + span[semconv.OPEN_ACCUMULATOR_COUNT]
    assert sum(p.value for p in calls if p.attributes[semconv.TOOL_CALL_VALID] is False) == invalid


def check_genai_metrics(otel: Telemetry, span: dict[str, Any]) -> None:
    """The GenAI client metrics of the call (no neighbour here): one point each, by operation,
    provider, request model and server, for the routes with a provider."""
    names = {spec.name for specs in semconv.GENAI_METRICS_LEGACY.values() for spec in specs}
    points = [p for p in otel.points() if p.metric in names]
    if semconv.GEN_AI_PROVIDER_NAME not in span:
        assert points == []
        return
    call = {
        key: span[key]
        for key in (
            semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME,
            semconv.GEN_AI_REQUEST_MODEL, semconv.SERVER_ADDRESS,
        )
        if key in span
    }  # fmt: skip
    assert call[semconv.GEN_AI_OPERATION_NAME] in ("chat", "generate_content")
    (duration,) = [p for p in points if p.metric == "gen_ai.client.operation.duration"]
    failed = span.get(semconv.ERROR_TYPE)
    assert duration.attributes == ({**call, semconv.ERROR_TYPE: failed} if failed else call)
    assert (duration.value, duration.sum) == (1, span[semconv.DURATION])
    expected = {"gen_ai.client.operation.duration": 1}
    for name, key in (
        ("gen_ai.client.operation.time_to_first_chunk", semconv.TIME_TO_FIRST_OUTPUT),
        ("gen_ai.client.operation.time_per_output_chunk", semconv.TIME_PER_OUTPUT_CHUNK),
    ):
        if key in span:
            (point,) = [p for p in points if p.metric == name]
            assert (point.value, point.sum, point.attributes) == (1, span[key], call)
            expected[name] = 1
    usage = [p for p in points if p.metric == "gen_ai.client.token.usage"]
    for kind, key in (("input", semconv.GEN_AI_USAGE_INPUT_TOKENS),
                      ("output", semconv.GEN_AI_USAGE_OUTPUT_TOKENS)):  # fmt: skip
        if key in span:
            (point,) = [p for p in usage if p.attributes[semconv.GEN_AI_TOKEN_TYPE] == kind]
            assert (point.value, point.sum) == (1, span[key])
            expected["gen_ai.client.token.usage"] = len(usage)
    assert {p.metric: 0 for p in points}.keys() == expected.keys()


def offline_attributes(route: str, body: bytes) -> dict[str, Any]:
    """The span attributes a monitor gives for ``body`` read in one piece, without a clock."""
    monitor = StreamMonitor(route)
    monitor.feed(body)
    return span_attributes(monitor.close())


# --------------------------------------------------------------------------------------------
# 1. Every shared fixture through every client
# --------------------------------------------------------------------------------------------


#: Outcomes that say whether the route's terminal event arrived (a provider error may or not).
TERMINAL_SEEN = {"complete": True, "incomplete": True, "truncated": False, "eof_unverified": False}


def realistic_reply(name: str, body: bytes) -> Reply:
    """Pieces of 7..1500 bytes and a body framing, seeded by the fixture's name."""
    rng = random.Random(name)
    return Reply(
        body, piece=rng.randint(7, 1500), framing=rng.choice(["chunked", "length", "close"])
    )


@pytest.mark.matrix  # every fixture and client
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


def _cut(name: str, path: str, route: str, cut: int, **reply: Any) -> Case:
    body = read_fixture(name)
    raises = None if reply.get("framing") == "close" else "transport"
    return Case(path, Reply(body, cut=cut, **reply), route, "truncated", body[:cut], raises)


def mid_event() -> Case:
    body = read_fixture("real/openai-chat-text.sse")
    cut = _middle(event_ends(body)[:-1], len(body)) + 9  # 9 bytes into an event
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
    return Case(ROUTE_PATHS[CHAT], reply, CHAT, "http_error", page, status=502)


def json_429() -> Case:
    error = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    reply = Reply(
        error, 429, "Too Many Requests", "application/json", headers=(("Retry-After", "1"),)
    )
    return Case(ROUTE_PATHS[ANTHROPIC], reply, ANTHROPIC, "rate_limited", error, status=429)


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


@pytest.mark.parametrize(
    "misbehaviour",
    # A stall waits out the read timeout twice (reference and observed run) per client.
    [pytest.param(m, marks=pytest.mark.e2e) if m == "stall" else m for m in MISBEHAVIOURS],
)
def test_a_misbehaving_server(
    otel: Telemetry, server: SSEServer, client: Client, misbehaviour: str
) -> None:
    case = MISBEHAVIOURS[misbehaviour]()
    url = server.route(case.path, case.reply)
    with uninstrumented(otel):
        reference = fetch(client, url, read_timeout=case.read_timeout)
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
        raised = client.raises(case.raises)
        assert type(got.error) is raised.raised
        assert isinstance(got.error, raised.family)  # keeps the table's base classes honest
        assert isinstance(got.data, bytes)
        assert case.decoded.startswith(got.data)  # a client may drop a partial chunk's bytes
    # A body that is not a stream is judged at its headers, before the application reads it.
    at_headers = case.outcome in ("protocol_error", "http_error", "rate_limited")
    assert spans_at_headers == [1 if at_headers else 0]
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
    # The server's Retry-After (json-429 sends one) is on the span, for whoever retries.
    retry = dict(case.reply.headers).get("Retry-After")
    assert span.get(semconv.RETRY_AFTER) == (None if retry is None else float(retry))


# --------------------------------------------------------------------------------------------
# 3. Every read style
# --------------------------------------------------------------------------------------------

#: Small, complete, with multi-byte characters that the pieces below split.
READ_FIXTURE = "real/anthropic-server-tool-empty-input.sse"


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_every_read_style(
    otel: Telemetry, server: SSEServer, client_style: tuple[Client, Style], encoding: str
) -> None:
    client, style = client_style
    body = read_fixture(READ_FIXTURE)
    wire = body
    headers: tuple[tuple[str, str], ...] = ()
    if encoding == "gzip":
        wire, headers = gzip.compress(body), (("Content-Encoding", "gzip"),)
    url = server.route(ROUTE_PATHS[ANTHROPIC], Reply(wire, piece=97, headers=headers))
    with uninstrumented(otel):
        reference = fetch(client, url, style)

    got = fetch(client, url, style)

    assert got.error is reference.error is None
    assert got.status == 200
    assert got.classes == reference.classes
    assert got.data == reference.data
    if isinstance(got.data, bytes):
        assert got.data == (wire if style.raw else body)
    span = check_stream(otel, server, route=ANTHROPIC, outcome="complete", bytes_received=len(body))
    assert span[semconv.STOP_REASON] == EXPECTED[READ_FIXTURE].stop_reason


# --------------------------------------------------------------------------------------------
# 4. What is not a stream passes through; an SSE answer nobody announced is still observed
# --------------------------------------------------------------------------------------------

JSON_BODY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'


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
    with uninstrumented(otel):
        reference = fetch(client, url, json=payload)

    got = fetch(client, url, json=payload)

    assert got.error is reference.error is None
    assert got.data == reference.data == JSON_BODY
    assert got.types == reference.types  # the response and its body source were not wrapped
    assert otel.spans(None) == []
    assert otel.points(semconv.STREAMS.name) == []
    assert otel.points(semconv.STREAMS_ACTIVE.name) == []
    assert otel.instrumentation_errors() == 0


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

    got = fetch(client, url, json=NOT_STREAMING)

    assert got.error is None
    assert got.data == body
    span = check_stream(
        otel, server, route=expected.route, outcome=expected.outcome, bytes_received=len(body)
    )
    assert span[semconv.STOP_REASON] == expected.stop_reason
