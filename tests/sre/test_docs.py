"""The docs say what the code does: docs/operators/reference.md, and docs/users/outcomes.md and
neighbours.md.

docs/operators/reference.md must be exactly what docs/generate_reference.py prints (run as a
program), and must name every attribute and metric of ``otelsse.semconv``, the GenAI client
metrics of both name sets included, with the Prometheus series that ``tests/sre/_promql.py`` (the
dashboards' contract) derives, the tool gate's included (its series as
``tests/sre/test_gate_metrics.GATE_EXPORTED`` derives them; that module checks the gate's
documented spans, attributes, states and error types against a real gate). The generator must
refuse to render while its gate tables miss a name, or its cardinality budget, GenAI measure or
neighbour tables miss an instrument, a measure or something a neighbour owns; the bound it
prints for the gate's counter and every instrument's worst case must stay under the SDK's
cardinality limit. The documented caps, the HTTP status rule on ``otelsse.streams``, which
``OTEL_SEMCONV_STABILITY_OPT_IN`` value selects which GenAI names, scope and span kind are
checked against a real instrumented stream and the real ``Telemetry``, and the attributes the
reference calls instrumentation-only against ``telemetry.span_attributes()``.
docs/users/outcomes.md must have one section per ``Outcome``, a summary table whose span status
agrees with ``semconv.ERROR_OUTCOMES``, whose SLO column agrees with ``semconv.SLO_BAD_OUTCOMES``
and the 4xx exclusion, and which names only real ``StreamFault`` codes, an SLO section with the
selector and a reason for every outcome that does not count, and a section on how the
enforcing reader ends a stream that names every ``reader.FAULT_CODES`` code and only real
reader options. Every ``buffer_limit`` stage a real reader reports is documented in both files.
docs/users/neighbours.md must hold the generated "who records what" table, which real SDK spans of
each neighbour's scope, ``genai_neighbour()`` and a real ``Telemetry`` confirm cell by cell, a
section per ``semconv.NEIGHBOURS`` scope, and the detection marks ``genai_neighbour()`` uses.
examples/README.md's scenario table must be the fake provider's scenarios and outcomes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import otelsse
from otelsse import _reader as reader
from otelsse import gate, semconv
from otelsse._instrumentor import SSEInstrumentor
from otelsse._monitor import Limits, Outcome, StreamMonitor, StreamReport
from otelsse._observe import genai_neighbour
from otelsse._telemetry import OTHER, CallFacts, Telemetry, span_attributes
from otelsse.gate import ToolCallState
from tests._fixtures import FIXTURES
from tests._otel import Telemetry as SDK

from . import _promql
from .test_gate_metrics import GATE_EXPORTED

DOCS = Path(__file__).resolve().parents[2] / "docs"
GENERATOR = DOCS / "generate_reference.py"
REFERENCE_DOC = DOCS / "operators" / "reference.md"
OUTCOMES_DOC = DOCS / "users" / "outcomes.md"
NEIGHBOURS_DOC = DOCS / "users" / "neighbours.md"
RUNBOOKS_DOC = DOCS / "operators" / "runbooks.md"
REFERENCE = REFERENCE_DOC.read_text(encoding="utf-8")
OUTCOMES = OUTCOMES_DOC.read_text(encoding="utf-8")
NEIGHBOURS = NEIGHBOURS_DOC.read_text(encoding="utf-8")
# The generator's functions and constants, loaded the way ``python`` runs it (without main()).
GEN: dict[str, Any] = runpy.run_path(str(GENERATOR))

ALL_METRICS = (*semconv.METRICS, *semconv.GENAI_METRICS)
METRIC_ATTRIBUTES = {key for spec in ALL_METRICS for key in spec.attributes}
GATE_KEYS = {
    *semconv.GATE_ATTRIBUTES,
    *(key for spec in semconv.GATE_METRICS for key in spec.attributes),
}
ATTRIBUTE_TYPES = {"string", "boolean", "int", "double", "string[]"}


def chat_body(model: str, reason: str) -> bytes:
    return (
        b'data: {"id":"c1","model":"%s","choices":[{"index":0,"delta":{"content":"hi"},'
        b'"finish_reason":"%s"}]}\n\ndata: [DONE]\n\n' % (model.encode(), reason.encode())
    )


def section(text: str, heading: str) -> str:
    """The body of a markdown section, to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"^#{{1,{len(level)}}} ", body, flags=re.MULTILINE)[0]


def table(text: str) -> list[list[str]]:
    """The cells of the first markdown table in ``text``, header row first, separator left out."""
    lines = text[text.index("\n|") + 1 :].split("\n\n", 1)[0].splitlines()
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in lines[:1] + lines[2:]
    ]


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell -> the other cells, for the rows of the first table in ``text``."""
    rows: dict[str, list[str]] = {}
    for cells in table(text)[1:]:
        assert cells[0] not in rows, f"two rows for {cells[0]}"
        rows[cells[0]] = cells[1:]
    return rows


def summary_rows() -> dict[str, list[str]]:
    """outcome -> the other cells of its row in the outcomes doc's summary table."""
    rows = table_rows(section(OUTCOMES, "## Summary"))
    assert all(re.fullmatch(r"`\w+`", key) for key in rows), list(rows)
    return {key.strip("`"): cells for key, cells in rows.items()}


def full_report(outcome: Outcome = Outcome.COMPLETE) -> StreamReport:
    """A chat stream's report with every measure the GenAI metrics read."""
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    monitor.feed(chat_body("m", "stop"), 0.5)
    report = dataclasses.replace(
        monitor.close(1.0), time_per_output_chunk=0.1, input_tokens=12, output_tokens=5
    )
    assert report.time_to_first_output is not None
    assert report.operation_name is not None
    return dataclasses.replace(report, outcome=outcome)


def recorded(report: StreamReport, call: CallFacts, opt_in: str | None = None) -> SDK:
    """One stream's metric points, recorded by a real ``Telemetry`` on a fresh SDK."""
    sdk = SDK()
    Telemetry(sdk.tracer_provider, sdk.meter_provider, semconv_opt_in=opt_in).record_metrics(
        report, call
    )
    return sdk


def recorded_names(sdk: SDK) -> set[str]:
    return {p.metric for p in sdk.points() if p.value}


# -- docs/operators/reference.md -----------------------------------------------------------------


def test_reference_is_exactly_what_the_generator_prints() -> None:
    printed = subprocess.run(
        [sys.executable, str(GENERATOR)], capture_output=True, text=True, check=True
    ).stdout
    assert printed == REFERENCE, (
        "docs/operators/reference.md is stale: python docs/generate_reference.py --write"
    )
    assert printed == GEN["render"]()


def test_reference_names_every_attribute_metric_and_closed_value() -> None:
    names = [*semconv.ATTRIBUTES, *METRIC_ATTRIBUTES, *(spec.name for spec in ALL_METRICS)]
    values = [*(o.value for o in Outcome), *semconv.INSTRUMENTATION_STAGES]
    missing = [name for name in (*names, *values) if f"`{name}`" not in REFERENCE]
    assert missing == []
    # Each stage's row says what it covers.
    stages = table_rows(section(REFERENCE, f"### `{semconv.INSTRUMENTATION_STAGE}` (closed)"))
    for stage, description in semconv.INSTRUMENTATION_STAGE_DESCRIPTIONS.items():
        assert stages[f"`{stage}`"] == [description], stage


def test_reference_names_every_gate_span_attribute_state_and_error_type() -> None:
    gate_part = REFERENCE.split("\n## The tool gate\n", 1)[1]
    names = [
        semconv.GATE_SPAN_NAME,
        semconv.TOOL_CALL_SPAN_NAME,
        *GATE_KEYS,
        *(spec.name for spec in semconv.GATE_METRICS),
        *(state.value for state in ToolCallState),
        *gate.ERROR_CLASSES,
        *reader.FAULT_CODES,
    ]
    missing = [name for name in names if f"`{name}`" not in gate_part]
    assert missing == []
    # Every error type the counter can carry is listed, as a row or among the outcome names: a
    # refused stream's outcome, any the reader's monitor judges but complete.
    refused = {o.value for o in Outcome} - {Outcome.COMPLETE.value, Outcome.INTERNAL_ERROR.value}
    assert set(GEN["gate_error_types"]()) == {*gate.ERROR_CLASSES, *reader.FAULT_CODES, *refused}
    for value in GEN["gate_error_types"]():
        assert f"`{value}`" in gate_part.split("### Cardinality")[0], value


def test_no_gate_error_type_is_internal_error() -> None:
    """``internal_error`` is the instrumentation's verdict alone, given in place of the monitor's
    when otelsse failed: nothing the enforcing reader and the tool gate run (the monitor, the
    routes, the sans-IO core, the reader, the gate) names it besides the enum itself, so no
    refused stream's fault code is it, and the gate's counter bound leaves it out."""
    package = Path(otelsse.__file__).parent
    judging = [
        package / "_monitor.py",
        package / "_reader.py",
        *sorted((package / "gate").glob("*.py")),
        *sorted((package / "routes").glob("*.py")),
        *sorted((package / "_core").glob("*.py")),
    ]
    value = Outcome.INTERNAL_ERROR.value
    named = {
        path.relative_to(package).as_posix(): text.count("INTERNAL_ERROR") + text.count(value)
        for path in judging
        for text in [path.read_text(encoding="utf-8")]
    }
    # The enum member's own line names it twice: its name and its value.
    assert named.pop("_monitor.py") == 2
    assert set(named.values()) == {0}, {path: n for path, n in named.items() if n}
    assert value not in GEN["gate_error_types"]()
    assert summary_rows()[value][2] == "never: the reader does not produce it"


def without(
    monkeypatch: pytest.MonkeyPatch, tables: dict[str, Any], name: str, key: object
) -> None:
    """Replace the generator's table ``name`` by a copy without ``key`` for one test (a copy:
    deleting and restoring the entry would move it to the end and reorder what it renders)."""
    monkeypatch.setitem(tables, name, {k: v for k, v in tables[name].items() if k != key})


def test_the_generator_refuses_gate_tables_that_miss_a_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert GEN["gate_gaps"]() == []
    # The generator's own tables, as render() reads them (GEN holds a copy of its globals).
    tables = GEN["render"].__globals__
    without(monkeypatch, tables, "GATE_ATTRIBUTE_DOCS", semconv.GATE_FAULT)
    without(monkeypatch, tables, "STATE_DOCS", ToolCallState.REPLAYED)
    without(monkeypatch, tables, "ERROR_CLASS_DOCS", reader.DUPLICATE_TOOL_CALL_ID)
    with pytest.raises(SystemExit) as refused:
        GEN["render"]()
    message = str(refused.value)
    for name in (semconv.GATE_FAULT, "replayed", reader.DUPLICATE_TOOL_CALL_ID):
        assert name in message


def test_the_generator_refuses_metric_tables_that_miss_a_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert GEN["metric_gaps"]() == []
    tables = GEN["render"].__globals__
    budget = tables["BUDGET"]
    # The budget without its first group, and without the GenAI measure and neighbour docs of
    # the time to first chunk.
    monkeypatch.setitem(tables, "BUDGET", budget[1:])
    without(monkeypatch, tables, "MEASURE_DOCS", semconv.TIME_TO_FIRST_CHUNK_METRIC)
    without(monkeypatch, tables, "OWNABLE", semconv.USAGE)
    with pytest.raises(SystemExit) as refused:
        GEN["render"]()
    message = str(refused.value)
    missed = [*(spec.name for spec in budget[0].instruments), semconv.USAGE]
    for name in (*missed, semconv.TIME_TO_FIRST_CHUNK_METRIC):
        assert name in message


def test_the_cardinality_budget_covers_every_instrument_once_under_the_sdk_limit() -> None:
    rows = table_rows(section(REFERENCE, "## The cardinality budget"))
    named = [name for row in rows for name in re.findall(r"`([\w.]+)`", row)]
    assert sorted(named) == sorted(spec.name for spec in ALL_METRICS)
    for row, (labels, why, sets, series) in rows.items():
        specs = [spec for spec in ALL_METRICS if f"`{spec.name}`" in row]
        for key in {key for spec in specs for key in spec.attributes}:
            assert f"`{semconv.prometheus_label(key)}`" in labels, (row, key)
        assert why, row
        assert int(sets) <= int(series), row
    # Registering routes is the only way to grow an instrument towards the SDK's limit.
    name, routes = GEN["routes_to_limit"]()
    assert routes > 0
    assert f"it takes {routes} registered routes before any instrument (`{name}` first)" in (
        REFERENCE
    )


def test_gate_counter_bound_is_printed_and_under_the_sdk_limit() -> None:
    product, paired = GEN["gate_series_bounds"]()
    states, tools = len(ToolCallState), semconv.DEFAULT_MAX_TOOL_NAMES + 1
    errors = len(GEN["gate_error_types"]())
    assert product == states * tools * (errors + 1)
    # A call is counted in a final state or approved; quarantined, denied, failed ones always
    # carry an error type (tests/gate/test_gate_properties.py checks both on every call).
    unerrored = (gate.FINAL_STATES | {ToolCallState.POLICY_APPROVED}) - {
        ToolCallState.QUARANTINED, ToolCallState.POLICY_DENIED, ToolCallState.EXECUTION_FAILED,
    }  # fmt: skip
    assert paired == (errors + len(unerrored)) * tools
    row = next(
        line
        for line in REFERENCE.splitlines()
        if line.startswith(f"| `{semconv.GATE_CALLS.name}` |")
    )
    assert row.endswith(f"| {paired} |")
    assert f"= {product} attribute sets" in REFERENCE
    # The bound the reference promises must leave the SDK's overflow series unused.
    assert paired < semconv.SDK_CARDINALITY_LIMIT
    # It rests on each error type coming with exactly one state.
    for value in GEN["gate_error_types"]():
        assert isinstance(GEN["gate_error_state"](value), ToolCallState)


def test_every_attribute_key_is_described() -> None:
    assert set(semconv.ATTRIBUTE_SPECS) == set(semconv.ATTRIBUTES) | METRIC_ATTRIBUTES
    for key, spec in semconv.ATTRIBUTE_SPECS.items():
        assert spec.type in ATTRIBUTE_TYPES, key
        assert spec.description.strip(), key
    docs = GEN["GATE_ATTRIBUTE_DOCS"]
    assert set(docs) == GATE_KEYS
    gate_spans = {semconv.GATE_SPAN_NAME, semconv.TOOL_CALL_SPAN_NAME}
    metric_keys = {key for spec in semconv.GATE_METRICS for key in spec.attributes}
    for key, doc in docs.items():
        assert doc.type in ATTRIBUTE_TYPES, key
        assert doc.description.strip(), key
        assert set(doc.spans) <= gate_spans, key
        assert doc.spans or key in metric_keys, f"{key} is on nothing"
    assert list(GEN["STATE_DOCS"]) == list(ToolCallState)
    assert set(GEN["ERROR_CLASS_DOCS"]) == {*gate.ERROR_CLASSES, *reader.FAULT_CODES}
    assert list(semconv.INSTRUMENTATION_STAGE_DESCRIPTIONS) == list(semconv.INSTRUMENTATION_STAGES)
    assert all(semconv.INSTRUMENTATION_STAGE_DESCRIPTIONS.values())


def _metric_row(spec: semconv.MetricSpec) -> str:
    return next(line for line in REFERENCE.splitlines() if line.startswith(f"| `{spec.name}` |"))


def test_prometheus_names_are_the_ones_the_dashboards_are_checked_against() -> None:
    printed: set[str] = set()
    for spec in ALL_METRICS:
        series = GEN["prometheus_series"](spec)
        assert series == _promql.prometheus_series(spec), spec.name
        if spec in semconv.METRICS:
            printed.update(series)
        row = _metric_row(spec)
        for name in (*series, *(GEN["prometheus_label"](key) for key in spec.attributes)):
            assert f"`{name}`" in row, (spec.name, name)
    assert printed == set(_promql.EXPORTED)
    for key in semconv.ATTRIBUTE_SPECS:
        assert GEN["prometheus_label"](key) == _promql.prometheus_label(key)
    gate_printed: set[str] = set()
    for spec in semconv.GATE_METRICS:
        series = GEN["prometheus_series"](spec)
        gate_printed.update(series)
        row = next(line for line in REFERENCE.splitlines() if line.startswith(f"| `{spec.name}` |"))
        for name in (*series, *(GEN["prometheus_label"](key) for key in spec.attributes)):
            assert f"`{name}`" in row, (spec.name, name)
    assert gate_printed == set(GATE_EXPORTED)


def test_instrumentation_only_attributes_are_the_ones_a_report_cannot_give() -> None:
    monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
    monitor.feed(chat_body("m", "stop"), 0.5)
    # Every optional field set, and an ERROR outcome so that error.type is present too.
    report = dataclasses.replace(
        monitor.close(1.0),
        outcome=Outcome.TRUNCATED,
        route_profile="no_done",
        buffer_limit_stage="line",
        provider_error_code="overloaded_error",
        input_tokens=1,
        output_tokens=2,
        time_per_output_chunk=0.1,
    )
    reported = set(span_attributes(report))
    assert reported == set(semconv.ATTRIBUTES) - set(GEN["INSTRUMENTATION_ONLY"])


def test_documented_caps_are_the_ones_telemetry_applies() -> None:
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)  # the defaults
    long_model = "m" * (semconv.MAX_METRIC_VALUE_CHARS + 10)
    for i in range(semconv.DEFAULT_MAX_MODEL_NAMES + 1):
        monitor = StreamMonitor("openai.chat_completions", started_at=0.0)
        monitor.feed(chat_body("m", f"reason-{i}"), 0.5)
        # The request's model is what the counters carry.
        call = CallFacts(server_address="h", request_model=f"{i}-{long_model}", status_code=200)
        telemetry.record_metrics(monitor.close(1.0), call)
    points = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    models = {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in points}
    reasons = {p.attributes[semconv.STOP_REASON] for p in points}
    assert OTHER == semconv.OVERFLOW_VALUE
    assert len(models - {OTHER}) == semconv.DEFAULT_MAX_MODEL_NAMES
    assert len(reasons - {OTHER}) == semconv.DEFAULT_MAX_STOP_REASONS
    assert {len(m) for m in models - {OTHER}} == {semconv.MAX_METRIC_VALUE_CHARS}
    # The GenAI metrics carry the same capped model.
    genai = semconv.GENAI_METRICS_LEGACY[semconv.DURATION_METRIC][0].name
    assert {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in sdk.points(genai)} == models
    # instrument() passes its own defaults to Telemetry.
    patch = inspect.signature(SSEInstrumentor._patch).parameters
    assert patch["max_model_names"].default == semconv.DEFAULT_MAX_MODEL_NAMES
    assert patch["max_server_addresses"].default == semconv.DEFAULT_MAX_SERVER_ADDRESSES


@functools.cache
def status_outcomes() -> frozenset[str]:
    """The outcomes whose ``otelsse.streams`` point a real ``Telemetry`` gives a status."""
    found = set()
    for outcome in Outcome:
        call = CallFacts(server_address="h", request_model="m", status_code=503)
        for point in recorded(full_report(outcome), call).points(semconv.STREAMS.name):
            if point.value and semconv.HTTP_RESPONSE_STATUS_CODE in point.attributes:
                found.add(outcome.value)
    return frozenset(found)


def test_the_http_status_rule_on_streams_is_the_documented_one() -> None:
    statuses = {o.value for o in GEN["STATUS_OUTCOMES"]}
    assert status_outcomes() == statuses
    # rate_limited is always a 429; an http_error keeps its status, the first few codes only.
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    codes = range(500, 500 + semconv.MAX_STATUS_CODES + 1)
    for code in codes:
        call = CallFacts(server_address="h", request_model="m", status_code=code)
        telemetry.record_metrics(full_report(Outcome.HTTP_ERROR), call)
    telemetry.record_metrics(full_report(Outcome.RATE_LIMITED), CallFacts(status_code=503))
    by_outcome: dict[str, set[object]] = {}
    for point in sdk.points(semconv.STREAMS.name):
        status = point.attributes.get(semconv.HTTP_RESPONSE_STATUS_CODE)
        by_outcome.setdefault(point.attributes[semconv.OUTCOME], set()).add(status)
    assert by_outcome[Outcome.RATE_LIMITED.value] == {429}  # pre-created with it too
    assert by_outcome[Outcome.HTTP_ERROR.value] == {None, *codes[: semconv.MAX_STATUS_CODES]}
    assert {None} == set().union(*(v for k, v in by_outcome.items() if k not in statuses))
    metrics = section(REFERENCE, "## Metrics")
    assert f"its first {semconv.MAX_STATUS_CODES} distinct codes" in metrics
    assert f"first {semconv.MAX_STATUS_CODES} distinct codes" in section(
        OUTCOMES, "## `http_error`"
    )


def test_the_documented_opt_in_selects_the_documented_genai_names() -> None:
    section_text = section(REFERENCE, "## GenAI client metrics")
    assert f"`{semconv.SEMCONV_OPT_IN_ENV}={semconv.GENAI_LATEST}`" in section_text
    for source in (
        "semantic-conventions v1.37-v1.41 `docs/gen-ai/gen-ai-metrics.md`",
        "semantic-conventions-genai `docs/gen-ai/non-normative/migration.md`",
        "semantic-conventions-genai `docs/gen-ai/client-inference.md`",
    ):
        assert source in section_text
    header, *measures = table(section_text)
    assert header[1:3] == [
        "default name",
        f"with `{semconv.SEMCONV_OPT_IN_ENV}={semconv.GENAI_LATEST}`",
    ]
    default = {name for row in measures for name in re.findall(r"`(.+?)`", row[1])}
    latest = {name for row in measures for name in re.findall(r"`(.+?)`", row[2])}
    call = CallFacts(server_address="h", request_model="m", status_code=200)
    for opt_in, names in (
        (None, default),
        ("", default),
        (semconv.GENAI_LATEST, latest),
        (f"http, {semconv.GENAI_LATEST}", latest),
    ):
        genai = recorded_names(recorded(full_report(), call, opt_in)) & semconv.GENAI_NAMES
        assert genai == names, opt_in
    # Each set's own table: the documented buckets are the ones the instruments carry.
    for spec in semconv.GENAI_METRICS:
        row = _metric_row(spec)
        if spec.buckets:
            assert ", ".join(GEN["_number"](b) for b in spec.buckets) in row, spec.name


def test_documented_scope_kind_and_request_id_cap_hold_for_an_instrumented_stream(
    otel: SDK,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "x-request-id": "r\x07" * 200}
        return httpx.Response(200, headers=headers, content=chat_body("m", "stop"))

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        body = {"model": "m", "stream": True}
        with client.stream("POST", "http://h.test/v1/chat/completions", json=body) as response:
            response.read()
    span = otel.stream_span()
    assert span.kind.name == semconv.SPAN_KIND
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == semconv.SCOPE_NAME
    assert span.instrumentation_scope.schema_url == semconv.SCHEMA_URL
    # Cut first, then the non-printable half dropped.
    assert span.attributes is not None
    assert span.attributes[semconv.REQUEST_ID] == "r" * (semconv.MAX_REQUEST_ID_CHARS // 2)


def test_links_between_the_docs_resolve() -> None:
    # Each link is relative to the document it is in; the set is of paths under docs/.
    targets = {
        (doc.parent / link).resolve().relative_to(DOCS).as_posix()
        for doc, text in (
            (REFERENCE_DOC, REFERENCE),
            (OUTCOMES_DOC, OUTCOMES),
            (NEIGHBOURS_DOC, NEIGHBOURS),
        )
        for link in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", text)
    }
    assert targets == {
        "operators/reference.md",
        "operators/runbooks.md",
        "users/outcomes.md",
        "users/gateways.md",
        "users/neighbours.md",
        "users/bedrock.md",
    }
    assert [target for target in targets if not (DOCS / target).is_file()] == []


# -- docs/users/outcomes.md ----------------------------------------------------------------------


def test_outcomes_doc_has_one_section_per_outcome_and_no_other() -> None:
    sections = re.findall(r"^## `(\w+)`$", OUTCOMES, flags=re.MULTILINE)
    assert sorted(sections) == sorted(o.value for o in Outcome)
    assert len(sections) == len(set(sections))


def slo_cell(outcome: str) -> str:
    """What the docs must say of an outcome and the provider SLO, from semconv and the
    outcomes a real ``Telemetry`` gives a status."""
    if outcome not in semconv.SLO_BAD_OUTCOMES:
        return "no"
    if outcome in status_outcomes():
        return (
            f"yes, unless `{semconv.HTTP_RESPONSE_STATUS_CODE}` matches "
            f"`{semconv.SLO_EXCLUDED_STATUS}`"
        )
    return "yes"


def test_outcomes_summary_table_agrees_with_error_and_slo_outcomes() -> None:
    rows = summary_rows()
    assert set(rows) == {o.value for o in Outcome}
    reference = table_rows(section(REFERENCE, f"### `{semconv.OUTCOME}` (closed)"))
    for outcome, (status, slo, *_rest) in rows.items():
        error = outcome in semconv.ERROR_OUTCOMES
        assert status == ("ERROR" if error else "unset"), outcome
        assert slo == slo_cell(outcome), outcome
        assert reference[f"`{outcome}`"] == [status, slo], outcome


def test_outcomes_doc_says_what_counts_against_the_slo_and_why_not() -> None:
    part = section(OUTCOMES, "## What counts against the provider SLO")
    (selector,) = re.findall(r"```promql\n(.+)\n```", part)
    assert selector in REFERENCE
    assert selector == GEN["slo_selector"]()
    found = re.findall(r'(\w+)(=~|!~|=|!=)"([^"]*)"', selector)
    matchers = {(label, op): value for label, op, value in found}
    assert selector.startswith(_promql.prometheus_series(semconv.STREAMS)[0] + "{")
    outcome = semconv.prometheus_label(semconv.OUTCOME)
    status = semconv.prometheus_label(semconv.HTTP_RESPONSE_STATUS_CODE)
    assert set(matchers[outcome, "=~"].split("|")) == semconv.SLO_BAD_OUTCOMES
    assert matchers[status, "!~"] == semconv.SLO_EXCLUDED_STATUS
    # A reason for every outcome that does not count, and for the excluded statuses.
    not_bad = {o.value for o in Outcome} - semconv.SLO_BAD_OUTCOMES
    excluded = semconv.SLO_BAD_OUTCOMES & status_outcomes()
    rows = table_rows(part)
    named = {re.findall(r"^`(\w+)`", key)[0]: cells for key, cells in rows.items()}
    assert set(named) == not_bad | excluded
    assert all(cells[0] for cells in named.values())


def test_the_alerts_the_outcomes_doc_links_have_runbooks() -> None:
    runbooks = RUNBOOKS_DOC.read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (Otelsse\w+)$", runbooks, flags=re.MULTILINE))
    links = re.findall(r"\[(Otelsse\w+)\]\(\.\./operators/runbooks\.md#([\w-]+)\)", OUTCOMES)
    assert len(links) >= 4
    for name, anchor in links:
        assert name in headings, name
        assert anchor == name.lower(), name


def test_outcomes_summary_names_only_real_reader_codes() -> None:
    codes = {o.value for o in Outcome} | set(reader.FAULT_CODES)
    options = {"accept_stop_reasons", "tools"}
    assert options <= set(inspect.signature(otelsse.read_stream).parameters)
    named_anywhere: set[str] = set()
    for outcome, cells in summary_rows().items():
        named = set(re.findall(r"`(\w+)=?`", cells[2])) - options
        assert named <= codes, (outcome, named - codes)
        named_anywhere |= named
    assert set(reader.FAULT_CODES) <= named_anywhere


def _reader_section() -> str:
    return OUTCOMES.split("\n## How the enforcing reader ends a stream\n", 1)[1].split("\n## ")[0]


def test_outcomes_doc_says_how_the_reader_ends_a_stream() -> None:
    section = _reader_section()
    table = {match[1] for match in re.finditer(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)}
    assert table == set(reader.FAULT_CODES)
    # Every option it names is the reader's (or Limits'), on the sync and async readers alike.
    named = set(re.findall(r"[`(](\w+)=", section))
    assert {"drain", "idle_timeout", "deadline", "max_events", "tools"} <= named
    limits = {field.name for field in dataclasses.fields(Limits)}
    for function in (otelsse.StreamReader, otelsse.AsyncStreamReader, otelsse.read_stream):
        parameters = set(inspect.signature(function).parameters)
        assert named <= parameters | limits, (function, named - parameters - limits)
    assert "`drain=True`" in section


def _buffer_limit_stages() -> dict[str, str]:
    """Each ceiling of ``Limits`` breached by a real read: the stage the report names."""
    tools = (FIXTURES / "real" / "openai-chat-parallel-tool-calls.sse").read_bytes()
    text = (FIXTURES / "real" / "openai-chat-text.sse").read_bytes()
    cases = {
        "max_line_bytes": (tools, Limits(max_line_bytes=64)),
        "max_event_bytes": (tools, Limits(max_event_bytes=64)),
        "max_tool_argument_chars": (tools, Limits(max_tool_argument_chars=5)),
        "max_text_chars": (text, Limits(max_text_chars=1)),
        "max_events": (tools, Limits(max_events=3)),
    }
    stages = {}
    for name, (body, limits) in cases.items():
        with pytest.raises(otelsse.StreamFault) as refused:
            otelsse.read_stream([body], "openai.chat_completions", limits=limits)
        assert refused.value.code == "buffer_limit", name
        assert refused.value.report is not None
        stage = refused.value.report.buffer_limit_stage
        assert stage is not None, name
        stages[name] = stage
    return stages


def test_every_buffer_limit_stage_a_reader_reports_is_documented() -> None:
    stages = _buffer_limit_stages()
    assert stages["max_events"] == "events"
    section = OUTCOMES.split("\n## `buffer_limit`\n", 1)[1].split("\n## ")[0]
    row = next(
        line
        for line in REFERENCE.splitlines()
        if line.startswith(f"| `{semconv.BUFFER_LIMIT_STAGE}` |")
    )
    for limit, stage in stages.items():
        assert f"`{stage}`" in section, (limit, stage)
        assert f"`{limit}`" in section, limit
        assert f"`{stage}`" in row, f"the reference does not name stage {stage!r}"


# -- docs/users/neighbours.md --------------------------------------------------------------------

#: A scope ``semconv.NEIGHBOURS`` does not list.
UNKNOWN_SCOPE = "example.unlisted.genai"


def neighbour_span(scope: str, attributes: dict[str, Any], provider: TracerProvider) -> Any:
    """A real SDK span from instrumentation scope ``scope``, still open."""
    return provider.get_tracer(scope).start_span("chat m", attributes=attributes)


def test_neighbours_doc_holds_the_generated_table() -> None:
    begin, end = GEN["NEIGHBOURS_BEGIN"], GEN["NEIGHBOURS_END"]
    generated = NEIGHBOURS[NEIGHBOURS.index(begin) : NEIGHBOURS.index(end) + len(end)]
    assert generated == GEN["neighbour_table"](), (
        "docs/users/neighbours.md is stale: python docs/generate_reference.py --write"
    )


def test_neighbours_doc_has_a_section_per_known_neighbour_and_one_for_the_rest() -> None:
    headings = re.findall(r"^## (.+) \(`([\w.]+)`\)$", NEIGHBOURS, flags=re.MULTILINE)
    assert sorted(scope for _, scope in headings) == sorted(semconv.NEIGHBOURS)
    for title, scope in headings:
        facts = table_rows(section(NEIGHBOURS, f"## {title} (`{scope}`)"))
        # How to recognise it by its scope, what otelsse does beside it, what it gets wrong.
        assert f"`{scope}`" in facts["recognised by"][0], scope
        assert facts["otelsse beside it"][0], scope
        assert facts["known bugs"][0], scope
    assert "## Any other GenAI span" in NEIGHBOURS
    assert '## `instrument(genai_span="attach")`' in NEIGHBOURS


def test_the_documented_detection_marks_are_the_ones_otelsse_uses() -> None:
    part = section(NEIGHBOURS, "## How otelsse recognises a neighbour")
    marks = set(re.findall(r"`(gen_ai\.[\w.]+)`", part))
    assert {semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME} <= marks
    provider = TracerProvider()
    for mark in marks:
        span = neighbour_span(UNKNOWN_SCOPE, {mark: "x"}, provider)
        assert genai_neighbour(span) == (UNKNOWN_SCOPE, semconv.UNKNOWN_NEIGHBOUR_OWNS), mark
        span.end()
    # Nothing else marks a GenAI span; otelsse's own spans are not neighbours.
    span = neighbour_span(UNKNOWN_SCOPE, {semconv.GEN_AI_REQUEST_MODEL: "m"}, provider)
    assert genai_neighbour(span) is None
    span = neighbour_span(semconv.SCOPE_NAME, {semconv.GEN_AI_OPERATION_NAME: "chat"}, provider)
    assert genai_neighbour(span) is None
    # As documented: a span its sampler dropped cannot be told from no neighbour.
    dropped = TracerProvider(sampler=ALWAYS_OFF)
    span = neighbour_span(UNKNOWN_SCOPE, {semconv.GEN_AI_OPERATION_NAME: "chat"}, dropped)
    assert genai_neighbour(span) is None
    assert "A span its sampler dropped is not recording" in part


def test_who_records_what_beside_each_neighbour_is_what_otelsse_does() -> None:
    """Each cell of the generated table, from a real span of the column's scope: what
    ``genai_neighbour()`` finds it owns, then what ``span_attributes()`` and a real
    ``Telemetry`` (both GenAI name sets) leave out."""
    header, *rows = table(section(NEIGHBOURS, "## Who records what"))
    items = {text: item for item, text in GEN["OWNABLE"].items()}
    provider = TracerProvider()
    report = full_report(Outcome.TRUNCATED)
    call = CallFacts(server_address="h", request_model="m", status_code=200)
    for index, column in enumerate(header[1:], start=1):
        scope = column.strip("`") if column.startswith("`") else UNKNOWN_SCOPE
        span = neighbour_span(scope, {semconv.GEN_AI_OPERATION_NAME: "chat"}, provider)
        found = genai_neighbour(span)
        span.end()
        assert found is not None
        assert found[0] == scope
        attributes = span_attributes(report, found[1])
        names = {
            opt_in: recorded_names(recorded(report, call._replace(owned=found[1]), opt_in))
            for opt_in in (None, semconv.GENAI_LATEST)
        }
        for text, *cells in rows:
            item = items.get(text)
            if item == semconv.USAGE:
                emitted = semconv.GEN_AI_USAGE_INPUT_TOKENS in attributes
            elif item == semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK:
                emitted = item in attributes
            elif item is not None:
                # A measure: every instrument of the selected set, or none.
                kept = {
                    opt_in: {spec.name for spec in semconv.genai_metrics(opt_in)[item]} & got
                    for opt_in, got in names.items()
                }
                emitted = all(kept.values())
                assert emitted or not any(kept.values()), (column, item)
            else:  # everything else: otelsse's own span attributes and metrics, always
                emitted = semconv.OUTCOME in attributes and semconv.STREAMS.name in names[None]
            assert cells[index - 1] == ("**otelsse**" if emitted else "left to it"), (column, text)


def test_the_examples_scenario_table_is_the_fake_providers() -> None:
    """examples/README.md lists every scenario of the fake provider, in its order, with the
    outcome otelsse must report for it."""
    from otelsse._demo.provider import EXPECTED_OUTCOME

    text = (DOCS.parent / "examples" / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| `(\w+)` \|$", text, re.MULTILINE)
    assert rows == list(EXPECTED_OUTCOME.items())
