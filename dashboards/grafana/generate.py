"""Generate the otelsse Grafana overview dashboard (Classic JSON model).

The committed ``dashboards/otelsse-overview.json`` is this script's output; a test checks that they
match, so edit this file and run ``python dashboards/grafana/generate.py`` (``--check`` only
compares). Queries use the series names the OpenTelemetry Prometheus exporter and the Collector's
default OTLP translation (``UnderscoreEscapingWithSuffixes``) produce from ``otelsse.semconv``;
each one filters on exactly the dashboard variables its metric has labels for. The runbook links
and the alerts they name come from ``dashboards/prometheus/generate_rules.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from otelsse import semconv
from otelsse.gate import ToolCallState

OUTPUT = Path(__file__).parent / "dashboards" / "otelsse-overview.json"

Json = dict[str, Any]


def _load_rules() -> ModuleType:
    """The Prometheus rule generator: its runbook base URL and which alert watches what."""
    path = Path(__file__).resolve().parents[1] / "prometheus" / "generate_rules.py"
    spec = importlib.util.spec_from_file_location("generate_rules", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES = _load_rules()

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
#: The traces data source the failing-streams links open (the compose stack provisions Jaeger).
TRACES_TYPE = "jaeger"
RATE = "$__rate_interval"
RANGE = "$__range"

STREAMS = "otelsse_streams_total"
ACTIVE = "otelsse_streams_active"
TOOL_CALLS = "otelsse_tool_calls_total"
REFUSALS = "otelsse_stream_refusals_total"
INSTRUMENTATION_ERRORS = "otelsse_instrumentation_errors_total"
TTFE = "otelsse_stream_time_to_first_event_seconds_bucket"
TTFO = "otelsse_stream_time_to_first_output_seconds_bucket"
DURATION = "otelsse_stream_duration_seconds_bucket"
GAP = "otelsse_stream_max_inter_event_gap_seconds_bucket"
EVENTS = "otelsse_stream_events_bucket"
BYTES = "otelsse_stream_bytes_bucket"
#: The tool gate's counter (``semconv.GATE_CALLS``): by final state, tool name and error type.
GATE_CALLS = "otelsse_gate_calls_total"
STATUS = semconv.prometheus_label(semconv.HTTP_RESPONSE_STATUS_CODE)

#: Template variables after the data sources, in chain order: (name, label, Prometheus label).
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("job", "Job", "job"),
    ("route", "Route", "otelsse_route"),
    ("provider", "Provider", "gen_ai_provider_name"),
    ("server_address", "Server", "server_address"),
    ("model", "Model", semconv.prometheus_label(semconv.GEN_AI_REQUEST_MODEL)),
)
_VARIABLE_OF = {label: name for name, _, label in VARIABLES}


def _labels() -> dict[str, frozenset[str]]:
    """Series name -> the labels it carries (its attributes, and the scrape's ``job``)."""
    labels = {}
    for spec in (*semconv.METRICS, *semconv.GENAI_METRICS, *semconv.GATE_METRICS):
        carried = frozenset({"job", *map(semconv.prometheus_label, spec.attributes)})
        for series in semconv.prometheus_series(spec):
            labels[series] = carried
    return labels


LABELS = _labels()


def _series(spec: semconv.MetricSpec, suffix: str) -> str:
    [name] = [name for name in semconv.prometheus_series(spec) if name.endswith(suffix)]
    return name


#: The GenAI client metrics under both names (``semconv.genai_metrics``): a query reads
#: whichever set the application emits, ``or`` the other.
GENAI = {
    measure: tuple(
        table[measure] for table in (semconv.GENAI_METRICS_LEGACY, semconv.GENAI_METRICS_LATEST)
    )
    for measure in semconv.GENAI_MEASURES
}

#: Every error outcome (span status ERROR), in the order the failure row shows them, with what
#: it means and what the on-call engineer should look at first.
FAILURES: tuple[tuple[str, str, str], ...] = (
    (
        "truncated",
        "Streams that ended (EOF or transport error) before the route's terminal event, or with a "
        "partial line, event, UTF-8 sequence or open tool call pending: the caller got a partial "
        "answer that can look complete. A whole answer whose end marker alone is missing is "
        "terminal_missing, not counted here.",
        "Check proxies and load balancers for idle/response timeouts shorter than the longest "
        "streams (compare with the duration p99 and the max inter-event gap), connection resets, "
        "and provider incidents. Split by route and server, then open the failing streams from "
        "the table below.",
    ),
    (
        "provider_error",
        "Streams where the provider reported an error inside the stream (event: error, an error "
        "object, response.failed), e.g. overloaded mid-answer.",
        "Check the provider status page and split by model and server. Callers should retry "
        "with backoff; a sustained rate means capacity problems.",
    ),
    (
        "http_error",
        "Streaming requests answered with an HTTP error status other than 429 (401, 404, 500, "
        "502, 503, 529...). Only those that are not a 4xx count against the SLO.",
        "See the HTTP errors panel for the statuses: 5xx and 529 are the provider or a proxy; "
        "401/403 credentials, 404 a wrong model or path, 400 the request.",
    ),
    (
        "rate_limited",
        "Streaming requests refused with HTTP 429: the caller's quota or the provider's throttle. "
        "Not counted against the SLO.",
        "Compare with the stream rate: more traffic (or retries without backoff) or a lower "
        "quota. The spans' otelsse.retry_after says how long the server asked to wait.",
    ),
    (
        "timeout",
        "Streams where the client's own read deadline fired mid-stream. Not counted against the "
        "SLO: otelsse cannot tell a stalled provider from an impatient client.",
        "Compare the client read timeout with the max inter-event gap and time-to-first-output "
        "p99: reasoning models can stay silent for minutes. Raise the deadline or find why the "
        "provider slowed down.",
    ),
    (
        "protocol_error",
        "Streams that broke the streaming protocol: a 2xx that was not an event stream (a JSON "
        "or HTML body, a 204) or an event order the route forbids.",
        "Look for a gateway or proxy answering in the provider's place, or a client not asking "
        "for a stream; after a provider release, an API change.",
    ),
    (
        "payload_error",
        "Streams where an event's JSON was invalid or not the route's shape, or a tool call "
        "finished with arguments that are not exactly one JSON value.",
        "Usually an API change or an OpenAI-compatible server that deviates from the contract. "
        "Check that the route detection is right for that server, then capture a body and run "
        "otelsse inspect on it.",
    ),
    (
        "decode_error",
        "Streams whose body contained invalid UTF-8: the application received text with U+FFFD "
        "replacement characters.",
        "Suspect something that rewrites bodies: a proxy re-chunking or transcoding, a wrong "
        "Content-Encoding, a broken gateway. Any non-zero value is worth a ticket.",
    ),
    (
        "buffer_limit",
        "Streams where a partial line, pending event or accumulator exceeded otelsse's ceiling; "
        "parsing stopped there (in observe mode the application's stream is unaffected).",
        "See otelsse.buffer_limit_stage on the span: a stream without line breaks is malformed; "
        "very large legitimate tool arguments need higher otelsse Limits.",
    ),
)
if {outcome for outcome, _, _ in FAILURES} != semconv.ERROR_OUTCOMES:
    raise SystemExit("FAILURES must list exactly semconv.ERROR_OUTCOMES; update the generator")
ERROR_REGEX = "|".join(outcome for outcome, _, _ in FAILURES)
ERROR_MATCHER = f'otelsse_outcome=~"{ERROR_REGEX}"'
#: The streams that count against the stream-success SLO, exactly as the SLO rules select them.
SLO_BAD = RULES.SLO_BAD
SLO_BAD_NAMES = ", ".join(
    outcome for outcome, _, _ in FAILURES if outcome in semconv.SLO_BAD_OUTCOMES
)
#: Only calls the application runs have arguments to validate; server-run ones have no validity.
CLIENT_CALLS = f'otelsse_tool_call_kind="{semconv.TOOL_CALL_CLIENT}"'
INVALID_CALLS = 'otelsse_tool_call_valid="false"'

#: The alert that watches each error outcome, for the runbook link of its panels.
ALERT_OF = {
    **{outcome: name for name, outcome, _, _ in RULES.RATIO_ALERTS},
    **{outcome: name for name, outcome, _ in RULES.ANY_ALERTS},
    "http_error": RULES.HTTP_ALERTS[0][0],
}
SLO_ALERT = "OtelsseStreamErrorBudgetBurn"
#: A whole answer whose end marker never came: watched apart from the failures.
TERMINAL_MISSING = "terminal_missing"
TERMINAL_MISSING_ALERT = "OtelsseStreamTerminalMissing"

OUTCOME_COLORS = {
    "complete": "green",
    "incomplete": "yellow",
    "cancelled": "blue",
    "eof_unverified": "purple",
    # A whole answer without its end marker: not a failure (no red), not complete either.
    "terminal_missing": "light-blue",
    "internal_error": "orange",
    "rate_limited": "light-orange",
    "truncated": "red",
}
PERCENT_STEPS = ((None, "green"), (0.01, "yellow"), (0.05, "red"))
STATE = "otelsse_tool_call_state"
#: Colours of the gate's final states: run, not run by decision, not run because unproven, and
#: the ones an engineer must look at.
STATE_COLORS = {
    "executed": "green",
    "replayed": "blue",
    "policy_denied": "orange",
    "needs_approval": "yellow",
    "policy_approved": "purple",
    "quarantined": "red",
    "execution_failed": "dark-red",
    "needs_reconciliation": "dark-purple",
}
if not set(STATE_COLORS) <= {state.value for state in ToolCallState}:
    raise SystemExit("STATE_COLORS names a state ToolCallState does not have")
ANY_IS_BAD_STEPS = ((None, "green"), (1, "red"))


# -- PromQL builders -------------------------------------------------------------------------------


def selector(metric: str, *matchers: str) -> str:
    """``metric{filters..., matchers...}`` with the dashboard variables the metric can honour."""
    filters = [
        f'{label}=~"${_VARIABLE_OF[label]}"' for _, _, label in VARIABLES if label in LABELS[metric]
    ]
    return f"{metric}{{{', '.join([*filters, *matchers])}}}"


def _sum(by: tuple[str, ...], inner: str) -> str:
    return f"sum by ({', '.join(by)}) ({inner})" if by else f"sum({inner})"


def _aggregate(
    fn: str, window: str, metric: str, matchers: tuple[str, ...], by: tuple[str, ...]
) -> str:
    return _sum(by, f"{fn}({selector(metric, *matchers)}[{window}])")


def per_second(metric: str, *matchers: str, by: tuple[str, ...] = ()) -> str:
    return _aggregate("rate", RATE, metric, matchers, by)


def per_interval(metric: str, *matchers: str, by: tuple[str, ...] = ()) -> str:
    """How many per graph step: small counts read better as numbers than as rates."""
    return _aggregate("increase", RATE, metric, matchers, by)


def over_range(metric: str, *matchers: str, by: tuple[str, ...] = ()) -> str:
    return _aggregate("increase", RANGE, metric, matchers, by)


def ratio(
    metric: str,
    matcher: str,
    by: tuple[str, ...] = (),
    window: str = RATE,
    *,
    among: tuple[str, ...] = (),
) -> str:
    """Share of ``metric`` (its series matching ``among``) that matches ``matcher``: numerator
    and denominator grouped alike."""
    fn = "rate" if window == RATE else "increase"
    part = _aggregate(fn, window, metric, (*among, matcher), by)
    return f"{part} / {_aggregate(fn, window, metric, among, by)}"


def share_of_streams(metric: str, by: tuple[str, ...] = (), window: str = RATE) -> str:
    """``metric`` (a per-stream counter with the streams' series key) per finished stream."""
    fn = "rate" if window == RATE else "increase"
    part = _aggregate(fn, window, metric, (), by)
    return f"{part} / {_aggregate(fn, window, STREAMS, (), by)}"


def quantile(
    q: float, buckets: tuple[str, ...], by: tuple[str, ...] = (), window: str = RATE
) -> str:
    """The ``q`` quantile of a histogram, read from whichever of ``buckets`` (one histogram's
    alternative names) has data."""
    fn = "rate" if window == RATE else "increase"
    either = " or ".join(_aggregate(fn, window, bucket, (), ("le", *by)) for bucket in buckets)
    return f"histogram_quantile({q}, {either})"


def genai_buckets(measure: str) -> tuple[str, ...]:
    return tuple(_series(spec, "_bucket") for (spec,) in GENAI[measure])


# -- panel builders --------------------------------------------------------------------------------


def target(
    expr: str, legend: str = "", *, instant: bool = False, table: bool = False,
    exemplar: bool = False,
) -> Json:  # fmt: skip
    t: Json = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto"}
    t |= {"instant": instant or table, "range": not (instant or table)}
    if table:
        t["format"] = "table"
    if exemplar:
        # The buckets' trace_id exemplars: one dot per sampled stream, linked to its trace by
        # the data source's exemplarTraceIdDestinations.
        t["exemplar"] = True
    return t


def thresholds(steps: tuple[tuple[float | None, str], ...]) -> Json:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }


def color_overrides(colors: dict[str, str]) -> list[Json]:
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}],
        }
        for name, color in colors.items()
    ]


def runbook(*alerts: str) -> list[Json]:
    """Panel links to the runbook sections of the alerts a panel explains."""
    return [
        {
            "title": f"Runbook: {alert}",
            "url": f"${{runbook_url}}#{alert.lower()}",
            "targetBlank": True,
        }
        for alert in alerts
    ]


def _panel(kind: str, title: str, description: str, targets: list[Json], w: int, h: int) -> Json:
    for index, t in enumerate(targets):
        t["refId"] = chr(ord("A") + index)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": h, "w": w},
        "targets": targets,
    }


def stat(
    title: str,
    description: str,
    expr: str,
    *,
    unit: str,
    steps: tuple[tuple[float | None, str], ...] = ((None, "blue"),),
    decimals: int = 2,
    w: int = 3,
    alerts: tuple[str, ...] = (),
) -> Json:
    panel = _panel("stat", title, description, [target(expr, instant=True)], w, 4)
    panel["links"] = runbook(*alerts)
    panel["fieldConfig"] = {
        "defaults": {
            "unit": unit,
            "decimals": decimals,
            "color": {"mode": "thresholds"},
            "thresholds": thresholds(steps),
            "mappings": [],
        },
        "overrides": [],
    }
    panel["options"] = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
    }
    return panel


def timeseries(
    title: str,
    description: str,
    targets: list[Json],
    *,
    unit: str,
    steps: tuple[tuple[float | None, str], ...] | None = None,
    stack: bool = False,
    colors: dict[str, str] | None = None,
    w: int = 12,
    alerts: tuple[str, ...] = (),
) -> Json:
    panel = _panel("timeseries", title, description, targets, w, 8)
    panel["links"] = runbook(*alerts)
    panel["fieldConfig"] = {
        "defaults": {
            "unit": unit,
            "min": 0,
            "color": {"mode": "palette-classic"},
            "thresholds": thresholds(steps or ((None, "green"),)),
            "custom": {
                "drawStyle": "line",
                "lineWidth": 1,
                "fillOpacity": 20 if stack else 0,
                "showPoints": "never",
                "spanNulls": False,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                # Failure panels draw their thresholds, so "above the line" is visible at once.
                "thresholdsStyle": {"mode": "dashed" if steps else "off"},
            },
        },
        "overrides": color_overrides(colors or {}),
    }
    panel["options"] = {
        "legend": {
            "displayMode": "table",
            "placement": "right",
            "calcs": ["mean", "max", "lastNotNull"],
            "showLegend": True,
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return panel


def table(
    title: str,
    description: str,
    targets: list[Json],
    transformations: list[Json],
    overrides: list[Json] | None = None,
    *,
    w: int = 12,
    links: list[Json] | None = None,
) -> Json:
    panel = _panel("table", title, description, targets, w, 8)
    panel["fieldConfig"] = {
        "defaults": {
            "unit": "short",
            "decimals": 0,
            "custom": {"align": "auto"},
            "links": links or [],
        },
        "overrides": overrides or [],
    }
    panel["options"] = {"showHeader": True, "cellHeight": "sm"}
    panel["transformations"] = transformations
    return panel


def matrix_table(title: str, description: str, rows: str, columns: str, *matchers: str) -> Json:
    """Streams over the range as a rows x columns grid (e.g. route x outcome)."""
    expr = over_range(STREAMS, *matchers, by=(rows, columns))
    grouping = {"columnField": columns, "rowField": rows, "valueField": "Value"}
    return table(
        title,
        description,
        [target(expr, table=True)],
        [{"id": "groupingToMatrix", "options": grouping}],
    )


def row(title: str) -> Json:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"h": 1}}


def _unit_overrides(units: dict[str, str]) -> list[Json]:
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "unit", "value": unit}, {"id": "decimals", "value": 2}],
        }
        for name, unit in units.items()
    ]


def traces_link(title: str, service: str, tags: dict[str, str]) -> Json:
    """A data link to Explore on the traces data source: the ``otelsse.stream`` spans of
    ``service`` with ``tags``, over the dashboard's time range (Jaeger's search query)."""
    query = {
        "refId": "A",
        "datasource": {"type": TRACES_TYPE, "uid": "${traces}"},
        "queryType": "search",
        "service": service,
        "operation": semconv.SPAN_NAME,
        "tags": " ".join(f"{key}={value}" for key, value in tags.items()),
        "limit": 20,
    }
    pane = {
        "datasource": "${traces}",
        "queries": [query],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    url = "/explore?schemaVersion=1&orgId=${__org}&panes=" + json.dumps(
        {"otelsse": pane}, separators=(",", ":")
    )
    return {"title": title, "url": url, "targetBlank": True}


# -- the dashboard ---------------------------------------------------------------------------------

_BY_RANGE = "over the selected time range"
#: Failure outcomes that should never happen in normal operation: shown as counts, not shares.
_COUNTED = {"buffer_limit": "Buffer-limit", "decode_error": "Decode-error"}


def overview_row() -> list[Json]:
    return [
        row("Overview"),
        stat(
            "Stream success",
            "The stream-success SLO's indicator: the share of finished streams that did not end "
            f"in a provider-side failure ({SLO_BAD_NAMES}; an http_error only when its status is "
            f"not a 4xx), {_BY_RANGE}. Rate limits, 4xx answers, the client's own timeouts, "
            "cancelled and incomplete streams, and whole answers without their end marker "
            f"({TERMINAL_MISSING}) count as success here: each has its own panel and alert. "
            "Below 99 %: look at the failure row to see which outcome drives it, then split by "
            "route and server.",
            f"1 - ({over_range(STREAMS, SLO_BAD)} / {over_range(STREAMS)})",
            unit="percentunit",
            steps=((None, "red"), (0.95, "yellow"), (0.99, "green")),
            alerts=(SLO_ALERT,),
        ),
        stat(
            "Streams finished",
            f"Streamed responses that ended (any outcome) {_BY_RANGE}. A sudden drop to zero "
            "with callers still active means the instrumentation or the scrape is broken, not "
            "that traffic stopped: check the Prometheus target and the instrumentation errors.",
            over_range(STREAMS),
            unit="short",
            decimals=0,
        ),
        stat(
            "Active streams",
            "Streams being read right now (sum of otelsse_streams_active; that metric carries "
            "only route and server labels, so the provider and model filters do not apply). A "
            "value that only grows means streams are never closed by the application (a leak) "
            "or end without otelsse seeing it.",
            _sum((), selector(ACTIVE)),
            unit="short",
            decimals=0,
        ),
        stat(
            "Time to first output p95",
            "95th percentile of the time from request send to the first piece of model output "
            f"(text, reasoning, refusal or a tool call), {_BY_RANGE}: what users feel as latency. "
            "The histogram has no server or model: those filters do not apply. Thresholds (5 s, "
            "10 s) are a starting point; set them to your SLO. When high, see the latency row and "
            "the GenAI time to first chunk by model.",
            quantile(0.95, (TTFO,), window=RANGE),
            unit="s",
            steps=((None, "green"), (5, "yellow"), (10, "red")),
            alerts=("OtelsseTimeToFirstOutputSlow",),
        ),
        stat(
            "Invalid tool calls",
            "Share of the tool calls the application runs whose arguments were not valid (not "
            f"exactly one JSON value), {_BY_RANGE}; calls the provider ran itself have no "
            "arguments to check and are left out. Running a tool from broken arguments is a "
            "correctness bug: check which model and route produce them (tool-call panels) and "
            "whether streams were truncated mid-call. Empty when no tool calls were made.",
            ratio(TOOL_CALLS, INVALID_CALLS, window=RANGE, among=(CLIENT_CALLS,)),
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=("OtelsseInvalidToolCallRateHigh",),
        ),
        *(
            stat(
                f"{_COUNTED[outcome]} streams",
                f"Number of streams that ended with outcome {outcome}, {_BY_RANGE}. {meaning} "
                f"{action}",
                over_range(STREAMS, f'otelsse_outcome="{outcome}"'),
                unit="short",
                decimals=0,
                steps=ANY_IS_BAD_STEPS,
                alerts=(ALERT_OF[outcome],),
            )
            for outcome, meaning, action in FAILURES
            if outcome in _COUNTED
        ),
        stat(
            "Instrumentation errors",
            f"Failures inside otelsse itself, {_BY_RANGE}, contained and never raised into the "
            "application. Any non-zero value means some streams were not (fully) observed: see "
            "the by-stage panel and the application's logs (logger otelsse), and report it.",
            over_range(INSTRUMENTATION_ERRORS),
            unit="short",
            decimals=0,
            steps=ANY_IS_BAD_STEPS,
            alerts=("OtelsseInstrumentationErrors", "OtelsseInstrumentationErrorRateHigh"),
        ),
    ]


def failure_row() -> list[Json]:
    by_job_route_outcome = ("job", "otelsse_route", "otelsse_outcome")
    failing = f"{over_range(STREAMS, ERROR_MATCHER, by=by_job_route_outcome)} > 0"
    http = 'otelsse_outcome=~"rate_limited|http_error"'
    return [
        row("Failure rates (share of finished streams)"),
        *(
            stat(
                f"{outcome} %",
                f"Share of finished streams with outcome {outcome}, {_BY_RANGE}. {meaning} "
                f"{action} Thresholds: yellow from 1 %, red from 5 %.",
                ratio(STREAMS, f'otelsse_outcome="{outcome}"', window=RANGE),
                unit="percentunit",
                steps=PERCENT_STEPS,
                w=2,
                alerts=(ALERT_OF[outcome],),
            )
            for outcome, meaning, action in FAILURES
        ),
        stat(
            "Provider-side failures %",
            f"Share of finished streams that count against the stream-success SLO, {_BY_RANGE}: "
            f"{SLO_BAD_NAMES}, and http_error only when its status is not a 4xx. The SLO's "
            "budget is 1 %. The tiles on this row say which outcome drives it; rate_limited and "
            "timeout are shown there but never count here.",
            f"{over_range(STREAMS, SLO_BAD)} / {over_range(STREAMS)}",
            unit="percentunit",
            steps=PERCENT_STEPS,
            w=6,
            alerts=(SLO_ALERT,),
        ),
        timeseries(
            "Failure rate by outcome",
            "Each error outcome as a share of all finished streams, over time. Dashed lines: "
            "1 % and 5 %. A step change at a deploy points at the client or a proxy; a change "
            "limited to one provider points at the provider (filter with the variables above).",
            [
                target(
                    per_second(STREAMS, ERROR_MATCHER, by=("otelsse_outcome",))
                    + f" / ignoring (otelsse_outcome) group_left {per_second(STREAMS)}",
                    "{{otelsse_outcome}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
        ),
        timeseries(
            "Provider-side failure rate by route",
            "Share of each route's finished streams that count against the stream-success SLO "
            "(the provider's failures: no rate limits, 4xx or client timeouts). One route far "
            "above the others usually means one provider or one gateway is at fault.",
            [
                target(
                    f"{per_second(STREAMS, SLO_BAD, by=('otelsse_route',))}"
                    f" / {per_second(STREAMS, by=('otelsse_route',))}",
                    "{{otelsse_route}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=(SLO_ALERT,),
        ),
        timeseries(
            "HTTP errors and rate limits by status",
            "Streaming requests refused before any event, per second, by HTTP status: 429 "
            "(rate_limited: the caller's quota) and every other error status (http_error). "
            "5xx and 529 are the provider or a proxy and burn the SLO; 401/403 are credentials, "
            "404 a wrong model or path, 400 the request: the application owner's fix.",
            [
                target(
                    per_second(STREAMS, http, by=(STATUS, "otelsse_outcome")),
                    f"{{{{{STATUS}}}}} {{{{otelsse_outcome}}}}",
                )
            ],
            unit="reqps",
            stack=True,
            alerts=(*(name for name, _, _, _ in RULES.HTTP_ALERTS), ALERT_OF["rate_limited"]),
        ),
        table(
            "Failing streams by job, route and outcome",
            f"Streams that ended with an error outcome {_BY_RANGE}, per job, route and outcome. "
            "Click a row's count to open those streams' otelsse.stream spans in the traces data "
            "source (the job is taken as the traces' service name: service.name when metrics "
            "arrive over OTLP).",
            [target(failing, table=True)],
            [
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {"Value": "Streams"},
                    },
                }
            ],
            links=[
                traces_link(
                    "Failing streams in traces",
                    "${__data.fields.job}",
                    {
                        semconv.OUTCOME: "${__data.fields.otelsse_outcome}",
                        semconv.ROUTE: "${__data.fields.otelsse_route}",
                    },
                )
            ],
        ),
        timeseries(
            "Truncation rate by route and server",
            "Share of streams cut off before their terminal event, per route and server. "
            f"{FAILURES[0][2]}",
            [
                target(
                    ratio(
                        STREAMS,
                        'otelsse_outcome="truncated"',
                        by=("otelsse_route", "server_address"),
                    ),
                    "{{otelsse_route}} {{server_address}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=(ALERT_OF["truncated"],),
        ),
        timeseries(
            "Missing end marker by route and server",
            "Share of streams whose answer was whole (every part had its final stop) and whose "
            "body then ended cleanly without the route's end marker (data: [DONE], "
            f"message_stop): outcome {TERMINAL_MISSING}, per route and server. Not a failure and "
            "not in the SLO, but not verified complete either: a cut just before the marker is "
            "the same bytes, and the enforcing reader refuses such streams. A server near 100 % "
            "never sends the marker: give it a host profile once its provider documents ending "
            "so; a few percent beside a rising truncation share are cuts.",
            [
                target(
                    ratio(
                        STREAMS,
                        f'otelsse_outcome="{TERMINAL_MISSING}"',
                        by=("otelsse_route", "server_address"),
                    ),
                    "{{otelsse_route}} {{server_address}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=(TERMINAL_MISSING_ALERT,),
        ),
        timeseries(
            "Active streams by route and server",
            "Streams being read at each moment, per route and server (otelsse_streams_active "
            "has only these labels). Compare with the stream rate: a steadily rising line with a "
            "flat finish rate is a leak of unclosed responses.",
            [
                target(
                    _sum(("otelsse_route", "server_address"), selector(ACTIVE)),
                    "{{otelsse_route}} {{server_address}}",
                )
            ],
            unit="short",
        ),
    ]


def traffic_row() -> list[Json]:
    return [
        row("Traffic"),
        timeseries(
            "Stream rate by outcome",
            "Finished streams per second, stacked by outcome. The healthy picture is mostly "
            "complete; incomplete is a proper stop the caller may still not accept (max_tokens, "
            f"content_filter); {TERMINAL_MISSING} a whole answer whose end marker never came (a "
            "server that never sends it, or a cut just before it). Red areas are failures: see "
            "the failure row.",
            [target(per_second(STREAMS, by=("otelsse_outcome",)), "{{otelsse_outcome}}")],
            unit="reqps",
            stack=True,
            colors=OUTCOME_COLORS,
        ),
        timeseries(
            "Stream rate by route",
            "Finished streams per second per route (provider contract). A route dropping to "
            "zero while others continue means its callers fail before streaming starts, or "
            "route detection changed (streams moving to generic).",
            [target(per_second(STREAMS, by=("otelsse_route",)), "{{otelsse_route}}")],
            unit="reqps",
            stack=True,
        ),
    ]


def _quantile_targets(bucket: str, quantiles: tuple[float, ...], name: str = "") -> list[Json]:
    return [
        target(quantile(q, (bucket,)), f"{name}p{round(q * 100)}", exemplar=True) for q in quantiles
    ]


def latency_row() -> list[Json]:
    p50_95_99 = (0.5, 0.95, 0.99)
    by_route = ("otelsse_route",)
    histograms = "The histograms carry route, provider and outcome only (no server or model)."
    return [
        row("Latency and size"),
        timeseries(
            "Time to first output and first event",
            "p50 and p95 of the time from request send to the first piece of model output "
            "(text, reasoning, refusal, a tool call: the time to first token) and to the first "
            "SSE event of any kind (a role chunk, message_start). A first event that comes early "
            "with the output late is the model thinking or queueing inside the stream; both "
            "late is the connection, the provider's queue or a buffering proxy. Dots are "
            f"exemplars: click one to open that stream's trace. {histograms}",
            [
                *_quantile_targets(TTFO, (0.5, 0.95), "output "),
                *_quantile_targets(TTFE, (0.5, 0.95), "first event "),
            ],
            unit="s",
            alerts=("OtelsseTimeToFirstOutputSlow",),
        ),
        timeseries(
            "Time to first output p95 by route",
            "95th percentile of the time to first output per route: which provider slowed "
            "down. If only one route rises, check that provider's status page and the GenAI "
            "time to first chunk by model; if all rise together, look at the network or a shared "
            "gateway. Dots are exemplars linked to traces.",
            [target(quantile(0.95, (TTFO,), by_route), "{{otelsse_route}}", exemplar=True)],
            unit="s",
            alerts=("OtelsseTimeToFirstOutputSlow",),
        ),
        timeseries(
            "Stream duration",
            "p50, p95 and p99 of the whole stream, from request send to its end (any outcome). "
            "Long answers are normal for LLMs; compare p99 with every timeout in the path "
            "(client, proxy, load balancer): streams near a timeout get truncated. Dots are "
            "exemplars linked to traces.",
            _quantile_targets(DURATION, p50_95_99),
            unit="s",
        ),
        timeseries(
            "Stream duration p95 by route",
            "95th percentile of stream duration per route. A route whose duration climbs "
            "towards a proxy or client timeout is the next one to show truncations or timeouts.",
            [target(quantile(0.95, (DURATION,), by_route), "{{otelsse_route}}", exemplar=True)],
            unit="s",
            alerts=(ALERT_OF["timeout"],),
        ),
        timeseries(
            "Max inter-event gap p95 by route",
            "95th percentile of each stream's longest silence between two events. Proxies "
            "with idle timeouts cut streams whose gap exceeds the timeout, and clients time "
            "out on it: keep every idle/read timeout well above this line's p99.",
            [target(quantile(0.95, (GAP,), by_route), "{{otelsse_route}}", exemplar=True)],
            unit="s",
            w=8,
            alerts=(ALERT_OF["timeout"],),
        ),
        timeseries(
            "Events per stream",
            "p50 and p95 of SSE events per stream. A drop with unchanged traffic means shorter "
            "answers (max_tokens, early stops) or truncation; a jump can mean a provider "
            "changed its chunking.",
            _quantile_targets(EVENTS, (0.5, 0.95)),
            unit="short",
            w=8,
        ),
        timeseries(
            "Bytes per stream",
            "p50 and p95 of response body bytes per stream. Useful with the buffer-limit "
            "errors: streams near otelsse's limits, or a provider suddenly sending much larger "
            "events.",
            _quantile_targets(BYTES, (0.5, 0.95)),
            unit="bytes",
            w=8,
        ),
    ]


def genai_row() -> list[Json]:
    """The OpenTelemetry GenAI client metrics, per request model: what otelsse's histograms
    leave out. Another GenAI instrumentation may record them instead of otelsse."""
    by_model = ("gen_ai_provider_name", "gen_ai_request_model")
    model_legend = "{{gen_ai_provider_name}} {{gen_ai_request_model}}"
    where = (
        "From the OpenTelemetry GenAI client metrics (either name set: the default one, or "
        "the one OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental selects), which "
        "otelsse records for provider routes unless another GenAI instrumentation of the same "
        "call does. They have no route: the route filter does not apply."
    )
    legacy_usage, latest_usage = GENAI[semconv.TOKEN_USAGE_METRIC]
    [legacy_usage_spec] = legacy_usage
    usage = [per_second(_series(legacy_usage_spec, "_sum"), by=("gen_ai_token_type",))]
    usage += [
        f'label_replace({per_second(_series(spec, "_total"))}, "gen_ai_token_type",'
        f' "{token_type}", "", "")'
        for spec, token_type in zip(latest_usage, ("input", "output"), strict=True)
    ]
    return [
        row("GenAI client metrics"),
        timeseries(
            "GenAI token usage",
            "Input and output tokens per second, from the streams whose final usage arrived "
            f"(a truncated stream reports none). {where}",
            [target(" or ".join(usage), "{{gen_ai_token_type}}")],
            unit="short",
            stack=True,
        ),
        timeseries(
            "GenAI time to first chunk p95 by model",
            "95th percentile time from the request to the first output chunk, per provider "
            "and request model: the time to first token by model, which otelsse's own "
            f"histograms do not split. Dots are exemplars linked to traces. {where}",
            [
                target(
                    quantile(0.95, genai_buckets(semconv.TIME_TO_FIRST_CHUNK_METRIC), by_model),
                    model_legend,
                    exemplar=True,
                )
            ],
            unit="s",
            alerts=("OtelsseTimeToFirstOutputSlow",),
        ),
        timeseries(
            "GenAI operation duration p95 by model",
            "95th percentile duration of a streamed call, request to the end of the response, "
            f"per provider and request model. Dots are exemplars linked to traces. {where}",
            [
                target(
                    quantile(0.95, genai_buckets(semconv.DURATION_METRIC), by_model),
                    model_legend,
                    exemplar=True,
                )
            ],
            unit="s",
        ),
        timeseries(
            "GenAI time per output chunk p95 by model",
            "95th percentile of the mean time between output chunks after the first, one value "
            "per stream, per provider and request model: how fast the answer is written once "
            f"it has started. A rise is a slower model or a loaded provider. {where}",
            [
                target(
                    quantile(0.95, genai_buckets(semconv.TIME_PER_OUTPUT_CHUNK_METRIC), by_model),
                    model_legend,
                    exemplar=True,
                )
            ],
            unit="s",
        ),
    ]


def stop_and_tools_row() -> list[Json]:
    return [
        row("Stop reasons, refusals and tool calls"),
        timeseries(
            "Stop reasons",
            "Finished streams per second by the provider's stop/finish reason as sent (stop, "
            "length, tool_calls, end_turn, max_tokens, STOP, ...); streams without one (e.g. "
            "truncated) are left out. Rising length/max_tokens means answers are cut by the "
            "token limit (outcome incomplete); content_filter/refusal rising is a policy "
            "change, not an outage.",
            [
                target(
                    per_second(
                        STREAMS,
                        'otelsse_stop_reason!=""',
                        by=("otelsse_route", "otelsse_stop_reason"),
                    ),
                    "{{otelsse_route}} {{otelsse_stop_reason}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        matrix_table(
            "Stop reasons by route",
            f"Finished streams {_BY_RANGE}, per route and stop reason (streams that ended "
            "without one are not counted here).",
            "otelsse_route",
            "otelsse_stop_reason",
            'otelsse_stop_reason!=""',
        ),
        timeseries(
            "Refusal rate by route",
            "Share of each route's finished streams in which the model refused (OpenAI refusal "
            "text, Anthropic stop_reason refusal), whatever their outcome. Refusals are not "
            "failures and count as good in the SLO: a rise follows a prompt, policy or model "
            "change, not an outage. Split by model in the Models table.",
            [target(share_of_streams(REFUSALS, by=("otelsse_route",)), "{{otelsse_route}}")],
            unit="percentunit",
            steps=PERCENT_STEPS,
        ),
        timeseries(
            "Tool calls by kind and validity",
            "Tool calls per second: those the application runs, by whether their arguments "
            "were valid (exactly one JSON value), and those the provider ran itself (server, "
            "e.g. web search; no validity). Invalid calls must never reach the tool: if they "
            "rise, check truncation in the same period and which model produces them.",
            [
                target(
                    per_second(
                        TOOL_CALLS, by=("otelsse_tool_call_kind", "otelsse_tool_call_valid")
                    ),
                    "{{otelsse_tool_call_kind}} {{otelsse_tool_call_valid}}",
                )
            ],
            unit="reqps",
            stack=True,
            colors={"client true": "green", "client false": "red"},
        ),
        timeseries(
            "Invalid tool calls by route",
            "Share of each route's tool calls run by the application with invalid arguments. "
            "Empty for routes that made no such tool calls in the window.",
            [
                target(
                    ratio(TOOL_CALLS, INVALID_CALLS, by=("otelsse_route",), among=(CLIENT_CALLS,)),
                    "{{otelsse_route}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=("OtelsseInvalidToolCallRateHigh",),
        ),
    ]


def errors_row() -> list[Json]:
    return [
        row("Errors that need an engineer"),
        timeseries(
            "Buffer-limit and decode errors",
            "Streams per interval that ended in buffer_limit (a buffer exceeded otelsse's "
            "ceiling) or decode_error (invalid UTF-8 in the body), by route and outcome. Neither "
            "should happen in normal operation: buffer_limit means malformed streams or limits "
            "too low for big tool arguments; decode_error means something rewrites bodies.",
            [
                target(
                    per_interval(
                        STREAMS,
                        'otelsse_outcome=~"buffer_limit|decode_error"',
                        by=("otelsse_route", "otelsse_outcome"),
                    ),
                    "{{otelsse_route}} {{otelsse_outcome}}",
                )
            ],
            unit="short",
            alerts=(ALERT_OF["buffer_limit"], ALERT_OF["decode_error"]),
        ),
        timeseries(
            "Instrumentation errors by stage",
            "Failures inside otelsse per interval, by the stage where they happened "
            f"({', '.join(semconv.INSTRUMENTATION_STAGES)}). The application is never affected, "
            "but the affected streams lack telemetry. Read the otelsse logger's output and "
            "report the stage and traceback.",
            [
                target(
                    per_interval(INSTRUMENTATION_ERRORS, by=("otelsse_instrumentation_stage",)),
                    "{{otelsse_instrumentation_stage}}",
                )
            ],
            unit="short",
            alerts=("OtelsseInstrumentationErrors", "OtelsseInstrumentationErrorRateHigh"),
        ),
    ]


def gate_row() -> list[Json]:
    """The tool gate (``otelsse.ToolGate``): how the calls an agent's model asked for ended."""
    quarantined = f'{STATE}="quarantined"'
    denied = f'{STATE}="policy_denied"'
    reconciliation = f'{STATE}="needs_reconciliation"'
    seen_over_range = f"max_over_time({selector(GATE_CALLS, reconciliation)}[{RANGE}])"
    return [
        row("Tool gate"),
        stat(
            "Tool calls decided",
            f"Tool calls the tool gate decided {_BY_RANGE}, in every final state (run, "
            "replayed, denied, quarantined...). Only the job filter applies: the gate's counter "
            "has no route, server or model. Zero while agents are busy means no gate is in "
            "use or its metrics are not exported.",
            over_range(GATE_CALLS),
            unit="short",
            decimals=0,
            w=6,
        ),
        stat(
            "Quarantined tool calls",
            f"Share of the tool calls the gate decided {_BY_RANGE} that were quarantined, never "
            "run: their stream failed before they were proven complete, or their arguments were "
            "unusable. The quarantine panel below says why; alert OtelsseToolCallsQuarantined "
            "fires above 5 %.",
            ratio(GATE_CALLS, quarantined, window=RANGE),
            unit="percentunit",
            steps=PERCENT_STEPS,
            w=6,
            alerts=("OtelsseToolCallsQuarantined",),
        ),
        stat(
            "Denied tool calls",
            f"Share of the tool calls the gate decided {_BY_RANGE} that its policy denied. "
            "A steady share is the policy doing its job; a sudden rise (alert "
            "OtelsseToolCallDenialSpike) means the model asks for forbidden actions: see the "
            "denials by tool.",
            ratio(GATE_CALLS, denied, window=RANGE),
            unit="percentunit",
            w=6,
            alerts=("OtelsseToolCallDenialSpike",),
        ),
        stat(
            "Calls needing reconciliation",
            f"Tool calls found needing reconciliation, as the agents' processes counted them "
            f"{_BY_RANGE} (each process counts from its start): the ledger held a decision "
            "without a result, so the tool may have run without its result being recorded. "
            "Any non-zero value needs a human: check the target system (alert "
            "OtelsseToolCallNeedsReconciliation).",
            _sum((), seen_over_range),
            unit="short",
            decimals=0,
            steps=ANY_IS_BAD_STEPS,
            w=6,
            alerts=("OtelsseToolCallNeedsReconciliation",),
        ),
        timeseries(
            "Tool calls by final state",
            "Tool calls the gate decided per second, stacked by the state each ended in: "
            "executed, replayed (already in the ledger), policy_denied, needs_approval, "
            "policy_approved (approved but not run: no executor, or interrupted), quarantined, "
            "execution_failed and needs_reconciliation. Red and purple areas need a look; a "
            "change in the mix at a deploy points at the prompt, the policy or the model.",
            [target(per_second(GATE_CALLS, by=(STATE,)), f"{{{{{STATE}}}}}")],
            unit="reqps",
            stack=True,
            colors=STATE_COLORS,
        ),
        timeseries(
            "Quarantine rate by error type",
            "Quarantined calls as a share of every call the gate decided, by error.type: a "
            "stream fault (truncated, timeout, provider_error...: the stream failed before the "
            "calls were proven) or an argument problem (invalid_json, trailing_data, "
            "unregistered_tool, tool_schema_error...: the model's output). Stream faults follow "
            "the stream failure panels above; argument problems follow a model or prompt change.",
            [
                target(
                    per_second(GATE_CALLS, quarantined, by=("error_type",))
                    + f" / ignoring (error_type) group_left {per_second(GATE_CALLS)}",
                    "{{error_type}}",
                )
            ],
            unit="percentunit",
            steps=PERCENT_STEPS,
            alerts=("OtelsseToolCallsQuarantined",),
        ),
        timeseries(
            "Policy denials by tool",
            "Calls the gate's policy denied per interval, by tool name (policy_denied: the "
            "policy said deny; policy_error: it raised or answered something else, which "
            "denies too). A tool's denials rising alone is the model trying that tool on "
            "forbidden targets (paths, commands, scopes): read the run's records, never the "
            "arguments, and the policy's own logs.",
            [
                target(
                    per_interval(GATE_CALLS, denied, by=("gen_ai_tool_name", "error_type")),
                    "{{gen_ai_tool_name}} {{error_type}}",
                )
            ],
            unit="short",
            alerts=("OtelsseToolCallDenialSpike",),
        ),
        table(
            "Calls needing reconciliation by instance and tool",
            f"Calls found needing reconciliation {_BY_RANGE}, per process (instance) and tool, "
            "as each process counted them since its start. Each one's ledger (the SQLite file "
            "on that instance) holds the run, response and call ids: reconcile with the target "
            "system, then record the outcome; the gate never re-runs such a call.",
            [target(_sum(("instance", "gen_ai_tool_name"), seen_over_range), table=True)],
            [
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {"Value": "Calls"},
                    },
                }
            ],
        ),
    ]


def breakdown_row() -> list[Json]:
    by_model = ("gen_ai_provider_name", "gen_ai_request_model", "server_address")
    renamed = {
        "Value #A": "Streams",
        "Value #B": "Provider-side failure %",
        "Value #C": "Rate-limited %",
        "Value #D": "Refusal %",
        "Value #E": "Time to first chunk p95",
    }
    return [
        row("Breakdown"),
        matrix_table(
            "Streams by route and outcome",
            f"Finished streams {_BY_RANGE}, one row per route, one column per outcome: the "
            "quickest way to see which route contributes which failure.",
            "otelsse_route",
            "otelsse_outcome",
        ),
        table(
            "Models",
            f"Per provider, request model and server, {_BY_RANGE}: finished streams, share of "
            "provider-side failures (the SLO's), of rate-limited streams and of refusals, and the "
            "GenAI time to first chunk p95 (empty where another instrumentation records the "
            "GenAI metrics under other labels, or none does). Sort by a column to find the worst "
            "model. A model or server of _OTHER is otelsse's overflow: more combinations than "
            "its caps (docs/operators/reference.md).",
            [
                target(over_range(STREAMS, by=by_model), table=True),
                target(
                    f"{over_range(STREAMS, SLO_BAD, by=by_model)}"
                    f" / {over_range(STREAMS, by=by_model)}",
                    table=True,
                ),
                target(
                    ratio(STREAMS, 'otelsse_outcome="rate_limited"', by_model, RANGE), table=True
                ),
                target(share_of_streams(REFUSALS, by_model, RANGE), table=True),
                target(
                    quantile(
                        0.95, genai_buckets(semconv.TIME_TO_FIRST_CHUNK_METRIC), by_model, RANGE
                    ),
                    table=True,
                ),
            ],
            [
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True}, "renameByName": renamed},
                },
            ],
            _unit_overrides(
                {
                    "Provider-side failure %": "percentunit",
                    "Rate-limited %": "percentunit",
                    "Refusal %": "percentunit",
                    "Time to first chunk p95": "s",
                }
            ),
        ),
    ]


def layout(panels: list[Json]) -> list[Json]:
    """Number the panels and flow them left to right in a 24-column grid; rows span it."""
    x = y = line_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        grid = panel["gridPos"]
        w = grid.setdefault("w", 24)
        if x + w > 24:
            x, y, line_height = 0, y + line_height, 0
        grid |= {"x": x, "y": y}
        x += w
        line_height = max(line_height, grid["h"])
        if panel["type"] == "row":
            x, y, line_height = 0, y + 1, 0
        panel["id"] = panel_id
    return panels


def _datasource_variable(name: str, label: str, kind: str) -> Json:
    return {
        "type": "datasource",
        "name": name,
        "label": label,
        "query": kind,
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def _runbook_variable(runbook_url: str | None) -> Json:
    """Where the panels' runbook links point: where docs/operators/runbooks.md is published.
    Given (``--runbook-url``, as the Prometheus rules take it), a hidden constant; otherwise a
    box to fill in, empty: otelsse has no published home to default to."""
    if runbook_url is not None:
        return {
            "type": "constant",
            "name": "runbook_url",
            "label": "Runbooks URL",
            "query": runbook_url,
            "hide": 2,
            "skipUrlSync": False,
        }
    return {
        "type": "textbox",
        "name": "runbook_url",
        "label": "Runbooks URL",
        "description": "Where docs/operators/runbooks.md is published, for the panels' runbook"
        " links: type it here and save the dashboard, or generate it with --runbook-url.",
        "query": "",
        "current": {"text": "", "value": ""},
        "hide": 0,
        "skipUrlSync": False,
    }


def variables(runbook_url: str | None = None) -> list[Json]:
    chain: list[Json] = [
        _datasource_variable("datasource", "Data source", "prometheus"),
        _datasource_variable("traces", "Traces", TRACES_TYPE),
        _runbook_variable(runbook_url),
    ]
    earlier: list[str] = []
    for name, label, prom_label in VARIABLES:
        # Each variable lists values under the choices made before it (job narrows route, ...).
        matchers = ", ".join(f'{p}=~"${_VARIABLE_OF[p]}"' for p in earlier)
        series = f"{STREAMS}{{{matchers}}}" if earlier else STREAMS
        query = f"label_values({series}, {prom_label})"
        chain.append(
            {
                "type": "query",
                "name": name,
                "label": label,
                "datasource": DATASOURCE,
                "definition": query,
                "query": query,
                "current": {},
                "hide": 0,
                "includeAll": True,
                "allValue": ".*",
                "multi": True,
                "options": [],
                "refresh": 2,
                "regex": "",
                "sort": 1,
            }
        )
        earlier.append(prom_label)
    return chain


def dashboard(runbook_url: str | None = None) -> Json:
    panels = layout(
        [
            *overview_row(),
            *failure_row(),
            *traffic_row(),
            *latency_row(),
            *genai_row(),
            *stop_and_tools_row(),
            *errors_row(),
            *breakdown_row(),
            *gate_row(),
        ]
    )
    return {
        "uid": "otelsse-overview",
        "title": "otelsse — SSE stream integrity",
        "description": "How LLM Server-Sent-Event streams really end: outcomes, failure rates, "
        "latency, stop reasons and tool-call validity, and how the tool gate decided the calls, "
        "from otelsse's metrics.",
        "tags": ["otelsse", "llm", "sse", "opentelemetry"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "id": None,
        "links": [
            {
                "title": "otelsse runbooks",
                "type": "link",
                "url": "${runbook_url}",
                "icon": "doc",
                "targetBlank": True,
                "tooltip": "What each alert means and what to do",
            }
        ],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {"list": variables(runbook_url)},
        "panels": panels,
    }


def render(runbook_url: str | None = None) -> str:
    return json.dumps(dashboard(runbook_url), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed file")
    parser.add_argument(
        "--runbook-url",
        help="where docs/operators/runbooks.md is published (the panels' runbook links);"
        " without it the dashboard asks for it in a box",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the file to write")
    args = parser.parse_args(argv)
    text = render(args.runbook_url)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
