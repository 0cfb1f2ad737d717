"""The docs say what the code does: docs/reference.md and docs/outcomes.md against the code.

docs/reference.md must be exactly what docs/generate_reference.py prints (run as a program),
and must name every attribute and metric of ``otelsse.semconv`` with the Prometheus series that
``tests/sre/_promql.py`` (the dashboards' contract) derives. The documented caps, scope and span
kind are checked against a real instrumented stream and the real ``Telemetry``, and the
attributes the reference calls instrumentation-only against ``telemetry.span_attributes()``.
docs/outcomes.md must have one section per ``Outcome`` and a summary table whose span status
agrees with ``semconv.ERROR_OUTCOMES``.
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

import otelsse
from otelsse import reader, semconv
from otelsse.instrumentation import SSEInstrumentor
from otelsse.monitor import Outcome, StreamMonitor
from otelsse.telemetry import OTHER, Telemetry, span_attributes
from tests._otel import Telemetry as SDK

from . import _promql

DOCS = Path(__file__).resolve().parents[2] / "docs"
GENERATOR = DOCS / "generate_reference.py"
REFERENCE = (DOCS / "reference.md").read_text(encoding="utf-8")
OUTCOMES = (DOCS / "outcomes.md").read_text(encoding="utf-8")
# The generator's functions and constants, loaded the way ``python`` runs it (without main()).
GEN: dict[str, Any] = runpy.run_path(str(GENERATOR))

METRIC_ATTRIBUTES = {key for spec in semconv.METRICS for key in spec.attributes}
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


def test_every_attribute_key_is_described() -> None:
    assert set(semconv.ATTRIBUTE_SPECS) == set(semconv.ATTRIBUTES) | METRIC_ATTRIBUTES
    for key, spec in semconv.ATTRIBUTE_SPECS.items():
        assert spec.type in ATTRIBUTE_TYPES, key
        assert spec.description.strip(), key
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
    codes = {o.value for o in Outcome} | {reader.UNACCEPTED_STOP, reader.TOOL_SCHEMA_ERROR}
    assert "accept_stop_reasons" in inspect.signature(otelsse.read_stream).parameters
    for outcome, cells in summary_rows().items():
        named = set(re.findall(r"`(\w+)`", cells[2])) - {"accept_stop_reasons"}
        assert named <= codes, (outcome, named - codes)
