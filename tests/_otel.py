"""A real OpenTelemetry SDK for instrumentation tests: in-memory spans and metric points.

``Telemetry.install()`` instruments otelsse against its own providers (never the globals);
``uninstall()`` undoes it. The ``otel`` fixture in ``conftest.py`` wraps both around one test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otelsse
from otelsse import semconv

__all__ = ["Point", "Telemetry", "attribute_values"]


@dataclass(frozen=True)
class Point:
    """One metric data point: the metric's name and unit, its attributes and its value."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    value: float  # a sum's value, a histogram's count
    sum: float | None = None  # a histogram's sum
    bucket_bounds: tuple[float, ...] = ()


@dataclass
class Telemetry:
    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def install(self, **options: Any) -> Telemetry:
        otelsse.instrument(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )
        return self

    def uninstall(self) -> None:
        otelsse.uninstrument()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # -- what was exported -----------------------------------------------------------------

    def spans(self, name: str | None = semconv.SPAN_NAME) -> list[ReadableSpan]:
        """Finished spans (only otelsse's stream spans unless ``name`` is None)."""
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def stream_span(self) -> ReadableSpan:
        """The one finished ``otelsse.stream`` span; fails unless there is exactly one."""
        spans = self.spans()
        assert len(spans) == 1, [dict(s.attributes or {}) for s in spans]
        return spans[0]

    def points(self, metric: str | None = None) -> list[Point]:
        data = self.reader.get_metrics_data()
        found: list[Point] = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for m in scope_metrics.metrics:
                    if metric is not None and m.name != metric:
                        continue
                    for p in m.data.data_points:
                        attributes = dict(p.attributes or {})
                        if hasattr(p, "bucket_counts"):
                            found.append(
                                Point(
                                    m.name, m.unit, attributes, p.count, p.sum,
                                    tuple(p.explicit_bounds),
                                )
                            )  # fmt: skip
                        else:
                            found.append(Point(m.name, m.unit, attributes, p.value))
        return found

    def streams_by_outcome(self) -> dict[str, float]:
        """``otelsse.streams`` summed per outcome (pre-created zero series included)."""
        totals: dict[str, float] = {}
        for p in self.points(semconv.STREAMS.name):
            outcome = p.attributes[semconv.OUTCOME]
            totals[outcome] = totals.get(outcome, 0) + p.value
        return totals

    def nonzero_outcomes(self) -> dict[str, float]:
        return {k: v for k, v in self.streams_by_outcome().items() if v}

    def active_streams(self) -> float:
        return sum(p.value for p in self.points(semconv.STREAMS_ACTIVE.name))

    def instrumentation_errors(self) -> float:
        return sum(p.value for p in self.points(semconv.INSTRUMENTATION_ERRORS.name))

    def errors_by_stage(self) -> dict[str, float]:
        """``otelsse.instrumentation.errors`` per stage (every stage, pre-created at 0)."""
        return {
            p.attributes[semconv.INSTRUMENTATION_STAGE]: p.value
            for p in self.points(semconv.INSTRUMENTATION_ERRORS.name)
        }


def attribute_values(spans: Iterable[ReadableSpan]) -> list[str]:
    """Every attribute value and event attribute of ``spans`` as text (for canary searches)."""
    texts: list[str] = []
    for span in spans:
        texts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        texts.append(span.name)
        texts.append(str(span.status.description))
        for event in span.events:
            texts.append(event.name)
            texts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
    return texts
