"""``StreamReport.to_attributes()`` is sanitized: known keys, valid attribute types, no content."""

from __future__ import annotations

import json

import pytest

from otelsse import StreamFault, read_stream, semconv
from tests._fixtures import fixture_names, read_fixture
from tests._helpers import run_monitor

MARKER = "CANARY7f3a"


def _canary_streams() -> dict[str, bytes]:
    """Streams whose text, reasoning, tool arguments and error messages all carry the marker."""
    chat = {"id": "c", "object": "chat.completion.chunk", "model": "m"}

    def chat_event(choice: dict[str, object], **extra: object) -> str:
        return f"data: {json.dumps({**chat, 'choices': [choice], **extra})}\n\n"

    tool = {
        "index": 0,
        "id": "call",
        "function": {"name": "f", "arguments": json.dumps({"q": MARKER})},
    }
    openai = (
        chat_event({"index": 0, "delta": {"content": f"text {MARKER}"}})
        + chat_event({"index": 0, "delta": {"reasoning_content": f"think {MARKER}"}})
        + chat_event({"index": 0, "delta": {"tool_calls": [tool]}})
        + chat_event({"index": 0, "delta": {}, "finish_reason": "tool_calls"})
        + "data: [DONE]\n\n"
    )
    error = chat_event({"index": 0, "delta": {"content": MARKER}}) + (
        f'data: {{"error": {{"message": "{MARKER} failed", "type": "server_error"}}}}\n\n'
    )
    anthropic = (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg","model":"m"}}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        f'"delta":{{"type":"text_delta","text":"{MARKER}"}}}}\n\n'
        'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        f'"message":"{MARKER}"}}}}\n\n'
    )
    return {
        "openai": openai.encode(),
        "openai-error": error.encode(),
        "anthropic-error": anthropic.encode(),
        "cut": openai.encode()[: len(openai) // 2],
    }


@pytest.mark.parametrize(("name", "body"), list(_canary_streams().items()))
def test_no_content_reaches_attributes_reports_or_faults(name: str, body: bytes) -> None:
    _, report = run_monitor([body])
    assert MARKER not in repr(report.to_attributes())
    assert MARKER not in repr(report)
    with pytest.raises(StreamFault) as caught:
        read_stream([body], accept_stop_reasons=[])
    assert MARKER not in str(caught.value)
    assert MARKER not in repr(caught.value)


@pytest.mark.parametrize("name", fixture_names())
def test_attributes_use_only_contract_names_and_valid_types(name: str) -> None:
    _, report = run_monitor([read_fixture(name)])
    attributes = report.to_attributes()
    assert set(attributes) <= set(semconv.ATTRIBUTES)
    for key, value in attributes.items():
        if isinstance(value, tuple):
            assert all(isinstance(item, str) for item in value), key
        else:
            assert isinstance(value, (str, bool, int, float)), key
    assert attributes[semconv.OUTCOME] == report.outcome.value
    assert (semconv.ERROR_TYPE in attributes) == (report.outcome.value in semconv.ERROR_OUTCOMES)


def test_finish_reasons_end_with_error_when_the_stream_ended_early() -> None:
    _, cut = run_monitor([read_fixture("synthetic/openai-chat-truncated-mid-tool-call.sse")])
    _, whole = run_monitor([read_fixture("real/openai-chat-parallel-tool-calls.sse")])
    assert cut.to_attributes()[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("error",)
    assert whole.to_attributes()[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
