"""The registry: detection from the request, registration, and what every route declares."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from otelsse import Outcome, detect_route, register_route
from otelsse.routes import (
    BUILT_IN,
    BUILT_IN_PROFILES,
    OpenAIChatRoute,
    Request,
    Route,
    get_route,
    make_adapter,
    match_route,
    register_host,
    route_names,
    unregister_host,
    unregister_route,
)
from tests._fixtures import read_fixture
from tests._helpers import run_monitor


@pytest.mark.parametrize(
    ("method", "url", "content_type", "route"),
    [
        ("POST", "https://api.openai.com/v1/chat/completions", None, "openai.chat_completions"),
        (
            "POST",
            "https://x.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=1",
            "text/event-stream",
            "openai.chat_completions",
        ),
        ("POST", "https://api.openai.com/v1/responses", None, "openai.responses"),
        ("GET", "https://api.openai.com/v1/responses/resp_1?stream=true", None, "openai.responses"),
        ("GET", "https://api.openai.com/v1/responses/resp_1", "application/json", None),
        ("post", "https://api.anthropic.com/v1/messages", None, "anthropic.messages"),
        (
            "POST",
            "https://eu-aiplatform.googleapis.com/v1/projects/p/locations/l/publishers/anthropic/"
            "models/claude:streamRawPredict",
            None,
            "anthropic.messages",
        ),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/models/gemini:streamGenerateContent"
            "?alt=sse",
            "text/event-stream; charset=utf-8",
            "gemini.generate_content",
        ),
        ("POST", "https://example.com/v1/events", "text/event-stream; charset=utf-8", "auto"),
        ("POST", "https://example.com/v1/events", "Text/Event-Stream", "auto"),
        ("POST", "https://example.com/v1/events", "application/json", None),
        ("GET", "https://example.com/", None, None),
    ],
)
def test_detect_route(method: str, url: str, content_type: str | None, route: str | None) -> None:
    assert detect_route(method, url, content_type) == route


class AcmeChat(OpenAIChatRoute):
    """An OpenAI-compatible server at its own path that ends without ``[DONE]``."""

    name = "acme.chat"
    require_done = False

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/v1/acme/chat")


def test_a_registered_route_is_detected_first_and_builds_its_adapter() -> None:
    assert register_route(AcmeChat) is AcmeChat
    try:
        assert "acme.chat" in route_names()
        assert get_route("acme.chat") is AcmeChat
        assert detect_route("POST", "https://llm.acme.example/v1/acme/chat") == "acme.chat"
        body = read_fixture("edge/chat-stop-without-done.sse")
        _, strict = run_monitor([body], route="openai.chat_completions")
        _, lenient = run_monitor([body], route="acme.chat")
        assert strict.outcome is Outcome.TERMINAL_MISSING
        assert lenient.outcome is Outcome.COMPLETE
        with pytest.raises(ValueError, match="already registered"):
            register_route(AcmeChat)
        register_route(AcmeChat, replace=True)
    finally:
        unregister_route("acme.chat")
    assert detect_route("POST", "https://llm.acme.example/v1/acme/chat") is None


def test_what_a_request_matched_is_forgotten_when_routes_or_hosts_change() -> None:
    # match_route remembers its latest answers: a change of routes or hosts must reach them.
    acme = Request("POST", "llm.acme.example", "/v1/acme/chat")
    chat = Request("POST", "gw.acme.example", "/v1/chat/completions")
    assert match_route(acme) is None
    assert match_route(chat) is OpenAIChatRoute
    register_route(AcmeChat)
    try:
        assert match_route(acme) is AcmeChat
    finally:
        unregister_route("acme.chat")
    assert match_route(acme) is None
    register_host("gw.acme.example", "openai.chat_completions:no_done")
    try:
        profile = match_route(chat)
        assert profile is not None
        assert profile.full_name() == "openai.chat_completions:no_done"
    finally:
        unregister_host("gw.acme.example")
    assert match_route(chat) is OpenAIChatRoute


class _Nameless(Route):
    pass


class _Generic(Route):
    name = "generic"


class _Auto(Route):
    name = "auto"


@pytest.mark.parametrize(
    ("route", "error", "match"),
    [
        (OpenAIChatRoute(), TypeError, "Route subclass"),
        (dict, TypeError, "Route subclass"),
        (_Nameless, ValueError, "declares no name"),
        (_Generic, ValueError, "built in"),
        (_Auto, ValueError, "built in"),
    ],
)
def test_only_a_named_route_class_of_its_own_can_be_registered(
    route: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        register_route(route)  # type: ignore[arg-type]
    assert route_names() == [*(r.full_name() for r in (*BUILT_IN, *BUILT_IN_PROFILES)), "auto"]


def test_unknown_route_name_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="unknown route"):
        make_adapter("nope")


@pytest.mark.parametrize("route", [r for r in BUILT_IN if r.example_request], ids=lambda r: r.name)
def test_every_route_recognises_its_own_example_request(route: type[Route]) -> None:
    assert route.example_request is not None
    method, target = route.example_request
    assert detect_route(method, f"https://api.example.com{target}") == route.name


@pytest.mark.parametrize(
    ("url", "streams"),
    [
        ("https://g.example.com/v1beta/models/m:streamGenerateContent?alt=sse", True),
        ("https://g.example.com/v1beta/models/m:streamGenerateContent", False),
        (
            "https://v.example.com/v1/projects/p/publishers/anthropic/models/c:streamRawPredict",
            True,
        ),
        ("https://a.example.com/v1/messages", False),
        ("https://o.example.com/v1/responses/resp_1?stream=true", True),
        ("https://o.example.com/v1/chat/completions", False),
    ],
)
def test_a_url_alone_may_ask_for_a_stream(url: str, streams: bool) -> None:
    """What a route declares about URLs that stream without a ``"stream": true`` body."""
    parts = urlsplit(url)
    method = "GET" if "/responses/" in parts.path else "POST"
    request = Request(method, parts.hostname or "", parts.path, parts.query)
    route = get_route(detect_route(method, url) or "generic")
    assert route.matches(request)
    assert route.always_streams(request) is streams
