"""Metric cardinality stays inside the OpenTelemetry SDK's limit whatever the traffic.

The SDK keeps at most ``_DEFAULT_CARDINALITY_LIMIT`` attribute sets per instrument; any later
point lands in one ``otel.metric.overflow=true`` series that has lost every attribute, the
outcome included. So ``Telemetry`` is fed thousands of streams over every built-in route,
hundreds of hosts and models, a hundred stop reasons and every outcome, and read back through a
real SDK ``MeterProvider`` and ``InMemoryMetricReader``: no point may overflow, every
instrument stays within the worst case ``semconv.max_series`` documents (itself well inside the
SDK's limit), and every stream is still counted under its own outcome.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from opentelemetry.sdk.metrics._internal._view_instrument_match import (
    _DEFAULT_CARDINALITY_LIMIT,
)

from otelsse import semconv
from otelsse._monitor import Outcome, StreamReport
from otelsse._telemetry import OTHER, CallFacts, Telemetry
from otelsse.routes import AUTO, BUILT_IN
from tests._otel import Point
from tests._otel import Telemetry as SDK

OVERFLOW = "otel.metric.overflow"
OUTCOMES = list(Outcome)
#: Streams fed by the load test: every (route, outcome) pair many times over.
STREAMS = 6000
HOSTS = [f"host-{i}.example.test" for i in range(300)]
MODELS = [f"model-{i}" for i in range(300)]
STOP_REASONS = [f"stop-{i}" for i in range(100)]
#: What an MCP client's requests name (``Route.labels``): methods, and the tools of tools/call.
METHODS = [f"method-{i}" for i in range(300)]
TOOLS = [f"tool-{i}" for i in range(300)]
MCP = "mcp.streamable_http"
#: Statuses an http_error can have (a 429 is rate_limited).
HTTP_ERRORS = [status for status in range(400, 600) if status != 429]
#: Every instrument a stream can record: otelsse's and the GenAI client metrics (either set).
INSTRUMENTS = (*semconv.METRICS, *semconv.GENAI_METRICS)
Fed = list[tuple[StreamReport, CallFacts]]


def worst_case(spec: semconv.MetricSpec) -> int:
    return semconv.max_series(spec, routes=len(BUILT_IN), outcomes=len(Outcome))


def series_count(sdk: SDK, spec: semconv.MetricSpec) -> int:
    return len(sdk.points(spec.name))


def by(points: list[Point], key: str) -> Counter[object]:
    totals: Counter[object] = Counter()
    for point in points:
        totals[point.attributes.get(key)] += int(point.value)
    return totals


def report(rng: random.Random, outcome: Outcome) -> StreamReport:
    route = rng.choice(BUILT_IN)
    tool_calls = rng.randrange(4)
    return StreamReport(
        route.name,
        outcome,
        stop_reason=rng.choice([None, *STOP_REASONS]),
        provider_name=route.provider,
        operation_name=route.operation,
        duration=rng.random() * 60,
        time_to_first_event=rng.random(),
        time_to_first_output=rng.random(),
        time_per_output_chunk=rng.random() / 10,
        input_tokens=rng.randrange(10_000),
        output_tokens=rng.randrange(1_000),
        max_inter_event_gap=rng.random(),
        event_count=rng.randrange(500),
        bytes_received=rng.randrange(100_000),
        tool_call_count=tool_calls,
        tool_call_invalid_count=rng.randrange(tool_calls + 1),
        server_tool_call_count=rng.randrange(3),
        refusal=rng.random() < 0.1,
    )


def mcp_report(rng: random.Random) -> StreamReport:
    """A complete MCP stream (no provider, no operation)."""
    drawn = report(rng, Outcome.COMPLETE)
    return dataclasses.replace(drawn, route=MCP, provider_name=None, operation_name=None)


def call(rng: random.Random, stream: StreamReport) -> CallFacts:
    """A call to one of hundreds of hosts and models; an HTTP failure with any status; on the
    MCP route, a request naming one of hundreds of methods, or tools/call and one of hundreds
    of tools, or nothing (the GET stream)."""
    status = rng.choice(HTTP_ERRORS) if stream.outcome is Outcome.HTTP_ERROR else 200
    return CallFacts(rng.choice(HOSTS), rng.choice(MODELS), status, labels=labels(rng, stream))


def labels(rng: random.Random, stream: StreamReport) -> dict[str, str]:
    if stream.route != MCP:
        return {}
    kind = rng.randrange(3)
    if kind == 0:
        return {}
    if kind == 1:
        return {semconv.MCP_METHOD_NAME: rng.choice(METHODS)}
    return {semconv.MCP_METHOD_NAME: "tools/call", semconv.GEN_AI_TOOL_NAME: rng.choice(TOOLS)}


@pytest.fixture(scope="module", params=["legacy", "latest"])
def load(request: pytest.FixtureRequest) -> tuple[SDK, Fed]:
    """``STREAMS`` finished streams through one ``Telemetry``, round-robin over the outcomes,
    with either set of GenAI metric names."""
    sdk = SDK()
    opt_in = semconv.GENAI_LATEST if request.param == "latest" else None
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider, semconv_opt_in=opt_in)
    rng = random.Random(20261202)
    streams = [report(rng, OUTCOMES[i % len(OUTCOMES)]) for i in range(STREAMS)]
    fed = [(stream, call(rng, stream)) for stream in streams]
    # An MCP call of each kind first, while series keys are left (the load then takes them all,
    # whichever routes it draws): its labels are admitted like any key's.
    first = [
        (mcp_report(rng), CallFacts("mcp.example.test", labels=labels))
        for labels in (
            {semconv.MCP_METHOD_NAME: "tools/call", semconv.GEN_AI_TOOL_NAME: TOOLS[0]},
            {semconv.MCP_METHOD_NAME: METHODS[0]},
        )
    ]
    fed = first + fed
    for stream, facts in fed:
        telemetry.record_metrics(stream, facts)
    return sdk, fed


def test_the_documented_limit_is_the_sdk_default_and_every_worst_case_is_well_inside() -> None:
    assert semconv.SDK_CARDINALITY_LIMIT == _DEFAULT_CARDINALITY_LIMIT
    for spec in INSTRUMENTS:
        assert worst_case(spec) <= semconv.SDK_CARDINALITY_LIMIT * 2 // 3, spec.name
    # Registered routes add to the worst case, slowly: dozens still fit under the SDK's limit.
    for spec in INSTRUMENTS:
        with_many_routes = semconv.max_series(spec, routes=30, outcomes=len(Outcome))
        assert with_many_routes < semconv.SDK_CARDINALITY_LIMIT, spec.name


def test_no_point_overflows_and_every_instrument_stays_within_its_worst_case(
    load: tuple[SDK, Fed],
) -> None:
    sdk, fed = load
    assert [p for p in sdk.points() if OVERFLOW in p.attributes] == []
    for spec in INSTRUMENTS:
        assert series_count(sdk, spec) <= worst_case(spec), spec.name
    # The load really did exhaust every cap: the overflow values are in use.
    points = sdk.points(semconv.STREAMS.name)
    for key in (semconv.SERVER_ADDRESS, semconv.GEN_AI_REQUEST_MODEL, semconv.STOP_REASON):
        assert OTHER in {p.attributes.get(key) for p in points}, key
    # The route labels are in the admitted keys; past the keys' limit a key is its route's
    # overflow key, without them (their own cap: the test below).
    for key in (semconv.MCP_METHOD_NAME, semconv.GEN_AI_TOOL_NAME):
        assert {p.attributes.get(key) for p in points} - {None}, key
    overflow = [p for p in points if p.attributes.get(semconv.GEN_AI_REQUEST_MODEL) == OTHER]
    assert {p.attributes[semconv.ROUTE] for p in overflow} >= {MCP}
    assert not any(set(semconv.ROUTE_LABELS) & set(p.attributes) for p in overflow)
    # Statuses: only the first MAX_STATUS_CODES distinct ones ever label a point.
    labelled = {p.attributes.get(semconv.HTTP_RESPONSE_STATUS_CODE) for p in points}
    failed = [facts.status_code for stream, facts in fed if stream.outcome is Outcome.HTTP_ERROR]
    admitted = set(list(dict.fromkeys(failed))[: semconv.MAX_STATUS_CODES])
    assert len(set(failed)) > semconv.MAX_STATUS_CODES
    assert labelled - {None, 429} <= admitted
    assert len(labelled - {None, 429}) > semconv.MAX_STATUS_CODES // 2
    # And the GenAI metrics ride on the same admitted keys.
    genai = [p for p in sdk.points() if p.metric in semconv.GENAI_NAMES]
    assert OTHER in {p.attributes.get(semconv.GEN_AI_REQUEST_MODEL) for p in genai}


def test_every_stream_is_counted_under_its_own_outcome(
    load: tuple[SDK, Fed],
) -> None:
    sdk, fed = load
    expected = Counter(stream.outcome.value for stream, _ in fed)
    assert by(sdk.points(semconv.STREAMS.name), semconv.OUTCOME) == expected
    # The histograms count every stream by outcome too.
    assert by(sdk.points(semconv.STREAM_DURATION.name), semconv.OUTCOME) == expected
    assert by(sdk.points(semconv.STREAM_BYTES.name), semconv.OUTCOME) == expected
    # Every call on a route with a provider has one GenAI duration, failed ones their outcome.
    durations = [
        p for p in sdk.points() if p.metric in {"gen_ai.client.operation.duration",
                                                "gen_ai.client.inference.duration"}
    ]  # fmt: skip
    provided = [stream for stream, _ in fed if stream.provider_name]
    assert sum(p.value for p in durations) == len(provided)
    failed = Counter(
        stream.outcome.value
        for stream in provided
        if stream.outcome.value in semconv.ERROR_OUTCOMES
    )
    assert (
        by([p for p in durations if semconv.ERROR_TYPE in p.attributes], semconv.ERROR_TYPE)
        == failed
    )


def test_tool_calls_and_refusals_are_all_counted(
    load: tuple[SDK, Fed],
) -> None:
    sdk, fed = load
    tool_calls = sdk.points(semconv.TOOL_CALLS.name)
    assert by(tool_calls, semconv.TOOL_CALL_KIND) == {
        "client": sum(stream.tool_call_count for stream, _ in fed),
        "server": sum(stream.server_tool_call_count for stream, _ in fed),
    }
    client = [p for p in tool_calls if p.attributes[semconv.TOOL_CALL_KIND] == "client"]
    assert by(client, semconv.TOOL_CALL_VALID)[False] == sum(
        stream.tool_call_invalid_count for stream, _ in fed
    )
    refusals = sum(p.value for p in sdk.points(semconv.STREAM_REFUSALS.name))
    assert refusals == sum(stream.refusal for stream, _ in fed)


def test_active_streams_over_hundreds_of_hosts_stay_within_their_worst_case() -> None:
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    routes = [AUTO, *(route.name for route in BUILT_IN)]
    started = [
        {semconv.ROUTE: routes[i % len(routes)], semconv.SERVER_ADDRESS: HOSTS[i % len(HOSTS)]}
        for i in range(2 * len(HOSTS))
    ]
    for attributes in started:
        telemetry.stream_started(attributes)
    assert sdk.active_streams() == len(started)
    assert series_count(sdk, semconv.STREAMS_ACTIVE) <= worst_case(semconv.STREAMS_ACTIVE)
    # stream_finished takes the attributes stream_started took: each one lands where it began.
    for attributes in started:
        telemetry.stream_finished(attributes)
    assert {p.value for p in sdk.points(semconv.STREAMS_ACTIVE.name)} == {0}
    assert [p for p in sdk.points() if OVERFLOW in p.attributes] == []


def test_truncations_stay_visible_after_two_hundred_endpoint_and_model_pairs() -> None:
    """The original failure: 4 endpoints x 50 models of zero series passed the SDK's limit, so
    the truncations that followed were counted without any outcome."""
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    for host in HOSTS[:4]:
        for model in MODELS[:50]:
            complete = StreamReport(
                "openai.chat_completions",
                Outcome.COMPLETE,
                stop_reason="stop",
                provider_name="openai",
            )
            telemetry.record_metrics(complete, CallFacts(host, model))
    for i in range(10):
        truncated = StreamReport(
            "openai.chat_completions",
            Outcome.TRUNCATED,
            provider_name="openai",
        )
        telemetry.record_metrics(truncated, CallFacts(HOSTS[i % 4], MODELS[i]))
    assert [p for p in sdk.points() if OVERFLOW in p.attributes] == []
    assert sdk.streams_by_outcome()[Outcome.TRUNCATED.value] == 10


def test_zero_outcomes_only_for_the_first_series_keys_and_later_keys_keep_their_route() -> None:
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider, max_model_names=1000)
    extra = 10
    for i in range(semconv.MAX_SERIES_KEYS + extra):
        stream = StreamReport(
            "anthropic.messages",
            Outcome.TRUNCATED,
            provider_name="anthropic",
        )
        telemetry.record_metrics(stream, CallFacts("api.anthropic.test", MODELS[i]))
    points = sdk.points(semconv.STREAMS.name)
    zero_keys = {
        p.attributes[semconv.GEN_AI_REQUEST_MODEL]
        for p in points
        if p.attributes[semconv.OUTCOME] == Outcome.TIMEOUT.value  # alerted, never streamed
    }
    assert zero_keys == set(MODELS[: semconv.MAX_SERIES_KEYS])
    overflow = [p for p in points if p.attributes[semconv.GEN_AI_REQUEST_MODEL] == OTHER]
    assert [(p.attributes, p.value) for p in overflow] == [
        (
            {
                semconv.ROUTE: "anthropic.messages",
                semconv.SERVER_ADDRESS: OTHER,
                semconv.GEN_AI_PROVIDER_NAME: "anthropic",
                semconv.GEN_AI_REQUEST_MODEL: OTHER,
                semconv.OUTCOME: Outcome.TRUNCATED.value,
            },
            extra,
        )
    ]


def test_server_addresses_are_capped_like_model_names() -> None:
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider, max_server_addresses=3)
    for host in HOSTS[:5]:
        telemetry.record_metrics(StreamReport("generic", Outcome.EOF_UNVERIFIED), CallFacts(host))
        telemetry.stream_started({semconv.ROUTE: "generic", semconv.SERVER_ADDRESS: host})
    for spec in (semconv.STREAMS, semconv.STREAMS_ACTIVE):
        hosts = {p.attributes[semconv.SERVER_ADDRESS] for p in sdk.points(spec.name) if p.value}
        assert hosts == {*HOSTS[:3], OTHER}, spec.name


def test_route_labels_are_capped_like_model_names_and_left_off_the_overflow_key() -> None:
    sdk = SDK()
    telemetry = Telemetry(
        sdk.tracer_provider, sdk.meter_provider, max_model_names=3, max_server_addresses=1000
    )
    for tool in TOOLS[:5]:
        labels = {semconv.MCP_METHOD_NAME: "tools/call", semconv.GEN_AI_TOOL_NAME: tool}
        telemetry.record_metrics(StreamReport(MCP, Outcome.COMPLETE), CallFacts("h", labels=labels))
    points = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert {p.attributes[semconv.GEN_AI_TOOL_NAME] for p in points} == {*TOOLS[:3], OTHER}
    # Keys past the limit: one overflow key for the route, whatever labels each stream had.
    for i in range(semconv.MAX_SERIES_KEYS + 5):
        labels = {semconv.MCP_METHOD_NAME: "tools/list"} if i % 2 else {}
        telemetry.record_metrics(
            StreamReport(MCP, Outcome.TRUNCATED), CallFacts(HOSTS[i], labels=labels)
        )
    overflow = [
        p.attributes
        for p in sdk.points(semconv.STREAMS.name)
        if p.value and p.attributes.get(semconv.GEN_AI_REQUEST_MODEL) == OTHER
    ]
    assert overflow == [
        {
            semconv.ROUTE: MCP,
            semconv.SERVER_ADDRESS: OTHER,
            semconv.GEN_AI_REQUEST_MODEL: OTHER,
            semconv.OUTCOME: Outcome.TRUNCATED.value,
        }
    ]
