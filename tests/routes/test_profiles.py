"""Host profiles: gateways that bend a contract on purpose are judged by their own rules.

Writer never sends ``[DONE]``; Snowflake Cortex never sends a ``finish_reason`` (sources in
docs/users/gateways.md; their recorded streams are in tests/fixtures/real/). Without its profile a
complete Writer stream is ``terminal_missing`` and a complete Snowflake stream ``truncated``.
OpenAI's own API, and any host without a profile, keeps the strict rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from otelsse import Outcome, StreamFault, read_stream
from otelsse.routes import (
    OpenAIChatRoute,
    detect_route,
    get_route,
    register_host,
    register_route,
    route_names,
    unregister_host,
    unregister_route,
)
from tests._fixtures import EXPECTED, read_fixture
from tests._helpers import run_monitor


def _chunk(delta: dict[str, object], finish: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()


#: Writer: the finish chunk, then EOF.
NO_DONE = _chunk({"content": "Hi"}, None) + b"\n\n" + _chunk({}, "stop") + b"\n\n"
#: Snowflake Cortex: text, a usage chunk, ``[DONE]``; never a finish_reason.
NO_FINISH = (
    _chunk({"content": "Hi"}, None)
    + b"\n\n"
    + b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("url", "body", "route"),
    [
        ("https://api.writer.com/v1/chat", NO_DONE, "openai.chat_completions:no_done"),
        (
            "https://acme-x1.snowflakecomputing.com/api/v2/cortex/v1/chat/completions",
            NO_FINISH,
            "openai.chat_completions:no_finish_reason",
        ),
    ],
)
def test_a_documented_gateway_is_read_by_its_profile(url: str, body: bytes, route: str) -> None:
    assert detect_route("POST", url) == route
    _, report = run_monitor([body], route=route)
    assert (report.outcome, report.route, report.route_profile) == (
        Outcome.COMPLETE,
        "openai.chat_completions",
        route.partition(":")[2],
    )
    assert read_stream([body], route).text == "Hi"


@pytest.mark.parametrize("body", [NO_DONE, NO_FINISH])
def test_openai_and_unknown_hosts_keep_the_strict_rule(body: bytes) -> None:
    for url in (
        "https://api.openai.com/v1/chat/completions",
        "https://llm.internal.example/v1/chat/completions",
        "https://snowflakecomputing.com.evil.example/v1/chat/completions",
    ):
        route = detect_route("POST", url)
        assert route == "openai.chat_completions", url
        _, report = run_monitor([body], route=route)
        assert report.outcome is (
            Outcome.TERMINAL_MISSING if body is NO_DONE else Outcome.TRUNCATED
        )
        assert report.route_profile is None
        with pytest.raises(StreamFault, match=report.outcome.value):
            read_stream([body], route)


#: Where the recordings were made (Writer's and Snowflake's as recorded; Cloudflare's account id
#: was replaced by its recorder), and hosts no profile covers.
WRITER_URL = "https://api.writer.com/v1/chat"
SNOWFLAKE_URL = "https://myorg-myaccount.snowflakecomputing.com/api/v2/cortex/v1/chat/completions"
CLOUDFLARE_URLS = (
    "https://api.cloudflare.com/client/v4/accounts/acct/ai/v1/chat/completions",
    "https://gateway.ai.cloudflare.com/v1/acct/gw/compat/chat/completions",
)
ELSEWHERE = (
    "https://api.openai.com/v1/chat/completions",
    "https://llm.internal.example/v1/chat/completions",
)


def recorded_answer(body: bytes) -> tuple[str, list[tuple[str | None, object]]]:
    """The answer as the recording's own chunks spell it: choice 0's text, and each tool call's
    name and parsed arguments (read here with ``json``, not by the route under test)."""
    text = ""
    calls: dict[int, tuple[str | None, str]] = {}
    for line in body.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line.removeprefix("data: "))["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for fragment in delta.get("tool_calls") or []:
                name, arguments = calls.get(fragment["index"], (None, ""))
                function = fragment.get("function") or {}
                calls[fragment["index"]] = (
                    name or function.get("name"),
                    arguments + (function.get("arguments") or ""),
                )
    return text, [(name, json.loads(arguments)) for _, (name, arguments) in sorted(calls.items())]


def assert_read_as_recorded(body: bytes, route: str) -> None:
    result = read_stream([body], route)
    text, calls = recorded_answer(body)
    assert result.text == text
    assert [(call.name, call.arguments) for call in result.tool_calls] == calls


@pytest.mark.parametrize(
    ("name", "url", "profile"),
    [
        ("real/writer-chat-no-done.sse", WRITER_URL, "no_done"),
        ("real/writer-chat-tool-call-no-done.sse", WRITER_URL, "no_done"),
        (
            "real/snowflake-cortex-chat-thinking-no-finish-reason.sse",
            SNOWFLAKE_URL,
            "no_finish_reason",
        ),
    ],
)
def test_a_recorded_gateway_stream_is_complete_under_its_host_profile_only(
    name: str, url: str, profile: str
) -> None:
    body = read_fixture(name)
    route = detect_route("POST", url)
    assert route == f"openai.chat_completions:{profile}"
    _, report = run_monitor([body], route=route)
    assert (report.outcome, report.stop_reason, report.route_profile) == (
        Outcome.COMPLETE,
        EXPECTED[name].stop_reason,
        profile,
    )
    assert_read_as_recorded(body, route)
    # Elsewhere the default rule's verdict, the one the fixture manifest holds: Writer's
    # terminal_missing, Snowflake's truncated.
    elsewhere = Outcome(EXPECTED[name].outcome)
    assert elsewhere is not Outcome.COMPLETE
    for other in ELSEWHERE:
        plain = detect_route("POST", other)
        assert plain == "openai.chat_completions", other
        _, report = run_monitor([body], route=plain)
        assert (report.outcome, report.route_profile) == (elsewhere, None), other
        with pytest.raises(StreamFault) as refused:
            read_stream([body], plain)
        assert refused.value.code == elsewhere.value, other


def test_a_recorded_cloudflare_stream_is_complete_without_a_profile() -> None:
    """Cloudflare Workers AI sends its finish reason (twice) and ``[DONE]``: nothing to bend."""
    body = read_fixture("real/cloudflare-workers-ai-chat-tool-call.sse")
    for url in (*CLOUDFLARE_URLS, *ELSEWHERE):
        route = detect_route("POST", url)
        assert route == "openai.chat_completions", url
        _, report = run_monitor([body], route=route)
        assert (report.outcome, report.stop_reason, report.route_profile) == (
            Outcome.COMPLETE,
            "tool_calls",
            None,
        ), url
        assert_read_as_recorded(body, route)


def test_a_profile_still_refuses_what_its_bend_does_not_allow() -> None:
    """``no_done`` forgives the missing ``[DONE]``, never a missing finish or a cut stream."""
    cut = _chunk({"content": "Hi"}, None) + b"\n\n"
    _, report = run_monitor([cut], route="openai.chat_completions:no_done")
    assert report.outcome is Outcome.TRUNCATED
    error = NO_FINISH.replace(b'"choices": []', b'"choices": [], "error": {"code": "x"}')
    _, report = run_monitor([error], route="openai.chat_completions:no_finish_reason")
    assert report.outcome is Outcome.PROVIDER_ERROR


@pytest.fixture
def own_host() -> Iterator[str]:
    host = "llm.internal.example"
    register_host(host, "openai.chat_completions:no_done")
    yield host
    unregister_host(host)


def test_a_host_of_your_own(own_host: str) -> None:
    url = f"https://{own_host}:8443/v1/chat/completions"
    assert detect_route("POST", url) == "openai.chat_completions:no_done"
    assert detect_route("POST", "https://other.example/v1/chat/completions") == (
        "openai.chat_completions"
    )


def test_a_domain_suffix_covers_its_subdomains_and_entries_come_and_go() -> None:
    register_host(".corp.example", "openai.chat_completions:no_finish_reason")
    try:
        assert detect_route("POST", "https://a.b.corp.example/v1/chat/completions") == (
            "openai.chat_completions:no_finish_reason"
        )
        # A user entry replaces a built-in one; removing it brings the built-in back.
        register_host("api.writer.com", "openai.chat_completions:no_finish_reason")
        assert detect_route("POST", "https://api.writer.com/v1/chat/completions").endswith(
            ":no_finish_reason"
        )
    finally:
        unregister_host(".corp.example")
        unregister_host("api.writer.com")
    assert detect_route("POST", "https://a.b.corp.example/v1/chat/completions") == (
        "openai.chat_completions"
    )
    assert detect_route("POST", "https://api.writer.com/v1/chat") == (
        "openai.chat_completions:no_done"
    )


class _LenientGateway(OpenAIChatRoute):
    profile = "lenient"
    hosts = ("gw.example",)
    require_done = False
    allow_null_finish_reason = True


def test_a_profile_class_of_your_own() -> None:
    register_route(_LenientGateway)
    try:
        assert "openai.chat_completions:lenient" in route_names()
        assert get_route("openai.chat_completions:lenient") is _LenientGateway
        assert detect_route("POST", "https://gw.example/v1/chat/completions") == (
            "openai.chat_completions:lenient"
        )
        with pytest.raises(ValueError, match="already registered"):
            register_route(_LenientGateway)
    finally:
        unregister_route("openai.chat_completions:lenient")
    assert "openai.chat_completions:lenient" not in route_names()
    assert detect_route("POST", "https://gw.example/v1/chat/completions") == (
        "openai.chat_completions"
    )


class _Orphan(OpenAIChatRoute):
    name = "nowhere.chat"
    profile = "x"


class _BadName(OpenAIChatRoute):
    profile = "a:b"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: register_route(_Orphan), ValueError),
        (lambda: register_route(_BadName), ValueError),
        (lambda: register_host("h.example", "openai.chat_completions"), ValueError),
        (lambda: register_host("h.example", "openai.chat_completions:nope"), KeyError),
        (lambda: register_host(" . ", "openai.chat_completions:no_done"), ValueError),
        (
            lambda: register_route(type("Again", (OpenAIChatRoute,), {"profile": "no_done"})),
            ValueError,
        ),
    ],
)
def test_profile_registration_errors(call: object, error: type[Exception]) -> None:
    assert callable(call)
    with pytest.raises(error):
        call()
    # Built-in profiles cannot be unregistered by accident either.
    unregister_route("openai.chat_completions:no_done")
    assert "openai.chat_completions:no_done" in route_names()
