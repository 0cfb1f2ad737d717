"""End to end with a real Prometheus: the demo's metrics, every dashboard query, every rule.

Debian's ``prometheus`` (installed by ``.ci/run``; a missing binary fails these tests) scrapes
``otelsse demo --prometheus-port`` on 127.0.0.1 every second, with a temporary config and data
directory and every rule file of ``dashboards/prometheus`` loaded. It also scrapes a real tool
gate (``tests/sre/test_gate_metrics.ExportingGate``), which decides every kind of call once
before the demo and once after it, so that the gate's counters grow inside the windows the
rules and panels look at. Once the demo has finished, Prometheus holds its final numbers and
the gate's, and every recording rule has been evaluated on them, this module checks through the
HTTP API that:

- the series and labels Prometheus stores are exactly the ones ``tests/sre/_promql.py`` and
  ``tests/sre/test_gate_metrics.py`` derive from ``semconv`` (which the dashboard and rule tests
  check their queries against);
- the demo's printed summary equals what Prometheus computes from the same metrics;
- every Grafana panel query and variable query (variables at "All") returns data;
- every recording rule's expression and output, and every alert expression with its thresholds
  relaxed (``<op> number`` → ``>= -Inf``), returns data; every rule evaluates without error.

Every process is polled, never slept on, and stopped at the end.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsse import semconv

from . import _promql
from ._e2e import demo_process, free_port, poll, stop, wait_for_summary
from ._promql import substitute_grafana_variables
from .test_gate_metrics import GATE_EXPORTED, ExportingGate, Observed

#: Every series otelsse exports: the streams' and the tool gate's.
EXPORTED: dict[str, frozenset[str]] = {**_promql.EXPORTED, **GATE_EXPORTED}
STREAMS_TOTAL = "otelsse_streams_total"
GATE_CALLS = "otelsse_gate_calls_total"

#: End-to-end runs of the demo against real servers: out of the fast loop.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "dashboards" / "prometheus").glob("*.rules.yaml"))
DASHBOARDS = sorted((ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json"))
#: Enough streams for every ending in the demo's mix (each 50 deal all of them).
STREAMS = 60


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as response:
            document = json.load(response)
        assert document["status"] == "success", document
        return document["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self.get("/api/v1/query", **params)
        assert data["resultType"] in ("vector", "scalar"), data
        return list(data["result"]) if data["resultType"] == "vector" else [data["result"]]

    def value(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Prometheus, dict[str, Any], float]]:
    """Prometheus scraping a finished demo: (its API, the demo's summary, when the demo ended)."""
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is required (apt-get install prometheus; .ci/run does)"
    tmp = tmp_path_factory.mktemp("prometheus")
    gate = ExportingGate(tmp)
    metrics_port, web_port = free_port(), free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in RULE_FILES],
        "scrape_configs": [
            {
                "job_name": "otelsse-demo",
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            },
            {
                "job_name": "otelsse-gate",
                "static_configs": [{"targets": [f"127.0.0.1:{gate.port}"]}],
            },
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    command = [
        binary,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{web_port}",
    ]
    try:
        with open(tmp / "prometheus.log", "w") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    except BaseException:
        gate.close()
        raise
    try:
        prometheus = Prometheus(f"http://127.0.0.1:{web_port}")
        poll(lambda: _ready(prometheus, server), timeout=60, what="Prometheus to be ready")
        # The gate's first round, scraped before the demo starts: its series exist early.
        gate.decide("-before")
        first = _exported_total(gate)
        poll(
            lambda: _scraped_total(prometheus, GATE_CALLS) == first or None,
            timeout=60,
            what="a scrape of the gate's first round",
        )
        arguments = (
            "--streams",
            str(STREAMS),
            "--speed",
            "2",
            "--prometheus-port",
            str(metrics_port),
        )
        with demo_process(tmp, *arguments) as (demo, summary_file):
            summary = wait_for_summary(demo, summary_file, tmp)
            gate.decide("-after")
            gate_total = _exported_total(gate)
            # The final numbers are in once a scrape after the demo's end has landed, and one
            # after the gate's second round.
            poll(
                lambda: (
                    (
                        _scraped_total(prometheus) == summary["total"]
                        and _scraped_total(prometheus, GATE_CALLS) == gate_total
                    )
                    or None
                ),
                timeout=60,
                what="a scrape with the demo's and the gate's final numbers",
            )
            # Every recording rule evaluated on those numbers. An evaluation of a scrape taken
            # during the gate's second round already gives numbers, but the ratios of a state
            # that round had not reached yet (0 / 0 for a ratio of ratios) are NaN in it.
            final_scrape = max(
                _latest_sample_time(prometheus, metric) for metric in (STREAMS_TOTAL, GATE_CALLS)
            )
            evaluated = [
                poll(
                    functools.partial(_evaluated_since, prometheus, record, final_scrape),
                    timeout=30,
                    what=f"{record} to be evaluated on the final scrape",
                )
                for record in _recorded_names()
            ]
            # The checks look at the moment the last of them was evaluated on the final numbers.
            ended = max(evaluated)
            yield prometheus, summary, ended
    finally:
        stop(server)
        gate.close()


def _ready(prometheus: Prometheus, server: subprocess.Popen[bytes]) -> bool | None:
    assert server.poll() is None, "prometheus exited at start-up"
    try:
        with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=5) as response:
            return response.status == 200 or None
    except OSError:
        return None


def _latest_sample_time(prometheus: Prometheus, metric: str) -> float:
    """The time of the newest sample of ``metric`` (a scrape's or a rule evaluation's), or
    -inf when it has none."""
    result = prometheus.query(f"max(timestamp({metric}))")
    return float(result[0]["value"][1]) if result else -math.inf


def _evaluated_since(prometheus: Prometheus, record: str, moment: float) -> float | None:
    """When ``record`` was last evaluated, if at ``moment`` or later; else None."""
    latest = _latest_sample_time(prometheus, record)
    return latest if latest >= moment else None


def _recorded_names() -> list[str]:
    return [rule.values[0]["record"] for rule in _rules() if "record" in rule.values[0]]


def _exported_total(gate: ExportingGate) -> float:
    return sum(value for _, _, value in Observed(scrape=gate.scrape()).samples())


def _scraped_total(prometheus: Prometheus, metric: str = STREAMS_TOTAL) -> float | None:
    result = prometheus.query(f"sum({metric})")
    return float(result[0]["value"][1]) if result else None


# -- the names ------------------------------------------------------------------------------


def test_prometheus_stores_exactly_the_series_and_labels_derived_from_semconv(run: Any) -> None:
    prometheus, _, _ = run
    stored = set(prometheus.get("/api/v1/label/__name__/values"))
    assert {n for n in stored if n.startswith("otelsse_")} == set(EXPORTED)
    # The GenAI client metrics by their default names (no OTEL_SEMCONV_STABILITY_OPT_IN).
    legacy = _promql.exported(s for specs in semconv.GENAI_METRICS_LEGACY.values() for s in specs)
    assert {n for n in stored if n.startswith("gen_ai_")} == set(legacy)
    for name, allowed in {**EXPORTED, **legacy}.items():
        series = prometheus.get("/api/v1/series", **{"match[]": name})
        carried = {label for labels in series for label in labels} - {"__name__"}
        assert carried <= allowed, (name, carried - allowed)
        assert {"job", "instance"} <= carried, name


# -- the demo's summary ---------------------------------------------------------------------


def test_the_summary_counts_equal_what_prometheus_scraped(run: Any) -> None:
    prometheus, summary, _ = run
    scraped: dict[str, dict[str, int]] = {}
    for sample in prometheus.query(
        "sum by (otelsse_route, otelsse_outcome) (otelsse_streams_total)"
    ):
        route = scraped.setdefault(sample["metric"]["otelsse_route"], {})
        route[sample["metric"]["otelsse_outcome"]] = int(float(sample["value"][1]))
    assert scraped == summary["streams"]
    assert summary["total"] == STREAMS
    truncation = prometheus.value(
        'sum(otelsse_streams_total{otelsse_outcome="truncated"}) / sum(otelsse_streams_total)'
    )
    assert truncation == pytest.approx(summary["truncation_rate"], rel=1e-12)
    assert truncation > 0  # the demo's mix truncates some streams: the check is not vacuous
    validity = {
        sample["metric"]["otelsse_tool_call_valid"]: int(float(sample["value"][1]))
        for sample in prometheus.query(
            "sum by (otelsse_tool_call_valid) (otelsse_tool_calls_total)"
        )
    }
    assert validity == {"true": summary["tool_calls_valid"], "false": summary["tool_calls_invalid"]}
    assert summary["tool_calls_invalid"] > 0


@pytest.mark.parametrize("q", [0.5, 0.95])
def test_the_summary_time_to_first_output_quantiles_equal_prometheus_histogram_quantile(
    run: Any, q: float
) -> None:
    prometheus, summary, _ = run
    expr = (
        f"histogram_quantile({q}, sum by (le) (otelsse_stream_time_to_first_output_seconds_bucket))"
    )
    value = prometheus.value(expr)
    assert math.isfinite(value)
    assert value == pytest.approx(summary[f"time_to_first_output_p{round(q * 100)}"], rel=1e-9)


# -- the dashboards -------------------------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboard_targets() -> list[Any]:
    cases = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in _panels(dashboard["panels"]):
            for target in panel.get("targets", []):
                title = f"{path.stem}:{panel['title']}:{target['refId']}"
                cases.append(pytest.param(target["expr"], id=title))
    return cases


def _variable_queries() -> list[Any]:
    cases = []
    for path in DASHBOARDS:
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] == "query":
                query = variable["query"]
                query = query["query"] if isinstance(query, dict) else query
                cases.append(pytest.param(query, id=f"{path.stem}:${variable['name']}"))
    return cases


def test_there_are_dashboards_and_rules_to_check() -> None:
    assert DASHBOARDS
    assert RULE_FILES
    assert len(_dashboard_targets()) >= 20
    assert len(_variable_queries()) >= 5


@pytest.mark.parametrize("expr", _dashboard_targets())
def test_every_dashboard_query_returns_data(run: Any, expr: str) -> None:
    prometheus, _, ended = run
    # At the demo's end: `$__rate_interval` windows then hold the streams' increases.
    result = prometheus.query(substitute_grafana_variables(expr), at=ended)
    assert result, substitute_grafana_variables(expr)


@pytest.mark.parametrize("query", _variable_queries())
def test_every_dashboard_variable_lists_values(run: Any, query: str) -> None:
    prometheus, _, _ = run
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
    assert match, query
    selector, label = match.groups()
    values = prometheus.get(
        f"/api/v1/label/{label}/values", **{"match[]": substitute_grafana_variables(selector)}
    )
    assert values, query


# -- the rules ------------------------------------------------------------------------------


def _rules() -> list[Any]:
    cases = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("record") or rule["alert"]
                cases.append(pytest.param(rule, id=f"{path.stem}:{name}"))
    return cases


_THRESHOLD = re.compile(
    r"(>=|<=|==|!=|>|<)\s*(?:bool\s+)?-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])"
)


def relaxed(expr: str) -> str:
    """An alert expression with every threshold comparison made always true."""
    return _THRESHOLD.sub(">= -Inf", expr)


def test_relaxing_rewrites_every_threshold_and_nothing_else() -> None:
    expr = 'sum(rate(x{a!="1",b=~"2"}[5m])) > 0.05 and on (j) sum(increase(x[5m])) >= 20 < bool 1e3'
    assert relaxed(expr) == (
        'sum(rate(x{a!="1",b=~"2"}[5m])) >= -Inf and on (j) sum(increase(x[5m])) >= -Inf >= -Inf'
    )


@pytest.mark.parametrize("rule", _rules())
def test_every_rule_expression_returns_data(run: Any, rule: dict[str, Any]) -> None:
    prometheus, _, ended = run
    expr = rule["expr"] if "record" in rule else relaxed(rule["expr"])
    assert prometheus.query(expr, at=ended), expr
    if "record" in rule:
        # Prometheus itself evaluated the rule into its series.
        record = rule["record"]
        poll(lambda: prometheus.query(record) or None, timeout=30, what=f"{record} to be recorded")


def test_every_rule_is_loaded_and_evaluates_without_error(run: Any) -> None:
    prometheus, _, _ = run
    expected = {rule.values[0].get("record") or rule.values[0]["alert"] for rule in _rules()}

    def evaluated() -> dict[str, str] | None:
        groups = prometheus.get("/api/v1/rules")["groups"]
        health = {rule["name"]: rule["health"] for group in groups for rule in group["rules"]}
        return health if set(health) == expected and "unknown" not in health.values() else None

    health = poll(evaluated, timeout=30, what="every rule to be evaluated")
    assert set(health.values()) == {"ok"}, {name: h for name, h in health.items() if h != "ok"}
