"""The Grafana dashboards and provisioning load as-is and only query what otelsse exports.

No Grafana runs offline, so this proves the structure instead: every JSON file in
``dashboards/grafana/dashboards`` is a Classic dashboard model (int schemaVersion, stable uid,
unique panel ids, complete non-overlapping 24-column grid), every panel and query uses the
``${datasource}`` template variable (no ``__inputs``, which file provisioning never resolves),
every referenced variable exists and every variable is used. Every query, with the variables at
"All", selects only series and labels otelsse exports (``tests.sre._promql.EXPORTED``, the GenAI
client metrics of ``semconv.GENAI_METRICS`` and the tool gate's
``tests.sre.test_gate_metrics.GATE_EXPORTED``, per selector, and per expression for grouping
labels) with values of their closed sets (outcomes, tool-call states, error types...), filters
on exactly the dashboard variables its metric has labels for, parses with the real ``promtool
check rules``, and returns data under ``promtool test rules`` on synthetic series shaped like
otelsse's export (outcomes pre-created at 0, stop reason absent on truncations, a status on
rate limits and HTTP errors, histograms by route, provider and outcome only, the GenAI metrics
under both name sets, the generic route without provider or model, refusals and server-run tool
calls, the gate's calls in their final states with their error types). The stream-success
panels select the SLO's bad streams exactly as its rules do. The latency histograms ask for
exemplars; the failing-streams table links each row to its spans in the traces data source; the
runbook links use one variable (``--runbook-url``; without it an empty box) and point at existing
runbook sections, every alert's included. The "Tool gate" row shows the calls by final state
over time, the quarantine rate by error type, the policy denials by tool and the calls needing
reconciliation. The committed JSON must equal ``generate.py``'s output, and the provisioning YAML
must point at the documented paths, provide the data source uids without forcing a default, and
link the Prometheus exemplars' trace ids to the traces data source.
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
from otelsse._monitor import Outcome
from otelsse.gate import ToolCallState
from tests.sre import _promql
from tests.sre._promql import label_names, metric_names, substitute_grafana_variables

from ._tools import load_script, promtool
from .test_gate_metrics import GATE_EXPORTED, GEN

#: Every series otelsse exports: the streams', the GenAI client metrics and the tool gate's.
EXPORTED: dict[str, frozenset[str]] = {
    **_promql.EXPORTED, **_promql.GENAI_EXPORTED, **GATE_EXPORTED,
}  # fmt: skip
GATE_CALLS = "otelsse_gate_calls_total"

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
RULES = load_script(ROOT / "dashboards" / "prometheus" / "generate_rules.py")
GENERATOR = load_script(GRAFANA / "generate.py")
DASHBOARD_FILES = sorted((GRAFANA / "dashboards").glob("*.json"))
PROVIDER_PATH = "/var/lib/grafana/dashboards/otelsse"
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
#: The traces data source type the failing-streams links query: the compose stack's Jaeger.
TRACES_TYPE = "jaeger"
STATUS = "http_response_status_code"

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


def _label_values(query: str) -> tuple[str, str]:
    """(series selector, label) of a ``label_values()`` variable query."""
    match = _LABEL_VALUES.match(query)
    assert match, f"not a label_values() query: {query}"
    return match.group(1), match.group(2)


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


def _links(panel: Json) -> list[Json]:
    """A panel's links: its own, and the data links of its fields."""
    return [*panel.get("links", []), *panel["fieldConfig"]["defaults"].get("links", [])]


def test_variables_chained_and_all_used(dashboard: Json) -> None:
    variables = _variables(dashboard)
    sources = [name for name, v in variables.items() if v["type"] == "datasource"]
    assert sources == ["datasource", "traces"]
    assert variables["traces"]["query"] == TRACES_TYPE
    # The runbook base is one setting, with no default: a box to fill in (see the next test).
    boxes = {name: v for name, v in variables.items() if v["type"] == "textbox"}
    assert list(boxes) == ["runbook_url"]
    assert (boxes["runbook_url"]["query"], boxes["runbook_url"]["hide"]) == ("", 0)
    chain = [name for name, v in variables.items() if v["type"] == "query"]
    assert len(chain) + len(sources) + len(boxes) == len(variables)
    for position, name in enumerate(chain):
        variable = variables[name]
        assert (variable["multi"], variable["includeAll"], variable["allValue"]) == (
            True,
            True,
            ".*",
        ), name
        assert variable["refresh"] == 2, f"{name} must refresh on time range change"
        # A variable's values may depend only on the choices made before it.
        assert _references(variable["query"]) <= set(chain[:position]), name
    used: set[str] = set()
    for panel in _query_panels(dashboard):
        texts = [panel["title"], *(t["expr"] for t in panel["targets"])]
        texts += [t.get("legendFormat", "") for t in panel["targets"]]
        texts += [link["url"] for link in _links(panel)]
        used |= set().union(*map(_references, texts))
    used |= set().union(*(_references(link["url"]) for link in dashboard["links"]))
    assert used <= set(variables), f"undefined variables: {used - set(variables)}"
    assert set(variables) - {"datasource"} <= used, "defined but never used in a panel"


def test_model_variable_is_the_request_model(dashboard: Json) -> None:
    # The counters carry the requested model: it exists even for a stream refused with a 429.
    assert _variables(dashboard)["model"]["query"].endswith(", gen_ai_request_model)")


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
    """Each error outcome has its own percentage panel with warning levels; every "all
    failures" regex names exactly ``semconv.ERROR_OUTCOMES``, or the SLO's bad streams, and those
    only with the SLO's status rule in the same selector."""
    percent_panels = {
        outcome
        for panel in _query_panels(dashboard)
        if panel["fieldConfig"]["defaults"].get("unit") == "percentunit"
        and len(panel["fieldConfig"]["defaults"]["thresholds"]["steps"]) >= 3
        for t in panel["targets"]
        for outcome in re.findall(r'otelsse_outcome="(\w+)"', t["expr"])
    }
    assert percent_panels >= semconv.ERROR_OUTCOMES
    groups = [
        matchers
        for t in itertools.chain.from_iterable(p["targets"] for p in _query_panels(dashboard))
        for _, matchers in _SELECTOR.findall(t["expr"])
    ]
    slo = 0
    for matchers in groups:
        found = {(label, op): value for label, op, value in _MATCHER.findall(matchers)}
        outcomes = set(found.get(("otelsse_outcome", "=~"), "").split("|"))
        if len(outcomes) <= 2:
            continue
        assert outcomes in (semconv.ERROR_OUTCOMES, semconv.SLO_BAD_OUTCOMES), outcomes
        if outcomes == semconv.SLO_BAD_OUTCOMES:
            slo += 1
            assert found[STATUS, "!~"] == semconv.SLO_EXCLUDED_STATUS, matchers
    assert slo, "no panel shows the stream-success SLO's bad streams"
    # The very selector the SLO's rules count.
    assert any(RULES.SLO_BAD in expr for expr in _queries(dashboard).values())


def test_every_exported_metric_is_shown(dashboard: Json) -> None:
    """Each counter, gauge and histogram otelsse exports (any of a histogram's series), the
    GenAI client metrics under both name sets and the gate's counter have a panel."""
    shown = set().union(*map(metric_names, _queries(dashboard).values()))
    specs = (*semconv.METRICS, *semconv.GENAI_METRICS, *semconv.GATE_METRICS)
    hidden = [spec.name for spec in specs if not set(_promql.prometheus_series(spec)) & shown]
    assert not hidden


def test_every_query_filters_on_the_variables_its_metric_has(dashboard: Json) -> None:
    """A filter the metric lacks would empty the panel; one it has but ignores would lie."""
    chain = {v["name"]: v for v in dashboard["templating"]["list"] if v["type"] == "query"}
    label_of = {name: _label_values(v["query"])[1] for name, v in chain.items()}
    variable_of = {label: name for name, label in label_of.items()}
    for where, expr in _queries(dashboard).items():
        if where.startswith("variable"):
            continue
        for metric, matchers in _SELECTOR.findall(expr):
            filtered = {
                label for label, op, value in _MATCHER.findall(matchers) if value.startswith("$")
            }
            expected = {label for label in label_of.values() if label in EXPORTED[metric]}
            assert filtered == expected, (where, metric)
            for label, _, value in _MATCHER.findall(matchers):
                if value.startswith("$"):
                    assert value == f"${variable_of[label]}", (where, label)


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
    without a stop reason or status, finished streams with one, truncations without, a 429 and
    HTTP errors with their status, a provider route and the generic route (no provider or
    model), histograms by route, provider and outcome only, the GenAI client metrics (provider
    routes only) under both name sets, the application's tool calls of both validities and
    server-run ones without validity, refusals (pre-created at 0), every instrumentation stage at
    0, and the scope labels that queries must aggregate away."""
    target = {"job": "otelsse-demo", "instance": "127.0.0.1:9464", "otel_scope_name": "otelsse"}
    routes = [
        {
            "otelsse_route": "openai.chat_completions",
            "server_address": "api.openai.test",
            "gen_ai_provider_name": "openai",
            "gen_ai_request_model": "gpt-test",
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
    histograms = [
        name
        for spec in semconv.METRICS
        for name in _promql.prometheus_series(spec)
        if name.endswith("_bucket")
    ]
    for route in routes:
        key = target | route
        series += [
            _series("otelsse_streams_total", key | {"otelsse_outcome": outcome.value}, "0x20")
            for outcome in Outcome
        ]
        ended = [
            ({"otelsse_outcome": "complete", "otelsse_stop_reason": "stop", STATUS: "200"}, 5),
            ({"otelsse_outcome": "truncated", STATUS: "200"}, 1),
            ({"otelsse_outcome": "rate_limited", STATUS: "429"}, 1),
            ({"otelsse_outcome": "http_error", STATUS: "503"}, 1),
            ({"otelsse_outcome": "http_error", STATUS: "401"}, 1),
        ]
        series += [
            _series("otelsse_streams_total", key | labels, f"0+{rate}x20") for labels, rate in ended
        ]
        histogram_key = {k: v for k, v in key.items() if k in EXPORTED[histograms[0]]} | {
            "otelsse_outcome": "complete"
        }
        series += [
            _series(bucket, histogram_key | {"le": le}, "0+5x20")
            for bucket in histograms
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
    series += _genai_series(target | {k: v for k, v in routes[0].items() if k != "otelsse_route"})
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


def _genai_series(key: dict[str, str]) -> list[dict[str, str]]:
    """Both GenAI name sets for one call key: histograms by bucket and sum, the latest set's
    token counters, the legacy usage histogram by token type."""
    key = key | {"gen_ai_operation_name": "chat"}
    series = []
    for spec in semconv.GENAI_METRICS:
        types = ("input", "output") if "gen_ai.token.type" in spec.attributes else (None,)
        for token_type in types:
            labels = key | ({"gen_ai_token_type": token_type} if token_type else {})
            for name in _promql.prometheus_series(spec):
                if name.endswith("_bucket"):
                    series += [_series(name, labels | {"le": le}, "0+2x20") for le in ("1", "+Inf")]
                else:
                    series.append(_series(name, labels, "0+40x20"))
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
    assert GENERATOR.OUTPUT.read_text(encoding="utf-8") == GENERATOR.render(), (
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
    assert (by_uid["jaeger"]["type"], by_uid["jaeger"]["url"]) == (
        TRACES_TYPE,
        "http://jaeger:16686",
    )
    # Mounted into an existing Grafana, they must not take its default data source over.
    assert not [d["uid"] for d in config["datasources"] if "isDefault" in d]
    # Exemplars' trace ids (the OTLP exporters' label) open the trace in the traces source.
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": "trace_id", "datasourceUid": "jaeger"}]
    # The dashboards' data source variables list data sources of these types.
    for path in DASHBOARD_FILES:
        variables = _variables(_load(path))
        assert variables["datasource"]["query"] == by_uid["prometheus"]["type"]
        assert variables["traces"]["query"] == by_uid["jaeger"]["type"]


# -- exemplars and links ---------------------------------------------------------------------------


def test_latency_panels_show_exemplars(dashboard: Json) -> None:
    """Every percentile over time of a seconds histogram asks for its buckets' trace_id
    exemplars; instant queries (stats, tables) have none to show and do not ask."""
    latency = 0
    for panel in _query_panels(dashboard):
        for t in panel["targets"]:
            seconds = re.search(r"histogram_quantile\(.*_seconds_bucket", t["expr"])
            if panel["type"] == "timeseries" and seconds:
                latency += 1
                assert t.get("exemplar") is True, (panel["title"], t["refId"])
            elif t.get("exemplar"):
                assert panel["type"] == "timeseries", panel["title"]
                assert "histogram_quantile" in t["expr"], panel["title"]
    assert latency >= 5


def test_the_runbook_base_url_is_one_setting(tmp_path: Path, dashboard: Json) -> None:
    """``--runbook-url`` makes the box a hidden constant holding the URL, and changes nothing
    else; ``--output`` writes elsewhere than the committed file."""
    base = "https://wiki.example.internal/sre/otelsse-runbooks"
    output = tmp_path / "grafana" / "otelsse-overview.json"
    assert GENERATOR.main(["--runbook-url", base, "--output", str(output)]) == 0
    given = json.loads(output.read_text(encoding="utf-8"))
    [constant] = [v for v in given["templating"]["list"] if v["name"] == "runbook_url"]
    assert (constant["type"], constant["query"], constant["hide"]) == ("constant", base, 2)
    for document in (given, dashboard):
        document["templating"]["list"] = [
            v for v in document["templating"]["list"] if v["name"] != "runbook_url"
        ]
    assert given == dashboard


def test_runbook_links_point_at_runbook_sections_for_every_alert(dashboard: Json) -> None:
    anchors = set()
    for panel in _query_panels(dashboard):
        for link in panel.get("links", []):
            base, anchor = link["url"].split("#")
            assert base == "${runbook_url}", link
            assert link["title"].startswith("Runbook: "), link
            assert link["title"].removeprefix("Runbook: ").lower() == anchor
            anchors.add(anchor)
    runbooks = (ROOT / "docs" / "operators" / "runbooks.md").read_text(encoding="utf-8")
    headings = {
        line.lstrip("#").strip().lower() for line in runbooks.splitlines() if line.startswith("## ")
    }
    assert anchors <= headings
    alerts = {
        rule["alert"].lower()
        for path in (ROOT / "dashboards" / "prometheus").glob("*.rules.yaml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert anchors == alerts, "an alert no panel links to, or a link to no alert"


def test_failing_streams_link_to_their_spans_by_outcome(dashboard: Json) -> None:
    """The per-outcome drill-down: each row of the failing-streams table opens Explore on the
    traces data source, searching the otelsse.stream spans of that job, route and outcome."""
    [panel] = [p for p in _query_panels(dashboard) if p["title"].startswith("Failing streams")]
    [t] = panel["targets"]
    assert (t["format"], t["instant"]) == ("table", True)
    assert _groups(t["expr"]) == {"job", "otelsse_route", "otelsse_outcome"}
    [link] = panel["fieldConfig"]["defaults"]["links"]
    path, query = link["url"].split("?", 1)
    assert path == "/explore"
    params = dict(part.split("=", 1) for part in query.split("&"))
    [pane] = json.loads(params["panes"]).values()
    assert pane["datasource"] == "${traces}"
    assert pane["range"] == {"from": "${__from}", "to": "${__to}"}
    [search] = pane["queries"]
    assert search["datasource"] == {"type": TRACES_TYPE, "uid": "${traces}"}
    assert (search["queryType"], search["operation"]) == ("search", semconv.SPAN_NAME)
    assert search["service"] == "${__data.fields.job}"
    tags = dict(tag.split("=", 1) for tag in search["tags"].split())
    assert tags == {
        semconv.OUTCOME: "${__data.fields.otelsse_outcome}",
        semconv.ROUTE: "${__data.fields.otelsse_route}",
    }


#: Grafana's named reds: the colour of failures on the stacked outcome chart.
_REDS = {"red", "dark-red", "semi-dark-red", "light-red", "super-light-red"}


def test_every_outcome_that_is_not_a_failure_has_a_colour_of_its_own(dashboard: Json) -> None:
    """On the stacked "Stream rate by outcome" chart each outcome that is not an error (a new
    one included) has a fixed colour, none of them a failure's red, and no two outcomes share
    one: a whole answer without its end marker must not look like a truncation or a success."""
    [panel] = [p for p in _query_panels(dashboard) if p["title"] == "Stream rate by outcome"]
    colours = {
        override["matcher"]["options"]: prop["value"]["fixedColor"]
        for override in panel["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "color"
    }
    assert set(colours) <= {outcome.value for outcome in Outcome}
    not_failures = {outcome.value for outcome in Outcome} - semconv.ERROR_OUTCOMES
    assert not_failures <= set(colours), not_failures - set(colours)
    assert all(colours[outcome] not in _REDS for outcome in not_failures), colours
    assert colours["truncated"] in _REDS
    assert len(set(colours.values())) == len(colours), colours


def test_terminal_missing_has_its_panel_beside_truncation_apart_from_the_failures(
    dashboard: Json,
) -> None:
    """Its share per route and server, next to the truncation panel and linked to its own
    alert's runbook; no failure or SLO selector names it (the regex checks above)."""
    panels = _query_panels(dashboard)
    titles = [p["title"] for p in panels]
    missing = 'otelsse_outcome="terminal_missing"'
    [panel] = [p for p in panels if any(missing in t["expr"] for t in p["targets"])]
    assert titles.index(panel["title"]) == titles.index("Truncation rate by route and server") + 1
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    [t] = panel["targets"]
    assert _groups(t["expr"]) == {"otelsse_route", "server_address"}
    assert [link["title"] for link in panel["links"]] == ["Runbook: OtelsseStreamTerminalMissing"]


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
