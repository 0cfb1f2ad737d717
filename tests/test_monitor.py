"""Each outcome (docs/users/outcomes.md) that the core can produce, from its own fixture.

``internal_error`` is the instrumentation's own failure and cannot come from the core.
"""

from __future__ import annotations

import datetime

import pytest

from otelsse import Limits, Outcome, StreamMonitor
from otelsse._core.http import retry_after, stream_violation
from tests._fixtures import EDGE_FIXTURES, read_fixture
from tests._helpers import run_monitor


def _local(name: str) -> bytes:
    return (EDGE_FIXTURES / name).read_bytes()


@pytest.mark.parametrize(
    ("fixture", "outcome"),
    [
        ("anthropic-tool-empty-input.sse", Outcome.COMPLETE),
        ("chat-ollama-reused-tool-index.sse", Outcome.COMPLETE),
        ("chat-cut-mid-utf8.sse", Outcome.TRUNCATED),
        ("chat-stop-without-done.sse", Outcome.TERMINAL_MISSING),
        ("chat-invalid-json-event.sse", Outcome.PAYLOAD_ERROR),
        ("chat-tool-arguments-two-values.sse", Outcome.PAYLOAD_ERROR),
        ("chat-invalid-utf8.sse", Outcome.DECODE_ERROR),
        ("anthropic-stop-without-stop-reason.sse", Outcome.PROTOCOL_ERROR),
        ("generic-clean-eof.sse", Outcome.EOF_UNVERIFIED),
    ],
)
def test_local_fixture_outcome(fixture: str, outcome: Outcome) -> None:
    _, report = run_monitor([_local(fixture)])
    assert report.outcome is outcome


def test_complete_stream_reports_terminal_stop_usage_and_identity() -> None:
    _, report = run_monitor([read_fixture("real/openai-chat-text-usage.sse")])
    assert report.outcome is Outcome.COMPLETE
    assert report.terminal_seen
    assert report.stop_reason == "stop"
    assert report.finish_reasons == ("stop",)
    assert (report.input_tokens, report.output_tokens) == (12, 5)
    assert report.response_model == "gpt-4-0613"
    assert report.provider_name == "openai"
    assert report.pending_line_chars == report.pending_event_chars == 0


def test_incomplete_is_a_proper_terminal_with_a_non_success_stop() -> None:
    _, report = run_monitor([read_fixture("real/vllm-chat-finish-length.sse")])
    assert report.outcome is Outcome.INCOMPLETE
    assert report.terminal_seen
    assert report.stop_reason == "length"


def test_invalid_tool_arguments_under_max_tokens_are_incomplete_not_payload_error() -> None:
    _, report = run_monitor(
        [read_fixture("synthetic/anthropic-max-tokens-truncated-tool-input.sse")]
    )
    assert report.outcome is Outcome.INCOMPLETE
    assert report.tool_call_invalid_count == 1


def test_provider_error_keeps_the_error_code_but_not_the_message() -> None:
    _, report = run_monitor([read_fixture("synthetic/anthropic-error-overloaded-midstream.sse")])
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.provider_error_code == "overloaded_error"
    assert "Overloaded" not in repr(report)


def test_error_object_before_done_is_provider_error_not_complete() -> None:
    _, report = run_monitor([read_fixture("synthetic/openai-chat-error-object-then-done.sse")])
    assert report.outcome is Outcome.PROVIDER_ERROR


_PARTIAL_CHAT = read_fixture("real/openai-chat-text.sse")[:700]


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, Outcome.TRUNCATED),
        ("transport", Outcome.TRUNCATED),
        ("timeout", Outcome.TIMEOUT),
        ("cancelled", Outcome.CANCELLED),
    ],
)
def test_how_an_unfinished_stream_ended_decides_its_outcome(error, outcome) -> None:  # type: ignore[no-untyped-def]
    _, report = run_monitor([_PARTIAL_CHAT], route="openai.chat_completions", error=error)
    assert report.outcome is outcome
    assert report.error == error


@pytest.mark.parametrize("error", ["transport", "timeout", "cancelled"])
def test_an_error_after_the_terminal_event_does_not_undo_completion(error) -> None:  # type: ignore[no-untyped-def]
    _, report = run_monitor([read_fixture("real/openai-chat-text.sse")], error=error)
    assert report.outcome is Outcome.COMPLETE


@pytest.mark.parametrize(
    ("status", "content_type", "outcome"),
    [
        (200, "text/html", Outcome.PROTOCOL_ERROR),  # a 2xx that is no stream
        (204, "text/event-stream", Outcome.PROTOCOL_ERROR),
        (429, "application/json", Outcome.RATE_LIMITED),  # the caller's quota
        (502, "text/html", Outcome.HTTP_ERROR),  # the server said no in HTTP's words
        (401, "text/event-stream", Outcome.HTTP_ERROR),
        (503, "text/event-stream", Outcome.HTTP_ERROR),
    ],
)
def test_a_response_refused_at_its_headers_keeps_its_outcome_whatever_its_body(
    status: int, content_type: str, outcome: Outcome
) -> None:
    violation = stream_violation(status, content_type)
    assert violation is not None
    monitor = StreamMonitor("openai.chat_completions")
    monitor.refuse(violation)
    # whatever arrives after (a body that even looks like a complete stream)
    monitor.feed(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    monitor.feed(b"data: [DONE]\n\n")
    report = monitor.close()
    assert report.outcome is outcome
    if outcome is Outcome.PROTOCOL_ERROR:
        assert report.anomalies == {violation: 1}


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": " 2.5 "}, 2.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # OpenAI's, finer, wins
        ({"retry-after": "Wed, 02 Dec 2026 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 02 Dec 2026 11:59:00 GMT"}, 0.0),  # a date past: now
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "99999999"}, None),  # not advice: a bug
        ({"retry-after": "soon"}, None),
        ({"retry-after": "Wed, 02 Dec 2026 12:00:30"}, None),  # no zone: not an HTTP-date
        ({}, None),
    ],
)
def test_retry_after_is_read_in_every_form_and_only_when_believable(
    headers: dict[str, str], seconds: float | None
) -> None:
    now = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc).timestamp()
    assert retry_after(headers, now) == seconds


def test_endless_line_is_buffer_limit_at_the_line_stage() -> None:
    monitor = StreamMonitor("openai.chat_completions", limits=Limits(max_line_bytes=1000))
    for _ in range(50):
        monitor.feed(b"data: " + b"x" * 100)
    report = monitor.close()
    assert report.outcome is Outcome.BUFFER_LIMIT
    assert report.buffer_limit_stage == "line"
    assert report.bytes_received == 50 * 106


def test_endless_event_is_buffer_limit_at_the_event_stage() -> None:
    monitor = StreamMonitor("generic", limits=Limits(max_event_bytes=1000))
    for _ in range(100):
        monitor.feed(b"data: short line\n")
    assert monitor.close().buffer_limit_stage == "event"


def test_oversized_tool_arguments_are_buffer_limit_at_the_accumulator_stage() -> None:
    body = _local("chat-tool-arguments-two-values.sse")
    _, report = run_monitor([body], route="auto")
    monitor = StreamMonitor("openai.chat_completions", limits=Limits(max_tool_argument_chars=4))
    monitor.feed(body)
    limited = monitor.close()
    assert report.buffer_limit_stage is None
    assert limited.outcome is Outcome.BUFFER_LIMIT
    assert limited.buffer_limit_stage == "accumulator"


def test_too_many_tool_calls_are_buffer_limit_at_the_accumulator_stage() -> None:
    monitor = StreamMonitor("openai.chat_completions", limits=Limits(max_tool_calls=1))
    monitor.feed(_local("chat-ollama-reused-tool-index.sse"))
    report = monitor.close()
    assert report.outcome is Outcome.BUFFER_LIMIT
    assert report.buffer_limit_stage == "accumulator"


def test_timings_come_from_the_timestamps_passed_in() -> None:
    body = read_fixture("real/openai-chat-text.sse")
    events = body.split(b"\n\n")
    monitor = StreamMonitor("openai.chat_completions", started_at=100.0)
    monitor.feed(events[0][:10], now=100.5)  # first byte, no event yet
    monitor.feed(events[0][10:] + b"\n\n", now=101.0)  # first event
    monitor.feed(b"\n\n".join(events[1:4]) + b"\n\n", now=101.25)
    monitor.feed(b"\n\n".join(events[4:]), now=104.0)
    report = monitor.close(now=105.0)
    assert report.time_to_first_byte == 0.5
    assert report.time_to_first_event == 1.0
    assert report.max_inter_event_gap == 2.75
    assert report.duration == 5.0
    assert report.outcome is Outcome.COMPLETE
