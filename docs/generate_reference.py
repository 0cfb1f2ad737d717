"""Render the telemetry reference (docs/reference.md) from the module that owns the names.

    python docs/generate_reference.py           # print it
    python docs/generate_reference.py --write   # write docs/reference.md

Names, types, units, descriptions, buckets and caps come from ``otelsse.semconv``; the closed
value sets from ``otelsse.monitor.Outcome``, the built-in routes' declarations and, for the tool
gate, ``otelsse.gate`` and ``otelsse.reader`` (all sans-IO, so this runs without OpenTelemetry).
``semconv.ATTRIBUTE_SPECS`` describes the stream's attributes only; what the gate's spans and
counter carry is described by the tables below (``GATE_ATTRIBUTE_DOCS``, ``STATE_DOCS``,
``ERROR_CLASS_DOCS``), and rendering fails while they do not cover exactly the names semconv,
``ToolCallState``, ``gate.ERROR_CLASSES`` and ``reader.FAULT_CODES`` define.
tests/sre/test_docs.py checks that the committed file equals this output and that the Prometheus
names below equal the ones the dashboard tests check queries against;
tests/sre/test_gate_metrics.py checks the gate's tables against a real gate's spans and scrape.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from otelsse import gate, reader, semconv
from otelsse._core.state import INVALID_JSON, TRAILING_DATA
from otelsse.gate import ToolCallState
from otelsse.monitor import Outcome
from otelsse.routes import AUTO, BUILT_IN, BUILT_IN_PROFILES
from otelsse.semconv import prometheus_label, prometheus_series

OUTPUT = Path(__file__).with_name("reference.md")

#: Span attributes set by the instrumentation around the HTTP exchange; every other one comes
#: from the stream's report (``otelsse.telemetry.span_attributes``), which ``otelsse inspect
#: --json`` prints too.
INSTRUMENTATION_ONLY = (
    semconv.HTTP_RESPONSE_STATUS_CODE,
    semconv.SERVER_ADDRESS,
    semconv.SERVER_PORT,
    semconv.REQUEST_ID,
)

_KINDS = {
    "counter": ("Counter", "counter"),
    "up_down_counter": ("UpDownCounter", "gauge"),
    "histogram": ("Histogram", "histogram"),
}


def _code(values: Iterable[object]) -> str:
    return ", ".join(f"`{value}`" for value in values)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    lines.extend(f"| {' | '.join(row)} |" for row in rows)
    return lines


def _span() -> list[str]:
    return [
        "## The span",
        "",
        *_table(
            ("", ""),
            (
                ("span name", f"`{semconv.SPAN_NAME}`"),
                ("span kind", semconv.SPAN_KIND),
                ("instrumentation scope (tracer and meter)", f"`{semconv.SCOPE_NAME}`"),
                ("schema URL", f"`{semconv.SCHEMA_URL}`"),
            ),
        ),
        "",
        "One span per streamed response, from request send until the stream really ends (EOF, "
        "close, read error, cancellation or garbage collection), parent of the HTTP client span "
        "when the request was expected to stream. Its status is ERROR exactly for the outcomes "
        f"in `ERROR_OUTCOMES` ({_code(sorted(semconv.ERROR_OUTCOMES))}), with the outcome as "
        "`error.type` and as the status description; see [outcomes.md](outcomes.md).",
        "",
    ]


def _attributes() -> list[str]:
    labels = {key for spec in semconv.METRICS for key in spec.attributes}
    rows = []
    for key, spec in semconv.ATTRIBUTE_SPECS.items():
        on = [
            where
            for where, has in (("span", key in semconv.ATTRIBUTES), ("metrics", key in labels))
            if has
        ]
        label = f"`{prometheus_label(key)}`" if key in labels else "—"
        rows.append(
            (
                f"`{key}`",
                spec.type,
                f"`{spec.unit}`" if spec.unit else "—",
                ", ".join(on),
                label,
                spec.description,
            )
        )
    return [
        "## Attributes",
        "",
        f"Set by the instrumentation only: {_code(INSTRUMENTATION_ONLY)}. Every other span "
        "attribute comes from the stream's `StreamReport` (`otelsse.telemetry.span_attributes`), "
        "which `otelsse inspect --json` prints as well. No content is ever recorded: no prompt, "
        "generated text, tool arguments, event data, provider error message or header value "
        "other than the request id.",
        "",
        *_table(("attribute", "type", "unit", "on", "Prometheus label", "description"), rows),
        "",
    ]


def _most_series(spec: semconv.MetricSpec) -> str:
    """The worst case with the built-in routes, and what one registered route adds."""
    built_in, more = (
        semconv.max_series(spec, routes=routes, outcomes=len(Outcome))
        for routes in (len(BUILT_IN), len(BUILT_IN) + 1)
    )
    return f"{built_in} (+{more - built_in})"


def _metrics() -> list[str]:
    rows = []
    for spec in semconv.METRICS:
        kind, prometheus_type = _KINDS[spec.kind]
        labels = [f"`{prometheus_label(key)}`" for key in spec.attributes]
        if spec.kind == "histogram":
            labels.append("`le` (`_bucket` only)")
        buckets = ", ".join(_number(b) for b in spec.buckets) if spec.buckets else "—"
        rows.append(
            (
                f"`{spec.name}`",
                f"{kind} ({prometheus_type})",
                f"`{spec.unit}`",
                "<br>".join(f"`{series}`" for series in prometheus_series(spec)),
                ", ".join(labels),
                spec.description,
                buckets,
                _most_series(spec),
            )
        )
    header = ("metric", "kind (Prometheus type)", "unit", "Prometheus series", "labels")
    return [
        "## Metrics",
        "",
        "Prometheus names are those of the OpenTelemetry Prometheus exporter and of the "
        "Collector's default translation (`UnderscoreEscapingWithSuffixes`). Every series also "
        "carries `job` and `instance` from the scrape and, from exporter 0.64b0, "
        "`otel_scope_name`, `otel_scope_version` and `otel_scope_schema_url`: never depend on "
        "those, aggregate with `sum by (...)`, and take `sum(rate(...))`, never `rate(sum(...))`.",
        "",
        *_table((*header, "description", "bucket boundaries", "most series (+ per route)"), rows),
        "",
        "*Most series*: the most attribute sets the instrument can hold whatever the traffic, "
        f"with the {len(BUILT_IN)} built-in routes, and what each route registered with "
        "`register_route()` adds (see the caps below).",
        "",
        "Series that exist before their first event, so that `increase()` sees the first one, "
        f"created the first time one of the first {semconv.MAX_SERIES_KEYS} series keys (route, "
        "server.address, provider, model) is seen:",
        "",
        f"- `{semconv.STREAMS.name}`: every outcome at 0, without a stop reason (failed streams "
        "carry none either).",
        f"- `{semconv.TOOL_CALLS.name}`: `{semconv.TOOL_CALL_KIND}` `{semconv.TOOL_CALL_CLIENT}` "
        f"with `{semconv.TOOL_CALL_VALID}` true and false at 0 (server-run calls appear with "
        "the first one).",
        f"- `{semconv.STREAM_REFUSALS.name}`: 0.",
        f"- `{semconv.INSTRUMENTATION_ERRORS.name}`: every stage at 0 when otelsse is "
        "instrumented.",
        "",
    ]


def _closed_sets() -> list[str]:
    outcomes = [
        (f"`{o.value}`", "ERROR" if o.value in semconv.ERROR_OUTCOMES else "unset") for o in Outcome
    ]
    stages = [
        (f"`{stage}`", semconv.INSTRUMENTATION_STAGE_DESCRIPTIONS[stage])
        for stage in semconv.INSTRUMENTATION_STAGES
    ]
    routes = [
        (
            f"`{route.name}`",
            f"`{route.provider}`" if route.provider else "— (absent)",
            f"`{' '.join(route.example_request)}`" if route.example_request else "any SSE",
            _code(sorted(route.success_stops)) if route.has_terminal else "none: `eof_unverified`",
        )
        for route in BUILT_IN
    ]
    profiles = [
        (
            f"`{profile.profile}`",
            f"`{profile.full_name()}`",
            _code(profile.hosts),
            " ".join((profile.__doc__ or "").split()).replace("``", "`"),
        )
        for profile in BUILT_IN_PROFILES
    ]
    return [
        "## Label values",
        "",
        f"### `{semconv.OUTCOME}` (closed)",
        "",
        "What each means, and what to do about it: [outcomes.md](outcomes.md).",
        "",
        *_table(("value", "span status"), outcomes),
        "",
        f"### `{semconv.INSTRUMENTATION_STAGE}` (closed)",
        "",
        *_table(("value", "a contained failure while"), stages),
        "",
        f"### `{semconv.TOOL_CALL_KIND}` (closed)",
        "",
        f"{_code(semconv.TOOL_CALL_KINDS)}.",
        "",
        f"### `{semconv.TOOL_CALL_VALID}` (closed)",
        "",
        "`true` or `false` (a boolean attribute; the Prometheus label value is the string); "
        f"absent on `{semconv.TOOL_CALL_SERVER}` calls.",
        "",
        f"### `{semconv.ROUTE}` and `{semconv.GEN_AI_PROVIDER_NAME}`",
        "",
        "The built-in routes, as each route module declares them: its provider, a request it "
        "recognises, and the stop reasons that count as success. Routes registered with "
        f"`register_route()` "
        f"add their own names. `{AUTO}` asks for the contract to be sniffed from the first "
        "events and is replaced by the route found (except on "
        f"`{semconv.STREAMS_ACTIVE.name}`, see `{semconv.ROUTE}` above).",
        "",
        *_table(("route", "provider", "e.g. request", "success stops"), routes),
        "",
        f"### `{semconv.ROUTE_PROFILE}`",
        "",
        "The built-in host profiles: variants of a route's contract for the servers that bend it "
        "on purpose, chosen by the request's host (`.example.com` covers its subdomains). "
        "`register_host()` and `instrument(host_profiles=...)` add hosts, and a `Route` "
        "subclass that sets `profile` adds a profile. What each OpenAI-compatible service "
        "sends at the end of a stream, with sources: [gateways.md](gateways.md).",
        "",
        *_table(("profile", "route name", "built-in hosts", "what it allows"), profiles),
        "",
    ]


def _caps() -> list[str]:
    s = semconv
    other = f"`{s.OVERFLOW_VALUE}`"
    return [
        "## Cardinality and size caps",
        "",
        f"The OpenTelemetry SDK keeps at most {s.SDK_CARDINALITY_LIMIT} attribute sets per "
        "instrument by default; later points go to one series labelled "
        '`otel_metric_overflow="true"` that carries no other attribute, not even the outcome. '
        f"otelsse folds its own overflow into {other} long before that, always keeping the "
        "route, the provider and the outcome:",
        "",
        f"- `{s.GEN_AI_RESPONSE_MODEL}`: the first {s.DEFAULT_MAX_MODEL_NAMES} distinct values "
        f"pass, later ones become {other} (`instrument(max_model_names=...)`).",
        f"- `{s.SERVER_ADDRESS}`: the first {s.DEFAULT_MAX_SERVER_ADDRESSES} distinct values "
        f"pass, later ones become {other}.",
        f"- `{s.STOP_REASON}`: the first {s.DEFAULT_MAX_STOP_REASONS} distinct values pass, "
        f"later ones become {other}.",
        f"- Models and stop reasons are cut to {s.MAX_METRIC_VALUE_CHARS} characters before "
        "they are counted.",
        f"- Series keys (route, server.address, provider, model): the first "
        f"{s.MAX_SERIES_KEYS} distinct ones get series of their own, with their outcomes "
        f"pre-created at 0. A later key is counted under its route's overflow key: "
        f"`{s.SERVER_ADDRESS}` and `{s.GEN_AI_RESPONSE_MODEL}` {other}. On "
        f"`{s.STREAMS_ACTIVE.name}` the key is (route, server.address), capped the same way.",
        f"- Stop reasons on `{s.STREAMS.name}` and the histograms: the first "
        f"{s.MAX_STOP_REASON_SERIES} distinct (series key, outcome, stop reason) sets keep "
        "their values; a later one is counted under its route's overflow key with stop reason "
        f"{other}.",
        "",
        "The key and stop-reason limits are what bound every instrument (the *most series* "
        "column above), whatever the per-attribute caps are set to: with the built-in routes "
        "each instrument stays under half the SDK's limit, and it takes dozens of registered "
        "routes to approach it. Traffic never adds a route: only `register_route()` does.",
        "",
        "On the span, provider-sent values are cut: stop reasons, finish reasons and error "
        f"codes to {s.MAX_CODE_CHARS} characters, the model and the response id to "
        f"{s.MAX_IDENTIFIER_CHARS}; `{s.GEN_AI_RESPONSE_FINISH_REASONS}` keeps at most "
        f"{s.MAX_FINISH_REASONS} entries; `{s.REQUEST_ID}` keeps at most "
        f"{s.MAX_REQUEST_ID_CHARS} characters, printable ones only.",
        "",
    ]


# -- the tool gate -------------------------------------------------------------------------------

#: Span kind of both gate spans (``otelsse.telemetry.GateTelemetry``).
GATE_SPAN_KIND = "INTERNAL"
_ATTEMPT = semconv.GATE_SPAN_NAME
_CALL = semconv.TOOL_CALL_SPAN_NAME
_BOTH = (_ATTEMPT, _CALL)
_S = ToolCallState


class GateAttribute(NamedTuple):
    """What one attribute key holds on the gate's spans and counter."""

    #: OpenTelemetry attribute type, as in ``semconv.AttributeSpec``.
    type: str
    unit: str
    #: The gate spans that may carry it (the counter's are ``semconv.GATE_CALLS.attributes``).
    spans: tuple[str, ...]
    description: str


#: Every key of ``semconv.GATE_ATTRIBUTES`` and of ``otelsse.gate.calls``. Keys the stream's span
#: shares (route, outcome, response id, error.type) are described again: on the gate they hold
#: something else, or are set at another moment.
GATE_ATTRIBUTE_DOCS: dict[str, GateAttribute] = {
    semconv.GATE_RUN_ID: GateAttribute(
        "string", "", _BOTH,
        "The caller's run id (`run_id=`, a random hex id when not given): opaque, never derived "
        "from content. Also on each link from an attempt's span to the run's earlier attempts.",
    ),
    semconv.GATE_ATTEMPT: GateAttribute(
        "int", "", _BOTH,
        "The attempt's number within its run, from 1, counted by the ledger: a retry is a new "
        "attempt with fresh accumulators.",
    ),
    semconv.GATE_FAULT: GateAttribute(
        "string", "", (_ATTEMPT,),
        "Why the attempt's stream was refused: a `StreamFault` code, i.e. an outcome name or one "
        "of `otelsse.reader.FAULT_CODES`. Absent when the stream was accepted.",
    ),
    semconv.ROUTE: GateAttribute(
        "string", "", (_ATTEMPT,),
        "The route the attempt's stream was judged by. Absent when the response was refused "
        "for its status or media type, before its body, or when the attempt raised.",
    ),
    semconv.OUTCOME: GateAttribute(
        "string", "", (_ATTEMPT,),
        "The stream's outcome (see [outcomes.md](outcomes.md)). Absent when no body was judged, "
        "as for the route.",
    ),
    semconv.GEN_AI_RESPONSE_ID: GateAttribute(
        "string", "", _BOTH,
        "OTel GenAI convention: the response id the stream reported (on a call's span, the "
        f"response of the call), cut to {semconv.MAX_IDENTIFIER_CHARS} characters. Absent when "
        "the stream named none.",
    ),
    semconv.ERROR_TYPE: GateAttribute(
        "string", "", _BOTH,
        "On `otelsse.gate`: the fault code when the stream was refused, `cancelled` when the "
        "attempt raised (an executor's `BaseException`, a cancelled task). On "
        "`otelsse.tool_call`: the call's error class (the closed set below) or, for "
        "`execution_failed`, the executor's exception type name, cut to "
        f"{semconv.MAX_CODE_CHARS} characters. On `otelsse.gate.calls`: the error class only. "
        "Absent when there was none.",
    ),
    semconv.TOOL_CALL_STATE: GateAttribute(
        "string", "", (_CALL,),
        "The state the call ended the attempt in: a `ToolCallState` value (below). Always "
        "present.",
    ),
    semconv.TOOL_CALL_BYTES: GateAttribute(
        "int", "By", (_CALL,),
        "UTF-8 bytes of the call's argument text: all of it once its item ended, what had "
        "arrived when it was quarantined before that. Never the text itself.",
    ),
    semconv.TOOL_CALL_JSON_STATUS: GateAttribute(
        "string", "", (_CALL,),
        "`valid` (exactly one JSON object), `invalid`, `not_object` (one JSON value, not an "
        "object), `text` (a custom tool's free text) or `unchecked` (never parsed: its item "
        "never ended, or its stream was refused). "
        "Always present.",
    ),
    semconv.TOOL_CALL_TRAILING_DATA: GateAttribute(
        "boolean", "", (_CALL,),
        "True when the arguments were one JSON value followed by more non-whitespace data "
        "(error class `trailing_data`). Always present.",
    ),
    semconv.TOOL_CALL_SCHEMA_STATUS: GateAttribute(
        "string", "", (_CALL,),
        "`valid`, `invalid` (error class `schema_invalid`), `none` (no schema registered for the "
        "tool, or a custom tool) or `unchecked` (never reached the schema). Always present.",
    ),
    semconv.TOOL_CALL_POLICY: GateAttribute(
        "string", "", (_CALL,),
        "The policy's answer: `approve`, `deny` or `needs_approval` (`deny` too when the policy "
        "raised or answered anything else, error class `policy_error`). Absent when the policy "
        "was never asked.",
    ),
    semconv.TOOL_CALL_EXECUTION: GateAttribute(
        "string", "", (_CALL,),
        "`succeeded` or `failed` when the executor ran now; for a call the ledger had already "
        "claimed, the ledger's status: `decided` (`needs_reconciliation`), `succeeded` or "
        "`failed` (`replayed`). Absent when no executor was called.",
    ),
    semconv.GEN_AI_TOOL_NAME: GateAttribute(
        "string", "", (_CALL,),
        "OTel GenAI convention: the tool name the model chose, registered or not, cut to "
        f"{semconv.MAX_CODE_CHARS} characters on the span. On `otelsse.gate.calls` it is capped "
        "(see below), and a call without a name counts with an empty value (no label in "
        "Prometheus). Absent on the span when the stream named none.",
    ),
    semconv.GEN_AI_TOOL_CALL_ID: GateAttribute(
        "string", "", (_CALL,),
        "OTel GenAI convention: the provider's call id (`call_...`, `toolu_...`), cut to "
        f"{semconv.MAX_IDENTIFIER_CHARS} characters. Absent when the provider sent none (the "
        "ledger then keys the call by its position, `#N`).",
    ),
}  # fmt: skip

#: What each state means, and whether the call's span has status ERROR in it.
STATE_DOCS: dict[ToolCallState, tuple[str, bool]] = {
    _S.RECEIVING: ("The stream named the call.", False),
    _S.ITEM_OPEN: ("Its argument accumulator is open: bytes may still arrive.", False),
    _S.ITEM_TERMINAL: ("The provider declared it complete (its item's terminal event).", False),
    _S.PARSED: ("Its whole argument text is one JSON object (or a custom tool's text).", False),
    _S.SCHEMA_VALID: ("It names a registered tool and passes that tool's JSON Schema.", False),
    _S.POLICY_APPROVED: (
        "The policy approved it; the only state from which the executor is called. Counted in "
        "it when no executor was given for the tool (error class `no_executor`) or when the "
        "executor was interrupted by a `BaseException` (no error class: the ledger keeps it "
        "decided, and it comes back as `needs_reconciliation`).",
        False,
    ),
    _S.EXECUTED: ("The executor returned; the ledger holds the result.", False),
    _S.QUARANTINED: (
        "Never run: the stream failed before the call was proven (timeout, disconnect, error, "
        "missing terminal: error class = the fault code) or its arguments were unusable.",
        True,
    ),
    _S.POLICY_DENIED: ("The policy refused it, or failed (`policy_error`); not run.", False),
    _S.NEEDS_APPROVAL: ("The policy wants a human to decide; not run in this attempt.", False),
    _S.EXECUTION_FAILED: ("The executor raised; the ledger holds the failure.", True),
    _S.NEEDS_RECONCILIATION: (
        "The ledger holds a decision for this call without a result: a process died or was "
        "interrupted while the tool ran, so its side effect is unknown. Never run again "
        "automatically.",
        True,
    ),
    _S.REPLAYED: (
        "The ledger already holds this call's result (a replayed stream, a second gate on the "
        "same ledger); not run again.",
        False,
    ),
}  # fmt: skip

#: Each error class of a call (``gate.ERROR_CLASSES``) and each ``StreamFault`` code of the
#: reader (``reader.FAULT_CODES``): the one state it comes with, and what it means. Outcome
#: names, the other fault codes, all come with ``QUARANTINED``.
ERROR_CLASS_DOCS: dict[str, tuple[ToolCallState, str]] = {
    INVALID_JSON: (_S.QUARANTINED, "The arguments are not exactly one JSON value."),
    TRAILING_DATA: (_S.QUARANTINED, "One JSON value followed by more data."),
    gate.ARGUMENTS_NOT_OBJECT: (_S.QUARANTINED, "One JSON value, but not an object."),
    gate.UNREGISTERED_TOOL: (
        _S.QUARANTINED,
        "The model called a tool that is not registered for the run (also a reader fault code "
        "with `tools=`).",
    ),
    gate.DUPLICATE_CALL_ID: (
        _S.QUARANTINED,
        "With `run_at=\"item\"`: an earlier call of the response has the same id.",
    ),
    gate.SCHEMA_INVALID: (_S.QUARANTINED, "The arguments fail the tool's JSON Schema."),
    gate.POLICY_DENIED: (_S.POLICY_DENIED, "The policy answered `deny`."),
    gate.POLICY_ERROR: (_S.POLICY_DENIED, "The policy raised or answered something else."),
    gate.NO_EXECUTOR: (_S.POLICY_APPROVED, "Approved, but `execute=` has no executor for it."),
    gate.EXECUTION_ERROR: (_S.EXECUTION_FAILED, "The executor raised an `Exception`."),
    reader.UNACCEPTED_STOP: (
        _S.QUARANTINED, "The stream ended with a stop reason outside `accept_stop_reasons`.",
    ),
    reader.TOOL_SCHEMA_ERROR: (
        _S.QUARANTINED, "Reader fault code with `tools=`: a call failed its JSON Schema.",
    ),
    reader.DUPLICATE_TOOL_CALL_ID: (
        _S.QUARANTINED, "Two client tool calls of the response share an id: the stream is refused.",
    ),
}  # fmt: skip


def gate_gaps(
    attributes: Mapping[str, GateAttribute] | None = None,
    states: Mapping[ToolCallState, object] | None = None,
    errors: Mapping[str, object] | None = None,
) -> list[str]:
    """What the gate tables (by default this module's) fail to describe, or describe in
    excess, of the names semconv, ``ToolCallState`` and the error classes define."""
    attributes = GATE_ATTRIBUTE_DOCS if attributes is None else attributes
    states = STATE_DOCS if states is None else states
    errors = ERROR_CLASS_DOCS if errors is None else errors
    gaps = []
    keys = {
        *semconv.GATE_ATTRIBUTES,
        *(k for spec in semconv.GATE_METRICS for k in spec.attributes),
    }
    gaps += [f"attribute {key} is not described" for key in sorted(keys - set(attributes))]
    gaps += [f"attribute {key} is not a gate name" for key in sorted(set(attributes) - keys)]
    for key, doc in attributes.items():
        shared = semconv.ATTRIBUTE_SPECS.get(key)
        if shared is not None and shared.type != doc.type:
            gaps.append(f"attribute {key} is a {shared.type} in ATTRIBUTE_SPECS, not {doc.type}")
    gaps += [f"state {s.value} is not described" for s in ToolCallState if s not in states]
    classes = {*gate.ERROR_CLASSES, *reader.FAULT_CODES}
    gaps += [f"error class {name} is not described" for name in sorted(classes - set(errors))]
    gaps += [f"error class {name} is not a gate error" for name in sorted(set(errors) - classes)]
    return gaps


#: The outcomes a refused stream's fault code can be: any but ``complete``.
FAULT_OUTCOMES = tuple(o.value for o in Outcome if o is not Outcome.COMPLETE)


def gate_error_types() -> list[str]:
    """Every value ``error.type`` can take on ``otelsse.gate.calls``: the calls' error classes,
    the reader's fault codes and the outcome names a refused stream's code can be."""
    return sorted({*gate.ERROR_CLASSES, *reader.FAULT_CODES, *FAULT_OUTCOMES})


def gate_error_state(error_type: str) -> ToolCallState:
    """The one state a call with this ``error.type`` is counted in."""
    return ERROR_CLASS_DOCS[error_type][0] if error_type in ERROR_CLASS_DOCS else _S.QUARANTINED


def gate_series_bounds() -> tuple[int, int]:
    """Attribute sets ``otelsse.gate.calls`` can hold: the product of its label sets (states,
    tool names with the overflow value, error types or none), and the bound that holds because
    each error type comes with one state (error types, plus each state without one)."""
    tools = semconv.DEFAULT_MAX_TOOL_NAMES + 1
    states, errors = len(ToolCallState), len(gate_error_types())
    return states * tools * (errors + 1), (errors + states) * tools


def _gate() -> list[str]:
    s = semconv
    gaps = gate_gaps()
    if gaps:
        raise SystemExit(
            "docs/generate_reference.py: the tool gate's tables are out of date: " + "; ".join(gaps)
        )
    metric_keys = {k for spec in s.GATE_METRICS for k in spec.attributes}
    attribute_rows = []
    for key, doc in GATE_ATTRIBUTE_DOCS.items():
        on = [f"`{span}`" for span in doc.spans]
        if key in metric_keys:
            on.append("metrics")
        attribute_rows.append(
            (
                f"`{key}`",
                doc.type,
                f"`{doc.unit}`" if doc.unit else "—",
                ", ".join(on),
                f"`{prometheus_label(key)}`" if key in metric_keys else "—",
                doc.description,
            )
        )
    product, paired = gate_series_bounds()
    metric_rows = []
    for spec in s.GATE_METRICS:
        kind, prometheus_type = _KINDS[spec.kind]
        metric_rows.append(
            (
                f"`{spec.name}`",
                f"{kind} ({prometheus_type})",
                f"`{spec.unit}`",
                "<br>".join(f"`{series}`" for series in prometheus_series(spec)),
                ", ".join(f"`{prometheus_label(key)}`" for key in spec.attributes),
                spec.description,
                str(paired),
            )
        )
    failed = [state for state, (_, error) in STATE_DOCS.items() if error]
    state_rows = [
        (
            f"`{state.value}`",
            "yes" if state in gate.FINAL_STATES else "no",
            "ERROR" if STATE_DOCS[state][1] else "unset",
            STATE_DOCS[state][0],
        )
        for state in ToolCallState
    ]
    error_rows = [
        (f"`{name}`", f"`{state.value}`", meaning)
        for name, (state, meaning) in sorted(ERROR_CLASS_DOCS.items())
    ]
    outcomes = [value for value in FAULT_OUTCOMES if value not in ERROR_CLASS_DOCS]
    other = f"`{s.OVERFLOW_VALUE}`"
    return [
        "## The tool gate",
        "",
        "`otelsse.ToolGate` has spans and a counter of its own, apart from the stream's: it reads "
        "streams through the enforcing reader, not through the instrumentation, and its calls are "
        "decisions, not traffic. Like everything else they hold ids, names, sizes, statuses and "
        "short error classes: never arguments, never executor results. The alerts and the "
        "runbooks built on them: [runbooks.md](runbooks.md).",
        "",
        "### Spans",
        "",
        *_table(
            ("span name", "kind", "one per", "parent", "status ERROR when"),
            (
                (
                    f"`{_ATTEMPT}`",
                    GATE_SPAN_KIND,
                    "attempt (`gate.run()` / `gate.arun()`: one stream read and its calls decided)",
                    "the current span; linked to the run's earlier attempts, each link with "
                    f"`{s.GATE_RUN_ID}`",
                    "the stream was refused (`error.type` is the fault code) or the attempt "
                    "raised (`cancelled`)",
                ),
                (
                    f"`{_CALL}`",
                    GATE_SPAN_KIND,
                    "tool call the application is asked to run (server-run calls have none), "
                    "from the moment the stream opened it to its decision or result",
                    f"its attempt's `{_ATTEMPT}` span",
                    f"its state is {_code(state.value for state in failed)}",
                ),
            ),
        ),
        "",
        "### Attributes",
        "",
        *_table(
            ("attribute", "type", "unit", "on", "Prometheus label", "description"), attribute_rows
        ),
        "",
        "### Metric",
        "",
        "One point per call when its attempt ends, in the state the call ended in. No series "
        "exists before its first call, so `increase()` does not see a series' first call; the "
        "alerts allow for it.",
        "",
        *_table(
            (
                "metric",
                "kind (Prometheus type)",
                "unit",
                "Prometheus series",
                "labels",
                "description",
                "most series",
            ),
            metric_rows,
        ),
        "",
        f"### `{s.TOOL_CALL_STATE}` (closed)",
        "",
        f"The legal moves are `otelsse.gate._TRANSITIONS`: {_S.RECEIVING.value} → "
        f"{_S.ITEM_OPEN.value} → {_S.ITEM_TERMINAL.value} → {_S.PARSED.value} → "
        f"{_S.SCHEMA_VALID.value} → {_S.POLICY_APPROVED.value} → {_S.EXECUTED.value}, "
        f"`{_S.QUARANTINED.value}` from any state before the policy, and the other final "
        "states from the policy's and the ledger's answers.",
        "",
        *_table(("value", "final", "span status", "meaning"), state_rows),
        "",
        f"### `{s.ERROR_TYPE}` on `{s.GATE_CALLS.name}` (closed)",
        "",
        f"A call's error class, or the code of the fault that refused its stream. Besides the "
        f"values below, the outcome names ({_code(outcomes)}) come with "
        f"`{_S.QUARANTINED.value}`: the stream was refused with that outcome "
        "([outcomes.md](outcomes.md)). Calls in the other states carry no `error.type`.",
        "",
        *_table(("value", "state", "meaning"), error_rows),
        "",
        "### Cardinality",
        "",
        f"- `{s.GEN_AI_TOOL_NAME}` on `{s.GATE_CALLS.name}`: the first "
        f"{s.DEFAULT_MAX_TOOL_NAMES} distinct names the process's gates count pass, later "
        f"ones become {other}; names are cut to {s.MAX_METRIC_VALUE_CHARS} characters first. "
        "The model chooses the name, so an unregistered one is as free as a model name.",
        f"- The label sets multiply to {len(ToolCallState)} states x "
        f"({s.DEFAULT_MAX_TOOL_NAMES} + 1) tool names x ({len(gate_error_types())} error types "
        f"+ none) = {product} attribute sets, more than the SDK's {s.SDK_CARDINALITY_LIMIT}. "
        "What bounds the counter is that each error type comes with one state (the tables "
        f"above): ({len(gate_error_types())} error types + {len(ToolCallState)} states "
        f"without one) x {s.DEFAULT_MAX_TOOL_NAMES + 1} tool names = {paired}: under the "
        "SDK's limit, with little room to spare.",
        "",
    ]


def render() -> str:
    lines = [
        "# otelsse telemetry reference",
        "",
        "<!-- Generated by docs/generate_reference.py from otelsse/semconv.py: do not edit. "
        "Regenerate with `python docs/generate_reference.py --write`. -->",
        "",
        "Every name below is defined in `otelsse/semconv.py`, which the code, the dashboards "
        "and the alerts read.",
        "",
        *_span(),
        *_attributes(),
        *_metrics(),
        *_closed_sets(),
        *_caps(),
        *_gate(),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUTPUT}")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        OUTPUT.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
