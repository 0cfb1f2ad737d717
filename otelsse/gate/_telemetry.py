"""The tool gate's telemetry: one ``otelsse.gate`` span per attempt (linked to the run's earlier
attempts), one ``otelsse.tool_call`` span per call under it, and ``otelsse.gate.calls`` by final
state, tool name (capped) and error class. It reads the gate's records: ids, names, sizes and
statuses, never arguments or results.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .. import semconv
from .._monitor import Outcome
from .._telemetry import (
    AttributeValue,
    FirstSeen,
    MetricAttributes,
    capped,
    counter,
    cut,
    instruments,
)
from ._ledger import SpanIds
from ._records import GateCall, GateResult

__all__ = ["GateTelemetry"]


class GateTelemetry:
    """The tool gate's spans and counter: one ``otelsse.gate`` span per attempt (linked to the
    run's earlier attempts), one ``otelsse.tool_call`` span per call under it, and
    ``otelsse.gate.calls`` by final state, tool name (capped) and error class. Ids, names,
    sizes and statuses only."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer, meter = instruments(tracer_provider, meter_provider)
        self._calls = counter(meter, semconv.GATE_CALLS)

    def start_attempt(self, run_id: str, attempt: int, earlier: Iterable[SpanIds]) -> Span:
        """The span of attempt number ``attempt`` of ``run_id``, linked to the spans of the
        run's ``earlier`` attempts."""
        s = semconv
        links = [
            trace.Link(
                trace.SpanContext(trace_id, span_id, is_remote=True), {s.GATE_RUN_ID: run_id}
            )
            for trace_id, span_id in earlier
        ]
        return self.tracer.start_span(
            s.GATE_SPAN_NAME,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={s.GATE_RUN_ID: run_id, s.GATE_ATTEMPT: attempt},
        )

    @staticmethod
    def current(span: Span) -> AbstractContextManager[Span]:
        return trace.use_span(span, end_on_exit=False)

    def end_attempt(self, span: Span, calls: Iterable[GateCall], result: GateResult | None) -> None:
        """Record each of the attempt's ``calls`` and end its span; ``result`` None: the attempt
        was cut short (an exception left the gate)."""
        s = semconv
        context = trace.set_span_in_context(span)
        for record in calls:
            self._record_call(record, context)
        if result is not None:
            report = result.report
            attributes: dict[str, AttributeValue] = {}
            if report is not None:
                attributes[s.ROUTE] = report.route
                attributes[s.OUTCOME] = report.outcome.value
            if result.response_id is not None:
                attributes[s.GEN_AI_RESPONSE_ID] = result.response_id[: s.MAX_IDENTIFIER_CHARS]
            if result.fault is not None:
                attributes[s.GATE_FAULT] = result.fault
                span.set_status(Status(StatusCode.ERROR))
                attributes[s.ERROR_TYPE] = result.fault
            span.set_attributes(attributes)
        else:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute(s.ERROR_TYPE, Outcome.CANCELLED.value)
        span.end()

    def _record_call(self, record: GateCall, context: Context) -> None:
        s = semconv
        state = record.state.value
        attributes: dict[str, AttributeValue] = {
            s.GATE_RUN_ID: record.run_id,
            s.GATE_ATTEMPT: record.attempt,
            s.TOOL_CALL_STATE: state,
            s.TOOL_CALL_JSON_STATUS: record.json_status,
            s.TOOL_CALL_TRAILING_DATA: record.trailing_data,
            s.TOOL_CALL_SCHEMA_STATUS: record.schema_status,
        }
        optional = {
            s.GEN_AI_TOOL_NAME: cut(record.tool_name, s.MAX_CODE_CHARS),
            s.GEN_AI_TOOL_CALL_ID: cut(record.call_id, s.MAX_IDENTIFIER_CHARS),
            s.GEN_AI_RESPONSE_ID: cut(record.response_id, s.MAX_IDENTIFIER_CHARS),
            s.TOOL_CALL_POLICY: record.policy_decision,
            s.TOOL_CALL_EXECUTION: record.execution_status,
            s.ERROR_TYPE: cut(record.exception_type or record.error_class, s.MAX_CODE_CHARS),
        }
        attributes.update({key: value for key, value in optional.items() if value is not None})
        if record.buffer_bytes is not None:
            attributes[s.TOOL_CALL_BYTES] = record.buffer_bytes
        span = self.tracer.start_span(
            s.TOOL_CALL_SPAN_NAME,
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=record.opened_at,
        )
        if record.state.value in _FAILED_CALL_STATES:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=record.finished_at)
        tool = capped(_GATE_TOOL_NAMES, record.tool_name or "")
        point: MetricAttributes = {s.TOOL_CALL_STATE: state, s.GEN_AI_TOOL_NAME: tool}
        if record.error_class is not None:
            point[s.ERROR_TYPE] = record.error_class
        self._calls.add(1, point)


#: Shared by every gate of the process: the cap bounds the counter's series, not one gate's.
_GATE_TOOL_NAMES = FirstSeen(semconv.DEFAULT_MAX_TOOL_NAMES)

#: Final states that mean something went wrong (a denial or a pending approval is the policy
#: working; a replay is the ledger working).
_FAILED_CALL_STATES = frozenset({"quarantined", "execution_failed", "needs_reconciliation"})
