"""The canary: no content the application sends or receives ever reaches otelsse's telemetry.

Each test plants unique markers (``CANARY-<uuid4>-<where>``) in every place content lives: the
request's JSON body (the prompt), its URL query string and headers (``Authorization``,
``x-api-key``, a custom one), the response's headers (``Set-Cookie``, a custom one) and its body
(text deltas, tool-call arguments, provider error messages, ``id:`` lines, comments, an invalid
JSON payload, an unknown event type and field, an HTML error page). A real server on 127.0.0.1
(tests/_server.py) serves each body on its route's path, and a real client (httpx, httpx2 sync
and async, requests, aiohttp: the harness in tests/_clients.py) reads it exactly as an
application would, under otelsse with a real SDK.

Then everything otelsse could have written is searched: every exported span in full (name,
attributes, status, events, links, resource: ``ReadableSpan.to_json()``), every metric point
(``MetricsData.to_json()`` from an ``InMemoryMetricReader``), every log record of every logger
at DEBUG (message, arguments and exception text), and the process's stdout/stderr. No marker may
appear. So that the search cannot pass vacuously, each test also checks that the server received
the request markers, that the application received the response markers, and that the expected
span and metric points were exported. Failures inside otelsse (``StreamMonitor.feed`` raising an
exception whose message is a marker, and the other containment points) are forced too.

Records of the HTTP stack's own loggers (httpx, httpcore, urllib3, ...) are left out of the
search: those libraries log URLs and headers at DEBUG whether or not otelsse is installed, so a
marker there is theirs, not ours (a test checks that they really do, which also proves that the
log capture sees DEBUG records).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from otelsse import semconv
from otelsse._monitor import StreamMonitor
from otelsse._observe import Settings
from tests._clients import CLIENTS, Client, Got, fetch
from tests._otel import Telemetry
from tests._server import Received, Reply, SSEServer

#: Where a failure inside otelsse is forced (otelsse internals: repoint here): (owner, method,
#: does a span still end?).
CONTAINMENT_POINTS: dict[str, tuple[type, str, bool]] = {
    "monitor-feed": (StreamMonitor, "feed", True),
    "monitor-close": (StreamMonitor, "close", True),
    "watch": (Settings, "watch", False),
}
#: Loggers of the HTTP stack: they log URLs and headers at DEBUG with or without otelsse.
HTTP_STACK_LOGGERS = (
    "httpx", "httpx2", "httpcore", "httpcore2", "urllib3", "requests", "charset_normalizer",
)  # fmt: skip
#: The word every marker starts with; a marker cut short still contains it.
CANARY = "CANARY"


class Canary:
    """Unique markers, one per place content is planted, all sharing one random token."""

    def __init__(self) -> None:
        self.token = str(uuid.uuid4())
        self.planted: dict[str, str] = {}

    def __call__(self, where: str) -> str:
        marker = f"{CANARY}-{self.token}-{where}"
        self.planted[where] = marker
        return marker

    def leaks(self, text: str) -> bool:
        return CANARY.lower() in text.lower() or self.token in text


# --------------------------------------------------------------------------------------------
# Bodies seeded with markers, one builder per route and outcome
# --------------------------------------------------------------------------------------------

Event = tuple[str | None, Any]  # (event type or None, data: a JSON value or raw text)


def frame(c: Canary, events: list[Event]) -> bytes:
    """An SSE body: a comment first, then each event with an ``id:`` line; all carry markers."""
    lines = [f": {c('comment')}", ""]
    for kind, data in events:
        if kind is not None:
            lines.append(f"event: {kind}")
        lines.append(f"id: {c('event-id')}")
        lines.append(f"data: {data if isinstance(data, str) else json.dumps(data)}")
        lines.append("")
    return ("\n".join(lines) + "\n").encode()


def tool_arguments(c: Canary) -> tuple[str, str, str]:
    """Tool-call arguments (one JSON object) and two fragments that each hold a whole marker."""
    marker = c("tool-arguments")
    arguments = json.dumps({"query": marker, "again": marker})
    cut = arguments.index(', "again"')
    return arguments, arguments[:cut], arguments[cut:]


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_complete(c: Canary) -> bytes:
    _, first, second = tool_arguments(c)

    def call(function: dict[str, str], **identity: str) -> Event:
        return (None, chat_chunk({"tool_calls": [{"index": 0, **identity, "function": function}]}))

    return frame(
        c,
        [
            (None, chat_chunk({"role": "assistant", "content": c("text")})),
            call({"name": "f", "arguments": ""}, id="call_1", type="function"),
            call({"arguments": first}),
            call({"arguments": second}),
            (None, chat_chunk({}, "tool_calls")),
            (None, "[DONE]"),
        ],
    )


def chat_provider_error(c: Canary) -> bytes:
    error = {"message": c("error-message"), "type": "server_error", "code": None}
    return frame(
        c, [(None, chat_chunk({"content": c("text")})), (None, {"error": error}), (None, "[DONE]")]
    )


def chat_invalid_json(c: Canary) -> bytes:
    # A JSON object cut short: the payload is invalid, and the marker is in it.
    broken = '{"id": "chatcmpl-1", "choices": [{"delta": {"content": "' + c("invalid-json")
    return frame(
        c,
        [
            (None, chat_chunk({"content": c("text")})),
            (None, broken),
            (None, chat_chunk({}, "stop")),
            (None, "[DONE]"),
        ],
    )


def chat_truncated(c: Canary) -> bytes:
    return frame(
        c,
        [
            (None, chat_chunk({"content": c("text")})),
            (None, chat_chunk({"content": c("cut-event")})),
            (None, chat_chunk({}, "stop")),
            (None, "[DONE]"),
        ],
    )


def html_page(c: Canary) -> bytes:
    return f"<html><body><h1>502 Bad Gateway</h1><p>{c('html-page')}</p></body></html>".encode()


def responses_events(c: Canary, end: Event) -> bytes:
    """A Responses stream: a text item and a function call, then ``end``."""
    arguments, first, second = tool_arguments(c)
    text = c("text")
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    message_done = {**message, "content": [{"type": "output_text", "text": text}]}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f"}
    call_done = {**call, "arguments": arguments, "status": "completed"}
    response = {"id": "resp_1", "object": "response", "model": "gpt-test", "output": []}
    events: list[Event] = [
        ("response.created", {"response": {**response, "status": "in_progress"}}),
        ("response.output_item.added", {"output_index": 0, "item": {**message, "content": []}}),
        ("response.output_text.delta", {"item_id": "msg_1", "output_index": 0, "delta": text}),
        ("response.output_text.done", {"item_id": "msg_1", "output_index": 0, "text": text}),
        ("response.output_item.done", {"output_index": 0, "item": message_done}),
        ("response.output_item.added", {"output_index": 1, "item": {**call, "arguments": ""}}),
        ("response.function_call_arguments.delta", {"item_id": "fc_1", "delta": first}),
        ("response.function_call_arguments.delta", {"item_id": "fc_1", "delta": second}),
        ("response.function_call_arguments.done", {"item_id": "fc_1", "arguments": arguments}),
        ("response.output_item.done", {"output_index": 1, "item": call_done}),
        end,
    ]
    return frame(
        c,
        [
            (kind, {"type": kind, "sequence_number": number, **data})
            for number, (kind, data) in enumerate(events)
        ],
    )


def responses_complete(c: Canary) -> bytes:
    response = {"id": "resp_1", "object": "response", "model": "gpt-test", "status": "completed"}
    usage = {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
    return responses_events(c, ("response.completed", {"response": {**response, "usage": usage}}))


def responses_failed(c: Canary) -> bytes:
    error = {"code": "server_error", "message": c("error-message")}
    response = {"id": "resp_1", "object": "response", "status": "failed", "error": error}
    return responses_events(c, ("response.failed", {"response": response}))


def anthropic_events(c: Canary, rest: list[Event]) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    events: list[Event] = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": c("text")}}),
        *rest,
    ]
    return frame(c, [(kind, {"type": kind, **data}) for kind, data in events])


def anthropic_complete(c: Canary) -> bytes:
    _, first, second = tool_arguments(c)
    tool = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}

    def json_delta(part: str) -> Event:
        delta = {"type": "input_json_delta", "partial_json": part}
        return ("content_block_delta", {"index": 1, "delta": delta})

    stop = {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}
    return anthropic_events(
        c,
        [
            ("content_block_stop", {"index": 0}),
            ("content_block_start", {"index": 1, "content_block": tool}),
            json_delta(""),  # every tool block starts with an empty fragment
            json_delta(first),
            json_delta(second),
            ("content_block_stop", {"index": 1}),
            ("message_delta", stop),
            ("message_stop", {}),
        ],
    )


def anthropic_error(c: Canary) -> bytes:
    error = {"type": "overloaded_error", "message": c("error-message")}
    return anthropic_events(c, [("error", {"error": error})])


def gemini_chunk(part: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-test", "responseId": "r1"}


def gemini_complete(c: Canary) -> bytes:
    call = {"name": "f", "args": {"query": c("tool-arguments")}}
    return frame(
        c,
        [
            (None, gemini_chunk({"text": c("text")})),
            (None, gemini_chunk({"functionCall": call}, "STOP")),
        ],
    )


def gemini_error(c: Canary) -> bytes:
    error = {"code": 503, "message": c("error-message"), "status": "UNAVAILABLE"}
    return frame(c, [(None, gemini_chunk({"text": c("text")})), (None, {"error": error})])


def generic_events(c: Canary) -> bytes:
    """No known route: an unknown event type and field name, multi-line data, a retry."""
    return (
        f": {c('comment')}\n\n"
        f"event: {c('event-type')}\nid: {c('event-id')}\nretry: 1000\n"
        f"{c('field-name')}: x\ndata: {c('data')}\ndata: {c('data-line-2')}\n\n"
    ).encode()


def generic_error(c: Canary) -> bytes:
    return generic_events(c) + f"event: error\ndata: {c('error-message')}\n\n".encode()


CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Scenario:
    """One body on one route and the outcome otelsse must report for it."""

    path: str
    route: str
    body: Callable[[Canary], bytes]
    outcome: str
    status: int = 200
    content_type: str = "text/event-stream"
    #: Cut the connection just after this marker (inside its event).
    cut_after: str | None = None


SCENARIOS: dict[str, Scenario] = {
    "chat-complete": Scenario(CHAT_PATH, "openai.chat_completions", chat_complete, "complete"),
    "chat-provider-error": Scenario(
        CHAT_PATH, "openai.chat_completions", chat_provider_error, "provider_error"
    ),
    "chat-invalid-json": Scenario(
        CHAT_PATH, "openai.chat_completions", chat_invalid_json, "payload_error"
    ),
    "chat-truncated": Scenario(
        CHAT_PATH, "openai.chat_completions", chat_truncated, "truncated", cut_after="cut-event"
    ),
    "chat-html-502": Scenario(
        CHAT_PATH, "openai.chat_completions", html_page, "http_error", 502, "text/html"
    ),
    "responses-complete": Scenario(
        "/v1/responses", "openai.responses", responses_complete, "complete"
    ),
    "responses-failed": Scenario(
        "/v1/responses", "openai.responses", responses_failed, "provider_error"
    ),
    "anthropic-complete": Scenario(
        "/v1/messages", "anthropic.messages", anthropic_complete, "complete"
    ),
    "anthropic-error": Scenario(
        "/v1/messages", "anthropic.messages", anthropic_error, "provider_error"
    ),
    "gemini-complete": Scenario(
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
        "gemini.generate_content",
        gemini_complete,
        "complete",
    ),
    "gemini-error": Scenario(
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
        "gemini.generate_content",
        gemini_error,
        "provider_error",
    ),
    "generic-eof": Scenario("/v1/events", "generic", generic_events, "eof_unverified"),
    "generic-error": Scenario("/v1/events", "generic", generic_error, "provider_error"),
}


# --------------------------------------------------------------------------------------------
# The application: one request with markers, the body read as it arrives
# --------------------------------------------------------------------------------------------


def request_parts(c: Canary) -> tuple[dict[str, Any], dict[str, str], str]:
    """The request's JSON body, headers and query string, each seeded with markers."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": c("prompt")}]}
    headers = {
        "Authorization": f"Bearer {c('authorization')}",
        "x-api-key": c("api-key"),
        "X-Custom-Secret": c("request-header"),
    }
    return body, headers, f"key={c('query')}"


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def exchange(client: Client, url: str, body: Any, headers: dict[str, str]) -> Got:
    """One request with markers, its body read as it arrives in the client's default style.

    Only the client's own transport error (a cut connection) may end the read.
    """
    seen = fetch(client, url, json=body, headers=headers)
    assert seen.error is None or isinstance(seen.error, client.raises("transport").family), (
        seen.error
    )
    return seen


def serve(
    server: SSEServer, scenario: Scenario, c: Canary, request_id: str = "req-1"
) -> tuple[str, bytes, list[str]]:
    """Register ``scenario``'s reply (with marker headers).

    Returns its URL, its whole body and the markers planted in that body.
    """
    before = set(c.planted)
    body = scenario.body(c)
    body_markers = [marker for where, marker in c.planted.items() if where not in before]
    cut = None
    if scenario.cut_after is not None:
        marker = c.planted[scenario.cut_after]
        cut = body.index(marker.encode()) + len(marker)
    reply = Reply(
        body,
        scenario.status,
        "OK" if scenario.status == 200 else "Bad Gateway",
        scenario.content_type,
        framing="chunked" if scenario.status == 200 else "length",
        piece=64,  # several network reads per stream, some splitting a marker
        cut=cut,
        headers=(
            ("Set-Cookie", f"session={c('set-cookie')}; HttpOnly"),
            ("X-Custom-Reply", c("response-header")),
            ("x-request-id", request_id),
        ),
    )
    return server.route(scenario.path, reply), body, body_markers


# --------------------------------------------------------------------------------------------
# Capturing everything otelsse could have written
# --------------------------------------------------------------------------------------------


@pytest.fixture
def every_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of every logger at DEBUG, including loggers that do not propagate."""
    caplog.set_level(logging.DEBUG)
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and logger.level > logging.DEBUG:
            caplog.set_level(logging.DEBUG, logger=name)
    isolated = [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and not logger.propagate
    ]
    for logger in isolated:
        logger.addHandler(caplog.handler)
    # The HTTP stack's records as its loggers made them: LiteLLM, once another test imported it,
    # has put a filter on httpx's logger that redacts the URL's query (and the marker in it).
    lifted = {
        logging.getLogger(name): logging.getLogger(name).filters[:] for name in HTTP_STACK_LOGGERS
    }
    for logger, filters in lifted.items():
        for found in filters:
            logger.removeFilter(found)
    try:
        yield caplog
    finally:
        for logger in isolated:
            logger.removeHandler(caplog.handler)
        for logger, filters in lifted.items():
            for found in filters:
                logger.addFilter(found)


_FORMATTER = logging.Formatter("%(name)s %(levelname)s %(message)s")


def log_texts(records: list[logging.LogRecord], *, http_stack: bool = False) -> list[str]:
    """Each record formatted in full (message, args, exception and stack text).

    Only otelsse's side by default; ``http_stack=True`` gives the HTTP stack's records instead.
    """
    texts = []
    for record in records:
        if record.name.split(".")[0] in HTTP_STACK_LOGGERS and not http_stack:
            continue
        if record.name.split(".")[0] not in HTTP_STACK_LOGGERS and http_stack:
            continue
        texts.append(f"{_FORMATTER.format(record)} msg={record.msg!r} args={record.args!r}")
    return texts


@dataclass
class Capture:
    spans: list[str]
    metrics: str
    logs: list[str]
    output: str

    def leaks(self, c: Canary) -> list[str]:
        """Every captured text that contains a marker (or a part of one)."""
        texts = [*self.spans, self.metrics, *self.logs, self.output]
        return [text for text in texts if c.leaks(text)]


def capture(
    otel: Telemetry, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> Capture:
    metrics = otel.reader.get_metrics_data()
    out, err = capfd.readouterr()
    return Capture(
        [span.to_json() for span in otel.exporter.get_finished_spans()],
        metrics.to_json() if metrics is not None else "",
        log_texts(caplog.records),
        out + err,
    )


def assert_sent(received: Received, c: Canary) -> None:
    """The request markers really went out."""
    assert c.planted["query"] in received.target
    assert c.planted["prompt"].encode() in received.body
    assert received.headers["authorization"] == f"Bearer {c.planted['authorization']}"
    assert received.headers["x-api-key"] == c.planted["api-key"]
    assert received.headers["x-custom-secret"] == c.planted["request-header"]


def assert_received(seen: Got, body_markers: list[str], c: Canary) -> None:
    """The response markers really reached the application."""
    for marker in body_markers:
        assert marker.encode() in seen.data, marker
    assert c.planted["set-cookie"] in seen.headers["set-cookie"]
    assert seen.headers["x-custom-reply"] == c.planted["response-header"]


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_marker_reaches_spans_metrics_or_logs(
    name: str,
    client: Client,
    otel: Telemetry,
    every_log: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    scenario = SCENARIOS[name]
    c = Canary()
    request_body, request_headers, query = request_parts(c)
    with SSEServer() as server:
        url, _, body_markers = serve(server, scenario, c)
        seen = exchange(client, with_query(url, query), request_body, request_headers)
        received = server.received
    assert len(received) == 1
    assert_sent(received[0], c)
    assert_received(seen, body_markers, c)
    assert (seen.error is not None) == (scenario.cut_after is not None)

    span = otel.stream_span()
    attributes = dict(span.attributes or {})
    assert attributes[semconv.OUTCOME] == scenario.outcome
    assert attributes[semconv.ROUTE] == scenario.route
    assert attributes[semconv.REQUEST_ID] == "req-1"  # the one allow-listed header is kept
    assert otel.nonzero_outcomes() == {scenario.outcome: 1}
    assert otel.instrumentation_errors() == 0

    leaked = capture(otel, every_log, capfd).leaks(c)
    assert not leaked, leaked


@pytest.mark.parametrize("header", semconv.REQUEST_ID_HEADERS)
def test_a_request_id_is_recorded_without_non_printable_characters(
    header: str, client: Client, otel: Telemetry
) -> None:
    # Tab is legal inside a header value; NEL and NO-BREAK SPACE arrive as obs-text (latin-1).
    raw = "req-\t42\x85ab\xa0c"
    reply = Reply(chat_complete(Canary()), headers=((header, raw),))
    with SSEServer() as server:
        url = server.route(CHAT_PATH, reply)
        request_body, request_headers, _ = request_parts(Canary())
        seen = exchange(client, url, request_body, request_headers)
    assert seen.error is None
    recorded = dict(otel.stream_span().attributes or {})[semconv.REQUEST_ID]
    assert recorded == "req-42abc"


@pytest.mark.parametrize("point", list(CONTAINMENT_POINTS))
def test_a_contained_failure_does_not_leak_its_message(
    point: str,
    client: Client,
    otel: Telemetry,
    every_log: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exception's message is a marker; otelsse records and logs only its type."""
    owner, method, span_ends = CONTAINMENT_POINTS[point]
    c = Canary()
    message = c("exception-message")

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message) from ValueError(c("exception-cause"))

    request_body, request_headers, query = request_parts(c)
    with SSEServer() as server:
        url, body, _ = serve(server, SCENARIOS["chat-complete"], c)
        monkeypatch.setattr(owner, method, fail)
        seen = exchange(client, with_query(url, query), request_body, request_headers)
        monkeypatch.undo()
    assert seen.error is None
    assert seen.data == body  # the application is unaffected

    leaked = capture(otel, every_log, capfd).leaks(c)
    assert not leaked, leaked
    # The failure really happened and was contained where expected.
    assert otel.instrumentation_errors() == 1
    assert len(otel.spans()) == (1 if span_ends else 0)
    contained = [r.getMessage() for r in every_log.records if r.name == "otelsse"]
    assert contained
    assert all("RuntimeError" in text for text in contained), contained
    # ... and left the telemetry consistent: a stream that was counted active is no more.
    assert otel.active_streams() == 0


# aiohttp's own loggers never quote a URL: the HTTP stack's records have no marker to find.
@pytest.mark.parametrize("client", [c for c in CLIENTS if c.library != "aiohttp"], ids=str)
def test_the_search_would_see_a_marker(
    client: Client,
    otel: Telemetry,
    every_log: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The capture is not blind: the HTTP stack's own DEBUG/INFO records quote the URL with its
    query marker, an otelsse span carries the allow-listed request id, and a marker written to
    the telemetry by hand is found."""
    c = Canary()
    request_body, request_headers, query = request_parts(c)
    with SSEServer() as server:
        url, *_ = serve(server, SCENARIOS["chat-complete"], c, request_id=c("request-id"))
        exchange(client, with_query(url, query), request_body, request_headers)
    http_stack = log_texts(every_log.records, http_stack=True)
    assert any(c.planted["query"] in text for text in http_stack), http_stack

    found = capture(otel, every_log, capfd)
    assert found.spans
    assert found.metrics
    # The request id is recorded as sent (allow-listed), so the span search finds its marker.
    assert [text for text in found.leaks(c) if text in found.spans]
    logging.getLogger("otelsse").debug("%s", c("log"))
    assert capture(otel, every_log, capfd).leaks(c)
