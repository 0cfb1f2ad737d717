"""The enforcing reader against real HTTP servers on 127.0.0.1.

Every HTTP test starts ``SSEServer`` (tests/_server.py: raw sockets, one thread per connection)
and reads a recorded or synthetic fixture body through httpx, httpx2 or requests (sync, and httpx
and httpx2 async: the harness in tests/_clients.py), exactly as an application would. The server
writes the body in pieces of a few hundred bytes (Nagle off) so the client sees several network
reads, and it can misbehave on purpose: close the connection in the middle of the body, or stall.

Expected values are computed here from the fixture bytes with a small SSE/JSON reading of our
own, independent of otelsse, and cross-checked against literal values.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import requests
import trio
import urllib3

from otelsse._monitor import Outcome
from otelsse._reader import (
    AsyncStreamReader,
    StreamFault,
    StreamReader,
    StreamResult,
    TextDelta,
    ToolCallResult,
    aread_stream,
    read_stream,
)
from tests._clients import STALL_TIMEOUT, STREAMING, Client, astreaming, streaming
from tests._fixtures import FIXTURES
from tests._helpers import (
    ANTHROPIC,
    CHAT,
    GEMINI,
    RESPONSES,
    ROUTE_PATHS,
    event_ends,
    sse_events,
    waited,
)
from tests._server import Reply, SSEServer

#: Bound for waiting on a server-side event the client has already seen the effect of.
EVENT_WAIT = 10.0


@pytest.fixture
def client(sync_client: Client) -> Client:
    """Each library's sync client (httpx, httpx2, requests): the async ones have their own
    tests below, through the ``async_client`` fixture."""
    return sync_client


# --------------------------------------------------------------------------------------------
# Fixture bodies and what they should give, read without otelsse
# --------------------------------------------------------------------------------------------


def fixture(name: str) -> bytes:
    """The bytes of ``name`` (``real/`` first, then ``synthetic/``)."""
    for folder in ("real", "synthetic"):
        path = FIXTURES / folder / name
        if path.exists():
            return path.read_bytes()
    raise FileNotFoundError(f"no fixture {name} under {FIXTURES}")


def route_of(name: str) -> str:
    if name.startswith(("openai-chat", "vllm-chat", "groq-chat")):
        return CHAT
    if name.startswith("openai-responses"):
        return RESPONSES
    if name.startswith("anthropic"):
        return ANTHROPIC
    if name.startswith("gemini"):
        return GEMINI
    raise ValueError(name)


def payloads(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data in sse_events(body) if data != "[DONE]"]


@dataclass(frozen=True)
class Expected:
    text: str
    tool_calls: list[tuple[str | None, str, Any]]
    stop_reason: str | None


def expected(route: str, body: bytes) -> Expected:
    """Visible text, tool calls (arguments parsed) and stop reason, per the provider's docs."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    stop = None
    for p in payloads(body):
        if route == CHAT:
            for choice in p.get("choices") or []:
                delta = choice.get("delta") or {}
                text.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or []:
                    entry = calls.setdefault(call["index"], {"id": None, "name": None, "args": ""})
                    function = call.get("function") or {}
                    entry["id"] = call.get("id") or entry["id"]
                    entry["name"] = function.get("name") or entry["name"]
                    entry["args"] += function.get("arguments") or ""
                stop = choice.get("finish_reason") or stop
        elif route == RESPONSES:
            kind = p["type"]
            if kind == "response.output_text.delta":
                text.append(p["delta"])
            elif kind == "response.output_item.added" and p["item"]["type"] == "function_call":
                item = p["item"]
                calls[p["output_index"]] = {"id": item["call_id"], "name": item["name"], "args": ""}
            elif kind == "response.function_call_arguments.delta":
                calls[p["output_index"]]["args"] += p["delta"]
            elif kind == "response.completed":
                stop = p["response"]["status"]
        elif route == ANTHROPIC:
            kind = p["type"]
            if kind == "content_block_start" and p["content_block"]["type"] == "tool_use":
                block = p["content_block"]
                calls[p["index"]] = {"id": block["id"], "name": block["name"], "args": ""}
            elif kind == "content_block_delta" and p["delta"]["type"] == "text_delta":
                text.append(p["delta"]["text"])
            elif kind == "content_block_delta" and p["delta"]["type"] == "input_json_delta":
                calls[p["index"]]["args"] += p["delta"]["partial_json"]
            elif kind == "message_delta":
                stop = p["delta"]["stop_reason"]
        else:  # Gemini: whole parts, function calls arrive complete
            for candidate in p.get("candidates") or []:
                for part in (candidate.get("content") or {}).get("parts") or []:
                    if "text" in part and not part.get("thought"):
                        text.append(part["text"])
                    if "functionCall" in part:
                        call = part["functionCall"]
                        calls[len(calls)] = {
                            "id": call.get("id"),
                            "name": call["name"],
                            "args": json.dumps(call.get("args", {})),
                        }
                stop = candidate.get("finishReason") or stop
    tool_calls = [
        (calls[k]["id"], calls[k]["name"], json.loads(calls[k]["args"])) for k in sorted(calls)
    ]
    return Expected("".join(text), tool_calls, stop)


#: Keys whose string values are model output or provider messages: never to appear in a fault.
CONTENT_KEYS = {"content", "text", "arguments", "partial_json", "delta", "message", "refusal"}
CONTENT_OBJECTS = {"args", "input"}


def content_strings(body: bytes) -> list[str]:
    """Every piece of content in ``body``, including the concatenation of all of them."""
    found: list[str] = []

    def walk(value: Any, key: str | None, inside: bool) -> None:
        if isinstance(value, str):
            if inside or key in CONTENT_KEYS:
                found.append(value)
        elif isinstance(value, dict):
            if key in CONTENT_OBJECTS and value:
                found.append(json.dumps(value))
            for k, v in value.items():
                walk(v, k, inside or key in CONTENT_OBJECTS)
        elif isinstance(value, list):
            for v in value:
                walk(v, key, inside)

    for _, data in sse_events(body):
        try:
            walk(json.loads(data), None, False)
        except json.JSONDecodeError:
            if data != "[DONE]":
                found.append(data)
    return [*found, "".join(found)]


def assert_no_content(fault: StreamFault, body: bytes, *, text: str | None = None) -> None:
    """No 8-character piece of the stream's content (or shorter content, whole) is in the message.

    The route name, the stop reason and the code may appear (they are metadata, and a provider
    message such as "failed to generate a response" would otherwise match "openai.responses").
    """
    message = str(fault) if text is None else text
    report = fault.report
    for metadata in (fault.code, report and report.route, report and report.stop_reason):
        if metadata:
            message = message.replace(metadata, "")
    pieces = [piece for piece in content_strings(body) if len(piece) >= 5]
    assert pieces, "the fixture has no content to look for"
    for piece in pieces:
        size = min(8, len(piece))  # short pieces ("Hello..") are looked for whole
        for start in range(len(piece) - size + 1):
            window = piece[start : start + size]
            assert window not in message, f"fault message quotes content {window!r}"


def drain(reader: StreamReader, sink: list[TextDelta]) -> None:
    """Iterate ``reader`` into ``sink`` (the deltas stay in ``sink`` when iteration raises)."""
    for delta in reader:
        sink.append(delta)


async def adrain(reader: AsyncStreamReader, sink: list[TextDelta]) -> None:
    async for delta in reader:
        sink.append(delta)


def calls_of(result: StreamResult) -> list[tuple[str | None, str | None, Any]]:
    return [(call.id, call.name, call.arguments) for call in result.tool_calls]


# --------------------------------------------------------------------------------------------
# Servers and clients
# --------------------------------------------------------------------------------------------


def serve(server: SSEServer, name: str, path: str | None = None, **reply: Any) -> str:
    """Serve fixture ``name`` on its route's path (or ``path``); return the URL."""
    return server.route(path or ROUTE_PATHS[route_of(name)], Reply(fixture(name), **reply))


def read_over_http(server: SSEServer, client: Client, name: str, **kwargs: Any) -> StreamResult:
    url = serve(server, name)
    with streaming(client, url) as response:
        return read_stream(response, **kwargs)


def fault_over_http(server: SSEServer, client: Client, name: str, **kwargs: Any) -> StreamFault:
    url = serve(server, name)
    with streaming(client, url) as response, pytest.raises(StreamFault) as caught:
        read_stream(response, **kwargs)
    return caught.value


# --------------------------------------------------------------------------------------------
# Complete streams, one per route
# --------------------------------------------------------------------------------------------

ANTHROPIC_TEXT = (
    "Certainly! I can help you with that information. To get the weather and current time in "
    "San Francisco, I'll need to use two separate functions. Let me fetch that data for you."
)

#: name -> (text, tool calls, stop reason), as read off the fixture files by eye.
COMPLETE = {
    "openai-chat-text.sse": ("Four plus five is nine.", [], "stop"),
    "openai-chat-parallel-tool-calls.sse": (
        "",
        [
            ("call_fHCjJqt9Pysde6vcJcvbXGBx", "get_current_weather", {"location": "Seattle, WA"}),
            (
                "call_3J9foSw3CUb48lrqIXoTky6U",
                "get_current_weather",
                {"location": "San Francisco, CA"},
            ),
        ],
        "tool_calls",
    ),
    "openai-responses-function-call.sse": (
        "",
        [("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", {"country": "France"})],
        "completed",
    ),
    "openai-responses-reasoning-function-call-text.sse": (
        "I’ll check the capital lookup tool for “PotatoLand.”",
        [("call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", {"country": "PotatoLand"})],
        "completed",
    ),
    "anthropic-text-and-two-tool-use.sse": (
        ANTHROPIC_TEXT,
        [
            (
                "toolu_014x5X91kx3fvdhpLvwXZWE2",
                "get_weather",
                {"location": "San Francisco, CA", "unit": "celsius"},
            ),
            ("toolu_0121kXsENLvoDZ72LCuAnCCz", "get_time", {"timezone": "America/Los_Angeles"}),
        ],
        "tool_use",
    ),
    "anthropic-text.sse": ("Four plus five equals nine.", [], "end_turn"),
    "gemini-function-call.sse": ("", [(None, "get_country", {})], "STOP"),
    "gemini-text.sse": ("The capital of France is Paris.\n", [], "STOP"),
}


@pytest.mark.parametrize("name", list(COMPLETE))
def test_expected_values_agree_with_an_independent_reading_of_the_fixture(name: str) -> None:
    text, tool_calls, stop = COMPLETE[name]
    assert expected(route_of(name), fixture(name)) == Expected(text, tool_calls, stop)


@pytest.mark.parametrize("name", list(COMPLETE))
def test_a_complete_stream_is_released_with_its_text_and_tool_calls(
    server: SSEServer, client: Client, name: str
) -> None:
    body, route = fixture(name), route_of(name)
    want = expected(route, body)

    result = read_over_http(server, client, name)

    assert result.text == want.text == COMPLETE[name][0]
    assert calls_of(result) == want.tool_calls == COMPLETE[name][1]
    assert all(isinstance(call, ToolCallResult) for call in result.tool_calls)
    assert all(isinstance(call.arguments, dict) for call in result.tool_calls)
    assert result.stop_reason == want.stop_reason == COMPLETE[name][2]
    assert result.report.outcome is Outcome.COMPLETE
    assert result.report.outcome == "complete"
    assert result.report.route == route  # detected from the request URL
    assert result.report.terminal_seen is True
    assert result.report.bytes_received == len(body)
    assert result.report.chunk_count >= 1
    assert [(r.method, r.target) for r in server.received] == [("POST", ROUTE_PATHS[route])]
    assert json.loads(server.received[0].body) == STREAMING


def test_usage_and_model_come_through_in_the_report(server: SSEServer, client: Client) -> None:
    result = read_over_http(server, client, "anthropic-text-and-two-tool-use.sse")
    assert (result.input_tokens, result.output_tokens) == (506, 153)
    assert result.report.response_model == "claude-3-5-sonnet-20240620"
    assert result.report.response_id == "msg_0138UNF3YbNp49KkqZtUBWqz"
    assert result.report.tool_call_count == 2


@pytest.mark.parametrize("piece", [1, 5])
def test_multibyte_text_split_across_tiny_network_writes_is_reassembled(
    server: SSEServer, client: Client, piece: int
) -> None:
    name = "openai-responses-reasoning-function-call-text.sse"
    url = serve(server, name, piece=piece)
    with streaming(client, url) as response:
        result = read_stream(response)
    assert result.text == "I’ll check the capital lookup tool for “PotatoLand.”"
    assert result.report.decode_error_count == 0
    assert result.report.outcome is Outcome.COMPLETE


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_every_body_framing_gives_the_same_result(
    server: SSEServer, client: Client, framing: str
) -> None:
    url = serve(server, "openai-chat-parallel-tool-calls.sse", framing=framing)
    with streaming(client, url) as response:
        result = read_stream(response)
    assert calls_of(result) == COMPLETE["openai-chat-parallel-tool-calls.sse"][1]
    assert result.report.outcome is Outcome.COMPLETE


def test_an_unknown_path_falls_back_to_sniffing_the_contract(
    server: SSEServer, client: Client
) -> None:
    url = serve(server, "anthropic-text.sse", path="/proxy/stream")
    with streaming(client, url) as response:
        result = read_stream(response)
    assert result.report.route == ANTHROPIC
    assert result.text == "Four plus five equals nine."


def test_an_explicit_route_wins_over_detection(server: SSEServer, client: Client) -> None:
    # An Anthropic body on a chat-completions path: the route given by the caller is used.
    url = serve(server, "anthropic-text.sse", path=ROUTE_PATHS[CHAT])
    with streaming(client, url) as response:
        result = read_stream(response, ANTHROPIC)
    assert result.report.route == ANTHROPIC
    assert result.text == "Four plus five equals nine."


# --------------------------------------------------------------------------------------------
# Refused streams: truncated, provider error, incomplete
# --------------------------------------------------------------------------------------------

REFUSED = [
    ("openai-chat-truncated-mid-tool-call.sse", "truncated"),
    ("openai-responses-function-call-truncated.sse", "truncated"),
    ("anthropic-error-overloaded-midstream.sse", "provider_error"),
    ("openai-responses-failed.sse", "provider_error"),
    ("openai-responses-error-event.sse", "provider_error"),
    ("openai-chat-error-object-then-done.sse", "provider_error"),
    ("gemini-midstream-error.sse", "provider_error"),
    ("groq-chat-error-event.sse", "provider_error"),
    ("anthropic-refusal.sse", "incomplete"),
    ("anthropic-pause-turn.sse", "incomplete"),
    ("openai-chat-finish-content-filter.sse", "incomplete"),
    ("openai-responses-incomplete-max-output-tokens.sse", "incomplete"),
    ("gemini-finish-max-tokens.sse", "incomplete"),
    ("vllm-chat-finish-length.sse", "incomplete"),
]


@pytest.mark.parametrize(("name", "code"), REFUSED)
def test_a_refused_stream_raises_a_fault_with_a_stable_code_and_no_content(
    server: SSEServer, client: Client, name: str, code: str
) -> None:
    fault = fault_over_http(server, client, name)

    assert fault.code == code
    assert fault.report is not None
    assert fault.report.outcome.value == code
    assert fault.report.route == route_of(name)
    assert fault.report.bytes_received == len(fixture(name))
    assert fault.__cause__ is None  # the body ended cleanly: the stream itself is at fault
    assert_no_content(fault, fixture(name))
    assert_no_content(fault, fixture(name), text=repr(fault))


def test_incomplete_reports_the_stop_reason(server: SSEServer, client: Client) -> None:
    fault = fault_over_http(server, client, "openai-responses-incomplete-max-output-tokens.sse")
    assert fault.code == "incomplete"
    assert fault.report is not None
    assert fault.report.stop_reason == "max_output_tokens"
    assert fault.report.terminal_seen is True


# --------------------------------------------------------------------------------------------
# accept_stop_reasons
# --------------------------------------------------------------------------------------------


def test_accepting_max_tokens_still_refuses_unparseable_tool_arguments(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-max-tokens-truncated-tool-input.sse"
    fault = fault_over_http(server, client, name, accept_stop_reasons={"max_tokens"})
    assert fault.code == "payload_error"
    assert fault.report is not None
    assert fault.report.outcome is Outcome.INCOMPLETE
    assert fault.report.stop_reason == "max_tokens"
    assert fault.report.tool_call_invalid_count == 1
    assert_no_content(fault, fixture(name))


def test_accepting_length_releases_a_cut_off_text(server: SSEServer, client: Client) -> None:
    name = "vllm-chat-finish-length.sse"
    result = read_over_http(server, client, name, accept_stop_reasons=["length"])
    want = expected(CHAT, fixture(name))
    assert result.text == want.text == "<|im_end|>doctor\n<|im_end|>supervisor\n<"
    assert result.stop_reason == "length"
    assert result.report.outcome is Outcome.INCOMPLETE
    assert result.tool_calls == ()


def test_a_stop_reason_outside_the_accepted_set_is_refused(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    fault = fault_over_http(server, client, name, accept_stop_reasons={"end_turn"})
    assert fault.code == "unaccepted_stop"
    assert fault.report is not None
    assert fault.report.outcome is Outcome.COMPLETE
    assert fault.report.stop_reason == "tool_use"
    assert_no_content(fault, fixture(name))


def test_accepting_the_actual_stop_reason_releases_the_stream(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    result = read_over_http(server, client, name, accept_stop_reasons={"end_turn", "tool_use"})
    assert result.text == ANTHROPIC_TEXT
    assert len(result.tool_calls) == 2


# --------------------------------------------------------------------------------------------
# Tool schemas
# --------------------------------------------------------------------------------------------

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
    "additionalProperties": False,
}
TIME_SCHEMA = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
}


def test_arguments_that_match_an_anthropic_tools_list_are_released(
    server: SSEServer, client: Client
) -> None:
    tools = [
        {"name": "get_weather", "description": "w", "input_schema": WEATHER_SCHEMA},
        {"name": "get_time", "description": "t", "input_schema": TIME_SCHEMA},
    ]
    result = read_over_http(server, client, "anthropic-text-and-two-tool-use.sse", tools=tools)
    assert calls_of(result) == COMPLETE["anthropic-text-and-two-tool-use.sse"][1]


def test_arguments_that_match_an_openai_tools_list_are_released(
    server: SSEServer, client: Client
) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "get_current_weather", "parameters": WEATHER_SCHEMA},
        }
    ]
    result = read_over_http(server, client, "openai-chat-parallel-tool-calls.sse", tools=tools)
    assert calls_of(result) == COMPLETE["openai-chat-parallel-tool-calls.sse"][1]


def test_a_responses_style_tools_list_and_a_plain_mapping_are_accepted(
    server: SSEServer, client: Client
) -> None:
    name = "openai-responses-function-call.sse"
    schema = {
        "type": "object",
        "properties": {"country": {"type": "string", "minLength": 2}},
        "required": ["country"],
    }
    flat = [{"type": "function", "name": "get_capital", "parameters": schema}]
    assert calls_of(read_over_http(server, client, name, tools=flat)) == COMPLETE[name][1]
    mapping = {"get_capital": schema}
    assert calls_of(read_over_http(server, client, name, tools=mapping)) == COMPLETE[name][1]


@pytest.mark.parametrize("style", ["anthropic", "openai", "mapping"])
def test_arguments_that_break_the_schema_are_refused_without_quoting_them(
    server: SSEServer, client: Client, style: str
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    strict_time = {
        "type": "object",
        "properties": {"timezone": {"type": "string", "enum": ["Europe/Paris"]}},
        "required": ["timezone"],
    }
    tools: Any
    if style == "anthropic":
        tools = [
            {"name": "get_weather", "input_schema": WEATHER_SCHEMA},
            {"name": "get_time", "input_schema": strict_time},
        ]
    elif style == "openai":
        tools = [
            {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
            {"type": "function", "function": {"name": "get_time", "parameters": strict_time}},
        ]
    else:
        tools = {"get_weather": WEATHER_SCHEMA, "get_time": strict_time}

    fault = fault_over_http(server, client, name, tools=tools)

    assert fault.code == "tool_schema_error"
    assert fault.report is not None
    assert fault.report.outcome is Outcome.COMPLETE
    message = str(fault)
    assert "enum" in message
    for value in ("America/Los_Angeles", "Los_Angeles", "Europe/Paris", "San Francisco"):
        assert value not in message
    assert_no_content(fault, fixture(name))


def test_a_registered_tool_without_a_schema_is_not_checked(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    tools = {"get_weather": None, "get_time": TIME_SCHEMA}  # get_weather: registered, no schema
    result = read_over_http(server, client, name, tools=tools)
    assert [call.name for call in result.tool_calls] == ["get_weather", "get_time"]


@pytest.mark.parametrize(
    "tools",
    [
        {"get_time": TIME_SCHEMA},
        [{"name": "get_time", "input_schema": TIME_SCHEMA}],
        [{"type": "function", "function": {"name": "get_time", "parameters": TIME_SCHEMA}}],
        [{"type": "function", "name": "get_time"}],  # Responses style, no parameters
        {},
    ],
    ids=["mapping", "anthropic", "openai-chat", "responses-no-schema", "none-registered"],
)
def test_a_call_to_a_tool_that_was_never_registered_is_refused(
    server: SSEServer, client: Client, tools: Any
) -> None:
    fault = fault_over_http(server, client, "anthropic-text-and-two-tool-use.sse", tools=tools)
    assert fault.code == "unregistered_tool"
    assert "get_weather" not in str(fault)  # a name the model chose is its output, not logged


# --------------------------------------------------------------------------------------------
# HTTP checks before the body is read
# --------------------------------------------------------------------------------------------

BAD_RESPONSES = {
    "502-html": Reply(
        b"<html><body><h1>502 Bad Gateway</h1>upstream secret-backend-7 failed</body></html>",
        status=502,
        reason="Bad Gateway",
        content_type="text/html",
        framing="length",
    ),
    "429-json": Reply(
        b'{"error":{"message":"Rate limit reached for organisation org-secret","type":"rate"}}',
        status=429,
        reason="Too Many Requests",
        content_type="application/json",
        framing="length",
        headers=(("retry-after", "7"),),
    ),
    "200-json": Reply(
        b'{"choices":[{"message":{"content":"Four plus five is nine."}}]}',
        content_type="application/json",
        framing="length",
    ),
    "200-no-content-type": Reply(fixture("openai-chat-text.sse"), content_type=None),
    "500-event-stream": Reply(
        fixture("openai-chat-text.sse"), status=500, reason="Internal Server Error"
    ),
}
#: What each answer is: the server saying no in HTTP's words, or a 2xx that is no stream.
BAD_RESPONSE_CODES = {
    "502-html": "http_error",
    "429-json": "rate_limited",
    "200-json": "protocol_error",
    "200-no-content-type": "protocol_error",
    "500-event-stream": "http_error",
}


@pytest.mark.parametrize("case", list(BAD_RESPONSES))
@pytest.mark.parametrize("entry", ["reader", "read_stream"])
def test_a_bad_status_or_media_type_is_refused_before_the_body(
    server: SSEServer, client: Client, case: str, entry: str
) -> None:
    reply = BAD_RESPONSES[case]
    url = server.route(ROUTE_PATHS[CHAT], reply)
    refuse = StreamReader if entry == "reader" else read_stream
    with streaming(client, url) as response, pytest.raises(StreamFault) as caught:
        refuse(response)
    fault = caught.value
    assert fault.code == BAD_RESPONSE_CODES[case]
    assert fault.report is None
    assert fault.retry_after == (7.0 if case == "429-json" else None)
    for secret in (b"secret", b"Four plus five", b"Bad Gateway", b"Rate limit"):
        assert secret.decode() not in str(fault)


@pytest.mark.parametrize(
    "content_type", ["text/event-stream; charset=utf-8", "Text/Event-Stream ;charset=UTF-8"]
)
def test_media_type_parameters_and_case_are_accepted(
    server: SSEServer, client: Client, content_type: str
) -> None:
    url = serve(server, "openai-chat-text.sse", content_type=content_type)
    with streaming(client, url) as response:
        result = read_stream(response)
    assert result.text == "Four plus five is nine."
    assert result.report.route == CHAT


@pytest.mark.parametrize("case", ["502-html", "429-json", "200-json"])
def test_async_reader_refuses_a_bad_response_before_the_body(
    server: SSEServer, async_client: Client, case: str
) -> None:
    url = server.route(ROUTE_PATHS[ANTHROPIC], BAD_RESPONSES[case])

    async def main() -> StreamFault:
        async with astreaming(async_client, url) as response:
            with pytest.raises(StreamFault) as caught:
                AsyncStreamReader(response)
            return caught.value

    fault = asyncio.run(main())
    assert fault.code == BAD_RESPONSE_CODES[case]
    assert fault.report is None


# --------------------------------------------------------------------------------------------
# Transport failures
# --------------------------------------------------------------------------------------------


def half(body: bytes, piece: int) -> int:
    """A cut in the middle of ``body`` on a piece boundary."""
    return (len(body) // 2 // piece) * piece


@pytest.mark.parametrize("variant", ["between-chunks", "inside-chunk", "short-content-length"])
@pytest.mark.parametrize(
    "name", ["openai-chat-parallel-tool-calls.sse", "anthropic-text-and-two-tool-use.sse"]
)
def test_a_connection_dropped_mid_body_is_truncated_and_chained_to_the_client_error(
    server: SSEServer, client: Client, variant: str, name: str
) -> None:
    body, piece = fixture(name), 300
    cut = half(body, piece)
    if variant == "between-chunks":
        reply = {"framing": "chunked", "cut": cut}
    elif variant == "inside-chunk":
        reply = {"framing": "chunked", "cut": cut + 100, "cut_inside_chunk": True}
    else:
        reply = {"framing": "length", "cut": cut + 100}
    url = serve(server, name, piece=piece, **reply)

    with streaming(client, url) as response, pytest.raises(StreamFault) as caught:
        read_stream(response)

    fault = caught.value
    assert fault.code == "truncated"
    assert isinstance(fault.__cause__, client.raises("transport").source)
    assert fault.report is not None
    assert fault.report.error == "transport"
    assert fault.report.terminal_seen is False
    # requests delivers nothing of a Content-Length body that ends early (urllib3 reads it whole)
    assert fault.report.bytes_received <= reply["cut"]
    assert waited(server.cut_closed.wait, EVENT_WAIT)  # the server did close the connection early
    assert_no_content(fault, body)


@pytest.mark.parametrize("at_event_boundary", [True, False])
def test_a_connection_close_body_that_ends_early_is_a_clean_eof_but_truncated(
    server: SSEServer, client: Client, at_event_boundary: bool
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    body = fixture(name)
    boundaries = event_ends(body)
    cut = boundaries[len(boundaries) // 2] if at_event_boundary else half(body, 300) + 17
    url = serve(server, name, framing="close", cut=cut)

    with streaming(client, url) as response, pytest.raises(StreamFault) as caught:
        read_stream(response)

    fault = caught.value
    assert fault.code == "truncated"
    assert fault.__cause__ is None
    assert fault.report is not None
    assert fault.report.error is None
    assert fault.report.bytes_received == cut
    assert fault.report.terminal_seen is False


# --------------------------------------------------------------------------------------------
# Read timeouts
# --------------------------------------------------------------------------------------------


def stall_cut(body: bytes, events: int) -> int:
    """The offset after the first ``events`` events."""
    return event_ends(body)[events - 1]


@pytest.mark.e2e  # waits out a read timeout per client
def test_a_stalled_stream_times_out_after_the_text_it_did_deliver(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    body = fixture(name)
    cut = stall_cut(body, 8)  # message_start, content_block_start, ping, five text deltas
    url = serve(server, name, cut=cut, after_cut="stall")
    deltas: list[TextDelta] = []

    with (
        streaming(client, url, read_timeout=STALL_TIMEOUT) as response,
        pytest.raises(StreamFault) as caught,
    ):
        drain(StreamReader(response), deltas)

    fault = caught.value
    assert waited(server.stalled.wait, EVENT_WAIT)
    assert fault.code == "timeout"
    assert fault.report is not None
    assert fault.report.outcome is Outcome.TIMEOUT
    assert fault.report.error == "timeout"
    assert fault.report.bytes_received == cut
    assert fault.__cause__ is not None
    assert "".join(d.text for d in deltas) == expected(ANTHROPIC, body[:cut]).text
    assert "".join(d.text for d in deltas) == (
        "Certainly! I can help you with that information."
        " To get the weather and current time in San"
    )


@pytest.mark.e2e  # waits out a read timeout per client
def test_a_timeout_is_chained_to_the_clients_read_timeout(
    server: SSEServer, client: Client
) -> None:
    """httpx's ``ReadTimeout``; for requests urllib3's ``ReadTimeoutError`` (the reader reads a
    requests body through urllib3): a timeout either way."""
    name = "openai-chat-text.sse"
    url = serve(server, name, cut=stall_cut(fixture(name), 3), after_cut="stall")
    with (
        streaming(client, url, read_timeout=STALL_TIMEOUT) as response,
        pytest.raises(StreamFault) as caught,
    ):
        read_stream(response)
    assert isinstance(caught.value.__cause__, client.raises("timeout").source)
    assert caught.value.code == "timeout"


def test_a_timeout_wrapped_in_a_connection_error_is_still_a_timeout() -> None:
    """``iter_content`` wraps urllib3's ReadTimeoutError in ``requests.ConnectionError``.

    An application that hands the reader ``response.iter_content()`` gets that wrapper; the
    fault must still say ``timeout``: the connection was not lost, the deadline fired.
    """
    body = fixture("openai-chat-text.sse")
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]
    wrapped = requests.exceptions.ConnectionError(timeout)

    def chunks() -> Iterator[bytes]:
        yield body[:200]
        raise wrapped

    with pytest.raises(StreamFault) as caught:
        read_stream(chunks(), "openai.chat_completions")
    assert caught.value.__cause__ is wrapped
    assert caught.value.code == "timeout"


# --------------------------------------------------------------------------------------------
# Incremental reading
# --------------------------------------------------------------------------------------------

INCREMENTAL = ["anthropic-text-and-two-tool-use.sse", "openai-chat-text.sse", "gemini-text.sse"]


@pytest.mark.parametrize("name", INCREMENTAL)
def test_iterating_yields_provisional_deltas_that_add_up_to_the_result(
    server: SSEServer, client: Client, name: str
) -> None:
    url = serve(server, name, piece=64)
    with streaming(client, url) as response:
        reader = StreamReader(response)
        deltas = list(reader)
        result = reader.result()

    assert deltas, "the stream has text"
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert all(d.provisional is True and d.reasoning is False for d in deltas)
    assert "".join(d.text for d in deltas) == result.text == COMPLETE[name][0]
    assert {d.key for d in deltas} == set(result.texts)
    assert reader.result() is result  # judged once
    assert result.report.chunk_count > 1  # the text really arrived in several reads


@pytest.mark.parametrize("framing", ["chunked", "close", "length"])
def test_deltas_arrive_while_the_rest_of_the_body_is_still_held_back(
    server: SSEServer, client: Client, framing: str
) -> None:
    """The first delta is yielded before the server sends the rest: the reader streams.

    The server holds the body after the first text event until the test releases it, which it
    does only once that delta has come out of the reader. A reader that waited for the whole body
    would block until the client's read timeout (bounded) and fail.
    """
    name = "anthropic-text-and-two-tool-use.sse"
    hold = stall_cut(fixture(name), 4)  # message_start, content_block_start, ping, one delta
    url = serve(server, name, framing=framing, hold_at=hold)
    with streaming(client, url, read_timeout=5.0) as response:
        reader = StreamReader(response)
        first = next(iter(reader))  # only the test sets release, and only after this
        held = waited(server.held.wait, EVENT_WAIT)
        server.release.set()
        result = reader.result()

    assert held
    assert first.text == "Certainly! I can"
    assert result.text == ANTHROPIC_TEXT
    assert result.report.outcome is Outcome.COMPLETE


def test_reasoning_deltas_are_marked_and_kept_apart(server: SSEServer, client: Client) -> None:
    name = "anthropic-thinking.sse"
    url = serve(server, name)
    with streaming(client, url) as response:
        reader = StreamReader(response)
        deltas = list(reader)
        result = reader.result()

    thinking = "".join(
        p["delta"]["thinking"]
        for p in payloads(fixture(name))
        if p["type"] == "content_block_delta" and p["delta"]["type"] == "thinking_delta"
    )
    assert "".join(d.text for d in deltas if d.reasoning) == thinking == result.reasoning[0]
    assert "".join(d.text for d in deltas if not d.reasoning) == result.text
    assert result.text == "The letter 'r' appears 3 times in the word \"strawberry\"."


def test_breaking_out_early_then_result_reads_the_rest(server: SSEServer, client: Client) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    url = serve(server, name)
    with streaming(client, url) as response:
        reader = StreamReader(response)
        first = None
        for delta in reader:
            first = delta
            break
        result = reader.result()

    assert first is not None
    assert first.provisional
    assert first.text == "Certainly! I can"
    assert result.text == ANTHROPIC_TEXT
    assert calls_of(result) == COMPLETE[name][1]
    assert result.report.outcome is Outcome.COMPLETE
    assert result.report.bytes_received == len(fixture(name))


def test_iterating_again_after_a_break_continues_without_losing_deltas(
    server: SSEServer, client: Client
) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    url = serve(server, name, piece=1000)  # several text events per network read
    with streaming(client, url) as response:
        reader = StreamReader(response)
        seen: list[str] = []
        for delta in reader:
            seen.append(delta.text)
            break
        seen.extend(delta.text for delta in reader)
        result = reader.result()

    assert "".join(seen) == result.text == ANTHROPIC_TEXT


def test_iterating_a_refused_stream_raises_at_the_end(server: SSEServer, client: Client) -> None:
    name = "anthropic-error-overloaded-midstream.sse"
    url = serve(server, name)
    deltas: list[TextDelta] = []
    with streaming(client, url) as response:
        reader = StreamReader(response)
        with pytest.raises(StreamFault) as caught:
            drain(reader, deltas)
        with pytest.raises(StreamFault) as again:
            reader.result()
    assert caught.value.code == again.value.code == "provider_error"
    assert "".join(d.text for d in deltas) == expected(ANTHROPIC, fixture(name)).text
    assert deltas
    assert all(d.provisional for d in deltas)


# --------------------------------------------------------------------------------------------
# Async clients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(COMPLETE))
def test_aread_stream_releases_a_complete_stream(
    server: SSEServer, async_client: Client, name: str
) -> None:
    url = serve(server, name)

    async def main() -> StreamResult:
        async with astreaming(async_client, url) as response:
            return await aread_stream(response)

    result = asyncio.run(main())
    text, tool_calls, stop = COMPLETE[name]
    assert result.text == text
    assert calls_of(result) == tool_calls
    assert result.stop_reason == stop
    assert result.report.outcome is Outcome.COMPLETE
    assert result.report.route == route_of(name)


def test_async_for_yields_provisional_deltas(server: SSEServer, async_client: Client) -> None:
    name = "anthropic-text-and-two-tool-use.sse"
    url = serve(server, name, piece=64)

    async def main() -> tuple[list[TextDelta], StreamResult]:
        async with astreaming(async_client, url) as response:
            reader = AsyncStreamReader(response)
            deltas = [delta async for delta in reader]
            return deltas, await reader.result()

    deltas, result = asyncio.run(main())
    assert all(isinstance(d, TextDelta) and d.provisional for d in deltas)
    assert "".join(d.text for d in deltas) == result.text == ANTHROPIC_TEXT
    assert calls_of(result) == COMPLETE[name][1]


def test_async_break_early_then_result(server: SSEServer, async_client: Client) -> None:
    name = "openai-chat-parallel-tool-calls.sse"
    url = serve(server, "openai-chat-text.sse")
    url_tools = serve(server, name, path="/proxy/openai/v1/chat/completions")

    async def main() -> tuple[str, StreamResult, StreamResult]:
        async with astreaming(async_client, url) as response:
            reader = AsyncStreamReader(response)
            first = ""
            async for delta in reader:
                first = delta.text
                break
            text_result = await reader.result()
        async with astreaming(async_client, url_tools) as response:
            tools_result = await AsyncStreamReader(response).result()
        return first, text_result, tools_result

    first, text_result, tools_result = asyncio.run(main())
    assert first == "Four"
    assert text_result.text == "Four plus five is nine."
    assert calls_of(tools_result) == COMPLETE[name][1]


def test_async_iterating_again_after_a_break_continues_without_losing_deltas(
    server: SSEServer, async_client: Client
) -> None:
    url = serve(server, "anthropic-text-and-two-tool-use.sse", piece=1000)

    async def main() -> tuple[list[str], StreamResult]:
        async with astreaming(async_client, url) as response:
            reader = AsyncStreamReader(response)
            seen: list[str] = []
            async for delta in reader:
                seen.append(delta.text)
                break
            seen.extend([delta.text async for delta in reader])
            return seen, await reader.result()

    seen, result = asyncio.run(main())
    assert "".join(seen) == result.text == ANTHROPIC_TEXT


def test_async_result_after_a_refused_iteration_raises_the_fault_again(
    server: SSEServer, async_client: Client
) -> None:
    url = serve(server, "anthropic-error-overloaded-midstream.sse")

    async def main() -> tuple[StreamFault, StreamFault]:
        async with astreaming(async_client, url) as response:
            reader = AsyncStreamReader(response)
            with pytest.raises(StreamFault) as caught:
                await adrain(reader, [])
            with pytest.raises(StreamFault) as again:
                await reader.result()
            return caught.value, again.value

    caught, again = asyncio.run(main())
    assert caught.code == again.code == "provider_error"


@pytest.mark.parametrize(("name", "code"), REFUSED[:3] + REFUSED[-2:])
def test_async_refused_stream(
    server: SSEServer, async_client: Client, name: str, code: str
) -> None:
    url = serve(server, name)

    async def main() -> StreamFault:
        async with astreaming(async_client, url) as response:
            with pytest.raises(StreamFault) as caught:
                await aread_stream(response)
            return caught.value

    fault = asyncio.run(main())
    assert fault.code == code
    assert fault.report is not None
    assert_no_content(fault, fixture(name))


@pytest.mark.parametrize("variant", ["between-chunks", "inside-chunk", "short-content-length"])
def test_async_connection_drop_is_truncated(
    server: SSEServer, async_client: Client, variant: str
) -> None:
    name = "openai-chat-parallel-tool-calls.sse"
    cut = half(fixture(name), 300)
    if variant == "between-chunks":
        url = serve(server, name, cut=cut)
    elif variant == "inside-chunk":
        url = serve(server, name, cut=cut + 50, cut_inside_chunk=True)
    else:
        url = serve(server, name, framing="length", cut=cut + 50)

    async def main() -> StreamFault:
        async with astreaming(async_client, url) as response:
            with pytest.raises(StreamFault) as caught:
                await aread_stream(response)
            return caught.value

    fault = asyncio.run(main())
    assert fault.code == "truncated"
    assert isinstance(fault.__cause__, async_client.raises("transport").source)
    assert fault.report is not None
    assert fault.report.error == "transport"


@pytest.mark.e2e  # waits out a read timeout per client
def test_async_stall_times_out(server: SSEServer, async_client: Client) -> None:
    name = "openai-responses-reasoning-function-call-text.sse"
    body = fixture(name)
    cut = stall_cut(body, 12)
    url = serve(server, name, cut=cut, after_cut="stall")

    async def main() -> tuple[list[TextDelta], StreamFault]:
        deltas: list[TextDelta] = []
        async with astreaming(async_client, url, read_timeout=STALL_TIMEOUT) as response:
            with pytest.raises(StreamFault) as caught:
                await adrain(AsyncStreamReader(response), deltas)
            return deltas, caught.value

    deltas, fault = asyncio.run(main())
    assert fault.code == "timeout"
    assert isinstance(fault.__cause__, async_client.raises("timeout").source)
    assert fault.report is not None
    assert fault.report.bytes_received == cut
    assert "".join(d.text for d in deltas) == expected(RESPONSES, body[:cut]).text


# --------------------------------------------------------------------------------------------
# Plain byte iterables, no HTTP object
# --------------------------------------------------------------------------------------------


def pieces(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


@pytest.mark.parametrize("name", list(COMPLETE))
def test_a_list_of_bytes_with_an_explicit_route(name: str) -> None:
    result = read_stream(pieces(fixture(name), 97), route_of(name))
    text, tool_calls, stop = COMPLETE[name]
    assert (result.text, calls_of(result), result.stop_reason) == (text, tool_calls, stop)
    assert result.report.route == route_of(name)


@pytest.mark.parametrize("name", list(COMPLETE))
def test_a_generator_without_a_route_is_sniffed(name: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield from pieces(fixture(name), 211)

    result = read_stream(chunks())
    assert result.report.route == route_of(name)
    assert result.text == COMPLETE[name][0]
    assert calls_of(result) == COMPLETE[name][1]


def test_route_auto_sniffs_like_no_route() -> None:
    result = read_stream([fixture("openai-responses-function-call.sse")], "auto")
    assert result.report.route == RESPONSES
    assert calls_of(result) == COMPLETE["openai-responses-function-call.sse"][1]


@pytest.mark.parametrize("name", ["anthropic-text-and-two-tool-use.sse", "gemini-text.sse"])
@pytest.mark.parametrize("route", [None, "explicit"])
def test_an_async_generator_source(name: str, route: str | None) -> None:
    body = fixture(name)

    async def chunks() -> AsyncIterator[bytes]:
        for piece in pieces(body, 53):
            yield piece

    async def main() -> tuple[list[TextDelta], StreamResult]:
        reader = AsyncStreamReader(chunks(), route_of(name) if route else None)
        deltas = [delta async for delta in reader]
        return deltas, await reader.result()

    deltas, result = asyncio.run(main())
    assert "".join(d.text for d in deltas) == result.text == COMPLETE[name][0]
    assert calls_of(result) == COMPLETE[name][1]
    assert result.report.route == route_of(name)
    assert asyncio.run(aread_stream(chunks())).text == COMPLETE[name][0]


@pytest.mark.parametrize(
    ("error", "code"), [(ConnectionResetError("reset"), "truncated"), (TimeoutError(), "timeout")]
)
def test_an_error_raised_by_the_source_is_chained(error: BaseException, code: str) -> None:
    body = fixture("openai-chat-text.sse")

    def chunks() -> Iterator[bytes]:
        yield body[:700]
        raise error

    with pytest.raises(StreamFault) as caught:
        read_stream(chunks(), CHAT)
    assert caught.value.code == code
    assert caught.value.__cause__ is error


def test_an_error_after_the_terminal_event_does_not_refuse_the_stream() -> None:
    body = fixture("openai-chat-text.sse")

    def chunks() -> Iterator[bytes]:
        yield body
        raise ConnectionResetError("reset after [DONE]")

    result = read_stream(chunks(), CHAT)
    assert result.text == "Four plus five is nine."
    assert result.report.outcome is Outcome.COMPLETE


def test_cancelling_an_async_read_propagates_cancellation() -> None:
    body = fixture("anthropic-text.sse")

    async def main() -> None:
        first_piece_read = asyncio.Event()
        never = asyncio.Event()

        async def chunks() -> AsyncIterator[bytes]:
            yield body[:400]
            first_piece_read.set()
            await never.wait()
            yield body[400:]

        task = asyncio.create_task(aread_stream(chunks(), ANTHROPIC))
        await first_piece_read.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


@pytest.mark.parametrize(
    "error",
    [
        SystemExit(3),  # a signal handler calling sys.exit() mid-read
        KeyboardInterrupt(),
        MemoryError(),
        ValueError("a bug in the code that produced the bytes"),
    ],
    ids=type,
)
@pytest.mark.parametrize("after_terminal", [False, True], ids=["mid-stream", "after-terminal"])
def test_only_transport_failures_become_faults(error: BaseException, after_terminal: bool) -> None:
    """Anything else reaches the caller unchanged: no fault, no result, no added context."""
    body = fixture("openai-chat-text.sse")

    def chunks() -> Iterator[bytes]:
        yield body if after_terminal else body[:700]
        raise error

    # drain=True reads on after the terminal event, so the error is met there too.
    reader = StreamReader(chunks(), CHAT, drain=after_terminal)
    with pytest.raises(type(error)) as caught:
        reader.result()
    assert caught.value is error
    assert (error.__cause__, error.__context__) == (None, None)
    # The verdict is kept: the stream was cancelled by the caller's own exception.
    if after_terminal:
        assert reader.result().text == "Four plus five is nine."
    else:
        with pytest.raises(StreamFault, match="cancelled"):
            reader.result()


def test_a_transport_failure_of_each_client_becomes_a_fault() -> None:
    body = fixture("openai-chat-text.sse")
    for error in (
        httpx.RemoteProtocolError("peer closed connection"),
        httpx.ReadTimeout("read timed out"),
        httpx.DecodingError("corrupt gzip"),
        requests.exceptions.ChunkedEncodingError("broken chunk"),
        EOFError(),
    ):

        def chunks(error: BaseException = error) -> Iterator[bytes]:
            yield body[:700]
            raise error

        with pytest.raises(StreamFault) as caught:
            read_stream(chunks(), CHAT)
        assert caught.value.__cause__ is error
        assert caught.value.code in ("truncated", "timeout")


def test_a_trio_cancellation_propagates_out_of_aread_stream() -> None:
    body = fixture("anthropic-text.sse")
    seen: list[BaseException] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield body[:400]
        await trio.sleep_forever()
        yield body[400:]

    async def main() -> None:
        with trio.move_on_after(0.05) as scope:
            try:
                await aread_stream(chunks(), ANTHROPIC)
            except BaseException as exc:
                seen.append(exc)
                raise
        assert scope.cancelled_caught

    trio.run(main)
    assert [type(exc).__name__ for exc in seen] == ["Cancelled"]


def test_a_truncated_iterable_is_refused_like_a_truncated_response() -> None:
    name = "openai-chat-truncated-mid-tool-call.sse"
    with pytest.raises(StreamFault) as caught:
        read_stream(pieces(fixture(name), 128), CHAT)
    assert caught.value.code == "truncated"
    assert caught.value.__cause__ is None
    assert_no_content(caught.value, fixture(name))
