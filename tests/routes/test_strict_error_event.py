"""Each route's strict-mode error event (``Route.strict_error_event``): the last event the proxy
sends a client for a stream it refuses.

What it must be, checked here for every built-in route and host profile that declares one
(``DECLARES_NONE`` names the SSE routes that declare none, and why):

- one whole event (a blank line ends it) that names the code and the message it was given and
  carries nothing else of the stream;
- judged ``provider_error`` by the route itself, after any whole-event prefix of a real answer
  (the fake provider's, text and tool calls), and never a success terminal;
- raised on by the official Python SDKs in their own iteration loop, as their usual error for a
  provider's error in a stream (``openai.APIError`` for both OpenAI routes,
  ``anthropic.APIStatusError`` for Anthropic), served by a real server on 127.0.0.1. The Node SDK
  is driven through the proxy (``tests/proxy/test_strict.py``); no Gemini SDK is installed here.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from otelsse import Outcome
from otelsse._core.framing import SSEParser
from otelsse._demo.provider import DEFAULT_MODELS, Turn, request_for, script_events
from otelsse._monitor import StreamMonitor
from otelsse.routes import BUILT_IN, BUILT_IN_PROFILES, GenericRoute, Route
from tests._server import Reply, SSEServer

CODE = "otelsse_strict_truncated"
MESSAGE = "otelsse strict mode refused the stream: truncated"
#: SSE routes whose official SDKs raise on no error event of their contract: they declare none,
#: so strict mode cuts their refused streams (each route's module says why).
DECLARES_NONE = frozenset({"agui.run", "cohere.chat", "gemini.interactions", "mcp.streamable_http"})
#: The proxy fronts SSE routes only (a Bedrock request is signed for its own host: SigV4), and
#: each of them but ``DECLARES_NONE`` declares its error event.
EVERY_ROUTE = tuple(
    route
    for route in (*BUILT_IN, *BUILT_IN_PROFILES)
    if route.media_type == "text/event-stream" and route.name not in DECLARES_NONE
)
#: The contract each route speaks on the fake provider (a profile speaks its contract's).
SPOKEN = {route: route.name for route in EVERY_ROUTE if route.name in DEFAULT_MODELS}


def _event(route: type[Route]) -> bytes:
    event = route.strict_error_event(CODE, MESSAGE)
    assert event is not None, f"{route.full_name()} declares no error event"
    return event


def _answers(route: type[Route]) -> list[list[bytes]]:
    """Whole answers of the route's contract, as their events: text, and a tool call."""
    name = SPOKEN.get(route, "openai.chat_completions")  # generic reads any SSE
    model = DEFAULT_MODELS[name]
    return [
        script_events(name, Turn(model, scenario, 12, "req_strict"))
        for scenario in ("complete", "tool_call")
    ]


@pytest.mark.parametrize("route", EVERY_ROUTE, ids=lambda route: route.full_name())
def test_the_event_is_one_whole_event_with_the_code_and_message_only(route: type[Route]) -> None:
    event = _event(route)
    parser = SSEParser()
    (parsed,) = parser.feed(event)
    parser.close()
    assert not parser.discarded_event
    assert not parser.pending_line_chars
    assert event.endswith(b"\n\n")
    assert b"[DONE]" not in event
    payload = json.loads(parsed.data)
    strings = set(_strings(payload))
    assert MESSAGE in strings
    # Besides the code (or Gemini's reason, the code in upper case) and the message, only the
    # contract's own vocabulary: no word of the stream.
    assert strings - {MESSAGE, CODE, CODE.upper()} <= {
        "error",
        "server_error",
        "api_error",
        "INTERNAL",
        "otelsse",
        "type.googleapis.com/google.rpc.ErrorInfo",
        "2.0",  # JSON-RPC's version (A2A)
    }, strings


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


@pytest.mark.parametrize("route", EVERY_ROUTE, ids=lambda route: route.full_name())
def test_the_route_judges_it_a_provider_error_after_any_part_of_an_answer(
    route: type[Route],
) -> None:
    event = _event(route)
    checked = 0
    for events in _answers(route):
        # Every prefix short of the whole answer: where a cut or a fault can end a stream.
        for end in range(len(events)):
            monitor = StreamMonitor(route)
            monitor.feed(b"".join(events[:end]))
            monitor.feed(event)
            report = monitor.close()
            assert report.outcome is Outcome.PROVIDER_ERROR, (end, report)
            checked += 1
    assert checked > 5


@pytest.mark.parametrize("route", EVERY_ROUTE, ids=lambda route: route.full_name())
def test_the_event_alone_is_a_provider_error_too(route: type[Route]) -> None:
    monitor = StreamMonitor(route)
    monitor.feed(_event(route))
    assert monitor.close().outcome is Outcome.PROVIDER_ERROR


def test_a_route_that_declares_none_gets_none() -> None:
    class Bare(Route):
        name = "bare.strict"

    assert Bare.strict_error_event(CODE, MESSAGE) is None
    assert GenericRoute.strict_error_event(CODE, MESSAGE) is not None
    bedrock = [route for route in BUILT_IN if route.name.startswith("bedrock.")]
    assert len(bedrock) == 2
    assert all(route.strict_error_event(CODE, MESSAGE) is None for route in bedrock)
    none = [route for route in BUILT_IN if route.name in DECLARES_NONE]
    assert len(none) == len(DECLARES_NONE)
    assert all(route.strict_error_event(CODE, MESSAGE) is None for route in none)


# -- the official Python SDKs raise on it --------------------------------------------------------


def _half_then_the_event(server: SSEServer, route: str) -> tuple[str, list[bytes], dict[str, Any]]:
    """``server`` answering ``route``'s request with the first half of a whole answer's events,
    then the route's error event: its base URL, that half, and the request's body."""
    events = script_events(route, Turn(DEFAULT_MODELS[route], "complete", 12, "req_strict"))
    half = events[: len(events) // 2]
    path, body = request_for(route, DEFAULT_MODELS[route], tools=False)
    server.route(
        path, Reply(body=b"".join(half) + _event(_route(route)), framing="chunked", piece=97)
    )
    return server.url(""), half, body


@pytest.mark.parametrize("route", ["openai.chat_completions", "openai.responses"])
def test_the_openai_sdk_raises_its_api_error_in_its_loop(route: str) -> None:
    seen: list[Any] = []
    with SSEServer() as server:
        base, half, body = _half_then_the_event(server, route)
        with openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0) as client:
            chat = route == "openai.chat_completions"
            api: Any = client.chat.completions if chat else client.responses
            with pytest.raises(openai.APIError) as raised, api.create(**body) as stream:
                seen.extend(stream)
    assert not isinstance(raised.value, openai.APIConnectionError)
    assert raised.value.message == MESSAGE
    assert raised.value.code == CODE
    assert len(seen) == len(half)  # every event before it reached the application


def test_the_anthropic_sdk_raises_its_status_error_in_its_loop() -> None:
    route = "anthropic.messages"
    seen: list[str] = []
    with SSEServer() as server:
        base, _, body = _half_then_the_event(server, route)
        del body["stream"]
        with (
            anthropic.Anthropic(base_url=base, api_key="k", max_retries=0) as client,
            pytest.raises(anthropic.APIStatusError) as raised,
            client.messages.stream(**body) as stream,
        ):
            seen.extend(event.type for event in stream)
    assert MESSAGE in str(raised.value)
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": MESSAGE},
    }
    assert "content_block_delta" in seen


def _route(name: str) -> type[Route]:
    return next(route for route in BUILT_IN if route.name == name)
