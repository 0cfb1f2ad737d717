"""The real google-genai SDK streams the Gemini Interactions API from a real server, with and
without otelsse.

``google.genai.Client(api_key="test", http_options=HttpOptions(base_url=<SSEServer>))`` calls
``client.interactions.create(model=..., input=..., stream=True)`` (``client.aio.interactions``
when async; ``interactions.get(id, stream=True)`` for a stream resumed by its id), with retries
off (``HttpRetryOptions(attempts=1)``: by default the SDK retries 408, 409, 429 and 5xx with a
back-off). google-genai 3.6 posts to ``/v1/interactions`` with ``{"stream": true}`` and
``Accept: text/event-stream``, through its httpx2 client (httpx where httpx2 is not installed).
Each test runs the same application code in one server, first with otelsse not instrumented,
then instrumented against a real OpenTelemetry SDK (``tests/_otel.Telemetry``), and checks that
the application got the same events (``model_dump()``) and the same exception class either way,
and that there is exactly one ``otelsse.stream`` span, ended by the time the application left its
``with``, with the route, outcome and stop reason of ``tests/_fixtures.EXPECTED``.

What the SDK does with each ending (google-genai 3.6.1, ``_gaos/utils/eventstreaming.py`` and
``_interactions_continuation.py``), and what otelsse says:

- a completed interaction, or one that ``requires_action`` (the client runs the function calls):
  every event; ``complete``;
- an ``error`` event or a ``failed`` interaction: yielded like any event, nothing raised;
  ``provider_error``;
- a body cut inside an event (the connection closed in a chunk): ``APIConnectionError``;
  ``truncated``;
- a body that ends cleanly inside an event: nothing raised, and the SDK even yields the cut
  event's data as a string (it parses the unterminated block at EOF); ``truncated``;
- an HTTP error status: ``BadRequestError`` for a 400, ``RateLimitError`` for a 429, before any
  event; ``http_error``, ``rate_limited``;
- the application leaving its ``with`` early (the server holds the rest of the body):
  ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google import genai
from google.genai import types
from opentelemetry.trace import SpanKind, StatusCode

from otelsse import semconv
from otelsse._instrumentor import SSEInstrumentor
from tests._fixtures import EXPECTED, read_fixture
from tests._helpers import event_ends
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

#: Where google-genai posts an interaction: its default API version is ``v1`` from 3.0 (the
#: server answers both).
PATHS = ("/v1/interactions", "/v1beta/interactions")
MODEL = "gemini-2.5-flash"
TEXT = "real/gemini-interactions-text.sse"
REQUIRES_ACTION = "synthetic/gemini-interactions-function-call-requires-action.sse"
#: Every client's timeout (milliseconds): only bounds a test that is wrong.
TIMEOUT_MS = 10_000
SYNC_ASYNC = pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])


#: One TLS context for every client (the server is plain HTTP): without it, each client loads
#: the CA bundle three times (httpx, aiohttp, websockets), a third of a second.
TLS = ssl.create_default_context()


def client(root: str) -> genai.Client:
    options = types.HttpOptions(
        base_url=root,
        timeout=TIMEOUT_MS,
        retry_options=types.HttpRetryOptions(attempts=1),
        client_args={"verify": TLS},
        async_client_args={"verify": TLS, "ssl": TLS},  # the httpx, aiohttp and websockets key
    )
    return genai.Client(api_key="test", http_options=options)


def dump(item: Any) -> Any:
    """An event as the application sees it (a string where the SDK yields one)."""
    return item.model_dump() if hasattr(item, "model_dump") else item


@dataclass(frozen=True)
class Run:
    """What the application got: the events it kept, and the class of what was raised."""

    items: list[Any]
    error: type[BaseException] | None


Stop = Callable[[Any], bool]


def never(item: Any) -> bool:
    return False


def open_stream(sdk: Any, resume: str | None) -> Any:
    """Create an interaction as a stream, or (``resume``: its id) stream an existing one."""
    if resume is None:
        return sdk.interactions.create(model=MODEL, input="hi", stream=True)
    return sdk.interactions.get(resume, stream=True, last_event_id="evt_1")


def run(sdk: genai.Client, stop: Stop, resume: str | None, at_close: Callable[[], None]) -> Run:
    """Stream one interaction like an application: iterate, keep each event, leave the ``with``
    (which closes the stream) at ``stop(event)`` or at the end; ``at_close`` runs right after."""
    items: list[Any] = []
    try:
        with open_stream(sdk, resume) as stream:
            for item in stream:
                items.append(dump(item))
                if stop(item):
                    break
    except Exception as exc:
        return Run(items, type(exc))
    finally:
        at_close()
    return Run(items, None)


async def arun(sdk: Any, stop: Stop, resume: str | None, at_close: Callable[[], None]) -> Run:
    items: list[Any] = []
    try:
        async with await open_stream(sdk, resume) as stream:
            async for item in stream:
                items.append(dump(item))
                if stop(item):
                    break
    except Exception as exc:
        return Run(items, type(exc))
    finally:
        at_close()
    return Run(items, None)


@dataclass(frozen=True)
class Both:
    """The same application run without otelsse, then with it."""

    plain: Run
    observed: Run
    telemetry: Telemetry
    #: Ended ``otelsse.stream`` spans when the instrumented run had just left its ``with``.
    spans_at_close: int


@contextlib.contextmanager
def with_and_without(
    reply: Reply, is_async: bool, stop: Stop = never, resume: str | None = None
) -> Iterator[Both]:
    """Run the application not instrumented, then instrumented, with one SDK client made before
    otelsse was instrumented (as an application makes it at its start)."""
    telemetry = Telemetry()
    closed: list[int] = []

    def spans_now() -> None:
        closed.append(len(telemetry.spans()))

    async def both_async(sdk: Any) -> tuple[Run, Run]:
        plain = await arun(sdk, stop, resume, lambda: None)
        telemetry.install()
        observed = await arun(sdk, stop, resume, spans_now)
        await sdk.aclose()
        return plain, observed

    with SSEServer() as server, client(server.url("")) as sdk:
        for path in PATHS:
            server.route(path if resume is None else f"{path}/{resume}", reply)
        assert not SSEInstrumentor().is_instrumented_by_opentelemetry
        try:
            if is_async:
                plain, observed = asyncio.run(both_async(sdk.aio))
            else:
                plain = run(sdk, stop, resume, lambda: None)
                telemetry.install()
                observed = run(sdk, stop, resume, spans_now)
            yield Both(plain, observed, telemetry, closed[0])
        finally:
            telemetry.uninstall()


def recorded(
    both: Both, outcome: str, stop_reason: str | None, request_model: str | None = MODEL
) -> dict[str, Any]:
    """The one span's attributes, checked against the outcome and the route's declarations.
    ``request_model``: what the request's body names (a GET has none)."""
    telemetry = both.telemetry
    assert both.spans_at_close == 1  # ended by the application's close or EOF, not later
    span = telemetry.stream_span()
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert attributes[semconv.ROUTE] == "gemini.interactions"
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes.get(semconv.STOP_REASON) == stop_reason
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "gcp.gemini"
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes.get(semconv.GEN_AI_REQUEST_MODEL) == request_model
    failed = outcome in semconv.ERROR_OUTCOMES
    assert (span.status.status_code is StatusCode.ERROR) is failed
    assert telemetry.nonzero_outcomes() == {outcome: 1}
    assert telemetry.active_streams() == 0
    assert telemetry.instrumentation_errors() == 0
    return attributes


def fixture_reply(name: str, **reply: Any) -> Reply:
    return Reply(read_fixture(name), **reply)


# -- read to the end -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        TEXT,
        "real/gemini-interactions-thinking.sse",
        REQUIRES_ACTION,
        "synthetic/gemini-interactions-incomplete.sse",
        "synthetic/gemini-interactions-error-event.sse",
        "synthetic/gemini-interactions-failed.sse",
    ],
)
def test_read_to_the_end_the_application_gets_every_event(name: str) -> None:
    """The SDK raises on none of these endings, the error event and the failed interaction
    included: they are events the application reads."""
    expected = EXPECTED[name]
    with with_and_without(fixture_reply(name), is_async=False) as both:
        assert both.plain.error is None
        assert both.plain.items
        assert both.observed == both.plain
        attributes = recorded(both, expected.outcome, expected.stop_reason)
    assert attributes[semconv.GEN_AI_RESPONSE_MODEL] == MODEL
    assert attributes[semconv.GEN_AI_RESPONSE_ID].startswith("v1_")


@SYNC_ASYNC
def test_a_completed_interaction_is_complete(is_async: bool) -> None:
    body = read_fixture(TEXT)
    with with_and_without(Reply(body), is_async) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["event_type"] == "interaction.completed"
        assert both.observed == both.plain
        attributes = recorded(both, "complete", "completed")
    assert attributes[semconv.TERMINAL_SEEN] is True
    assert attributes[semconv.BYTES_RECEIVED] == len(body)  # the [DONE] after it read too
    assert (
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS],
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS],
    ) == (9, 13)


@SYNC_ASYNC
def test_requires_action_is_complete_with_its_function_call(is_async: bool) -> None:
    with with_and_without(fixture_reply(REQUIRES_ACTION), is_async) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["interaction"]["status"] == "requires_action"
        assert both.observed == both.plain
        attributes = recorded(both, "complete", "requires_action")
    assert attributes[semconv.TOOL_CALL_COUNT] == 1
    assert attributes.get(semconv.TOOL_CALL_INVALID_COUNT, 0) == 0


def test_a_stream_resumed_by_its_id_is_read_too() -> None:
    """``interactions.get(id, stream=True, last_event_id=...)``: ``GET
    /v1/interactions/{id}?last_event_id=...&stream=true``."""
    reply = fixture_reply(TEXT)
    with with_and_without(reply, False, resume="v1_abc") as both:
        assert both.plain.error is None
        assert both.observed == both.plain
        recorded(both, "complete", "completed", request_model=None)


def test_an_error_event_is_a_provider_error_the_sdk_does_not_raise() -> None:
    reply = fixture_reply("synthetic/gemini-interactions-error-event.sse")
    with with_and_without(reply, False) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["event_type"] == "error"
        assert both.observed == both.plain
        attributes = recorded(both, "provider_error", None)
    assert attributes[semconv.PROVIDER_ERROR_CODE] == "resource_exhausted"


# -- cut, refused, abandoned ---------------------------------------------------------------------


@SYNC_ASYNC
def test_a_body_cut_inside_an_event_raises_the_same_and_is_truncated(is_async: bool) -> None:
    body = read_fixture(REQUIRES_ACTION)
    cut = body.index(b'"arguments_delta"')  # inside the function call's first fragment
    with with_and_without(Reply(body, cut=cut), is_async) as both:
        assert both.plain.error is not None
        assert both.plain.error.__name__ == "APIConnectionError"
        assert both.plain.items
        assert both.observed == both.plain
        attributes = recorded(both, "truncated", None)
    assert attributes[semconv.TERMINAL_SEEN] is False


def test_a_body_that_ends_cleanly_inside_an_event_is_truncated_the_sdk_noticing_nothing() -> None:
    body = read_fixture(TEXT)
    cut = body.index(b"event: interaction.completed") + 60
    with with_and_without(Reply(body, cut=cut, framing="close"), False) as both:
        assert both.plain.error is None
        # The SDK parses the unterminated block at EOF: its half of a JSON text, as a string.
        assert isinstance(both.plain.items[-1], str)
        assert both.observed == both.plain
        attributes = recorded(both, "truncated", None)
    assert attributes[semconv.TERMINAL_SEEN] is False


@pytest.mark.parametrize(
    ("status", "sdk_error", "outcome"),
    [(400, "BadRequestError", "http_error"), (429, "RateLimitError", "rate_limited")],
)
def test_an_http_error_status_raises_the_same_before_any_event(
    status: int, sdk_error: str, outcome: str
) -> None:
    error = b'{"error": {"code": %d, "message": "refused", "status": "X"}}' % status
    reply = Reply(error, status, "Refused", "application/json", framing="length")
    with with_and_without(reply, False) as both:
        assert both.plain.error is not None
        assert both.plain.error.__name__ == sdk_error
        assert both.plain.items == []
        assert both.observed == both.plain
        attributes = recorded(both, outcome, None)
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status


@SYNC_ASYNC
def test_an_application_that_stops_early_is_cancelled(is_async: bool) -> None:
    body = read_fixture(TEXT)
    hold_at = event_ends(body)[len(event_ends(body)) // 2]  # the server holds the rest

    def first(item: Any) -> bool:
        return True

    with with_and_without(Reply(body, hold_at=hold_at), is_async, first) as both:
        assert both.plain.error is None
        assert len(both.plain.items) == 1
        assert both.observed == both.plain
        attributes = recorded(both, "cancelled", None)
    assert attributes[semconv.BYTES_RECEIVED] <= hold_at
