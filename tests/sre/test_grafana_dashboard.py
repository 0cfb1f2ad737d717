"""The Grafana dashboards and provisioning load as-is and only query what otelsse exports.

No Grafana runs offline, so this proves the structure instead: every JSON file in
``dashboards/grafana/dashboards`` is a Classic dashboard model (int schemaVersion, stable uid,
unique panel ids, complete non-overlapping 24-column grid), every panel and query uses the
``${datasource}`` template variable (no ``__inputs``, which file provisioning never resolves),
every referenced variable exists and every variable is used. Every query, with the variables at
"All", selects only series and labels otelsse exports (``tests.sre._promql.EXPORTED`` and the
tool gate's ``tests.sre.test_gate_metrics.GATE_EXPORTED``, per selector, and per expression for
grouping labels) with values of their closed sets (outcomes, tool-call states, error types...),
parses with the real ``promtool check rules``, and returns data under ``promtool test rules`` on
synthetic series shaped like otelsse's export (outcomes pre-created at 0, stop reason absent on
truncations, the generic route without provider, refusals and server-run tool calls, the gate's
calls in their final states with their error types). The "Tool gate" row shows the calls by
final state over time, the quarantine rate by error type, the policy denials by tool and the
calls needing reconciliation. The
committed JSON must equal ``generate.py``'s output, and the provisioning YAML must point at the
documented paths and provide the data source uids.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsse import semconv
from otelsse.gate import ToolCallState
from otelsse.monitor import Outcome
from tests.sre import _promql
from tests.sre._promql import label_names, metric_names, substitute_grafana_variables

from ._tools import load_script, promtool
from .test_gate_metrics import GATE_EXPORTED, GEN

#: Every series otelsse exports: the streams' and the tool gate's (``semconv.GATE_METRICS``).
EXPORTED: dict[str, frozenset[str]] = {**_promql.EXPORTED, **GATE_EXPORTED}
GATE_CALLS = "otelsse_gate_calls_total"

GRAFANA = Path(__file__).resolve().parents[2] / "dashboards" / "grafana"
DASHBOARD_FILES = sorted((GRAFANA / "dashboards").glob("*.json"))
PROVIDER_PATH = "/var/lib/grafana/dashboards/otelsse"
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}

# A template variable reference in any of Grafana's three syntaxes; names starting with "__"
# are Grafana's built-ins ($__rate_interval, $__range, ...).
_VARIABLE_REF = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_LABEL_VALUES = re.compile(r"^label_values\((?:(.+),\s*)?(\w+)\)$")
#: Closed label-value sets a matcher may name; a typo there would silently match nothing.
_KNOWN_VALUES = {
    "otelsse_outcome": {outcome.value for outcome in Outcome},
    "otelsse_tool_call_kind": set(semconv.TOOL_CALL_KINDS),
    "otelsse_tool_call_valid": {"true", "false"},
    "otelsse_instrumentation_stage": set(semconv.INSTRUMENTATION_STAGES),
    "otelsse_tool_call_state": {state.value for state in ToolCallState},
    "error_type": set(GEN["gate_error_types"]()),
}

Json = dict[str, Any]


def _load(path: Path) -> Json:
    data: Json = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture(params=DASHBOARD_FILES, ids=[p.name for p in DASHBOARD_FILES])
def dashboard(request: pytest.FixtureRequest) -> Json:
    return _load(request.param)


def _all_panels(dashboard: Json) -> list[Json]:
    """Top-level panels and those nested in collapsed rows."""
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def _query_panels(dashboard: Json) -> list[Json]:
    return [p for p in _all_panels(dashboard) if p["type"] != "row"]


def _variables(dashboard: Json) -> dict[str, Json]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def _references(text: str) -> set[str]:
    names = {a or b or c for a, b, c in _VARIABLE_REF.findall(text)}
    return {name for name in names if not name.startswith("__")}


def _queries(dashboard: Json) -> dict[str, str]:
    """Every PromQL expression in the dashboard, by a readable name: targets, and the series
    selectors of ``label_values()`` variable queries."""
    queries = {
        f"panel {p['id']} {p['title']!r} {t['refId']}": t["expr"]
        for p in _query_panels(dashboard)
        for t in p["targets"]
    }
    for name, variable in _variables(dashboard).items():
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["query"])
            assert match, f"variable {name}: not a label_values() query: {variable['query']}"
            queries[f"variable {name}"] = match.group(1)
    return queries


def _promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on the expressions written as recording rules (reference §4)."""
    rules = [{"record": f"grafana_dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return promtool("check", "rules", str(path))


# -- the JSON model --------------------------------------------------------------------------------


def test_dashboards_present_with_distinct_uids() -> None:
    assert "otelsse-overview.json" in [p.name for p in DASHBOARD_FILES]
    uids = [_load(p)["uid"] for p in DASHBOARD_FILES]
    assert len(uids) == len(set(uids))


def test_top_level_model(dashboard: Json) -> None:
    assert type(dashboard["schemaVersion"]) is int
    assert 39 <= dashboard["schemaVersion"] <= 41
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"])
    assert dashboard["title"].strip()
    assert dashboard["tags"]
    assert dashboard["time"] == {"from": "now-1h", "to": "now"}
    assert dashboard["refresh"] == "30s"
    # __inputs is for sharing through the import UI; file provisioning leaves it unresolved.
    assert "__inputs" not in dashboard
    assert "${DS_" not in json.dumps(dashboard)


def test_panel_ids_unique(dashboard: Json) -> None:
    ids = [p["id"] for p in _all_panels(dashboard)]
    assert all(type(i) is int for i in ids)
    assert len(ids) == len(set(ids))


def test_grid_complete_without_overlaps(dashboard: Json) -> None:
    cells: dict[tuple[int, int], int] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert {k: type(grid.get(k)) for k in "hwxy"} == dict.fromkeys("hwxy", int), panel["title"]
        assert min(grid["h"], grid["w"]) > 0, panel["title"]
        assert min(grid["x"], grid["y"]) >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']!r} is wider than the grid"
        for cell in itertools.product(
            range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        ):
            assert cell not in cells, f"{panel['title']!r} overlaps panel {cells[cell]}"
            cells[cell] = panel["id"]


def test_every_panel_and_target_uses_the_datasource_variable(dashboard: Json) -> None:
    variables = _variables(dashboard)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in _all_panels(dashboard):
        if panel["type"] == "row":
            assert not panel.get("targets"), f"row {panel['title']!r} has queries"
            continue
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        assert panel["targets"], f"{panel['title']!r} has no query"
        for t in panel["targets"]:
            assert t["datasource"] == DATASOURCE_REF, (panel["title"], t["refId"])
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE_REF, variable["name"]


def test_panels_titled_and_described(dashboard: Json) -> None:
    for panel in _all_panels(dashboard):
        assert panel["title"].strip(), f"panel {panel['id']} has no title"
        if panel["type"] != "row":
            # An on-call reader needs the signal explained and what to do, not a one-liner.
            assert len(panel["description"].split()) >= 8, panel["title"]


def test_targets_have_ref_id_and_expr(dashboard: Json) -> None:
    for panel in _query_panels(dashboard):
        refs = [t["refId"] for t in panel["targets"]]
        assert all(refs), panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(isinstance(t["expr"], str) and t["expr"].strip() for t in panel["targets"])


def test_variables_chained_and_all_used(dashboard: Json) -> None:
    variables = list(_variables(dashboard))
    assert variables[0] == "datasource"
    for position, name in enumerate(variables[1:], start=1):
        variable = _variables(dashboard)[name]
        assert variable["type"] == "query", name
        assert (variable["multi"], variable["includeAll"], variable["allValue"]) == (
            True,
            True,
            ".*",
        ), name
        assert variable["refresh"] == 2, f"{name} must refresh on time range change"
        # A variable's values may depend only on the choices made before it.
        assert _references(variable["query"]) <= set(variables[:position]), name
    used: set[str] = set()
    for panel in _query_panels(dashboard):
        texts = [panel["title"], *(t["expr"] for t in panel["targets"])]
        texts += [t.get("legendFormat", "") for t in panel["targets"]]
        used |= set().union(*map(_references, texts))
    assert used <= set(variables), f"undefined variables: {used - set(variables)}"
    assert set(variables) - {"datasource"} <= used, "defined but never used in a panel"


# -- the queries -----------------------------------------------------------------------------------


def test_queries_use_only_exported_metrics_and_labels(dashboard: Json) -> None:
    problems = []
    for where, raw in _queries(dashboard).items():
        expr = substitute_grafana_variables(raw)
        metrics = metric_names(expr)
        if not metrics or not metrics <= EXPORTED.keys():
            problems.append(f"{where}: metrics {sorted(metrics - EXPORTED.keys())} in {expr}")
            continue
        allowed = set().union(*(EXPORTED[m] for m in metrics))
        if not label_names(expr) <= allowed:
            problems.append(f"{where}: labels {sorted(label_names(expr) - allowed)} in {expr}")
        # Per selector too: a label another metric of the expression has is not enough.
        for metric, matchers in _SELECTOR.findall(expr):
            for label, _, value in _MATCHER.findall(matchers):
                if label not in EXPORTED[metric]:
                    problems.append(f"{where}: {metric} has no label {label}")
                # ".*" is a substituted variable, "" the "label present" idiom (!="").
                if label in _KNOWN_VALUES and value not in {"", ".*"}:
                    unknown = set(value.split("|")) - _KNOWN_VALUES[label]
                    if unknown:
                        problems.append(f"{where}: {label} has no value {sorted(unknown)}")
    for name, variable in _variables(dashboard).items():
        match = _LABEL_VALUES.match(variable["query"]) if variable["type"] == "query" else None
        if match and not all(match.group(2) in EXPORTED[m] for m in metric_names(match.group(1))):
            problems.append(f"variable {name}: lists a label its series do not carry")
    assert not problems, "\n".join(problems)


def test_failure_outcomes_shown_as_percentages_with_thresholds(dashboard: Json) -> None:
    """Each server-side failure outcome has its own percentage panel with warning levels, and
    every "all failures" regex names exactly ``semconv.ERROR_OUTCOMES``."""
    percent_panels = {
        outcome
        for panel in _query_panels(dashboard)
        if panel["fieldConfig"]["defaults"].get("unit") == "percentunit"
        and len(panel["fieldConfig"]["defaults"]["thresholds"]["steps"]) >= 3
        for t in panel["targets"]
        for outcome in re.findall(r'otelsse_outcome="(\w+)"', t["expr"])
    }
    assert percent_panels >= semconv.ERROR_OUTCOMES
    regexes = [
        set(value.split("|"))
        for t in itertools.chain.from_iterable(p["targets"] for p in _query_panels(dashboard))
        for value in re.findall(r'otelsse_outcome[=!]~"([^"]*)"', t["expr"])
    ]
    assert regexes
    assert all(group == semconv.ERROR_OUTCOMES for group in regexes if len(group) > 2), (
        "a failure regex drifted from semconv.ERROR_OUTCOMES"
    )


def test_every_exported_metric_is_shown(dashboard: Json) -> None:
    """Each counter, gauge and histogram (by its buckets) otelsse exports has a panel."""
    shown = set().union(*map(metric_names, _queries(dashboard).values()))
    families = {name for name in EXPORTED if not name.endswith(("_sum", "_count"))}
    assert families - shown == set()


def test_every_query_passes_promtool(dashboard: Json, tmp_path: Path) -> None:
    exprs = [substitute_grafana_variables(e) for e in _queries(dashboard).values()]
    result = _promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_gate_rejects_a_broken_query(tmp_path: Path) -> None:
    # The same harness must fail on a bad expression, or the check above proves nothing.
    result = _promtool_check(["sum(rate(otelsse_streams_total[1m])"], tmp_path)
    assert result.returncode != 0
    assert "unclosed left parenthesis" in result.stdout + result.stderr


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    assert labels.keys() <= EXPORTED[metric], f"synthetic {metric} carries unexported labels"
    matchers = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{matchers}}}", "values": values}


def _contract_shaped_series() -> list[dict[str, str]]:
    """Twenty minutes of series shaped as otelsse exports them: every outcome pre-created at 0
    without a stop reason, finished streams with one, truncations without, a provider route and
    the generic route (no provider or model), the application's tool calls of both validities
    and server-run ones without validity, refusals (pre-created at 0), every instrumentation
    stage at 0, and the scope labels that queries must aggregate away."""
    target = {"job": "otelsse-demo", "instance": "127.0.0.1:9464", "otel_scope_name": "otelsse"}
    routes = [
        {
            "otelsse_route": "openai.chat_completions",
            "server_address": "api.openai.test",
            "gen_ai_provider_name": "openai",
            "gen_ai_response_model": "gpt-test",
        },
        {"otelsse_route": "generic", "server_address": "sse.local.test"},
    ]
    series = [
        _series(
            "otelsse_instrumentation_errors_total",
            target | {"otelsse_instrumentation_stage": stage},
            "0x20",
        )
        for stage in semconv.INSTRUMENTATION_STAGES
    ]
    for route in routes:
        key = target | route
        series += [
            _series(
                "otelsse_streams_total",
                key | {"otelsse_outcome": outcome.value},
                "0+1x20" if outcome is Outcome.TRUNCATED else "0x20",
            )
            for outcome in Outcome
        ]
        finished = key | {"otelsse_outcome": "complete", "otelsse_stop_reason": "stop"}
        series.append(_series("otelsse_streams_total", finished, "0+5x20"))
        series += [
            _series(bucket, finished | {"le": le}, "0+5x20")
            for bucket in EXPORTED
            if bucket.endswith("_bucket")
            for le in ("1", "+Inf")
        ]
        client = key | {"otelsse_tool_call_kind": semconv.TOOL_CALL_CLIENT}
        series += [
            _series("otelsse_tool_calls_total", client | {"otelsse_tool_call_valid": valid}, values)
            for valid, values in (("true", "0+2x20"), ("false", "0+1x20"))
        ]
        server = key | {"otelsse_tool_call_kind": semconv.TOOL_CALL_SERVER}
        series.append(_series("otelsse_tool_calls_total", server, "0+1x20"))
        series.append(_series("otelsse_stream_refusals_total", key, "0x10 0+1x10"))
        active = {k: v for k, v in key.items() if k in EXPORTED["otelsse_streams_active"]}
        series.append(_series("otelsse_streams_active", active, "2x20"))
    # The tool gate's calls: a series per (state, tool, error type), born with its first call.
    gate = [
        ("executed", "write_file", None, "_ 3+3x19"),
        ("replayed", "write_file", None, "_x5 1+1x14"),
        ("quarantined", "write_file", "truncated", "_ 1+1x19"),
        ("quarantined", "delete_everything", "unregistered_tool", "_x3 1x17"),
        ("policy_denied", "write_file", "policy_denied", "_ 1+1x19"),
        ("policy_denied", "run_shell", "policy_error", "_x8 1x12"),
        ("needs_reconciliation", "write_file", None, "_x6 1x14"),
    ]
    for state, tool, error, values in gate:
        labels = target | {"otelsse_tool_call_state": state, "gen_ai_tool_name": tool}
        series.append(
            _series(GATE_CALLS, labels | ({"error_type": error} if error else {}), values)
        )
    return series


def test_every_query_returns_data_on_contract_shaped_series(
    dashboard: Json, tmp_path: Path
) -> None:
    """Offline preview of the end-to-end check: with every variable at "All", no query comes
    back empty (``absent()`` of it is empty) once there is traffic."""
    checks = [
        {"expr": f"absent({substitute_grafana_variables(expr)})", "eval_time": "10m"}
        for expr in _queries(dashboard).values()
    ]
    test_file = tmp_path / "dashboard-queries.test.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": _contract_shaped_series(),
                        "promql_expr_test": [check | {"exp_samples": []} for check in checks],
                    }
                ],
            }
        )
    )
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# -- generator and provisioning --------------------------------------------------------------------


def test_committed_json_is_the_generator_output() -> None:
    generate = load_script(GRAFANA / "generate.py")
    assert generate.OUTPUT.read_text(encoding="utf-8") == generate.render(), (
        "dashboards/grafana/dashboards is stale: run python dashboards/grafana/generate.py"
    )


def test_dashboard_provider_loads_the_documented_path() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning/dashboards/otelsse.yaml").read_text())
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert (provider["type"], provider["folder"]) == ("file", "otelsse")
    assert provider["options"] == {"path": PROVIDER_PATH, "foldersFromFilesStructure": False}
    readme = (GRAFANA / "README.md").read_text(encoding="utf-8")
    documented = (PROVIDER_PATH, "/etc/grafana/provisioning", "UnderscoreEscapingWithSuffixes")
    assert all(text in readme for text in documented)


def test_datasources_provisioned() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning/datasources/datasources.yaml").read_text())
    assert config["apiVersion"] == 1
    by_uid = {d["uid"]: d for d in config["datasources"]}
    assert (by_uid["prometheus"]["type"], by_uid["prometheus"]["url"]) == (
        "prometheus",
        "http://prometheus:9090",
    )
    assert (by_uid["jaeger"]["type"], by_uid["jaeger"]["url"]) == ("jaeger", "http://jaeger:16686")
    assert [d["uid"] for d in config["datasources"] if d.get("isDefault")] == ["prometheus"]
    # The dashboards' datasource variable lists data sources of this type.
    for path in DASHBOARD_FILES:
        assert _variables(_load(path))["datasource"]["query"] == by_uid["prometheus"]["type"]


# -- the tool gate ---------------------------------------------------------------------------------


def _gate_panels(dashboard: Json) -> dict[str, Json]:
    return {
        panel["title"]: panel
        for panel in _query_panels(dashboard)
        if any(GATE_CALLS in t["expr"] for t in panel["targets"])
    }


def _groups(expr: str) -> set[str]:
    return {
        label.strip()
        for group in re.findall(r"\bby \(([^)]*)\)", expr)
        for label in group.split(",")
    }


def test_the_gate_row_shows_states_quarantines_denials_and_reconciliations() -> None:
    dashboard = _load(GRAFANA / "dashboards" / "otelsse-overview.json")
    rows = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    assert "Tool gate" in rows
    panels = _gate_panels(dashboard)
    # Every gate panel sits in the "Tool gate" row, after it and before any other row.
    order = [panel["title"] for panel in dashboard["panels"]]
    start = order.index("Tool gate")
    end = next(
        (i for i, p in enumerate(dashboard["panels"]) if i > start and p["type"] == "row"),
        len(order),
    )
    assert set(panels) <= set(order[start + 1 : end])

    def exprs(panel: Json) -> str:
        return " ".join(t["expr"] for t in panel["targets"])

    by_state = [p for p in panels.values() if "otelsse_tool_call_state" in _groups(exprs(p))]
    assert any(p["type"] == "timeseries" for p in by_state), "calls by final state over time"
    quarantine = [
        p
        for p in panels.values()
        if 'otelsse_tool_call_state="quarantined"' in exprs(p) and "error_type" in _groups(exprs(p))
    ]
    assert [p["fieldConfig"]["defaults"]["unit"] for p in quarantine] == ["percentunit"]
    denials = [
        p
        for p in panels.values()
        if 'otelsse_tool_call_state="policy_denied"' in exprs(p)
        and "gen_ai_tool_name" in _groups(exprs(p))
    ]
    assert denials, "policy denials by tool"
    reconciliation = [
        p for p in panels.values() if 'otelsse_tool_call_state="needs_reconciliation"' in exprs(p)
    ]
    assert any(p["type"] == "stat" for p in reconciliation), "a needs_reconciliation count"
    for panel in panels.values():
        # The gate's counter carries no route, server, provider or model: only the job filters.
        for variable in _references(exprs(panel)):
            assert variable == "job", (panel["title"], variable)
