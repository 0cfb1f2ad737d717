"""End to end over OTLP: ``otelsse demo --otlp-endpoint`` reaches a real receiver.

The receivers (``tests/sre/_otlp.py``) run in this process and speak the real protocols: a grpcio
server with the OpenTelemetry collector services (gRPC), and an ``http.server`` accepting
protobuf POSTs on ``/v1/traces`` and ``/v1/metrics`` (HTTP). The demo runs as a user runs it,
in a subprocess with the SDK's own OTLP exporters. What arrives must be the demo's streams: one
``otelsse.stream`` span per stream with the outcome the metrics counted, and cumulative
``otelsse.streams`` points equal to the demo's printed summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otelsse import semconv
from tests._helpers import waited

from ._e2e import demo_process, wait_for_summary
from ._otlp import RECEIVERS, Received

#: End-to-end runs of the demo against real servers: out of the fast loop.
pytestmark = pytest.mark.e2e

STREAMS = 16


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@pytest.fixture(scope="module", params=list(RECEIVERS))
def exported(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, Any], Received]]:
    protocol = request.param
    tmp = tmp_path_factory.mktemp("otlp")
    with RECEIVERS[protocol]() as (endpoint, received):
        arguments = ("--streams", str(STREAMS), "--speed", "4", "--seed", "3")
        arguments += ("--otlp-endpoint", endpoint, "--otlp-protocol", protocol)
        with demo_process(Path(tmp), *arguments) as (demo, summary_file):
            summary = wait_for_summary(demo, summary_file, tmp)
            # Without --prometheus-port the demo exits by itself, after flushing its exporters.
            assert waited(demo.wait, 60) == 0
        yield summary, received


def test_one_stream_span_per_stream_with_the_outcomes_the_summary_counted(exported: Any) -> None:
    summary, received = exported
    spans = [
        (resource_spans.resource, scope_spans.scope, span)
        for request in received.traces
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    assert len(spans) == summary["total"] == STREAMS
    outcomes: Counter[tuple[str, str]] = Counter()
    for resource, scope, span in spans:
        assert _attributes(resource.attributes)["service.name"] == "otelsse-demo"
        assert (scope.name, span.name) == ("otelsse", semconv.SPAN_NAME)
        attributes = _attributes(span.attributes)
        assert attributes[semconv.REQUEST_ID].startswith("req_demo_")
        outcomes[attributes[semconv.ROUTE], attributes[semconv.OUTCOME]] += 1
    expected = Counter(
        {
            (route, outcome): count
            for route, counts in summary["streams"].items()
            for outcome, count in counts.items()
            if count
        }
    )
    assert outcomes == expected
    assert len({outcome for _, outcome in outcomes}) >= 3  # the mix really was mixed


def test_the_last_cumulative_metrics_equal_the_summary(exported: Any) -> None:
    summary, received = exported
    streams: Counter[tuple[str, str]] = Counter()
    names = set()
    for request in received.metrics:  # in order: the last export holds the final totals
        exported_now: Counter[tuple[str, str]] = Counter()
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                assert scope_metrics.scope.name == "otelsse"
                for metric in scope_metrics.metrics:
                    names.add((metric.name, metric.unit))
                    if metric.name != semconv.STREAMS.name:
                        continue
                    assert metric.sum.is_monotonic
                    for point in metric.sum.data_points:
                        # Several series (models, stop reasons) share a route and outcome.
                        attributes = _attributes(point.attributes)
                        key = (attributes[semconv.ROUTE], attributes[semconv.OUTCOME])
                        exported_now[key] += int(point.as_int)
        if exported_now:
            streams = exported_now
    # Everything otelsse defines arrives under its OTel name and unit (the suffixes are
    # Prometheus'), including the error counter pre-created at 0, and the GenAI client metrics
    # by their default names.
    genai = [spec for specs in semconv.GENAI_METRICS_LEGACY.values() for spec in specs]
    assert names == {(spec.name, spec.unit) for spec in (*semconv.METRICS, *genai)}
    assert dict(streams) == {
        (route, outcome): count
        for route, counts in summary["streams"].items()
        for outcome, count in counts.items()
    }
