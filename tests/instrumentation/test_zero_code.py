"""Zero-code instrumentation and the instrumentor's own contract.

Subprocess tests run ``opentelemetry-instrument python -m tests.apps.stream_app URL...`` from the
repository root, the way a user would, against ``SSEServer`` (tests/_server.py) started here on
127.0.0.1. The app streams a recorded chat completion through every client of the harness
(tests/_clients.py: httpx and httpx2, sync and async, requests and aiohttp) and knows nothing
about OpenTelemetry; the console exporters print every span and the final metric points as JSON
on its stdout, which is parsed here. They prove that the ``otelsse`` entry point is picked up
(one complete ``otelsse.stream`` span per stream, the parent of the contrib HTTP span where the
client has one), that ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otelsse`` turns it off and that
``OTEL_PYTHON_OTELSSE_EXCLUDED_URLS`` excludes a URL, while the application receives the same
bytes and the contrib HTTP spans still appear (so an absent span means otelsse stayed out, not
that nothing was exported).

In-process tests check the ``BaseInstrumentor`` contract directly: the entry point, the
singleton, idempotent ``instrument()``, ``uninstrument()`` restoring the very original functions,
the ``clients`` option, and ``excluded_urls`` as an option (list or comma-separated string) or
environment variable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from otelsse import semconv
from otelsse._instrumentor import EXCLUDED_URLS_ENV, SSEInstrumentor
from tests._clients import CLIENTS, Client
from tests._fixtures import read_fixture
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.apps.stream_app import stream

pytestmark = pytest.mark.e2e  # subprocesses under opentelemetry-instrument

#: The repository root: the app runs as ``python -m tests.apps.stream_app`` from there.
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: A hang in a subprocess fails the test instead of blocking the suite.
SUBPROCESS_TIMEOUT = 60
CHAT_PATH = "/v1/chat/completions"
#: A second chat route whose URL the exclusion tests exclude. It serves another body, whose
#: outcome (incomplete) would tell its span apart from the one of ``CHAT_PATH`` (complete).
EXCLUDED_PATH = "/excluded/v1/chat/completions"
BODIES = {CHAT_PATH: "real/openai-chat-text.sse", EXCLUDED_PATH: "real/vllm-chat-finish-length.sse"}

#: Every method otelsse patches, and those of requests (the ``clients`` option's test).
ALL_PATCHED = [client.patched for client in CLIENTS]
REQUESTS_PATCHED = [client.patched for client in CLIENTS if client.library == "requests"]
#: The clients with a contrib HTTP instrumentation installed, which opentelemetry-instrument
#: turns on beside otelsse: aiohttp's (opentelemetry-instrumentation-aiohttp-client) is not.
CONTRIB_CLIENTS = [client for client in CLIENTS if client.library != "aiohttp"]


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as running:
        for path, name in BODIES.items():
            running.route(path, Reply(read_fixture(name)))
        yield running


# --------------------------------------------------------------------------------------------
# opentelemetry-instrument in a subprocess
# --------------------------------------------------------------------------------------------


def run_instrumented(urls: list[str], **env: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the app under ``opentelemetry-instrument``; return its spans and its APP-RESULT."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(
        # opentelemetry-instrument finds ``python`` on PATH: make it this interpreter.
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        OTEL_SERVICE_NAME="otelsse-zero-code-test",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LOGS_EXPORTER="none",
        **env,
    )
    completed = subprocess.run(
        [str(BIN / "opentelemetry-instrument"), "python", "-m", "tests.apps.stream_app", *urls],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    results = [
        json.loads(line.removeprefix("APP-RESULT "))
        for line in completed.stderr.splitlines()
        if line.startswith("APP-RESULT ")
    ]
    assert len(results) == 1, completed.stderr
    return console_json(completed.stdout), results[0]


def console_json(text: str) -> list[dict[str, Any]]:
    """The JSON documents the console exporters printed one after another."""
    decoder = json.JSONDecoder()
    documents: list[dict[str, Any]] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return documents
        document, position = decoder.raw_decode(text, position)
        documents.append(document)


def spans_named(documents: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in documents if "resource_metrics" not in d and d["name"] == name]


def otelsse_points(documents: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Data points of one otelsse metric across every metrics document printed."""
    return [
        point
        for document in documents
        for resource in document.get("resource_metrics", ())
        for scope in resource["scope_metrics"]
        if scope["scope"]["name"] == "otelsse"
        for found in scope["metrics"]
        if found["name"] == metric
        for point in found["data"]["data_points"]
    ]


def http_client_spans(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contrib httpx/httpx2/requests instrumentations' spans (named after the method)."""
    return spans_named(documents, "POST")


def assert_unaffected(result: dict[str, Any], server: SSEServer, paths: list[str]) -> None:
    """Every client received the whole body of every path, byte for byte."""
    assert result == {
        server.url(path): dict.fromkeys(
            (client.id for client in CLIENTS),
            hashlib.sha256(read_fixture(BODIES[path])).hexdigest(),
        )
        for path in paths
    }


def test_opentelemetry_instrument_picks_up_otelsse(server: SSEServer) -> None:
    documents, result = run_instrumented([server.url(CHAT_PATH)])
    assert_unaffected(result, server, [CHAT_PATH])

    streams = spans_named(documents, semconv.SPAN_NAME)
    assert len(streams) == len(CLIENTS)
    for span in streams:
        assert span["kind"] == "SpanKind.CLIENT"
        assert span["attributes"][semconv.OUTCOME] == "complete"
        assert span["attributes"][semconv.ROUTE] == "openai.chat_completions"
        assert span["attributes"][semconv.STOP_REASON] == "stop"
    # Each contrib HTTP span (ending at the headers) is the child of a stream span of its own.
    http_spans = http_client_spans(documents)
    assert len(http_spans) == len(CONTRIB_CLIENTS)
    parents = [s["parent_id"] for s in http_spans]
    assert len(set(parents)) == len(parents)
    assert set(parents) <= {s["context"]["span_id"] for s in streams}

    counted = otelsse_points(documents, semconv.STREAMS.name)
    assert {p["attributes"][semconv.OUTCOME]: p["value"] for p in counted if p["value"]} == {
        "complete": len(CLIENTS)
    }


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "otelsse"}, id="disabled"),
        pytest.param({EXCLUDED_URLS_ENV: "/excluded/"}, id="excluded-url"),
    ],
)
def test_opentelemetry_instrument_without_otelsse_spans(
    server: SSEServer, env: dict[str, str]
) -> None:
    documents, result = run_instrumented([server.url(EXCLUDED_PATH)], **env)
    assert_unaffected(result, server, [EXCLUDED_PATH])
    assert spans_named(documents, semconv.SPAN_NAME) == []
    assert [p for p in otelsse_points(documents, semconv.STREAMS.name) if p["value"]] == []
    # The pipeline itself worked: the contrib HTTP spans were exported.
    assert len(http_client_spans(documents)) == len(CONTRIB_CLIENTS)


def test_an_excluded_url_leaves_other_urls_observed(server: SSEServer) -> None:
    paths = [EXCLUDED_PATH, CHAT_PATH]
    documents, result = run_instrumented(
        [server.url(path) for path in paths], **{EXCLUDED_URLS_ENV: "/excluded/"}
    )
    assert_unaffected(result, server, paths)
    streams = spans_named(documents, semconv.SPAN_NAME)
    assert len(streams) == len(CLIENTS)
    assert {s["attributes"][semconv.OUTCOME] for s in streams} == {"complete"}


# --------------------------------------------------------------------------------------------
# The instrumentor in-process
# --------------------------------------------------------------------------------------------


def current(targets: list[tuple[type, str]]) -> dict[tuple[type, str], Any]:
    """What each class holds under each patched name right now (no descriptor binding)."""
    return {(owner, name): owner.__dict__[name] for owner, name in targets}


@contextmanager
def instrumented(**options: Any) -> Iterator[Telemetry]:
    telemetry = Telemetry()
    try:
        yield telemetry.install(**options)
    finally:
        telemetry.uninstall()


def test_the_entry_point_loads_the_instrumentor() -> None:
    found = entry_points(group="opentelemetry_instrumentor", name="otelsse")
    assert len(found) == 1
    assert next(iter(found)).load() is SSEInstrumentor


def test_the_instrumentor_is_a_singleton() -> None:
    assert SSEInstrumentor() is SSEInstrumentor()


def test_uninstrument_restores_the_original_functions() -> None:
    originals = current(ALL_PATCHED)
    with instrumented():
        patched = current(ALL_PATCHED)
        for target, function in patched.items():
            assert function is not originals[target]
            assert function.__wrapped__ is originals[target]
    assert current(ALL_PATCHED) == originals
    for target, function in current(ALL_PATCHED).items():
        assert function is originals[target]


def test_instrumenting_twice_observes_each_stream_once(
    server: SSEServer, otel: Telemetry, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    patched = current(ALL_PATCHED)
    second = Telemetry()
    caplog.set_level(logging.DEBUG)
    try:
        second.install()  # a second instrument(), with other providers: ignored
        otel.install()  # and again with the same ones
        assert current(ALL_PATCHED) == patched  # nothing wrapped twice
        # and silently: OpenTelemetry's "already instrumented" warning is not what idempotent
        # means
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
        stream(client, server.url(CHAT_PATH))
    finally:
        second.tracer_provider.shutdown()
        second.meter_provider.shutdown()
    assert dict(otel.stream_span().attributes or {})[semconv.OUTCOME] == "complete"
    assert second.spans() == []
    assert otel.nonzero_outcomes() == {"complete": 1}


def test_the_clients_option_patches_only_those_clients(server: SSEServer, client: Client) -> None:
    originals = current(ALL_PATCHED)
    with instrumented(clients=["requests"]) as otel:
        now = current(ALL_PATCHED)
        for target in ALL_PATCHED:
            if target in REQUESTS_PATCHED:
                assert now[target].__wrapped__ is originals[target]
            else:
                assert now[target] is originals[target]
        stream(client, server.url(CHAT_PATH))
        assert len(otel.spans()) == (1 if client.library == "requests" else 0)


def test_an_unknown_client_is_refused_and_nothing_is_patched() -> None:
    originals = current(ALL_PATCHED)
    telemetry = Telemetry()
    try:
        with pytest.raises(ValueError, match="bogus"):
            telemetry.install(clients=["httpx", "bogus"])
        assert current(ALL_PATCHED) == originals
        assert not SSEInstrumentor().is_instrumented_by_opentelemetry
    finally:
        telemetry.uninstall()


@pytest.mark.parametrize(
    ("options", "env"),
    [
        pytest.param({"excluded_urls": ["/excluded/"]}, {}, id="list"),
        pytest.param({"excluded_urls": "/nowhere/, /excluded/"}, {}, id="comma-separated"),
        pytest.param({}, {EXCLUDED_URLS_ENV: "/nowhere/,/excluded/"}, id="env"),
        pytest.param({}, {"OTEL_PYTHON_EXCLUDED_URLS": "/excluded/"}, id="general-env"),
    ],
)
def test_excluded_urls_are_not_observed(
    server: SSEServer,
    monkeypatch: pytest.MonkeyPatch,
    client: Client,
    options: dict[str, Any],
    env: dict[str, str],
) -> None:
    for name in (EXCLUDED_URLS_ENV, "OTEL_PYTHON_EXCLUDED_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with instrumented(**options) as otel:
        excluded = stream(client, server.url(EXCLUDED_PATH))
        kept = stream(client, server.url(CHAT_PATH))
        assert excluded == read_fixture(BODIES[EXCLUDED_PATH])
        assert kept == read_fixture(BODIES[CHAT_PATH])
        # One span, and the kept URL's (the excluded one would be incomplete).
        assert dict(otel.stream_span().attributes or {})[semconv.OUTCOME] == "complete"
        assert otel.nonzero_outcomes() == {"complete": 1}
