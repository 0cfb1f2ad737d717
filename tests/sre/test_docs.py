"""The docs say what the code does: docs/reference.md and docs/outcomes.md against the code.

docs/reference.md must be exactly what docs/generate_reference.py prints (run as a program),
and must name every attribute and metric of ``otelsse.semconv`` with the Prometheus series that
``tests/sre/_promql.py`` (the dashboards' contract) derives, the tool gate's included (its
series as ``tests/sre/test_gate_metrics.GATE_EXPORTED`` derives them; that module checks the
gate's documented spans, attributes, states and error types against a real gate). The
generator must refuse to render while its gate tables miss a name, and the bound it prints for
the gate's counter must stay under the SDK's cardinality limit. The documented caps, scope and
span kind are checked against a real instrumented stream and the real ``Telemetry``, and the
attributes the reference calls instrumentation-only against ``telemetry.span_attributes()``.
docs/outcomes.md must have one section per ``Outcome``, a summary table whose span status agrees
with ``semconv.ERROR_OUTCOMES`` and names only real ``StreamFault`` codes, and a section on how
the enforcing reader ends a stream that names every ``reader.FAULT_CODES`` code and only real
reader options. Every ``buffer_limit`` stage a real reader reports is documented in both files.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import otelsse
from otelsse import gate, reader, semconv
from otelsse.gate import ToolCallState
from otelsse.instrumentation import SSEInstrumentor
from otelsse.monitor import Limits, Outcome, StreamMonitor
from otelsse.telemetry import OTHER, Telemetry, span_attributes
from tests._fixtures import FIXTURES
from tests._otel import Telemetry as SDK

from . import _promql
from .test_gate_metrics import GATE_EXPORTED

DOCS = Path(__file__).resolve().parents[2] / "docs"
GENERATOR = DOCS / "generate_reference.py"
REFERENCE = (DOCS / "reference.md").read_text(encoding="utf-8")
OUTCOMES = (DOCS / "outcomes.md").read_text(encoding="utf-8")
# The generator's functions and constants, loaded the way ``python`` runs it (without main()).
GEN: dict[str, Any] = runpy.run_path(str(GENERATOR))

METRIC_ATTRIBUTES = {key for spec in semconv.METRICS for key in spec.attributes}
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


def summary_rows() -> dict[str, list[str]]:
    """outcome -> the other cells of its row in the outcomes doc's summary table."""
    rows: dict[str, list[str]] = {}
    for line in OUTCOMES.split("\n## Precedence")[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[0]) if line.startswith("|") else None
        if match:
            assert match[1] not in rows, f"two rows for {match[1]}"
            rows[match[1]] = cells[1:]
    return rows


# -- docs/reference.md ---------------------------------------------------------------------------


def test_reference_is_exactly_what_the_generator_prints() -> None:
    printed = subprocess.run(
        [sys.executable, str(GENERATOR)], capture_output=True, text=True, check=True
    ).stdout
    assert printed == REFERENCE, (
        "docs/reference.md is stale: python docs/generate_reference.py --write"
    )
    assert printed == GEN["render"]()


def test_reference_names_every_attribute_metric_and_closed_value() -> None:
    names = [*semconv.ATTRIBUTES, *METRIC_ATTRIBUTES, *(spec.name for spec in semconv.METRICS)]
    values = [*(o.value for o in Outcome), *semconv.INSTRUMENTATION_STAGES]
    missing = [name for name in (*names, *values) if f"`{name}`" not in REFERENCE]
    assert missing == []


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
    # Every error type the counter can carry is listed, as a row or among the outcome names.
    refused = {o.value for o in Outcome} - {Outcome.COMPLETE.value}
    assert set(GEN["gate_error_types"]()) == {*gate.ERROR_CLASSES, *reader.FAULT_CODES, *refused}
    for value in GEN["gate_error_types"]():
        assert f"`{value}`" in gate_part.split("### Cardinality")[0], value


def test_the_generator_refuses_gate_tables_that_miss_a_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert GEN["gate_gaps"]() == []
    # The generator's own tables, as render() reads them (GEN holds a copy of its globals).
    tables = GEN["render"].__globals__
    monkeypatch.delitem(tables["GATE_ATTRIBUTE_DOCS"], semconv.GATE_FAULT)
    monkeypatch.delitem(tables["STATE_DOCS"], ToolCallState.REPLAYED)
    monkeypatch.delitem(tables["ERROR_CLASS_DOCS"], reader.DUPLICATE_TOOL_CALL_ID)
    with pytest.raises(SystemExit) as refused:
        GEN["render"]()
    message = str(refused.value)
    for name in (semconv.GATE_FAULT, "replayed", reader.DUPLICATE_TOOL_CALL_ID):
        assert name in message


def test_gate_counter_bound_is_printed_and_under_the_sdk_limit() -> None:
    product, paired = GEN["gate_series_bounds"]()
    states, tools = len(ToolCallState), semconv.DEFAULT_MAX_TOOL_NAMES + 1
    errors = len(GEN["gate_error_types"]())
    assert product == states * tools * (errors + 1)
    assert paired == (errors + states) * tools
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


def test_prometheus_names_are_the_ones_the_dashboards_are_checked_against() -> None:
    printed: set[str] = set()
    for spec in semconv.METRICS:
        series = GEN["prometheus_series"](spec)
        assert series == _promql.prometheus_series(spec), spec.name
        printed.update(series)
        row = next(line for line in REFERENCE.splitlines() if line.startswith(f"| `{spec.name}` |"))
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
    )
    reported = set(span_attributes(report))
    assert reported == set(semconv.ATTRIBUTES) - set(GEN["INSTRUMENTATION_ONLY"])


def test_documented_caps_are_the_ones_telemetry_applies() -> None:
    sdk = SDK()
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)  # the defaults
    long_model = "m" * (semconv.MAX_METRIC_VALUE_CHARS + 10)
    for i in range(semconv.DEFAULT_MAX_MODEL_NAMES + 1):
        monitor = StreamMonitor("openai.chat_completions")
        monitor.feed(chat_body(f"{i}-{long_model}", f"reason-{i}"))
        telemetry.record_metrics(monitor.close(), "h")
    points = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    models = {p.attributes[semconv.GEN_AI_RESPONSE_MODEL] for p in points}
    reasons = {p.attributes[semconv.STOP_REASON] for p in points}
    assert OTHER == semconv.OVERFLOW_VALUE
    assert len(models - {OTHER}) == semconv.DEFAULT_MAX_MODEL_NAMES
    assert len(reasons - {OTHER}) == semconv.DEFAULT_MAX_STOP_REASONS
    assert {len(m) for m in models - {OTHER}} == {semconv.MAX_METRIC_VALUE_CHARS}
    # instrument() passes its own default to Telemetry.
    patch = inspect.signature(SSEInstrumentor._patch).parameters
    assert patch["max_model_names"].default == semconv.DEFAULT_MAX_MODEL_NAMES


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
    targets = set(re.findall(r"\]\(([\w.-]+\.md)\)", REFERENCE + OUTCOMES))
    assert targets == {"reference.md", "outcomes.md", "runbooks.md", "gateways.md"}
    assert [target for target in targets if not (DOCS / target).is_file()] == []


# -- docs/outcomes.md ----------------------------------------------------------------------------


def test_outcomes_doc_has_one_section_per_outcome_and_no_other() -> None:
    sections = re.findall(r"^## `(\w+)`$", OUTCOMES, flags=re.MULTILINE)
    assert sorted(sections) == sorted(o.value for o in Outcome)
    assert len(sections) == len(set(sections))


def test_outcomes_summary_table_agrees_with_error_outcomes() -> None:
    rows = summary_rows()
    assert set(rows) == {o.value for o in Outcome}
    for outcome, (status, fault, *_rest) in rows.items():
        error = outcome in semconv.ERROR_OUTCOMES
        assert status == ("ERROR" if error else "unset"), outcome
        assert fault == ("yes" if error else "no"), outcome


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
