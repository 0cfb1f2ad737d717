"""Frameworks people use on Amazon Bedrock, as foreign clients: LiteLLM's Bedrock provider and
langchain-aws, with and without otelsse.

Each framework is pointed at ``SSEServer`` (tests/_server.py: raw sockets on 127.0.0.1) serving a
real recorded Bedrock body (``tests/fixtures/real/bedrock-*.eventstream``, SOURCES.md there) as
``application/vnd.amazon.eventstream``, with dummy AWS credentials, region ``us-east-1``, no
retries, and no AWS configuration from the machine (``aws_environment``). What each one sends
(asserted in every test from the requests the server received, one per run, each signed with
SigV4 for ``us-east-1/bedrock``):

- LiteLLM (``litellm.completion`` / ``acompletion`` with ``stream=True``,
  ``aws_bedrock_runtime_endpoint=``) signs with botocore's ``SigV4Auth`` but sends through httpx
  (sync: an ``httpx.Client``; async: an ``httpx.AsyncClient`` over LiteLLM's aiohttp transport),
  which otelsse hooks at ``Client.send`` / ``AsyncClient.send``; it reads the body with botocore's
  ``EventStreamBuffer``.
  ``bedrock/<model id>`` for a model its cost map lists as Converse (every Claude) is
  ConverseStream: ``POST /model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream``
  (the id's ``:`` percent-encoded); ``bedrock/invoke/<model id>`` is
  InvokeModelWithResponseStream: ``POST /model/us.anthropic.claude-3-5-sonnet-20240620-v1:0/
  invoke-with-response-stream`` (the ``:`` sent as is).
- langchain-aws makes boto3 clients (botocore over urllib3, hooked by otelsse at
  ``Endpoint._send``). ``ChatBedrockConverse(...).stream()`` calls ``converse_stream``: ``POST
  /model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream``; ``ChatBedrock(...)
  .stream()`` with a Claude model (``beta_use_converse_api`` is off for every model but Nova)
  calls ``invoke_model_with_response_stream``: ``POST /model/us.anthropic.claude-3-5-sonnet-
  20240620-v1%3A0/invoke-with-response-stream``. Their ``astream()`` runs the same sync botocore
  calls on the event loop's executor: it is run on the whole answer only.

Each stream is run twice in one server, first with otelsse not instrumented (the reference),
then instrumented against a real OpenTelemetry SDK (tests/_otel.Telemetry). What the application
gets (every chunk the framework yields: LiteLLM's text, tool-call deltas, finish reason and
usage per chunk; langchain's whole ``AIMessageChunk`` but its per-call run id; the exception's
class and message) is identical, and there is exactly one ``otelsse.stream`` span with the route
and the outcome below, and metric points that agree with it. The endings, each made from the
recording (``ENDINGS``):

- ``complete``: the whole body -> ``complete`` with the recording's stop.
- ``cut-mid-frame``: the connection closes inside a frame, inside the chunked body -> both
  frameworks raise (LiteLLM its ``MidStreamFallbackError``; langchain urllib3's
  ``ProtocolError``, which botocore lets through unwrapped); ``truncated``.
- ``throttled``: half the frames, then a ``throttlingException`` exception frame (no recording
  of one exists, SOURCES.md: built by ``tests/_eventstream.py``) -> both raise (LiteLLM a
  ``RateLimitError`` inside its ``MidStreamFallbackError``; langchain botocore's
  ``EventStreamError``); ``rate_limited``.
- ``eof-before-last-frame``: the body ends cleanly (``Content-Length``) after the answer's stop
  (ConverseStream's ``messageStop``, Claude's ``message_delta``), without its last frame
  (``metadata``, ``message_stop`` with Bedrock's invocation metrics) -> ``terminal_missing``.
  Neither framework notices: the application gets the whole text and the stop reason and no
  error, only the token usage is gone (langchain), or nothing at all differs (LiteLLM).
- ``cut-inside-last-frame``: the connection (``Connection: close`` framing, so EOF is the body's
  end) closes 20 bytes into the last frame -> ``truncated``. LiteLLM raises (its decoder counts
  undecoded bytes); langchain does not: botocore's ``EventStream`` drops a partial frame at EOF
  without a word, and langchain-aws checks no more than that ``messageStop`` came.

The last two are the silent failures otelsse exists to catch:
``test_framework_takes_a_broken_stream_for_a_whole_answer`` shows each one the application
takes for a finished answer.

Every span ends by the time the application's loop is over, but where the framework leaves the
HTTP response open (``Framework.left_open``): then otelsse's span for that stream stays open
(``otelsse.streams.active`` 1, its duration growing) until the response is garbage collected,
and ends with the right outcome then. LiteLLM raises the error of a Bedrock exception frame
without closing the response, even inside ``with stream:``
(``test_litellm_leaves_the_response_open_after_an_exception_frame``); langchain-aws before
1.2.3 (the lowest resolution of the test extra installs 0.2.1) closed nothing either: not at an
exception frame, nor ``ChatBedrock`` at Claude's ``message_stop`` (it stops reading there,
before EOF), and the socket leaks with the response.

LiteLLM and langchain-aws are imported by the tests that use them (both are slow to import; one
langchain-aws test is in the fast loop, every other one is ``e2e``). LiteLLM's clients and logging
are closed and drained as in ``test_sdks.py`` (``tests/_strict_sdks.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from packaging.version import Version

from otelsse import semconv
from otelsse._instrumentor import SSEInstrumentor
from tests import _eventstream as eventstream
from tests import _strict_sdks as strict_sdks
from tests._fixtures import read_fixture
from tests._helpers import WELL_BEFORE, soon
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

CONVERSE = "bedrock.converse_stream"
INVOKE = "bedrock.invoke_model_with_response_stream"
EVENT_STREAM = "application/vnd.amazon.eventstream"

#: The recordings and the model each was recorded with (SOURCES.md).
CONVERSE_TEXT = "real/bedrock-converse-stream-text.eventstream"
CONVERSE_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
INVOKE_CLAUDE = "real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream"
INVOKE_MODEL = "us.anthropic.claude-3-5-sonnet-20240620-v1:0"

REGION = "us-east-1"
ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#: Every client's timeout: only bounds a test that is wrong; a passing run ends well before it.
TIMEOUT = 10.0
#: How long a stream the application let go of may take to end on otelsse's own thread.
ENDED_WAIT = 10.0
PROMPT = "Why do streamed answers need a terminal event?"
MESSAGES = [{"role": "user", "content": PROMPT}]
THROTTLED = "Too many requests, please wait before trying again."


# --------------------------------------------------------------------------------------------
# What the application saw
# --------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the application got: every chunk (as each framework's ``_keep`` records it), the
    exception (qualified class name and message) if one reached it, and the answer it
    assembles from the chunks: the text, the last stop reason, the last token usage.
    ``reading``: when the application began to wait for the stream (``_catching``)."""

    items: list[Any] = field(default_factory=list)
    error: tuple[str, str] | None = None
    text: str = ""
    stop: str | None = None
    usage: Any = None
    reading: float = field(default=0.0, compare=False)


def _qualified(error: BaseException) -> str:
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


@contextlib.contextmanager
def _catching(seen: Seen) -> Iterator[None]:
    """Keep in ``seen`` the exception the block raises, as the application catching it; and
    assert that the wait for the stream (from ``seen.reading``: the block's start unless the
    runner moves it) ended well within the clients' timeout, by the stream's own end."""
    seen.reading = time.monotonic()
    try:
        yield
    except Exception as error:
        seen.error = (_qualified(error), str(error))
    took = time.monotonic() - seen.reading
    assert took < TIMEOUT * WELL_BEFORE, f"the stream took {took:.2f} s of its {TIMEOUT} s bound"


# --------------------------------------------------------------------------------------------
# The frameworks as applications use them
# --------------------------------------------------------------------------------------------

#: ``stream(endpoint, is_async, at_close)``: stream one answer from the Bedrock endpoint at
#: ``endpoint``; ``at_close()`` runs once the application's loop is over (its ``with`` left),
#: while it still holds its framework's clients.
Runner = Callable[[str, bool, Callable[[], None]], Seen]


def _nothing() -> None:
    pass


def _litellm_keep(seen: Seen, chunk: Any) -> None:
    usage = getattr(chunk, "usage", None)
    seen.items.append((strict_sdks.litellm_delta(chunk), usage and usage.model_dump()))
    for choice in chunk.choices:
        seen.text += choice.delta.content or ""
        seen.stop = choice.finish_reason or seen.stop
    seen.usage = usage or seen.usage


def litellm_stream(model: str) -> Runner:
    """LiteLLM's Bedrock provider: ``completion(stream=True)`` (``acompletion`` async), read in a
    ``with`` as ``test_sdks.py``'s applications do; its clients closed after (``_strict_sdks``)."""

    def options(endpoint: str) -> dict[str, Any]:
        return {
            "model": model,
            "messages": MESSAGES,
            "stream": True,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region_name": REGION,
            "aws_bedrock_runtime_endpoint": endpoint,
            "max_retries": 0,
            "timeout": TIMEOUT,
        }

    def stream(endpoint: str, is_async: bool, at_close: Callable[[], None]) -> Seen:
        session = strict_sdks.litellm_client("")(endpoint, is_async)
        if is_async:
            return asyncio.run(_astream(endpoint, session, at_close))
        seen = Seen()
        with session:
            with _catching(seen):
                response = strict_sdks.litellm().completion(**options(endpoint))
                seen.reading = time.monotonic()  # not LiteLLM's set-up on its first call
                with response:
                    for chunk in response:
                        _litellm_keep(seen, chunk)
            at_close()
        return seen

    async def _astream(endpoint: str, session: Any, at_close: Callable[[], None]) -> Seen:
        seen = Seen()
        async with session:
            with _catching(seen):
                response = await strict_sdks.litellm().acompletion(**options(endpoint))
                seen.reading = time.monotonic()
                async with response:
                    async for chunk in response:
                        _litellm_keep(seen, chunk)
            at_close()
        return seen

    return stream


def _langchain_keep(seen: Seen, chunk: Any) -> None:
    seen.items.append(chunk.model_dump(exclude={"id"}))  # the id is langchain's run id
    text = chunk.text  # a property (a str) from langchain-core 1.0, a method before
    seen.text += text if isinstance(text, str) else text()
    metadata = chunk.response_metadata
    seen.stop = metadata.get("stopReason") or metadata.get("stop_reason") or seen.stop
    seen.usage = chunk.usage_metadata or seen.usage


def langchain_stream(chat_model: str, **model: Any) -> Runner:
    """langchain-aws: ``ChatBedrockConverse`` or ``ChatBedrock`` (``model``: the model and its
    answer's length, as each class takes them) on boto3 clients, ``stream()`` (``astream()``
    async); the boto3 clients closed after (an application keeps them)."""

    def stream(endpoint: str, is_async: bool, at_close: Callable[[], None]) -> Seen:
        import langchain_aws
        from botocore.config import Config

        chat = getattr(langchain_aws, chat_model)(
            **model,
            region_name=REGION,
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=TIMEOUT,
                read_timeout=TIMEOUT,
            ),
        )
        seen = Seen()
        try:
            with _catching(seen):
                if is_async:
                    asyncio.run(_astream(chat, seen))
                else:
                    for chunk in chat.stream(PROMPT):
                        _langchain_keep(seen, chunk)
            at_close()
        finally:
            for client in (chat.client, getattr(chat, "bedrock_client", None)):
                if client is not None:
                    client.close()
        return seen

    async def _astream(chat: Any, seen: Seen) -> None:
        async for chunk in chat.astream(PROMPT):
            _langchain_keep(seen, chunk)

    return stream


@dataclass(frozen=True)
class Framework:
    """One framework streaming one route: what it is asked for, what it sends, and which broken
    endings reach the application as an exception (``told``)."""

    id: str
    route: str
    fixture: str
    #: The recording's stop reason, as otelsse reports it.
    stop_reason: str
    model: str
    #: The request target it sends (``POST``).
    target: str
    stream: Runner
    told: frozenset[str]
    #: Endings after which it leaves the HTTP response open (the span ends at collection).
    left_open: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return self.id


def _target(model: str, operation: str, encoded: bool) -> str:
    return f"/model/{quote(model, safe='') if encoded else model}/{operation}"


def _langchain_aws_closes_its_streams() -> bool:
    """Whether langchain-aws closes botocore's stream once its loop ends, in a ``finally``: from
    1.2.3 (langchain-ai/langchain-aws#858). Before, a stream it raises out of (an exception
    frame) or stops reading before EOF (``ChatBedrock`` at Claude's ``message_stop``) stays
    open, its socket with it, until collected; and so does otelsse's span for it."""
    try:
        installed = version("langchain-aws")
    except PackageNotFoundError:  # not installed: these tests cannot run anyway
        return True
    return Version(installed) >= Version("1.2.3")


_LANGCHAIN_CLOSES = _langchain_aws_closes_its_streams()


FRAMEWORKS = [
    Framework(
        "litellm-converse", CONVERSE, CONVERSE_TEXT, "end_turn", CONVERSE_MODEL,
        _target(CONVERSE_MODEL, "converse-stream", encoded=True),
        litellm_stream(f"bedrock/{CONVERSE_MODEL}"),
        told=frozenset({"cut-mid-frame", "throttled", "cut-inside-last-frame"}),
        left_open=frozenset({"throttled"}),
    ),
    Framework(
        "litellm-invoke", INVOKE, INVOKE_CLAUDE, "tool_use", INVOKE_MODEL,
        _target(INVOKE_MODEL, "invoke-with-response-stream", encoded=False),
        litellm_stream(f"bedrock/invoke/{INVOKE_MODEL}"),
        told=frozenset({"cut-mid-frame", "throttled", "cut-inside-last-frame"}),
        left_open=frozenset({"throttled"}),
    ),
    Framework(
        "langchain-converse", CONVERSE, CONVERSE_TEXT, "end_turn", CONVERSE_MODEL,
        _target(CONVERSE_MODEL, "converse-stream", encoded=True),
        langchain_stream("ChatBedrockConverse", model=CONVERSE_MODEL, max_tokens=256),
        told=frozenset({"cut-mid-frame", "throttled"}),
        left_open=frozenset() if _LANGCHAIN_CLOSES else frozenset({"throttled"}),
    ),
    Framework(
        "langchain-invoke", INVOKE, INVOKE_CLAUDE, "tool_use", INVOKE_MODEL,
        _target(INVOKE_MODEL, "invoke-with-response-stream", encoded=True),
        langchain_stream("ChatBedrock", model_id=INVOKE_MODEL, model_kwargs={"max_tokens": 256}),
        told=frozenset({"cut-mid-frame", "throttled"}),
        left_open=frozenset() if _LANGCHAIN_CLOSES else frozenset({"complete", "throttled"}),
    ),
]  # fmt: skip
BY_ID = {framework.id: framework for framework in FRAMEWORKS}


@pytest.fixture(scope="module", autouse=True)
def _drain_litellm_logging() -> Iterator[None]:
    """Wait for LiteLLM's logging tasks once this module is done with LiteLLM (its pool is
    shared with other modules: drained, never shut down)."""
    yield
    strict_sdks.drain_litellm_logging()


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS setting of the machine reaches the frameworks (a profile, a region, an endpoint
    override such as ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, a bearer token, instance metadata):
    every test passes its credentials, region and endpoint itself."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# --------------------------------------------------------------------------------------------
# How a stream ends
# --------------------------------------------------------------------------------------------


def middle_frame_end(body: bytes) -> int:
    """A frame boundary halfway through ``body``: after the first text, before the stop."""
    ends = eventstream.frame_ends(body)
    return ends[len(ends) // 2]


def last_frame_start(body: bytes) -> int:
    return eventstream.frame_ends(body)[-2]


@dataclass(frozen=True)
class Ending:
    """How the server ends the recording: ``reply(body)`` is the ``Reply``'s arguments; the
    outcome otelsse reports, and whether the stop reason was seen (the recording's, else
    none)."""

    id: str
    reply: Callable[[bytes], dict[str, Any]]
    outcome: str
    keeps_stop: bool


ENDINGS = {
    ending.id: ending
    for ending in [
        Ending("complete", lambda body: {"body": body}, "complete", True),
        Ending(
            "cut-mid-frame",
            lambda body: {"body": body, "cut": middle_frame_end(body) + 7},
            "truncated",
            False,
        ),
        Ending(
            "throttled",
            lambda body: {
                "body": body[: middle_frame_end(body)]
                + eventstream.exception("throttlingException", THROTTLED)
            },
            "rate_limited",
            False,
        ),
        Ending(
            "eof-before-last-frame",
            lambda body: {"body": body[: last_frame_start(body)], "framing": "length"},
            "terminal_missing",
            True,
        ),
        Ending(
            "cut-inside-last-frame",
            lambda body: {"body": body, "framing": "close", "cut": last_frame_start(body) + 20},
            "truncated",
            True,
        ),
    ]
}


# --------------------------------------------------------------------------------------------
# Running a framework with and without otelsse
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(framework: Framework, ending: Ending) -> Iterator[SSEServer]:
    """A server answering the framework's request target with the recording ended so."""
    reply = ending.reply(read_fixture(framework.fixture))
    with SSEServer() as server:
        server.route(framework.target, Reply(content_type=EVENT_STREAM, **reply))
        yield server


def assert_requests(framework: Framework, server: SSEServer, count: int) -> None:
    """The server got ``count`` requests, each the framework's, signed for the region."""
    assert [(r.method, r.target) for r in server.received] == [("POST", framework.target)] * count
    for request in server.received:
        authorization = request.headers["authorization"]
        assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
        assert f"/{REGION}/bedrock/aws4_request" in authorization


def collect() -> None:
    """``gc.collect()``. A botocore response a framework left open leaks its socket, which says
    so when collected (``ResourceWarning``, with otelsse or without): the framework's warning
    (langchain-aws before 1.2.3), not what these tests look at; collected here, after each
    run, rather than in whichever test a collection strikes next."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def ended_once_collected(telemetry: Telemetry) -> None:
    """The stream the application left open ends once what it left behind is collected. What
    holds it may outlive the application's call a little (LiteLLM hands the exception, and with
    it the frames that hold the response, to its logging threads): collected until it ends."""

    def ended() -> bool:
        collect()
        return bool(telemetry.spans())

    soon(ended, ENDED_WAIT, "the stream's span ended once collected")


@dataclass(frozen=True)
class Both:
    plain: Seen
    observed: Seen
    telemetry: Telemetry
    #: Ended ``otelsse.stream`` spans when the instrumented application's loop was just over.
    ended_at_close: int


@contextlib.contextmanager
def with_and_without(framework: Framework, ending: Ending, is_async: bool) -> Iterator[Both]:
    """The application run not instrumented, then instrumented against a fresh in-memory SDK;
    the instrumented stream's span ended (a stream the application left open, by collecting
    what it left behind)."""
    with served(framework, ending) as server:
        endpoint = server.url("")
        assert not SSEInstrumentor().is_instrumented_by_opentelemetry
        plain = framework.stream(endpoint, is_async, _nothing)
        collect()
        telemetry = Telemetry().install()
        closed: list[int] = []
        try:
            observed = framework.stream(
                endpoint, is_async, lambda: closed.append(len(telemetry.spans()))
            )
            ended_once_collected(telemetry)
            yield Both(plain, observed, telemetry, closed[0])
        finally:
            telemetry.uninstall()
        assert_requests(framework, server, 2)


def assert_recorded(
    telemetry: Telemetry, framework: Framework, outcome: str, stop_reason: str | None
) -> ReadableSpan:
    """Exactly one ended span with these values, and metric points that agree with it."""
    span = telemetry.stream_span()
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert attributes[semconv.ROUTE] == framework.route
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes.get(semconv.STOP_REASON) == stop_reason
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "aws.bedrock"
    # From the request's path, percent-encoded or not.
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == framework.model
    assert attributes[semconv.SERVER_ADDRESS] == "127.0.0.1"
    if outcome in semconv.ERROR_OUTCOMES:
        assert span.status.status_code is StatusCode.ERROR
        assert attributes[semconv.ERROR_TYPE] == outcome
    else:
        assert span.status.status_code is not StatusCode.ERROR
    if outcome == "complete":
        assert attributes[semconv.BYTES_RECEIVED] == len(read_fixture(framework.fixture))

    assert telemetry.nonzero_outcomes() == {outcome: 1}
    (duration,) = telemetry.points(semconv.STREAM_DURATION.name)
    assert duration.value == 1
    assert duration.attributes[semconv.ROUTE] == framework.route
    assert duration.attributes[semconv.OUTCOME] == outcome
    assert telemetry.active_streams() == 0
    assert telemetry.instrumentation_errors() == 0
    return span


# --------------------------------------------------------------------------------------------
# 1. Same result for the application, one span with the right outcome
# --------------------------------------------------------------------------------------------

#: The fast loop's one framework test: the boto3 path, as most Bedrock applications take it.
SMOKE = ("langchain-converse", "complete", False)


#: Endings run through langchain-aws's ``astream()`` as well: it runs the same sync botocore
#: calls on the event loop's executor, so its other endings would repeat the sync runs' evidence
#: (LiteLLM's async path is another HTTP client: every ending runs on both).
LANGCHAIN_ASYNC_ENDINGS = frozenset({"complete"})


def _cases() -> list[Any]:
    cases = []
    for framework in FRAMEWORKS:
        for ending in ENDINGS.values():
            for is_async in (False, True):
                if (
                    is_async
                    and framework.id.startswith("langchain")
                    and ending.id not in LANGCHAIN_ASYNC_ENDINGS
                ):
                    continue
                key = (framework.id, ending.id, is_async)
                cases.append(
                    pytest.param(
                        framework, ending, is_async,
                        id=f"{framework}-{ending.id}-{'async' if is_async else 'sync'}",
                        marks=() if key == SMOKE else pytest.mark.e2e,
                    )
                )  # fmt: skip
    return cases


@pytest.mark.parametrize(("framework", "ending", "is_async"), _cases())
def test_framework_stream_is_the_same_and_has_one_span(
    framework: Framework, ending: Ending, is_async: bool
) -> None:
    with with_and_without(framework, ending, is_async) as both:
        assert both.observed == both.plain
        assert both.plain.items  # the answer had begun whatever the ending
        # The application is told of the failure (an exception) exactly where the framework
        # notices it; otelsse's outcome says it either way.
        assert (both.plain.error is not None) is (ending.id in framework.told)
        stop = framework.stop_reason if ending.keeps_stop else None
        assert_recorded(both.telemetry, framework, ending.outcome, stop)
        # Ended by the time the application's loop was over, not later by collection: but
        # where the framework leaves the response open (see the LiteLLM test below).
        if ending.id not in framework.left_open:
            assert both.ended_at_close == 1
        if ending.id == "complete" and framework.route == CONVERSE and both.plain.usage:
            # langchain-aws hands over the token counts of ConverseStream's metadata: the span
            # has the same ones.
            attributes = both.telemetry.stream_span().attributes or {}
            assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == both.plain.usage["input_tokens"]
            assert (
                attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == both.plain.usage["output_tokens"]
            )


# --------------------------------------------------------------------------------------------
# 2. The silent failures: a broken stream the framework hands over as a whole answer
# --------------------------------------------------------------------------------------------

SILENT = [
    pytest.param(framework, ENDINGS[ending], id=f"{framework}-{ending}", marks=pytest.mark.e2e)
    for framework in FRAMEWORKS
    for ending in ("eof-before-last-frame", "cut-inside-last-frame")
    if ending not in framework.told
]


@pytest.mark.parametrize(("framework", "ending"), SILENT)
def test_framework_takes_a_broken_stream_for_a_whole_answer(
    framework: Framework, ending: Ending
) -> None:
    """The framework raises nothing and hands over the whole text and the stop reason; only
    the token usage (Bedrock's last frame) is missing, if anything. otelsse says the stream did
    not end as Bedrock ends one: ``terminal_missing`` (the end marker never came), or
    ``truncated`` (the connection closed inside a frame)."""
    with served(framework, ENDINGS["complete"]) as server:
        whole = framework.stream(server.url(""), False, _nothing)
        collect()
    assert whole.error is None

    with served(framework, ending) as server:
        telemetry = Telemetry().install()
        closed: list[int] = []
        try:
            broken = framework.stream(
                server.url(""), False, lambda: closed.append(len(telemetry.spans()))
            )
            assert closed == [1]  # ended by the time the application had it
            span = assert_recorded(telemetry, framework, ending.outcome, framework.stop_reason)
        finally:
            telemetry.uninstall()
        assert_requests(framework, server, 1)

    assert broken.error is None
    assert broken.text == whole.text
    assert broken.stop == whole.stop
    if framework.id.startswith("litellm"):
        # LiteLLM puts no usage on its chunks unless asked: the application cannot tell the
        # two streams apart at all.
        assert whole.usage is None
        assert broken == whole
    else:
        assert whole.usage
        assert broken.usage is None  # the answer's token counts are lost, without a word
    assert (span.attributes or {})[semconv.TERMINAL_SEEN] is False


# --------------------------------------------------------------------------------------------
# 3. LiteLLM and a Bedrock exception frame
# --------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("framework", [BY_ID["litellm-converse"]], ids=str)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_litellm_leaves_the_response_open_after_an_exception_frame(
    framework: Framework, is_async: bool
) -> None:
    """LiteLLM raises a ``RateLimitError`` (in its ``MidStreamFallbackError``) at the
    ``throttlingException`` frame, and leaves the HTTP response open, even though the
    application read the stream inside ``with``: nothing reads the body to its end or closes
    it, so otelsse's stream stays active (its span not ended, its duration growing) until the
    response is garbage collected or its connection closed, and ends ``rate_limited`` then.
    (langchain-aws closes the botocore stream in a ``finally``: its span ends at the exception.)
    Automatic collection is off while the application runs, so that what it left behind is
    still there to see once its loop is over; then the session closes LiteLLM's clients (async:
    that closes the connection, which ends the stream) and the test collects the rest."""
    with served(framework, ENDINGS["throttled"]) as server:
        telemetry = Telemetry().install()
        at_close: list[tuple[int, float]] = []
        try:
            gc.disable()
            try:
                seen = framework.stream(
                    server.url(""),
                    is_async,
                    lambda: at_close.append((len(telemetry.spans()), telemetry.active_streams())),
                )
            finally:
                gc.enable()
            assert at_close == [(0, 1)]  # still active once the application's ``with`` is left
            ended_once_collected(telemetry)
            assert_recorded(telemetry, framework, "rate_limited", None)
        finally:
            telemetry.uninstall()
        assert_requests(framework, server, 1)
    assert seen.error is not None
    name, message = seen.error
    assert name == "litellm.exceptions.MidStreamFallbackError"
    assert "RateLimitError" in message
    assert THROTTLED in message
