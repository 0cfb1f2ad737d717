"""A hostile or broken server, through the five clients: what it costs otelsse and what it is
called.

Each test serves its body from ``SSEServer`` (tests/_server.py, raw sockets on 127.0.0.1) and
reads it with httpx, httpx2 (sync and async) or requests (the harness of tests/_clients.py), with
otelsse instrumented against a real OpenTelemetry SDK (the ``otel`` fixture). The same read with
otelsse uninstrumented is the reference: the application's bytes and exceptions must not change.

- An answer that has no body by definition is no stream: a HEAD answer gets no span, and a 204,
  205 or 304 on a streaming route is a ``protocol_error``.
"""

from __future__ import annotations

import pytest
from opentelemetry.trace import StatusCode

from otelsse import semconv
from tests._clients import (
    App,
    AsyncSession,
    Client,
    Session,
    fetch,
    run,
    uninstrumented,
)
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "/v1/chat/completions"
#: A path no route claims: only the SSE media type makes the answer a stream (route ``generic``).
UNKNOWN_PATH = "/v2/chat"

# --------------------------------------------------------------------------------------------
# Answers without a body
# --------------------------------------------------------------------------------------------


def _head_sync(http: Session, url: str) -> int:
    return int(http.http.head(url, headers={"accept": "text/event-stream"}).status_code)


async def _head_async(http: AsyncSession, url: str) -> int:
    response = await http.http.head(url, headers={"accept": "text/event-stream"})
    return int(response.status_code)


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
    ("status", "reason"), [(204, "No Content"), (205, "Reset Content"), (304, "Not Modified")]
)
def test_a_bodiless_status_on_a_streaming_route_is_a_protocol_error(
    otel: Telemetry, server: SSEServer, client: Client, status: int, reason: str
) -> None:
    url = server.route(CHAT, Reply(b"", status, reason, framing="length"))
    with uninstrumented(otel):
        reference = fetch(client, url)

    got = fetch(client, url)

    assert got.seen == reference.seen == (b"", None)
    assert got.status == status
    span = otel.stream_span()
    attributes = span.attributes or {}
    assert attributes[semconv.OUTCOME] == "protocol_error"
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status
    assert span.status.status_code is StatusCode.ERROR
    assert otel.active_streams() == 0
