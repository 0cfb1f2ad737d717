"""``instrument()``'s options: each reaches every observed stream (extra routes, limits, the model
cap), and a misspelt one is refused or reported rather than ignored.

Real server on 127.0.0.1 (tests/_server.py), real httpx client, real SDK (tests/_otel.py).
Clients, excluded URLs and idempotence are covered in test_zero_code.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

import otelsse
from otelsse import Limits, semconv
from otelsse._clients import get_client
from otelsse._instrumentor import HOST_PROFILES_ENV, OPTIONS, SSEInstrumentor
from otelsse._telemetry import OTHER
from otelsse.routes import OpenAIChatRoute, Request, match_route, route_names
from tests._fixtures import read_fixture
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT = "real/openai-chat-text.sse"


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


def stream(url: str, model: str = "gpt-x") -> bytes:
    body = {"model": model, "stream": True}
    with httpx.Client() as client, client.stream("POST", url, json=body) as response:
        return response.read()


class WriterChat(OpenAIChatRoute):
    """A chat-compatible server without [DONE]: only its own route calls the stream complete."""

    name = "writer.chat"
    require_done = False

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path == "/v1/writer/chat"


def test_an_extra_route_is_used_while_instrumented_and_removed_after(server: SSEServer) -> None:
    body = read_fixture(CHAT).replace(b"data: [DONE]\n\n", b"")
    url = server.route("/v1/writer/chat", Reply(body))
    otel = Telemetry().install(routes=[WriterChat])
    try:
        assert stream(url) == body
        span = otel.stream_span()
        assert span.attributes is not None
        assert span.attributes[semconv.ROUTE] == "writer.chat"
        assert span.attributes[semconv.OUTCOME] == "complete"
    finally:
        otel.uninstall()
    assert "writer.chat" not in route_names()
    assert match_route(Request("POST", "127.0.0.1", "/v1/writer/chat")) is None


def test_limits_apply_to_every_observed_stream(server: SSEServer) -> None:
    body = read_fixture(CHAT)
    url = server.route("/v1/chat/completions", Reply(body))
    otel = Telemetry().install(limits=Limits(max_line_bytes=64))
    try:
        assert stream(url) == body  # the application's stream is never affected
        span = otel.stream_span()
        assert span.attributes is not None
        assert span.attributes[semconv.OUTCOME] == "buffer_limit"
        assert span.attributes[semconv.BUFFER_LIMIT_STAGE] == "line"
    finally:
        otel.uninstall()


def test_model_names_beyond_the_cap_are_other(server: SSEServer) -> None:
    url = server.route("/v1/chat/completions", Reply(read_fixture(CHAT)))
    otel = Telemetry().install(max_model_names=2)
    try:
        for n in range(3):
            stream(url, f"model-{n}")
        counted = {
            p.attributes[semconv.GEN_AI_REQUEST_MODEL]
            for p in otel.points(semconv.STREAMS.name)
            if p.value
        }
        assert counted == {"model-0", "model-1", OTHER}
        # Spans are per stream, not series: they keep the model as asked.
        assert {s.attributes[semconv.GEN_AI_REQUEST_MODEL] for s in otel.spans()} == {
            "model-0",
            "model-1",
            "model-2",
        }
    finally:
        otel.uninstall()


def test_max_server_addresses_caps_the_hosts_in_metrics(server: SSEServer) -> None:
    url = server.route("/v1/chat/completions", Reply(read_fixture(CHAT)))
    otel = Telemetry().install(max_server_addresses=1)
    try:
        for host in ("127.0.0.1", "localhost"):
            stream(url.replace("127.0.0.1", host))
        counted = {
            p.attributes[semconv.SERVER_ADDRESS]
            for p in otel.points(semconv.STREAMS.name)
            if p.value
        }
        assert counted == {"127.0.0.1", OTHER}
    finally:
        otel.uninstall()


def test_host_profiles_choose_the_rules_for_a_host_of_your_own(server: SSEServer) -> None:
    """A gateway without ``[DONE]``: terminal_missing by the strict rule, complete by its
    profile."""
    body = read_fixture(CHAT).replace(b"data: [DONE]\n\n", b"")
    url = server.route("/v1/chat/completions", Reply(body))
    for option, outcome, profile in [
        ({}, "terminal_missing", None),
        (
            {"host_profiles": {"127.0.0.1": "openai.chat_completions:no_done"}},
            "complete",
            "no_done",
        ),
    ]:
        otel = Telemetry().install(**option)
        try:
            assert stream(url) == body
            attributes = otel.stream_span().attributes
            assert attributes is not None
            assert attributes[semconv.OUTCOME] == outcome
            assert attributes.get(semconv.ROUTE_PROFILE) == profile
            # The answer reached its final stop: no "error" among its finish reasons.
            assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        finally:
            otel.uninstall()
    assert match_route(Request("POST", "127.0.0.1", "/v1/chat/completions")) is OpenAIChatRoute


def test_host_profiles_from_the_environment_skip_unknown_entries(
    server: SSEServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    body = read_fixture(CHAT).replace(b"data: [DONE]\n\n", b"")
    url = server.route("/v1/chat/completions", Reply(body))
    monkeypatch.setenv(
        HOST_PROFILES_ENV, "x.example=nope:nope, 127.0.0.1=openai.chat_completions:no_done,"
    )
    with caplog.at_level(logging.WARNING, logger="otelsse"):
        otel = Telemetry().install()
    try:
        stream(url)
        attributes = otel.stream_span().attributes
        assert attributes is not None
        assert attributes[semconv.OUTCOME] == "complete"
    finally:
        otel.uninstall()
    assert [r.getMessage() for r in caplog.records] == [
        f"otelsse ignores the {HOST_PROFILES_ENV} entry 'x.example=nope:nope'"
    ]


def test_a_wrong_host_profile_option_is_a_value_error() -> None:
    for option in ({"h": "openai.chat_completions"}, {"h": "openai.chat_completions:nope"}):
        with pytest.raises(ValueError, match="host_profiles"):
            otelsse.instrument(host_profiles=option)
    assert not SSEInstrumentor().is_instrumented_by_opentelemetry


@pytest.mark.parametrize("option", ["limit", "clientz", "tracer"])
def test_an_unknown_option_is_a_type_error_naming_the_valid_ones(option: str) -> None:
    with pytest.raises(TypeError, match=option) as caught:
        otelsse.instrument(**{option: None})
    assert all(name in str(caught.value) for name in OPTIONS)
    assert not SSEInstrumentor().is_instrumented_by_opentelemetry
    assert not hasattr(httpx.Client.send, "__wrapped__")


def test_a_bad_excluded_url_pattern_is_warned_about_once_and_the_rest_still_apply(
    server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    body = read_fixture(CHAT)
    kept = server.route("/v1/chat/completions", Reply(body))
    excluded = server.route("/internal/v1/chat/completions", Reply(body))
    with caplog.at_level(logging.WARNING, logger="otelsse"):
        otel = Telemetry().install(excluded_urls="[unclosed, /internal/")
    try:
        warnings = [r for r in caplog.records if r.name == "otelsse"]
        assert len(warnings) == 1
        assert warnings[0].levelno == logging.WARNING
        assert "[unclosed" in warnings[0].getMessage()
        assert stream(excluded) == body
        assert otel.spans() == []  # the valid pattern still excludes
        assert stream(kept) == body
        assert otel.stream_span().attributes[semconv.OUTCOME] == "complete"  # type: ignore[index]
    finally:
        otel.uninstall()


def test_a_client_library_of_a_shape_otelsse_does_not_know_costs_that_library_only(
    server: SSEServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A library whose methods cannot be wrapped (here: one target it lacks, after one it has)
    is left exactly as it was, counted (stage ``patch``) and warned about; every other library
    is instrumented, as an optional part's failure must never disable the rest."""
    import requests

    library = get_client("httpx")
    known = library.targets()
    missing = (httpx.Client, "no_such_method", known[0][2])
    monkeypatch.setattr(library, "targets", lambda: [*known, missing])
    url = server.route("/v1/chat/completions", Reply(read_fixture(CHAT)))
    with caplog.at_level(logging.WARNING, logger="otelsse"):
        otel = Telemetry().install()
    try:
        assert not hasattr(httpx.Client.send, "__wrapped__")  # the first target was undone
        assert stream(url) == read_fixture(CHAT)
        assert otel.spans() == []
        with requests.post(url, json={"model": "m", "stream": True}, stream=True) as response:
            assert response.content == read_fixture(CHAT)
        assert (otel.stream_span().attributes or {})[semconv.OUTCOME] == "complete"
        errors = otel.errors_by_stage()
    finally:
        otel.uninstall()
    assert errors["patch"] == 1
    assert sum(errors.values()) == 1
    assert ["httpx" in r.getMessage() for r in caplog.records] == [True]
