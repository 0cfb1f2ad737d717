"""otelsse's Prometheus rules (dashboards/prometheus/*.rules.yaml) are valid, tested, generated,
documented, cheap at scale, and query only what otelsse exports.

How: Debian's real ``promtool`` checks every rule file (and the rule count it reports must equal
the rules in the YAML) and runs every unit-test file in dashboards/prometheus/tests/, which fire
and silence each alert on synthetic series and pin the recorded values, the SLO's long windows
over three days included. The rest is read from the YAML: the files equal what
generate_rules.py renders, under whatever runbook base URL it is given; every alert (each SLO
window pair on its own) has a firing and a silent promtool case, a severity, a summary, a
description and a runbook_url whose anchor is a heading of docs/operators/runbooks.md, whose
section says what it means, what to check (with PromQL) and what to do; every alert threshold is
one literal number after its comparison (the end-to-end test rewrites ``<op> <number>`` to
``>= -Inf``, and promtool must still accept the result); every series an expression selects is
exported (tests/sre/_promql.EXPORTED, and the tool gate's
``tests/sre/test_gate_metrics.GATE_EXPORTED``) or recorded here, with only labels that series
carries, and every value it selects on the gate's state and error type is one the gate has; so
does every PromQL line of the runbooks, which promtool parses. The SLO counts exactly
``semconv.SLO_BAD_OUTCOMES`` with the 4xx exclusion in one selector, and only 5-minute rules read
exported series: every longer window sums recorded ones. The gate's alerts are held to what they
promise: quarantines against all gate calls under a traffic guard, denial spikes against the day's
share under the same guard, and any new call needing reconciliation pages, a series born with its
first call included. Without promtool the tests fail: they never skip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsse import semconv
from otelsse._monitor import Outcome
from otelsse.gate import ToolCallState

from . import _promql
from ._promql import label_names, metric_names
from ._tools import load_script, promtool
from .test_gate_metrics import GATE_EXPORTED, GEN

pytestmark = pytest.mark.e2e  # promtool on the rule files

#: Every series otelsse exports: the streams', the GenAI client metrics and the tool gate's.
EXPORTED: dict[str, frozenset[str]] = {
    **_promql.EXPORTED, **_promql.GENAI_EXPORTED, **GATE_EXPORTED,
}  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "dashboards" / "prometheus"
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yaml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.test.yaml"))
RUNBOOKS = ROOT / "docs" / "operators" / "runbooks.md"
GENERATOR = load_script(RULES_DIR / "generate_rules.py")

# The SLO and its windows as the Google SRE workbook ("Alerting on SLOs", table 5-8) sets them:
# (long, short) -> (budget burn factor, severity).
SLO_TARGET = 0.99
BURN_RATES = {
    ("1h", "5m"): (14.4, "critical"),
    ("6h", "30m"): (6, "critical"),
    ("1d", "2h"): (3, "warning"),
    ("3d", "6h"): (1, "warning"),
}
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

_OP = r"(?:==|!=|>=|<=|>|<)"
_NUMBER = r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
# A comparison whose right operand is one plain number, ending the operand.
_LITERAL_COMPARISON = re.compile(
    rf"{_OP}\s*{_NUMBER}(?=\s*(?:$|\)|\band\b|\bor\b|\bunless\b))", re.MULTILINE
)
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_BY = re.compile(r"\bby\s*\(([^)]*)\)")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _rules() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(file name, group name, rule) for every rule, in file and group order."""
    for path in RULE_FILES:
        for group in _load(path)["groups"]:
            for rule in group["rules"]:
                yield path.name, group["name"], rule


RULES = list(_rules())
ALERTS = [rule for _, _, rule in RULES if "alert" in rule]
RECORDS = [rule for _, _, rule in RULES if "record" in rule]


def _rule_id(rule: dict[str, Any]) -> str:
    name = rule.get("alert") or rule["record"]
    labels = rule.get("labels", {})
    return "/".join([name, *(labels[k] for k in ("long", "short") if k in labels)])


def _recorded_labels() -> dict[str, frozenset[str]]:
    """The labels each recording rule's series carry: its ``by`` clauses plus what the recorded
    series it reads carry, less ``le`` under ``histogram_quantile``. (Every rule here is a
    ``sum by`` or a function of recorded series; the promtool cases check the real label sets.)"""
    recorded: dict[str, frozenset[str]] = {}
    for rule in RECORDS:
        expr = rule["expr"]
        labels: set[str] = set()
        for group in _BY.findall(expr):
            labels |= {name.strip() for name in group.split(",") if name.strip()}
        for name in metric_names(expr):
            labels |= recorded.get(name, frozenset())
        if expr.lstrip().startswith("histogram_quantile"):
            labels.discard("le")
        recorded[rule["record"]] = frozenset(labels)
    return recorded


RECORDED = _recorded_labels()
_RECORD_EXPRS = {rule["record"]: rule["expr"] for rule in RECORDS}


def _reads(expr: str) -> set[str]:
    """The exported series an expression reads, through the recording rules it reads."""
    names = set()
    for name in metric_names(expr):
        names |= _reads(_RECORD_EXPRS[name]) if name in _RECORD_EXPRS else {name}
    return names


def _allowed_labels(name: str) -> frozenset[str]:
    return EXPORTED.get(name) or RECORDED[name]


def _github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _runbook_headings() -> list[str]:
    headings, fenced = [], False
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            headings.append(line.lstrip("#").strip())
    return headings


def _alert_cases() -> list[dict[str, Any]]:
    return [
        case
        for path in TEST_FILES
        for test in _load(path)["tests"]
        for case in test.get("alert_rule_test", [])
    ]


# -- the files ---------------------------------------------------------------------------------


def test_rule_files_are_what_the_generator_renders() -> None:
    rendered: dict[str, str] = GENERATOR.render()
    assert sorted(rendered) == [path.name for path in RULE_FILES]
    for path in RULE_FILES:
        assert path.read_text(encoding="utf-8") == rendered[path.name], (
            f"{path.name} differs from generate_rules.py's output: "
            "run python dashboards/prometheus/generate_rules.py"
        )


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda path: path.name)
def test_promtool_check_rules(path: Path) -> None:
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"SUCCESS: (\d+) rules found", result.stdout)
    assert found is not None, result.stdout
    assert int(found.group(1)) == sum(len(g["rules"]) for g in _load(path)["groups"])


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: path.name)
def test_promtool_unit_tests(path: Path) -> None:
    assert {(path.parent / name).resolve() for name in _load(path)["rule_files"]} <= {
        rule_file.resolve() for rule_file in RULE_FILES
    }
    result = promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_there_are_rules_and_unit_tests() -> None:
    assert ALERTS
    assert RECORDS
    assert TEST_FILES


# -- alerts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ALERTS, ids=_rule_id)
def test_every_alert_has_a_firing_and_a_silent_promtool_case(rule: dict[str, Any]) -> None:
    cases = [case for case in _alert_cases() if case["alertname"] == rule["alert"]]
    # A firing case must expect this very rule: for the SLO, this window pair's labels.
    assert any(
        rule["labels"].items() <= expected["exp_labels"].items()
        for case in cases
        for expected in case.get("exp_alerts") or []
    ), f"no promtool case expects {_rule_id(rule)} to fire"
    assert any(not case.get("exp_alerts") for case in cases), (
        f"no promtool case expects {rule['alert']} to stay silent"
    )


@pytest.mark.parametrize("rule", ALERTS, ids=_rule_id)
def test_every_alert_is_documented(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert re.fullmatch(r"[0-9]+[smhd]", rule["for"])
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    anchor = rule["alert"].lower()
    # No published home to invent: the section is named in the source tree (see the next test).
    assert "runbook_url" not in annotations
    assert annotations["runbook"] == f"docs/operators/runbooks.md#{anchor}"
    assert (ROOT / GENERATOR.RUNBOOKS_PATH).is_file()
    assert anchor in {_github_anchor(heading) for heading in _runbook_headings()}


def test_the_runbook_base_url_is_one_setting(tmp_path: Path) -> None:
    """``--runbook-url`` moves every alert's link and nothing else; ``--output`` makes the
    directory it names."""
    base = "https://wiki.example.internal/sre/otelsse-runbooks"
    output = tmp_path / "etc" / "prometheus" / "rules"
    assert GENERATOR.main(["--runbook-url", base, "--output", str(output)]) == 0
    linked = 0
    for path in RULE_FILES:
        moved = _load(output / path.name)
        committed = _load(path)
        for moved_group, group in zip(moved["groups"], committed["groups"], strict=True):
            for moved_rule, rule in zip(moved_group["rules"], group["rules"], strict=True):
                if "alert" in rule:
                    section = (
                        rule["annotations"].pop("runbook").removeprefix(GENERATOR.RUNBOOKS_PATH)
                    )
                    assert moved_rule["annotations"].pop("runbook_url") == base + section
                    assert section == f"#{rule['alert'].lower()}"
                    linked += 1
                assert moved_rule == rule
    assert linked == len(ALERTS)


def _sections() -> dict[str, str]:
    """Runbook heading -> its text, up to the next heading of any level."""
    sections: dict[str, str] = {}
    heading, fenced = "", False
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,6} ", line):
            heading = line.lstrip("#").strip()
            sections[heading] = ""
        elif heading:
            sections[heading] += line + "\n"
    return sections


@pytest.mark.parametrize("name", sorted({rule["alert"] for rule in ALERTS}))
def test_every_runbook_says_what_it_means_what_to_check_and_what_to_do(name: str) -> None:
    text = _sections()[name]
    for part in ("**Means.**", "**Likely causes", "**Confirm.**", "**Act.**"):
        assert part in text, f"{name}: no {part}"
    confirm = text.split("**Confirm.**", 1)[1].split("**Act.**", 1)[0]
    assert "```promql\n" in confirm, f"{name}: no PromQL to drill down with"


def test_runbooks_have_one_section_per_alert() -> None:
    headings = _runbook_headings()
    assert len({_github_anchor(h) for h in headings}) == len(headings), "duplicate anchors"
    alert_sections = {h for h in headings if re.fullmatch(r"Otelsse[A-Za-z]+", h)}
    assert alert_sections == {rule["alert"] for rule in ALERTS}
    links = re.findall(r"\]\(#([^)]+)\)", RUNBOOKS.read_text(encoding="utf-8"))
    assert set(links) <= {_github_anchor(h) for h in headings}, "a link to no heading"


def test_runbooks_cite_panels_the_dashboard_has() -> None:
    text = " ".join(RUNBOOKS.read_text(encoding="utf-8").split())  # panel names wrap lines
    cited = set(re.findall(r"\*\*([^*]+)\*\* (?:panels?|table)", text))
    cited |= {
        name for pair in re.findall(r"\*\*([^*]+)\*\* and \*\*([^*]+)\*\*", text) for name in pair
    }
    titles = set()
    for path in (ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json"):
        titles |= {panel["title"] for panel in json.loads(path.read_text())["panels"]}
    assert len(cited) >= 5, cited
    assert cited <= titles, cited - titles


def _comparisons(expr: str) -> list[str]:
    """Each comparison with its right operand; matchers (which hold != and strings) removed."""
    return re.findall(rf"{_OP}\s*\S+", _SELECTOR.sub(r"\1", expr))


@pytest.mark.parametrize("rule", ALERTS, ids=_rule_id)
def test_alert_thresholds_are_single_literal_numbers(rule: dict[str, Any]) -> None:
    expr = rule["expr"]
    assert _comparisons(expr), "an alert without a threshold"
    assert len(_LITERAL_COMPARISON.findall(expr)) == len(_comparisons(expr)), expr
    assert "bool" not in expr.split(), "a bool comparison returns every series, as 0 or 1"


def test_alerts_with_relaxed_thresholds_are_still_valid(tmp_path: Path) -> None:
    """The end-to-end test rewrites every threshold to ``>= -Inf``: nothing else may remain,
    and promtool must accept the result."""
    relaxed = [
        {"alert": rule["alert"], "expr": _LITERAL_COMPARISON.sub(">= -Inf", rule["expr"])}
        for rule in ALERTS
    ]
    for rule in relaxed:
        assert set(_comparisons(rule["expr"])) == {">= -Inf"}, rule["expr"]
    path = tmp_path / "relaxed.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "relaxed", "rules": relaxed}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rule", ALERTS, ids=_rule_id)
def test_alert_annotations_use_labels_the_alert_has(rule: dict[str, Any]) -> None:
    available = {"severity", *rule["labels"]}
    for name in metric_names(rule["expr"]):
        available |= _allowed_labels(name)
    for text in rule["annotations"].values():
        assert set(_TEMPLATE_LABEL.findall(text)) <= available, text


# -- the stream-success SLO ----------------------------------------------------------------------


def test_slo_alerts_cover_the_workbook_window_pairs() -> None:
    pairs = {
        (rule["labels"]["long"], rule["labels"]["short"]): rule
        for rule in ALERTS
        if rule["alert"] == "OtelsseStreamErrorBudgetBurn"
    }
    assert pairs.keys() == BURN_RATES.keys()
    for (long, short), (factor, severity) in BURN_RATES.items():
        rule = pairs[(long, short)]
        assert rule["labels"]["severity"] == severity
        # Both windows must burn faster than factor x the budget; the literal is that product.
        ratios = re.findall(rf"otelsse:stream_error:ratio_rate(\w+) > ({_NUMBER})", rule["expr"])
        assert [window for window, _ in ratios] == [long, short]
        for _, threshold in ratios:
            assert float(threshold) == pytest.approx(factor * (1 - SLO_TARGET))
        assert re.search(rf"\band on \(.+\)\s+otelsse:streams:increase{long} >= ", rule["expr"])


def test_slo_error_ratio_counts_exactly_the_provider_side_failures() -> None:
    """One selector: ``semconv.SLO_BAD_OUTCOMES``, an http_error only when not a 4xx. Rate
    limits, 4xx answers and the client's own timeouts never burn the budget."""
    bad = _RECORD_EXPRS["otelsse:stream_error:increase5m"]
    [(metric, matchers)] = _SELECTOR.findall(bad)
    assert metric == "otelsse_streams_total"
    found = {(label, op): value for label, op, value in _MATCHER.findall(matchers)}
    assert found.keys() == {("otelsse_outcome", "=~"), ("http_response_status_code", "!~")}
    assert set(found["otelsse_outcome", "=~"].split("|")) == semconv.SLO_BAD_OUTCOMES
    assert found["http_response_status_code", "!~"] == semconv.SLO_EXCLUDED_STATUS
    assert not {"rate_limited", "timeout", "cancelled"} & semconv.SLO_BAD_OUTCOMES
    # Every stream counts in the denominator: the 5m counts summed over every outcome.
    assert _reads(_RECORD_EXPRS["otelsse:streams:increase5m"]) == {"otelsse_streams_total"}
    assert "{" not in _RECORD_EXPRS["otelsse:streams:increase5m"]
    assert "{" not in _RECORD_EXPRS["otelsse:streams:rate5m"]


@pytest.mark.parametrize("window", SLO_WINDOWS)
def test_slo_windows_add_up_the_recorded_5m_counts(window: str) -> None:
    expr = _RECORD_EXPRS[f"otelsse:stream_error:ratio_rate{window}"]
    numerator, denominator = (part.strip() for part in expr.split("\n/\n"))
    if window == "5m":
        assert (numerator, denominator) == (
            "otelsse:stream_error:increase5m",
            "otelsse:streams:increase5m",
        )
    else:
        assert numerator == f"sum_over_time(otelsse:stream_error:increase5m[{window}])"
        assert denominator == f"sum_over_time(otelsse:streams:increase5m[{window}])"


@pytest.mark.parametrize("long", [long for long, _ in BURN_RATES])
def test_slo_traffic_guards_count_the_streams_of_the_window(long: str) -> None:
    # The 5m count taken every minute holds each stream five times; never less than the last
    # 5m's count (a series younger than a minute has no sample on a minute yet).
    expr = _RECORD_EXPRS[f"otelsse:streams:increase{long}"]
    assert expr == (
        f"sum_over_time(otelsse:streams:increase5m[{long}:1m]) / 5 > otelsse:streams:increase5m"
        "\nor\notelsse:streams:increase5m\n"
    )


_RANGE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^}]*\})?\s*\[(\w+)(?::\w+)?\]")
_SECONDS = {"m": 60, "h": 3600, "d": 86400}


def _seconds(duration: str) -> int:
    return int(duration[:-1]) * _SECONDS[duration[-1]]


@pytest.mark.parametrize("rule", [rule for _, _, rule in RULES], ids=_rule_id)
def test_only_short_windows_read_exported_series(rule: dict[str, Any]) -> None:
    """A long window over the exported series costs one sample per series and scrape: with many
    models and hosts, the 3d SLO window alone would read millions. Over 15 minutes (the
    reconciliation's own window), a rule reads series recorded here, already summed."""
    for name, window in _RANGE.findall(rule["expr"]):
        seconds = _seconds(window)
        if name in EXPORTED:
            assert seconds <= 15 * 60, f"{name}[{window}]"
        else:
            assert name in RECORDED, name


# -- the stream alerts ---------------------------------------------------------------------------


def _alert(name: str) -> dict[str, Any]:
    [rule] = [rule for rule in ALERTS if rule["alert"] == name]
    return rule


def test_every_failure_outcome_that_is_not_counted_once_has_an_alert() -> None:
    """Each error outcome is watched: by a share (a few are normal), by any one stream (none
    is), or, for http_error, by its status class; the SLO burn comes on top."""
    share = {outcome for _, outcome, _, _ in GENERATOR.RATIO_ALERTS}
    single = {outcome for _, outcome, _ in GENERATOR.ANY_ALERTS}
    assert not share & single
    assert share | single | {"http_error"} == semconv.ERROR_OUTCOMES
    assert {"rate_limited", "timeout"} <= share


#: Outcomes no alert of its own watches, each for a reason: a proper end (``complete``,
#: ``incomplete``: its stop reason is on the dashboard), the application's own doing
#: (``cancelled``), a route with no terminal rule to check (``eof_unverified``), and otelsse's own
#: failure (``internal_error``: watched through ``otelsse_instrumentation_errors_total``).
UNALERTED_OUTCOMES = frozenset(
    {"complete", "incomplete", "cancelled", "eof_unverified", "internal_error"}
)


def _outcomes_selected(expr: str) -> set[str]:
    """The outcomes an expression selects by name, through the recording rules it reads."""
    selected = set()
    for label, op, value in _MATCHER.findall(expr):
        if label == "otelsse_outcome" and op in {"=", "=~"}:
            selected |= set(value.split("|"))
    for name in metric_names(expr) & _RECORD_EXPRS.keys():
        selected |= _outcomes_selected(_RECORD_EXPRS[name])
    return selected


def test_every_outcome_has_an_alert_of_its_own_or_a_reason_for_none() -> None:
    """An outcome added to ``Outcome`` fails here until an alert watches it or a reason says why
    none does; the SLO burn, which watches the provider's failures together, is not counted."""
    watched: dict[str, set[str]] = {}
    for rule in ALERTS:
        if rule["alert"] != "OtelsseStreamErrorBudgetBurn":
            for outcome in _outcomes_selected(rule["expr"]):
                watched.setdefault(outcome, set()).add(rule["alert"])
    assert watched.keys() | UNALERTED_OUTCOMES == {outcome.value for outcome in Outcome}
    assert not watched.keys() & UNALERTED_OUTCOMES


def test_terminal_missing_is_a_ticket_of_its_own_apart_from_truncation_and_the_slo() -> None:
    """A whole answer whose end marker never came is neither a failure nor the SLO's: its own
    share alert, a ticket held long enough that a few cuts before the marker never open one, and
    no other alert (the truncation alert, the SLO burn) selects it."""
    missing = Outcome.TERMINAL_MISSING.value
    rule = _alert("OtelsseStreamTerminalMissing")
    assert rule["labels"]["severity"] == "warning"
    assert _outcomes_selected(rule["expr"]) == {missing}
    share = f'otelsse:stream_outcome:ratio_rate5m{{otelsse_outcome="{missing}"}}'
    assert f"{share} > {GENERATOR.TERMINAL_MISSING_RATIO}" in rule["expr"]
    assert f"otelsse:streams:increase5m >= {GENERATOR.MIN_STREAMS}" in rule["expr"]
    assert rule["for"] == GENERATOR.TERMINAL_MISSING_FOR
    assert _seconds(rule["for"]) > _seconds(GENERATOR.RATIO_FOR)  # held longer than a failure
    assert missing not in semconv.ERROR_OUTCOMES | semconv.SLO_BAD_OUTCOMES
    for other in ALERTS:
        if other is not rule:
            assert missing not in _outcomes_selected(other["expr"]), _rule_id(other)


def test_http_alerts_split_http_errors_by_the_slos_status_rule() -> None:
    server = _alert("OtelsseHTTPServerErrorRateHigh")["expr"]
    client = _alert("OtelsseHTTPClientErrorRateHigh")["expr"]
    excluded = semconv.SLO_EXCLUDED_STATUS
    assert f'otelsse:stream_http_errors:rate5m{{http_response_status_code!~"{excluded}"}}' in server
    assert f'otelsse:stream_http_errors:rate5m{{http_response_status_code=~"{excluded}"}}' in client
    recorded = _RECORD_EXPRS["otelsse:stream_http_errors:rate5m"]
    assert 'otelsse_outcome="http_error"' in recorded  # a 429 is rate_limited, not in here
    assert "http_response_status_code" in _BY.findall(recorded)[0]
    for expr in (server, client):
        assert "/\nsum by (job, otelsse_route, server_address) (otelsse:streams:rate5m)" in expr
        assert f"otelsse:streams:increase5m >= {GENERATOR.MIN_STREAMS}" in expr
    assert _alert("OtelsseHTTPClientErrorRateHigh")["labels"]["severity"] == "warning"


def test_time_to_first_output_alert_reads_that_histogram_per_route() -> None:
    rule = _alert("OtelsseTimeToFirstOutputSlow")
    assert _reads(rule["expr"]) == {
        "otelsse_stream_time_to_first_output_seconds_bucket",
        "otelsse_stream_time_to_first_output_seconds_count",
    }
    # The histograms have no server: the alert is per job and route.
    assert "and on (job, otelsse_route)\n" in rule["expr"]
    assert "server_address" not in json.dumps(rule)


def test_invalid_tool_call_alert_counts_only_the_calls_the_application_runs() -> None:
    rule = _alert("OtelsseInvalidToolCallRateHigh")
    assert _reads(rule["expr"]) == {"otelsse_tool_calls_total"}
    ratio = _RECORD_EXPRS["otelsse:tool_call_invalid:ratio_rate5m"]
    numerator, denominator = ratio.split("\n/\n")
    client = f'otelsse_tool_call_kind="{semconv.TOOL_CALL_CLIENT}"'
    assert client in numerator
    assert 'otelsse_tool_call_valid="false"' in numerator
    assert client in denominator
    assert "otelsse_tool_call_valid" not in denominator
    assert client in _RECORD_EXPRS["otelsse:client_tool_calls:increase5m"]


def test_instrumentation_errors_ticket_on_any_and_page_at_scale() -> None:
    ticket = _alert("OtelsseInstrumentationErrors")
    page = _alert("OtelsseInstrumentationErrorRateHigh")
    assert (ticket["labels"]["severity"], page["labels"]["severity"]) == ("warning", "critical")
    assert set(_comparisons(ticket["expr"])) == {"> 0"}
    # The page is a share of the job's streams, guarded by the errors themselves, and still
    # fires when no stream at all was counted (the stage that failed came first).
    assert f">= {GENERATOR.MIN_STREAMS}\nand on (job)\n" in page["expr"]
    assert f"> {GENERATOR.INSTRUMENTATION_ERROR_RATIO}" in page["expr"]
    assert (
        " or sum by (job) (increase(otelsse_instrumentation_errors_total[5m])) * 0)"
        in (page["expr"])
    )


def test_the_instrumentation_runbook_explains_every_stage() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", _sections()["OtelsseInstrumentationErrors"], re.MULTILINE)
    assert rows == list(semconv.INSTRUMENTATION_STAGES)


# -- the runbooks' PromQL -----------------------------------------------------------------------

#: Placeholders the runbooks' queries use for the alert's labels.
_PLACEHOLDERS = {"JOB": "app", "ROUTE": "openai.chat_completions", "SERVER": "api.openai.com"}


def _runbook_queries() -> list[str]:
    text = RUNBOOKS.read_text(encoding="utf-8")
    blocks = re.findall(r"```promql\n(.*?)```", text, flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_runbook_queries_parse_and_read_only_what_otelsse_exports(tmp_path: Path) -> None:
    queries = _runbook_queries()
    assert len(queries) >= len({rule["alert"] for rule in ALERTS})
    problems = []
    for query in queries:
        names = metric_names(query)
        unknown = names - EXPORTED.keys() - RECORDED.keys()
        if not names or unknown:
            problems.append(f"{query}: {sorted(unknown)}")
            continue
        allowed = frozenset().union(*(_allowed_labels(name) for name in names))
        if not label_names(query) <= allowed:
            problems.append(f"{query}: labels {sorted(label_names(query) - allowed)}")
    assert not problems, "\n".join(problems)
    rules = [
        {"record": f"runbook:query_{index}", "expr": query} for index, query in enumerate(queries)
    ]
    for rule in rules:
        for placeholder, value in _PLACEHOLDERS.items():
            rule["expr"] = rule["expr"].replace(f'"{placeholder}"', f'"{value}"')
    path = tmp_path / "runbook-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbook", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# -- names and labels ----------------------------------------------------------------------------


def test_recording_rule_names_are_unique_and_conventional() -> None:
    names = [rule["record"] for rule in RECORDS]
    assert len(set(names)) == len(names)
    for name in names:  # level:metric:operations, with otelsse's level
        assert re.fullmatch(r"otelsse:[a-z0-9_]+:[a-z0-9_]+", name), name


@pytest.mark.parametrize("rule", [rule for _, _, rule in RULES], ids=_rule_id)
def test_rules_query_only_exported_or_recorded_series_and_labels(rule: dict[str, Any]) -> None:
    expr = rule["expr"]
    names = metric_names(expr)
    assert names, expr
    unknown = {name for name in names if name not in EXPORTED and name not in RECORDED}
    assert not unknown, f"neither exported nor recorded here: {sorted(unknown)}"
    for name, matchers in _SELECTOR.findall(expr):
        if name in names:
            assert set(_MATCHER_LABEL.findall(matchers)) <= _allowed_labels(name), name
    allowed = frozenset().union(*(_allowed_labels(name) for name in names))
    assert label_names(expr) <= allowed, sorted(label_names(expr) - allowed)


def test_recorded_series_are_recorded_before_their_own_group_reads_them() -> None:
    """A group runs its rules in order at each evaluation; other groups may read any of them."""
    home = {rule["record"]: (file, group) for file, group, rule in RULES if "record" in rule}
    seen: set[str] = set()
    for file, group, rule in RULES:
        for name in metric_names(rule["expr"]) & home.keys():
            assert home[name] != (file, group) or name in seen, f"{_rule_id(rule)} reads {name}"
        seen.add(rule.get("record", ""))


# -- the tool gate -------------------------------------------------------------------------------

GATE_CALLS = "otelsse_gate_calls_total"
GATE_ALERT_NAMES = {
    "OtelsseToolCallsQuarantined",
    "OtelsseToolCallDenialSpike",
    "OtelsseToolCallNeedsReconciliation",
}
_STATE_MATCHER = re.compile(r'otelsse_tool_call_state\s*(=~|!~|!=|=)\s*"([^"]*)"')
_ERROR_MATCHER = re.compile(r'error_type\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _constants() -> Any:
    return load_script(RULES_DIR / "generate_rules.py")


def test_gate_alerts_are_the_ones_reading_the_gate() -> None:
    assert GATE_CALLS in GATE_EXPORTED
    reading = {rule["alert"] for rule in ALERTS if GATE_CALLS in _reads(rule["expr"])}
    assert reading == GATE_ALERT_NAMES
    # And none of them reads the streams: the gate's counter has no route or server.
    for rule in ALERTS:
        if rule["alert"] in GATE_ALERT_NAMES:
            assert _reads(rule["expr"]) == {GATE_CALLS}, rule["alert"]


@pytest.mark.parametrize("rule", [rule for _, _, rule in RULES], ids=_rule_id)
def test_gate_values_selected_are_real_states_and_error_types(rule: dict[str, Any]) -> None:
    states = {state.value for state in ToolCallState}
    errors = set(GEN["gate_error_types"]())
    for matchers, known in ((_STATE_MATCHER, states), (_ERROR_MATCHER, errors)):
        for op, value in matchers.findall(rule["expr"]):
            assert op in {"=", "!="} or set(value.split("|")) <= known, value
            if op in {"=", "!="}:
                assert value in known, value


def test_quarantine_alert_is_a_share_of_all_gate_calls_under_a_traffic_guard() -> None:
    constants = _constants()
    rule = next(rule for rule in ALERTS if rule["alert"] == "OtelsseToolCallsQuarantined")
    share = 'otelsse:gate_call_state:ratio_rate5m{otelsse_tool_call_state="quarantined"}'
    assert f"{share} > {constants.QUARANTINE_RATIO}" in rule["expr"]
    assert f"otelsse:gate_calls:increase5m >= {constants.MIN_GATE_CALLS}" in rule["expr"]
    # The share's denominator is every call the gate decided, whatever its state.
    rate = _RECORD_EXPRS["otelsse:gate_calls:rate5m"]
    assert "{" not in rate
    assert "otelsse_tool_call_state" in rate.split("(")[1]  # kept by the sum, per state
    ratio = _RECORD_EXPRS["otelsse:gate_call_state:ratio_rate5m"]
    numerator, denominator = ratio.split("/ ignoring (otelsse_tool_call_state) group_left ()")
    assert numerator.strip() == "otelsse:gate_calls:rate5m"
    assert denominator.strip() == "sum by (job) (otelsse:gate_calls:rate5m)"
    assert "{" not in _RECORD_EXPRS["otelsse:gate_calls:increase5m"]
    assert rule["labels"]["severity"] == "warning"


def test_denial_alert_fires_on_a_spike_over_the_days_share_under_the_guard() -> None:
    constants = _constants()
    rule = next(rule for rule in ALERTS if rule["alert"] == "OtelsseToolCallDenialSpike")
    now = 'otelsse:gate_call_state:ratio_rate5m{otelsse_tool_call_state="policy_denied"}'
    today = 'otelsse:gate_call_state:ratio_rate1d{otelsse_tool_call_state="policy_denied"}'
    assert f"{now} > {constants.DENIAL_RATIO}" in rule["expr"]
    assert f"{now} / {today} > {constants.DENIAL_SPIKE}" in rule["expr"]
    assert f"otelsse:gate_calls:increase5m >= {constants.MIN_GATE_CALLS}" in rule["expr"]
    # The day's share: every state's 5m rates added up over the day.
    day = _RECORD_EXPRS["otelsse:gate_call_state:ratio_rate1d"]
    numerator, denominator = day.split("/ ignoring (otelsse_tool_call_state) group_left ()")
    assert numerator.strip() == "sum_over_time(otelsse:gate_calls:rate5m[1d])"
    assert denominator.strip() == "sum by (job) (sum_over_time(otelsse:gate_calls:rate5m[1d]))"


def test_reconciliation_pages_on_any_new_call_a_new_series_included() -> None:
    constants = _constants()
    rule = next(rule for rule in ALERTS if rule["alert"] == "OtelsseToolCallNeedsReconciliation")
    assert rule["labels"]["severity"] == "critical"
    assert rule["for"] == constants.RECONCILIATION_FOR
    assert set(_comparisons(rule["expr"])) == {"> 0"}
    selector = f'{GATE_CALLS}{{otelsse_tool_call_state="needs_reconciliation"}}'
    window = constants.RECONCILIATION_WINDOW
    assert f"increase({selector}[{window}])" in rule["expr"]
    # A series is born with its first call (nothing pre-creates it): increase() misses that one.
    assert f"{selector} unless {selector} offset {window}" in rule["expr"]
    assert re.search(r"by \(job, instance, gen_ai_tool_name\)", rule["expr"])


def test_the_outcomes_the_rules_select_are_the_ones_created_at_zero() -> None:
    """otelsse creates the ``otelsse_streams_total`` series of ``semconv.ALERTED_OUTCOMES`` at 0
    (``increase()`` cannot see a first sample): exactly the outcomes a rule selects."""
    selected: set[str] = set()
    for path in RULE_FILES:
        text = path.read_text(encoding="utf-8")
        for values in re.findall(r'otelsse_outcome=~?"([^"]+)"', text):
            selected |= set(values.split("|"))
    assert selected == semconv.ALERTED_OUTCOMES
