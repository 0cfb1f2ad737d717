"""The real openai, anthropic and LiteLLM SDKs stream from a real server, with and without otelsse.

Each SDK is pointed at ``SSEServer`` (tests/_server.py: raw sockets on 127.0.0.1, the body written
in pieces of 300 bytes, Nagle off) serving a shared recorded fixture on its route's path, with
``api_key="test"`` and ``max_retries=0``. Each test runs the same application code in one server,
first with otelsse not instrumented (the reference), then instrumented against a real
OpenTelemetry SDK (tests/_otel.Telemetry: in-memory span exporter and metric reader). It proves:

1. The application's results are identical with and without otelsse: every chunk/event the SDK
   yields (``model_dump()``; for LiteLLM, whose chunk ids and timestamps are made up per call,
   each chunk's content, tool-call deltas and finish reason) and the exception the SDK raises.
   With otelsse there is exactly one ended ``otelsse.stream`` span with the fixture's route,
   outcome, stop reason and ``gen_ai.response.model``, ended by the time the application leaves
   its ``with`` (not later, by garbage collection), and the metric points agree with it.
   Covered: openai ``chat.completions.create(stream=True)`` and ``responses.create(stream=True)``,
   anthropic ``messages.create(stream=True)`` and the ``messages.stream()`` helper, LiteLLM
   ``completion``/``acompletion`` with ``openai/`` and ``anthropic/`` models; each sync and async.
   Read to the end -> complete; closed early (``break`` then leaving the ``with``, while the
   server holds the rest of the body) -> cancelled; closed right after the terminal event ->
   complete; connection cut mid-event -> the same exception either way, and truncated.
2. Coexistence with opentelemetry-instrumentation-httpx (``HTTPX2ClientInstrumentor``,
   ``HTTPXClientInstrumentor``) and -requests (``RequestsInstrumentor``), instrumented before or
   after otelsse with the same tracer provider: the contrib ``POST`` span is a child of the one
   ``otelsse.stream`` span, which ends after it; uninstrumenting either one leaves the other
   working.
3. Suppression: under ``suppress_instrumentation()`` otelsse makes no span and no metric point;
   under ``suppress_http_instrumentation()`` alone (which is what ``RequestsInstrumentor`` puts
   around ``Session.send``, so the requests case of 2. covers it too) otelsse still observes.
4. anthropic 2.x's built-in tracing (on by default; given the same tracer provider through its
   ``open_telemetry`` client option): its ``anthropic.messages.create`` call span (CLIENT, scope
   ``com.anthropic.sdk.python``) and our ``otelsse.stream`` span both appear once per stream, and
   the application's result is unchanged. The SDK makes its span current around ``send``, so
   ours is its child (same trace; with the contrib httpx2 one on too: call span > otelsse.stream
   > POST). Ours ends first at EOF or a read error, the SDK's first on close. Read to the end:
   OK / complete; closed early: UNSET / cancelled; cut mid-event: ERROR ``connection_error`` /
   truncated; a clean EOF before ``message_stop`` (no exception reaches the application): ERROR
   ``api_error`` / truncated. The request carries the SDK's own ``traceparent`` (the contrib
   one's when that is on), never ours: otelsse injects no headers.

Which HTTP client each SDK really uses (found by running them): openai 3 and anthropic 2 use
httpx2; the openai SDK also accepts a legacy ``httpx.Client``, which is what LiteLLM hands it for
``openai/`` models. LiteLLM's ``anthropic/`` models go through LiteLLM's own ``HTTPHandler`` (an
``httpx.Client``). LiteLLM's async calls use an ``httpx.AsyncClient`` whose transport is LiteLLM's
aiohttp transport: otelsse (wrapping ``AsyncClient.send``) observes them, the contrib httpx
instrumentation (wrapping ``AsyncHTTPTransport``) makes no span for them.

LiteLLM is imported only by the tests that use it, with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so it
never reaches the internet. It keeps clients, an event loop and logging threads past each call;
``litellm_client`` and ``drain_litellm_logging`` (``tests/_strict_sdks.py``, shared with
``test_strict_sdks.py``) close and drain them so nothing leaks into other tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.instrumentation.utils import (
    suppress_http_instrumentation,
    suppress_instrumentation,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import otelsse
from otelsse import semconv
from otelsse._instrumentor import SSEInstrumentor
from tests import _strict_sdks as strict_sdks
from tests._clients import CLIENTS, Client, Session, Style
from tests._fixtures import EXPECTED, read_fixture
from tests._helpers import event_ends
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"

CHAT_TOOLS = "real/openai-chat-parallel-tool-calls.sse"
CHAT_TEXT = "real/openai-chat-text.sse"
RESPONSES_TOOLS = "real/openai-responses-function-call.sse"
ANTHROPIC_TOOLS = "real/anthropic-text-and-two-tool-use.sse"

#: Every client's timeout: only bounds a test that is wrong; a passing test never reaches it.
TIMEOUT = 10.0
MESSAGES = [{"role": "user", "content": "hi"}]
#: What an application posts itself (the requests case).
STREAM_BODY = {"model": "gpt-x", "stream": True, "messages": MESSAGES}


# --------------------------------------------------------------------------------------------
# The SDKs as applications use them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the application got: the items it kept, and the class of what was raised, if any."""

    items: list[Any]
    error: type[BaseException] | None


@dataclass(frozen=True)
class Case:
    """One way an application streams.

    ``client(root, is_async)`` makes the SDK client (a context manager, async for async), and
    ``call(client)`` starts the stream: the same call for the sync and the async client; it
    returns the stream (a context manager to iterate) or, async, an awaitable of it.
    """

    id: str
    path: str
    fixture: str
    client: Callable[[str, bool], Any]
    call: Callable[[Any], Any]
    dump: Callable[[Any], Any]
    #: The event type after which otelsse has seen the stream's terminal (None: the SDK never
    #: yields the terminal itself, e.g. chat's ``[DONE]``).
    terminal: str | None = None


def openai_client(root: str, is_async: bool, **options: Any) -> Any:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(base_url=root + "/v1", api_key="test", max_retries=0, timeout=TIMEOUT, **options)


def openai_over_httpx(root: str, is_async: bool) -> Any:
    """The openai SDK on a legacy ``httpx`` client, as LiteLLM builds it (closing closes both)."""
    http = httpx.AsyncClient(timeout=TIMEOUT) if is_async else httpx.Client(timeout=TIMEOUT)
    return openai_client(root, is_async, http_client=http)


def anthropic_client(**options: Any) -> Callable[[str, bool], Any]:
    def make(root: str, is_async: bool) -> Any:
        cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return cls(base_url=root, api_key="test", max_retries=0, timeout=TIMEOUT, **options)

    return make


def litellm_client(api_path: str) -> Callable[[str, bool], Any]:
    """LiteLLM as a client of ``root + api_path`` (``tests/_strict_sdks.py``, which closes the
    clients it keeps when the context ends): ``completion`` (``acompletion`` when async)."""
    return partial(strict_sdks.litellm_client(api_path), max_retries=0)


@pytest.fixture(scope="module", autouse=True)
def _drain_litellm_logging() -> Iterator[None]:
    """Wait for LiteLLM's logging tasks once this module is done with LiteLLM: it runs its
    success logging on a module-global thread pool (``litellm-logging_N``) that other modules'
    LiteLLM streams share, so the pool is drained, never shut down."""
    yield
    strict_sdks.drain_litellm_logging()


@contextlib.contextmanager
def requests_app(root: str, is_async: bool) -> Iterator[Any]:
    """An application posting to the chat route with requests (a session of the harness) and
    reading ``iter_lines()``; ``stream()`` opens one response."""
    assert not is_async, "requests has no async client"

    @contextlib.contextmanager
    def stream() -> Iterator[Iterator[bytes]]:
        with http.stream(root + CHAT_PATH, json=STREAM_BODY) as response:
            yield http.chunks(response, Style("iter_lines"))

    with Session(Client("requests")) as http:
        yield SimpleNamespace(stream=stream)


def model_dump(item: Any) -> Any:
    return item.model_dump()


def chat_call(client: Any) -> Any:
    return client.chat.completions.create(model="gpt-x", messages=MESSAGES, stream=True)


def responses_call(client: Any) -> Any:
    return client.responses.create(model="gpt-x", input="hi", stream=True)


def messages_create(client: Any) -> Any:
    return client.messages.create(model="claude-x", max_tokens=100, messages=MESSAGES, stream=True)


def messages_stream(client: Any) -> Any:
    return client.messages.stream(model="claude-x", max_tokens=100, messages=MESSAGES)


def litellm_call(model: str) -> Callable[[Any], Any]:
    return lambda client: client.completion(model=model, messages=MESSAGES, stream=True)


OPENAI_CHAT_TOOLS = Case(
    "openai-chat-tools", CHAT_PATH, CHAT_TOOLS, openai_client, chat_call, model_dump
)
SDK_CASES = [
    OPENAI_CHAT_TOOLS,
    Case("openai-chat-text", CHAT_PATH, CHAT_TEXT, openai_client, chat_call, model_dump),
    Case(
        "openai-responses", RESPONSES_PATH, RESPONSES_TOOLS, openai_client, responses_call,
        model_dump, terminal="response.completed",
    ),
    Case(
        "anthropic-create", MESSAGES_PATH, ANTHROPIC_TOOLS, anthropic_client(), messages_create,
        model_dump, terminal="message_stop",
    ),
    Case(
        "anthropic-stream", MESSAGES_PATH, ANTHROPIC_TOOLS, anthropic_client(), messages_stream,
        model_dump, terminal="message_stop",
    ),
    Case(
        "litellm-openai", CHAT_PATH, CHAT_TOOLS, litellm_client("/v1"),
        litellm_call("openai/gpt-x"), strict_sdks.litellm_delta,
    ),
    Case(
        "litellm-anthropic", MESSAGES_PATH, ANTHROPIC_TOOLS, litellm_client(""),
        litellm_call("anthropic/claude-x"), strict_sdks.litellm_delta,
    ),
]  # fmt: skip
TERMINAL_CASES = [case for case in SDK_CASES if case.terminal is not None]


def params(cases: list[Case]) -> list[Any]:
    """``cases`` as parameters; LiteLLM's are slow (its import alone takes seconds)."""
    return [
        pytest.param(case, id=case.id, marks=pytest.mark.e2e if "litellm" in case.id else ())
        for case in cases
    ]


#: The coexistence tests' application for each client library (the harness's ``client`` fixture
#: picks the library and the dialect), and the contrib instrumentor for that library.
TRANSPORTS: dict[str, tuple[Case, Any]] = {
    "httpx2": (OPENAI_CHAT_TOOLS, HTTPX2ClientInstrumentor),
    "httpx": (replace(OPENAI_CHAT_TOOLS, client=openai_over_httpx), HTTPXClientInstrumentor),
    "requests": (
        Case("requests", CHAT_PATH, CHAT_TOOLS, requests_app, lambda app: app.stream(), bytes),
        RequestsInstrumentor,
    ),
}
SYNC_ASYNC = pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
#: The coexistence tests run on the clients of ``TRANSPORTS``' libraries: those with a contrib
#: HTTP instrumentation installed (aiohttp's, opentelemetry-instrumentation-aiohttp-client, is
#: not a dependency).
CONTRIB_CLIENTS = pytest.mark.parametrize(
    "client", [c for c in CLIENTS if c.library in TRANSPORTS], ids=str
)


def stop_never(item: Any) -> bool:
    return False


def stop_first(item: Any) -> bool:
    return True


def run(
    case: Case,
    root: str,
    is_async: bool,
    stop: Callable[[Any], bool] = stop_never,
    at_close: Callable[[], None] = lambda: None,
) -> Run:
    """Stream ``case`` from ``root`` like an application: iterate and keep the items, leave the
    ``with`` (which closes the stream) at ``stop(item)`` or at the end. ``at_close`` runs right
    after, while the stream object is still referenced and the client still open."""
    if is_async:
        return asyncio.run(_arun(case, root, stop, at_close))
    items: list[Any] = []
    with case.client(root, False) as client:
        try:
            opened = case.call(client)
            with opened as stream:
                for item in stream:
                    items.append(case.dump(item))
                    if stop(item):
                        break
        except Exception as exc:
            return Run(items, type(exc))
        finally:
            at_close()
    return Run(items, None)


async def _arun(
    case: Case, root: str, stop: Callable[[Any], bool], at_close: Callable[[], None]
) -> Run:
    items: list[Any] = []
    async with case.client(root, True) as client:
        try:
            opened = case.call(client)
            if inspect.isawaitable(opened):
                opened = await opened
            async with opened as stream:
                async for item in stream:
                    items.append(case.dump(item))
                    if stop(item):
                        break
        except Exception as exc:
            return Run(items, type(exc))
        finally:
            at_close()
    return Run(items, None)


@contextlib.contextmanager
def served(case: Case, body: bytes | None = None, **reply: Any) -> Iterator[SSEServer]:
    """A server answering ``case``'s path with ``body`` (default: the case's fixture)."""
    with SSEServer() as server:
        server.route(
            case.path, Reply(read_fixture(case.fixture) if body is None else body, **reply)
        )
        yield server


@dataclass(frozen=True)
class Both:
    """The same application run without otelsse, then with it."""

    plain: Run
    observed: Run
    telemetry: Telemetry
    #: Ended ``otelsse.stream`` spans when the instrumented run had just left its ``with``.
    spans_at_close: int


@contextlib.contextmanager
def with_and_without(
    case: Case, is_async: bool, stop: Callable[[Any], bool] = stop_never, **reply: Any
) -> Iterator[Both]:
    """Run ``case`` not instrumented, then instrumented (against a fresh in-memory SDK)."""
    with served(case, **reply) as server:
        root = server.url("")
        assert not SSEInstrumentor().is_instrumented_by_opentelemetry
        plain = run(case, root, is_async, stop)
        telemetry = Telemetry().install()
        closed: list[int] = []
        try:
            observed = run(
                case, root, is_async, stop, lambda: closed.append(len(telemetry.spans()))
            )
            yield Both(plain, observed, telemetry, closed[0])
        finally:
            telemetry.uninstall()


# --------------------------------------------------------------------------------------------
# What the fixture says, read without otelsse
# --------------------------------------------------------------------------------------------


def middle_boundary(case: Case) -> int:
    """An event boundary halfway through the fixture: well after the first event the SDK
    yields, well before the terminal."""
    boundaries = event_ends(read_fixture(case.fixture))
    return boundaries[len(boundaries) // 2]


def response_model(body: bytes) -> str:
    """The model the provider names in its first event (chat chunk, ``response``, ``message``)."""
    for line in body.decode("utf-8").splitlines():
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        payload = json.loads(line.removeprefix("data:"))
        for holder in (payload, payload.get("response") or {}, payload.get("message") or {}):
            if isinstance(holder.get("model"), str):
                return str(holder["model"])
    raise AssertionError("no model in fixture")


# --------------------------------------------------------------------------------------------
# What otelsse recorded
# --------------------------------------------------------------------------------------------


def assert_recorded(
    telemetry: Telemetry, case: Case, outcome: str, stop_reason: str | None
) -> ReadableSpan:
    """Exactly one ended span with these values, and metric points that agree with it."""
    body = read_fixture(case.fixture)
    route = EXPECTED[case.fixture].route
    model = response_model(body)
    span = telemetry.stream_span()
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert attributes[semconv.ROUTE] == route
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes.get(semconv.STOP_REASON) == stop_reason
    assert attributes[semconv.GEN_AI_RESPONSE_MODEL] == model
    # The request's model, read from its body: the SDKs here ask for gpt-x or claude-x.
    requested = attributes[semconv.GEN_AI_REQUEST_MODEL]
    assert requested == ("claude-x" if route.startswith("anthropic") else "gpt-x")
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    if outcome in semconv.ERROR_OUTCOMES:
        assert span.status.status_code is StatusCode.ERROR
    else:
        assert span.status.status_code is not StatusCode.ERROR
    if outcome == "complete" and attributes[semconv.TERMINAL_SEEN]:
        assert attributes[semconv.BYTES_RECEIVED] == len(body)

    assert telemetry.nonzero_outcomes() == {outcome: 1}
    (duration,) = telemetry.points(semconv.STREAM_DURATION.name)
    assert duration.value == 1
    assert duration.attributes[semconv.ROUTE] == route
    assert duration.attributes[semconv.OUTCOME] == outcome
    # The budget: histograms carry route, provider and outcome, never a model or a host.
    assert set(duration.attributes) <= set(semconv.HISTOGRAM_ATTRIBUTES)
    (counted,) = [p for p in telemetry.points(semconv.STREAMS.name) if p.value]
    assert counted.attributes[semconv.GEN_AI_REQUEST_MODEL] == requested
    (first_event,) = telemetry.points(semconv.STREAM_TIME_TO_FIRST_EVENT.name)
    assert first_event.value == 1
    (size,) = telemetry.points(semconv.STREAM_BYTES.name)
    assert size.sum == attributes[semconv.BYTES_RECEIVED]
    calls = telemetry.points(semconv.TOOL_CALLS.name)
    assert sum(p.value for p in calls) == attributes[semconv.TOOL_CALL_COUNT]
    if outcome == "complete":
        assert all(p.attributes[semconv.TOOL_CALL_VALID] for p in calls if p.value)
    assert telemetry.active_streams() == 0
    assert telemetry.instrumentation_errors() == 0
    return span


# --------------------------------------------------------------------------------------------
# 1. The SDKs: same results, one span, right metrics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", params(SDK_CASES))
@SYNC_ASYNC
def test_sdk_stream_read_to_the_end(case: Case, is_async: bool) -> None:
    expected = EXPECTED[case.fixture]
    with with_and_without(case, is_async) as both:
        assert both.plain.error is None
        assert both.plain.items
        assert both.observed == both.plain
        assert both.spans_at_close == 1
        assert_recorded(both.telemetry, case, expected.outcome, expected.stop_reason)


@pytest.mark.parametrize("case", params(SDK_CASES))
@SYNC_ASYNC
def test_sdk_stream_closed_early_is_cancelled(case: Case, is_async: bool) -> None:
    # The server holds the rest of the body, so the terminal cannot have arrived at the close.
    hold_at = middle_boundary(case)
    with with_and_without(case, is_async, stop_first, hold_at=hold_at) as both:
        assert both.plain.error is None
        assert len(both.plain.items) == 1
        assert both.observed == both.plain
        assert both.spans_at_close == 1  # ended by the close, not later by GC
        span = assert_recorded(both.telemetry, case, "cancelled", None)
        assert span.attributes[semconv.BYTES_RECEIVED] <= hold_at


@pytest.mark.parametrize("case", params(TERMINAL_CASES))
@SYNC_ASYNC
def test_sdk_stream_closed_after_its_terminal_is_complete(case: Case, is_async: bool) -> None:
    expected = EXPECTED[case.fixture]

    def at_terminal(item: Any) -> bool:
        return bool(item.type == case.terminal)

    with with_and_without(case, is_async, at_terminal) as both:
        assert both.plain.error is None
        assert both.plain.items[-1]["type"] == case.terminal
        assert both.observed == both.plain
        assert both.spans_at_close == 1
        assert_recorded(both.telemetry, case, "complete", expected.stop_reason)


def at_final_stop(item: Any) -> bool:
    """An application that stops at the answer's final stop reason, before the terminal
    event: Anthropic's ``message_delta``, a chat chunk with a ``finish_reason``."""
    if getattr(item, "type", None) == "message_delta":
        return True
    return any(choice.finish_reason for choice in getattr(item, "choices", None) or ())


#: The contracts whose answer ends before their terminal event (Responses ends in it).
FINAL_STOP_CASES = [case for case in SDK_CASES if case.path != RESPONSES_PATH]


@pytest.mark.parametrize("case", params(FINAL_STOP_CASES))
@SYNC_ASYNC
def test_sdk_stream_closed_at_its_final_stop_is_judged_by_it(case: Case, is_async: bool) -> None:
    """Stopping once the answer has ended is not abandoning it: the stream is judged by its
    stop reason, with ``otelsse.terminal_seen`` false (the server holds the terminal event, so
    it cannot have arrived)."""
    expected = EXPECTED[case.fixture]
    hold_at = event_ends(read_fixture(case.fixture))[-2]
    with with_and_without(case, is_async, at_final_stop, hold_at=hold_at) as both:
        assert both.plain.error is None
        assert both.observed == both.plain
        assert both.spans_at_close == 1
        span = assert_recorded(both.telemetry, case, expected.outcome, expected.stop_reason)
        attributes = span.attributes or {}
        assert attributes[semconv.TERMINAL_SEEN] is False
        assert attributes[semconv.BYTES_RECEIVED] <= hold_at
        # It ended at its final stop, not before: no "error" among its finish reasons.
        assert "error" not in attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]


@pytest.mark.parametrize("case", params(SDK_CASES))
@SYNC_ASYNC
def test_sdk_stream_cut_mid_event_raises_the_same_and_is_truncated(
    case: Case, is_async: bool
) -> None:
    with with_and_without(case, is_async, cut=middle_boundary(case) + 7) as both:
        assert both.plain.error is not None
        assert both.plain.items
        assert both.observed == both.plain
        assert both.spans_at_close == 1
        assert_recorded(both.telemetry, case, "truncated", None)


# --------------------------------------------------------------------------------------------
# 2. Coexistence with the contrib HTTP client instrumentations
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def contrib_and_otelsse(contrib: Any, contrib_first: bool) -> Iterator[tuple[Telemetry, Any]]:
    """Both instrumented (in the given order) against one SDK; both undone at exit."""
    telemetry = Telemetry()
    instrumentor = contrib()
    try:
        if contrib_first:
            instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
            telemetry.install()
        else:
            telemetry.install()
            instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
        yield telemetry, instrumentor
    finally:
        instrumentor.uninstrument()
        telemetry.uninstall()


def http_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    return [s for s in telemetry.spans(None) if s.name != semconv.SPAN_NAME]


@CONTRIB_CLIENTS
@pytest.mark.parametrize("contrib_first", [True, False], ids=["contrib-first", "otelsse-first"])
def test_contrib_http_span_is_a_child_of_the_stream_span(
    client: Client, contrib_first: bool
) -> None:
    case, contrib = TRANSPORTS[client.library]
    is_async = client.is_async
    with served(case) as server:
        root = server.url("")
        plain = run(case, root, is_async)
        assert plain.error is None
        with contrib_and_otelsse(contrib, contrib_first) as (telemetry, instrumentor):
            assert run(case, root, is_async) == plain
            stream = assert_recorded(telemetry, case, "complete", "tool_calls")
            (http,) = http_spans(telemetry)
            assert http.name == "POST"
            assert http.parent is not None
            assert http.parent.span_id == stream.context.span_id
            assert http.context.trace_id == stream.context.trace_id
            assert stream.end_time > http.end_time  # the HTTP span ends at the headers

            # Without the contrib one, otelsse goes on alone...
            instrumentor.uninstrument()
            assert run(case, root, is_async) == plain
            assert len(telemetry.spans()) == 2
            assert len(http_spans(telemetry)) == 1
            assert telemetry.nonzero_outcomes() == {"complete": 2}

            # ...and the contrib one works alone once otelsse is gone.
            instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
            otelsse.uninstrument()
            assert run(case, root, is_async) == plain
            assert len(telemetry.spans()) == 2
            (_, alone) = http_spans(telemetry)
            assert alone.name == "POST"
            assert alone.parent is None


LITELLM_CASES = [c for c in SDK_CASES if c.id.startswith("litellm-")]


@pytest.mark.parametrize("case", params(LITELLM_CASES))
@SYNC_ASYNC
def test_litellm_beside_the_contrib_httpx_instrumentation(case: Case, is_async: bool) -> None:
    """LiteLLM's sync calls send through ``httpx.HTTPTransport``, which the contrib one wraps;
    its async calls through its own aiohttp transport, which it does not: otelsse, wrapping
    ``AsyncClient.send``, observes both."""
    with served(case) as server:
        root = server.url("")
        plain = run(case, root, is_async)
        with contrib_and_otelsse(HTTPXClientInstrumentor, True) as (telemetry, _):
            assert run(case, root, is_async) == plain
            stream = assert_recorded(
                telemetry, case, "complete", EXPECTED[case.fixture].stop_reason
            )
            http = http_spans(telemetry)
    if is_async:
        assert http == []
    else:
        (post,) = http
        assert post.parent is not None
        assert post.parent.span_id == stream.context.span_id


# --------------------------------------------------------------------------------------------
# 3. Suppression
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def beside_contrib(client: Client) -> Iterator[tuple[Case, Telemetry, Callable[[], bool]]]:
    """The client's case served, otelsse instrumented after the contrib HTTP instrumentation;
    yields the case, the telemetry, and "a run now gives the application the uninstrumented
    result"."""
    case, contrib = TRANSPORTS[client.library]
    with served(case) as server:
        root = server.url("")
        plain = run(case, root, client.is_async)
        with contrib_and_otelsse(contrib, True) as (telemetry, _):
            yield case, telemetry, lambda: run(case, root, client.is_async) == plain


@CONTRIB_CLIENTS
def test_suppressed_instrumentation_makes_no_span_and_no_point(client: Client) -> None:
    with beside_contrib(client) as (case, telemetry, runs_as_plain):
        with suppress_instrumentation():
            assert runs_as_plain()
        assert telemetry.spans(None) == []
        # The contrib one got no meter provider: every point here would be otelsse's. Only
        # the error series pre-created at 0 when it was instrumented exist.
        assert {p.metric for p in telemetry.points()} == {semconv.INSTRUMENTATION_ERRORS.name}
        assert telemetry.instrumentation_errors() == 0
        # Not a dead instrumentation: the same call outside the block is observed.
        assert runs_as_plain()
        assert_recorded(telemetry, case, "complete", "tool_calls")


@CONTRIB_CLIENTS
def test_suppressed_http_instrumentation_still_observes_the_stream(client: Client) -> None:
    with beside_contrib(client) as (case, telemetry, runs_as_plain):
        with suppress_http_instrumentation():
            assert runs_as_plain()
        assert_recorded(telemetry, case, "complete", "tool_calls")
        assert http_spans(telemetry) == []  # the contrib one is an HTTP instrumentation


# --------------------------------------------------------------------------------------------
# 4. anthropic 2.x's own tracing beside otelsse
# --------------------------------------------------------------------------------------------

#: The SDK's one span per API call (scope ``com.anthropic.sdk.python``), retries included.
ANTHROPIC_CALL_SPAN = "anthropic.messages.create"
ANTHROPIC_CASES = [c for c in SDK_CASES if c.id in ("anthropic-create", "anthropic-stream")]


@dataclass(frozen=True)
class Ending:
    """How an anthropic stream ends, and what each tracer then says."""

    stop: Callable[[Any], bool]
    #: What the server does halfway: nothing, ``hold`` the rest (until the test ends), ``cut``
    #: the connection mid-event, or end the body cleanly there (``short``).
    server: str
    outcome: str
    call_status: StatusCode
    call_error_type: str | None
    #: Which span ends first: ours at EOF or a read error (our tap sits inside the SDK's
    #: body wrapper, so it sees them first); the SDK's on close (its wrapper ends its span,
    #: then closes the body it wraps, which reaches our tap).
    ours_ends_first: bool


ENDINGS = {
    "complete": Ending(stop_never, "whole", "complete", StatusCode.OK, None, True),
    "closed-early": Ending(stop_first, "hold", "cancelled", StatusCode.UNSET, None, False),
    "cut-mid-event": Ending(
        stop_never, "cut", "truncated", StatusCode.ERROR, "connection_error", True
    ),
    # No exception reaches the application; both tracers still call it a failure.
    "clean-eof-before-terminal": Ending(
        stop_never, "short", "truncated", StatusCode.ERROR, "api_error", True
    ),
}


def traced_anthropic(case: Case, telemetry: Telemetry) -> Case:
    """``case`` with the SDK's tracing (on by default) sending its spans to ``telemetry``."""
    options = {"tracer_provider": telemetry.tracer_provider}
    return replace(case, client=anthropic_client(open_telemetry=options))


@pytest.mark.parametrize("case", ANTHROPIC_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("ending", ENDINGS.values(), ids=ENDINGS.keys())
@SYNC_ASYNC
def test_anthropic_builtin_tracing_and_otelsse_both_trace(
    case: Case, ending: Ending, is_async: bool
) -> None:
    telemetry = Telemetry()
    traced = traced_anthropic(case, telemetry)
    boundary = middle_boundary(case)
    reply = {
        "whole": {},
        "hold": {"hold_at": boundary},
        "cut": {"cut": boundary + 7},
        "short": {"body": read_fixture(case.fixture)[:boundary]},
    }[ending.server]
    try:
        with served(traced, **reply) as server:
            root = server.url("")
            plain = run(traced, root, is_async, ending.stop)
            (alone,) = telemetry.spans(ANTHROPIC_CALL_SPAN)
            telemetry.exporter.clear()
            telemetry.install()
            assert run(traced, root, is_async, ending.stop) == plain
            # The SDK propagates its own call span (nothing else here injects headers).
            traceparent = server.received[-1].headers["traceparent"]
        (call,) = telemetry.spans(ANTHROPIC_CALL_SPAN)
        stream = telemetry.stream_span()
        assert telemetry.spans(None) == [stream, call] if ending.ours_ends_first else [call, stream]
    finally:
        telemetry.uninstall()
    assert (plain.error is not None) is (ending.server == "cut")
    assert alone.status.status_code is call.status.status_code is ending.call_status
    assert call.attributes.get("error.type") == ending.call_error_type
    assert stream.attributes[semconv.OUTCOME] == ending.outcome
    assert stream.parent is not None
    assert stream.parent.span_id == call.context.span_id
    assert stream.context.trace_id == call.context.trace_id
    assert traceparent.split("-")[2] == format(call.context.span_id, "016x")
    assert call.start_time <= stream.start_time
    model = call.attributes["gen_ai.response.model"]
    assert stream.attributes[semconv.GEN_AI_RESPONSE_MODEL] == model


@SYNC_ASYNC
def test_anthropic_builtin_tracing_with_the_contrib_http_span(is_async: bool) -> None:
    """All three tracers on: anthropic's call span > otelsse.stream > the contrib POST span."""
    (case, _) = ANTHROPIC_CASES
    with served(case) as server, contrib_and_otelsse(HTTPX2ClientInstrumentor, False) as on:
        telemetry, _ = on
        assert run(traced_anthropic(case, telemetry), server.url(""), is_async).error is None
        traceparent = server.received[-1].headers["traceparent"]
        (call,) = telemetry.spans(ANTHROPIC_CALL_SPAN)
        stream = assert_recorded(telemetry, case, "complete", "tool_use")
        (http,) = telemetry.spans("POST")
    assert call.parent is None
    assert stream.parent is not None
    assert stream.parent.span_id == call.context.span_id
    assert http.parent is not None
    assert http.parent.span_id == stream.context.span_id
    assert http.end_time < stream.end_time <= call.end_time
    # The contrib instrumentation injects last, so the server sees the HTTP span.
    assert traceparent.split("-")[2] == format(http.context.span_id, "016x")
