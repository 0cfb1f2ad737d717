"""What the instrumented examples share: the command line, and the OpenTelemetry SDK set-up an
application does once at start-up before calling ``otelsse.instrument()``.

Spans go to the console, one JSON line each (their name, ids, status and attributes), or with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set (e.g. the compose stack's collector, http://localhost:4317),
spans and metrics go there over OTLP/gRPC instead.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

import otelsse

#: How the fake provider (``otelsse demo --provider-only``) can end a stream.
SCENARIOS = (
    "complete", "tool_call", "tool_call_invalid", "incomplete", "truncated", "provider_error",
    "timeout", "rate_limited", "overloaded", "unauthorized", "bad_gateway", "gzip", "endless_line",
    "clean_cut", "no_terminal",
)  # fmt: skip
#: The clients' read timeout: shorter than the fake provider's 6 s stall on ``timeout``.
TIMEOUT = 2.0


def parse_args(description: str) -> tuple[str, dict[str, str]]:
    """The fake provider's base URL (``$OTELSSE_DEMO_URL``) and the headers picking its scenario."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenario", choices=SCENARIOS, help="how the fake provider ends each stream"
    )
    args = parser.parse_args()
    base_url = os.environ.get("OTELSSE_DEMO_URL", "http://127.0.0.1:8400").rstrip("/")
    headers = {"x-otelsse-demo-scenario": args.scenario} if args.scenario else {}
    return base_url, headers


def span_line(span: ReadableSpan) -> str:
    """A span as one JSON line: what the SDK's console exporter prints by default, 60-odd
    lines a span with its resource, is more than a reader of these examples wants."""
    context = span.get_span_context()
    line = {
        "name": span.name,
        "context": {
            "trace_id": f"0x{context.trace_id:032x}",
            "span_id": f"0x{context.span_id:016x}",
        },
        "parent_id": None if span.parent is None else f"0x{span.parent.span_id:016x}",
        "status": {"status_code": span.status.status_code.name},
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
        "links": [
            {
                "trace_id": f"0x{link.context.trace_id:032x}",
                "span_id": f"0x{link.context.span_id:016x}",
            }
            for link in span.links
        ],
    }
    return json.dumps(line) + os.linesep


def instrument(**options: Any) -> tuple[TracerProvider, MeterProvider]:
    """A minimal SDK, then otelsse on top of it (``options``: more of ``instrument()``'s);
    returns the providers (a ``ToolGate`` takes them too). They flush when the process exits."""
    resource = Resource.create({"service.name": "otelsse-examples"})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # The exporters read the endpoint (and headers, TLS...) from the environment.
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    else:
        # Synchronous, so each span prints the moment its stream ends.
        exporter = ConsoleSpanExporter(formatter=span_line)
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=readers, resource=resource)
    otelsse.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider, **options)
    return tracer_provider, meter_provider
