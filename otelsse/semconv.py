"""Every telemetry name otelsse emits: span attributes, metric names, units and bucket advice.

This module is the single source that the code, docs, dashboards and their tests read: each
name is declared once, and the lists and the reference documentation's tables derive from it.
Our own names live under ``otelsse.``; where the OpenTelemetry GenAI, HTTP and general semantic
conventions define a name, theirs is used. Standard library only: the sans-IO core imports it.
"""

from __future__ import annotations

__all__ = [
    "ATTRIBUTES",
    "ATTRIBUTE_SPECS",
    "DURATION_BUCKETS",
    "ERROR_OUTCOMES",
    "GENAI_METRICS",
    "METRICS",
    "NEIGHBOURS",
    "SLO_BAD_OUTCOMES",
    "AttributeSpec",
    "MetricSpec",
    "Neighbour",
    "max_series",
    "prometheus_label",
    "prometheus_series",
]

import re
from typing import NamedTuple

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
#: Distinct ``gen_ai.request.model`` values in metrics before ``OVERFLOW_VALUE``
#: (``instrument(max_model_names=...)``).
DEFAULT_MAX_MODEL_NAMES = 50
#: Distinct ``server.address`` values in metrics before ``OVERFLOW_VALUE``.
DEFAULT_MAX_SERVER_ADDRESSES = 20
#: Distinct ``otelsse.stop_reason`` values in metrics before ``OVERFLOW_VALUE``.
DEFAULT_MAX_STOP_REASONS = 30
#: Distinct ``http.response.status_code`` values on ``http_error`` streams; a later one is
#: left off (the attribute is an int: no ``OVERFLOW_VALUE``), the outcome still counted.
MAX_STATUS_CODES = 20
#: Distinct series keys (``SERIES_ATTRIBUTES``; route and server on ``otelsse.streams.active``)
#: with series of their own, the outcomes alerts read pre-created at 0. A later key shares its
#: route's overflow key: ``server.address`` and ``gen_ai.request.model`` become
#: ``OVERFLOW_VALUE``. This, not the per-attribute caps (which users may raise), is what bounds
#: the products. The GenAI metrics use the same admitted keys.
MAX_SERIES_KEYS = 50
#: Distinct (series key, outcome, stop reason or HTTP status) sets on ``otelsse.streams``. A
#: later one is counted under its route's overflow key, its stop reason ``OVERFLOW_VALUE`` and
#: without its status.
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


# -- attributes: each declared once ---------------------------------------------------------------
# ``_attribute`` records a key's type, unit and description (``ATTRIBUTE_SPECS``, the reference
# documentation's table) and whether the ``otelsse.stream`` span carries it (``ATTRIBUTES``) or
# only metric points do. Our own keys live under ``otelsse.``; the others are the OpenTelemetry
# GenAI, HTTP and general semantic conventions' own.


class AttributeSpec(NamedTuple):
    """What one attribute key holds, for the reference documentation."""

    #: OpenTelemetry attribute type: ``string``, ``boolean``, ``int``, ``double`` or ``string[]``.
    type: str
    #: UCUM unit; empty when the value has none.
    unit: str
    #: What it holds and when it is absent.
    description: str


#: Every attribute key otelsse sets on the stream's span or its metric points, described.
ATTRIBUTE_SPECS: dict[str, AttributeSpec] = {}
_ON_SPAN: list[str] = []


def _attribute(key: str, type: str, unit: str, description: str, *, span: bool = True) -> str:
    """Declare ``key``: its spec, and whether the stream's span carries it; returns the key."""
    ATTRIBUTE_SPECS[key] = AttributeSpec(type, unit, description)
    if span:
        _ON_SPAN.append(key)
    return key


ROUTE = _attribute(
    "otelsse.route",
    "string",
    "",
    "The provider contract the stream was judged by: a built-in route name or one registered "
    "with `register_route()`. For a stream whose route was sniffed from its events, the "
    "contract found (`generic` when none was). Always present. On "
    "`otelsse.streams.active` alone, `auto` marks an SSE response to an unrecognised URL: "
    "its contract is not known yet when the stream starts.",
)
ROUTE_PROFILE = _attribute(
    "otelsse.route.profile",
    "string",
    "",
    "The host profile applied to the route's contract: a named variant for servers that "
    "bend it on purpose, chosen by the request's host (e.g. `eof_after_finish`). Absent when "
    "the contract applied as is.",
)
OUTCOME = _attribute(
    "otelsse.outcome",
    "string",
    "",
    "How the stream ended: exactly one outcome per stream (see docs/users/outcomes.md). "
    "Always present.",
)
TERMINAL_SEEN = _attribute(
    "otelsse.terminal_seen",
    "boolean",
    "",
    "The route's terminal condition arrived (`[DONE]` after every finish reason, "
    "`response.completed`/`incomplete`/`failed`, `message_stop`, a `finishReason` on every "
    "Gemini candidate). Always false on the generic route, which has no terminal rule.",
)
STOP_REASON = _attribute(
    "otelsse.stop_reason",
    "string",
    "",
    "The provider's stop or finish reason exactly as sent (`stop`, `length`, `tool_calls`, "
    "`end_turn`, `max_tokens`, `STOP`, ...); with several choices, a non-success one wins. "
    f"Absent when no stop arrived (e.g. truncated streams). Cut to {MAX_CODE_CHARS} "
    "characters; on metrics it is capped and cut (see the caps below).",
)
CHUNK_COUNT = _attribute(
    "otelsse.chunk_count",
    "int",
    "{chunk}",
    "Non-empty body reads the application made. The only count that depends on how the "
    "bytes were chunked.",
)
BYTES_RECEIVED = _attribute(
    "otelsse.bytes_received",
    "int",
    "By",
    "Body bytes the application read, after content-decoding (gzip, br, ...).",
)
DECODED_CHAR_COUNT = _attribute(
    "otelsse.decoded_char_count",
    "int",
    "{char}",
    "Characters decoded from UTF-8 in complete events.",
)
EVENT_COUNT = _attribute(
    "otelsse.event_count",
    "int",
    "{event}",
    "Complete SSE events dispatched (keep-alives and unknown types included; comments not).",
)
COMMENT_COUNT = _attribute(
    "otelsse.comment_count",
    "int",
    "{comment}",
    "SSE comment lines (`:` prefix, e.g. keep-alive pings from gateways).",
)
UNKNOWN_EVENT_COUNT = _attribute(
    "otelsse.unknown_event_count",
    "int",
    "{event}",
    "Events of a type the route does not know (new provider events; they never change the "
    "outcome).",
)
PENDING_LINE_CHARS = _attribute(
    "otelsse.pending_line_chars",
    "int",
    "{char}",
    "Characters of a line that had not ended when the stream ended; non-zero means the "
    "stream was cut mid-line. After a buffer limit: the bytes held when parsing stopped.",
)
PENDING_EVENT_CHARS = _attribute(
    "otelsse.pending_event_chars",
    "int",
    "{char}",
    "Characters of the event not yet dispatched (no blank line after it) when the stream "
    "ended; it was discarded, as the SSE standard says. After a buffer limit: the bytes held "
    "when parsing stopped.",
)
OPEN_ACCUMULATOR_COUNT = _attribute(
    "otelsse.open_accumulator_count",
    "int",
    "{call}",
    "Tool calls opened but never closed when the stream ended (counted as invalid in "
    "`otelsse.tool_calls`).",
)
TOOL_CALL_COUNT = _attribute(
    "otelsse.tool_call_count",
    "int",
    "{call}",
    "Tool calls the stream opened for the application to run (server-run calls not included).",
)
TOOL_CALL_INVALID_COUNT = _attribute(
    "otelsse.tool_call_invalid_count",
    "int",
    "{call}",
    "Closed tool calls whose arguments were not exactly one JSON value.",
)
SERVER_TOOL_CALL_COUNT = _attribute(
    "otelsse.server_tool_call_count",
    "int",
    "{call}",
    "Tool calls the provider ran itself (web search, code execution, MCP), counted apart "
    "from `otelsse.tool_call_count`: the application neither runs them nor gets arguments "
    "to validate.",
)
REFUSAL = _attribute(
    "otelsse.refusal",
    "boolean",
    "",
    "The model refused: OpenAI `refusal` text, Anthropic `stop_reason: refusal`. The flag "
    "is set whatever the outcome (an OpenAI refusal usually ends `complete`, an Anthropic "
    "one `incomplete`); metrics count it in `otelsse.stream.refusals`.",
)
BUFFER_LIMIT_STAGE = _attribute(
    "otelsse.buffer_limit_stage",
    "string",
    "",
    "Which ceiling stopped parsing: `line` (a partial line), `event` (a pending event), "
    "`accumulator` (one tool call's arguments, the number of tool calls, or of choices, "
    "blocks and outputs), `text` (text kept by the enforcing reader) or `events` (more events "
    "than `Limits.max_events`). Present only when the outcome is `buffer_limit`.",
)
DECODE_ERROR_COUNT = _attribute(
    "otelsse.decode_error_count",
    "int",
    "{error}",
    "Invalid UTF-8 sequences in the body, each replaced by U+FFFD.",
)
ANOMALY_COUNT = _attribute(
    "otelsse.anomaly_count",
    "int",
    "{anomaly}",
    "Oddities that are counted rather than hidden, such as events after the terminal, a "
    "repeated finish reason, a tool-call index reused by another id, a `sequence_number` "
    "gap or an event name that disagrees with its `type`; every protocol violation is "
    "counted here too. `otelsse inspect` lists them by name.",
)
PROVIDER_ERROR_CODE = _attribute(
    "otelsse.provider_error_code",
    "string",
    "",
    "The code or type of an in-stream provider error as sent (OpenAI `code` or `type`, "
    "Anthropic `error.type` such as `overloaded_error`, Gemini `status`), cut to "
    f"{MAX_CODE_CHARS} characters; never its message. Absent when there was no "
    "provider error or it carried no code.",
)
TIME_TO_FIRST_BYTE = _attribute(
    "otelsse.time_to_first_byte",
    "double",
    "s",
    "From request send to the first body byte. Absent when no body byte arrived.",
)
TIME_TO_FIRST_EVENT = _attribute(
    "otelsse.time_to_first_event",
    "double",
    "s",
    "From request send to the read that completed the first SSE event. Absent when no event "
    "arrived.",
)
TIME_TO_FIRST_OUTPUT = _attribute(
    "otelsse.time_to_first_output",
    "double",
    "s",
    "From request send to the read that brought the first piece of model output: text, "
    "reasoning or refusal text, a client tool call or its arguments (the time to first "
    "token a user waits for; an OpenAI role chunk or Anthropic `message_start` is an event, "
    "not output). Absent when no output arrived.",
)
TIME_PER_OUTPUT_CHUNK = _attribute(
    "otelsse.time_per_output_chunk",
    "double",
    "s",
    "Mean time between pieces of model output after the first: (last output read - first "
    "output read) / (pieces - 1). Absent with fewer than two pieces.",
)
OUTPUT_DELTA_COUNT = _attribute(
    "otelsse.output_delta_count",
    "int",
    "{chunk}",
    "Pieces of model output (what `otelsse.time_to_first_output` waits for): non-empty "
    "text, reasoning and refusal deltas, client tool calls opened and argument fragments.",
)
#: Seconds the server asked the caller to wait (``Retry-After``) on a refused request.
RETRY_AFTER = _attribute(
    "otelsse.retry_after",
    "double",
    "s",
    "On a stream refused at its headers (`rate_limited`, `http_error`): the seconds the "
    "server asked the caller to wait, from `retry-after-ms` or `Retry-After` (seconds or an "
    "HTTP-date). Absent when not sent or not believable (negative, over a day).",
)
#: The instrumentation scope of another instrumentation's GenAI span that this call ran under
#: (see ``NEIGHBOURS``); otelsse then leaves to it what it owns.
GENAI_NEIGHBOUR = _attribute(
    "otelsse.genai_neighbour",
    "string",
    "",
    "The instrumentation scope of another instrumentation's GenAI span this call ran under "
    "(e.g. `opentelemetry.util.genai.handler` for openai-v2, `com.anthropic.sdk.python`): "
    "otelsse then leaves to it what it owns (docs/users/neighbours.md). Absent otherwise.",
)
#: Why a ``cancelled`` stream was cancelled, where otelsse knows: ``client_disconnect`` or
#: ``shutdown`` (the proxy's drain ran out).
CANCEL_REASON = _attribute(
    "otelsse.cancel_reason",
    "string",
    "",
    "Why a `cancelled` stream ended, when otelsse can tell: `client_disconnect` (the proxy's "
    "client left) or `shutdown` (the proxy's drain after SIGTERM ran out). Absent otherwise.",
)
#: Strict mode refused the stream (``instrument(strict=...)``, the proxy's ``--strict``).
STRICT_RAISED = _attribute(
    "otelsse.strict.raised",
    "boolean",
    "",
    "True when strict mode refused the stream: in-process, the application's own read raised "
    "`StreamFault` (also the client library's error for a cut body); through the proxy, the "
    "stream was ended with its route's in-protocol error event. Absent otherwise; the outcome "
    "says why.",
)
#: The flight recorder's id of the stream's redacted skeleton (``otelsse inspect`` replays it).
RECORDING_ID = _attribute(
    "otelsse.recording.id",
    "string",
    "",
    "The flight recorder's id of this stream's redacted skeleton (docs/users/recorder.md); "
    "`otelsse inspect` replays it. Absent when no recorder is configured or the stream was "
    "not kept.",
)
GEN_AI_OPERATION_NAME = _attribute(
    "gen_ai.operation.name",
    "string",
    "",
    "OTel GenAI convention: the operation of the route's calls (`chat`, "
    "`generate_content`), set when the span starts. Absent on the generic route. On "
    "`mcp.streamable_http`, `execute_tool` for a `tools/call` only (the OTel MCP "
    "conventions'), set when the stream ends.",
)
MCP_METHOD_NAME = _attribute(
    "mcp.method.name",
    "string",
    "",
    "OTel MCP convention: the JSON-RPC method of an MCP request (`tools/call`, `initialize`), "
    "from its body or its `Mcp-Method` header, set when the span starts. On the "
    "`mcp.streamable_http` route only; absent on its GET stream, which answers no method. A "
    "route label (`ROUTE_LABELS`): on metrics it is capped like model names.",
)
GEN_AI_TOOL_NAME = _attribute(
    "gen_ai.tool.name",
    "string",
    "",
    "OTel GenAI convention: on the stream's span, the tool an MCP `tools/call` runs (its "
    "`params.name`, or its `Mcp-Name` header), set when the span starts; absent otherwise. A "
    "route label (`ROUTE_LABELS`): on metrics it is capped like model names. On the tool "
    "gate's spans and counter, the tool the model chose (see the gate's section).",
)
GEN_AI_REQUEST_MODEL = _attribute(
    "gen_ai.request.model",
    "string",
    "",
    "OTel GenAI convention: the model the request asked for, from the JSON body's `model` "
    "field (read by a regular expression, never parsed; message text cannot match) or "
    "Gemini's URL path; set when the span starts. Absent when the request named none or "
    "was not on a known route. On metrics it is capped and cut (see the caps below).",
)
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = _attribute(
    "gen_ai.response.time_to_first_chunk",
    "double",
    "s",
    "OTel GenAI convention: the same value as `otelsse.time_to_first_output`. Absent on "
    "the generic route, without output, and when a GenAI neighbour records it itself.",
)
GEN_AI_TOKEN_TYPE = _attribute(
    "gen_ai.token.type",
    "string",
    "",
    "OTel GenAI convention, metric `gen_ai.client.token.usage` only: `input` or `output`.",
    span=False,
)
MAX_INTER_EVENT_GAP = _attribute(
    "otelsse.max_inter_event_gap",
    "double",
    "s",
    "Longest time between two reads that completed events (0 when all events came in one "
    "read). Absent when no event arrived.",
)
DURATION = _attribute(
    "otelsse.duration",
    "double",
    "s",
    "From request send to the end of the stream: EOF, close, read error or cancellation "
    "(the response headers for a stream refused there: `rate_limited`, `http_error`, or a "
    "`protocol_error` found there).",
)
HTTP_RESPONSE_STATUS_CODE = _attribute(
    "http.response.status_code",
    "int",
    "",
    "OTel HTTP convention: the response's status code. Absent when the request failed before "
    "any response (connection error, connect timeout). On `otelsse.streams` only for "
    f"`rate_limited` (429) and `http_error` (the first {MAX_STATUS_CODES} distinct codes), "
    "where the status is the outcome's cause.",
)
SERVER_ADDRESS = _attribute(
    "server.address",
    "string",
    "",
    "OTel convention: the host of the request URL. Absent only for a URL without a host. "
    "On metrics it is capped (see the caps below).",
)
SERVER_PORT = _attribute(
    "server.port",
    "int",
    "",
    "OTel convention: the port of the request URL (443 or 80 from the scheme when the URL "
    "names none). Span only.",
)
ERROR_TYPE = _attribute(
    "error.type",
    "string",
    "",
    "OTel convention: the outcome, set only for the outcomes in `ERROR_OUTCOMES` (the span "
    "status is then ERROR), on the span and on the GenAI duration metric. Absent otherwise.",
)
GEN_AI_PROVIDER_NAME = _attribute(
    "gen_ai.provider.name",
    "string",
    "",
    "OTel GenAI convention: the provider its route declares (the route table below; "
    "OpenAI-compatible servers on the `openai.*` routes are `openai`). Absent on the generic "
    "route.",
)
GEN_AI_REQUEST_STREAM = _attribute(
    "gen_ai.request.stream",
    "boolean",
    "",
    "OTel GenAI convention: true when the route has a provider; else absent.",
)
GEN_AI_RESPONSE_MODEL = _attribute(
    "gen_ai.response.model",
    "string",
    "",
    "OTel GenAI convention: the model name the stream itself reported (chunk `model`, "
    "Anthropic `message.model`, Gemini `modelVersion`), cut to "
    f"{MAX_IDENTIFIER_CHARS} characters. Absent when the stream named none. On metrics it "
    "is capped and cut (see the caps below).",
)
GEN_AI_RESPONSE_ID = _attribute(
    "gen_ai.response.id",
    "string",
    "",
    "OTel GenAI convention: the response id the stream reported, cut to "
    f"{MAX_IDENTIFIER_CHARS} characters. Absent when it named none.",
)
GEN_AI_RESPONSE_FINISH_REASONS = _attribute(
    "gen_ai.response.finish_reasons",
    "string[]",
    "",
    "OTel GenAI convention: every finish reason as sent (one per choice or candidate), with "
    "`error` appended when the stream ended before its terminal: at most "
    f"{MAX_FINISH_REASONS} entries (`error` kept last), each cut to {MAX_CODE_CHARS} "
    "characters. Absent on the generic route and when the list would be empty.",
)
GEN_AI_USAGE_INPUT_TOKENS = _attribute(
    "gen_ai.usage.input_tokens",
    "int",
    "{token}",
    "OTel GenAI convention: input tokens from the stream's last usage report. Absent when "
    "the stream carried none (OpenAI chat sends usage only when the request asks for "
    "`stream_options.include_usage`), and beside a GenAI neighbour, whose span has it: "
    "usage is never on two spans of one call.",
)
GEN_AI_USAGE_OUTPUT_TOKENS = _attribute(
    "gen_ai.usage.output_tokens",
    "int",
    "{token}",
    "OTel GenAI convention: output tokens from the stream's last usage report. Absent when "
    "the stream carried none, including an Anthropic stream cut before `message_delta` "
    "(`message_start`'s count is a placeholder, never reported), and beside a GenAI "
    "neighbour.",
)
#: The provider's request id from an allow-listed response header (see REQUEST_ID_HEADERS).
REQUEST_ID = _attribute(
    "otelsse.request_id",
    "string",
    "",
    "The provider's request id, from the first of the `x-request-id`, `request-id` and "
    "`x-amzn-requestid` (AWS's) response headers, the only header values ever recorded: at most "
    f"{MAX_REQUEST_ID_CHARS} characters, non-printable ones dropped. Absent when none "
    "was sent.",
)
#: Who ran a tool call (on ``otelsse.tool_calls``): one of ``TOOL_CALL_KINDS``.
TOOL_CALL_KIND = _attribute(
    "otelsse.tool_call.kind",
    "string",
    "",
    "Metric `otelsse.tool_calls` only: `client` for calls the application runs from the "
    "streamed arguments, `server` for calls the provider ran itself (one of "
    "`TOOL_CALL_KINDS`).",
    span=False,
)
TOOL_CALL_VALID = _attribute(
    "otelsse.tool_call.valid",
    "boolean",
    "",
    "Metric `otelsse.tool_calls` only, client calls only: whether the call closed with "
    "arguments that are exactly one JSON value (false also for calls never closed). Absent "
    "on server calls, which have no arguments to validate.",
    span=False,
)
#: Where inside otelsse a contained failure happened (on ``otelsse.instrumentation.errors``).
INSTRUMENTATION_STAGE = _attribute(
    "otelsse.instrumentation.stage",
    "string",
    "",
    "Metric `otelsse.instrumentation.errors` only: where inside otelsse a contained failure "
    "happened (one of `INSTRUMENTATION_STAGES`).",
    span=False,
)

#: The proxy's upstream name, on the SERVER span of a request it forwarded.
PROXY_UPSTREAM = "otelsse.proxy.upstream"

#: Every span attribute key otelsse may set.
ATTRIBUTES: tuple[str, ...] = tuple(_ON_SPAN)

#: The only response headers whose values are recorded (as ``otelsse.request_id``), in order.
REQUEST_ID_HEADERS: tuple[str, ...] = ("x-request-id", "request-id", "x-amzn-requestid")

#: Span name of the one span per observed stream.
SPAN_NAME = "otelsse.stream"
#: Instrumentation scope schema: the semantic-conventions release whose names are used here.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"

#: Outcomes where the call failed for a reason outside the application and otelsse (the server,
#: a gateway, the network, the caller's quota or credentials, the client's read deadline): the
#: span status is ERROR and ``error.type`` is set to the outcome. ``complete``, ``incomplete``,
#: ``cancelled``, ``eof_unverified`` and ``terminal_missing`` (a whole answer whose end marker
#: did not come: it has an alert of its own) are not errors, nor is ``internal_error``:
#: otelsse's own failure says nothing about the server (``otelsse.instrumentation.errors``).
#: Which of them count against a provider's SLO is ``SLO_BAD_OUTCOMES``.
ERROR_OUTCOMES = frozenset(
    {
        "truncated",
        "timeout",
        "provider_error",
        "protocol_error",
        "decode_error",
        "payload_error",
        "buffer_limit",
        "rate_limited",
        "http_error",
    }
)

#: Outcomes that count against a provider's stream-success SLO: the server or the network
#: broke the stream. Of the other error outcomes, ``rate_limited`` is the caller's quota and
#: ``timeout`` the client's own read deadline (otelsse cannot tell a stalled server from an
#: impatient client; ``otelsse.stream.max_inter_event_gap`` can): each has an alert of its own.
#: ``http_error`` counts unless its status is a 4xx (``SLO_EXCLUDED_STATUS``): a 401 or a 400
#: is the caller's request, a 5xx the provider's.
SLO_BAD_OUTCOMES = frozenset(
    {
        "truncated",
        "provider_error",
        "protocol_error",
        "decode_error",
        "payload_error",
        "buffer_limit",
        "http_error",
    }
)
#: Outcomes an alert (or the SLO) reads: every error outcome, and ``terminal_missing``, which has
#: an alert of its own. Their ``otelsse.streams`` series are created at 0 with each series key,
#: since ``increase()`` cannot see a series' first sample; the others appear with their first
#: stream, which keeps a scrape small.
ALERTED_OUTCOMES = ERROR_OUTCOMES | {"terminal_missing"}
#: ``http.response.status_code`` values (a PromQL regex) whose ``http_error`` streams do not
#: count against the SLO.
SLO_EXCLUDED_STATUS = "4.."

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


# The cardinality budget. Counters carry the whole series key (route, provider, server,
# request model), the outcome, the stop reason and the HTTP status: they answer "who fails, how".
# A histogram costs its buckets + 2 series per attribute set, so ours carry only what their
# panels and alerts group by: route (provider follows from it) and outcome. Latency per model
# and host is what the GenAI client metrics are for (they carry both, under the same caps).

#: The built-in routes' labels of a request (``Route.labels``: MCP's method and tool), in the
#: series key: each one's values are capped like model names,
#: and a key past ``MAX_SERIES_KEYS`` is counted under its route's overflow key without them. A
#: route of your own may add its own.
ROUTE_LABELS = (MCP_METHOD_NAME, GEN_AI_TOOL_NAME)
#: The series key of a route, server and request model (and the route's labels of the request):
#: what ``otelsse.streams``, ``otelsse.tool_calls`` and ``otelsse.stream.refusals`` share.
SERIES_ATTRIBUTES = (
    ROUTE, SERVER_ADDRESS, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, *ROUTE_LABELS,
)  # fmt: skip
#: ``otelsse.streams``: the key, how the stream ended and the response's status (absent when no
#: response arrived). ``otelsse.stop_reason`` is absent when no stop arrived (e.g. truncated).
METRIC_ATTRIBUTES: tuple[str, ...] = (
    *SERIES_ATTRIBUTES, OUTCOME, STOP_REASON, HTTP_RESPONSE_STATUS_CODE,
)  # fmt: skip
#: The otelsse histograms.
HISTOGRAM_ATTRIBUTES: tuple[str, ...] = (ROUTE, GEN_AI_PROVIDER_NAME, OUTCOME)
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
    attributes: tuple[str, ...] = HISTOGRAM_ATTRIBUTES


STREAMS = MetricSpec(
    "otelsse.streams", "counter", "{stream}", "Streamed responses that ended, by outcome.",
    attributes=METRIC_ATTRIBUTES,
)  # fmt: skip
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
    "From request send to the first complete SSE event of any kind (a role chunk, "
    "message_start).", DURATION_BUCKETS,
)  # fmt: skip
STREAM_TIME_TO_FIRST_OUTPUT = MetricSpec(
    "otelsse.stream.time_to_first_output", "histogram", "s",
    "From request send to the first piece of model output: text, reasoning, refusal or a tool "
    "call (the time to first token).", DURATION_BUCKETS,
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
    "patch", "send", "content_encoding", "feed", "finish", "end_span", "stream_finished",
    "record_metrics", "record",
)  # fmt: skip
INSTRUMENTATION_ERRORS = MetricSpec(
    "otelsse.instrumentation.errors", "counter", "{error}",
    "Failures inside otelsse, contained and never raised into the application.",
    attributes=(INSTRUMENTATION_STAGE,),
)  # fmt: skip

METRICS: tuple[MetricSpec, ...] = (
    STREAMS, STREAMS_ACTIVE, STREAM_DURATION, STREAM_TIME_TO_FIRST_EVENT,
    STREAM_TIME_TO_FIRST_OUTPUT, STREAM_MAX_INTER_EVENT_GAP, STREAM_EVENTS, STREAM_BYTES,
    STREAM_REFUSALS, TOOL_CALLS, INSTRUMENTATION_ERRORS,
)  # fmt: skip

# -- the GenAI client metrics (OpenTelemetry GenAI semantic conventions) -------------------------
# Emitted for calls on a route with a provider, unless another instrumentation's GenAI span
# owns them for the same call (``NEIGHBOURS``). Two name sets, chosen the conventions' way by
# ``OTEL_SEMCONV_STABILITY_OPT_IN``: the default is the set of semantic-conventions v1.37-v1.41
# (docs/gen-ai/gen-ai-metrics.md, the names the Python semconv package and openai-v2 use);
# ``gen_ai_latest_experimental`` selects the one of open-telemetry/semantic-conventions-genai
# (docs/gen-ai/non-normative/migration.md). Attributes: ``gen_ai.operation.name``,
# ``gen_ai.provider.name``, ``gen_ai.request.model`` and ``server.address`` (capped like the
# counters' key); ``error.type`` on the duration; ``gen_ai.token.type`` on the legacy usage.
# ``gen_ai.response.model`` and ``server.port`` (recommended) stay on the span: per metric
# they would multiply the budget for a value the request model nearly always determines.

#: The environment variable and the value that select the latest experimental GenAI names.
SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
GENAI_LATEST = "gen_ai_latest_experimental"
#: The conventions' bucket advice: durations, and token counts (powers of 4).
GENAI_DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS: tuple[float, ...] = tuple(float(4**n) for n in range(14))

GENAI_ATTRIBUTES: tuple[str, ...] = (
    GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, SERVER_ADDRESS,
)  # fmt: skip
#: What a GenAI metric measures, whatever its name in either set.
DURATION_METRIC = "duration"
TIME_TO_FIRST_CHUNK_METRIC = "time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK_METRIC = "time_per_output_chunk"
TOKEN_USAGE_METRIC = "token_usage"
GENAI_MEASURES: tuple[str, ...] = (
    DURATION_METRIC, TIME_TO_FIRST_CHUNK_METRIC, TIME_PER_OUTPUT_CHUNK_METRIC, TOKEN_USAGE_METRIC,
)  # fmt: skip

_TIME_TO_FIRST_CHUNK = "Time from the request to the first output chunk of a streamed call."
_TIME_PER_OUTPUT_CHUNK = (
    "Time per output chunk after the first; otelsse records one value per stream, the mean."
)
#: The set of semantic-conventions <= v1.41: measure -> its instruments.
GENAI_METRICS_LEGACY: dict[str, tuple[MetricSpec, ...]] = {
    DURATION_METRIC: (MetricSpec(
        "gen_ai.client.operation.duration", "histogram", "s", "GenAI operation duration.",
        GENAI_DURATION_BUCKETS, (*GENAI_ATTRIBUTES, ERROR_TYPE),
    ),),
    TIME_TO_FIRST_CHUNK_METRIC: (MetricSpec(
        "gen_ai.client.operation.time_to_first_chunk", "histogram", "s", _TIME_TO_FIRST_CHUNK,
        GENAI_DURATION_BUCKETS, GENAI_ATTRIBUTES,
    ),),
    TIME_PER_OUTPUT_CHUNK_METRIC: (MetricSpec(
        "gen_ai.client.operation.time_per_output_chunk", "histogram", "s",
        _TIME_PER_OUTPUT_CHUNK, GENAI_DURATION_BUCKETS, GENAI_ATTRIBUTES,
    ),),
    TOKEN_USAGE_METRIC: (MetricSpec(
        "gen_ai.client.token.usage", "histogram", "{token}",
        "Number of input and output tokens used.", GENAI_TOKEN_BUCKETS,
        (*GENAI_ATTRIBUTES, GEN_AI_TOKEN_TYPE),
    ),),
}  # fmt: skip
#: The set of open-telemetry/semantic-conventions-genai (``gen_ai_latest_experimental``).
GENAI_METRICS_LATEST: dict[str, tuple[MetricSpec, ...]] = {
    DURATION_METRIC: (MetricSpec(
        "gen_ai.client.inference.duration", "histogram", "s",
        "Duration of a GenAI inference call, until the response is fully received.",
        GENAI_DURATION_BUCKETS, (*GENAI_ATTRIBUTES, ERROR_TYPE),
    ),),
    TIME_TO_FIRST_CHUNK_METRIC: (MetricSpec(
        "gen_ai.client.inference.time_to_first_chunk", "histogram", "s", _TIME_TO_FIRST_CHUNK,
        GENAI_DURATION_BUCKETS, GENAI_ATTRIBUTES,
    ),),
    TIME_PER_OUTPUT_CHUNK_METRIC: (MetricSpec(
        "gen_ai.client.inference.time_per_output_chunk", "histogram", "s",
        _TIME_PER_OUTPUT_CHUNK, GENAI_DURATION_BUCKETS, GENAI_ATTRIBUTES,
    ),),
    TOKEN_USAGE_METRIC: (
        MetricSpec(
            "gen_ai.client.inference.usage.input_tokens", "counter", "{token}",
            "Input tokens used.", attributes=GENAI_ATTRIBUTES,
        ),
        MetricSpec(
            "gen_ai.client.inference.usage.output_tokens", "counter", "{token}",
            "Output tokens used.", attributes=GENAI_ATTRIBUTES,
        ),
    ),
}  # fmt: skip


def genai_metrics(opt_in: str | None) -> dict[str, tuple[MetricSpec, ...]]:
    """The GenAI metric set an ``OTEL_SEMCONV_STABILITY_OPT_IN`` value selects."""
    values = {value.strip() for value in (opt_in or "").split(",")}
    return GENAI_METRICS_LATEST if GENAI_LATEST in values else GENAI_METRICS_LEGACY


#: Both sets, for the documentation and the tests.
GENAI_METRICS: tuple[MetricSpec, ...] = tuple(
    spec
    for table in (GENAI_METRICS_LEGACY, GENAI_METRICS_LATEST)
    for specs in table.values()
    for spec in specs
)


# -- other GenAI instrumentations (living beside them) -------------------------------------------
#: What otelsse leaves on a call that runs under another instrumentation's GenAI span.
USAGE = "usage"  # the gen_ai.usage.* span attributes


class Neighbour(NamedTuple):
    """Another instrumentation that makes a GenAI span around the HTTP call otelsse watches."""

    #: Its instrumentation scope name, as its spans carry it.
    scope: str
    #: Who it is, for the documentation.
    title: str
    #: What it owns for the call: ``USAGE`` and the ``GENAI_MEASURES`` it records itself.
    owns: frozenset[str]


#: Neighbours by scope name. A GenAI span from a scope not listed here is assumed to own all of
#: them: otelsse would rather miss a metric than count one twice.
NEIGHBOURS: dict[str, Neighbour] = {
    n.scope: n
    for n in (
        # opentelemetry-instrumentation-openai-v2 2.4b0 makes its spans and metrics through
        # opentelemetry-util-genai's handler, whose scope they carry.
        Neighbour(
            "opentelemetry.util.genai.handler",
            "opentelemetry-instrumentation-openai-v2 (through opentelemetry-util-genai)",
            frozenset({USAGE, DURATION_METRIC, TOKEN_USAGE_METRIC}),
        ),
        Neighbour(
            "opentelemetry.instrumentation.genai.openai",
            "opentelemetry-instrumentation-genai-openai",
            frozenset({USAGE, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, *GENAI_MEASURES}),
        ),
        # Traces only: it records no metric.
        Neighbour(
            "com.anthropic.sdk.python", "the anthropic SDK's built-in tracing",
            frozenset({USAGE, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK}),
        ),
    )
}  # fmt: skip
#: What an unlisted GenAI neighbour is assumed to own.
UNKNOWN_NEIGHBOUR_OWNS = frozenset({USAGE, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, *GENAI_MEASURES})

# -- the tool gate (otelsse.ToolGate) ----------------------------------------------------------
# Its own spans and counter, apart from the streams': a gate reads streams through the enforcing
# reader, not through the instrumentation, and its calls are decisions, not traffic.

#: Span name of one gate attempt (one stream read and its calls decided).
GATE_SPAN_NAME = "otelsse.gate"
#: Span name of one tool call the gate decided; a child of its attempt's span.
TOOL_CALL_SPAN_NAME = "otelsse.tool_call"
#: Every attribute key on the gate's spans: the stream's keys they carry too, then their own,
#: each declared by ``_gate_attribute``.
_ON_GATE: list[str] = [ROUTE, OUTCOME, GEN_AI_RESPONSE_ID, ERROR_TYPE]


def _gate_attribute(key: str) -> str:
    """Declare ``key`` as an attribute of the gate's spans; returns the key. The reference
    documentation describes it (``docs/generate_reference.py``)."""
    _ON_GATE.append(key)
    return key


#: The caller's run id and the attempt's number within the run (opaque ids, never content).
GATE_RUN_ID = _gate_attribute("otelsse.gate.run_id")
GATE_ATTEMPT = _gate_attribute("otelsse.gate.attempt")
#: Why the gate's stream was refused: a ``StreamFault`` code; absent when it was accepted.
GATE_FAULT = _gate_attribute("otelsse.gate.fault")
#: A call's final state: a ``ToolCallState`` value.
TOOL_CALL_STATE = _gate_attribute("otelsse.tool_call.state")
TOOL_CALL_BYTES = _gate_attribute("otelsse.tool_call.bytes")
TOOL_CALL_JSON_STATUS = _gate_attribute("otelsse.tool_call.json_status")
TOOL_CALL_TRAILING_DATA = _gate_attribute("otelsse.tool_call.trailing_data")
TOOL_CALL_SCHEMA_STATUS = _gate_attribute("otelsse.tool_call.schema_status")
TOOL_CALL_POLICY = _gate_attribute("otelsse.tool_call.policy")
TOOL_CALL_EXECUTION = _gate_attribute("otelsse.tool_call.execution")
_gate_attribute(GEN_AI_TOOL_NAME)  # the stream's too: an MCP tools/call's
GEN_AI_TOOL_CALL_ID = _gate_attribute("gen_ai.tool.call.id")
GATE_ATTRIBUTES: tuple[str, ...] = tuple(_ON_GATE)

#: Distinct ``gen_ai.tool.name`` values on ``otelsse.gate.calls`` before ``OVERFLOW_VALUE``:
#: the model chooses the name, so an unregistered one is as free as a model name.
DEFAULT_MAX_TOOL_NAMES = 50

GATE_CALLS = MetricSpec(
    "otelsse.gate.calls", "counter", "{call}",
    "Tool calls the tool gate decided, by final state.",
    attributes=(TOOL_CALL_STATE, GEN_AI_TOOL_NAME, ERROR_TYPE),
)  # fmt: skip
GATE_METRICS: tuple[MetricSpec, ...] = (GATE_CALLS,)


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
    if spec == STREAMS:
        # Every key with every outcome and neither a stop reason nor a status (rate_limited:
        # its 429), the admitted sets, and the refused ones under each route's overflow key:
        # an outcome with stop reason _OTHER (a refused http_error keeps no status).
        return outcomes * keys + MAX_STOP_REASON_SERIES + routes * outcomes
    if spec.name in GENAI_NAMES:
        per_key = {
            *GENAI_METRICS_LEGACY[DURATION_METRIC], *GENAI_METRICS_LATEST[DURATION_METRIC],
        }  # fmt: skip
        if spec in per_key:  # error.type: absent, or one of the error outcomes
            return keys * (len(ERROR_OUTCOMES) + 1)
        if spec.name == GENAI_METRICS_LEGACY[TOKEN_USAGE_METRIC][0].name:
            return keys * 2  # input, output
        return keys
    # The histograms: their attributes are closed sets.
    return routes * outcomes


#: Every GenAI metric name either set may emit.
GENAI_NAMES = frozenset(spec.name for spec in GENAI_METRICS)


# -- documentation (read by docs/generate_reference.py; no code path depends on it) -------------

#: Instrumentation scope name of the tracer and the meter.
SCOPE_NAME = "otelsse"
#: Span kind of ``SPAN_NAME``.
SPAN_KIND = "CLIENT"


#: What each ``otelsse.instrumentation.stage`` covers.
INSTRUMENTATION_STAGE_DESCRIPTIONS: dict[str, str] = {
    "patch": "wrapping one client library's methods at `instrument()` (a version whose shape "
    "otelsse does not know); that library is left unpatched, the others are instrumented",
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
    "record": "the flight recorder keeping a stream's skeleton (its disk full, say), pruning an "
    "entry it cannot delete, or setting up the directory of `OTEL_PYTHON_OTELSSE_RECORDER_DIR` at "
    "`instrument()`; the stream is reported as it ended, and instrumentation goes on, without a "
    "recording",
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
