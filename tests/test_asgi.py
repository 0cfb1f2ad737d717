"""``OtelSSEMiddleware`` around a real Starlette app served by uvicorn on 127.0.0.1.

The app streams the recorded fixtures with Starlette's ``StreamingResponse`` and sse-starlette's
``EventSourceResponse``; a real OpenTelemetry SDK collects the spans and metric points. One server
serves the whole module: each test mounts its own app (with or without the middleware) on it.
What a socket cannot make happen on cue (a body cut at a chosen byte, a ``send`` that raises) is
driven by calling the middleware directly, as an ASGI server would (``_call``).
"""

from __future__ import annotations

import json
import socket
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from otelsse import asgi, semconv
from otelsse._monitor import Limits, StreamMonitor
from otelsse._telemetry import Telemetry as OtelsseTelemetry
from otelsse.asgi import ASGIApp, OtelSSEMiddleware
from tests._helpers import soon
from tests._uvicorn import Served, serving

from ._fixtures import read_fixture
from ._helpers import event_ends, sse_events
from ._otel import Telemetry, attribute_values

#: Upper bound for waiting on the server's side of an exchange (never a measured duration).
MAX_WAIT = 30.0
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def _events(name: str) -> list[bytes]:
    """A fixture cut into its events, as the app sends them."""
    body, start, pieces = read_fixture(name), 0, []
    for end in event_ends(body):
        pieces.append(body[start:end])
        start = end
    return pieces


async def _chat(request: Request) -> Response:
    """Streams the fixture named by ``x-fixture``: all of it, its first ``x-events`` events, or
    those and then a failure (``x-then: raise``) or a wait for the client to leave."""
    body = await request.body()  # the app reads its request, as a gateway does
    pieces = _events(request.headers["x-fixture"])
    then = request.headers.get("x-then")
    headers = {"x-body-bytes": str(len(body))}
    if "x-gzip" in request.headers:
        # Each event flushed on its own, as a compressing gateway forwards it.
        gzip = zlib.compressobj(wbits=31)
        pieces = [gzip.compress(p) + gzip.flush(zlib.Z_SYNC_FLUSH) for p in pieces] + [gzip.flush()]
        headers["content-encoding"] = "gzip"
    count = int(request.headers.get("x-events", len(pieces)))

    async def stream() -> AsyncIterator[bytes]:
        for piece in pieces[:count]:
            yield piece
        if then == "raise":
            raise AppFailure
        if then == "wait":
            await anyio.sleep_forever()

    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


async def _messages(request: Request) -> Response:
    """sse-starlette serving a fixture's events."""
    await request.body()
    events = sse_events(read_fixture(request.headers["x-fixture"]))

    async def stream() -> AsyncIterator[ServerSentEvent]:
        for kind, data in events:
            yield ServerSentEvent(data=data, event=None if kind == "message" else kind)

    return EventSourceResponse(stream())


async def _json(request: Request) -> Response:
    return JSONResponse({"ok": True})


APP = Starlette(
    routes=[
        Route("/v1/chat/completions", _chat, methods=["POST"]),
        Route("/custom/stream", _chat, methods=["POST"]),  # no known route: sniffed
        Route("/v1/messages", _messages, methods=["POST"]),
        Route("/health", _json),
    ]
)


class AppFailure(Exception):
    """What the app raises mid-stream."""


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with serving(lambda base: APP) as served:
        yield served


@pytest.fixture
def sdk() -> Iterator[Telemetry]:
    """A real OpenTelemetry SDK, in memory."""
    telemetry = Telemetry()
    try:
        yield telemetry
    finally:
        telemetry.tracer_provider.shutdown()
        telemetry.meter_provider.shutdown()


def _middleware(telemetry: Telemetry, **options: Any) -> OtelSSEMiddleware:
    return OtelSSEMiddleware(
        APP,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        **options,
    )


@pytest.fixture
def otel(server: Served, sdk: Telemetry) -> Iterator[Telemetry]:
    """The middleware mounted on the server; the bare app again afterwards."""
    server.mount.app = _middleware(sdk)
    server.mount.raised.clear()
    try:
        yield sdk
    finally:
        server.mount.app = server.mount.bare


def _wait(condition: Callable[[], object], what: str) -> None:
    soon(condition, MAX_WAIT, what)


def _stream_span(otel: Telemetry) -> ReadableSpan:
    """The one ``otelsse.stream`` span, once the server ended it (after the client's read)."""
    _wait(otel.spans, "the stream span")
    return otel.stream_span()


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    error: str | None  # the client's exception type when the body was cut


def _post(base: str, path: str, headers: dict[str, str], body: bytes) -> _Answer:
    with (
        httpx.Client(base_url=base, timeout=MAX_WAIT) as client,
        client.stream("POST", path, headers=headers, content=body) as response,
    ):
        received, error = bytearray(), None
        try:
            for chunk in response.iter_raw():
                received += chunk
        except httpx.TransportError as exc:
            error = type(exc).__name__
        # The date changes between two answers; every other header must not.
        kept = [(k, v) for k, v in response.headers.multi_items() if k != "date"]
        return _Answer(response.status_code, kept, bytes(received), error)


def _body(model: str = "gpt-test", padding: int = 0) -> bytes:
    # The model after the messages, as the openai SDK orders them: found only at the body's end.
    messages = [{"role": "user", "content": "x" * padding}]
    return json.dumps({"messages": messages, "stream": True, "model": model}).encode()


def _both(
    server: Served, otel: Telemetry, path: str, headers: dict[str, str], body: bytes
) -> _Answer:
    """The answer through the middleware, after checking it is the bare app's, byte for byte."""
    observed = _post(server.base, path, headers, body)
    app = server.mount.app
    server.mount.app = server.mount.bare
    try:
        bare = _post(server.base, path, headers, body)
    finally:
        server.mount.app = app
    assert observed == bare
    return observed


@pytest.mark.parametrize(
    ("fixture", "events", "outcome", "stop_reason"),
    [
        ("real/openai-chat-text.sse", None, "complete", "stop"),
        ("real/openai-chat-text.sse", 3, "truncated", None),
        ("real/groq-chat-error-event.sse", None, "provider_error", None),
    ],
    ids=["complete", "app-stops-early", "provider-error"],
)
def test_streaming_response(
    server: Served,
    otel: Telemetry,
    fixture: str,
    events: int | None,
    outcome: str,
    stop_reason: str | None,
) -> None:
    headers = {"x-fixture": fixture, "traceparent": TRACEPARENT}
    if events is not None:
        headers["x-events"] = str(events)
    sent = b"".join(_events(fixture)[:events])
    answer = _both(server, otel, "/v1/chat/completions", headers, _body())
    assert answer.body == sent
    assert answer.error is None

    span = _stream_span(otel)
    attributes = dict(span.attributes or {})
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes.get(semconv.STOP_REASON) == stop_reason
    assert attributes[semconv.ROUTE] == "openai.chat_completions"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == "gpt-test"
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == 200
    assert attributes[semconv.SERVER_ADDRESS] == "127.0.0.1"  # the Host the client named
    assert attributes[semconv.SERVER_PORT] == int(server.base.rpartition(":")[2])
    # The caller's trace continues; with no server span around it, this one is the server's.
    assert span.kind is SpanKind.SERVER
    assert span.parent is not None
    assert f"{span.parent.trace_id:032x}" == TRACE_ID
    assert otel.nonzero_outcomes() == {outcome: 1}
    assert otel.active_streams() == 0
    assert otel.instrumentation_errors() == 0


def test_a_sniffed_route_leaves_every_active_series_at_zero(
    server: Served, otel: Telemetry
) -> None:
    """The stream starts under ``generic`` and ends under the route its events name: the active
    gauge must go down on the series it went up on, not the sum only."""
    headers = {"x-fixture": "real/openai-chat-text.sse"}
    _both(server, otel, "/custom/stream", headers, _body())
    attributes = dict(_stream_span(otel).attributes or {})
    assert attributes[semconv.ROUTE] == "openai.chat_completions"
    assert attributes[semconv.OUTCOME] == "complete"
    series = {
        tuple(sorted(p.attributes.items())): p.value
        for p in otel.points(semconv.STREAMS_ACTIVE.name)
    }
    assert series, "the active gauge recorded nothing"
    assert set(series.values()) == {0}, series


def test_gzip_stream_is_observed_decoded(server: Served, otel: Telemetry) -> None:
    headers = {"x-fixture": "real/openai-chat-text.sse", "x-gzip": "1"}
    answer = _both(server, otel, "/v1/chat/completions", headers, _body())
    decoded = zlib.decompress(answer.body, wbits=31)
    assert decoded == read_fixture("real/openai-chat-text.sse")
    attributes = dict(_stream_span(otel).attributes or {})
    assert attributes[semconv.OUTCOME] == "complete"
    assert attributes[semconv.BYTES_RECEIVED] == len(decoded)  # what the client decodes


def test_model_read_as_the_app_reads_a_long_body(server: Served, otel: Telemetry) -> None:
    """A body the server hands over in many messages: the app gets all of it, the span the
    model named at its end."""
    body = _body("gpt-long", padding=1_000_000)
    headers = {"x-fixture": "real/openai-chat-text.sse"}
    answer = _both(server, otel, "/v1/chat/completions", headers, body)
    assert dict(answer.headers)["x-body-bytes"] == str(len(body))
    span = _stream_span(otel)
    assert (span.attributes or {})[semconv.GEN_AI_REQUEST_MODEL] == "gpt-long"


def test_sse_starlette(server: Served, otel: Telemetry) -> None:
    headers = {"x-fixture": "real/anthropic-text.sse"}
    answer = _both(server, otel, "/v1/messages", headers, b'{"model": "claude-test"}')
    assert answer.error is None
    attributes = dict(_stream_span(otel).attributes or {})
    assert attributes[semconv.OUTCOME] == "complete"
    assert attributes[semconv.ROUTE] == "anthropic.messages"
    assert attributes[semconv.STOP_REASON] == "end_turn"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == "claude-test"


def test_app_raising_mid_stream_is_truncated(server: Served, otel: Telemetry) -> None:
    fixture = "real/openai-chat-text.sse"
    headers = {"x-fixture": fixture, "x-events": "3", "x-then": "raise"}
    answer = _both(server, otel, "/v1/chat/completions", headers, _body())
    # The client sees the cut (no clean end of chunks), with and without the middleware.
    assert answer.error == "RemoteProtocolError"
    assert answer.body == b"".join(_events(fixture)[:3])
    assert (_stream_span(otel).attributes or {})[semconv.OUTCOME] == "truncated"
    # The app's own exception reached the server, unchanged, both times.
    _wait(lambda: len(server.mount.raised) == 2, "both exceptions")
    assert [type(exc) for exc in server.mount.raised] == [AppFailure, AppFailure]
    assert otel.active_streams() == 0


def test_client_disconnect_is_cancelled(server: Served, otel: Telemetry) -> None:
    """The client closes its socket mid-stream; the app is waiting for more to send."""
    fixture = "real/openai-chat-text.sse"
    first = _events(fixture)[0]
    body = _body()
    port = int(server.base.rpartition(":")[2])
    with socket.create_connection(("127.0.0.1", port), timeout=MAX_WAIT) as sock:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"x-fixture: {fixture}\r\nx-events: 1\r\nx-then: wait\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        received = b""
        while first not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    attributes = dict(_stream_span(otel).attributes or {})
    assert attributes[semconv.OUTCOME] == "cancelled"
    assert otel.nonzero_outcomes() == {"cancelled": 1}
    _wait(lambda: otel.active_streams() == 0, "the stream to leave the active count")


@pytest.mark.parametrize(
    ("owner", "method", "stage", "outcome"),
    [
        (asgi, "match_route", "send", None),
        (StreamMonitor, "feed", "feed", "internal_error"),
        (StreamMonitor, "close", "finish", "internal_error"),
        (OtelsseTelemetry, "end_span", "end_span", "internal_error"),
        (OtelsseTelemetry, "record_metrics", "record_metrics", "complete"),
    ],
    ids=["route", "feed", "close", "end_span", "record_metrics"],
)
def test_otelsse_failures_are_contained(
    server: Served,
    otel: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
    owner: object,
    method: str,
    stage: str,
    outcome: str | None,
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(stage)

    monkeypatch.setattr(owner, method, fail)
    headers = {"x-fixture": "real/openai-chat-text.sse"}
    answer = _both(server, otel, "/v1/chat/completions", headers, _body())
    assert answer.error is None  # the app's answer is whole, as without the middleware
    assert server.mount.raised == []
    if outcome is None:
        assert otel.spans() == []
    else:
        assert (_stream_span(otel).attributes or {})[semconv.OUTCOME] == outcome
    _wait(lambda: otel.instrumentation_errors() == 1, "the failure to be counted")
    errors = [p for p in otel.points(semconv.INSTRUMENTATION_ERRORS.name) if p.value]
    assert [p.attributes[semconv.INSTRUMENTATION_STAGE] for p in errors] == [stage]
    assert otel.active_streams() == 0


def test_non_sse_response_is_untouched(server: Served, otel: Telemetry) -> None:
    with httpx.Client(base_url=server.base, timeout=MAX_WAIT) as client:
        observed = client.get("/health")
        server.mount.app = server.mount.bare
        bare = client.get("/health")
    assert (observed.status_code, observed.content) == (bare.status_code, bare.content)
    assert observed.content == b'{"ok":true}'
    assert otel.spans(None) == []
    assert otel.nonzero_outcomes() == {}


def _call(app: ASGIApp, parts: list[bytes], lost: OSError | None = None) -> list[dict[str, Any]]:
    """One chat request straight through ``app``, its body handed over in ``parts``; what the
    app sent. With ``lost``, the server's ``send`` raises it at the second body message, as a
    server does for a client that is gone."""
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"gateway.test"), (b"x-fixture", b"real/openai-chat-text.sse")],
        "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 50000),
    }  # fmt: skip
    messages = [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await anyio.sleep_forever()  # the client stays: the app's disconnect listener waits
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if lost is not None and len(sent) == 2:
            raise lost
        sent.append(message)

    anyio.run(app, scope, receive, send)
    return sent


def test_model_cut_across_body_messages(sdk: Telemetry) -> None:
    """Wherever the server cuts the body, the model is found, and the app reads it whole."""
    middleware = _middleware(sdk)
    body = _body("gpt-cut", padding=100)
    start = body.index(b'"model"')
    for cut in range(start, len(body)):
        sent = _call(middleware, [body[:cut], body[cut:]])
        assert (b"x-body-bytes", str(len(body)).encode()) in sent[0]["headers"]
    models = [(s.attributes or {}).get(semconv.GEN_AI_REQUEST_MODEL) for s in sdk.spans()]
    assert models == ["gpt-cut"] * (len(body) - start)


def test_inside_a_server_span_the_stream_span_is_its_child(sdk: Telemetry) -> None:
    """Under an HTTP server instrumentation's span, otelsse adds no second SERVER span."""
    middleware = _middleware(sdk)
    tracer = sdk.tracer_provider.get_tracer("server")
    with tracer.start_as_current_span("POST", kind=SpanKind.SERVER) as outer:
        sent = _call(middleware, [_body()])
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    span = sdk.stream_span()
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id
    assert (span.attributes or {})[semconv.OUTCOME] == "complete"


def test_send_failing_is_cancelled_and_its_error_goes_on(sdk: Telemetry) -> None:
    lost = OSError("the client is gone")
    with pytest.raises(OSError, match="the client is gone") as raised:
        _call(_middleware(sdk), [_body()], lost)
    assert raised.value is lost
    assert (sdk.stream_span().attributes or {})[semconv.OUTCOME] == "cancelled"
    assert sdk.active_streams() == 0


def test_limits_bound_the_monitor(sdk: Telemetry) -> None:
    """An event past ``Limits.max_event_bytes`` stops the parser; the app's stream goes on."""
    sent = _call(_middleware(sdk, limits=Limits(max_event_bytes=64)), [_body()])
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert body == read_fixture("real/openai-chat-text.sse")
    assert (sdk.stream_span().attributes or {})[semconv.OUTCOME] == "buffer_limit"


def test_no_content_in_telemetry(server: Served, otel: Telemetry) -> None:
    """Markers in the body's messages, the query string and the credentials reach no span or
    metric point; the stream's own text neither."""
    marker = f"canary-{uuid.uuid4()}"
    body = json.dumps(
        {"messages": [{"role": "user", "content": marker}], "stream": True, "model": "gpt-test"}
    ).encode()
    headers = {"x-fixture": "real/openai-chat-text.sse", "authorization": f"Bearer {marker}"}
    _both(server, otel, f"/v1/chat/completions?key={marker}", headers, body)
    _stream_span(otel)
    texts = attribute_values(otel.spans(None))
    texts += [f"{k}={v}" for p in otel.points() for k, v in p.attributes.items()]
    assert not [text for text in texts if marker in text]
    said = [data for _, data in sse_events(read_fixture("real/openai-chat-text.sse"))]
    content = [json.loads(d)["choices"][0]["delta"].get("content") for d in said[:-1]]
    words = {word for text in content if text for word in text.split() if len(word) > 3}
    assert words
    assert not [text for text in texts for word in words if word in text]
