"""A route of the user's own (``mistral_conversations.py``): one module of public names and one
``register_route`` line make detection, sniffing and classification use it.

Its stream, ``edge/mistral-conversation-function-call.sse``, is hand-made from the mistralai
SDK's event models (the route module cites them): text, one function call in three argument
fragments, then ``conversation.response.done`` with usage.
"""

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
from tests.routes.mistral_conversations import MistralConversationsRoute

MISTRAL = "edge/mistral-conversation-function-call.sse"
URL = "https://api.mistral.ai/v1/conversations"


@pytest.fixture
def mistral() -> Iterator[type[MistralConversationsRoute]]:
    register_route(MistralConversationsRoute)
    try:
        yield MistralConversationsRoute
    finally:
        unregister_route(MistralConversationsRoute.name)


def test_the_route_uses_public_names_only() -> None:
    tree = ast.parse(Path(__file__).with_name("mistral_conversations.py").read_text())
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
    _, report = run_monitor([read_fixture(MISTRAL)])
    assert (report.route, report.outcome) == ("generic", Outcome.EOF_UNVERIFIED)
    assert detect_route("POST", URL) is None


def test_registered_it_is_detected_sniffed_and_judged(
    mistral: type[MistralConversationsRoute],
) -> None:
    assert detect_route("POST", URL) == "mistral.conversations"
    assert detect_route("POST", URL + "/conv_0683e9c7a0a77a2d/restart") == "mistral.conversations"
    body = read_fixture(MISTRAL)
    _, named = run_monitor([body], route="mistral.conversations")
    _, sniffed = run_monitor([body], route="auto")
    assert named == sniffed
    assert (named.route, named.outcome, named.stop_reason) == (
        "mistral.conversations",
        Outcome.COMPLETE,
        None,
    )
    assert (named.tool_call_count, named.tool_call_invalid_count) == (1, 0)
    assert (named.input_tokens, named.output_tokens) == (92, 31)
    assert named.provider_name == "mistral_ai"
    assert named.anomalies == {}


def test_its_rules_judge_a_cut_stream_and_an_error(
    mistral: type[MistralConversationsRoute],
) -> None:
    body = read_fixture(MISTRAL)
    cut = body[: body.index(b"event: conversation.response.done")]
    monitor = StreamMonitor(MistralConversationsRoute)
    monitor.feed(cut)
    report = monitor.close()
    assert report.outcome is Outcome.TRUNCATED
    assert (report.open_accumulator_count, report.tool_call_count) == (1, 1)
    error = (
        b"event: conversation.response.error\n"
        b'data: {"type":"conversation.response.error","message":"overloaded","code":3000}\n\n'
    )
    _, failed = run_monitor([cut + error], route="mistral.conversations")
    assert (failed.outcome, failed.provider_error_code) == (Outcome.PROVIDER_ERROR, "3000")
