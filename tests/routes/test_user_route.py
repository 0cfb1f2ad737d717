"""A route of the user's own (``cohere_chat.py``): one module of public names and one
``register_route`` line make detection, sniffing and classification use it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import otelsse
import otelsse.routes
from otelsse import Outcome, StreamMonitor, detect_route, register_route
from otelsse.routes import unregister_route
from tests._fixtures import read_fixture
from tests._helpers import run_monitor
from tests.routes.cohere_chat import CohereChatRoute

COHERE = "real/cohere-v2-chat-tool-call.sse"


@pytest.fixture
def cohere() -> Iterator[type[CohereChatRoute]]:
    register_route(CohereChatRoute)
    try:
        yield CohereChatRoute
    finally:
        unregister_route(CohereChatRoute.name)


def test_the_route_uses_public_names_only() -> None:
    tree = ast.parse(Path(__file__).with_name("cohere_chat.py").read_text())
    imported = {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("otelsse")
        for alias in node.names
    }
    assert imported
    public = {"otelsse": otelsse.__all__, "otelsse.routes": otelsse.routes.__all__}
    for module, name in imported:
        assert name in public.get(module or "", ()), (module, name)


def test_unregistered_the_stream_is_generic() -> None:
    _, report = run_monitor([read_fixture(COHERE)])
    assert (report.route, report.outcome) == ("generic", Outcome.EOF_UNVERIFIED)
    assert detect_route("POST", "https://api.cohere.com/v2/chat") is None


def test_registered_it_is_detected_sniffed_and_judged(cohere: type[CohereChatRoute]) -> None:
    assert detect_route("POST", "https://api.cohere.com/v2/chat") == "cohere.chat"
    body = read_fixture(COHERE)
    _, named = run_monitor([body], route="cohere.chat")
    _, sniffed = run_monitor([body], route="auto")
    assert named == sniffed
    assert (named.route, named.outcome, named.stop_reason) == (
        "cohere.chat",
        Outcome.COMPLETE,
        "TOOL_CALL",
    )
    assert (named.tool_call_count, named.tool_call_invalid_count) == (2, 0)
    assert (named.input_tokens, named.output_tokens) == (968, 83)
    assert named.provider_name == "cohere"
    assert named.anomalies == {}


def test_its_rules_judge_a_cut_stream(cohere: type[CohereChatRoute]) -> None:
    body = read_fixture(COHERE)
    cut = body[: body.index(b"event: message-end")]
    monitor = StreamMonitor(CohereChatRoute)
    monitor.feed(cut)
    report = monitor.close()
    assert report.outcome is Outcome.TRUNCATED
    assert report.open_accumulator_count == 0
    assert report.tool_call_count == 2
