"""``openai.chat_completions``: OpenAI's rules, and the ones compatible servers bend."""

from __future__ import annotations

import json

import pytest

from otelsse import Outcome, StreamMonitor, read_stream
from otelsse.routes import OpenAIChatRoute
from tests._helpers import run_monitor


class TolerantChat(OpenAIChatRoute):
    """A compatible server that sends ``[DONE]`` without a finish reason on success."""

    allow_null_finish_reason = True


def test_null_finish_reason_is_tolerated_only_when_configured() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    body = (
        f"data: {json.dumps({**chunk, 'choices': [{'index': 0, 'delta': {'content': 'hi'}}]})}\n\n"
        "data: [DONE]\n\n"
    ).encode()
    _, strict = run_monitor([body], route="openai.chat_completions")
    tolerant = StreamMonitor(TolerantChat)
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


@pytest.mark.parametrize("arguments", ["", " ", None])
def test_empty_arguments_are_a_call_without_arguments(arguments: str | None) -> None:
    """OpenAI sends ``"{}"`` for a call without arguments; other compatible servers send
    ``""`` (or no ``arguments`` at all) for a tool that takes none: ``{}``, as Anthropic's
    empty ``partial_json`` is (see test_anthropic_messages.py)."""
    function = {"name": "f"} if arguments is None else {"name": "f", "arguments": arguments}
    body = _chat_body(
        _tool_delta({"index": 0, "id": "a", "function": function}),
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    )
    _, openai = run_monitor([body], route="openai.chat_completions")
    assert (openai.outcome, openai.tool_call_invalid_count) == (Outcome.COMPLETE, 0)
    assert read_stream([body], "openai.chat_completions").tool_calls[0].arguments == {}


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
