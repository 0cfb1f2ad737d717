"""``anthropic.messages``: event names, unknown events, and empty tool input."""

from __future__ import annotations

from otelsse import Outcome
from tests._fixtures import read_fixture
from tests._helpers import run_monitor


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


def test_empty_tool_input_is_the_input_of_content_block_start() -> None:
    """No ``partial_json`` means the block's ``input`` (``{}``), not cut arguments."""
    _, anthropic = run_monitor([read_fixture("edge/anthropic-tool-empty-input.sse")])
    assert anthropic.outcome is Outcome.COMPLETE
    assert (anthropic.tool_call_count, anthropic.tool_call_invalid_count) == (1, 0)


def test_output_tokens_come_only_from_the_final_usage() -> None:
    """message_start's ``output_tokens`` is a placeholder: a stream cut before message_delta
    reports no output tokens (not 1), a whole one reports message_delta's cumulative count."""
    body = read_fixture("real/anthropic-text.sse")
    cut = body[: body.index(b"event: message_delta")]
    _, truncated = run_monitor([cut], route="anthropic.messages")
    assert truncated.outcome is Outcome.TRUNCATED
    assert (truncated.input_tokens, truncated.output_tokens) == (19, None)
    _, whole = run_monitor([body], route="anthropic.messages")
    assert (whole.input_tokens, whole.output_tokens) == (19, 9)
