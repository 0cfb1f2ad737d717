"""From ``StreamReport`` to OpenTelemetry: span attributes, the instruments, the metric points.

Every name, unit, bucket boundary and cap comes from ``semconv``; this module decides what one
finished stream records and applies the caps (``span_attributes`` for the span, ``Telemetry``
for the span's end and the metrics). Nothing here ever sees content: it reads reports, whose
fields are counts, sizes, timings and provider-sent identifiers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import semconv
from ._monitor import Outcome, StreamReport
from ._version import __version__

__all__ = [
    "OTHER", "AttributeValue", "CallFacts", "FirstSeen", "MetricAttributes", "Telemetry",
    "capped", "counter", "cut", "histogram", "instruments", "span_attributes",
]  # fmt: skip

# Outcomes of an answer that reached its final stop, whether or not the terminal event came.
_ANSWER_ENDED = frozenset({Outcome.COMPLETE, Outcome.INCOMPLETE, Outcome.TERMINAL_MISSING})

MetricAttributes = dict[str, Any]
AttributeValue = str | bool | int | float | tuple[str, ...]

_LOG = logging.getLogger("otelsse")

#: The value a capped attribute takes once its limit of distinct values is reached.
OTHER = semconv.OVERFLOW_VALUE


def span_attributes(
    report: StreamReport, owned: frozenset[str] = frozenset()
) -> dict[str, AttributeValue]:
    """The sanitized span attributes of a report: counts, sizes, timings, ids, the
    stop reason and the outcome; never content. ``owned``: what a GenAI neighbour records for
    the same call (``semconv.NEIGHBOURS``), left to it."""
    s = semconv
    attributes: dict[str, AttributeValue] = {
        s.ROUTE: report.route,
        s.OUTCOME: report.outcome.value,
        s.TERMINAL_SEEN: report.terminal_seen,
        s.CHUNK_COUNT: report.chunk_count,
        s.BYTES_RECEIVED: report.bytes_received,
        s.DECODED_CHAR_COUNT: report.decoded_char_count,
        s.EVENT_COUNT: report.event_count,
        s.COMMENT_COUNT: report.comment_count,
        s.UNKNOWN_EVENT_COUNT: report.unknown_event_count,
        s.PENDING_LINE_CHARS: report.pending_line_chars,
        s.PENDING_EVENT_CHARS: report.pending_event_chars,
        s.OPEN_ACCUMULATOR_COUNT: report.open_accumulator_count,
        s.TOOL_CALL_COUNT: report.tool_call_count,
        s.TOOL_CALL_INVALID_COUNT: report.tool_call_invalid_count,
        s.SERVER_TOOL_CALL_COUNT: report.server_tool_call_count,
        s.REFUSAL: report.refusal,
        s.DECODE_ERROR_COUNT: report.decode_error_count,
        s.ANOMALY_COUNT: sum(report.anomalies.values()),
        s.OUTPUT_DELTA_COUNT: report.output_delta_count,
    }
    # Provider-sent strings are cut: a server can send a megabyte where a name belongs.
    optional: dict[str, str | int | float | None] = {
        s.ROUTE_PROFILE: report.route_profile,
        s.STOP_REASON: cut(report.stop_reason, s.MAX_CODE_CHARS),
        s.BUFFER_LIMIT_STAGE: report.buffer_limit_stage,
        s.PROVIDER_ERROR_CODE: cut(report.provider_error_code, s.MAX_CODE_CHARS),
        s.TIME_TO_FIRST_BYTE: report.time_to_first_byte,
        s.TIME_TO_FIRST_EVENT: report.time_to_first_event,
        s.TIME_TO_FIRST_OUTPUT: report.time_to_first_output,
        s.TIME_PER_OUTPUT_CHUNK: report.time_per_output_chunk,
        s.MAX_INTER_EVENT_GAP: report.max_inter_event_gap,
        s.DURATION: report.duration,
        s.GEN_AI_PROVIDER_NAME: report.provider_name,
        s.GEN_AI_OPERATION_NAME: report.operation_name,
        s.GEN_AI_RESPONSE_MODEL: cut(report.response_model, s.MAX_IDENTIFIER_CHARS),
        s.GEN_AI_RESPONSE_ID: cut(report.response_id, s.MAX_IDENTIFIER_CHARS),
        s.ERROR_TYPE: report.outcome.value if report.outcome.value in s.ERROR_OUTCOMES else None,
    }
    if s.USAGE not in owned:
        # Cost tools sum usage over a trace's spans: with a neighbour it is on its span alone.
        optional[s.GEN_AI_USAGE_INPUT_TOKENS] = report.input_tokens
        optional[s.GEN_AI_USAGE_OUTPUT_TOKENS] = report.output_tokens
    if s.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in owned and report.provider_name is not None:
        optional[s.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = report.time_to_first_output
    attributes.update((key, value) for key, value in optional.items() if value is not None)
    if report.provider_name is not None:
        attributes[s.GEN_AI_REQUEST_STREAM] = True
        # The GenAI conventions ask for "error" when the stream ended before its final event;
        # an answer that had its final stop (only the end marker unread, or never sent) did not.
        reasons = report.finish_reasons
        if not report.terminal_seen and report.outcome not in _ANSWER_ENDED:
            reasons = (*reasons[: s.MAX_FINISH_REASONS - 1], "error")
        if reasons:
            attributes[s.GEN_AI_RESPONSE_FINISH_REASONS] = tuple(
                reason[: s.MAX_CODE_CHARS] for reason in reasons[: s.MAX_FINISH_REASONS]
            )
    return attributes


def cut(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]


class FirstSeen:
    """The first ``limit`` distinct values offered; ``admit`` refuses any later one.

    Model names, hosts and stop reasons are chosen by whoever runs the server: without a limit
    on them and on their combinations, one misbehaving gateway could create a metric series per
    stream and push an instrument past the SDK's cardinality limit (semconv's caps).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def __contains__(self, value: Hashable) -> bool:
        return value in self._seen

    def admit(self, value: Hashable) -> bool:
        if value in self._seen:
            return True
        with self._lock:
            if value in self._seen or len(self._seen) < self._limit:
                self._seen.add(value)
                return True
        return False


def capped(values: FirstSeen, value: str) -> str:
    value = value[: semconv.MAX_METRIC_VALUE_CHARS]
    return value if values.admit(value) else OTHER


def _key(attributes: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(attributes.items()))


class CallFacts(NamedTuple):
    """What the instrumentation knows of a stream's call beyond its report."""

    server_address: str | None = None
    #: ``gen_ai.request.model`` from the request.
    request_model: str | None = None
    #: The response's HTTP status; None when no response arrived.
    status_code: int | None = None
    #: What a GenAI neighbour owns for this call (``semconv.NEIGHBOURS``).
    owned: frozenset[str] = frozenset()
    #: The stream span's context: histogram points recorded in it carry exemplars of its trace.
    context: Context | None = None
    #: The route's labels of the request (``Route.labels``: MCP's method and tool).
    labels: Mapping[str, str] = MappingProxyType({})


class Telemetry:
    """The tracer, the instruments and the rules for recording one stream.

    Args:
        tracer_provider, meter_provider: None for the global providers.
        max_model_names: distinct ``gen_ai.request.model`` values before ``_OTHER``.
        max_server_addresses: distinct ``server.address`` values before ``_OTHER``.
        max_stop_reasons: distinct ``otelsse.stop_reason`` values before ``_OTHER``.
        semconv_opt_in: the ``OTEL_SEMCONV_STABILITY_OPT_IN`` value, which picks the GenAI
            metric names (``semconv.genai_metrics``).

    Whatever these are, ``semconv.MAX_SERIES_KEYS`` and ``semconv.MAX_STOP_REASON_SERIES`` keep
    every instrument within ``semconv.max_series``.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        max_model_names: int = semconv.DEFAULT_MAX_MODEL_NAMES,
        max_server_addresses: int = semconv.DEFAULT_MAX_SERVER_ADDRESSES,
        max_stop_reasons: int = semconv.DEFAULT_MAX_STOP_REASONS,
        semconv_opt_in: str | None = None,
    ) -> None:
        self.tracer, meter = instruments(tracer_provider, meter_provider)
        s = semconv
        self._streams = counter(meter, s.STREAMS)
        self._active = meter.create_up_down_counter(
            s.STREAMS_ACTIVE.name, s.STREAMS_ACTIVE.unit, s.STREAMS_ACTIVE.description
        )
        self._histograms = [
            (histogram(meter, spec), field)
            for spec, field in (
                (s.STREAM_DURATION, "duration"),
                (s.STREAM_TIME_TO_FIRST_EVENT, "time_to_first_event"),
                (s.STREAM_TIME_TO_FIRST_OUTPUT, "time_to_first_output"),
                (s.STREAM_MAX_INTER_EVENT_GAP, "max_inter_event_gap"),
                (s.STREAM_EVENTS, "event_count"),
                (s.STREAM_BYTES, "bytes_received"),
            )
        ]
        self._refusals = counter(meter, s.STREAM_REFUSALS)
        self._tool_calls = counter(meter, s.TOOL_CALLS)
        self._errors = counter(meter, s.INSTRUMENTATION_ERRORS)
        # measure -> its histograms, and the usage counters of the latest names
        self._genai: dict[str, list[metrics.Histogram]] = {}
        self._genai_usage: list[metrics.Counter] = []
        for measure, specs in s.genai_metrics(semconv_opt_in).items():
            for spec in specs:
                if spec.kind == "histogram":
                    self._genai.setdefault(measure, []).append(histogram(meter, spec))
                else:
                    self._genai_usage.append(counter(meter, spec))
        self._models = FirstSeen(max_model_names)
        # A route's label (``Route.labels``) -> the values admitted, each bounded as models are.
        self._labels: dict[str, FirstSeen] = {}
        self._max_label_values = max_model_names
        self._servers = FirstSeen(max_server_addresses)
        self._stop_reasons = FirstSeen(max_stop_reasons)
        self._statuses = FirstSeen(s.MAX_STATUS_CODES)
        # What bounds the products (semconv.max_series): keys and stop-reason sets.
        self._series_keys = FirstSeen(s.MAX_SERIES_KEYS)
        self._active_keys = FirstSeen(s.MAX_SERIES_KEYS)
        self._stop_reason_series = FirstSeen(s.MAX_STOP_REASON_SERIES)
        self._logged: set[tuple[str, str]] = set()
        for stage in s.INSTRUMENTATION_STAGES:
            self._errors.add(0, {s.INSTRUMENTATION_STAGE: stage})

    # -- the span --------------------------------------------------------------------------

    def start_span(
        self,
        attributes: Mapping[str, Any],
        *,
        context: Context | None = None,
        start_time: int | None = None,
    ) -> Span:
        """Start one ``otelsse.stream`` span; the caller makes it current only around ``send``."""
        return self.tracer.start_span(
            semconv.SPAN_NAME,
            context=context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=start_time,
        )

    def stream_started(self, attributes: MetricAttributes) -> None:
        """One more stream is being read; ``stream_finished`` takes the same ``attributes``."""
        self._active.add(1, self._active_series(attributes))

    def stream_finished(self, attributes: MetricAttributes) -> None:
        self._active.add(-1, self._active_series(attributes))

    def _active_series(self, attributes: MetricAttributes) -> MetricAttributes:
        # The same attributes map to the same series at the start and at the end of a stream:
        # an admitted value stays admitted, and a full cap stays full.
        series = dict(attributes)
        server = series.get(semconv.SERVER_ADDRESS)
        if server is not None:
            series[semconv.SERVER_ADDRESS] = capped(self._servers, server)
        if not self._active_keys.admit(_key(series)):
            series[semconv.SERVER_ADDRESS] = OTHER
        return series

    def end_span(
        self,
        span: Span,
        report: StreamReport,
        http_attributes: Mapping[str, Any],
        owned: frozenset[str] = frozenset(),
    ) -> None:
        """Set the report's and the HTTP exchange's attributes and the status, then end the span
        (always)."""
        try:
            if span.is_recording():
                span.set_attributes({**span_attributes(report, owned), **http_attributes})
                if report.outcome.value in semconv.ERROR_OUTCOMES:
                    # The outcome name is the whole description: a message could be content.
                    span.set_status(Status(StatusCode.ERROR, report.outcome.value))
        finally:
            span.end()

    def finish_stream(
        self,
        span: Span,
        report: StreamReport,
        span_attributes: Mapping[str, Any],
        call: CallFacts,
        active: MetricAttributes | None = None,
    ) -> None:
        """End a stream everywhere: its active count (``active``: what ``stream_started``
        took), its metric points, then its span. Independent steps, each contained, so that one
        failing cannot leave a span open or a stream counted as active forever; the span ends
        last, so that whoever sees it ended (an exporter, a test) sees the stream's metrics too."""
        if active is not None:
            try:
                self.stream_finished(active)
            except Exception as exc:
                self.count_error(exc, "stream_finished")
        try:
            self.record_metrics(report, call)
        except Exception as exc:
            self.count_error(exc, "record_metrics")
        try:
            self.end_span(span, report, span_attributes, call.owned)
        except Exception as exc:
            self.count_error(exc, "end_span")
            if span.is_recording():
                span.set_attribute(semconv.OUTCOME, Outcome.INTERNAL_ERROR.value)
                span.end()

    def record_metrics(self, report: StreamReport, call: CallFacts) -> None:
        """The metric points of one finished stream."""
        s = semconv
        series: MetricAttributes = {s.ROUTE: report.route}
        if call.server_address is not None:
            series[s.SERVER_ADDRESS] = capped(self._servers, call.server_address)
        if report.provider_name is not None:
            series[s.GEN_AI_PROVIDER_NAME] = report.provider_name
        if call.request_model is not None:
            series[s.GEN_AI_REQUEST_MODEL] = capped(self._models, call.request_model)
        for label, value in call.labels.items():
            series[label] = capped(self._label_values(label), value)
        key = _key(series)
        new = key not in self._series_keys
        if not self._series_keys.admit(key):
            series = _overflow(series, call.labels)
        elif new:
            self._precreate(series)
        outcome = report.outcome.value
        point = {**series, s.OUTCOME: outcome, **_status(outcome, call.status_code)}
        status = point.get(s.HTTP_RESPONSE_STATUS_CODE)
        status_capped = outcome == Outcome.HTTP_ERROR.value and status is not None
        if status_capped and not self._statuses.admit(status):
            del point[s.HTTP_RESPONSE_STATUS_CODE]
        if report.stop_reason is not None:
            point[s.STOP_REASON] = capped(self._stop_reasons, report.stop_reason)
        # Sets beyond the pre-created ones (a stop reason, an http_error's status) are admitted
        # up to a bound; past it they fold into the route's overflow key.
        plain = s.STOP_REASON not in point and outcome != Outcome.HTTP_ERROR.value
        if not plain and not self._stop_reason_series.admit(_key(point)):
            # The outcome survives; a folded http_error loses its status (an int has no _OTHER).
            point = {**_overflow(series, call.labels), s.OUTCOME: outcome}
            if report.stop_reason is not None:
                point[s.STOP_REASON] = OTHER
        self._streams.add(1, point)
        histogram_point: MetricAttributes = {s.ROUTE: report.route, s.OUTCOME: outcome}
        if report.provider_name is not None:
            histogram_point[s.GEN_AI_PROVIDER_NAME] = report.provider_name
        for histogram, field in self._histograms:
            value = getattr(report, field)
            if value is not None:
                histogram.record(value, histogram_point, call.context)
        client = {**series, s.TOOL_CALL_KIND: s.TOOL_CALL_CLIENT}
        # A call whose arguments never closed cannot be counted as valid.
        invalid = report.tool_call_invalid_count + report.open_accumulator_count
        for valid, count in ((True, report.tool_call_count - invalid), (False, invalid)):
            if count:
                self._tool_calls.add(count, {**client, s.TOOL_CALL_VALID: valid})
        if report.server_tool_call_count:
            server = {**series, s.TOOL_CALL_KIND: s.TOOL_CALL_SERVER}
            self._tool_calls.add(report.server_tool_call_count, server)
        if report.refusal:
            self._refusals.add(1, series)
        if report.provider_name is not None and report.operation_name is not None:
            self._record_genai(report, series, call)

    def _record_genai(
        self, report: StreamReport, series: MetricAttributes, call: CallFacts
    ) -> None:
        """The GenAI client metrics of one call, but those a neighbour records itself."""
        s = semconv
        point: MetricAttributes = {
            s.GEN_AI_OPERATION_NAME: report.operation_name,
            s.GEN_AI_PROVIDER_NAME: report.provider_name,
        }
        for attribute in (s.GEN_AI_REQUEST_MODEL, s.SERVER_ADDRESS):
            if attribute in series:
                point[attribute] = series[attribute]
        owned, context, genai = call.owned, call.context, self._genai
        outcome = report.outcome.value
        if s.DURATION_METRIC not in owned and report.duration is not None:
            failed = {s.ERROR_TYPE: outcome} if outcome in s.ERROR_OUTCOMES else {}
            for instrument in genai[s.DURATION_METRIC]:
                instrument.record(report.duration, {**point, **failed}, context)
        for measure, value in (
            (s.TIME_TO_FIRST_CHUNK_METRIC, report.time_to_first_output),
            (s.TIME_PER_OUTPUT_CHUNK_METRIC, report.time_per_output_chunk),
        ):
            if measure not in owned and value is not None:
                for instrument in genai[measure]:
                    instrument.record(value, point, context)
        if s.TOKEN_USAGE_METRIC in owned:
            return
        tokens = (("input", report.input_tokens), ("output", report.output_tokens))
        for kind, count in tokens:
            if count is None:
                continue
            # One histogram by gen_ai.token.type, or (latest names) a counter per kind.
            for histogram in genai.get(s.TOKEN_USAGE_METRIC, ()):
                histogram.record(count, {**point, s.GEN_AI_TOKEN_TYPE: kind}, context)
        for counter, (_kind, count) in zip(self._genai_usage, tokens, strict=False):
            if count is not None:
                counter.add(count, point, context)

    def _label_values(self, label: str) -> FirstSeen:
        values = self._labels.get(label)
        if values is None:  # label names come from route declarations: a few, ever
            values = self._labels.setdefault(label, FirstSeen(self._max_label_values))
        return values

    def _precreate(self, series: MetricAttributes) -> None:
        """Create the counter series an alert reads at 0, the first time a series key is
        admitted: each outcome of ``semconv.ALERTED_OUTCOMES``, invalid client tool calls, and
        refusals (the dashboard's refusal panels read them as a ratio: 0, not "no data").

        ``increase()`` cannot see a series' first sample, so the first truncation of a route
        would be invisible to the alerts. The pre-created series carry no stop reason: that is
        how failed streams (truncated, timeout, protocol_error, ...) are recorded; rate_limited
        carries its 429. What this cannot cover: the key's very first stream (its +1 reaches
        the same collection as the zeros), the first stream of each (outcome, stop reason)
        pair, since stop reasons are only known at the stream's end, and each http_error
        status. All are in the raw counters. What no alert reads (the other outcomes, valid and
        server-run tool calls) appears with its first count: zeros of it would only lengthen
        every scrape.
        """
        s = semconv
        for outcome in sorted(s.ALERTED_OUTCOMES):
            self._streams.add(0, {**series, s.OUTCOME: outcome, **_status(outcome, None)})
        invalid = {**series, s.TOOL_CALL_KIND: s.TOOL_CALL_CLIENT, s.TOOL_CALL_VALID: False}
        self._tool_calls.add(0, invalid)
        self._refusals.add(0, series)

    # -- our own failures ------------------------------------------------------------------

    def count_error(self, error: BaseException, where: str) -> None:
        """Count a contained failure at stage ``where`` (one of ``INSTRUMENTATION_STAGES``);
        log its first occurrence, with the exception's type, at debug level.

        Only the type is logged, never the message: a parser's or a client's message can quote
        the data it choked on. The metric carries the stage, a closed set, and not the type, so
        that every error series exists at 0 before the first failure.
        """
        kind = type(error).__name__
        try:
            self._errors.add(1, {semconv.INSTRUMENTATION_STAGE: where})
            if (where, kind) not in self._logged:
                self._logged.add((where, kind))
                _LOG.debug(
                    "otelsse contained a %s in %s; the application is unaffected", kind, where
                )
        except Exception:  # the last line of defence: counting must not raise either
            pass


def _overflow(series: MetricAttributes, labels: Mapping[str, str]) -> MetricAttributes:
    """A series key past the caps as its route's overflow key: the attributes traffic chooses
    become ``_OTHER``; the route and its provider come from the route registry. The route's
    labels of the request are left off, whichever it set: one overflow key per route, as
    ``semconv.max_series`` counts them."""
    kept = {key: value for key, value in series.items() if key not in labels}
    return {**kept, semconv.SERVER_ADDRESS: OTHER, semconv.GEN_AI_REQUEST_MODEL: OTHER}


def _status(outcome: str, status_code: int | None) -> MetricAttributes:
    """``http.response.status_code`` on a stream's counter point: only where the status is the
    outcome's cause (a body outcome's 2xx says nothing). A 429 is always rate_limited."""
    if outcome == Outcome.RATE_LIMITED.value:
        return {semconv.HTTP_RESPONSE_STATUS_CODE: 429}
    if outcome == Outcome.HTTP_ERROR.value and status_code is not None:
        return {semconv.HTTP_RESPONSE_STATUS_CODE: status_code}
    return {}


def instruments(
    tracer_provider: trace.TracerProvider | None, meter_provider: metrics.MeterProvider | None
) -> tuple[trace.Tracer, metrics.Meter]:
    """otelsse's tracer and meter from the given providers (None: the global ones)."""
    tracer = trace.get_tracer(
        semconv.SCOPE_NAME, __version__, tracer_provider, schema_url=semconv.SCHEMA_URL
    )
    meter = metrics.get_meter(semconv.SCOPE_NAME, __version__, meter_provider, semconv.SCHEMA_URL)
    return tracer, meter


def counter(meter: metrics.Meter, spec: semconv.MetricSpec) -> metrics.Counter:
    return meter.create_counter(spec.name, spec.unit, spec.description)


def histogram(meter: metrics.Meter, spec: semconv.MetricSpec) -> metrics.Histogram:
    return meter.create_histogram(
        spec.name,
        spec.unit,
        spec.description,
        explicit_bucket_boundaries_advisory=list(spec.buckets or ()),
    )
