"""Generate otelsse's Prometheus rule files: recording rules, alerts, and the stream-success SLO.

The rules are repetitive (one ratio per burn-rate window, one SLO alert per window pair, twin
ratio and "any in the window" alerts), so they are written once here and rendered to YAML.
After editing a threshold or the SLO target, run::

    python dashboards/prometheus/generate_rules.py [--runbook-url URL] [--output DIR]

``tests/sre/test_prometheus_rules.py`` fails while the committed files differ from this output, and
runs ``promtool check rules`` and the ``promtool test rules`` cases in ``tests/``.

Every stream rule aggregates to one level, ``(job, otelsse_route, server_address)``: the app
and the upstream contract and server it streams from. The histograms carry no server (the
cardinality budget, ``semconv.HISTOGRAM_ATTRIBUTES``), so latency rules stop at
``(job, otelsse_route)``. The tool gate's rules aggregate to the ``job`` (its counter has no
route or server): the agent whose gate decided the calls; the reconciliation alert keeps
``instance`` and the tool name, since a ledger belongs to a host.

Only the 5-minute rules read the exported series; every longer window (the SLO's 30m to 3d, the
gate's day) is a ``sum_over_time`` of a 5-minute recorded series, already summed to the level
above: its cost follows the number of (job, route, server) triples, not of exported series.
Series names assume the default OTLP to Prometheus translation (``UnderscoreEscapingWithSuffixes``),
which the OpenTelemetry Prometheus exporter also produces. Alert thresholds are single literal
numbers after their comparison, so tools (and the end-to-end test) can find and rewrite them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from otelsse import semconv

HERE = Path(__file__).resolve().parent
#: The runbooks' place in otelsse's source tree. Each alert's section there is ``#`` and its
#: name in lower case: the ``runbook`` annotation names it, or, where the runbooks are
#: published (``--runbook-url``, the one setting; otelsse has no home to default to), the
#: ``runbook_url`` annotation links to it.
RUNBOOKS_PATH = "docs/operators/runbooks.md"

BY = "job, otelsse_route, server_address"
#: The histograms' level: they have no server (``semconv.HISTOGRAM_ATTRIBUTES``).
HISTOGRAM_BY = "job, otelsse_route"
# Annotation pieces (Go templates, filled in by Prometheus).
UPSTREAM = "{{ $labels.server_address }} ({{ $labels.otelsse_route }})"
WHERE = (
    "job {{ $labels.job }} reading from {{ $labels.server_address }}"
    " on route {{ $labels.otelsse_route }}"
)
PERCENT = "{{ $value | humanizePercentage }}"
STREAMS = "otelsse_streams_total"
TOOL_CALLS = "otelsse_tool_calls_total"
INSTRUMENTATION_ERRORS = "otelsse_instrumentation_errors_total"
TTFO = "otelsse_stream_time_to_first_output_seconds"
#: Recording rules are named level:metric:operations, with level "otelsse" standing for BY
#: (HISTOGRAM_BY for the histograms').
TTFO_RECORDED = "otelsse:stream_time_to_first_output_seconds"
STATUS = semconv.prometheus_label(semconv.HTTP_RESPONSE_STATUS_CODE)
#: The streams that count against the stream-success SLO, in one selector: the provider-side
#: outcomes, an ``http_error`` only when its status is not a 4xx (the caller's own request).
SLO_BAD = (
    f'otelsse_outcome=~"{"|".join(sorted(semconv.SLO_BAD_OUTCOMES))}",'
    f' {STATUS}!~"{semconv.SLO_EXCLUDED_STATUS}"'
)

#: Streams (or first outputs, or tool calls) a 5m window must hold before a ratio or percentile
#: may alert, and streams the long window of an SLO alert must hold: fewer say little and page
#: on noise.
MIN_STREAMS = 20
#: Share of a route's streams per outcome above which the ratio alerts fire, for RATIO_FOR.
RATIO_FOR = "10m"
RATIO_ALERTS = (
    # (alert, outcome, threshold, what the outcome means)
    (
        "OtelsseStreamTruncationRateHigh", "truncated", 0.05,
        "were cut off: EOF or a transport error before the route's terminal event",
    ),
    (
        "OtelsseProviderErrorRateHigh", "provider_error", 0.05,
        "ended with an error the provider reported inside the stream",
    ),
    (
        "OtelsseStreamTimeoutRateHigh", "timeout", 0.05,
        "ended because the client's own read deadline fired before the stream did",
    ),
    (
        "OtelsseRateLimitingHigh", "rate_limited", 0.1,
        "were refused with HTTP 429: the caller's quota or the provider's throttle",
    ),
    (
        "OtelsseProtocolErrorRateHigh", "protocol_error", 0.01,
        "broke the streaming protocol: a 2xx that was not an event stream, or events out of the"
        " route's order",
    ),
    (
        "OtelssePayloadErrorRateHigh", "payload_error", 0.01,
        "carried events whose JSON was invalid or not the route's shape, or tool arguments that"
        " were not one JSON value",
    ),
)  # fmt: skip
#: ``terminal_missing``: the answer was whole (every part had its final stop) and the body ended
#: cleanly at an event boundary, but the route's end marker (``data: [DONE]``, ``message_stop``)
#: never came. Not a failure, so neither a truncation nor the SLO's: healthy traffic from a
#: server that never sends the marker reads so (a host profile makes it ``complete``), and a cut
#: just before the marker is the same bytes. A ticket when it is how a route and server end,
#: above TERMINAL_MISSING_RATIO of their streams for TERMINAL_MISSING_FOR: long enough that a
#: few such cuts never open one.
TERMINAL_MISSING_RATIO = 0.05
TERMINAL_MISSING_FOR = "30m"
#: Shares of the streams that ended ``http_error`` by status class, for HTTP_FOR: the SLO's
#: (anything but a 4xx: the provider or a proxy) and the caller's (a 4xx other than 429).
HTTP_FOR = "10m"
HTTP_ALERTS = (
    # (alert, status matcher, threshold, what it means)
    (
        "OtelsseHTTPServerErrorRateHigh", f'{STATUS}!~"{semconv.SLO_EXCLUDED_STATUS}"', 0.05,
        "were answered with an HTTP error that is not a 4xx: 5xx and the like, the provider, a"
        " gateway or a proxy failing",
    ),
    (
        "OtelsseHTTPClientErrorRateHigh", f'{STATUS}=~"{semconv.SLO_EXCLUDED_STATUS}"', 0.05,
        "were refused with an HTTP 4xx other than 429: credentials, permissions, a bad request"
        " or an unknown model",
    ),
)  # fmt: skip
#: p95 time to first output above which OtelsseTimeToFirstOutputSlow fires, in seconds.
TTFO_P95_SECONDS = 10
TTFO_FOR = "15m"
#: Share of the tool calls the application runs whose arguments were invalid, for TOOL_CALL_FOR.
INVALID_TOOL_CALL_RATIO = 0.05
TOOL_CALL_FOR = "10m"
#: Only the calls the application runs have arguments to validate.
_CLIENT = f'otelsse_tool_call_kind="{semconv.TOOL_CALL_CLIENT}"'
#: Outcomes that alert on a single stream in the window (and instrumentation errors likewise).
ANY_FOR = "1m"
ANY_ALERTS = (
    (
        "OtelsseBufferLimitHit", "buffer_limit",
        "a partial line, pending event or tool-call accumulator exceeded its ceiling, so otelsse"
        " stopped parsing them (the application's stream is unaffected)",
    ),
    (
        "OtelsseDecodeErrors", "decode_error",
        "their bodies were not valid UTF-8",
    ),
)  # fmt: skip
#: Instrumentation errors per finished stream of a job above which the critical alert fires,
#: with at least MIN_STREAMS errors in 5m, for INSTRUMENTATION_FOR: most of that job's telemetry
#: is then missing, which no other alert can see.
INSTRUMENTATION_ERROR_RATIO = 0.05
INSTRUMENTATION_FOR = "5m"

#: The stream-success SLO: this share of streams must not end in a provider-side failure
#: (SLO_BAD) over 30 days; every stream counts in the denominator.
SLO_TARGET = 0.99
#: Google SRE workbook, "Alerting on SLOs", table 5-8: both windows must burn the error budget
#: at least ``factor`` times as fast as the SLO allows.
BURN_RATE_ALERTS = (
    # (severity, long window, short window, factor, for)
    ("critical", "1h", "5m", 14.4, "2m"),
    ("critical", "6h", "30m", 6, "15m"),
    ("warning", "1d", "2h", 3, "1h"),
    ("warning", "3d", "6h", 1, "3h"),
)
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

#: The tool gate's counter (``semconv.GATE_CALLS``) and its state label.
GATE_CALLS = "otelsse_gate_calls_total"
STATE = "otelsse_tool_call_state"
GATE_BY = "job"
#: Gate calls a 5m window must hold before the quarantine or denial ratio may alert: a quiet
#: agent's one bad stream is not a page.
MIN_GATE_CALLS = 20
#: Share of an agent's tool calls quarantined in 5m above which OtelsseToolCallsQuarantined
#: fires, for QUARANTINE_FOR.
QUARANTINE_RATIO = 0.05
QUARANTINE_FOR = "10m"
#: A denial spike: more than DENIAL_RATIO of the calls in 5m denied by the policy, and that
#: share more than DENIAL_SPIKE times the share over the last day (an agent whose policy denies
#: this much all day long is a tuning matter, not an alert), for DENIAL_FOR.
DENIAL_RATIO = 0.25
DENIAL_SPIKE = 3
DENIAL_FOR = "5m"
#: Window of OtelsseToolCallNeedsReconciliation: any new call in the state within it fires.
RECONCILIATION_WINDOW = "15m"
RECONCILIATION_FOR = "0m"

HEADER = (
    "# Generated by dashboards/prometheus/generate_rules.py: edit that, then run it.\n"
    "# Runbooks: docs/operators/runbooks.md. Series per ({by}) unless a rule groups otherwise.\n"
)


def record(name: str, expr: str) -> dict[str, str]:
    return {"record": name, "expr": expr}


def alert(
    name: str, expr: str, for_: str, severity: str, summary: str, description: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **(labels or {})},
        # Filled in by render(): the base URL is one setting.
        "annotations": {"summary": summary, "description": description},
    }


def both(*conditions: str, on: str = BY) -> str:
    """Each condition must hold for the same ``on`` labels; the value is the first's."""
    return f"\nand on ({on})\n".join(conditions) + "\n"


def recording_rules() -> dict[str, Any]:
    five_minutes = [
        record(
            "otelsse:streams:rate5m",
            f"sum by ({BY}, otelsse_outcome) (rate({STREAMS}[5m]))\n",
        ),
        record(
            "otelsse:stream_outcome:ratio_rate5m",
            "otelsse:streams:rate5m\n"
            "/ ignoring (otelsse_outcome) group_left ()\n"
            f"sum by ({BY}) (otelsse:streams:rate5m)\n",
        ),
        # increase() over 5m is rate() times 300 by definition: no second read of the counter.
        record("otelsse:streams:increase5m", f"sum by ({BY}) (otelsse:streams:rate5m) * 300\n"),
        record(
            "otelsse:stream_http_errors:rate5m",
            f'sum by ({BY}, {STATUS}) (rate({STREAMS}{{otelsse_outcome="http_error"}}[5m]))\n',
        ),
        record(
            "otelsse:stream_error:increase5m",
            f"sum by ({BY}) (increase({STREAMS}{{{SLO_BAD}}}[5m]))\n",
        ),
        record(
            f"{TTFO_RECORDED}_bucket:rate5m",
            f"sum by ({HISTOGRAM_BY}, le) (rate({TTFO}_bucket[5m]))\n",
        ),
        record(
            f"{TTFO_RECORDED}:p95_rate5m",
            f"histogram_quantile(0.95, {TTFO_RECORDED}_bucket:rate5m)\n",
        ),
        record(
            f"{TTFO_RECORDED}_count:increase5m",
            f"sum by ({HISTOGRAM_BY}) (increase({TTFO}_count[5m]))\n",
        ),
        record(
            "otelsse:tool_calls:rate5m",
            f"sum by ({BY}, otelsse_tool_call_kind, otelsse_tool_call_valid)"
            f" (rate({TOOL_CALLS}[5m]))\n",
        ),
        record(
            "otelsse:tool_call_invalid:ratio_rate5m",
            f"sum by ({BY}) (otelsse:tool_calls:rate5m{{{_CLIENT}, otelsse_tool_call_valid="
            f'"false"}})\n/\nsum by ({BY}) (otelsse:tool_calls:rate5m{{{_CLIENT}}})\n',
        ),
        record(
            "otelsse:client_tool_calls:increase5m",
            f"sum by ({BY}) (otelsse:tool_calls:rate5m{{{_CLIENT}}}) * 300\n",
        ),
    ]
    # The SLO's windows: ratios of 5m counts added up over the window, so each window weighs
    # every 5m by its traffic, as one rate() over the raw counters would.
    error_ratios = [
        record(
            "otelsse:stream_error:ratio_rate5m",
            "otelsse:stream_error:increase5m\n/\notelsse:streams:increase5m\n",
        )
    ]
    error_ratios += [
        record(
            f"otelsse:stream_error:ratio_rate{window}",
            f"sum_over_time(otelsse:stream_error:increase5m[{window}])\n"
            f"/\nsum_over_time(otelsse:streams:increase5m[{window}])\n",
        )
        for window in SLO_WINDOWS[1:]
    ]
    # The traffic guards count the streams that really ended in the window (an average rate
    # times the window would credit a route born 5 minutes ago with a full day): the 5m count
    # taken every minute holds each stream 5 times, whatever the evaluation interval. Never less
    # than the last 5m's count, which the window holds: a series younger than a minute has not
    # been sampled on a minute yet, and one younger than 5m only partly.
    long_window_traffic = [
        record(
            f"otelsse:streams:increase{long}",
            f"sum_over_time(otelsse:streams:increase5m[{long}:1m]) / 5 > otelsse:streams:increase5m"
            "\nor\notelsse:streams:increase5m\n",
        )
        for _, long, _, _, _ in BURN_RATE_ALERTS
    ]
    gate = [
        record(
            "otelsse:gate_calls:rate5m",
            f"sum by ({GATE_BY}, {STATE}) (rate({GATE_CALLS}[5m]))\n",
        ),
        record(
            "otelsse:gate_call_state:ratio_rate5m",
            "otelsse:gate_calls:rate5m\n"
            f"/ ignoring ({STATE}) group_left ()\n"
            f"sum by ({GATE_BY}) (otelsse:gate_calls:rate5m)\n",
        ),
        record(
            "otelsse:gate_calls:increase5m",
            f"sum by ({GATE_BY}) (otelsse:gate_calls:rate5m) * 300\n",
        ),
        # A state's day: its 5m rates added up over the day, over every state's.
        record(
            "otelsse:gate_call_state:ratio_rate1d",
            "sum_over_time(otelsse:gate_calls:rate5m[1d])\n"
            f"/ ignoring ({STATE}) group_left ()\n"
            f"sum by ({GATE_BY}) (sum_over_time(otelsse:gate_calls:rate5m[1d]))\n",
        ),
    ]
    return {
        "groups": [
            {"name": "otelsse.recording", "rules": five_minutes},
            {"name": "otelsse.slo.recording", "rules": error_ratios + long_window_traffic},
            {"name": "otelsse.gate.recording", "rules": gate},
        ]
    }


def alerting_rules() -> dict[str, Any]:
    guard = f"otelsse:streams:increase5m >= {MIN_STREAMS}"
    ratio = 'otelsse:stream_outcome:ratio_rate5m{{otelsse_outcome="{}"}} > {}'
    rules = [
        alert(
            name,
            both(ratio.format(outcome, limit), guard),
            RATIO_FOR,
            "warning",
            f"SSE streams from {UPSTREAM} end {outcome}.",
            f"{PERCENT} of the streams of {WHERE} in the last 5m {meaning} (outcome {outcome})."
            f" Fires above {limit:.0%} with at least {MIN_STREAMS} streams in 5m, for {RATIO_FOR}.",
        )
        for name, outcome, limit, meaning in RATIO_ALERTS
    ]  # fmt: skip
    missing = "terminal_missing"
    rules.append(
        alert(
            "OtelsseStreamTerminalMissing",
            both(ratio.format(missing, TERMINAL_MISSING_RATIO), guard),
            TERMINAL_MISSING_FOR,
            "warning",
            f"SSE streams from {UPSTREAM} end without their end marker.",
            f"{PERCENT} of the streams of {WHERE} in the last 5m ended {missing}: every part of"
            " the answer had its final stop and the body ended cleanly, but the route's end"
            " marker (data: [DONE], message_stop) never came. The answers are whole; they count"
            " neither as truncated nor against the SLO. Fires above"
            f" {TERMINAL_MISSING_RATIO:.0%} with at least {MIN_STREAMS} streams in 5m, for"
            f" {TERMINAL_MISSING_FOR}.",
        )
    )
    rules += [
        alert(
            name,
            both(
                f"sum by ({BY}) (otelsse:stream_http_errors:rate5m{{{status}}})\n"
                f"/\nsum by ({BY}) (otelsse:streams:rate5m) > {limit}",
                guard,
            ),
            HTTP_FOR,
            "warning",
            f"SSE streams from {UPSTREAM} end http_error"
            f" ({'4xx' if '=~' in status else 'not 4xx'}).",
            f"{PERCENT} of the streams of {WHERE} in the last 5m {meaning} (outcome http_error)."
            f" Fires above {limit:.0%} with at least {MIN_STREAMS} streams in 5m, for {HTTP_FOR}.",
        )
        for name, status, limit, meaning in HTTP_ALERTS
    ]  # fmt: skip
    rules.append(
        alert(
            "OtelsseTimeToFirstOutputSlow",
            both(
                f"{TTFO_RECORDED}:p95_rate5m > {TTFO_P95_SECONDS}",
                f"{TTFO_RECORDED}_count:increase5m >= {MIN_STREAMS}",
                on=HISTOGRAM_BY,
            ),
            TTFO_FOR,
            "warning",
            "SSE streams of route {{ $labels.otelsse_route }} are slow to show output.",
            "The 95th percentile time from request send to the first model output (text,"
            " reasoning, refusal or tool call) for job {{ $labels.job }} on route"
            " {{ $labels.otelsse_route }} is {{ $value | humanizeDuration }} over the last 5m."
            f" Fires above {TTFO_P95_SECONDS}s with at least {MIN_STREAMS} first outputs in 5m,"
            f" for {TTFO_FOR}.",
        )
    )
    rules.append(
        alert(
            "OtelsseInvalidToolCallRateHigh",
            both(
                f"otelsse:tool_call_invalid:ratio_rate5m > {INVALID_TOOL_CALL_RATIO}",
                f"otelsse:client_tool_calls:increase5m >= {MIN_STREAMS}",
            ),
            TOOL_CALL_FOR,
            "warning",
            f"Tool calls streamed from {UPSTREAM} have invalid arguments.",
            f"{PERCENT} of the tool calls the application runs, streamed to {WHERE} in the last"
            " 5m, ended with arguments that are not exactly one JSON value (or never closed)."
            f" Fires above {INVALID_TOOL_CALL_RATIO:.0%} with at least {MIN_STREAMS} such calls"
            f" in 5m, for {TOOL_CALL_FOR}.",
        )
    )
    rules += [
        alert(
            name,
            f'sum by ({BY}) (increase({STREAMS}{{otelsse_outcome="{outcome}"}}[5m])) > 0\n',
            ANY_FOR,
            "warning",
            f"SSE streams from {UPSTREAM} end {outcome}.",
            f"{{{{ $value | humanize }}}} streams of {WHERE} ended {outcome} in the last 5m:"
            f" {meaning}.",
        )
        for name, outcome, meaning in ANY_ALERTS
    ]
    rules += instrumentation_alerts()
    return {
        "groups": [
            {"name": "otelsse.alerts", "rules": rules},
            {"name": "otelsse.gate.alerts", "rules": gate_alerts()},
        ]
    }


def instrumentation_alerts() -> list[dict[str, Any]]:
    """Any failure of otelsse's own is a ticket; one stream in twenty of a job's is a page."""
    errors_5m = f"increase({INSTRUMENTATION_ERRORS}[5m])"
    return [
        alert(
            "OtelsseInstrumentationErrors",
            f"sum by (job, instance, otelsse_instrumentation_stage) ({errors_5m}) > 0\n",
            ANY_FOR,
            "warning",
            "otelsse failed inside job {{ $labels.job }} at stage"
            " {{ $labels.otelsse_instrumentation_stage }}.",
            "otelsse contained {{ $value | humanize }} failures of its own at stage"
            " {{ $labels.otelsse_instrumentation_stage }} in job {{ $labels.job }}"
            " (instance {{ $labels.instance }}) in the last 5m. The application was not"
            " affected; the streams concerned are unobserved, reported as internal_error, or"
            " miss their metrics.",
        ),
        alert(
            "OtelsseInstrumentationErrorRateHigh",
            # Measured against the streams counted, but guarded by the errors: failing before
            # the streams' own metrics (stage send, record_metrics) leaves fewer streams to
            # divide by, or none at all (then 0, and x / 0 is +Inf: it fires).
            both(
                f"sum by (job) ({errors_5m}) >= {MIN_STREAMS}",
                f"sum by (job) ({errors_5m})\n/\n(sum by (job) (otelsse:streams:increase5m)"
                f" or sum by (job) ({errors_5m}) * 0) > {INSTRUMENTATION_ERROR_RATIO}",
                on="job",
            ),
            INSTRUMENTATION_FOR,
            "critical",
            "otelsse fails on many streams of job {{ $labels.job }}.",
            "otelsse contained {{ $value | humanize }} failures of its own in job"
            " {{ $labels.job }} in the last 5m, more than"
            f" {INSTRUMENTATION_ERROR_RATIO:.0%} of the streams it counted there: that much of"
            " the job's stream telemetry (spans, metrics, outcomes) is missing or internal_error."
            f" Fires from {MIN_STREAMS} errors in 5m, for {INSTRUMENTATION_FOR}.",
        ),
    ]


def gate_alerts() -> list[dict[str, Any]]:
    """Quarantines, denial spikes and calls that need reconciliation, from the tool gate."""
    agent = "job {{ $labels.job }}"
    guard = f"otelsse:gate_calls:increase5m >= {MIN_GATE_CALLS}"
    share = "otelsse:gate_call_state:ratio_rate{}{{" + STATE + '="{}"}}'
    quarantined = share.format("5m", "quarantined")
    denied, denied_today = share.format("5m", "policy_denied"), share.format("1d", "policy_denied")
    reconciliation = f'{GATE_CALLS}{{{STATE}="needs_reconciliation"}}'
    by = "job, instance, gen_ai_tool_name"
    window = RECONCILIATION_WINDOW
    return [
        alert(
            "OtelsseToolCallsQuarantined",
            both(f"{quarantined} > {QUARANTINE_RATIO}", guard, on=GATE_BY),
            QUARANTINE_FOR,
            "warning",
            f"The tool gate of {agent} is quarantining tool calls.",
            f"{PERCENT} of the tool calls the gate of {agent} decided in the last 5m were"
            " quarantined and not run: their stream failed before they were proven complete,"
            " or their arguments were unusable (invalid JSON, trailing data, unregistered tool,"
            f" schema failure). Fires above {QUARANTINE_RATIO:.0%} with at least"
            f" {MIN_GATE_CALLS} calls in 5m, for {QUARANTINE_FOR}.",
        ),
        alert(
            "OtelsseToolCallDenialSpike",
            both(
                f"{denied} > {DENIAL_RATIO}",
                f"{denied} / {denied_today} > {DENIAL_SPIKE}",
                guard,
                on=GATE_BY,
            ),
            DENIAL_FOR,
            "warning",
            f"The tool gate's policy is denying many more tool calls of {agent} than usual.",
            f"{PERCENT} of the tool calls of {agent} in the last 5m were denied by the gate's"
            f" policy, more than {DENIAL_SPIKE}x their share over the last day: the model is"
            " asking for actions the policy forbids (a prompt injection, a new task, a changed"
            f" model or policy). Fires above {DENIAL_RATIO:.0%} with at least {MIN_GATE_CALLS}"
            f" calls in 5m, for {DENIAL_FOR}.",
        ),
        alert(
            "OtelsseToolCallNeedsReconciliation",
            # A series is born at its first call (nothing pre-creates it), which increase()
            # cannot see: the second half catches a series that was not there a window ago.
            f"sum by ({by}) (increase({reconciliation}[{window}])) > 0\nor\n"
            f"sum by ({by}) ({reconciliation} unless {reconciliation} offset {window}) > 0\n",
            RECONCILIATION_FOR,
            "critical",
            "A {{ $labels.gen_ai_tool_name }} tool call of job {{ $labels.job }} needs"
            " reconciliation: it may have run without a recorded result.",
            "The tool gate of job {{ $labels.job }} on instance {{ $labels.instance }} found"
            " {{ $value | humanize }} call(s) to tool {{ $labels.gen_ai_tool_name }} in the last"
            f" {window} that its ledger holds as decided without a result: a process died or"
            " was interrupted while the tool ran, so whether its side effect happened is"
            " unknown. The gate never runs such a call again by itself; check the target system"
            " and record the outcome.",
        ),
    ]


def slo_rules() -> dict[str, Any]:
    rules = []
    for severity, long, short, factor, for_ in BURN_RATE_ALERTS:
        threshold = f"{factor * (1 - SLO_TARGET):.6g}"  # one literal: 14.4 * 0.01 -> 0.144
        rules.append(
            alert(
                "OtelsseStreamErrorBudgetBurn",
                both(
                    f"otelsse:stream_error:ratio_rate{long} > {threshold}",
                    f"otelsse:stream_error:ratio_rate{short} > {threshold}",
                    f"otelsse:streams:increase{long} >= {MIN_STREAMS}",
                ),
                for_,
                severity,
                f"SSE stream failures from {UPSTREAM} are burning the stream-success error budget.",
                f"{PERCENT} of the streams of {WHERE} ended in a provider-side failure over the"
                f" last {long} (and over the last {short} too), spending the 30-day error budget"
                f" of the {SLO_TARGET:.0%} stream-success SLO at least {factor:g}x as fast as it"
                f" allows. Requires at least {MIN_STREAMS} streams in {long}.",
                labels={"long": long, "short": short},
            )
        )
    return {"groups": [{"name": "otelsse.slo", "rules": rules}]}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL), so the files read like hand-written ones."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(runbook_url: str | None = None) -> dict[str, str]:
    """File name -> the text this generator writes; runbook links under ``runbook_url`` when
    given, else each alert names its runbook section in the source tree."""
    files = {
        "otelsse-recording.rules.yaml": recording_rules(),
        "otelsse-alerts.rules.yaml": alerting_rules(),
        "otelsse-slo.rules.yaml": slo_rules(),
    }
    for content in files.values():
        for group in content["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    section = f"#{rule['alert'].lower()}"
                    if runbook_url is None:
                        rule["annotations"]["runbook"] = RUNBOOKS_PATH + section
                    else:
                        rule["annotations"]["runbook_url"] = runbook_url + section
    return {
        name: HEADER.format(by=BY)
        + yaml.dump(content, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
        for name, content in files.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runbook-url",
        help="where docs/operators/runbooks.md is published: alerts link there (runbook_url)"
        " instead of naming the file in the source tree (runbook)",
    )
    parser.add_argument("--output", type=Path, default=HERE, help="directory to write into")
    args = parser.parse_args(argv)
    # Debian's prometheus package, for one, creates no rules directory.
    args.output.mkdir(parents=True, exist_ok=True)
    for name, text in render(args.runbook_url).items():
        (args.output / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.output / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
