"""Telemetry from reports: sanitized span attributes, the span's end, the metric points.

``span_attributes`` is checked over every fixture and over streams whose every content field
carries a marker. ``Telemetry`` is driven with real ``StreamReport``s (from ``StreamMonitor`` over
small bodies) and read back through a real OpenTelemetry SDK (in-memory exporter and metric
reader); nothing is mocked. The names, units and buckets are compared with ``semconv``, the one
module that owns them.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from opentelemetry.trace import StatusCode

from otelsse import StreamFault, read_stream, semconv
from otelsse._monitor import Outcome, StreamMonitor, StreamReport
from otelsse._telemetry import OTHER, CallFacts, Telemetry, span_attributes
from tests._fixtures import fixture_names, read_fixture
from tests._helpers import run_monitor
from tests._otel import Telemetry as SDK

# -- span attributes ----------------------------------------------------------------------------

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
    assert MARKER not in repr(span_attributes(report))
    assert MARKER not in repr(report)
    with pytest.raises(StreamFault) as caught:
        read_stream([body], accept_stop_reasons=[])
    assert MARKER not in str(caught.value)
    assert MARKER not in repr(caught.value)


@pytest.mark.parametrize("name", fixture_names())
def test_attributes_use_only_contract_names_and_valid_types(name: str) -> None:
    _, report = run_monitor([read_fixture(name)])
    attributes = span_attributes(report)
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
    assert span_attributes(cut)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("error",)
    assert span_attributes(whole)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)


def test_provider_sent_span_values_are_cut_to_their_documented_lengths() -> None:
    huge = "x" * 1_000_000
    report = StreamReport(
        "openai.chat_completions",
        Outcome.PROVIDER_ERROR,
        terminal_seen=True,
        stop_reason=huge,
        finish_reasons=(huge,) * 80_001,
        provider_error_code=huge,
        provider_name="openai",
        response_model=huge,
        response_id=huge,
    )
    attributes = span_attributes(report)
    lengths = {
        key: len(str(attributes[key]))
        for key in (
            semconv.STOP_REASON,
            semconv.PROVIDER_ERROR_CODE,
            semconv.GEN_AI_RESPONSE_MODEL,
            semconv.GEN_AI_RESPONSE_ID,
        )
    }
    assert lengths == {
        semconv.STOP_REASON: semconv.MAX_CODE_CHARS,
        semconv.PROVIDER_ERROR_CODE: semconv.MAX_CODE_CHARS,
        semconv.GEN_AI_RESPONSE_MODEL: semconv.MAX_IDENTIFIER_CHARS,
        semconv.GEN_AI_RESPONSE_ID: semconv.MAX_IDENTIFIER_CHARS,
    }
    reasons = attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]
    assert isinstance(reasons, tuple)
    assert len(reasons) == semconv.MAX_FINISH_REASONS
    assert {len(reason) for reason in reasons} == {semconv.MAX_CODE_CHARS}


def test_cut_finish_reasons_of_a_stream_that_ended_early_still_end_with_error() -> None:
    report = StreamReport(
        "openai.chat_completions",
        Outcome.TRUNCATED,
        finish_reasons=("stop",) * 80_001,
        provider_name="openai",
    )
    reasons = span_attributes(report)[semconv.GEN_AI_RESPONSE_FINISH_REASONS]
    assert reasons == ("stop",) * (semconv.MAX_FINISH_REASONS - 1) + ("error",)


def test_route_profile_server_tool_calls_and_refusal_on_the_span() -> None:
    plain = StreamReport("openai.chat_completions", Outcome.COMPLETE)
    attributes = span_attributes(plain)
    # Counts and flags are always present, like the other counts and terminal_seen.
    assert attributes[semconv.SERVER_TOOL_CALL_COUNT] == 0
    assert attributes[semconv.REFUSAL] is False
    assert semconv.ROUTE_PROFILE not in attributes
    profiled = dataclasses.replace(
        plain, route_profile="eof_after_finish", server_tool_call_count=2, refusal=True
    )
    attributes = span_attributes(profiled)
    assert attributes[semconv.ROUTE_PROFILE] == "eof_after_finish"
    assert attributes[semconv.SERVER_TOOL_CALL_COUNT] == 2
    assert attributes[semconv.REFUSAL] is True


# -- the span and the metrics ------------------------------------------------------------------


def chat_body(model: str = "m-1", reason: str = "stop") -> bytes:
    return (
        b'data: {"id":"c1","model":"%s","choices":[{"index":0,"delta":{"content":"hi"},'
        b'"finish_reason":null}]}\n\n'
        b'data: {"id":"c1","model":"%s","choices":[{"index":0,"delta":{},'
        b'"finish_reason":"%s"}]}\n\n'
        b"data: [DONE]\n\n" % (model.encode(), model.encode(), reason.encode())
    )


def report_of(body: bytes, route: str = "openai.chat_completions", **close: object) -> StreamReport:
    monitor = StreamMonitor(route, started_at=0.0)
    monitor.feed(body, 0.25)
    return monitor.close(0.5, **close)  # type: ignore[arg-type]


@pytest.fixture
def sdk() -> SDK:
    return SDK()


def facts(model: str | None = "m-1", status: int | None = None, **more: object) -> CallFacts:
    """The call around a report: its server, its request model and its status."""
    return CallFacts("127.0.0.1", model, status, **more)  # type: ignore[arg-type]


def record(
    sdk: SDK, report: StreamReport, call: CallFacts | None = None, **options: int
) -> Telemetry:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider, **options)
    call = call or facts()
    span = telemetry.start_span({})
    telemetry.end_span(span, report, {semconv.SERVER_ADDRESS: "127.0.0.1"}, call.owned)
    telemetry.record_metrics(report, call)
    return telemetry


def test_every_metric_has_the_name_unit_and_buckets_of_semconv(sdk: SDK) -> None:
    body = (
        b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},'
        b'"finish_reason":null}]}\n\n'
        b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{},'
        b'"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n'
    )
    telemetry = record(sdk, report_of(body))
    # and a rate-limited call, whose status is on its counter point
    telemetry.record_metrics(StreamReport("openai.chat_completions", Outcome.RATE_LIMITED), facts())
    # and a call whose route labels its request (MCP's tools/call; with a tool call, as a route
    # of your own with labels may have), whose labels are in its series key
    labels = {semconv.MCP_METHOD_NAME: "tools/call", semconv.GEN_AI_TOOL_NAME: "add"}
    labelled = StreamReport("mcp.streamable_http", Outcome.COMPLETE, tool_call_count=1)
    telemetry.record_metrics(labelled, facts(None, labels=labels))
    telemetry.stream_started({semconv.ROUTE: "generic"})
    telemetry.count_error(ValueError(), "feed")
    points = sdk.points()
    exported = {p.metric: p for p in points}
    # The stream had no usage: every GenAI metric but token usage.
    genai = semconv.GENAI_METRICS_LEGACY
    expected = [
        spec for measure, specs in genai.items() if measure != "token_usage" for spec in specs
    ]
    assert set(exported) == {spec.name for spec in (*semconv.METRICS, *expected)}
    for spec in (*semconv.METRICS, *expected):
        assert exported[spec.name].unit == spec.unit, spec.name
        if spec.kind == "histogram":
            assert exported[spec.name].bucket_bounds == spec.buckets, spec.name
    # The dashboards and alerts select on these keys: semconv must list every one a point carries.
    carried: dict[str, set[str]] = {spec.name: set() for spec in (*semconv.METRICS, *expected)}
    for point in points:
        carried[point.metric] |= set(point.attributes)
    for spec in (*semconv.METRICS, *expected):
        assert carried[spec.name] <= set(spec.attributes), spec.name
    assert carried[semconv.STREAMS.name] == set(semconv.STREAMS.attributes)
    assert carried[semconv.TOOL_CALLS.name] == set(semconv.TOOL_CALLS.attributes)


def test_span_carries_the_report_attributes_and_ends_once(sdk: SDK) -> None:
    report = report_of(chat_body())
    record(sdk, report)
    span = sdk.stream_span()
    assert span.end_time is not None
    attributes = dict(span.attributes or {})
    assert attributes == {**span_attributes(report), semconv.SERVER_ADDRESS: "127.0.0.1"}
    assert attributes[semconv.OUTCOME] == "complete"
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize(
    ("close", "outcome", "status"),
    [
        ({"error": "transport"}, "truncated", StatusCode.ERROR),
        ({"error": "timeout"}, "timeout", StatusCode.ERROR),
        ({"error": "cancelled"}, "cancelled", StatusCode.UNSET),
    ],
)
def test_status_is_error_only_for_server_side_outcomes(
    sdk: SDK, close: dict[str, str], outcome: str, status: StatusCode
) -> None:
    record(sdk, report_of(chat_body()[:40], **close))
    span = sdk.stream_span()
    assert span.attributes is not None
    assert span.attributes[semconv.OUTCOME] == outcome
    assert span.status.status_code is status
    if status is StatusCode.ERROR:
        assert span.status.description == outcome  # the outcome name, never a message
        assert span.attributes[semconv.ERROR_TYPE] == outcome
    else:
        assert semconv.ERROR_TYPE not in span.attributes


#: chat_body()'s whole answer without its end marker.
ANSWER = chat_body().removesuffix(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("body", "close", "outcome", "stop", "terminal_seen"),
    [
        # The body ended cleanly after every finish_reason: the answer is whole, unverified.
        (ANSWER, {}, "terminal_missing", "stop", False),
        # The application closed it after the final stop, the marker unread: judged by the stop.
        (ANSWER, {"error": "cancelled"}, "complete", "stop", False),
        (
            chat_body(reason="length").removesuffix(b"data: [DONE]\n\n"),
            {"error": "cancelled"},
            "incomplete",
            "length",
            False,
        ),
        # ... or right after the marker's line, before the blank line: the marker was read.
        (ANSWER + b"data: [DONE]\n", {"error": "cancelled"}, "complete", "stop", True),
        # Before the final stop it is the application's own stop.
        (chat_body()[:40], {"error": "cancelled"}, "cancelled", None, False),
    ],
)
def test_a_whole_answer_or_the_applications_close_is_not_an_error_however_it_ended(
    sdk: SDK,
    body: bytes,
    close: dict[str, str],
    outcome: str,
    stop: str | None,
    terminal_seen: bool,
) -> None:
    record(sdk, report_of(body, **close))
    span = sdk.stream_span()
    assert span.attributes is not None
    assert span.attributes[semconv.OUTCOME] == outcome
    assert span.attributes[semconv.TERMINAL_SEEN] is terminal_seen
    assert span.attributes.get(semconv.STOP_REASON) == stop
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.ERROR_TYPE not in span.attributes
    # Counted under its outcome with the stop that came (the dashboards break it down so).
    (counted,) = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert counted.attributes[semconv.OUTCOME] == outcome
    assert counted.attributes.get(semconv.STOP_REASON) == stop


def test_internal_error_is_not_a_server_error() -> None:
    assert Outcome.INTERNAL_ERROR.value not in semconv.ERROR_OUTCOMES
    not_errors = {"complete", "incomplete", "cancelled", "eof_unverified", "terminal_missing"}
    assert not_errors.isdisjoint(semconv.ERROR_OUTCOMES)
    assert not_errors | {Outcome.INTERNAL_ERROR.value} | semconv.ERROR_OUTCOMES == {
        outcome.value for outcome in Outcome
    }


def test_the_outcome_series_alerts_read_exist_at_zero_after_the_first_stream(sdk: SDK) -> None:
    """And only they: a series no alert reads appears with its first count."""
    record(sdk, report_of(chat_body()))
    totals = sdk.streams_by_outcome()
    assert totals == {outcome: 0 for outcome in semconv.ALERTED_OUTCOMES} | {"complete": 1}
    zero = [p for p in sdk.points(semconv.STREAMS.name) if p.value == 0]
    # The zero series carry the stream's series labels and no stop reason; a 429 is always one.
    assert {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in zero} == {"m-1"}
    assert all(semconv.STOP_REASON not in p.attributes for p in zero)
    statuses = {
        p.attributes[semconv.OUTCOME]: p.attributes.get(semconv.HTTP_RESPONSE_STATUS_CODE)
        for p in zero
    }
    assert statuses == {
        outcome: 429 if outcome == Outcome.RATE_LIMITED.value else None
        for outcome in semconv.ALERTED_OUTCOMES
    }
    # Of the tool calls, the invalid ones an alert reads.
    tool_calls = [(p.attributes, p.value) for p in sdk.points(semconv.TOOL_CALLS.name)]
    assert [(a[semconv.TOOL_CALL_VALID], value) for a, value in tool_calls] == [(False, 0)]


def test_model_names_and_stop_reasons_are_capped(sdk: SDK) -> None:
    telemetry = Telemetry(
        sdk.tracer_provider, sdk.meter_provider, max_model_names=2, max_stop_reasons=1
    )
    for model, reason in (("a", "stop"), ("b", "other"), ("c", "stop"), ("a", "x" * 100)):
        report = report_of(chat_body(model, reason))
        telemetry.record_metrics(report, CallFacts(request_model=model))
    points = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in points} == {"a", "b", OTHER}
    assert {p.attributes[semconv.STOP_REASON] for p in points} == {"stop", OTHER}


def test_long_provider_values_are_cut_before_they_become_labels(sdk: SDK) -> None:
    record(sdk, report_of(chat_body()), facts("m" * 500))
    models = {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in sdk.points("otelsse.streams")}
    assert models == {"m" * 64}


def test_active_streams_go_up_and_down_with_the_same_attributes(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    active = {semconv.ROUTE: "openai.chat_completions", semconv.SERVER_ADDRESS: "h"}
    telemetry.stream_started(active)
    assert sdk.active_streams() == 1
    telemetry.stream_finished(active)
    assert sdk.active_streams() == 0


def test_a_contained_error_is_counted_each_time_and_logged_once_without_its_message(
    sdk: SDK, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    caplog.set_level(logging.DEBUG, logger="otelsse")
    for _ in range(3):
        telemetry.count_error(ValueError("secret content"), "feed")
    assert sdk.instrumentation_errors() == 3
    counted = sdk.errors_by_stage()
    # Every stage's series exists from the start (at 0), so the first failure is an increase.
    stages = semconv.INSTRUMENTATION_STAGES
    assert counted == {stage: 3 if stage == "feed" else 0 for stage in stages}
    records = [r for r in caplog.records if r.name == "otelsse"]
    assert len(records) == 1
    assert "ValueError" in records[0].getMessage()
    assert "secret" not in caplog.text


def test_server_run_tool_calls_are_counted_apart_and_without_validity(sdk: SDK) -> None:
    report = StreamReport(
        "openai.responses",
        Outcome.COMPLETE,
        provider_name="openai",
        tool_call_count=3,
        tool_call_invalid_count=1,
        server_tool_call_count=2,
    )
    record(sdk, report)
    counted = {
        (p.attributes[semconv.TOOL_CALL_KIND], p.attributes.get(semconv.TOOL_CALL_VALID)): p.value
        for p in sdk.points(semconv.TOOL_CALLS.name)
        if p.value
    }
    assert counted == {("client", True): 2, ("client", False): 1, ("server", None): 2}
    assert set(semconv.TOOL_CALL_KINDS) == {"client", "server"}


def test_refusals_are_counted_per_series_key_from_zero(sdk: SDK) -> None:
    report = StreamReport(
        "anthropic.messages", Outcome.INCOMPLETE, provider_name="anthropic", response_model="c"
    )
    telemetry = record(sdk, report, facts("c"))
    series = {
        semconv.ROUTE: "anthropic.messages",
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.GEN_AI_PROVIDER_NAME: "anthropic",
        semconv.GEN_AI_REQUEST_MODEL: "c",
    }
    # Pre-created with the stream's series key, so the first refusal is an increase.
    assert [(p.attributes, p.value) for p in sdk.points(semconv.STREAM_REFUSALS.name)] == [
        (series, 0)
    ]
    for _ in range(2):
        telemetry.record_metrics(dataclasses.replace(report, refusal=True), facts("c"))
    assert [(p.attributes, p.value) for p in sdk.points(semconv.STREAM_REFUSALS.name)] == [
        (series, 2)
    ]


def test_open_server_run_calls_are_not_counted_as_invalid_client_calls(sdk: SDK) -> None:
    """A stream cut while a server-run call and a client call were both open."""

    def event(name: str, payload: dict[str, object]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

    def block(index: int, kind: str) -> bytes:
        start = {"type": kind, "id": f"t{index}", "name": "f", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": '{"q": '}
        return event("content_block_start", {"index": index, "content_block": start}) + event(
            "content_block_delta", {"index": index, "delta": delta}
        )

    body = event("message_start", {"message": {"id": "m", "model": "c"}})
    body += block(0, "server_tool_use") + block(1, "tool_use")
    monitor = StreamMonitor("anthropic.messages")
    monitor.feed(body)
    report = monitor.close()
    assert (report.tool_call_count, report.server_tool_call_count) == (1, 1)
    assert report.open_accumulator_count == 1
    record(sdk, report)
    counted = {
        (p.attributes[semconv.TOOL_CALL_KIND], p.attributes.get(semconv.TOOL_CALL_VALID)): p.value
        for p in sdk.points(semconv.TOOL_CALLS.name)
        if p.value
    }
    assert counted == {("client", False): 1, ("server", None): 1}
