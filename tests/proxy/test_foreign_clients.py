"""Clients the proxy was built for, in other languages and plain: they see the same thing through
the proxy as without it, and the proxy records what happened.

Each fake-provider scenario is sent by each client twice, with the same job number (so the
provider draws the same answer): straight to the provider, then through ``proxy.url("fake")``.
What the client saw must be equal, and the proxy must have recorded exactly one
``otelsse.stream`` span with ``EXPECTED_OUTCOME``, except ``timeout``: the client's read timeout
(``CLIENT_TIMEOUT``) fires first and it hangs up, so through the proxy that stream is
``cancelled`` with ``otelsse.cancel_reason=client_disconnect``.

The clients:

- ``node``: the official OpenAI Node SDK (``node/client.mjs``; Chat Completions and Responses),
  compared on its events, text, tool arguments, finish reason and the error's class and status;
- ``curl``: ``curl -N`` on every route, compared on the exact body bytes (gzip still coded:
  no ``--compressed``), the status and curl's exit code;
- ``openai``: the Python openai SDK (both OpenAI routes), compared as the Node SDK;
- ``anthropic``: the Python anthropic SDK's streaming helper on the Anthropic route, compared on
  its events, text, tool input, stop reason and the error's class and status.

No scenario is left out: every one means something to every client (an HTTP failure is an
exception with a status, a cut or an unended line a short answer or an error, the stall a read
timeout). Only (Gemini, ``tool_call_invalid``) is absent, which the provider itself refuses
(``UNSUPPORTED``: Gemini's tool arguments are JSON objects, they cannot be cut), and the SDKs
are not run on Gemini (no Gemini SDK here; curl covers its route).

``truncated`` runs in both framings, with a job number the provider cuts that way (found by
probing, ``job_for`` in ``_foreign.py``): chunked, where the body lacks its last chunk (through
the proxy every client fails: curl exits 18, the Node SDK throws; straight from the provider
Node 20's fetch alone takes it for a clean end, an undici bug: see ``_compare_sdk``), and
close-delimited, where the cut ends in a clean EOF that no client notices, but the span still
says truncated.

The SDKs' read timeout is ``CLIENT_TIMEOUT`` (``client.mjs`` adds one around fetch: the Node
SDK's own timeout stops at the headers). curl has none, so only the stalled stream gets a whole
transfer deadline (``--max-time``); the other cases run free of any timing threshold.

Tests fail, never skip, when node, the npm modules (``npm ci --prefix tests/proxy/node``) or curl
are missing. The full sweep is ``slow``; a representative few run in the fast loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from otelsse import semconv
from otelsse._demo.provider import (
    DEFAULT_MODELS,
    EXPECTED_OUTCOME,
    HTTP_FAILURES,
    SCENARIOS,
    UNSUPPORTED,
    FakeProvider,
    request_for,
)

from ._foreign import CurlSeen, Seen, headers, job_for, run_curl, run_node
from .conftest import CLIENT_TIMEOUT, RunningProxy

pytestmark = pytest.mark.e2e  # other languages' clients (Node) through the proxy

#: The job number of every request but truncated ones (those are probed for, per framing).
JOB = 23
CHAT, RESPONSES = "openai.chat_completions", "openai.responses"
ANTHROPIC, GEMINI = "anthropic.messages", "gemini.generate_content"
#: The routes each client speaks.
CLIENT_ROUTES: dict[str, tuple[str, ...]] = {
    "node": (CHAT, RESPONSES),
    "curl": (CHAT, RESPONSES, ANTHROPIC, GEMINI),
    "openai": (CHAT, RESPONSES),
    "anthropic": (ANTHROPIC,),
}
#: The cases of the fast loop: every client, and the endings that differ most per client.
FAST = frozenset(
    {
        ("node", CHAT, "complete", None),
        ("node", CHAT, "truncated", "chunked"),
        ("node", CHAT, "truncated", "close"),
        ("node", CHAT, "timeout", None),
        ("node", CHAT, "provider_error", None),
        ("node", RESPONSES, "complete", None),
        ("node", RESPONSES, "rate_limited", None),
        ("curl", CHAT, "complete", None),
        ("curl", CHAT, "truncated", "chunked"),
        ("curl", CHAT, "truncated", "close"),
        ("curl", CHAT, "gzip", None),
        ("curl", ANTHROPIC, "bad_gateway", None),
        ("openai", CHAT, "complete", None),
        ("openai", CHAT, "truncated", "chunked"),
        ("openai", RESPONSES, "provider_error", None),
        ("anthropic", ANTHROPIC, "complete", None),
        ("anthropic", ANTHROPIC, "provider_error", None),
    }
)
HTTP_FAILURE_STATUS = {scenario: status for scenario, (status, *_) in HTTP_FAILURES.items()}
HTTP_FAILURE_STATUS["bad_gateway"] = 502


def _status_for(route: str, scenario: str) -> int:
    """The provider's status for ``scenario`` on ``route`` (Anthropic's overload is a 529)."""
    status = HTTP_FAILURE_STATUS.get(scenario, 200)
    return 529 if (route, status) == (ANTHROPIC, 503) else status


# -- what a client saw (``Seen``, ``CurlSeen``: ``_foreign.py``) ----------------------------------


def _tools_for(scenario: str) -> bool:
    return scenario.startswith("tool_call")


def _error(exc: BaseException) -> tuple[tuple[str, int | None], str]:
    return (type(exc).__name__, getattr(exc, "status_code", None)), str(exc)


def _node(base: str, route: str, scenario: str, job: int) -> Seen:
    return run_node(base, route, scenario, job)[0]


def _curl(base: str, route: str, scenario: str, job: int, head: Path) -> CurlSeen:
    # curl has no read timeout (--speed-time averages over a window of seconds, longer than
    # the stall), so the stalled stream alone gets a deadline for the whole transfer; the
    # others are bounded by the subprocess's timeout only.
    max_time = CLIENT_TIMEOUT if scenario == "timeout" else None
    tools = _tools_for(scenario)
    return run_curl(base, route, scenario, job, head, tools=tools, max_time=max_time)


def _openai(base: str, route: str, scenario: str, job: int) -> Seen:
    _, body = request_for(route, DEFAULT_MODELS[route], tools=_tools_for(scenario))
    events: list[str] = []
    text, arguments, finish = "", "", None
    try:
        with openai.OpenAI(
            base_url=f"{base}/v1", api_key="demo", max_retries=0, timeout=CLIENT_TIMEOUT
        ) as client:
            api: Any = client.chat.completions if route == CHAT else client.responses
            with api.create(**body, extra_headers=headers(scenario, job)) as stream:
                for item in stream:
                    if route == CHAT:
                        events.append(item.object)
                        for choice in item.choices:
                            text += choice.delta.content or ""
                            for call in choice.delta.tool_calls or ():
                                arguments += (call.function and call.function.arguments) or ""
                            finish = choice.finish_reason or finish
                        continue
                    events.append(item.type)
                    if item.type == "response.output_text.delta":
                        text += item.delta
                    elif item.type == "response.function_call_arguments.delta":
                        arguments += item.delta
                    elif item.type in ("response.completed", "response.incomplete"):
                        finish = item.response.status
    except Exception as exc:
        return Seen(tuple(events), text, arguments, finish, *_error(exc))
    return Seen(tuple(events), text, arguments, finish, None)


def _anthropic(base: str, route: str, scenario: str, job: int) -> Seen:
    _, body = request_for(route, DEFAULT_MODELS[route], tools=_tools_for(scenario))
    del body["stream"]  # the streaming helper streams by itself
    events: list[str] = []
    text, arguments, finish = "", "", None
    try:
        with (
            anthropic.Anthropic(
                base_url=base, api_key="demo", max_retries=0, timeout=CLIENT_TIMEOUT
            ) as client,
            client.messages.stream(**body, extra_headers=headers(scenario, job)) as stream,
        ):
            for event in stream:
                events.append(event.type)
                if event.type == "content_block_delta":
                    if event.delta.type == "text_delta":
                        text += event.delta.text
                    elif event.delta.type == "input_json_delta":
                        arguments += event.delta.partial_json
                elif event.type == "message_delta":
                    finish = event.delta.stop_reason
    except Exception as exc:
        return Seen(tuple(events), text, arguments, finish, *_error(exc))
    return Seen(tuple(events), text, arguments, finish, None)


SDKS: dict[str, Callable[[str, str, str, int], Seen]] = {
    "node": _node,
    "openai": _openai,
    "anthropic": _anthropic,
}


# -- the cases -------------------------------------------------------------------------------------


def _cases() -> list[Any]:
    cases = []
    for client, routes in CLIENT_ROUTES.items():
        for route in routes:
            for scenario in SCENARIOS:
                if (route, scenario) in UNSUPPORTED:
                    continue
                for framing in ("chunked", "close") if scenario == "truncated" else (None,):
                    case = (client, route, scenario, framing)
                    name = f"{client}-{route}-{scenario}" + (f"-{framing}" if framing else "")
                    marks = () if case in FAST else (pytest.mark.slow,)
                    cases.append(pytest.param(*case, id=name, marks=marks))
    return cases


def _assert_observed(proxy: RunningProxy, scenario: str) -> None:
    """Exactly one stream span, with the outcome the proxy must report for ``scenario``."""
    spans = proxy.stream_spans()
    assert len(spans) == 1, [dict(span.attributes or {}) for span in spans]
    attributes = dict(spans[0].attributes or {})
    if scenario == "timeout":
        assert attributes[semconv.OUTCOME] == "cancelled", attributes
        assert attributes[semconv.CANCEL_REASON] == "client_disconnect", attributes
    else:
        assert attributes[semconv.OUTCOME] == EXPECTED_OUTCOME[scenario], attributes
    assert len(proxy.server_spans()) == 1


def _assert_sdk_saw(seen: Seen, route: str, scenario: str, framing: str | None) -> None:
    """What the scenario means to an application (so comparing the two runs compares
    something)."""
    status = _status_for(route, scenario)
    if status != 200:
        assert seen.error is not None, seen
        assert seen.error[1] == status, seen
        assert seen.events == (), seen
        return
    if scenario == "timeout" or framing == "chunked":
        # A stall past the read timeout, or a chunked body without its last chunk: never a
        # success, whatever the SDK.
        assert seen.error is not None, seen
        assert seen.finish is None, seen
        return
    if scenario == "provider_error":
        # The chat SDKs raise the error chunk; the Responses API's error event is an event.
        if route == RESPONSES:
            assert (seen.events[-1], seen.error) == ("error", None), seen
        else:
            assert seen.error is not None, seen
        return
    assert seen.error is None, seen
    if scenario in ("endless_line", "truncated", "clean_cut"):
        assert seen.finish is None, seen  # ended early, and nothing told the application
    elif scenario == "incomplete":
        assert seen.finish in ("length", "incomplete", "max_tokens"), seen
    elif scenario.startswith("tool_call"):
        assert seen.finish in ("tool_calls", "completed", "tool_use"), seen
        assert seen.tool_arguments.startswith('{"city": "Paris"'), seen
    else:  # complete, gzip, no_terminal (a whole answer; only its end marker is missing)
        assert seen.finish in ("stop", "completed", "end_turn"), seen
        assert seen.text.startswith("Server-Sent Events end when the provider says so"), seen


def _assert_curl_saw(seen: CurlSeen, route: str, scenario: str, framing: str | None) -> None:
    assert seen.status == _status_for(route, scenario), seen
    # 28: its deadline passed; 18: the chunked body ended before its last chunk.
    exit_code = 28 if scenario == "timeout" else 18 if framing == "chunked" else 0
    assert seen.exit_code == exit_code, seen
    assert seen.body, seen


@pytest.mark.parametrize(("client", "route", "scenario", "framing"), _cases())
def test_the_client_sees_the_same_through_the_proxy(
    provider: FakeProvider,
    proxy: RunningProxy,
    tmp_path: Path,
    client: str,
    route: str,
    scenario: str,
    framing: str | None,
) -> None:
    job = JOB if framing is None else job_for(provider.port, route, framing)
    if client == "curl":
        _compare_curl(provider, proxy, tmp_path, route, scenario, framing, job)
    else:
        _compare_sdk(provider, proxy, client, route, scenario, framing, job)
    _assert_observed(proxy, scenario)


def _compare_curl(
    provider: FakeProvider,
    proxy: RunningProxy,
    tmp_path: Path,
    route: str,
    scenario: str,
    framing: str | None,
    job: int,
) -> None:
    direct = _curl(provider.base_url, route, scenario, job, tmp_path / "direct")
    through = _curl(proxy.url("fake"), route, scenario, job, tmp_path / "through")
    _assert_curl_saw(through, route, scenario, framing)
    # By digest first: pytest's diff of two 9 MiB bodies would bury the report.
    assert through.digest() == direct.digest(), (through, direct)
    assert through.body == direct.body


def _compare_sdk(
    provider: FakeProvider,
    proxy: RunningProxy,
    client: str,
    route: str,
    scenario: str,
    framing: str | None,
    job: int,
) -> None:
    direct = SDKS[client](provider.base_url, route, scenario, job)
    through = SDKS[client](proxy.url("fake"), route, scenario, job)
    _assert_sdk_saw(through, route, scenario, framing)
    if (client, framing) == ("node", "chunked"):
        # Node 20's fetch (undici before nodejs/undici#5273) takes the end of a chunked body
        # that lacks its last chunk for a clean end when the response said ``connection:
        # close``, as the provider's does; the proxy's answer keeps the connection alive, so
        # there the cut is an error, as it should be everywhere.
        assert direct.error in (None, through.error), (through, direct)
        direct = dataclasses.replace(direct, error=through.error)
    assert through == direct, (through, direct)
