"""The GenAI client metrics, the HTTP status on the stream counter, the histograms' budget and
their exemplars: ``Telemetry`` driven with real reports and read back through a real SDK.

The neighbours themselves (openai-v2, anthropic's built-in tracing) are installed and checked end
to end in ``tests/instrumentation/test_neighbours.py``; here each rule is checked on its own.
"""

from __future__ import annotations

import pytest
from opentelemetry import trace

from otelsse import semconv
from otelsse._monitor import Outcome, StreamError, StreamMonitor, StreamReport
from otelsse._telemetry import CallFacts, Telemetry, span_attributes
from tests._otel import Telemetry as SDK

# Two text deltas a second apart, then usage and the terminal.
BODY = (
    b'data: {"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"role":"assistant"},'
    b'"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"content":"a"},'
    b'"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"content":"b"},'
    b'"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","model":"m-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":12,"completion_tokens":5}}\n\ndata: [DONE]\n\n',
)
LEGACY = semconv.GENAI_METRICS_LEGACY
LATEST = semconv.GENAI_METRICS_LATEST


def chat_report() -> StreamReport:
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    for moment, piece in zip((0.5, 1.0, 2.0, 3.0), BODY, strict=True):
        monitor.feed(piece, moment)
    return monitor.close(3.5)


@pytest.fixture
def sdk() -> SDK:
    return SDK()


def names(table: dict[str, tuple[semconv.MetricSpec, ...]], *measures: str) -> set[str]:
    return {spec.name for measure in measures for spec in table[measure]}


def genai_points(sdk: SDK) -> dict[str, list[tuple[dict[str, object], float, float | None]]]:
    found: dict[str, list[tuple[dict[str, object], float, float | None]]] = {}
    for point in sdk.points():
        if point.metric in semconv.GENAI_NAMES:
            found.setdefault(point.metric, []).append((point.attributes, point.value, point.sum))
    return found


def test_first_output_is_the_first_content_not_the_first_event() -> None:
    report = chat_report()
    assert report.time_to_first_event == 0.5  # the role chunk
    assert report.time_to_first_output == 1.0  # "a"
    assert report.time_per_output_chunk == 1.0  # "b" a second later
    assert report.output_delta_count == 2
    attributes = span_attributes(report)
    assert attributes[semconv.TIME_TO_FIRST_OUTPUT] == 1.0
    assert attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == 1.0
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"


def test_a_stream_without_output_has_no_output_timings() -> None:
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    monitor.feed(BODY[0], 0.5)
    report = monitor.close(1.0, error="transport")
    assert (report.time_to_first_output, report.time_per_output_chunk) == (None, None)
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in span_attributes(report)


def test_the_legacy_genai_metrics_of_a_call(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    telemetry.record_metrics(chat_report(), CallFacts("api.example", "gpt-x"))
    call = {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "gpt-x",
        semconv.SERVER_ADDRESS: "api.example",
    }
    assert genai_points(sdk) == {
        "gen_ai.client.operation.duration": [(call, 1, 3.5)],
        "gen_ai.client.operation.time_to_first_chunk": [(call, 1, 1.0)],
        "gen_ai.client.operation.time_per_output_chunk": [(call, 1, 1.0)],
        "gen_ai.client.token.usage": [
            ({**call, semconv.GEN_AI_TOKEN_TYPE: "input"}, 1, 12),
            ({**call, semconv.GEN_AI_TOKEN_TYPE: "output"}, 1, 5),
        ],
    }
    buckets = {p.metric: p.bucket_bounds for p in sdk.points() if p.metric in semconv.GENAI_NAMES}
    assert buckets["gen_ai.client.operation.duration"] == semconv.GENAI_DURATION_BUCKETS
    assert buckets["gen_ai.client.token.usage"] == semconv.GENAI_TOKEN_BUCKETS


def test_opting_in_to_the_latest_names_emits_those_instead(sdk: SDK) -> None:
    telemetry = Telemetry(
        sdk.tracer_provider, sdk.meter_provider, semconv_opt_in="http, gen_ai_latest_experimental"
    )
    telemetry.record_metrics(chat_report(), CallFacts("api.example", "gpt-x"))
    found = genai_points(sdk)
    assert set(found) == names(LATEST, *semconv.GENAI_MEASURES)
    assert found["gen_ai.client.inference.usage.input_tokens"][0][1] == 12
    assert found["gen_ai.client.inference.usage.output_tokens"][0][1] == 5
    assert semconv.genai_metrics("gen_ai_latest") is LEGACY  # only the exact value opts in


def test_a_failed_call_has_error_type_on_its_duration_only(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    monitor.feed(BODY[0] + BODY[1], 1.0)
    telemetry.record_metrics(monitor.close(2.0, error="transport"), CallFacts("h", "gpt-x"))
    found = genai_points(sdk)
    ((duration, _, _),) = found["gen_ai.client.operation.duration"]
    assert duration[semconv.ERROR_TYPE] == "truncated"
    ((first_chunk, _, _),) = found["gen_ai.client.operation.time_to_first_chunk"]
    assert semconv.ERROR_TYPE not in first_chunk
    assert "gen_ai.client.token.usage" not in found  # no final usage arrived


@pytest.mark.parametrize(
    ("close", "outcome"),
    [
        (None, Outcome.TERMINAL_MISSING),  # the body ended cleanly without data: [DONE]
        ("cancelled", Outcome.COMPLETE),  # the application closed it after the final stop
    ],
)
def test_a_whole_answer_without_its_end_marker_is_a_call_that_did_not_fail(
    sdk: SDK, close: StreamError | None, outcome: Outcome
) -> None:
    """Every choice finished and the usage came, then no ``[DONE]``: not an error, so no
    ``error.type`` on the call's duration, and its usage and first chunk are counted."""
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    for moment, piece in zip((0.5, 1.0, 2.0, 3.0), BODY, strict=True):
        monitor.feed(piece.removesuffix(b"data: [DONE]\n\n"), moment)
    report = monitor.close(3.5, error=close)
    assert (report.outcome, report.terminal_seen) == (outcome, False)
    telemetry.record_metrics(report, CallFacts("h", "gpt-x"))
    found = genai_points(sdk)
    ((duration, count, _),) = found["gen_ai.client.operation.duration"]
    assert count == 1
    assert semconv.ERROR_TYPE not in duration
    assert found["gen_ai.client.operation.time_to_first_chunk"][0][2] == 1.0
    usage = {
        a[semconv.GEN_AI_TOKEN_TYPE]: total for a, _, total in found["gen_ai.client.token.usage"]
    }
    assert usage == {"input": 12, "output": 5}


@pytest.mark.parametrize("scope", [*semconv.NEIGHBOURS, "some.other.genai"])
def test_what_a_neighbour_owns_is_left_to_it(sdk: SDK, scope: str) -> None:
    neighbour = semconv.NEIGHBOURS.get(scope)
    owned = semconv.UNKNOWN_NEIGHBOUR_OWNS if neighbour is None else neighbour.owns
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    report = chat_report()
    span = telemetry.start_span({})
    telemetry.end_span(span, report, {}, owned)
    telemetry.record_metrics(report, CallFacts("h", "gpt-x", owned=owned))
    emitted = set(genai_points(sdk))
    assert emitted == names(LEGACY, *(set(semconv.GENAI_MEASURES) - owned))
    attributes = sdk.stream_span().attributes or {}
    usage = {semconv.GEN_AI_USAGE_INPUT_TOKENS, semconv.GEN_AI_USAGE_OUTPUT_TOKENS}
    assert usage.isdisjoint(attributes)  # every neighbour owns usage: never counted twice
    first_chunk = semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
    assert (first_chunk in attributes) is (first_chunk not in owned)
    # otelsse's own facts are always there.
    assert attributes[semconv.OUTCOME] == "complete"
    assert attributes[semconv.TIME_TO_FIRST_OUTPUT] == 1.0
    assert sum(p.value for p in sdk.points(semconv.STREAMS.name)) == 1


def test_histograms_carry_route_provider_and_outcome_only(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    for host, model in (("a", "m1"), ("b", "m2"), ("c", "m3")):
        telemetry.record_metrics(chat_report(), CallFacts(host, model))
    for spec in semconv.METRICS:
        if spec.kind != "histogram":
            continue
        points = sdk.points(spec.name)
        assert [(p.attributes, p.value) for p in points] == [
            (
                {
                    semconv.ROUTE: "openai.chat_completions",
                    semconv.GEN_AI_PROVIDER_NAME: "openai",
                    semconv.OUTCOME: "complete",
                },
                3,
            )
        ], spec.name


@pytest.mark.parametrize(
    ("outcome", "status", "labelled"),
    [
        (Outcome.HTTP_ERROR, 503, 503),
        (Outcome.HTTP_ERROR, 401, 401),
        (Outcome.RATE_LIMITED, 429, 429),
        (Outcome.RATE_LIMITED, None, 429),  # a 429 by definition
        (Outcome.TRUNCATED, 200, None),  # a body outcome's 2xx says nothing
        (Outcome.TERMINAL_MISSING, 200, None),
        (Outcome.COMPLETE, 200, None),
    ],
)
def test_the_status_is_on_the_stream_counter_where_it_is_the_cause(
    sdk: SDK, outcome: Outcome, status: int | None, labelled: int | None
) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    report = StreamReport("openai.chat_completions", outcome, provider_name="openai")
    telemetry.record_metrics(report, CallFacts("h", "gpt-x", status))
    (counted,) = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert counted.attributes.get(semconv.HTTP_RESPONSE_STATUS_CODE) == labelled


def test_http_error_statuses_are_capped_and_the_outcome_survives(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    statuses = range(500, 500 + semconv.MAX_STATUS_CODES + 10)
    for status in statuses:
        report = StreamReport("openai.chat_completions", Outcome.HTTP_ERROR, provider_name="openai")
        telemetry.record_metrics(report, CallFacts("h", "gpt-x", status))
    counted = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert sum(p.value for p in counted) == len(statuses)
    assert {p.attributes[semconv.OUTCOME] for p in counted} == {"http_error"}
    labelled = {p.attributes.get(semconv.HTTP_RESPONSE_STATUS_CODE) for p in counted}
    assert labelled == {*range(500, 500 + semconv.MAX_STATUS_CODES), None}


def test_histogram_points_carry_an_exemplar_of_the_stream_span(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    span = telemetry.start_span({})
    report = chat_report()
    telemetry.end_span(span, report, {})
    telemetry.record_metrics(report, CallFacts(context=trace.set_span_in_context(span)))
    trace_id = span.get_span_context().trace_id
    data = sdk.reader.get_metrics_data()
    assert data is not None
    exemplars = {
        metric.name: [e.trace_id for p in metric.data.data_points for e in p.exemplars]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == semconv.STREAM_DURATION.name
    }
    assert exemplars == {semconv.STREAM_DURATION.name: [trace_id]}
