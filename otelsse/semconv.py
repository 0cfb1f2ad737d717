"""Every telemetry name otelsse emits: span attributes, metric names, units and bucket advice.

This module is the single source that the code, docs, dashboards and their tests read (DESIGN §4).
Our own names live under ``otelsse.``; where the OpenTelemetry GenAI, HTTP and general semantic
conventions define a name, theirs is used. Standard library only: the sans-IO core imports it.
"""

from __future__ import annotations

__all__ = [
    "ATTRIBUTES",
    "ATTRIBUTE_SPECS",
    "DURATION_BUCKETS",
    "ERROR_OUTCOMES",
    "METRICS",
    "AttributeSpec",
    "MetricSpec",
    "max_series",
    "prometheus_label",
    "prometheus_series",
]

import re
from typing import NamedTuple

# -- span attributes (otelsse) ----------------------------------------------------------------
ROUTE = "otelsse.route"
ROUTE_PROFILE = "otelsse.route.profile"
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
SERVER_TOOL_CALL_COUNT = "otelsse.server_tool_call_count"
REFUSAL = "otelsse.refusal"
BUFFER_LIMIT_STAGE = "otelsse.buffer_limit_stage"
DECODE_ERROR_COUNT = "otelsse.decode_error_count"
ANOMALY_COUNT = "otelsse.anomaly_count"
PROVIDER_ERROR_CODE = "otelsse.provider_error_code"
TIME_TO_FIRST_BYTE = "otelsse.time_to_first_byte"
TIME_TO_FIRST_EVENT = "otelsse.time_to_first_event"
MAX_INTER_EVENT_GAP = "otelsse.max_inter_event_gap"
DURATION = "otelsse.duration"
TOOL_CALL_VALID = "otelsse.tool_call.valid"
#: Who ran a tool call (on ``otelsse.tool_calls``): one of ``TOOL_CALL_KINDS``.
TOOL_CALL_KIND = "otelsse.tool_call.kind"
#: The provider's request id from an allow-listed response header (see REQUEST_ID_HEADERS).
REQUEST_ID = "otelsse.request_id"
#: Where inside otelsse a contained failure happened (on ``otelsse.instrumentation.errors``).
INSTRUMENTATION_STAGE = "otelsse.instrumentation.stage"

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
    ROUTE, ROUTE_PROFILE, OUTCOME, TERMINAL_SEEN, STOP_REASON, CHUNK_COUNT, BYTES_RECEIVED,
    DECODED_CHAR_COUNT, EVENT_COUNT, COMMENT_COUNT, UNKNOWN_EVENT_COUNT, PENDING_LINE_CHARS,
    PENDING_EVENT_CHARS, OPEN_ACCUMULATOR_COUNT, TOOL_CALL_COUNT, TOOL_CALL_INVALID_COUNT,
    SERVER_TOOL_CALL_COUNT, REFUSAL, BUFFER_LIMIT_STAGE, DECODE_ERROR_COUNT, ANOMALY_COUNT,
    PROVIDER_ERROR_CODE, TIME_TO_FIRST_BYTE, TIME_TO_FIRST_EVENT, MAX_INTER_EVENT_GAP, DURATION,
    HTTP_RESPONSE_STATUS_CODE, SERVER_ADDRESS, SERVER_PORT, ERROR_TYPE, GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_STREAM, GEN_AI_RESPONSE_MODEL, GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_FINISH_REASONS, GEN_AI_USAGE_INPUT_TOKENS, GEN_AI_USAGE_OUTPUT_TOKENS,
    REQUEST_ID,
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


#: Attributes every stream metric point carries (low cardinality: see the caps below).
#: ``otelsse.stop_reason`` is absent when the stream ended without one (e.g. truncated).
METRIC_ATTRIBUTES: tuple[str, ...] = (
    ROUTE, OUTCOME, STOP_REASON, SERVER_ADDRESS, GEN_AI_PROVIDER_NAME, GEN_AI_RESPONSE_MODEL,
)  # fmt: skip
#: The series key of a route and server: what ``otelsse.tool_calls`` and
#: ``otelsse.stream.refusals`` share with the streams.
SERIES_ATTRIBUTES = (ROUTE, SERVER_ADDRESS, GEN_AI_PROVIDER_NAME, GEN_AI_RESPONSE_MODEL)
#: The closed set of ``otelsse.tool_call.kind`` values: calls the application runs from the
#: streamed arguments, and calls the provider ran itself (web search, code execution, MCP),
#: which have no arguments to validate.
TOOL_CALL_CLIENT = "client"
TOOL_CALL_SERVER = "server"
TOOL_CALL_KINDS: tuple[str, ...] = (TOOL_CALL_CLIENT, TOOL_CALL_SERVER)


class MetricSpec(NamedTuple):
    name: str
    kind: str  # "counter" | "up_down_counter" | "histogram"
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None
    #: The attribute keys its points may carry (any of them may be absent on a given point).
    attributes: tuple[str, ...] = METRIC_ATTRIBUTES


STREAMS = MetricSpec(
    "otelsse.streams", "counter", "{stream}", "Streamed responses that ended, by outcome."
)
STREAMS_ACTIVE = MetricSpec(
    "otelsse.streams.active", "up_down_counter", "{stream}", "Streamed responses being read now.",
    attributes=(ROUTE, SERVER_ADDRESS),
)  # fmt: skip
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
#: A counter of its own rather than a label on ``otelsse.streams``: a refusal is orthogonal to
#: the outcome (a refused stream usually still ends ``complete``), and a boolean label there
#: would double every stream series; this adds one series per series key.
STREAM_REFUSALS = MetricSpec(
    "otelsse.stream.refusals", "counter", "{stream}",
    "Streamed responses in which the model refused; divide by otelsse.streams for the rate.",
    attributes=SERIES_ATTRIBUTES,
)  # fmt: skip
TOOL_CALLS = MetricSpec(
    "otelsse.tool_calls", "counter", "{call}",
    "Tool calls, by who ran them and whether their arguments were valid.",
    attributes=(*SERIES_ATTRIBUTES, TOOL_CALL_KIND, TOOL_CALL_VALID),
)  # fmt: skip
#: The closed set of ``otelsse.instrumentation.stage`` values. Each one's error series is created
#: at 0 when the instruments are, so ``increase()`` sees the very first failure.
INSTRUMENTATION_STAGES: tuple[str, ...] = (
    "send", "content_encoding", "feed", "finish", "end_span", "stream_finished", "record_metrics",
)  # fmt: skip
INSTRUMENTATION_ERRORS = MetricSpec(
    "otelsse.instrumentation.errors", "counter", "{error}",
    "Failures inside otelsse, contained and never raised into the application.",
    attributes=(INSTRUMENTATION_STAGE,),
)  # fmt: skip

METRICS: tuple[MetricSpec, ...] = (
    STREAMS, STREAMS_ACTIVE, STREAM_DURATION, STREAM_TIME_TO_FIRST_EVENT,
    STREAM_MAX_INTER_EVENT_GAP, STREAM_EVENTS, STREAM_BYTES, STREAM_REFUSALS, TOOL_CALLS,
    INSTRUMENTATION_ERRORS,
)  # fmt: skip

# -- the tool gate (otelsse.ToolGate) ----------------------------------------------------------
# Its own spans and counter, apart from the streams': a gate reads streams through the enforcing
# reader, not through the instrumentation, and its calls are decisions, not traffic.

#: Span name of one gate attempt (one stream read and its calls decided).
GATE_SPAN_NAME = "otelsse.gate"
#: Span name of one tool call the gate decided; a child of its attempt's span.
TOOL_CALL_SPAN_NAME = "otelsse.tool_call"
#: The caller's run id and the attempt's number within the run (opaque ids, never content).
GATE_RUN_ID = "otelsse.gate.run_id"
GATE_ATTEMPT = "otelsse.gate.attempt"
#: Why the gate's stream was refused: a ``StreamFault`` code; absent when it was accepted.
GATE_FAULT = "otelsse.gate.fault"
#: A call's final state: a ``ToolCallState`` value.
TOOL_CALL_STATE = "otelsse.tool_call.state"
TOOL_CALL_BYTES = "otelsse.tool_call.bytes"
TOOL_CALL_JSON_STATUS = "otelsse.tool_call.json_status"
TOOL_CALL_TRAILING_DATA = "otelsse.tool_call.trailing_data"
TOOL_CALL_SCHEMA_STATUS = "otelsse.tool_call.schema_status"
TOOL_CALL_POLICY = "otelsse.tool_call.policy"
TOOL_CALL_EXECUTION = "otelsse.tool_call.execution"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"

#: Every attribute key on the gate's spans.
GATE_ATTRIBUTES: tuple[str, ...] = (
    GATE_RUN_ID, GATE_ATTEMPT, GATE_FAULT, ROUTE, OUTCOME, GEN_AI_RESPONSE_ID, TOOL_CALL_STATE,
    TOOL_CALL_BYTES, TOOL_CALL_JSON_STATUS, TOOL_CALL_TRAILING_DATA, TOOL_CALL_SCHEMA_STATUS,
    TOOL_CALL_POLICY, TOOL_CALL_EXECUTION, GEN_AI_TOOL_NAME, GEN_AI_TOOL_CALL_ID, ERROR_TYPE,
)  # fmt: skip

#: Distinct ``gen_ai.tool.name`` values on ``otelsse.gate.calls`` before ``OVERFLOW_VALUE``:
#: the model chooses the name, so an unregistered one is as free as a model name.
DEFAULT_MAX_TOOL_NAMES = 50

GATE_CALLS = MetricSpec(
    "otelsse.gate.calls", "counter", "{call}",
    "Tool calls the tool gate decided, by final state.",
    attributes=(TOOL_CALL_STATE, GEN_AI_TOOL_NAME, ERROR_TYPE),
)  # fmt: skip
GATE_METRICS: tuple[MetricSpec, ...] = (GATE_CALLS,)


# -- caps --------------------------------------------------------------------------------------
# Past ``SDK_CARDINALITY_LIMIT`` attribute sets, the SDK sends an instrument's new points to one
# ``otel.metric.overflow=true`` series without any attribute: the outcome is lost. Models, hosts
# and stop reasons are chosen by whoever runs the server, and they multiply, so otelsse folds
# its own overflow into ``OVERFLOW_VALUE`` long before that, keeping route and outcome.

#: The OpenTelemetry SDK's default limit of attribute sets per instrument and metric reader
#: (opentelemetry-sdk ``_DEFAULT_CARDINALITY_LIMIT``; the specification's default too).
SDK_CARDINALITY_LIMIT = 2000
#: The value a capped metric attribute takes once its limit is reached.
OVERFLOW_VALUE = "_OTHER"
#: Distinct ``gen_ai.response.model`` values in metrics before ``OVERFLOW_VALUE``
#: (``instrument(max_model_names=...)``).
DEFAULT_MAX_MODEL_NAMES = 50
#: Distinct ``server.address`` values in metrics before ``OVERFLOW_VALUE``.
DEFAULT_MAX_SERVER_ADDRESSES = 20
#: Distinct ``otelsse.stop_reason`` values in metrics before ``OVERFLOW_VALUE``.
DEFAULT_MAX_STOP_REASONS = 30
#: Distinct series keys (``SERIES_ATTRIBUTES``; route and server on ``otelsse.streams.active``)
#: with series of their own, outcomes pre-created at 0. A later key shares its route's overflow
#: key: ``server.address`` and ``gen_ai.response.model`` become ``OVERFLOW_VALUE``. This, not the
#: per-attribute caps (which users may raise), is what bounds the products.
MAX_SERIES_KEYS = 50
#: Distinct (series key, outcome, stop reason) sets on ``otelsse.streams`` and the histograms.
#: A later one is counted under its route's overflow key with stop reason ``OVERFLOW_VALUE``.
MAX_STOP_REASON_SERIES = 200
#: Provider-sent metric attribute values (model, stop reason) are cut to this many characters.
MAX_METRIC_VALUE_CHARS = 64
#: Provider-sent codes on the span (stop and finish reasons, error codes) keep this many
#: characters.
MAX_CODE_CHARS = 64
#: Provider-sent identifiers on the span (model, response id) keep this many characters.
MAX_IDENTIFIER_CHARS = 256
#: ``gen_ai.response.finish_reasons`` keeps this many entries (the last may be ``error``).
MAX_FINISH_REASONS = 32
#: ``otelsse.request_id`` keeps at most this many characters (non-printable ones are dropped).
MAX_REQUEST_ID_CHARS = 128


def max_series(spec: MetricSpec, *, routes: int, outcomes: int) -> int:
    """The most attribute sets ``spec``'s instrument can hold, whatever the traffic.

    ``routes`` counts the (route, provider) pairs the registry can report (traffic never adds
    one), ``outcomes`` the outcome values. Keys are the admitted ones plus one overflow key per
    route (``otelsse.streams.active`` also has the route ``auto``).
    """
    keys = MAX_SERIES_KEYS + routes
    if spec == INSTRUMENTATION_ERRORS:
        return len(INSTRUMENTATION_STAGES)
    if spec == STREAMS_ACTIVE:
        return keys + 1
    if spec == STREAM_REFUSALS:
        return keys
    if spec == TOOL_CALLS:
        return keys * 3  # client valid, client invalid, server (no validity)
    # otelsse.streams and the histograms: every key and outcome without a stop reason, the
    # admitted stop-reason sets, and the refused ones under each route's overflow key.
    return outcomes * (keys + routes) + MAX_STOP_REASON_SERIES


# -- documentation (read by docs/generate_reference.py; no code path depends on it) -------------

#: Instrumentation scope name of the tracer and the meter.
SCOPE_NAME = "otelsse"
#: Span kind of ``SPAN_NAME``.
SPAN_KIND = "CLIENT"


class AttributeSpec(NamedTuple):
    """What one attribute key holds, for the reference documentation."""

    #: OpenTelemetry attribute type: ``string``, ``boolean``, ``int``, ``double`` or ``string[]``.
    type: str
    #: UCUM unit; empty when the value has none.
    unit: str
    #: What it holds and when it is absent.
    description: str


#: Every attribute key otelsse sets, on the span (``ATTRIBUTES``) or only on metric points.
ATTRIBUTE_SPECS: dict[str, AttributeSpec] = {
    ROUTE: AttributeSpec(
        "string", "",
        "The provider contract the stream was judged by: a built-in route name or one registered "
        "with `register_route()`. For a stream whose route was sniffed from its events, the "
        "contract found (`generic` when none was). Always present. On "
        "`otelsse.streams.active` alone, `auto` marks an SSE response to an unrecognised URL: "
        "its contract is not known yet when the stream starts.",
    ),
    ROUTE_PROFILE: AttributeSpec(
        "string", "",
        "The host profile applied to the route's contract: a named variant for servers that "
        "bend it on purpose, chosen by the request's host (e.g. `eof_after_finish`). Absent when "
        "the contract applied as is.",
    ),
    OUTCOME: AttributeSpec(
        "string", "",
        "How the stream ended: exactly one outcome per stream (see docs/outcomes.md). Always "
        "present.",
    ),
    TERMINAL_SEEN: AttributeSpec(
        "boolean", "",
        "The route's terminal condition arrived (`[DONE]` after every finish reason, "
        "`response.completed`/`incomplete`/`failed`, `message_stop`, a `finishReason` on every "
        "Gemini candidate). Always false on the generic route, which has no terminal rule.",
    ),
    STOP_REASON: AttributeSpec(
        "string", "",
        "The provider's stop or finish reason exactly as sent (`stop`, `length`, `tool_calls`, "
        "`end_turn`, `max_tokens`, `STOP`, ...); with several choices, a non-success one wins. "
        f"Absent when no stop arrived (e.g. truncated streams). Cut to {MAX_CODE_CHARS} "
        "characters; on metrics it is capped and cut (see the caps below).",
    ),
    CHUNK_COUNT: AttributeSpec(
        "int", "{chunk}",
        "Non-empty body reads the application made. The only count that depends on how the "
        "bytes were chunked.",
    ),
    BYTES_RECEIVED: AttributeSpec(
        "int", "By", "Body bytes the application read, after content-decoding (gzip, br, ...).",
    ),
    DECODED_CHAR_COUNT: AttributeSpec(
        "int", "{char}", "Characters decoded from UTF-8 in complete events.",
    ),
    EVENT_COUNT: AttributeSpec(
        "int", "{event}",
        "Complete SSE events dispatched (keep-alives and unknown types included; comments not).",
    ),
    COMMENT_COUNT: AttributeSpec(
        "int", "{comment}", "SSE comment lines (`:` prefix, e.g. keep-alive pings from gateways).",
    ),
    UNKNOWN_EVENT_COUNT: AttributeSpec(
        "int", "{event}",
        "Events of a type the route does not know (new provider events; they never change the "
        "outcome).",
    ),
    PENDING_LINE_CHARS: AttributeSpec(
        "int", "{char}",
        "Characters of a line that had not ended when the stream ended; non-zero means the "
        "stream was cut mid-line. After a buffer limit: the bytes held when parsing stopped.",
    ),
    PENDING_EVENT_CHARS: AttributeSpec(
        "int", "{char}",
        "Characters of the event not yet dispatched (no blank line after it) when the stream "
        "ended; it was discarded, as the SSE standard says. After a buffer limit: the bytes held "
        "when parsing stopped.",
    ),
    OPEN_ACCUMULATOR_COUNT: AttributeSpec(
        "int", "{call}",
        "Tool calls opened but never closed when the stream ended (counted as invalid in "
        "`otelsse.tool_calls`).",
    ),
    TOOL_CALL_COUNT: AttributeSpec(
        "int", "{call}",
        "Tool calls the stream opened for the application to run (server-run calls not included).",
    ),
    TOOL_CALL_INVALID_COUNT: AttributeSpec(
        "int", "{call}",
        "Closed tool calls whose arguments were not exactly one JSON value.",
    ),
    SERVER_TOOL_CALL_COUNT: AttributeSpec(
        "int", "{call}",
        "Tool calls the provider ran itself (web search, code execution, MCP), counted apart "
        "from `otelsse.tool_call_count`: the application neither runs them nor gets arguments "
        "to validate.",
    ),
    REFUSAL: AttributeSpec(
        "boolean", "",
        "The model refused: OpenAI `refusal` text, Anthropic `stop_reason: refusal`. The flag "
        "is set whatever the outcome (an OpenAI refusal usually ends `complete`, an Anthropic "
        "one `incomplete`); metrics count it in `otelsse.stream.refusals`.",
    ),
    BUFFER_LIMIT_STAGE: AttributeSpec(
        "string", "",
        "Which ceiling stopped parsing: `line` (a partial line), `event` (a pending event), "
        "`accumulator` (one tool call's arguments, the number of tool calls, or of choices, "
        "blocks and outputs), `text` (text kept by the enforcing reader) or `events` (more events "
        "than `Limits.max_events`). Present only when the outcome is `buffer_limit`.",
    ),
    DECODE_ERROR_COUNT: AttributeSpec(
        "int", "{error}", "Invalid UTF-8 sequences in the body, each replaced by U+FFFD.",
    ),
    ANOMALY_COUNT: AttributeSpec(
        "int", "{anomaly}",
        "Oddities that are counted rather than hidden, such as events after the terminal, a "
        "repeated finish reason, a tool-call index reused by another id, a `sequence_number` "
        "gap or an event name that disagrees with its `type`; every protocol violation is "
        "counted here too. `otelsse inspect` lists them by name.",
    ),
    PROVIDER_ERROR_CODE: AttributeSpec(
        "string", "",
        "The code or type of an in-stream provider error as sent (OpenAI `code` or `type`, "
        "Anthropic `error.type` such as `overloaded_error`, Gemini `status`), cut to "
        f"{MAX_CODE_CHARS} characters; never its message. Absent when there was no "
        "provider error or it carried no code.",
    ),
    TIME_TO_FIRST_BYTE: AttributeSpec(
        "double", "s",
        "From request send to the first body byte. Absent when no body byte arrived.",
    ),
    TIME_TO_FIRST_EVENT: AttributeSpec(
        "double", "s",
        "From request send to the read that completed the first SSE event. Absent when no event "
        "arrived.",
    ),
    MAX_INTER_EVENT_GAP: AttributeSpec(
        "double", "s",
        "Longest time between two reads that completed events (0 when all events came in one "
        "read). Absent when no event arrived.",
    ),
    DURATION: AttributeSpec(
        "double", "s",
        "From request send to the end of the stream: EOF, close, read error or cancellation "
        "(the response headers for a `protocol_error` found there).",
    ),
    HTTP_RESPONSE_STATUS_CODE: AttributeSpec(
        "int", "",
        "OTel HTTP convention: the response's status code. Absent when the request failed before "
        "any response (connection error, connect timeout).",
    ),
    SERVER_ADDRESS: AttributeSpec(
        "string", "",
        "OTel convention: the host of the request URL. Absent only for a URL without a host. "
        "On metrics it is capped (see the caps below).",
    ),
    SERVER_PORT: AttributeSpec(
        "int", "",
        "OTel convention: the port of the request URL (443 or 80 from the scheme when the URL "
        "names none). Span only.",
    ),
    ERROR_TYPE: AttributeSpec(
        "string", "",
        "OTel convention: the outcome, set only for the outcomes in `ERROR_OUTCOMES` (the span "
        "status is then ERROR). Absent otherwise.",
    ),
    GEN_AI_PROVIDER_NAME: AttributeSpec(
        "string", "",
        "OTel GenAI convention: the provider its route declares (the route table below; "
        "OpenAI-compatible servers on the `openai.*` routes are `openai`). Absent on the generic "
        "route.",
    ),
    GEN_AI_REQUEST_STREAM: AttributeSpec(
        "boolean", "", "OTel GenAI convention: true when the route has a provider; else absent.",
    ),
    GEN_AI_RESPONSE_MODEL: AttributeSpec(
        "string", "",
        "OTel GenAI convention: the model name the stream itself reported (chunk `model`, "
        "Anthropic `message.model`, Gemini `modelVersion`), cut to "
        f"{MAX_IDENTIFIER_CHARS} characters. Absent when the stream named none. On metrics it "
        "is capped and cut (see the caps below).",
    ),
    GEN_AI_RESPONSE_ID: AttributeSpec(
        "string", "",
        "OTel GenAI convention: the response id the stream reported, cut to "
        f"{MAX_IDENTIFIER_CHARS} characters. Absent when it named none.",
    ),
    GEN_AI_RESPONSE_FINISH_REASONS: AttributeSpec(
        "string[]", "",
        "OTel GenAI convention: every finish reason as sent (one per choice or candidate), with "
        "`error` appended when the stream ended before its terminal: at most "
        f"{MAX_FINISH_REASONS} entries (`error` kept last), each cut to {MAX_CODE_CHARS} "
        "characters. Absent on the generic route and when the list would be empty.",
    ),
    GEN_AI_USAGE_INPUT_TOKENS: AttributeSpec(
        "int", "{token}",
        "OTel GenAI convention: input tokens from the stream's last usage report. Absent when "
        "the stream carried none (OpenAI chat sends usage only when the request asks for "
        "`stream_options.include_usage`).",
    ),
    GEN_AI_USAGE_OUTPUT_TOKENS: AttributeSpec(
        "int", "{token}",
        "OTel GenAI convention: output tokens from the stream's last usage report. Absent when "
        "the stream carried none, including an Anthropic stream cut before `message_delta` "
        "(`message_start`'s count is a placeholder, never reported).",
    ),
    REQUEST_ID: AttributeSpec(
        "string", "",
        "The provider's request id, from the `x-request-id` or else the `request-id` response "
        "header, the only header values ever recorded: at most "
        f"{MAX_REQUEST_ID_CHARS} characters, non-printable ones dropped. Absent when neither "
        "header was sent.",
    ),
    TOOL_CALL_KIND: AttributeSpec(
        "string", "",
        "Metric `otelsse.tool_calls` only: `client` for calls the application runs from the "
        "streamed arguments, `server` for calls the provider ran itself (one of "
        "`TOOL_CALL_KINDS`).",
    ),
    TOOL_CALL_VALID: AttributeSpec(
        "boolean", "",
        "Metric `otelsse.tool_calls` only, client calls only: whether the call closed with "
        "arguments that are exactly one JSON value (false also for calls never closed). Absent "
        "on server calls, which have no arguments to validate.",
    ),
    INSTRUMENTATION_STAGE: AttributeSpec(
        "string", "",
        "Metric `otelsse.instrumentation.errors` only: where inside otelsse a contained failure "
        "happened (one of `INSTRUMENTATION_STAGES`).",
    ),
}  # fmt: skip

#: What each ``otelsse.instrumentation.stage`` covers.
INSTRUMENTATION_STAGE_DESCRIPTIONS: dict[str, str] = {
    "send": "deciding whether to watch a request, around the client's send, or reading the "
    "response headers; an expected stream's span is then ended as `internal_error`",
    "content_encoding": "the body's Content-Encoding cannot be decoded here (e.g. br without "
    "brotli >= 1.2, whose output can be bounded, or zstd without zstandard); the stream is "
    "reported as `internal_error`",
    "feed": "content-decoding or parsing a chunk the application read failed inside otelsse "
    "(a body its coding cannot undo is the peer's fault, `truncated`, not this); the stream is "
    "reported as `internal_error`",
    "finish": "building the stream's report at its end; it is reported as `internal_error`",
    "end_span": "setting the span's attributes and status; the span is still ended, with "
    "outcome `internal_error`",
    "stream_finished": "decrementing `otelsse.streams.active`",
    "record_metrics": "recording the stream's metric points",
}


# -- the names Prometheus shows -----------------------------------------------------------------
# The OpenTelemetry -> Prometheus translation (specification: compatibility/
# prometheus_and_openmetrics.md); the Python exporter and the Collector's default
# (UnderscoreEscapingWithSuffixes) agree on it. The dashboards and alerts are written in these.
_UNIT_SUFFIXES = {"s": "seconds", "By": "bytes"}


def prometheus_label(attribute: str) -> str:
    """An attribute key as a Prometheus label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


def prometheus_series(spec: MetricSpec) -> tuple[str, ...]:
    """The series names an instrument becomes: dots to underscores, the unit's suffix unless the
    name already ends with it (``{...}`` annotations add none), then the type's suffixes."""
    base = prometheus_label(spec.name)
    suffix = _UNIT_SUFFIXES.get(spec.unit)
    if suffix and not base.endswith(f"_{suffix}"):
        base = f"{base}_{suffix}"
    if spec.kind == "counter":
        return (f"{base}_total",)
    if spec.kind == "histogram":
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)
