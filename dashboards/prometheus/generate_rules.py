"""Generate otelsse's Prometheus rule files: recording rules, alerts, and the stream-success SLO.

The rules are repetitive (one ratio per burn-rate window, one SLO alert per window pair, twin
ratio and "any in the window" alerts), so they are written once here and rendered to YAML.
After editing a threshold or the SLO target, run::

    python dashboards/prometheus/generate_rules.py

``tests/sre/test_prometheus_rules.py`` fails while the committed files differ from this output, and
runs ``promtool check rules`` and the ``promtool test rules`` cases in ``tests/``.

Every stream rule aggregates to one level, ``(job, otelsse_route, server_address)``: the app
and the upstream contract and server it streams from. The tool gate's rules aggregate to the
``job`` (its counter has no route or server): the agent whose gate decided the calls; the
reconciliation alert keeps ``instance`` and the tool name, since a ledger belongs to a host.
Series names assume the default OTLP to
Prometheus translation (``UnderscoreEscapingWithSuffixes``), which the OpenTelemetry Prometheus
exporter also produces. Alert thresholds are single literal numbers after their comparison, so
tools (and the end-to-end test) can find and rewrite them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from otelsse import semconv

HERE = Path(__file__).resolve().parent
RUNBOOK_URL = "https://github.com/otelsse/otelsse/blob/main/docs/runbooks.md"

BY = "job, otelsse_route, server_address"
# Annotation pieces (Go templates, filled in by Prometheus).
UPSTREAM = "{{ $labels.server_address }} ({{ $labels.otelsse_route }})"
WHERE = (
    "job {{ $labels.job }} reading from {{ $labels.server_address }}"
    " on route {{ $labels.otelsse_route }}"
)
PERCENT = "{{ $value | humanizePercentage }}"
STREAMS = "otelsse_streams_total"
TTFE = "otelsse_stream_time_to_first_event_seconds"
#: Recording rules are named level:metric:operations, with level "otelsse" standing for BY.
TTFE_RECORDED = "otelsse:stream_time_to_first_event_seconds"

#: Streams (or first events) a 5m window must hold before a ratio or percentile may alert, and
#: streams the long window of an SLO alert must hold: fewer say little and page on noise.
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
)  # fmt: skip
#: p95 time to first event above which OtelsseTimeToFirstEventSlow fires, in seconds.
TTFE_P95_SECONDS = 10
TTFE_FOR = "15m"
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

#: The stream-success SLO: this share of streams must not end in a server-side failure
#: (``semconv.ERROR_OUTCOMES``) over 30 days; every stream counts in the denominator.
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
    "# Runbooks: docs/runbooks.md. Series per ({by}) unless a rule groups otherwise.\n"
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
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK_URL}#{name.lower()}",
        },
    }


def both(*conditions: str) -> str:
    """Each condition must hold for the same (job, route, server); the value is the first's."""
    return f"\nand on ({BY})\n".join(conditions) + "\n"


def recording_rules() -> dict[str, Any]:
    errors = "|".join(sorted(semconv.ERROR_OUTCOMES))
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
        record("otelsse:streams:increase5m", f"sum by ({BY}) (increase({STREAMS}[5m]))\n"),
        record(
            f"{TTFE_RECORDED}_bucket:rate5m",
            f"sum by ({BY}, le) (rate({TTFE}_bucket[5m]))\n",
        ),
        record(
            f"{TTFE_RECORDED}:p95_rate5m",
            f"histogram_quantile(0.95, {TTFE_RECORDED}_bucket:rate5m)\n",
        ),
        record(
            f"{TTFE_RECORDED}_count:increase5m",
            f"sum by ({BY}) (increase({TTFE}_count[5m]))\n",
        ),
    ]
    error_ratios = [
        record(
            f"otelsse:stream_error:ratio_rate{window}",
            f'sum by ({BY}) (rate({STREAMS}{{otelsse_outcome=~"{errors}"}}[{window}]))\n'
            f"/\nsum by ({BY}) (rate({STREAMS}[{window}]))\n",
        )
        for window in SLO_WINDOWS
    ]
    long_window_traffic = [
        record(f"otelsse:streams:increase{long}", f"sum by ({BY}) (increase({STREAMS}[{long}]))\n")
        for _, long, _, _, _ in BURN_RATE_ALERTS
    ]
    gate = [
        record(
            f"otelsse:gate_calls:rate{window}",
            f"sum by ({GATE_BY}, {STATE}) (rate({GATE_CALLS}[{window}]))\n",
        )
        for window in ("5m", "1d")
    ]
    gate += [
        record(
            f"otelsse:gate_call_state:ratio_rate{window}",
            f"otelsse:gate_calls:rate{window}\n"
            f"/ ignoring ({STATE}) group_left ()\n"
            f"sum by ({GATE_BY}) (otelsse:gate_calls:rate{window})\n",
        )
        for window in ("5m", "1d")
    ]
    gate.append(
        record(
            "otelsse:gate_calls:increase5m", f"sum by ({GATE_BY}) (increase({GATE_CALLS}[5m]))\n"
        )
    )
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
    rules.append(
        alert(
            "OtelsseTimeToFirstEventSlow",
            both(
                f"{TTFE_RECORDED}:p95_rate5m > {TTFE_P95_SECONDS}",
                f"{TTFE_RECORDED}_count:increase5m >= {MIN_STREAMS}",
            ),
            TTFE_FOR,
            "warning",
            f"SSE streams from {UPSTREAM} are slow to start.",
            f"The 95th percentile time from request send to the first SSE event for {WHERE}"
            " is {{ $value | humanizeDuration }} over the last 5m. Fires above"
            f" {TTFE_P95_SECONDS}s with at least {MIN_STREAMS} first events in 5m, for {TTFE_FOR}.",
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
    rules.append(
        alert(
            "OtelsseInstrumentationErrors",
            "sum by (job, instance, otelsse_instrumentation_stage)"
            " (increase(otelsse_instrumentation_errors_total[5m])) > 0\n",
            ANY_FOR,
            "warning",
            "otelsse failed inside job {{ $labels.job }} at stage"
            " {{ $labels.otelsse_instrumentation_stage }}.",
            "otelsse contained {{ $value | humanize }} failures of its own at stage"
            " {{ $labels.otelsse_instrumentation_stage }} in job {{ $labels.job }}"
            " (instance {{ $labels.instance }}) in the last 5m. The application was not"
            " affected; the streams concerned are unobserved, reported as internal_error, or"
            " miss their metrics.",
        )
    )
    return {
        "groups": [
            {"name": "otelsse.alerts", "rules": rules},
            {"name": "otelsse.gate.alerts", "rules": gate_alerts()},
        ]
    }


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
            f"{quarantined} > {QUARANTINE_RATIO}\nand on ({GATE_BY})\n{guard}\n",
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
            f"{denied} > {DENIAL_RATIO}\nand on ({GATE_BY})\n"
            f"{denied} / {denied_today} > {DENIAL_SPIKE}\nand on ({GATE_BY})\n{guard}\n",
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
                f"{PERCENT} of the streams of {WHERE} ended in a server-side failure over the"
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


def render() -> dict[str, str]:
    """File name -> the text this generator writes."""
    files = {
        "otelsse-recording.rules.yaml": recording_rules(),
        "otelsse-alerts.rules.yaml": alerting_rules(),
        "otelsse-slo.rules.yaml": slo_rules(),
    }
    return {
        name: HEADER.format(by=BY)
        + yaml.dump(content, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
        for name, content in files.items()
    }


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
