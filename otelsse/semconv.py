"""Every telemetry name otelsse emits: span attributes, metric names, units and bucket advice.

This module is the single source that the code, docs, dashboards and their tests read (DESIGN §4).
Our own names live under ``otelsse.``; where the OpenTelemetry GenAI, HTTP and general semantic
conventions define a name, theirs is used. Standard library only: the sans-IO core imports it.
"""

from __future__ import annotations

__all__ = [
    "ATTRIBUTES",
    "DURATION_BUCKETS",
    "ERROR_OUTCOMES",
    "METRICS",
    "MetricSpec",
]

from typing import NamedTuple

# -- span attributes (otelsse) ----------------------------------------------------------------
ROUTE = "otelsse.route"
OUTCOME = "otelsse.outcome"
TERMINAL_SEEN = "otelsse.terminal_seen"
STOP_REASON = "otelsse.stop_reason"
CHUNK_COUNT = "otelsse.chunk_count"
BYTES_RECEIVED = "otelsse.bytes_received"
DECODED_CHAR_COUNT = "otelsse.decoded_char_count"
EVENT_COUNT = "otelsse.event_count"
COMMENT_COUNT = "otelsse.comment_count"
UNKNOWN_EVENT_COUNT = "otelsse.unknown_event_count"
PENDING_LINE_CHARS = "otelsse.pending_line_chars"
PENDING_EVENT_CHARS = "otelsse.pending_event_chars"
OPEN_ACCUMULATOR_COUNT = "otelsse.open_accumulator_count"
TOOL_CALL_COUNT = "otelsse.tool_call_count"
TOOL_CALL_INVALID_COUNT = "otelsse.tool_call_invalid_count"
BUFFER_LIMIT_STAGE = "otelsse.buffer_limit_stage"
DECODE_ERROR_COUNT = "otelsse.decode_error_count"
ANOMALY_COUNT = "otelsse.anomaly_count"
PROVIDER_ERROR_CODE = "otelsse.provider_error_code"
TIME_TO_FIRST_BYTE = "otelsse.time_to_first_byte"
TIME_TO_FIRST_EVENT = "otelsse.time_to_first_event"
MAX_INTER_EVENT_GAP = "otelsse.max_inter_event_gap"
DURATION = "otelsse.duration"
TOOL_CALL_VALID = "otelsse.tool_call.valid"
#: The provider's request id from an allow-listed response header (see REQUEST_ID_HEADERS).
REQUEST_ID = "otelsse.request_id"

# -- span attributes (OpenTelemetry semantic conventions) -----------------------------------
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

#: Every span attribute key otelsse may set.
ATTRIBUTES: tuple[str, ...] = (
    ROUTE, OUTCOME, TERMINAL_SEEN, STOP_REASON, CHUNK_COUNT, BYTES_RECEIVED, DECODED_CHAR_COUNT,
    EVENT_COUNT, COMMENT_COUNT, UNKNOWN_EVENT_COUNT, PENDING_LINE_CHARS, PENDING_EVENT_CHARS,
    OPEN_ACCUMULATOR_COUNT, TOOL_CALL_COUNT, TOOL_CALL_INVALID_COUNT, BUFFER_LIMIT_STAGE,
    DECODE_ERROR_COUNT, ANOMALY_COUNT, PROVIDER_ERROR_CODE, TIME_TO_FIRST_BYTE,
    TIME_TO_FIRST_EVENT, MAX_INTER_EVENT_GAP, DURATION, HTTP_RESPONSE_STATUS_CODE, SERVER_ADDRESS,
    SERVER_PORT, ERROR_TYPE, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_STREAM, GEN_AI_RESPONSE_MODEL,
    GEN_AI_RESPONSE_ID, GEN_AI_RESPONSE_FINISH_REASONS, GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS, REQUEST_ID,
)  # fmt: skip

#: The only response headers whose values are recorded (as ``otelsse.request_id``), in order.
REQUEST_ID_HEADERS: tuple[str, ...] = ("x-request-id", "request-id")

#: Span name of the one span per observed stream.
SPAN_NAME = "otelsse.stream"
#: Instrumentation scope schema: the semantic-conventions release whose names are used here.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"

#: Outcomes that are a fault on the server or network side: the span status is ERROR and
#: ``error.type`` is set to the outcome. ``complete``, ``incomplete``, ``cancelled`` and
#: ``eof_unverified`` are not errors, nor is ``internal_error``: otelsse's own failure says nothing
#: about the server (it is counted in ``otelsse.instrumentation.errors``).
ERROR_OUTCOMES = frozenset(
    {
        "truncated",
        "timeout",
        "provider_error",
        "protocol_error",
        "decode_error",
        "payload_error",
        "buffer_limit",
    }
)

# -- metrics -------------------------------------------------------------------------------------

#: Seconds buckets for time-to-first-event, gaps and durations: LLM streams run from
#: sub-second first tokens to multi-minute reasoning answers.
DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
EVENT_BUCKETS: tuple[float, ...] = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
BYTE_BUCKETS: tuple[float, ...] = (
    256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
)  # fmt: skip


class MetricSpec(NamedTuple):
    name: str
    kind: str  # "counter" | "up_down_counter" | "histogram"
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None


STREAMS = MetricSpec(
    "otelsse.streams", "counter", "{stream}", "Streamed responses that ended, by outcome."
)
STREAMS_ACTIVE = MetricSpec(
    "otelsse.streams.active", "up_down_counter", "{stream}", "Streamed responses being read now."
)
STREAM_DURATION = MetricSpec(
    "otelsse.stream.duration", "histogram", "s",
    "From request send to the end of the stream.", DURATION_BUCKETS,
)  # fmt: skip
STREAM_TIME_TO_FIRST_EVENT = MetricSpec(
    "otelsse.stream.time_to_first_event", "histogram", "s",
    "From request send to the first complete SSE event.", DURATION_BUCKETS,
)  # fmt: skip
STREAM_MAX_INTER_EVENT_GAP = MetricSpec(
    "otelsse.stream.max_inter_event_gap", "histogram", "s",
    "Longest silence between two events of a stream.", DURATION_BUCKETS,
)  # fmt: skip
STREAM_EVENTS = MetricSpec(
    "otelsse.stream.events", "histogram", "{event}", "Events per stream.", EVENT_BUCKETS
)
STREAM_BYTES = MetricSpec(
    "otelsse.stream.bytes", "histogram", "By", "Body bytes per stream.", BYTE_BUCKETS
)
TOOL_CALLS = MetricSpec(
    "otelsse.tool_calls", "counter", "{call}", "Tool calls, by whether their arguments were valid."
)
INSTRUMENTATION_ERRORS = MetricSpec(
    "otelsse.instrumentation.errors", "counter", "{error}",
    "Failures inside otelsse, contained and never raised into the application.",
)  # fmt: skip

METRICS: tuple[MetricSpec, ...] = (
    STREAMS, STREAMS_ACTIVE, STREAM_DURATION, STREAM_TIME_TO_FIRST_EVENT,
    STREAM_MAX_INTER_EVENT_GAP, STREAM_EVENTS, STREAM_BYTES, TOOL_CALLS, INSTRUMENTATION_ERRORS,
)  # fmt: skip

#: Attributes every stream metric point carries (low cardinality; model names are capped).
METRIC_ATTRIBUTES: tuple[str, ...] = (
    ROUTE, OUTCOME, STOP_REASON, SERVER_ADDRESS, GEN_AI_PROVIDER_NAME, GEN_AI_RESPONSE_MODEL,
)  # fmt: skip
