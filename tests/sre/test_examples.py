"""The examples run and their telemetry says what they claim; the compose stack is wired right.

Every example runs as a subprocess, the way its README says (this interpreter; no ``OTEL_*``
variables, so spans go to the console), against a ``FakeProvider`` started here on a free port:
once with the default scenario and once or twice with a failing one. Each run must exit 0 whatever
the stream did, print one ``otelsse.stream`` span per call, on the expected route and with the
outcome the scenario implies (``EXPECTED_OUTCOME``), and print what the application saw: text, the
exception it caught, or for the enforcing reader the released tool call or the ``StreamFault``
code. The agent loop's tool gate prints one sanitized record per call, matching its
``otelsse.tool_call`` spans: only approved calls run, once (a replay runs nothing), calls outside
the workspace are denied, and a refused stream's calls are quarantined. The zero-code example runs
through its ``run.sh`` under ``opentelemetry-instrument``. A ``DeprecationWarning`` raised by an
example's own code fails its run. The runs start together on a thread pool, so their start-up and
waiting overlap. One more run sets ``OTEL_EXPORTER_OTLP_ENDPOINT`` to a gRPC OTLP receiver in this
process (the one of tests/sre/_otlp.py): the span and the stream count arrive there, and nothing is
printed. Every example script is run here and listed in examples/README.md, the examples'
``--scenario`` choices are the fake provider's, and the zero-code app imports neither otelsse nor
OpenTelemetry.

There is no Docker daemon here, so the compose stack is checked statically: the services exist
with pinned images; every bind mount, build context and Dockerfile exists; Grafana's dashboard
mount is where its provisioning looks and its data sources point at compose services; the
collector's pipelines are wired to defined components, keep the default Prometheus name
translation, and listen where the demo sends; Prometheus scrapes the collector's exporter, and
``promtool check config`` passes on a copy laid out as the container sees it, with every
``*.rules.yaml`` loaded; the Dockerfile's commands use flags ``otelsse demo --help`` lists, and
it copies what the build needs and installs an extra pyproject.toml declares.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra installs tomli there
    import tomli as tomllib

from otelsse import semconv
from otelsse._demo.provider import EXPECTED_OUTCOME, SCENARIOS, FakeProvider
from tests._compose import copied, dockerfile, dockerignore_allows, load_yaml, mounted, mounts
from tests.sre._otlp import grpc_receiver
from tests.sre._tools import load_script, promtool

pytestmark = pytest.mark.e2e  # the examples, run as a user runs them

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
COMPOSE = EXAMPLES / "compose"
BIN = Path(sys.executable).parent
#: A hang fails the run instead of blocking the suite.
RUN_TIMEOUT = 60

CHAT, RESPONSES = "openai.chat_completions", "openai.responses"
ANTHROPIC, GEMINI = "anthropic.messages", "gemini.generate_content"
#: A count of characters the application received (at least one).
SOME = r"[1-9]\d*"


class Run(NamedTuple):
    example: str  # path under examples/
    scenario: str | None  # None: the fake provider's default (complete, or tool_call with tools)
    routes: tuple[str, ...]  # the route of each stream, in the order the example makes them
    said: tuple[str, ...]  # regexes, one per line the example prints about its result
    #: The outcome of each stream, when they differ (a retry); else the scenario's, for each.
    outcomes: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return f"{self.example}-{self.scenario or 'default'}"


RUNS = [
    Run(
        "openai_sdk.py",
        None,
        (CHAT, RESPONSES),
        (
            rf"the application got {SOME} characters, finish_reason=stop",
            rf"the application got {SOME} characters, status=completed",
        ),
    ),
    # The chat stream raises the provider's error; the Responses helper finds no completed event.
    Run(
        "openai_sdk.py",
        "provider_error",
        (CHAT, RESPONSES),
        ("the application got APIError", "the application got RuntimeError"),
    ),
    Run(
        "anthropic_sdk.py",
        None,
        (ANTHROPIC, ANTHROPIC),
        (
            rf"the application got {SOME} characters, stop_reason=end_turn",
            r"the application got \d+ events, the last message_stop",
        ),
    ),
    # A cut chunked body raises (httpx's error, or the SDK's wrapping of it); a cut
    # close-delimited one looks like a short answer.
    Run(
        "anthropic_sdk.py",
        "truncated",
        (ANTHROPIC, ANTHROPIC),
        (
            r"the application got (RemoteProtocolError|APIConnectionError"
            r"|\d+ characters, stop_reason=None)",
            r"the application got (RemoteProtocolError|APIConnectionError"
            r"|\d+ events, the last (?!message_stop)\w+)",
        ),
    ),
    Run("httpx_sse.py", None, (CHAT,) * 4, (rf"the application got {SOME} characters",) * 4),
    Run(
        "httpx_sse.py",
        "rate_limited",
        (CHAT,) * 4,
        ("the application got HTTPStatusError",) * 4,
    ),
    Run(
        "requests_sse.py",
        None,
        (GEMINI,),
        (rf"the application got {SOME} characters, finishReason=STOP",),
    ),
    # requests reports a read timeout mid-body as a ConnectionError.
    Run("requests_sse.py", "timeout", (GEMINI,), ("the application got ConnectionError",)),
    Run(
        "enforcing_reader.py",
        None,
        (CHAT,),
        (
            r"released text: '' \(0 characters shown provisionally\)",
            'released tool call: get_weather {"city": "Paris", "unit": "celsius"}',
        ),
    ),
    Run("enforcing_reader.py", "tool_call_invalid", (CHAT,), ("refused: payload_error",)),
    Run("enforcing_reader.py", "truncated", (CHAT,), ("refused: truncated",)),
    # The loop's two turns, then the replay of the first.
    Run(
        "agent_gate.py",
        None,
        (CHAT,) * 3,
        (rf"the application got a final answer of {SOME} characters after 1 tool runs",),
    ),
    Run(
        "agent_gate.py",
        "tool_call_invalid",
        (CHAT,),
        ("the application got no answer: payload_error, 0 tool runs",),
    ),
    Run(
        "agent_gate.py",
        "truncated",
        (CHAT,),
        ("the application got no answer: truncated, 0 tool runs",),
    ),
    # Strict mode: the cut raises in the SDK's loop, the application's retry gets the answer.
    Run(
        "strict_mode.py",
        None,
        (CHAT, CHAT),
        (
            r"the application got APIConnectionError \(truncated\) on attempt 1, retrying",
            rf"the application got {SOME} characters on attempt 2",
        ),
        ("truncated", "complete"),
    ),
    Run(
        "strict_mode.py",
        "tool_call_invalid",
        (CHAT, CHAT),
        (
            r"the application got APIConnectionError \(payload_error\) on attempt 1, retrying",
            rf"the application got {SOME} characters on attempt 2",
        ),
        ("payload_error", "complete"),
    ),
    Run(
        "strict_mode.py",
        "complete",
        (CHAT,),
        (rf"the application got {SOME} characters on attempt 1",),
    ),
    Run("zero_code/run.sh", None, (CHAT,), (rf"the application got {SOME} characters",)),
    Run(
        "zero_code/run.sh",
        "truncated",
        (CHAT,),
        (r"the application got (APIConnectionError|RemoteProtocolError|\d+ characters)",),
    ),
]
#: How each line in ``Run.said`` starts.
SAID = re.compile(r"^(the application got|released|refused:) ")


def command(run: Run) -> list[str]:
    path = EXAMPLES / run.example
    program = ["sh", str(path)] if path.suffix == ".sh" else [sys.executable, str(path)]
    return program + (["--scenario", run.scenario] if run.scenario else [])


def execute(run: Run, base_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(
        OTELSSE_DEMO_URL=base_url,
        # opentelemetry-instrument runs the ``python`` it finds on PATH: make it this one.
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        # An example calling a deprecated API fails (warnings its libraries raise do not).
        PYTHONWARNINGS="error::DeprecationWarning:__main__",
        **env,
    )
    return subprocess.run(
        command(run),
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[Run, Future[subprocess.CompletedProcess[str]]]]:
    """Every run, started at once against one fake provider. Its delays are cut to a quarter, so
    that even a loaded machine answers well within the examples' 2 s read timeout; its stall on
    ``timeout`` (6 s) is not."""
    with FakeProvider(seed=4, speed=4.0) as provider, ThreadPoolExecutor(len(RUNS)) as pool:
        yield {run: pool.submit(execute, run, provider.base_url) for run in RUNS}


def otlp_attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: getattr(pair.value, pair.value.WhichOneof("value")) for pair in pairs}


def printed_spans(stdout: str) -> list[dict[str, Any]]:
    """The spans the console exporters printed: JSON objects starting at a line's start, one
    a line (examples/_common.py) or indented over many (the SDK's own, under the zero-code
    example's ``opentelemetry-instrument``)."""
    decoder = json.JSONDecoder()
    spans = []
    for match in re.finditer(r'^\{(?:$|"name": )', stdout, re.MULTILINE):
        document, _ = decoder.raw_decode(stdout, match.start())
        spans.append(document)
    return spans


@pytest.mark.parametrize("run", RUNS, ids=str)
def test_example_runs_and_reports_the_outcome(
    runs: dict[Run, Future[subprocess.CompletedProcess[str]]], run: Run
) -> None:
    completed = runs[run].result()
    assert completed.returncode == 0, f"{shlex.join(command(run))}\n{completed.stderr}"

    outcome = EXPECTED_OUTCOME[run.scenario or "complete"]
    outcomes = run.outcomes or (outcome,) * len(run.routes)
    streams = [
        span["attributes"]
        for span in printed_spans(completed.stdout)
        if span["name"] == semconv.SPAN_NAME
    ]
    assert [(s[semconv.ROUTE], s[semconv.OUTCOME]) for s in streams] == list(
        zip(run.routes, outcomes, strict=True)
    ), completed.stdout
    # Strict mode marks the stream it refused, and only that one.
    refused = [s.get(semconv.STRICT_RAISED, False) for s in streams]
    assert refused == [run.example == "strict_mode.py" and o != "complete" for o in outcomes]

    said = [line for line in completed.stdout.splitlines() if SAID.match(line)]
    assert len(said) == len(run.said), completed.stdout
    for line, pattern in zip(said, run.said, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)


#: The record a call gives (``GateCall.record()``): ids, names, sizes and statuses only.
RECORD_KEYS = {
    "observed_at", "run_id", "attempt", "response_id", "item_id", "model_route",
    "stream_event", "tool_name", "state", "buffer_bytes", "terminal_seen", "json_status",
    "trailing_data", "schema_status", "policy_status", "execution_state", "error_class",
}  # fmt: skip
#: What agent_gate.py's tool calls carry as arguments (the fake provider's get_weather call,
#: the hand-written write_file calls): none of it may be printed, in a record or a span.
ARGUMENT_CONTENT = (
    "Paris", "celsius", "notes/", "paris.txt", "outside.txt", "absolute.txt", "escape.txt",
    "clear today",
)  # fmt: skip
#: How each section of agent_gate.py's output starts.
GATE_SECTIONS = {
    "loop": "== the agent loop",
    "replay": "== replay",
    "by hand": "== write_file: a model turn written by hand",
    "cut": "== write_file: the same turn cut",
}


class GateSection(NamedTuple):
    run_id: str | None  # the run id its header names
    records: list[dict[str, Any]]
    executed: list[str]  # the tools whose executor ran, in order
    refused: list[str]  # the gate's fault, when it refused the stream


def gate_sections(stdout: str) -> dict[str, GateSection]:
    """agent_gate.py's output by section: its ``record`` lines, the executors that ran, and
    the faults of the streams the gate refused."""
    found: dict[str, GateSection] = {}
    current: GateSection | None = None
    for line in stdout.splitlines():
        for name, start in GATE_SECTIONS.items():
            if line.startswith(start):
                assert name not in found, line
                run_id = re.search(r", run (\w+)$", line)
                named = run_id.group(1) if run_id else None
                current = found[name] = GateSection(named, [], [], [])
        if current is None:
            continue
        if line.startswith("  record "):
            current.records.append(json.loads(line.removeprefix("  record ")))
        elif executor := re.fullmatch(r"  the executor of (\w+) ran", line):
            current.executed.append(executor.group(1))
        elif refused := re.match(r"  the gate refused the stream: (\w+) ", line):
            current.refused.append(refused.group(1))
    return found


def states(section: GateSection) -> list[tuple[str | None, str, str | None]]:
    return [(r["tool_name"], r["state"], r["error_class"]) for r in section.records]


AGENT_GATE_RUNS = [run for run in RUNS if run.example == "agent_gate.py"]


@pytest.mark.parametrize("run", AGENT_GATE_RUNS, ids=str)
def test_the_agent_loop_runs_tools_only_through_the_gate(
    runs: dict[Run, Future[subprocess.CompletedProcess[str]]], run: Run
) -> None:
    completed = runs[run].result()
    assert completed.returncode == 0, completed.stderr
    stdout = completed.stdout
    sections = gate_sections(stdout)

    # Records and spans: ids, sizes and statuses, never an argument.
    records = [record for section in sections.values() for record in section.records]
    for record in records:
        assert set(record) == RECORD_KEYS, record
    for content in ARGUMENT_CONTENT:
        assert content not in stdout, content
    # One otelsse.tool_call span per record, in the same order and saying the same, each a
    # child of the otelsse.gate span of its stream (same run and attempt).
    spans = printed_spans(stdout)
    gates = {
        span["context"]["span_id"]: span for span in spans if span["name"] == semconv.GATE_SPAN_NAME
    }
    calls = [span for span in spans if span["name"] == semconv.TOOL_CALL_SPAN_NAME]
    said = [
        (r["run_id"], r["attempt"], r["tool_name"], r["item_id"], r["state"], r["buffer_bytes"])
        for r in records
    ]
    assert [
        (
            a[semconv.GATE_RUN_ID],
            a[semconv.GATE_ATTEMPT],
            a[semconv.GEN_AI_TOOL_NAME],
            a[semconv.GEN_AI_TOOL_CALL_ID],
            a[semconv.TOOL_CALL_STATE],
            a[semconv.TOOL_CALL_BYTES],
        )
        for a in (span["attributes"] for span in calls)
    ] == said
    for span in calls:
        gate = gates[span["parent_id"]]
        assert gate["context"]["trace_id"] == span["context"]["trace_id"]
        for key in (semconv.GATE_RUN_ID, semconv.GATE_ATTEMPT):
            assert gate["attributes"][key] == span["attributes"][key]
    # Each request's stream span and the gate span that read it share the agent's turn span.
    turns = [span for span in spans if span["name"] == "agent turn"]
    assert len(turns) == len(run.routes)
    for turn in turns:
        children = sorted(
            span["name"] for span in spans if span["parent_id"] == turn["context"]["span_id"]
        )
        assert children == [semconv.GATE_SPAN_NAME, semconv.SPAN_NAME]

    # The mutating tool, whatever the scenario: only the call inside the workspace runs.
    by_hand, cut = sections["by hand"], sections["cut"]
    assert [r["item_id"] for r in by_hand.records] == [
        "call_inside", "call_dotdot", "call_absolute", "call_symlink",
    ]  # fmt: skip
    assert (
        states(by_hand)
        == [("write_file", "executed", None)]
        + [("write_file", "policy_denied", "policy_denied")] * 3
    )
    assert by_hand.executed == ["write_file"]
    assert states(cut) == [("write_file", "quarantined", "truncated")]
    assert cut.records[0]["json_status"] == "unchecked"
    assert (cut.executed, cut.refused) == ([], ["truncated"])
    assert "files the calls named: inside the workspace True, outside it 0" in stdout

    loop = sections["loop"]
    if run.scenario is None:
        # The provider's get_weather call runs once; the replay of its stream (same run,
        # response and call ids, a second gate on the same ledger file) runs nothing.
        replay = sections["replay"]
        assert states(loop) == [("get_weather", "executed", None)]
        assert replay.run_id == loop.run_id == loop.records[0]["run_id"]
        assert loop.executed == ["get_weather"]
        assert states(replay) == [("get_weather", "replayed", None)]
        assert replay.records[0]["execution_state"] == "succeeded"
        identity = ("run_id", "response_id", "item_id")
        assert [replay.records[0][k] for k in identity] == [loop.records[0][k] for k in identity]
        assert replay.executed == []
        # Three streams of one run: attempts 1, 2, 3, each gate span linked to the earlier.
        attempts = sorted(
            (gate["attributes"][semconv.GATE_ATTEMPT], len(gate["links"]))
            for gate in gates.values()
            if gate["attributes"][semconv.GATE_RUN_ID] == loop.run_id
        )
        assert attempts == [(1, 0), (2, 1), (3, 2)]
        assert stdout.splitlines()[-1] == "executors ran: get_weather, write_file"
    else:
        # The stream is refused: its calls (the cut arguments' one, or none when the fake
        # provider sent text) are quarantined and nothing runs; nothing to replay.
        fault = EXPECTED_OUTCOME[run.scenario]
        expected = [("get_weather", "quarantined", "invalid_json")]
        assert states(loop) == (expected if run.scenario == "tool_call_invalid" else [])
        assert (loop.executed, loop.refused) == ([], [fault])
        assert "replay" not in sections
        assert stdout.splitlines()[-1] == "executors ran: write_file"
        (gate,) = (g for g in gates.values() if g["attributes"][semconv.GATE_RUN_ID] == loop.run_id)
        assert gate["attributes"][semconv.GATE_FAULT] == fault
        assert gate["status"]["status_code"] == "ERROR"


def test_with_an_otlp_endpoint_the_examples_export_there_instead() -> None:
    run = next(r for r in RUNS if r.example == "enforcing_reader.py" and r.scenario is None)
    with FakeProvider(speed=4.0) as provider, grpc_receiver() as (endpoint, received):
        completed = execute(run, provider.base_url, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert completed.returncode == 0, completed.stderr
    assert printed_spans(completed.stdout) == []
    spans = [
        (resource.resource, span)
        for request in received.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert len(spans) == 1
    resource, span = spans[0]
    assert span.name == semconv.SPAN_NAME
    assert otlp_attributes(span.attributes)[semconv.OUTCOME] == "complete"
    assert otlp_attributes(resource.attributes)["service.name"] == "otelsse-examples"
    # The metrics too: the last export counts the stream.
    points = [
        point
        for resource_metrics in received.metrics[-1].resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if metric.name == semconv.STREAMS.name
        for point in metric.sum.data_points
    ]
    assert {
        otlp_attributes(p.attributes)[semconv.OUTCOME]: p.as_int for p in points if p.as_int
    } == {"complete": 1}


def test_every_example_runs_in_the_tests_and_is_in_the_readme() -> None:
    scripts = {
        path.relative_to(EXAMPLES).as_posix()
        for path in [*EXAMPLES.glob("*.py"), *EXAMPLES.glob("*/run.sh")]
        if not path.name.startswith("_")
    }
    tested = {run.example for run in RUNS}
    assert scripts == tested
    # Each one with its default scenario and at least one failing scenario.
    for example in tested:
        outcomes = {
            EXPECTED_OUTCOME[r.scenario or "complete"] for r in RUNS if r.example == example
        }
        assert "complete" in outcomes
        assert outcomes & semconv.ERROR_OUTCOMES, example
    readme = (EXAMPLES / "README.md").read_text()
    for script in scripts:
        assert f"examples/{script}" in readme, script


def test_the_examples_scenario_choices_are_the_fake_providers() -> None:
    common = load_script(EXAMPLES / "_common.py")
    assert common.SCENARIOS == SCENARIOS


def test_the_zero_code_app_imports_no_opentelemetry_or_otelsse() -> None:
    tree = ast.parse((EXAMPLES / "zero_code" / "app.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "openai" in imported
    assert not {name for name in imported if name.split(".")[0] in {"otelsse", "opentelemetry"}}


# --------------------------------------------------------------------------------------------
# The compose stack, without Docker
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(COMPOSE / "compose.yaml")
    return loaded


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(COMPOSE / "otel-collector.yaml")
    return loaded


def host_path(service: dict[str, Any], container_path: str) -> Path:
    """Where a path inside a service's container comes from on the host."""
    found = mounted(service, container_path, COMPOSE)
    assert found is not None, f"{container_path} is not mounted"
    return found


def endpoint_port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].strip("/"))


def test_the_stack_has_its_services_with_pinned_images(compose: dict[str, Any]) -> None:
    images = {
        "otel-collector": "otel/opentelemetry-collector-contrib",
        "prometheus": "prom/prometheus",
        "grafana": "grafana/grafana",
        "jaeger": "jaegertracing/all-in-one",
    }
    services = compose["services"]
    assert set(images) | {"demo"} <= set(services)
    for name, image in images.items():
        repository, _, tag = services[name]["image"].partition(":")
        assert repository == image
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: pin a version, not {tag!r}"
    base = next(rest for keyword, rest in dockerfile(COMPOSE / "Dockerfile") if keyword == "FROM")
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base)


def test_every_bind_mount_and_build_input_exists(compose: dict[str, Any]) -> None:
    services = compose["services"]
    sources = [
        source for service in services.values() for source in mounts(service, COMPOSE).values()
    ]
    assert len(sources) >= 5
    for source in sources:
        assert source.exists(), source
    for name in ("demo", "fake-provider"):
        build = services[name]["build"]
        context = (COMPOSE / build["context"]).resolve()
        assert context == ROOT
        assert (context / build["dockerfile"]).resolve() == COMPOSE / "Dockerfile"


def test_grafana_loads_the_provisioned_dashboards_and_data_sources(compose: dict[str, Any]) -> None:
    services = compose["services"]
    grafana = services["grafana"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning")
    assert provisioning == ROOT / "dashboards" / "grafana" / "provisioning"
    for provider in load_yaml(provisioning / "dashboards" / "otelsse.yaml")["providers"]:
        dashboards = host_path(grafana, provider["options"]["path"])
        assert dashboards == ROOT / "dashboards" / "grafana" / "dashboards"
        assert list(dashboards.glob("*.json"))
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path(grafana, home).is_file()
    sources = load_yaml(provisioning / "datasources" / "datasources.yaml")["datasources"]
    for source in sources:
        url = re.fullmatch(r"http://([\w-]+):\d+", source["url"])
        assert url, source
        assert url.group(1) in services, source
    assert {source["uid"] for source in sources} >= {"prometheus", "jaeger"}


def test_the_collector_pipelines_are_wired(
    compose: dict[str, Any], collector: dict[str, Any]
) -> None:
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, ()):
                assert component in collector[kind], f"{kind}: {component} is not defined"
    assert {"otlp"} == {r.split("/")[0] for r in pipelines["traces"]["receivers"]}
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert endpoint_port(protocols["grpc"]["endpoint"]) == 4317
    assert endpoint_port(protocols["http"]["endpoint"]) == 4318
    # Spans go to Jaeger's OTLP port.
    (traces,) = pipelines["traces"]["exporters"]
    assert traces.split("/")[0] in {"otlp", "otlp_grpc"}
    assert collector["exporters"][traces]["endpoint"] == "jaeger:4317"
    # Metrics keep the default translation the dashboards query (otelsse_streams_total, ...).
    (metrics,) = pipelines["metrics"]["exporters"]
    assert metrics.split("/")[0] == "prometheus"
    exporter = collector["exporters"][metrics] or {}
    assert "namespace" not in exporter
    assert exporter.get("add_metric_suffixes", True) is True
    assert exporter.get("translation_strategy", "UnderscoreEscapingWithSuffixes") == (
        "UnderscoreEscapingWithSuffixes"
    )


def test_prometheus_scrapes_the_collector_and_loads_every_rule_file(
    compose: dict[str, Any], collector: dict[str, Any], tmp_path: Path
) -> None:
    prometheus = compose["services"]["prometheus"]
    config = load_yaml(host_path(prometheus, "/etc/prometheus/prometheus.yml"))
    (exporter,) = (e for e in collector["exporters"] if e.split("/")[0] == "prometheus")
    port = endpoint_port(collector["exporters"][exporter]["endpoint"])
    targets = [
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    ]
    assert targets == [f"otel-collector:{port}"]
    assert all(job.get("honor_labels") for job in config["scrape_configs"])

    # The container's file system: every mount copied to its path under tmp_path.
    for target, source in mounts(prometheus, COMPOSE).items():
        copy = tmp_path / target.lstrip("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, copy)
    checked = promtool("check", "config", str(tmp_path / "etc/prometheus/prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rule_files = sorted((ROOT / "dashboards" / "prometheus").glob("*.rules.yaml"))
    assert rule_files
    assert f"SUCCESS: {len(rule_files)} rule files found" in checked.stdout, checked.stdout
    for rule_file in rule_files:
        assert f"rules/{rule_file.name}" in checked.stdout


def test_the_demo_image_runs_flags_the_cli_knows_and_sends_to_the_collector(
    compose: dict[str, Any], collector: dict[str, Any]
) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "otelsse", "demo", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    known = set(re.findall(r"--[a-z][a-z-]*", help_text))
    instructions = dockerfile(COMPOSE / "Dockerfile")
    cmd = json.loads(next(rest for keyword, rest in instructions if keyword == "CMD"))
    commands = [cmd] + [
        service["command"]
        for service in compose["services"].values()
        if "command" in service and "build" in service
    ]
    assert len(commands) == 2
    for argv in commands:
        assert argv[:2] == ["otelsse", "demo"]
        assert {arg for arg in argv if arg.startswith("--")} <= known, argv
    endpoint = cmd[cmd.index("--otlp-endpoint") + 1]
    grpc = collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert endpoint == f"http://otel-collector:{endpoint_port(grpc)}"
    assert "otel-collector" in compose["services"]


def test_the_demo_image_copies_what_the_build_needs() -> None:
    instructions = dockerfile(COMPOSE / "Dockerfile")
    sources = copied(instructions)
    for source in sources:
        assert (ROOT / source).exists(), source
    # The Dockerfile's own .dockerignore lets in exactly what it copies.
    assert dockerignore_allows(COMPOSE / "Dockerfile.dockerignore") == sources
    # What hatchling reads: the readme, the version file, the package.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hatch = project["tool"]["hatch"]
    needed = {project["project"]["readme"], "pyproject.toml", hatch["version"]["path"]}
    needed |= set(hatch["build"]["targets"]["wheel"]["packages"])
    assert all(any(n == c or n.startswith(c + "/") for c in sources) for n in needed), needed
    (install,) = [rest for keyword, rest in instructions if keyword == "RUN" and "pip" in rest]
    extras = re.search(r'"/src\[([\w,-]+)\]"', install)
    assert extras, install
    for extra in extras.group(1).split(","):
        assert extra in project["project"]["optional-dependencies"], f"no extra {extra!r}"
