"""The real cohere SDK streams Cohere v2 chat from a real server, with and without otelsse.

``cohere.ClientV2`` (and ``AsyncClientV2``) is pointed at ``SSEServer`` (tests/_server.py: raw
sockets on 127.0.0.1, the body written in pieces of 300 bytes, Nagle off) answering
``POST /v2/chat``, with ``api_key="test"``; the application calls ``chat_stream(...)`` and keeps
each event's ``model_dump()``, closing the stream (``contextlib.closing``/``aclosing``) when it
stops. The SDK sends through its own ``httpx`` client, which otelsse's httpx module observes.
Each test runs the same application not instrumented (the reference), then instrumented
against a real OpenTelemetry SDK (tests/_otel.Telemetry), and asserts the application got the
same events and the same exception, and one ``otelsse.stream`` span, ended by the time the
application's stream closed, with the outcome below.

What cohere 7.x's ``chat_stream`` does with each case (``src/cohere/v2/raw_client.py`` and its
vendored SSE reader ``src/cohere/core/http_sse/_api.py``), and otelsse's verdict:

- a whole stream: every event up to ``message-end`` (it stops at ``[DONE]``), no exception ->
  ``complete`` (or the fixture's own verdict: ``MAX_TOKENS`` is ``incomplete``);
- the provider's error in the stream (``message-end`` with ``finish_reason`` ``ERROR`` or
  ``TIMEOUT``): yielded like any other event, **no exception** -> ``provider_error``;
- a connection cut mid-event: ``httpx.RemoteProtocolError`` (the reader re-raises a transport
  error when it cannot reconnect, which ``chat_stream`` never asks it to) -> ``truncated``;
- a clean end mid-event (a ``Connection: close`` body that stops early): the partial event is
  dropped and the loop just ends, **no exception** -> ``truncated``;
- a body that ends after ``message-end`` without ``[DONE]``: no exception -> ``complete``;
- an error status: the SDK reads the JSON body and raises its error for the status
  (``InternalServerError`` for 500, ``TooManyRequestsError`` for 429, ``ApiError`` for a 502
  HTML page) before any event -> ``http_error`` / ``rate_limited``;
- the application closing the stream after its first event (the server holding the rest) ->
  ``cancelled``; closing it at ``message-end`` (the server holding ``[DONE]``) -> ``complete``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cohere
import httpx
import pytest
from cohere.core.api_error import ApiError
from opentelemetry.trace import SpanKind, StatusCode

from otelsse import semconv
from otelsse._instrumentor import SSEInstrumentor
from tests._fixtures import EXPECTED, read_fixture
from tests._helpers import event_ends
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

PATH = "/v2/chat"
TOOLS = "real/cohere-v2-chat-tool-call.sse"
TEXT = "real/cohere-v2-chat-text.sse"
MODEL = "command-a-03-2025"
MESSAGES = [{"role": "user", "content": "What time is it in Tokyo?"}]
DONE = b"data: [DONE]\n\n"
JSON = "application/json"
#: Every client's timeout: only bounds a test that is wrong; a passing test never reaches it.
TIMEOUT = 10.0
SYNC_ASYNC = pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])


@dataclass(frozen=True)
class Run:
    """What the application got: each event's ``model_dump()``, and the class it raised."""

    items: list[dict[str, Any]]
    error: type[BaseException] | None


Stop = Callable[[Any], bool]


def never(item: Any) -> bool:
    return False


def run(root: str, is_async: bool, stop: Stop = never) -> Run:
    """``chat_stream`` as an application calls it: iterate, keep the events, close the stream
    at ``stop(event)`` or at the end."""
    if is_async:
        return asyncio.run(_arun(root, stop))
    items: list[dict[str, Any]] = []
    with httpx.Client(timeout=TIMEOUT) as http:
        client = cohere.ClientV2(base_url=root, api_key="test", httpx_client=http)
        try:
            stream = client.chat_stream(model=MODEL, messages=MESSAGES)
            with contextlib.closing(stream):
                for item in stream:
                    items.append(item.model_dump())
                    if stop(item):
                        break
        except Exception as exc:
            return Run(items, type(exc))
    return Run(items, None)


async def _arun(root: str, stop: Stop) -> Run:
    items: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        client = cohere.AsyncClientV2(base_url=root, api_key="test", httpx_client=http)
        try:
            stream = client.chat_stream(model=MODEL, messages=MESSAGES)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    items.append(item.model_dump())
                    if stop(item):
                        break
        except Exception as exc:
            return Run(items, type(exc))
    return Run(items, None)


@dataclass(frozen=True)
class Both:
    plain: Run
    observed: Run
    telemetry: Telemetry


@contextlib.contextmanager
def with_and_without(reply: Reply, is_async: bool, stop: Stop = never) -> Iterator[Both]:
    """The application not instrumented, then instrumented, against a server sending ``reply``;
    the instrumented run's span has ended by the time ``run`` returns (the stream closed)."""
    with SSEServer() as server:
        server.route(PATH, reply)
        root = server.url("")
        assert not SSEInstrumentor().is_instrumented_by_opentelemetry
        plain = run(root, is_async, stop)
        telemetry = Telemetry().install()
        try:
            observed = run(root, is_async, stop)
            yield Both(plain, observed, telemetry)
        finally:
            telemetry.uninstall()


def recorded(both: Both, outcome: str) -> dict[str, Any]:
    """The one span's attributes, after checking what every Cohere stream span carries."""
    assert both.observed == both.plain
    span = both.telemetry.stream_span()
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes[semconv.ROUTE] == "cohere.chat"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "cohere"
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == MODEL  # read from the SDK's JSON body
    erroneous = outcome in semconv.ERROR_OUTCOMES
    assert (span.status.status_code is StatusCode.ERROR) is erroneous
    assert both.telemetry.nonzero_outcomes() == {outcome: 1}
    assert both.telemetry.active_streams() == 0
    assert both.telemetry.instrumentation_errors() == 0
    return attributes


def middle(body: bytes) -> int:
    """An event boundary halfway through ``body``: after the first event, before the end."""
    ends = event_ends(body)
    return ends[len(ends) // 2]


# -- whole streams ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture",
    [
        TOOLS,
        TEXT,
        pytest.param("synthetic/cohere-chat-max-tokens.sse", marks=pytest.mark.matrix),
        pytest.param("synthetic/cohere-chat-thinking.sse", marks=pytest.mark.matrix),
    ],
)
@SYNC_ASYNC
def test_a_whole_stream(fixture: str, is_async: bool) -> None:
    expected = EXPECTED[fixture]
    body = read_fixture(fixture)
    with with_and_without(Reply(body), is_async) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["type"] == "message-end"  # the SDK stops at [DONE]
        attributes = recorded(both, expected.outcome)
    assert attributes[semconv.STOP_REASON] == expected.stop_reason
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == (expected.stop_reason,)
    assert attributes[semconv.TERMINAL_SEEN] is True
    assert attributes[semconv.BYTES_RECEIVED] == len(body)
    message_start, message_end = both.plain.items[0], both.plain.items[-1]
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == message_start["id"]
    tokens = message_end["delta"]["usage"]["tokens"]  # not its billed_units
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == tokens["input_tokens"]
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == tokens["output_tokens"]


def test_the_tool_calls_are_counted_valid() -> None:
    with with_and_without(Reply(read_fixture(TOOLS)), False) as both:
        attributes = recorded(both, "complete")
        calls = both.telemetry.points(semconv.TOOL_CALLS.name)
    assert attributes[semconv.TOOL_CALL_COUNT] == 2
    assert sum(p.value for p in calls if p.attributes[semconv.TOOL_CALL_VALID]) == 2


@SYNC_ASYNC
def test_without_done_the_stream_is_whole_all_the_same(is_async: bool) -> None:
    """``[DONE]`` is optional: the SDK ends its loop at the end of the body as well."""
    body = read_fixture(TOOLS).removesuffix(DONE)
    with with_and_without(Reply(body), is_async) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["type"] == "message-end"
        attributes = recorded(both, "complete")
    assert attributes[semconv.TERMINAL_SEEN] is True


# -- the provider's error in the stream ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "reason"),
    [
        ("synthetic/cohere-chat-error.sse", "ERROR"),
        ("synthetic/cohere-chat-timeout.sse", "TIMEOUT"),
    ],
)
@SYNC_ASYNC
def test_an_error_in_the_stream_raises_nothing_and_is_a_provider_error(
    fixture: str, reason: str, is_async: bool
) -> None:
    with with_and_without(Reply(read_fixture(fixture)), is_async) as both:
        assert both.plain.error is None  # the SDK yields it like any other message-end
        assert both.plain.items[-1]["delta"]["finish_reason"] == reason
        attributes = recorded(both, "provider_error")
    assert attributes[semconv.STOP_REASON] == reason
    assert attributes[semconv.PROVIDER_ERROR_CODE] == reason
    assert attributes[semconv.ERROR_TYPE] == "provider_error"


# -- cut streams -----------------------------------------------------------------------------------


@SYNC_ASYNC
def test_a_connection_cut_mid_event_raises_the_same_and_is_truncated(is_async: bool) -> None:
    body = read_fixture(TOOLS)
    with with_and_without(Reply(body, cut=middle(body) + 20), is_async) as both:
        assert both.plain.error is httpx.RemoteProtocolError
        assert both.plain.items
        attributes = recorded(both, "truncated")
    assert attributes[semconv.TERMINAL_SEEN] is False


@SYNC_ASYNC
def test_a_clean_end_mid_event_raises_nothing_and_is_truncated(is_async: bool) -> None:
    """The SDK drops the partial event and ends its loop: only otelsse says the answer is cut."""
    body = read_fixture(TOOLS)
    reply = Reply(body, cut=middle(body) + 20, framing="close")
    with with_and_without(reply, is_async) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["type"] != "message-end"
        recorded(both, "truncated")


# -- error statuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "content_type", "body", "error", "outcome"),
    [
        (500, JSON, b'{"message":"internal"}', cohere.InternalServerError, "http_error"),
        (429, JSON, b'{"message":"slow down"}', cohere.TooManyRequestsError, "rate_limited"),
        (502, "text/html", b"<html>Bad Gateway</html>", ApiError, "http_error"),
    ],
)  # fmt: skip
@SYNC_ASYNC
def test_an_error_status_raises_the_sdks_error_and_is_judged_at_the_headers(
    status: int,
    content_type: str,
    body: bytes,
    error: type[Exception],
    outcome: str,
    is_async: bool,
) -> None:
    reply = Reply(body, status, "Error", content_type, framing="length")
    with with_and_without(reply, is_async) as both:
        assert both.plain.error is error
        assert both.plain.items == []
        attributes = recorded(both, outcome)
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status


# -- the application stops -------------------------------------------------------------------------


@SYNC_ASYNC
def test_closed_after_the_first_event_is_cancelled(is_async: bool) -> None:
    body = read_fixture(TOOLS)
    hold_at = middle(body)  # the server holds the rest: the end cannot have arrived
    with with_and_without(Reply(body, hold_at=hold_at), is_async, lambda item: True) as both:
        assert both.plain.error is None
        assert [item["type"] for item in both.plain.items] == ["message-start"]
        attributes = recorded(both, "cancelled")
    assert attributes[semconv.BYTES_RECEIVED] <= hold_at


@SYNC_ASYNC
def test_closed_at_message_end_is_complete(is_async: bool) -> None:
    """``message-end`` is the terminal: the ``[DONE]`` the server still holds adds nothing."""
    body = read_fixture(TOOLS)

    def at_end(item: Any) -> bool:
        return bool(item.type == "message-end")

    reply = Reply(body, hold_at=len(body) - len(DONE))
    with with_and_without(reply, is_async, at_end) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["type"] == "message-end"
        attributes = recorded(both, "complete")
    assert attributes[semconv.TERMINAL_SEEN] is True
    assert attributes[semconv.STOP_REASON] == "TOOL_CALL"
