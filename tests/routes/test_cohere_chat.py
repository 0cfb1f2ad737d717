"""``cohere.chat``: recognition, sniffing, the terminal and its optional ``[DONE]``, the finish
reasons, content blocks and tool-call accumulators, usage, and hostile shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otelsse import Outcome, SSEEvent, StreamMonitor, detect_route
from otelsse.routes import CohereChatRoute, Request, get_route, match_route
from tests._fixtures import read_fixture
from tests._helpers import run_monitor

ROUTE = "cohere.chat"
TOOLS = "real/cohere-v2-chat-tool-call.sse"
TEXT = "real/cohere-v2-chat-text.sse"
DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any], name: str | None = None) -> bytes:
    """One event as the API sends it: ``event:`` is the payload's ``type`` unless told."""
    data = json.dumps(payload, separators=(",", ":"))
    return f"event: {name or payload['type']}\ndata: {data}\n\n".encode()


def start(index: int, kind: str = "text") -> bytes:
    content = {"type": kind, kind: ""}
    return event(
        {"type": "content-start", "index": index, "delta": {"message": {"content": content}}}
    )


def delta(index: int, text: Any, kind: str = "text") -> bytes:
    content = {kind: text}
    return event(
        {"type": "content-delta", "index": index, "delta": {"message": {"content": content}}}
    )


def end(index: int) -> bytes:
    return event({"type": "content-end", "index": index})


def message_end(reason: Any = "COMPLETE", **more: Any) -> bytes:
    return event({"type": "message-end", "delta": {"finish_reason": reason, **more}})


def call_start(index: int, call_id: str = "get_time_1", arguments: str = "") -> bytes:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_time", "arguments": arguments},
    }
    return event(
        {"type": "tool-call-start", "index": index, "delta": {"message": {"tool_calls": call}}}
    )


def call_delta(index: int, fragment: Any) -> bytes:
    calls = {"function": {"arguments": fragment}}
    return event(
        {"type": "tool-call-delta", "index": index, "delta": {"message": {"tool_calls": calls}}}
    )


def call_end(index: int) -> bytes:
    return event({"type": "tool-call-end", "index": index})


MESSAGE_START = event(
    {"id": "m-1", "type": "message-start", "delta": {"message": {"role": "assistant"}}}
)
TEXT_BLOCK = start(0) + delta(0, "Hi") + end(0)


def judge(*parts: bytes) -> Any:
    _, report = run_monitor([b"".join(parts)], route=ROUTE)
    return report


# -- recognition ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "route"),
    [
        ("POST", "https://api.cohere.com/v2/chat", ROUTE),
        ("POST", "http://localhost:8000/cohere/v2/chat", ROUTE),  # vLLM's Cohere endpoint
        ("GET", "https://api.cohere.com/v2/chat", None),
        ("POST", "https://api.cohere.com/v1/chat", None),  # v1 streams NDJSON, not SSE
        ("POST", "https://api.cohere.com/v2/chats", None),
    ],
)
def test_a_post_to_v2_chat_is_this_route(method: str, url: str, route: str | None) -> None:
    assert detect_route(method, url) == route


def test_the_url_alone_never_says_it_streams() -> None:
    """``"stream": true`` is in the body: the URL is the same for a JSON answer."""
    request = Request("POST", "api.cohere.com", "/v2/chat")
    assert match_route(request) is CohereChatRoute
    assert not CohereChatRoute.always_streams(request)


def test_its_declarations() -> None:
    route = get_route(ROUTE)
    assert (route.provider, route.operation) == ("cohere", "chat")
    assert route.success_stops == {"COMPLETE", "STOP_SEQUENCE", "TOOL_CALL"}
    assert route.strict_error_event("otelsse_strict_truncated", "refused") is None


@pytest.mark.parametrize("fixture", [TOOLS, TEXT])
def test_sniffing_reads_the_recordings_as_named(fixture: str) -> None:
    body = read_fixture(fixture)
    _, named = run_monitor([body], route=ROUTE)
    _, sniffed = run_monitor([body], route="auto")
    assert named == sniffed
    assert named.route == ROUTE


def test_sniffing_knows_the_payload_without_an_event_name() -> None:
    body = read_fixture(TEXT).replace(b"event: message-start\n", b"")
    _, report = run_monitor([body], route="auto")
    assert (report.route, report.outcome) == (ROUTE, Outcome.COMPLETE)


def test_a_debug_event_alone_proves_nothing() -> None:
    """``debug`` is too common a word to choose a contract by."""
    assert not CohereChatRoute.sniff_event(SSEEvent(data="{}", event="debug"))
    assert not CohereChatRoute.sniff_payload({"type": "debug"})
    _, report = run_monitor([event({"type": "debug", "prompt": "..."})], route="auto")
    assert report.route == "generic"


# -- the recordings --------------------------------------------------------------------------------


def test_the_tool_call_recording() -> None:
    _, report = run_monitor([read_fixture(TOOLS)], route=ROUTE)
    assert (report.outcome, report.stop_reason, report.terminal_seen) == (
        Outcome.COMPLETE,
        "TOOL_CALL",
        True,
    )
    assert (report.tool_call_count, report.tool_call_invalid_count) == (2, 0)
    assert report.response_id == "e6d757a9-f0f3-40fe-9b8a-44cdc3bd18a7"
    assert report.provider_name == "cohere"
    assert report.finish_reasons == ("TOOL_CALL",)
    assert report.anomalies == {}


def test_usage_is_every_token_used_not_the_billed_ones() -> None:
    """``usage.tokens`` (968 in), not ``usage.billed_units`` (62 in): the GenAI conventions'
    input count includes every input token."""
    _, tools = run_monitor([read_fixture(TOOLS)], route=ROUTE)
    assert (tools.input_tokens, tools.output_tokens) == (968, 83)
    _, text = run_monitor([read_fixture(TEXT)], route=ROUTE)
    assert (text.input_tokens, text.output_tokens) == (69, 110)


def test_token_counts_sent_as_integral_floats_count() -> None:
    """The SDK types the counts as floats: ``62.0`` is 62, ``62.5`` no count."""
    usage = {"tokens": {"input_tokens": 62.0, "output_tokens": 62.5}}
    report = judge(MESSAGE_START, TEXT_BLOCK, message_end(usage=usage))
    assert (report.input_tokens, report.output_tokens) == (62, None)


def test_the_tool_calls_arguments_are_collected_by_index() -> None:
    monitor = StreamMonitor(ROUTE, collect_text=True)
    monitor.feed(read_fixture(TOOLS))
    monitor.close()
    calls = monitor.state.tool_calls
    assert [(call.call_id, call.name, call.arguments) for call in calls] == [
        ("get_time_dg5wwc00d8v5", "get_time", {"location": "Tokyo"}),
        ("get_weather_bc8241gkqss5", "get_weather", {"location": "Tokyo"}),
    ]
    # The tool plan is the model's reasoning, kept apart from the answer's text.
    assert "".join(monitor.state.reasoning[-1]).startswith("I will search")
    assert monitor.state.texts == {}


def test_thinking_and_text_are_kept_apart() -> None:
    monitor = StreamMonitor(ROUTE, collect_text=True)
    monitor.feed(read_fixture("synthetic/cohere-chat-thinking.sse"))
    assert monitor.close().outcome is Outcome.COMPLETE
    assert {key: "".join(parts) for key, parts in monitor.state.texts.items()} == {
        1: "Twice a day."
    }
    assert "".join(monitor.state.reasoning[0]) == "The user asks for the tides."


# -- the terminal and [DONE] -----------------------------------------------------------------------


def test_done_after_message_end_is_optional() -> None:
    body = read_fixture(TEXT)
    assert body.endswith(DONE)
    without = judge(body.removesuffix(DONE))
    assert (without.outcome, without.terminal_seen, without.anomalies) == (
        Outcome.COMPLETE,
        True,
        {},
    )


def test_a_second_done_or_any_event_after_the_end_is_an_anomaly() -> None:
    body = read_fixture(TEXT)
    twice = judge(body + DONE)
    assert (twice.outcome, twice.anomalies) == (Outcome.COMPLETE, {"event_after_terminal": 1})
    late = judge(body + delta(0, "more"))
    assert (late.outcome, late.anomalies) == (Outcome.COMPLETE, {"event_after_terminal": 1})


def test_done_before_message_end_is_a_protocol_error() -> None:
    """The SDK stops reading at ``[DONE]``: the application would take a cut answer as whole."""
    report = judge(MESSAGE_START, TEXT_BLOCK, DONE, message_end())
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies == {"done_before_message_end": 1, "event_after_terminal": 1}


def test_a_clean_end_before_message_end_is_truncated() -> None:
    body = read_fixture(TEXT)
    cut = body[: body.index(b"event: message-end")]
    report = judge(cut)
    assert (report.outcome, report.terminal_seen) == (Outcome.TRUNCATED, False)


def test_closed_by_the_application_before_message_end_is_cancelled() -> None:
    body = read_fixture(TOOLS)
    _, report = run_monitor([body[: body.index(b"event: message-end")]], ROUTE, "cancelled")
    assert report.outcome is Outcome.CANCELLED


def test_message_end_read_then_closed_before_done_is_complete() -> None:
    """An application that stops at ``message-end`` (the SDK yields it last) read it all."""
    body = read_fixture(TOOLS)
    _, report = run_monitor([body.removesuffix(DONE)], ROUTE, "cancelled")
    assert (report.outcome, report.terminal_seen) == (Outcome.COMPLETE, True)


# -- finish reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        ("COMPLETE", Outcome.COMPLETE),
        ("STOP_SEQUENCE", Outcome.COMPLETE),
        ("TOOL_CALL", Outcome.COMPLETE),
        ("MAX_TOKENS", Outcome.INCOMPLETE),
        ("SOMETHING_NEW", Outcome.INCOMPLETE),  # ChatFinishReason is an open union
        ("ERROR", Outcome.PROVIDER_ERROR),
        ("TIMEOUT", Outcome.PROVIDER_ERROR),  # the provider's timeout, not the client's
    ],
)
def test_each_finish_reason(reason: str, outcome: Outcome) -> None:
    report = judge(MESSAGE_START, TEXT_BLOCK, message_end(reason), DONE)
    assert (report.outcome, report.stop_reason, report.finish_reasons) == (
        outcome,
        reason,
        (reason,),
    )
    error_code = reason if outcome is Outcome.PROVIDER_ERROR else None
    assert report.provider_error_code == error_code


def test_an_error_message_makes_any_message_end_a_provider_error() -> None:
    report = judge(MESSAGE_START, TEXT_BLOCK, message_end("COMPLETE", error="model overloaded"))
    assert (report.outcome, report.stop_reason, report.provider_error_code) == (
        Outcome.PROVIDER_ERROR,
        "COMPLETE",
        None,
    )
    alone = judge(MESSAGE_START, event({"type": "message-end", "delta": {"error": "x"}}))
    assert (alone.outcome, alone.stop_reason) == (Outcome.PROVIDER_ERROR, None)
    empty = judge(MESSAGE_START, TEXT_BLOCK, message_end("COMPLETE", error=""))
    assert empty.outcome is Outcome.COMPLETE


def test_message_end_without_a_finish_reason_is_a_protocol_error() -> None:
    report = judge(MESSAGE_START, TEXT_BLOCK, event({"type": "message-end", "delta": {}}))
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies == {"message_end_without_finish_reason": 1}


# -- content blocks and tool calls ---------------------------------------------------------------


def test_a_success_stop_with_a_block_or_call_open_is_a_protocol_error() -> None:
    block = judge(MESSAGE_START, start(0), delta(0, "Hi"), message_end())
    assert (block.outcome, block.anomalies) == (
        Outcome.PROTOCOL_ERROR,
        {"stop_with_open_block": 1},
    )
    call = judge(MESSAGE_START, call_start(0), call_delta(0, "{}"), message_end("TOOL_CALL"))
    assert call.outcome is Outcome.PROTOCOL_ERROR


def test_max_tokens_inside_a_call_leaves_it_unfinished_and_incomplete() -> None:
    report = judge(MESSAGE_START, call_start(0), call_delta(0, '{"loc'), message_end("MAX_TOKENS"))
    assert (report.outcome, report.stop_reason) == (Outcome.INCOMPLETE, "MAX_TOKENS")
    assert report.anomalies == {"block_open_at_stop": 1}
    assert (report.tool_call_count, report.open_accumulator_count) == (1, 1)


def test_invalid_arguments_under_a_success_stop_are_a_payload_error() -> None:
    report = judge(
        MESSAGE_START, call_start(0), call_delta(0, '{"loc'), call_end(0), message_end("TOOL_CALL")
    )
    assert (report.outcome, report.tool_call_invalid_count) == (Outcome.PAYLOAD_ERROR, 1)


def test_a_first_fragment_in_tool_call_start_counts() -> None:
    report = judge(
        MESSAGE_START,
        call_start(0, arguments='{"a"'),
        call_delta(0, ": 1}"),
        call_end(0),
        message_end("TOOL_CALL"),
    )
    assert (report.outcome, report.tool_call_count, report.tool_call_invalid_count) == (
        Outcome.COMPLETE,
        1,
        0,
    )


def test_a_call_without_arguments_takes_none() -> None:
    report = judge(MESSAGE_START, call_start(0), call_end(0), message_end("TOOL_CALL"))
    assert (report.outcome, report.tool_call_invalid_count) == (Outcome.COMPLETE, 0)


@pytest.mark.parametrize(
    ("parts", "violation"),
    [
        ((delta(0, "x"),), "content_delta_without_start"),
        ((end(0),), "content_end_without_start"),
        ((start(0), start(0), end(0)), "content_reopened"),
        ((call_delta(3, "{}"),), "tool_delta_without_start"),
        ((call_end(3),), "tool_end_without_start"),
        ((call_start(0), call_start(0), call_end(0)), "tool_call_reopened"),
    ],
)
def test_an_event_out_of_order_is_a_protocol_error(
    parts: tuple[bytes, ...], violation: str
) -> None:
    report = judge(MESSAGE_START, *parts, message_end("COMPLETE"))
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies.get(violation) == 1


def test_citations_and_debug_are_read_and_ignored() -> None:
    citation = {
        "type": "citation-start",
        "index": 0,
        "delta": {"message": {"citations": {"start": 0, "end": 2, "text": "Hi", "sources": []}}},
    }
    report = judge(
        MESSAGE_START,
        event({"type": "debug", "prompt": "..."}),
        TEXT_BLOCK,
        event(citation),
        event({"type": "citation-end", "index": 0}),
        message_end(),
    )
    assert (report.outcome, report.unknown_event_count, report.anomalies) == (
        Outcome.COMPLETE,
        0,
        {},
    )


def test_an_unknown_event_is_counted() -> None:
    report = judge(MESSAGE_START, event({"type": "brand-new"}), TEXT_BLOCK, message_end())
    assert (report.outcome, report.unknown_event_count) == (Outcome.COMPLETE, 1)


def test_an_event_name_unlike_its_type_is_an_anomaly() -> None:
    """The SDK reads the data's ``type``; so does the route, counting the mismatch."""
    report = judge(MESSAGE_START, event({"type": "content-end", "index": 0}, "content-stop"))
    assert report.anomalies == {"event_name_mismatch": 1, "content_end_without_start": 1}


# -- hostile shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "content-start", "index": "0", "delta": {}},
        {"type": "content-start", "index": 0, "delta": []},
        {"type": "content-delta"},
        {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": 7}}},
        {"type": "tool-call-start", "index": [0], "delta": {}},
        {"type": "tool-call-start", "index": 0, "delta": {"message": {"tool_calls": []}}},
        {"type": "tool-call-delta", "index": {}, "delta": None},
        {"type": "tool-call-end", "index": [1]},
        {"type": "message-end", "delta": {"finish_reason": ["COMPLETE"]}},
        {"type": "message-end", "delta": {"finish_reason": "COMPLETE", "error": 5}},
        {"type": "message-end", "delta": {"usage": {"tokens": []}}},
        {"type": "message-end", "delta": "COMPLETE"},
        {"type": ["message-end"]},
    ],
)
def test_a_payload_of_the_wrong_shape_is_judged_never_raised(payload: dict[str, Any]) -> None:
    name = payload["type"] if isinstance(payload["type"], str) else "message"
    report = judge(MESSAGE_START, event(payload, name))
    assert report.outcome in {
        Outcome.PAYLOAD_ERROR,
        Outcome.PROTOCOL_ERROR,
        Outcome.PROVIDER_ERROR,
        Outcome.TRUNCATED,
    }


def test_data_that_is_not_a_json_object_is_a_payload_error() -> None:
    """The SDK logs and skips it; otelsse says the stream carried it."""
    for data in (b"not json", b"[1, 2]"):
        report = judge(
            MESSAGE_START, b"event: content-delta\ndata: " + data + b"\n\n", message_end()
        )
        assert report.outcome is Outcome.PAYLOAD_ERROR
