"""What Prometheus sees of otelsse, derived from ``semconv``, and what a PromQL expression uses.

The dashboard, rule and end-to-end tests all check queries against ``EXPORTED``: the series names
and label names the OpenTelemetry Prometheus exporter (and the Collector's default
``UnderscoreEscapingWithSuffixes`` translation) makes of otelsse's instruments, by the
translation in ``semconv``. The end-to-end test confirms them against a real scrape, so a rename
in ``semconv`` breaks every query that used the old name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from otelsse import semconv
from otelsse.semconv import prometheus_label, prometheus_series

__all__ = [
    "EXPORTED",
    "GENAI_EXPORTED",
    "TARGET_LABELS",
    "exported",
    "label_names",
    "metric_names",
    "prometheus_label",
    "prometheus_series",
    "substitute_grafana_variables",
]

#: Labels every scraped series may carry besides its attributes: the scrape target's, and the
#: instrumentation scope's (exporter ≥ 0.64b0).
TARGET_LABELS = frozenset(
    {"job", "instance", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
)


def exported(specs: Iterable[semconv.MetricSpec]) -> dict[str, frozenset[str]]:
    """The series names Prometheus stores for ``specs``, with the label names each may carry."""
    found: dict[str, frozenset[str]] = {}
    for spec in specs:
        labels = TARGET_LABELS | {prometheus_label(a) for a in spec.attributes}
        for series in prometheus_series(spec):
            found[series] = labels | {"le"} if series.endswith("_bucket") else labels
    return found


#: Every otelsse series name Prometheus stores, with the label names it may carry.
EXPORTED: dict[str, frozenset[str]] = exported(semconv.METRICS)
#: The GenAI client metrics' series, both name sets (``OTEL_SEMCONV_STABILITY_OPT_IN``).
GENAI_EXPORTED: dict[str, frozenset[str]] = exported(semconv.GENAI_METRICS)

# PromQL words that look like identifiers but are not metric names.
_KEYWORDS = frozenset(
    {
        "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
        "bool", "offset", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
        "bottomk", "quantile", "count_values", "group", "inf", "nan",
    }
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric (and recording-rule) names an expression selects."""
    text = _STRING.sub('""', expr)
    text = _GROUPING.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    names = set()
    for name in _IDENTIFIER.findall(text):
        if name.lower() in _KEYWORDS or re.fullmatch(r"[0-9.e]+", name):
            continue
        names.add(name)
    return names


def label_names(expr: str) -> set[str]:
    """The label names an expression matches on or groups by."""
    text = _STRING.sub('""', expr)
    labels: set[str] = set()
    for group in _GROUPING.findall(text):
        labels |= {name.strip() for name in group.split(",") if name.strip()}
    for matchers in _MATCHERS.findall(text):
        labels |= set(_MATCHER_LABEL.findall(matchers))
    return labels


def substitute_grafana_variables(expr: str, *, rate_interval: str = "1m") -> str:
    """A Grafana query as Prometheus would receive it with every template variable at "All"."""
    expr = re.sub(r"\$__rate_interval|\$\{__rate_interval\}", rate_interval, expr)
    expr = re.sub(r"\$__interval|\$\{__interval\}", "15s", expr)
    expr = re.sub(r"\$__range|\$\{__range\}", "5m", expr)
    return re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+|\[\[\w+\]\]", ".*", expr)
