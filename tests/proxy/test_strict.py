"""Strict mode through the proxy: what the official OpenAI Node SDK and ``curl -N`` see.

One proxy in front of the fake provider serves three upstreams, all the provider:

- ``off``: strict mode off for it (its own ``strict = false`` over the proxy's);
- ``fake``: the proxy's strict mode (``ProxyConfig.strict``, what ``--strict`` sets): the
  default outcomes;
- ``fake-tm``: its own, the default outcomes and ``terminal_missing``.

Every scenario the issue names (a cut, mid-event or clean, of text or inside a tool call's
arguments; a whole answer without its end marker; invalid tool arguments; a provider's error),
a fault found mid-stream (a line past the ceiling: curl only, the Node SDK would take minutes
over its 9 MiB), and the complete ones, is sent by each client with the same job number (the
provider then draws the same answer) straight to the provider, through ``off`` and through a
strict upstream:

- through ``off``, the client sees what it sees straight from the provider: the same body, byte
  for byte (curl), the same events, text, finish and error (the SDK);
- through a strict upstream, a stream strict mode refuses ends with its route's own error event
  (``Route.strict_error_event``) after whole events the provider sent, then a clean end: curl
  exits 0 and its body ends with that event, never with ``[DONE]``; the Node SDK throws its
  ``APIError`` in its ``for await`` loop, the code and message naming the outcome. A stream it
  accepts is relayed byte for byte: the same as through ``off``.

The proxy's stream span says the outcome and, for a refused stream, ``otelsse.strict.raised``.

A route that declares no error event (a user's own, ``tests/routes/mistral_conversations.py``) has
its refused streams cut: the same bytes, then no clean end of the chunks.

Content coding: a strict upstream is asked for an uncoded body (``accept-encoding: identity``);
one that codes it all the same (the provider's ``gzip`` scenario does) is relayed as it comes
while it is accepted, and cut (no clean end of the chunks) when refused, since no event can be
added to a coded body.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from otelsse import semconv
from otelsse._demo.provider import (
    DEFAULT_MODELS,
    EXPECTED_OUTCOME,
    UNSUPPORTED,
    UNSUPPORTED_WITH_TOOLS,
    FakeProvider,
    Turn,
    request_for,
    script_events,
)
from otelsse._observe import strict_outcomes
from otelsse.proxy import ProxyConfig, Upstream
from otelsse.routes import get_route, register_route, unregister_route
from tests._fixtures import read_fixture
from tests.routes.mistral_conversations import MistralConversationsRoute

from ._foreign import CurlSeen, Seen, job_for, run_curl, run_node
from .conftest import (
    MAX_WAIT,
    RecordingUpstream,
    RunningProxy,
    ThreadedUpstream,
    config_for,
    start_proxy,
    wait_for,
)

pytestmark = pytest.mark.e2e  # Node and curl subprocesses through a real proxy

CHAT, RESPONSES = "openai.chat_completions", "openai.responses"
ANTHROPIC, GEMINI = "anthropic.messages", "gemini.generate_content"
JOB = 23
#: What strict mode refuses, per scenario (by default; ``no_terminal`` only when asked).
REFUSED = {
    "clean_cut": "truncated",
    "truncated": "truncated",
    "tool_call_invalid": "payload_error",
    "no_terminal": "terminal_missing",
    "endless_line": "buffer_limit",  # a fault mid-stream: the line past the ceiling
}
#: Streams strict mode lets through unchanged.
ACCEPTED = ("complete", "tool_call", "gzip", "provider_error")
CLIENT_ROUTES = {"node": (CHAT, RESPONSES), "curl": (CHAT, RESPONSES, ANTHROPIC, GEMINI)}


@dataclasses.dataclass(frozen=True)
class Case:
    client: str
    route: str
    scenario: str
    tools: bool = False  # a clean_cut with tools offered cuts inside the call's arguments
    framing: str | None = None  # truncated: chunked (the cut is an error) or close (clean EOF)

    def __str__(self) -> str:
        extra = ("-tools" if self.tools else "") + (f"-{self.framing}" if self.framing else "")
        return f"{self.client}-{self.route}-{self.scenario}{extra}"


def _cases() -> list[Case]:
    found = []
    for client, routes in CLIENT_ROUTES.items():
        for route in routes:
            for scenario in (*ACCEPTED, *REFUSED):
                if (route, scenario) in UNSUPPORTED:
                    continue
                if scenario == "endless_line" and client == "node":
                    continue  # 9 MiB in one line: minutes for the SDK's line reader; curl has it
                if scenario == "truncated":
                    found += [
                        Case(client, route, scenario, framing=f) for f in ("chunked", "close")
                    ]
                elif scenario == "clean_cut":
                    found.append(Case(client, route, scenario))
                    if (route, scenario) not in UNSUPPORTED_WITH_TOOLS:
                        found.append(Case(client, route, scenario, tools=True))
                else:
                    found.append(Case(client, route, scenario, tools=scenario.startswith("tool")))
    return found


@pytest.fixture
def strict_proxy(provider: FakeProvider) -> Iterator[RunningProxy]:
    config = ProxyConfig(
        upstreams=(
            Upstream("off", provider.base_url, strict=frozenset()),
            Upstream("fake", provider.base_url),
            Upstream(
                "fake-tm", provider.base_url, strict=strict_outcomes("default,terminal_missing")
            ),
        ),
        listen=("127.0.0.1", 0),
        strict=strict_outcomes(True),
    )
    with start_proxy(config) as running:
        yield running


# -- the clients -----------------------------------------------------------------------------------


def _node(base: str, case: Case, job: int) -> tuple[Seen, dict[str, Any] | None]:
    """What the Node SDK saw, and the error it threw as it reported it (code, type, message)."""
    return run_node(base, case.route, case.scenario, job, tools=case.tools)


def _curl(base: str, case: Case, job: int, head: Path) -> CurlSeen:
    return run_curl(base, case.route, case.scenario, job, head, tools=case.tools)


# -- what the proxy recorded -----------------------------------------------------------------------


def _stream_span(proxy: RunningProxy, upstream: str) -> ReadableSpan:
    """The one ``otelsse.stream`` span of the requests to ``upstream`` (a child of its SERVER
    span), once it ended."""

    def found() -> list[ReadableSpan]:
        servers = {
            span.context.span_id
            for span in proxy.otel.spans(None)
            if span.kind is SpanKind.SERVER
            and (span.attributes or {}).get(semconv.PROXY_UPSTREAM) == upstream
        }
        return [
            span
            for span in proxy.otel.spans()
            if span.parent is not None and span.parent.span_id in servers
        ]

    wait_for(found, f"the stream span of {upstream}")
    (span,) = found()
    return span


def _refused(case: Case, upstream: str) -> str | None:
    """The outcome strict mode refuses this case for on ``upstream``, or None."""
    outcome = REFUSED.get(case.scenario)
    if outcome == "terminal_missing" and upstream != "fake-tm":
        return None
    return outcome


def _event(route: str, outcome: str) -> bytes:
    event = get_route(route).strict_error_event(
        f"otelsse_strict_{outcome}", f"otelsse strict mode refused the stream: {outcome}"
    )
    assert event is not None
    return event


def _job(provider: FakeProvider, case: Case) -> int:
    return JOB if case.framing is None else job_for(provider.port, case.route, case.framing)


def _strict_upstreams(case: Case) -> tuple[str, ...]:
    return ("fake", "fake-tm") if case.scenario == "no_terminal" else ("fake",)


# -- the matrix ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", _cases(), ids=str)
def test_strict_off_is_the_provider_strict_on_refuses_in_the_routes_protocol(
    provider: FakeProvider, strict_proxy: RunningProxy, tmp_path: Path, case: Case
) -> None:
    job = _job(provider, case)
    if case.client == "curl":
        _check_curl(provider, strict_proxy, tmp_path, case, job)
    else:
        _check_node(provider, strict_proxy, case, job)
    for upstream in ("off", *_strict_upstreams(case)):
        attributes = dict(_stream_span(strict_proxy, upstream).attributes or {})
        assert attributes[semconv.OUTCOME] == EXPECTED_OUTCOME[case.scenario], attributes
        refused = upstream != "off" and _refused(case, upstream) is not None
        assert attributes.get(semconv.STRICT_RAISED, False) is refused, (upstream, attributes)


def _check_curl(
    provider: FakeProvider, proxy: RunningProxy, tmp_path: Path, case: Case, job: int
) -> None:
    direct = _curl(provider.base_url, case, job, tmp_path / "direct")
    off = _curl(proxy.url("off"), case, job, tmp_path / "off")
    assert direct.status == 200, direct
    # Strict mode off: byte for byte what the provider sent, ended as it ended.
    assert off.digest() == direct.digest(), (off, direct)
    for upstream in _strict_upstreams(case):
        on = _curl(proxy.url(upstream), case, job, tmp_path / upstream)
        outcome = _refused(case, upstream)
        if outcome is None:
            # Accepted: the same bytes as without strict mode, ended the same way.
            assert on.digest() == off.digest(), (upstream, on, off)
            continue
        event = _event(case.route, outcome)
        # Refused: whole events the provider sent, then the route's error event, then a clean
        # end (curl exits 0 even where the provider's chunked body broke off).
        assert (on.status, on.exit_code) == (200, 0), (upstream, on)
        assert on.body.endswith(event), (upstream, on.body[-300:])
        relayed = on.body[: -len(event)]
        assert direct.body.startswith(relayed), (upstream, on)
        assert relayed.endswith(b"\n\n"), relayed[-300:]
        assert b"[DONE]" not in on.body
        assert on.body.count(b"otelsse strict mode") == (2 if case.route == RESPONSES else 1)
        if case.scenario == "endless_line":
            assert len(relayed) < 1024, len(relayed)  # none of the endless line went out


def _check_node(provider: FakeProvider, proxy: RunningProxy, case: Case, job: int) -> None:
    direct, _ = _node(provider.base_url, case, job)
    off, _ = _node(proxy.url("off"), case, job)
    if case.framing == "chunked":
        # Node 20's fetch takes the provider's chunked body without its last chunk for a clean
        # end when it said ``connection: close`` (tests/proxy/test_foreign_clients.py); the
        # proxy keeps its connection alive, so there the cut is an error, as it should be.
        assert off.error is not None, off
        assert direct.error in (None, off.error), (off, direct)
        direct = dataclasses.replace(direct, error=off.error)
    assert off == direct, (off, direct)
    for upstream in _strict_upstreams(case):
        on, error = _node(proxy.url(upstream), case, job)
        outcome = _refused(case, upstream)
        if outcome is None:
            assert on == off, (upstream, on, off)
            continue
        # Refused: the SDK's own error for an error in the stream, thrown in the loop after the
        # events before it; never a success.
        assert on.error == ("APIError", None), (upstream, on)
        assert error is not None
        assert error["code"] == f"otelsse_strict_{outcome}", error
        assert error["message"] == f"otelsse strict mode refused the stream: {outcome}", error
        assert on.events == off.events[: len(on.events)], (on, off)
        assert on.finish in (None, off.finish), (on, off)
        assert on.events, on  # what came before the refusal reached the application


# -- one upstream behind two names: strict and plain -----------------------------------------------


def _strict_and_plain(base: str) -> ProxyConfig:
    """A proxy forwarding two upstreams to ``base``: ``up`` in strict mode, ``plain`` not."""
    return dataclasses.replace(
        config_for(base),
        upstreams=(Upstream("up", base, strict=strict_outcomes(True)), Upstream("plain", base)),
    )


def _post(
    url: str,
    *,
    request: tuple[str, dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[httpx.Response, bytes, str]:
    """POST ``request`` (its path and JSON body; by default a chat stream's) to ``url``: the
    response (its head), its body as sent (still coded) and how it ended: ``clean``, or
    ``cut: `` and the client's error."""
    path, body = request or request_for(CHAT, DEFAULT_MODELS[CHAT], tools=False)
    raw = b""
    with (
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream("POST", url + path, json=body, headers=headers) as response,
    ):
        try:
            for piece in response.iter_raw():
                raw += piece
        except httpx.RemoteProtocolError as exc:
            return response, raw, f"cut: {exc}"
    return response, raw, "clean"


# -- a route with no error event ------------------------------------------------------------------


@pytest.fixture
def mistral_cut() -> Iterator[RecordingUpstream]:
    """A route of the user's own (``tests/routes/mistral_conversations.py``), which declares no
    error event, and an upstream whose stream of it ends cleanly before its done event."""
    body = read_fixture("edge/mistral-conversation-function-call.sse")
    cut = body[: body.index(b"event: conversation.response.done")]
    register_route(MistralConversationsRoute)
    try:
        with contextlib.closing(RecordingUpstream(cut)) as upstream:
            yield upstream
    finally:
        unregister_route(MistralConversationsRoute.name)


def test_a_route_without_an_error_event_has_its_refused_streams_cut(
    mistral_cut: RecordingUpstream,
) -> None:
    with start_proxy(_strict_and_plain(mistral_cut.base())) as proxy:
        responses = {}
        for upstream in ("plain", "up"):
            request = ("/v1/conversations", {"stream": True})
            _, raw, ended = _post(proxy.url(upstream), request=request)
            responses[upstream] = (raw, ended.partition(":")[0])  # clean, or cut
        spans = proxy.stream_spans(2)
    assert responses["plain"][1] == "clean"  # without strict mode: passed on as it ended
    assert responses["up"] == (responses["plain"][0], "cut")  # the same bytes, then a cut
    assert {(span.attributes or {})[semconv.ROUTE] for span in spans} == {"mistral.conversations"}
    assert {str((span.attributes or {})[semconv.OUTCOME]) for span in spans} == {"truncated"}


# -- content coding --------------------------------------------------------------------------------


class _GzipCut(ThreadedUpstream):
    """A chat stream, gzip-coded whatever the request asked for, that ends cleanly half-way
    through the answer (its last chunk sent): truncated."""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "content-encoding": "gzip"}
        )
        await response.prepare(request)
        coder = zlib.compressobj(wbits=31)
        for word in ("Streams ", "end ", "when "):
            chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
            choice = {"index": 0, "delta": {"content": word}, "finish_reason": None}
            event = b"data: " + json.dumps({**chunk, "choices": [choice]}).encode() + b"\n\n"
            await response.write(coder.compress(event) + coder.flush(zlib.Z_SYNC_FLUSH))
            await asyncio.sleep(0)
        await response.write_eof()
        return response


@pytest.fixture
def gzip_cut() -> Iterator[_GzipCut]:
    with contextlib.closing(_GzipCut()) as upstream:
        yield upstream


#: A whole chat answer, as one body with a Content-Length.
WHOLE_ANSWER = b"".join(script_events(CHAT, Turn(DEFAULT_MODELS[CHAT], "complete", 9, "req_cl")))


@pytest.fixture
def whole_answer() -> Iterator[RecordingUpstream]:
    with contextlib.closing(RecordingUpstream(WHOLE_ANSWER)) as upstream:
        yield upstream


def test_strict_mode_asks_the_upstream_for_an_uncoded_body(
    whole_answer: RecordingUpstream,
) -> None:
    recording = whole_answer
    with start_proxy(_strict_and_plain(recording.base())) as proxy:
        for upstream in ("up", "plain"):
            _, body, ended = _post(proxy.url(upstream), headers={"accept-encoding": "gzip, br"})
            assert (body, ended) == (WHOLE_ANSWER, "clean")
    strict, plain = (
        [value for name, value in received.headers if name == "accept-encoding"]
        for received in recording.received
    )
    assert strict == ["identity"]
    assert plain == ["gzip, br"]


def test_a_body_the_upstream_codes_anyway_is_cut_when_refused(gzip_cut: _GzipCut) -> None:
    with start_proxy(_strict_and_plain(gzip_cut.base())) as proxy:
        head, plain, plain_end = _post(proxy.url("plain"))
        assert head.headers["content-encoding"] == "gzip"
        assert plain_end == "clean"  # without strict mode, the clean end passes on
        _, strict, strict_end = _post(proxy.url("up"))
        # No event can be added to a gzip body: the proxy cuts the connection instead, and the
        # client's read fails (the chunked body lacks its last chunk).
        assert strict_end.startswith("cut"), strict_end
        assert strict == plain  # the coded bytes up to the end, as the upstream sent them
        text = zlib.decompressobj(wbits=31).decompress(plain)
        assert text.count(b"\n\n") == 3
        assert b"otelsse strict" not in text
        spans = proxy.stream_spans(2)
        assert [(span.attributes or {}).get(semconv.STRICT_RAISED, False) for span in spans].count(
            True
        ) == 1
        assert {str((span.attributes or {})[semconv.OUTCOME]) for span in spans} == {"truncated"}


def test_a_strict_stream_goes_to_the_client_without_content_length(
    whole_answer: RecordingUpstream,
) -> None:
    recording = whole_answer
    with start_proxy(_strict_and_plain(recording.base())) as proxy:
        plain, plain_body, _ = _post(proxy.url("plain"))
        strict, strict_body, _ = _post(proxy.url("up"))
    # A Content-Length would forbid the event strict mode may add, or say a cut body was whole.
    assert plain.headers["content-length"] == str(len(plain_body))
    assert "content-length" not in strict.headers
    assert strict.headers["transfer-encoding"] == "chunked"
    assert strict_body == plain_body == WHOLE_ANSWER
