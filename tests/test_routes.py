"""Route detection, registration, sniffing, and the per-route rules that real servers bend."""

from __future__ import annotations

import json

import pytest

from otelsse import Outcome, StreamMonitor, detect_route, register_route
from otelsse.routes import (
    OpenAIChatAdapter,
    make_adapter,
    route_names,
    unregister_route,
)
from tests._fixtures import EDGE_FIXTURES, EXPECTED, fixture_names, read_fixture
from tests._helpers import run_monitor


@pytest.mark.parametrize(
    ("method", "url", "content_type", "route"),
    [
        ("POST", "https://api.openai.com/v1/chat/completions", None, "openai.chat_completions"),
        (
            "POST",
            "https://x.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=1",
            "text/event-stream",
            "openai.chat_completions",
        ),
        ("POST", "https://api.openai.com/v1/responses", None, "openai.responses"),
        ("GET", "https://api.openai.com/v1/responses/resp_1?stream=true", None, "openai.responses"),
        ("GET", "https://api.openai.com/v1/responses/resp_1", "application/json", None),
        ("post", "https://api.anthropic.com/v1/messages", None, "anthropic.messages"),
        (
            "POST",
            "https://eu-aiplatform.googleapis.com/v1/projects/p/locations/l/publishers/anthropic/"
            "models/claude:streamRawPredict",
            None,
            "anthropic.messages",
        ),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/models/gemini:streamGenerateContent"
            "?alt=sse",
            "text/event-stream; charset=utf-8",
            "gemini.generate_content",
        ),
        ("POST", "https://example.com/v1/events", "text/event-stream; charset=utf-8", "auto"),
        ("POST", "https://example.com/v1/events", "Text/Event-Stream", "auto"),
        ("POST", "https://example.com/v1/events", "application/json", None),
        ("GET", "https://example.com/", None, None),
    ],
)
def test_detect_route(method: str, url: str, content_type: str | None, route: str | None) -> None:
    assert detect_route(method, url, content_type) == route


def test_a_registered_route_is_detected_first_and_builds_its_adapter() -> None:
    register_route(
        "writer.chat",
        lambda: OpenAIChatAdapter(require_done=False),
        matches=lambda method, path: method == "POST" and path.endswith("/v1/chat"),
    )
    try:
        assert "writer.chat" in route_names()
        assert detect_route("POST", "https://api.writer.com/v1/chat") == "writer.chat"
        body = (EDGE_FIXTURES / "chat-stop-without-done.sse").read_bytes()
        _, strict = run_monitor([body], route="openai.chat_completions")
        _, lenient = run_monitor([body], route="writer.chat")
        assert strict.outcome is Outcome.TRUNCATED
        assert lenient.outcome is Outcome.COMPLETE
        with pytest.raises(ValueError, match="already registered"):
            register_route("writer.chat", OpenAIChatAdapter)
        with pytest.raises(ValueError, match="built in"):
            register_route("generic", OpenAIChatAdapter)
    finally:
        unregister_route("writer.chat")
    assert detect_route("POST", "https://api.writer.com/v1/chat") is None


def test_unknown_route_name_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="unknown route"):
        make_adapter("nope")


@pytest.mark.parametrize("name", fixture_names())
def test_explicit_route_and_sniffed_route_agree(name: str) -> None:
    body = read_fixture(name)
    _, sniffed = run_monitor([body], route="auto")
    _, explicit = run_monitor([body], route=EXPECTED[name].route)
    assert sniffed == explicit


def test_null_finish_reason_is_tolerated_only_when_configured() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    body = (
        f"data: {json.dumps({**chunk, 'choices': [{'index': 0, 'delta': {'content': 'hi'}}]})}\n\n"
        "data: [DONE]\n\n"
    ).encode()
    _, strict = run_monitor([body], route="openai.chat_completions")
    tolerant = StreamMonitor(OpenAIChatAdapter(allow_null_finish_reason=True))
    tolerant.feed(body)
    report = tolerant.close()
    assert strict.outcome is Outcome.TRUNCATED
    assert strict.anomalies == {"done_without_finish_reason": 1}
    assert report.outcome is Outcome.COMPLETE
    assert report.stop_reason is None


def _chat_body(*choices_per_chunk: list[dict[str, object]], done: bool = True) -> bytes:
    base = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    body = b"".join(
        f"data: {json.dumps({**base, 'choices': choices})}\n\n".encode()
        for choices in choices_per_chunk
    )
    return body + (b"data: [DONE]\n\n" if done else b"")


def _tool_delta(tool: dict[str, object], finish: str | None = None) -> list[dict[str, object]]:
    return [{"index": 0, "delta": {"tool_calls": [tool]}, "finish_reason": finish}]


def test_tool_fragments_without_index_are_grouped_by_id() -> None:
    body = _chat_body(
        _tool_delta({"id": "a", "function": {"name": "f", "arguments": '{"x":'}}),
        _tool_delta({"function": {"arguments": "1}"}}),
        _tool_delta({"id": "b", "function": {"name": "g", "arguments": "{}"}}),
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    )
    monitor = StreamMonitor("openai.chat_completions", collect_text=True)
    monitor.feed(body)
    report = monitor.close()
    calls = monitor.state.tool_calls
    assert report.outcome is Outcome.COMPLETE
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("a", "f", {"x": 1}),
        ("b", "g", {}),
    ]


def test_arguments_before_the_name_are_joined_to_the_call() -> None:
    body = _chat_body(
        _tool_delta({"index": 0, "function": {"arguments": '{"x": 1}'}}),
        _tool_delta({"index": 0, "id": "a", "function": {"name": "f"}}),
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    )
    monitor = StreamMonitor("openai.chat_completions")
    monitor.feed(body)
    assert monitor.close().outcome is Outcome.COMPLETE
    (call,) = monitor.state.tool_calls
    assert (call.call_id, call.name, call.arguments) == ("a", "f", {"x": 1})


def test_empty_openai_arguments_are_invalid_but_empty_anthropic_input_is_an_object() -> None:
    body = _chat_body(
        _tool_delta({"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}),
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    )
    _, openai = run_monitor([body], route="openai.chat_completions")
    _, anthropic = run_monitor([(EDGE_FIXTURES / "anthropic-tool-empty-input.sse").read_bytes()])
    assert openai.outcome is Outcome.PAYLOAD_ERROR
    assert anthropic.outcome is Outcome.COMPLETE
    assert (anthropic.tool_call_count, anthropic.tool_call_invalid_count) == (1, 0)


def test_repeated_finish_reason_is_idempotent_and_counted() -> None:
    stop = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    _, report = run_monitor([_chat_body(stop, stop)], route="openai.chat_completions")
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"repeated_finish_reason": 1}


def test_events_after_done_are_counted_as_anomalies() -> None:
    stop = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    body = _chat_body(stop) + b'data: {"late": true}\n\n'
    _, report = run_monitor([body], route="openai.chat_completions")
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"event_after_terminal": 1}


def test_every_choice_needs_its_finish_reason() -> None:
    body = _chat_body(
        [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    )
    _, report = run_monitor([body], route="openai.chat_completions")
    assert report.outcome is Outcome.TRUNCATED


def test_one_non_success_choice_makes_the_stream_incomplete() -> None:
    body = _chat_body(
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        [{"index": 1, "delta": {}, "finish_reason": "length"}],
    )
    _, report = run_monitor([body], route="openai.chat_completions")
    assert report.outcome is Outcome.INCOMPLETE
    assert report.stop_reason == "length"
    assert report.finish_reasons == ("stop", "length")


def test_chunk_shaped_wrongly_for_the_route_is_payload_error() -> None:
    _, report = run_monitor([b'data: {"choices": "nope"}\n\n'], route="openai.chat_completions")
    assert report.outcome is Outcome.PAYLOAD_ERROR


def test_responses_sequence_gap_is_an_anomaly_not_a_failure() -> None:
    body = read_fixture("real/openai-responses-text.sse")
    blocks = body.split(b"\n\n")
    gapped = b"\n\n".join(blocks[:3] + blocks[4:])  # drop one mid-stream event
    _, report = run_monitor([gapped], route="openai.responses")
    assert report.anomalies.get("sequence_gap") == 1


def test_responses_terminal_may_be_followed_by_one_done_marker() -> None:
    body = read_fixture("real/openai-responses-text.sse") + b"data: [DONE]\n\n"
    _, once = run_monitor([body], route="openai.responses")
    _, twice = run_monitor([body + b"data: [DONE]\n\n"], route="openai.responses")
    assert once.outcome is Outcome.COMPLETE
    assert once.anomalies == {}
    assert twice.anomalies == {"unexpected_done": 1}


def test_anthropic_event_name_and_data_type_must_match() -> None:
    body = read_fixture("real/anthropic-text.sse").replace(
        b"event: content_block_stop", b"event: content_block_stopped", 1
    )
    _, report = run_monitor([body], route="anthropic.messages")
    assert report.anomalies.get("event_name_mismatch") == 1


def test_anthropic_unknown_event_is_counted_and_ignored() -> None:
    body = read_fixture("real/anthropic-text.sse")
    extra = b'event: brand_new\ndata: {"type": "brand_new"}\n\n'
    split = body.index(b"event: message_delta")
    _, report = run_monitor([body[:split] + extra + body[split:]], route="anthropic.messages")
    assert report.outcome is Outcome.COMPLETE
    assert report.unknown_event_count == 1


def test_gemini_chunk_after_finish_reason_is_an_anomaly() -> None:
    body = read_fixture("real/gemini-text.sse")
    last = body.rstrip(b"\r\n").rsplit(b"\r\n\r\n", 1)[-1]
    _, report = run_monitor([body + last + b"\r\n\r\n"], route="gemini.generate_content")
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"event_after_terminal": 1}


def test_sniffer_gives_up_after_a_few_untelling_events() -> None:
    body = b"".join(b"data: tick %d\n\n" % i for i in range(20))
    monitor = StreamMonitor("auto")
    monitor.feed(body)
    assert monitor.route == "generic"
    report = monitor.close()
    assert (report.route, report.outcome, report.event_count) == (
        "generic",
        Outcome.EOF_UNVERIFIED,
        20,
    )
