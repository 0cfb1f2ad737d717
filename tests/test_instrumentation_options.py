"""``instrument()``'s options reach every observed stream: extra routes, limits, the model cap.

Real server on 127.0.0.1 (tests/_server.py), real httpx client, real SDK (tests/_otel.py).
Clients, excluded URLs and idempotence are covered in test_instrumentation_zero_code.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from otelsse import Limits, semconv
from otelsse.routes import OpenAIChatAdapter, Route, match_route, route_names
from otelsse.telemetry import OTHER
from tests._fixtures import read_fixture
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "real/openai-chat-text.sse"


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


def stream(url: str) -> bytes:
    with httpx.Client() as client, client.stream("POST", url, json={"stream": True}) as response:
        return response.read()


def test_an_extra_route_is_used_while_instrumented_and_removed_after(server: SSEServer) -> None:
    # A chat-compatible server without [DONE]: only its own route calls the stream complete.
    body = read_fixture(CHAT).replace(b"data: [DONE]\n\n", b"")
    url = server.route("/v1/writer/chat", Reply(body))
    route = Route(
        "writer.chat",
        lambda: OpenAIChatAdapter(require_done=False),
        lambda method, path: method == "POST" and path == "/v1/writer/chat",
    )
    otel = Telemetry().install(routes=[route])
    try:
        assert stream(url) == body
        span = otel.stream_span()
        assert span.attributes is not None
        assert span.attributes[semconv.ROUTE] == "writer.chat"
        assert span.attributes[semconv.OUTCOME] == "complete"
    finally:
        otel.uninstall()
    assert "writer.chat" not in route_names()
    assert match_route("POST", "/v1/writer/chat") is None


def test_limits_apply_to_every_observed_stream(server: SSEServer) -> None:
    body = read_fixture(CHAT)
    url = server.route("/v1/chat/completions", Reply(body))
    otel = Telemetry().install(limits=Limits(max_line_bytes=64))
    try:
        assert stream(url) == body  # the application's stream is never affected
        span = otel.stream_span()
        assert span.attributes is not None
        assert span.attributes[semconv.OUTCOME] == "buffer_limit"
        assert span.attributes[semconv.BUFFER_LIMIT_STAGE] == "line"
    finally:
        otel.uninstall()


def test_model_names_beyond_the_cap_are_other(server: SSEServer) -> None:
    body = read_fixture(CHAT)
    model = body.split(b'"model":"', 1)[1].split(b'"', 1)[0]
    urls = []
    for n in range(3):
        path = f"/m{n}/v1/chat/completions"
        urls.append(server.route(path, Reply(body.replace(model, b"model-%d" % n))))
    otel = Telemetry().install(max_model_names=2)
    try:
        for url in urls:
            stream(url)
        counted = {
            p.attributes[semconv.GEN_AI_RESPONSE_MODEL]
            for p in otel.points(semconv.STREAMS.name)
            if p.value
        }
        assert counted == {"model-0", "model-1", OTHER}
        # Spans are per stream, not series: they keep the model as sent.
        assert {s.attributes[semconv.GEN_AI_RESPONSE_MODEL] for s in otel.spans()} == {
            "model-0",
            "model-1",
            "model-2",
        }
    finally:
        otel.uninstall()
