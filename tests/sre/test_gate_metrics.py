"""What an SRE sees of the tool gate, checked against a real gate.

A real ``ToolGate`` (a real SQLite ledger, JSON Schemas, a policy) reads real HTTP responses
from ``tests/_server.SSEServer`` through httpx, sync and async, with a real OpenTelemetry SDK:
spans in memory, metrics through the OpenTelemetry Prometheus exporter on a registry of its own,
served by prometheus_client on 127.0.0.1 and scraped over HTTP. Its calls end executed,
replayed, quarantined (a cut stream, a duplicate id, an unregistered tool, schema failures,
unusable arguments), denied (by the policy, or by a failing policy), waiting for approval,
approved without an executor, failed, and needing reconciliation after an interrupted attempt.

Checked: the scrape holds exactly the series and labels ``GATE_EXPORTED`` derives from
``semconv`` (what the rule and dashboard tests check queries against), with the counts the
gate's results give; every error type and state pair is one docs/operators/reference.md
documents; every value the rules and the dashboard select on the gate's counter exists in the
scrape; promtool, fed the scraped label sets, fires each gate alert and fills each gate panel; the
spans have the documented names, kind, parents, links, statuses and attributes (on the documented
span, of the documented type, with documented values); and no argument or result text reaches a
span, the scrape, a record or the ledger's file. Per route with tool calls, a complete and a cut
stream give executed and quarantined series and spans. A fresh process checks that the tool-name
cap holds across gates.
"""

from __future__ import annotations

import asyncio
import json
import re
import runpy
import sqlite3
import subprocess
import sys
import textwrap
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

import otelsse
from otelsse import (
    Decision,
    GateResult,
    MemoryLedger,
    SQLiteLedger,
    ToolCallState,
    ToolGate,
    semconv,
)
from otelsse.gate import FINAL_STATES
from otelsse.semconv import prometheus_label, prometheus_series
from tests._fixtures import FIXTURES
from tests._helpers import joined
from tests._otel import attribute_values
from tests._server import Reply, SSEServer

from ._promql import TARGET_LABELS, substitute_grafana_variables
from ._tools import promtool

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "dashboards" / "prometheus").glob("*.rules.yaml"))
DASHBOARDS = sorted((ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json"))
#: docs/generate_reference.py's tables, loaded as ``python`` runs it (without main()).
GEN: dict[str, Any] = runpy.run_path(str(ROOT / "docs" / "generate_reference.py"))


def _gate_exported() -> dict[str, frozenset[str]]:
    exported: dict[str, frozenset[str]] = {}
    for spec in semconv.GATE_METRICS:
        labels = TARGET_LABELS | {prometheus_label(key) for key in spec.attributes}
        for series in prometheus_series(spec):
            exported[series] = labels | {"le"} if series.endswith("_bucket") else labels
    return exported


#: The tool gate's series as Prometheus stores them, with the label names each may carry: the
#: gate's part of what the rule and dashboard tests check queries against (``tests/sre/_promql``
#: derives the streams' part the same way).
GATE_EXPORTED: dict[str, frozenset[str]] = _gate_exported()
GATE_CALLS = prometheus_series(semconv.GATE_CALLS)[0]
STATE, TOOL, ERROR = (prometheus_label(key) for key in semconv.GATE_CALLS.attributes)

#: In every argument and every executor's result: it must never leave the process's memory.
CANARY = "canary-0f7e3a9c"
RESULT_CANARY = "result-canary-5b1d"
CHAT_PATH = "/v1/chat/completions"
REQUEST = {"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": "go"}]}
TOOLS: dict[str, Any] = {
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string", "maxLength": 64}},
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "run_shell": None,
}
ROOT_DIR = "/srv/agent/"


# -- streams --------------------------------------------------------------------------------------


def chat_stream(calls: list[tuple[str, str, str]], response_id: str) -> bytes:
    """An OpenAI chat stream whose model calls ``(call id, tool name, argument text)`` in
    parallel, each call's arguments in two fragments, ending ``tool_calls`` and ``[DONE]``."""

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        chunk = {"id": response_id, "model": "gpt-test", "choices": [choice]}
        return f"data: {json.dumps(chunk)}\n\n"

    events = []
    for index, (call_id, name, arguments) in enumerate(calls):
        opened = {"name": name, "arguments": ""}
        call = {"index": index, "id": call_id, "type": "function", "function": opened}
        events.append(event({"tool_calls": [call]}))
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            events.append(
                event({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            )
    events.append(event({}, "tool_calls"))
    return ("".join(events) + "data: [DONE]\n\n").encode()


def write(path: str, text: str = CANARY) -> str:
    return json.dumps({"path": path, "text": text})


def inside(name: str) -> str:
    return f"{ROOT_DIR}{CANARY}/{name}"


def cut_after_first_call(body: bytes, marker: str) -> int:
    """The end of the first event that names ``marker`` (a call's id, or its tool's name when
    it has none): the call is open there."""
    end = _EVENT_END.search(body, body.index(marker.encode()))
    assert end is not None
    return end.end()


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


# -- the run ---------------------------------------------------------------------------------------


class Interrupted(BaseException):
    """What a process dying in the middle of a tool looks like to the gate."""


def policy(view: otelsse.ToolCallView) -> Decision | str:
    arguments = view.arguments
    if view.name == "run_shell":
        command = arguments.get("command")
        if command == "ask":
            return Decision.NEEDS_APPROVAL
        if command == "explode":
            raise RuntimeError(CANARY)
        return "maybe"  # not a decision: the policy failed, which denies
    path = arguments.get("path", "")
    return Decision.APPROVE if path.startswith(ROOT_DIR) else Decision.DENY


@dataclass
class Interrupts:
    """The executor of ``write_file``: interrupted once for a path ending ``crash``, raising
    for text ``fail``, returning a result otherwise."""

    interrupted: int = 0

    def __call__(self, arguments: dict[str, Any]) -> str:
        if arguments["path"].endswith("crash") and not self.interrupted:
            self.interrupted += 1
            raise Interrupted
        if arguments["text"] == "fail":
            raise ValueError(f"could not write {CANARY}")
        return f"{RESULT_CANARY} {arguments['path']}"


@dataclass
class Observed:
    """Everything a gate run left for an SRE to see."""

    results: list[GateResult] = field(default_factory=list)
    spans: list[ReadableSpan] = field(default_factory=list)
    scrape: str = ""
    #: The scrape taken before the first call was decided.
    scrape_before: str = ""
    ledger_bytes: bytes = b""

    def samples(self, text: str | None = None) -> list[tuple[str, dict[str, str], float]]:
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(self.scrape if text is None else text)
            for sample in family.samples
            if sample.name.startswith("otelsse_")
        ]

    @property
    def calls(self) -> list[otelsse.GateCall]:
        return [call for result in self.results for call in result.calls]


class ExportingGate:
    """A real gate with a real SDK of its own: spans in memory, metrics through the Prometheus
    exporter on a registry of its own, served on 127.0.0.1 (``port``) for scraping, and a
    SQLite ledger in ``directory``. ``decide()`` has it decide every kind of call once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.exporter = InMemorySpanExporter()
        self._tracer_provider = TracerProvider()
        self._tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        registry = CollectorRegistry()
        self._meter_provider = MeterProvider(
            metric_readers=[PrometheusMetricReader(registry=registry)]
        )
        self._server, self._thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        self.port = int(self._server.server_port)
        self.ledger = SQLiteLedger(directory / "ledger.sqlite")
        self.gate = ToolGate(
            TOOLS,
            policy,
            self.ledger,
            tracer_provider=self._tracer_provider,
            meter_provider=self._meter_provider,
        )

    def scrape(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())

    def decide(self, tag: str = "") -> list[GateResult]:
        """Every kind of call, over HTTP, in runs whose ids end with ``tag``. The interrupted
        attempt raises, so it has no result; the run's next attempt has."""
        gate = self.gate
        execute: dict[str, Callable[[Any], Any]] = {
            "write_file": Interrupts(),
            "run_shell": lambda arguments: RESULT_CANARY,
        }
        results = []
        with SSEServer() as server, httpx.Client(timeout=30) as client:
            for index, (path, body, run_id) in enumerate(_scenarios()):
                run_id = run_id and f"{run_id}{tag}"
                url = server.route(f"{CHAT_PATH}{path}{index}", body)
                with client.stream("POST", url, json=REQUEST) as response:
                    if path == "/crash":
                        with pytest.raises(Interrupted):
                            gate.run(response, execute=execute, run_id=run_id)
                        continue
                    results.append(gate.run(response, execute=execute, run_id=run_id))
            # The next attempt of the interrupted run finds its first call decided, no result.
            url = server.route(f"{CHAT_PATH}/crash-again", _scenarios()[-1][1])
            with client.stream("POST", url, json=REQUEST) as response:
                results.append(gate.run(response, execute=execute, run_id=f"run-crash{tag}"))
            # The async twin, on another run of the good stream.
            url = server.route(f"{CHAT_PATH}/async", _scenarios()[0][1])
            results.append(asyncio.run(_arun(gate, url, execute, f"run-async{tag}")))
        return results

    def close(self) -> None:
        self.ledger.close()
        self._server.shutdown()
        self._server.server_close()
        joined(self._thread, 30)
        self._meter_provider.shutdown()
        self._tracer_provider.shutdown()


def _scenarios() -> list[tuple[str, Reply, str | None]]:
    """(path, reply, run id) of each stream the gate reads, one request each."""
    good = chat_stream(
        [
            ("call_a1", "write_file", write(inside("a"))),
            ("call_a2", "write_file", write(inside("b"))),
        ],
        "chatcmpl-good",
    )
    arguments = [
        ("call_u", "delete_everything", write(inside("u"))),  # unregistered
        ("call_s", "write_file", json.dumps({"path": inside("s")})),  # schema: required
        ("call_t", "write_file", write(inside("t"), "x" * 65)),  # schema: maxLength
        ("call_n", "read_file", json.dumps({"path": inside("n")})),  # no executor
        ("call_o", "write_file", write("/etc/passwd")),  # denied
        ("call_f", "write_file", write(inside("f"), "fail")),  # the executor raises
        ("call_q", "run_shell", json.dumps({"command": "ask", "why": CANARY})),  # approval
        ("call_x", "run_shell", json.dumps({"command": "explode"})),  # the policy raises
        ("call_m", "run_shell", json.dumps({"command": CANARY})),  # the policy answers junk
        ("call_k", "write_file", f'["{CANARY}"]'),  # not an object
    ]
    unusable = [
        ("call_i", "write_file", '{"path": "' + CANARY),
        ("call_j", "write_file", write(inside("j")) + ' {"more": 1}'),
        ("call_l", "write_file", write(inside("l"))),
    ]
    duplicate = [
        ("call_d", "write_file", write(inside("d1"))),
        ("call_d", "write_file", write(inside("d2"))),
    ]
    crash = [
        ("call_c1", "write_file", write(inside("crash"))),
        ("call_c2", "write_file", write(inside("c"))),
    ]
    refused = Reply(b'{"error": "rate limited"}', 429, content_type="application/json")
    return [
        ("/good", Reply(good), "run-good"),
        ("/good", Reply(good), "run-good"),  # the same run again: replayed, never run twice
        ("/cut", Reply(good, cut=cut_after_first_call(good, "call_a1") + 40), None),
        ("/arguments", Reply(chat_stream(arguments, "chatcmpl-arguments")), None),
        ("/unusable", Reply(chat_stream(unusable, "chatcmpl-unusable")), None),
        ("/duplicate", Reply(chat_stream(duplicate, "chatcmpl-duplicate")), None),
        ("/limited", refused, None),
        ("/crash", Reply(chat_stream(crash, "chatcmpl-crash")), "run-crash"),
    ]


async def _arun(
    gate: ToolGate, url: str, execute: dict[str, Callable[[Any], Any]], run_id: str
) -> GateResult:
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", url, json=REQUEST) as response,
    ):
        return await gate.arun(response, execute=execute, run_id=run_id)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Observed:
    tmp = tmp_path_factory.mktemp("gate")
    exporting = ExportingGate(tmp)
    try:
        seen = Observed(scrape_before=exporting.scrape())
        seen.results = exporting.decide()
        seen.scrape = exporting.scrape()
        seen.spans = list(exporting.exporter.get_finished_spans())
    finally:
        exporting.close()
    seen.ledger_bytes = b"".join(
        path.read_bytes() for path in tmp.iterdir() if path.name.startswith("ledger.sqlite")
    )
    return seen


# -- the run did what the checks below need -------------------------------------------------------


def test_the_run_ends_calls_in_every_final_state(observed: Observed) -> None:
    states = Counter(call.state for call in observed.calls)
    assert set(FINAL_STATES) <= set(states), set(FINAL_STATES) - set(states)
    assert states[ToolCallState.POLICY_APPROVED] >= 1  # no executor for read_file
    assert states[ToolCallState.EXECUTED] >= 4
    faults = {result.fault for result in observed.results}
    assert {"truncated", "payload_error", "duplicate_tool_call_id", "rate_limited"} <= faults


# -- the scrape ---------------------------------------------------------------------------------


def test_no_gate_series_exists_before_its_first_call(observed: Observed) -> None:
    """As the reference says: nothing is pre-created, which the reconciliation alert allows for."""
    assert observed.samples(observed.scrape_before) == []


def test_the_scrape_holds_exactly_the_derived_series_and_labels(observed: Observed) -> None:
    samples = observed.samples()
    assert {name for name, _, _ in samples} == set(GATE_EXPORTED)
    carried = set().union(*(labels for _, labels, _ in samples))
    # job and instance come from the scrape; the exporter writes every other label.
    assert carried == GATE_EXPORTED[GATE_CALLS] - {"job", "instance"}
    for name, labels, _ in samples:
        assert labels.keys() <= GATE_EXPORTED[name]
        assert labels[STATE] in {state.value for state in ToolCallState}


def test_the_scraped_counts_are_the_gate_results(observed: Observed) -> None:
    scraped: Counter[tuple[str, str, str]] = Counter()
    for _, labels, value in observed.samples():
        scraped[(labels[STATE], labels[TOOL], labels.get(ERROR, ""))] += int(value)
    counted = Counter(
        (call.state.value, call.tool_name or "", call.error_class or "") for call in observed.calls
    )
    # The interrupted attempt raised, so it returned no result; its calls were counted too:
    # the interrupted one as policy_approved, the one after it quarantined as cancelled.
    counted[("policy_approved", "write_file", "")] += 1
    counted[("quarantined", "write_file", "cancelled")] += 1
    assert scraped == counted


def test_error_types_come_with_the_documented_state(observed: Observed) -> None:
    documented = set(GEN["gate_error_types"]())
    found = set()
    for _, labels, _ in observed.samples():
        error = labels.get(ERROR, "")
        if error:
            assert error in documented, error
            assert labels[STATE] == GEN["gate_error_state"](error).value, labels
            found.add(error)
    expected = {
        "truncated", "payload_error", "duplicate_tool_call_id", "cancelled", "invalid_json",
        "trailing_data", "arguments_not_object", "unregistered_tool", "tool_schema_error",
        "policy_denied", "policy_error", "no_executor", "execution_error",
    }  # fmt: skip
    assert expected <= found, expected - found


def _gate_selectors() -> list[tuple[str, str]]:
    """(where, matchers) of every selector of the gate's counter in the rules and dashboards."""
    exprs = [
        (f"{path.name}:{rule.get('record') or rule['alert']}", rule["expr"])
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                exprs.append((f"{path.name}:{panel['title']}", target["expr"]))
    return [
        (where, matchers)
        for where, expr in exprs
        for matchers in re.findall(rf"\b{GATE_CALLS}\s*\{{([^}}]*)\}}", expr)
    ]


def test_every_value_rules_and_dashboards_select_exists_in_the_scrape(observed: Observed) -> None:
    selectors = _gate_selectors()
    assert len(selectors) >= 8
    samples = [labels for _, labels, _ in observed.samples()]
    selected = set()
    for where, matchers in selectors:
        for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
            if "$" in value:
                assert label == "job", (where, label)  # a dashboard variable
                continue
            assert op == "=", (where, label, op)
            assert any(labels.get(label) == value for labels in samples), (where, label, value)
            selected.add(value)
    assert {"quarantined", "policy_denied", "needs_reconciliation"} <= selected


def _input_series(observed: Observed) -> tuple[list[dict[str, str]], dict[str, float]]:
    """The scraped series as promtool input: Prometheus' own labels added, empty ones dropped
    (Prometheus stores an empty label as no label). Every series is born at 1m and grows by its
    scraped count a minute; calls needing reconciliation are born at 20m, and denials at 50m,
    scaled to a third of all calls."""
    samples = observed.samples()
    total = {state: 0.0 for state in ("all", "quarantined", "policy_denied")}
    for _, labels, value in samples:
        total["all"] += value
        if labels[STATE] in total:
            total[labels[STATE]] += value
    others = total["all"] - total["policy_denied"]
    scale = others / 2 / total["policy_denied"]
    series = []
    for name, labels, value in samples:
        labels = {k: v for k, v in labels.items() if v} | {"job": "agent", "instance": "a-1:9464"}
        matchers = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        if labels[STATE] == "policy_denied":
            values = f"_x50 {value * scale:g}+{value * scale:g}x9"
        elif labels[STATE] == "needs_reconciliation":
            values = f"_x20 {value:g}+{value:g}x39"
        else:
            values = f"_ {value:g}+{value:g}x58"
        series.append({"series": f"{name}{{{matchers}}}", "values": values})
    return series, total


def test_promtool_fires_every_gate_alert_on_the_scraped_series(
    observed: Observed, tmp_path: Path
) -> None:
    series, total = _input_series(observed)
    # The scenarios quarantine well over 5 % of the calls, and more than 20 a minute in all.
    assert total["quarantined"] / total["all"] > 0.05
    assert total["all"] - total["policy_denied"] >= 20

    def firing(alert: str, at: str, count: int) -> dict[str, Any]:
        expr = f'count(ALERTS{{alertname="{alert}", alertstate="firing"}})'
        samples = [{"labels": "{}", "value": count}] if count else []
        return {"expr": expr, "eval_time": at, "exp_samples": samples}

    reconciling = {
        labels[TOOL]
        for _, labels, _ in observed.samples()
        if labels[STATE] == ToolCallState.NEEDS_RECONCILIATION.value
    }
    checks = [
        firing("OtelsseToolCallNeedsReconciliation", "19m", 0),
        firing("OtelsseToolCallNeedsReconciliation", "20m", len(reconciling)),
        firing("OtelsseToolCallsQuarantined", "10m", 0),
        firing("OtelsseToolCallsQuarantined", "15m", 1),
        firing("OtelsseToolCallDenialSpike", "49m", 0),
        firing("OtelsseToolCallDenialSpike", "59m", 1),
    ]
    # Every gate panel of the dashboards has data then.
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                if GATE_CALLS in target["expr"]:
                    expr = f"absent({substitute_grafana_variables(target['expr'])})"
                    checks.append({"expr": expr, "eval_time": "59m", "exp_samples": []})
    assert len(checks) >= 6 + 8
    test_file = tmp_path / "gate-scrape.test.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(path) for path in RULE_FILES],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
            }
        )
    )
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# -- the spans ----------------------------------------------------------------------------------

_TYPES = {"string": str, "int": int, "boolean": bool, "double": float}


def _closed_values(description: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", description))


def test_spans_have_the_documented_names_kind_and_parents(observed: Observed) -> None:
    spans = observed.spans
    assert {span.name for span in spans} == {semconv.GATE_SPAN_NAME, semconv.TOOL_CALL_SPAN_NAME}
    attempts = {span.context.span_id: span for span in spans if span.name == semconv.GATE_SPAN_NAME}
    # One attempt span per gate.run, the interrupted one included.
    assert len(attempts) == len(observed.results) + 1
    for span in spans:
        assert span.kind.name == GEN["GATE_SPAN_KIND"]
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == semconv.SCOPE_NAME
        if span.name == semconv.TOOL_CALL_SPAN_NAME:
            assert span.parent is not None
            assert span.parent.span_id in attempts
            parent = attempts[span.parent.span_id]
            assert span.context.trace_id == parent.context.trace_id
            assert span.attributes is not None
            assert parent.attributes is not None
            assert span.attributes[semconv.GATE_RUN_ID] == parent.attributes[semconv.GATE_RUN_ID]
    calls = [span for span in spans if span.name == semconv.TOOL_CALL_SPAN_NAME]
    assert len(calls) == len(observed.calls) + 2  # the interrupted attempt's two calls


def test_span_attributes_are_the_documented_ones(observed: Observed) -> None:
    docs = GEN["GATE_ATTRIBUTE_DOCS"]
    seen: dict[str, set[str]] = {semconv.GATE_SPAN_NAME: set(), semconv.TOOL_CALL_SPAN_NAME: set()}
    values: dict[str, set[str]] = {}
    for span in observed.spans:
        for key, value in (span.attributes or {}).items():
            assert key in docs, key
            assert span.name in docs[key].spans, (span.name, key)
            assert type(value) is _TYPES[docs[key].type], (key, value)
            if isinstance(value, str):
                values.setdefault(key, set()).add(value)
            seen[span.name].add(key)
    for name, keys in seen.items():
        documented = {key for key, doc in docs.items() if name in doc.spans}
        assert keys == documented, (name, documented - keys)
    # Closed sets: only values their description names.
    for key in (
        semconv.TOOL_CALL_JSON_STATUS, semconv.TOOL_CALL_SCHEMA_STATUS, semconv.TOOL_CALL_POLICY,
        semconv.TOOL_CALL_EXECUTION,
    ):  # fmt: skip
        assert values[key] <= _closed_values(docs[key].description), key
    assert values[semconv.TOOL_CALL_STATE] <= {state.value for state in ToolCallState}
    # The executor's exception type, never its message.
    assert "ValueError" in values[semconv.ERROR_TYPE]


def test_span_status_is_error_exactly_for_the_documented_states(observed: Observed) -> None:
    errors = {state.value for state, (_, error) in GEN["STATE_DOCS"].items() if error}
    for span in observed.spans:
        attributes = span.attributes or {}
        if span.name == semconv.TOOL_CALL_SPAN_NAME:
            error = attributes[semconv.TOOL_CALL_STATE] in errors
        else:
            error = semconv.ERROR_TYPE in attributes
            fault = attributes.get(semconv.GATE_FAULT)
            if fault is not None:
                assert attributes[semconv.ERROR_TYPE] == fault
        assert (span.status.status_code is StatusCode.ERROR) == error, dict(attributes)
    raised = [
        span
        for span in observed.spans
        if (span.attributes or {}).get(semconv.ERROR_TYPE) == "cancelled"
        and span.name == semconv.GATE_SPAN_NAME
    ]
    assert len(raised) == 1  # the interrupted attempt


def test_attempts_of_a_run_are_linked(observed: Observed) -> None:
    attempts = [
        span
        for span in observed.spans
        if span.name == semconv.GATE_SPAN_NAME
        and (span.attributes or {}).get(semconv.GATE_RUN_ID) == "run-crash"
    ]
    by_number = {int(str((span.attributes or {})[semconv.GATE_ATTEMPT])): span for span in attempts}
    assert sorted(by_number) == [1, 2]
    [link] = by_number[2].links
    assert link.context.span_id == by_number[1].context.span_id
    assert link.context.trace_id == by_number[1].context.trace_id
    assert dict(link.attributes or {}) == {semconv.GATE_RUN_ID: "run-crash"}
    assert not by_number[1].links


def test_no_argument_or_result_text_leaves_the_process(observed: Observed) -> None:
    texts = attribute_values(observed.spans)
    texts += [str(dict(link.attributes or {})) for span in observed.spans for link in span.links]
    texts += [json.dumps(call.record()) for call in observed.calls]
    texts.append(observed.scrape)
    for canary in (CANARY, RESULT_CANARY):
        assert not [text for text in texts if canary in text], canary
        assert canary.encode() not in observed.ledger_bytes
    # The results did reach the caller, in memory: the canary is a real one.
    assert any(RESULT_CANARY in str(call.output) for call in observed.calls)
    assert observed.ledger_bytes


# -- every route with tool calls ------------------------------------------------------------------

ROUTES = {
    "openai.chat_completions": ("openai-chat-parallel-tool-calls", "/v1/chat/completions"),
    "openai.responses": ("openai-responses-function-call", "/v1/responses"),
    "anthropic.messages": ("anthropic-text-and-two-tool-use", "/v1/messages"),
    "gemini.generate_content": (
        "gemini-function-call",
        "/v1beta/models/x:streamGenerateContent?alt=sse",
    ),
}


@pytest.mark.parametrize("cut", [False, True], ids=["complete", "cut"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_gives_executed_or_quarantined_series_and_spans(route: str, cut: bool) -> None:
    name, path = ROUTES[route]
    body = (FIXTURES / "real" / f"{name}.sse").read_bytes()
    calls = otelsse.read_stream([body], route).tool_calls
    tools = {call.name for call in calls if call.name}
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    gate = ToolGate(
        ledger=MemoryLedger(), tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    first = calls[0].id or calls[0].name or ""
    reply = Reply(body, cut=cut_after_first_call(body, first) if cut else None)
    try:
        with SSEServer() as server, httpx.Client(timeout=30) as client:
            url = server.route(path, reply)
            with client.stream("POST", url, json=REQUEST) as response:
                result = gate.run(response, execute=dict.fromkeys(tools, lambda _: "ok"))
        scrape = generate_latest(registry).decode()
    finally:
        meter_provider.shutdown()
        tracer_provider.shutdown()
    expected = ToolCallState.QUARANTINED if cut else ToolCallState.EXECUTED
    assert result.calls
    assert {call.state for call in result.calls} == {expected}
    assert result.fault == ("truncated" if cut else None)
    series = Observed(scrape=scrape).samples()
    scraped = {
        (labels[STATE], labels[TOOL], labels.get(ERROR, "")): value for _, labels, value in series
    }
    counted = Counter((expected.value, call.tool_name, result.fault or "") for call in result.calls)
    assert scraped == counted
    spans = exporter.get_finished_spans()
    [attempt] = [span for span in spans if span.name == semconv.GATE_SPAN_NAME]
    assert (attempt.attributes or {})[semconv.ROUTE] == route
    call_spans = [span for span in spans if span.name == semconv.TOOL_CALL_SPAN_NAME]
    assert [(span.attributes or {}).get(semconv.GEN_AI_TOOL_CALL_ID) for span in call_spans] == [
        call.call_id for call in result.calls
    ]


# -- the tool-name cap -----------------------------------------------------------------------------

_CAP_SCRIPT = """
import json, sys
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
import otelsse
from tests.sre.test_gate_metrics import chat_stream

registry = CollectorRegistry()
meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
long = "n" * 80
for g in range(3):
    gate = otelsse.ToolGate(meter_provider=meter_provider)
    calls = [(f"id{i}", f"g{g}-tool{i}-{long}", "{}") for i in range(30)]
    gate.run([chat_stream(calls, f"r{g}")], "openai.chat_completions", execute={})
names = [
    dict(sample.labels).get("gen_ai_tool_name")
    for family in text_string_to_metric_families(generate_latest(registry).decode())
    for sample in family.samples
    if sample.name == "otelsse_gate_calls_total"
]
json.dump(names, sys.stdout)
"""


def test_the_tool_name_cap_holds_across_every_gate_of_a_process() -> None:
    """Three gates, 90 model-chosen names in all: at most the documented number pass."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CAP_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    names = set(json.loads(completed.stdout))
    assert semconv.OVERFLOW_VALUE in names
    assert len(names - {semconv.OVERFLOW_VALUE}) == semconv.DEFAULT_MAX_TOOL_NAMES
    assert {len(name) for name in names - {semconv.OVERFLOW_VALUE}} == {
        semconv.MAX_METRIC_VALUE_CHARS
    }


# -- the runbooks ----------------------------------------------------------------------------------

RUNBOOKS = (ROOT / "docs" / "operators" / "runbooks.md").read_text(encoding="utf-8")
GATE_RUNBOOKS = RUNBOOKS.split("\n## The tool gate's alerts\n", 1)[1]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GATE_RUNBOOKS, flags=re.DOTALL)


def test_the_runbooks_queries_read_only_what_the_gate_exports(tmp_path: Path) -> None:
    recorded = {
        rule["record"]
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    exprs = [line.strip() for block in _blocks("promql") for line in block.splitlines()]
    exprs = [expr for expr in exprs if expr]
    assert len(exprs) >= 5
    labels = GATE_EXPORTED[GATE_CALLS]
    for expr in exprs:
        for name, matchers in re.findall(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", expr):
            assert name in GATE_EXPORTED or name in recorded, name
            assert set(re.findall(r"(\w+)\s*=", matchers)) <= labels, expr
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            assert {label.strip() for label in group.split(",")} <= labels, expr
    rules = [
        {"record": f"runbook:query_{index}", "expr": expr.replace("JOB", "agent")}
        for index, expr in enumerate(exprs)
    ]
    path = tmp_path / "runbook-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbook", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_runbooks_reconciliation_procedure_works(tmp_path: Path) -> None:
    """The query lists the call left decided; recording its outcome as the runbook says makes
    the next attempt replay it, and nothing runs it again."""
    [query] = _blocks("sql")
    body = chat_stream([("call_r", "write_file", write(inside("crash")))], "chatcmpl-reconcile")
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite")
    executor = Interrupts()
    try:
        gate = ToolGate(TOOLS, policy, ledger)
        with pytest.raises(Interrupted):
            gate.run(
                [body], "openai.chat_completions", execute={"write_file": executor}, run_id="r1"
            )
        [found] = gate.run([body], execute={"write_file": executor}, run_id="r1").calls
        assert found.state is ToolCallState.NEEDS_RECONCILIATION
        with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
            rows = db.execute(query).fetchall()
        [(run_id, response_id, call_id, tool_name, attempt, _)] = rows
        assert (run_id, response_id, call_id, tool_name, attempt) == (
            "r1", "chatcmpl-reconcile", "call_r", "write_file", 1,
        )  # fmt: skip
        ledger.finish(otelsse.CallKey(run_id, response_id, call_id), "succeeded")
        calls: list[Any] = []
        [replayed] = gate.run([body], execute={"write_file": calls.append}, run_id="r1").calls
        assert replayed.state is ToolCallState.REPLAYED
        assert replayed.execution_status == "succeeded"
        assert calls == []
        with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
            assert db.execute(query).fetchall() == []
    finally:
        ledger.close()
