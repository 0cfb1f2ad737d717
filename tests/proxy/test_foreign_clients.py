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
probing, ``_job_for``): chunked, where the body lacks its last chunk (through the proxy every
client fails: curl exits 18, the Node SDK throws; straight from the provider Node 20's fetch
alone takes it for a clean end, an undici bug: see ``_compare_sdk``), and close-delimited, where
the cut ends in a clean EOF that no client notices, but the span still says truncated.

The SDKs' read timeout is ``CLIENT_TIMEOUT`` (``client.mjs`` adds one around fetch: the Node
SDK's own timeout stops at the headers). curl has none, so only the stalled stream gets a whole
transfer deadline (``--max-time``); the other cases run free of any timing threshold.

Tests fail, never skip, when node, the npm modules (``npm ci --prefix tests/proxy/node``) or curl
are missing. The full sweep is ``slow``; a representative few run in the fast loop.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
import socket
import subprocess
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
    JOB_HEADER,
    SCENARIO_HEADER,
    SCENARIOS,
    UNSUPPORTED,
    FakeProvider,
    request_for,
)

from .conftest import CLIENT_TIMEOUT, MAX_WAIT, RunningProxy

pytestmark = pytest.mark.e2e  # other languages' clients (Node) through the proxy

NODE_DIR = Path(__file__).parent / "node"
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


# -- what a client saw -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Seen:
    """What an SDK gave the application. ``message`` is shown on failure, never compared (it may
    name the URL it was sent to)."""

    events: tuple[str, ...]  # chunk objects or event types, in order
    text: str
    tool_arguments: str
    finish: str | None  # the finish or stop reason, or the Responses API's final status
    error: tuple[str, int | None] | None  # the exception's class and HTTP status
    message: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class CurlSeen:
    """What curl wrote: the body's exact bytes (shown by size and digest: they may be 9 MiB),
    the status and curl's exit code; ``stderr`` is shown on failure, never compared."""

    status: int
    body: bytes = dataclasses.field(repr=False)
    exit_code: int
    stderr: str = dataclasses.field(default="", compare=False)
    body_size: int = dataclasses.field(init=False, compare=False)
    body_sha256: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "body_size", len(self.body))
        object.__setattr__(self, "body_sha256", hashlib.sha256(self.body).hexdigest()[:16])


def _tools_for(scenario: str) -> bool:
    return scenario.startswith("tool_call")


def _headers(scenario: str, job: int) -> dict[str, str]:
    return {SCENARIO_HEADER: scenario, JOB_HEADER: str(job)}


def _error(exc: BaseException) -> tuple[tuple[str, int | None], str]:
    return (type(exc).__name__, getattr(exc, "status_code", None)), str(exc)


def _node(base: str, route: str, scenario: str, job: int) -> Seen:
    node = shutil.which("node")
    assert node is not None, "node is not installed (the Node OpenAI SDK client needs it)"
    assert (NODE_DIR / "node_modules" / "openai").is_dir(), (
        f"the npm modules are missing: npm ci --prefix {NODE_DIR}"
    )
    done = subprocess.run(
        [
            node,
            str(NODE_DIR / "client.mjs"),
            f"--base-url={base}/v1",
            f"--route={'chat' if route == CHAT else 'responses'}",
            f"--scenario={scenario}",
            f"--job={job}",
            f"--timeout={CLIENT_TIMEOUT}",
        ],
        capture_output=True,
        text=True,
        timeout=MAX_WAIT,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.count("\n") == 1, (done.stdout, done.stderr)
    seen = json.loads(done.stdout)
    error = seen["error"]
    return Seen(
        tuple(seen["events"]),
        "".join(seen["text"]),
        seen["tool_arguments"],
        seen["finish_reason"],
        None if error is None else (error["name"], error["status"]),
        "" if error is None else f"{error['message']} (cause: {error['cause']})",
    )


def _curl(base: str, route: str, scenario: str, job: int, head: Path) -> CurlSeen:
    curl = shutil.which("curl")
    assert curl is not None, "curl is not installed"
    path, body = request_for(route, DEFAULT_MODELS[route], tools=_tools_for(scenario))
    headers = [f"{name}: {value}" for name, value in _headers(scenario, job).items()]
    # curl has no read timeout (--speed-time averages over a window of seconds, longer than
    # the stall), so the stalled stream alone gets a deadline for the whole transfer; the
    # others are bounded by the subprocess's timeout only.
    deadline = ["--max-time", str(CLIENT_TIMEOUT)] if scenario == "timeout" else []
    done = subprocess.run(
        [
            curl,
            "-sS",
            "-N",
            "--noproxy",
            "*",
            *deadline,
            "--dump-header",
            str(head),
            "-H",
            "content-type: application/json",
            *(option for header in headers for option in ("-H", header)),
            "--data-binary",
            json.dumps(body),
            base + path,
        ],
        capture_output=True,
        timeout=MAX_WAIT,
        check=False,
    )
    status_line = head.read_text("latin-1").partition("\r\n")[0]
    return CurlSeen(
        int(status_line.split(" ")[1]), done.stdout, done.returncode, done.stderr.decode()
    )


def _openai(base: str, route: str, scenario: str, job: int) -> Seen:
    _, body = request_for(route, DEFAULT_MODELS[route], tools=_tools_for(scenario))
    events: list[str] = []
    text, arguments, finish = "", "", None
    try:
        with openai.OpenAI(
            base_url=f"{base}/v1", api_key="demo", max_retries=0, timeout=CLIENT_TIMEOUT
        ) as client:
            api: Any = client.chat.completions if route == CHAT else client.responses
            with api.create(**body, extra_headers=_headers(scenario, job)) as stream:
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
            client.messages.stream(**body, extra_headers=_headers(scenario, job)) as stream,
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


# -- truncation framing ----------------------------------------------------------------------------


@functools.cache
def _job_for(port: int, route: str, framing: str) -> int:
    """A job number the provider on ``port`` cuts with ``framing`` when truncated (a job's draws
    follow from the provider's seed and the number alone)."""
    path, body = request_for(route, DEFAULT_MODELS[route], tools=False)
    data = json.dumps(body).encode()
    for job in range(100, 164):
        lines = [
            f"POST {path} HTTP/1.1",
            "host: 127.0.0.1",
            "content-type: application/json",
            f"content-length: {len(data)}",
            *(f"{name}: {value}" for name, value in _headers("truncated", job).items()),
        ]
        with socket.create_connection(("127.0.0.1", port), timeout=MAX_WAIT) as connection:
            connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
            head = b""
            while b"\r\n\r\n" not in head and (piece := connection.recv(4096)):
                head += piece
        chunked = b"transfer-encoding: chunked" in head.lower()
        if chunked is (framing == "chunked"):
            return job
    raise AssertionError(f"no job in 100..163 truncates {route} with {framing} framing")


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
    job = JOB if framing is None else _job_for(provider.port, route, framing)
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
    assert (through.status, through.exit_code, through.body_size, through.body_sha256) == (
        direct.status,
        direct.exit_code,
        direct.body_size,
        direct.body_sha256,
    ), (through, direct)
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
