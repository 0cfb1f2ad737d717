"""Applications on the real openai, anthropic and LiteLLM SDKs streaming from the fake provider,
for ``tests/instrumentation/test_strict_sdks.py``.

A ``Surface`` is one way an application streams (an SDK, its call, sync or async); a ``Variant``
is one of the fake provider's scenarios as a request asks for it (its header, whether it offers
a tool, its job). ``session`` opens one SDK client, as an application does, and streams several
variants through it, each inside a context (not instrumented, strict mode off, on...); for each
it returns what the application saw (``Seen``): every item the SDK yielded (``model_dump()``),
what its stream helper handed over at the end (``get_final_*()``), and the exception that
reached the application, if any, with the step of the application's flow it surfaced at.
``retrying`` is an application's retry loop, written the way each SDK's documentation
recommends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from otelsse._demo.provider import (
    DEFAULT_MODELS,
    JOB_HEADER,
    SCENARIO_HEADER,
    WEATHER_TOOL,
    request_for,
)
from tests._clients import TLS
from tests._helpers import WELL_BEFORE
from tests._server import MAX_WAIT

__all__ = [
    "SURFACES",
    "Retried",
    "Seen",
    "Step",
    "Surface",
    "Variant",
    "drain_litellm_logging",
    "framing_of",
    "litellm",
    "litellm_client",
    "litellm_delta",
    "retrying",
    "session",
]

#: Every SDK client's timeout: only bounds a test that is wrong; a passing test never reaches it.
TIMEOUT = 10.0
PROMPT = [{"role": "user", "content": "Why do streamed answers need a terminal event?"}]
CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
MESSAGES = "anthropic.messages"

CHAT_TOOLS = [{"type": "function", "function": WEATHER_TOOL}]
RESPONSES_TOOLS = [{"type": "function", **WEATHER_TOOL}]
ANTHROPIC_TOOLS = [
    {
        "name": WEATHER_TOOL["name"],
        "description": WEATHER_TOOL["description"],
        "input_schema": WEATHER_TOOL["parameters"],
    }
]


# --------------------------------------------------------------------------------------------
# What the application asks for, and what it saw
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """A scenario as a request asks for it: the scenario header (None: the provider's default
    answer, a tool call when the request offers the tool), whether the request offers the
    weather tool, and its job (``x-otelsse-demo-job``), from which the provider draws the
    answer's length, pacing and framing: the same job gets the same answer every time."""

    id: str
    scenario: str | None
    tools: bool
    job: str
    #: The outcome otelsse reports for it.
    outcome: str
    #: For ``truncated``: the framing of the cut body (``chunked`` or ``close``), which the
    #: provider draws per job (``framing_of`` finds a job for each).
    framing: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {JOB_HEADER: self.job}
        if self.scenario is not None:
            headers[SCENARIO_HEADER] = self.scenario
        return headers


@dataclass
class Seen:
    """What the application saw: the items the SDK yielded, what its stream helper handed over
    at the end, and the exception (qualified class name and message) with the step it surfaced
    at: ``call`` (the call that sends the request), ``enter`` (entering the stream's ``with``),
    ``iterate`` (the application's loop), ``final`` (``get_final_*()``), ``exit`` (leaving the
    ``with``). Compared by these; ``exception`` is the object itself, for its chain."""

    items: list[Any] = field(default_factory=list)
    final: Any = None
    error: tuple[str, str] | None = None
    where: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    def chain(self) -> list[BaseException]:
        """The exception and what it was raised from or while handling, outermost first."""
        found: list[BaseException] = []
        error = self.exception
        while error is not None and error not in found:
            found.append(error)
            error = error.__cause__ or error.__context__
        return found


def _qualified(error: BaseException) -> str:
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------------------------
# The SDKs as applications use them
# --------------------------------------------------------------------------------------------
# The openai and anthropic clients get the SDK's own default HTTP client
# (``DefaultHttpxClient``, the class and settings it builds itself) with one shared TLS context:
# every URL here is http://, and loading the CA bundle costs each client ~90 ms of CPU.


@dataclass(frozen=True)
class Surface:
    """One way an application streams.

    ``client(base_url, is_async, **options)`` makes the SDK client (a context manager, async for
    async); ``call(client, headers, tools)`` starts the stream (the same call sync or async;
    async it may return an awaitable of it) and returns what the application iterates inside a
    ``with``; ``final(stream)`` is the stream helper's final result, if it has one;
    ``text(seen)`` is the answer's text as the application assembles it from what it saw.
    """

    id: str
    sdk: str  # openai, anthropic, litellm
    route: str
    is_async: bool
    client: Callable[..., Any]
    call: Callable[[Any, dict[str, str], bool], Any]
    dump: Callable[[Any], Any]
    text: Callable[[Seen], str]
    final: Callable[[Any], Any] | None = None

    def __str__(self) -> str:
        return self.id


def openai_client(base_url: str, is_async: bool, **options: Any) -> Any:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    http = openai.DefaultAsyncHttpxClient if is_async else openai.DefaultHttpxClient
    options = {"max_retries": 0, "http_client": http(verify=TLS), **options}
    return cls(base_url=base_url + "/v1", api_key="test", timeout=TIMEOUT, **options)


def anthropic_client(base_url: str, is_async: bool, **options: Any) -> Any:
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    http = anthropic.DefaultAsyncHttpxClient if is_async else anthropic.DefaultHttpxClient
    options = {"max_retries": 0, "http_client": http(verify=TLS), **options}
    return cls(base_url=base_url, api_key="test", timeout=TIMEOUT, **options)


def model_dump(item: Any) -> Any:
    # The openai SDK's generic ParsedResponse (the Responses stream helper's snapshot) warns
    # while serializing its output union; the values are right, the warning is pydantic's.
    return item.model_dump(warnings=False)


def _tools(tools: bool, offered: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tools": offered} if tools else {}


def chat_create(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True, extra_headers=headers,
        **_tools(tools, CHAT_TOOLS),
    )  # fmt: skip


def chat_stream(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.chat.completions.stream(
        model="gpt-4o-mini", messages=PROMPT, extra_headers=headers, **_tools(tools, CHAT_TOOLS)
    )


def responses_create(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.responses.create(
        model="gpt-4.1", input="hi", stream=True, extra_headers=headers,
        **_tools(tools, RESPONSES_TOOLS),
    )  # fmt: skip


def responses_stream(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.responses.stream(
        model="gpt-4.1", input="hi", extra_headers=headers, **_tools(tools, RESPONSES_TOOLS)
    )


def messages_create(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.messages.create(
        model="claude-sonnet-4-6", max_tokens=256, messages=PROMPT, stream=True,
        extra_headers=headers, **_tools(tools, ANTHROPIC_TOOLS),
    )  # fmt: skip


def messages_stream(client: Any, headers: dict[str, str], tools: bool) -> Any:
    return client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=256, messages=PROMPT, extra_headers=headers,
        **_tools(tools, ANTHROPIC_TOOLS),
    )  # fmt: skip


def final_completion(stream: Any) -> Any:
    return stream.get_final_completion()


def final_response(stream: Any) -> Any:
    return stream.get_final_response()


def final_message(stream: Any) -> Any:
    return stream.get_final_message()


# -- the text the application assembles -------------------------------------------------------


def chunks_text(seen: Seen) -> str:
    return "".join(
        choice["delta"]["content"] or "" for chunk in seen.items for choice in chunk["choices"]
    )


def completion_text(seen: Seen) -> str:
    return str(seen.final["choices"][0]["message"]["content"])


def responses_text(seen: Seen) -> str:
    return "".join(e["delta"] for e in seen.items if e["type"] == "response.output_text.delta")


def response_text(seen: Seen) -> str:
    return "".join(
        part["text"]
        for item in seen.final["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def messages_text(seen: Seen) -> str:
    return "".join(
        e["delta"]["text"]
        for e in seen.items
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )


def message_text(seen: Seen) -> str:
    return "".join(block["text"] for block in seen.final["content"] if block["type"] == "text")


def litellm_text(seen: Seen) -> str:
    return "".join(content or "" for chunk in seen.items for content, _, _ in chunk)


# -- LiteLLM ---------------------------------------------------------------------------------


def litellm() -> Any:
    """LiteLLM, imported on first use (it is slow to import), never fetching its price map; its
    logging pool records what it is given from then on (``drain_litellm_logging``)."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.suppress_debug_info = True  # it prints a "Provider List" banner for made-up models
    _record_litellm_logging()
    return litellm


#: What LiteLLM handed its logging pool since ``litellm()`` started recording.
_LOGGED: list[Future[Any]] = []


def _record_litellm_logging() -> None:
    """Keep the future of every task LiteLLM submits to its logging pool (a module-global
    ``ThreadPoolExecutor`` its streams hand their success logging to)."""
    from litellm.litellm_core_utils.thread_pool_executor import executor

    if "submit" in vars(executor):  # recording already
        return
    submit = executor.submit
    try:
        submit(lambda: None)
    except RuntimeError as exc:  # shut down: LiteLLM's sync streams fail on their first chunk
        raise AssertionError(
            "LiteLLM's logging pool is shut down in this process (a test module's teardown "
            "called executor.shutdown()); drain it with drain_litellm_logging() instead"
        ) from exc

    def recorded(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = submit(fn, *args, **kwargs)
        _LOGGED.append(future)
        return future

    executor.submit = recorded


def drain_litellm_logging() -> None:
    """Wait, well before ``MAX_WAIT``, for every logging task LiteLLM was given, so that none
    runs into another test, then stop recording. The pool stays open: it is LiteLLM's, for the
    whole process, and shutting it down would break every later LiteLLM stream in it."""
    if "litellm" not in sys.modules:
        return
    from litellm.litellm_core_utils.thread_pool_executor import executor

    logged = list(_LOGGED)
    _LOGGED.clear()
    vars(executor).pop("submit", None)
    began = time.monotonic()
    _, pending = concurrent.futures.wait(logged, timeout=MAX_WAIT)
    took = time.monotonic() - began
    assert not pending, f"{len(pending)} LiteLLM logging tasks still running after {MAX_WAIT} s"
    assert took < MAX_WAIT * WELL_BEFORE, f"LiteLLM's logging took {took:.2f} s to drain"


@dataclass(frozen=True)
class LiteLLM:
    """LiteLLM as an application calls it: ``completion`` (``acompletion`` when async) with the
    fake provider as ``api_base``; ``options`` go with every call."""

    api_base: str
    is_async: bool
    options: dict[str, Any]

    def completion(self, **options: Any) -> Any:
        module = litellm()
        complete = module.acompletion if self.is_async else module.completion
        return complete(
            api_base=self.api_base, api_key="test", timeout=TIMEOUT, **self.options, **options
        )


def litellm_client(api_path: str) -> Callable[..., Any]:
    """A context manager giving ``LiteLLM`` for ``base_url + api_path``. LiteLLM keeps the SDK
    and HTTP clients it builds (its client cache, module-level clients for ``anthropic/``);
    leaving closes them (the async ones in the loop that used them), so no connection outlives
    the session. LiteLLM builds them again."""

    def make(base_url: str, is_async: bool, **options: Any) -> Any:
        module = litellm()
        cache = module.in_memory_llm_clients_cache
        caller = LiteLLM(base_url + api_path, is_async, options)
        if is_async:

            @contextlib.asynccontextmanager
            async def async_session() -> AsyncIterator[LiteLLM]:
                try:
                    yield caller
                finally:
                    await module.close_litellm_async_clients()
                    module_level = vars(module).get("module_level_aclient")
                    if module_level is not None:
                        await module_level.close()
                    cache.flush_cache()

            return async_session()

        @contextlib.contextmanager
        def sync_session() -> Iterator[LiteLLM]:
            try:
                yield caller
            finally:
                module_level = vars(module).get("module_level_client")
                for cached in [*cache.cache_dict.values(), module_level]:
                    close = getattr(cached, "close", None)
                    if close is not None and not inspect.iscoroutinefunction(close):
                        close()
                cache.flush_cache()
                _close_implicit_event_loop()

        return sync_session()

    return make


def _close_implicit_event_loop() -> None:
    """Close the event loop a sync LiteLLM call left set in this thread (its service logger
    calls ``asyncio.get_event_loop()`` outside any loop, which makes one and keeps it; the next
    ``asyncio.run()`` unsets it, and its collection then warns about an unclosed loop, and its
    socket pair, in whichever test runs then)."""
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns when this call has to make the loop (nothing was left behind).
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none set (asyncio.run() unset it): nothing was left behind
        return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)


def litellm_call(model: str) -> Callable[[Any, dict[str, str], bool], Any]:
    def call(client: LiteLLM, headers: dict[str, str], tools: bool) -> Any:
        return client.completion(
            model=model, messages=PROMPT, stream=True, extra_headers=headers,
            **_tools(tools, CHAT_TOOLS),
        )  # fmt: skip

    return call


def litellm_delta(chunk: Any) -> Any:
    """A LiteLLM chunk without the id and timestamp it makes up for each call: per choice, its
    text, its tool-call deltas and its finish reason."""
    return [
        (
            choice.delta.content,
            [
                (call.index, call.id, call.function.name, call.function.arguments)
                for call in choice.delta.tool_calls or ()
            ],
            choice.finish_reason,
        )
        for choice in chunk.choices
    ]


def _surfaces() -> list[Surface]:
    kinds = [
        ("openai-chat-create", "openai", CHAT, openai_client, chat_create, model_dump,
         chunks_text, None),
        ("openai-chat-stream", "openai", CHAT, openai_client, chat_stream, model_dump,
         completion_text, final_completion),
        ("openai-responses-create", "openai", RESPONSES, openai_client, responses_create,
         model_dump, responses_text, None),
        ("openai-responses-stream", "openai", RESPONSES, openai_client, responses_stream,
         model_dump, response_text, final_response),
        ("anthropic-create", "anthropic", MESSAGES, anthropic_client, messages_create,
         model_dump, messages_text, None),
        ("anthropic-stream", "anthropic", MESSAGES, anthropic_client, messages_stream,
         model_dump, message_text, final_message),
        ("litellm-openai", "litellm", CHAT, litellm_client("/v1"),
         litellm_call("openai/gpt-4o-mini"), litellm_delta, litellm_text, None),
        ("litellm-anthropic", "litellm", MESSAGES, litellm_client(""),
         litellm_call("anthropic/claude-sonnet-4-6"), litellm_delta, litellm_text, None),
    ]  # fmt: skip
    return [
        Surface(f"{name}-{'async' if is_async else 'sync'}", sdk, route, is_async, *rest)
        for name, sdk, route, *rest in kinds
        for is_async in (False, True)
    ]


SURFACES = _surfaces()


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


def _stream(surface: Surface, client: Any, variant: Variant, seen: Seen) -> None:
    """Stream ``variant`` like an application: open the stream in a ``with``, iterate it
    keeping each item, ask the helper for its final result, leave. Fills ``seen`` as it goes
    (``where``: the step under way); raises what the SDK raises."""
    seen.where = "call"
    opened = surface.call(client, variant.headers(), variant.tools)
    seen.where = "enter"
    with opened as stream:
        seen.where = "iterate"
        for item in stream:
            seen.items.append(surface.dump(item))
        if surface.final is not None:
            seen.where = "final"
            seen.final = model_dump(surface.final(stream))
        seen.where = "exit"
    seen.where = None


async def _astream(surface: Surface, client: Any, variant: Variant, seen: Seen) -> None:
    seen.where = "call"
    opened = surface.call(client, variant.headers(), variant.tools)
    if inspect.isawaitable(opened):
        opened = await opened
    seen.where = "enter"
    async with opened as stream:
        seen.where = "iterate"
        async for item in stream:
            seen.items.append(surface.dump(item))
        if surface.final is not None:
            seen.where = "final"
            seen.final = model_dump(await surface.final(stream))
        seen.where = "exit"
    seen.where = None


@contextlib.contextmanager
def _catching(seen: Seen) -> Iterator[None]:
    """Keep in ``seen`` the exception the block raises, as the application catching it."""
    try:
        yield
    except Exception as error:
        seen.error, seen.exception = (_qualified(error), str(error)), error


@dataclass(frozen=True)
class Step:
    """One stream of a session: ``variant``, sent inside ``mode()`` (a context manager)."""

    variant: Variant
    mode: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext


def session(
    surface: Surface, base_url: str, steps: Sequence[Step], after: Callable[[], Any]
) -> list[tuple[Seen, Any]]:
    """Stream each step through one SDK client, in order, like an application that keeps its
    client: what the application saw, and ``after()`` called once the step is done."""
    if surface.is_async:
        return asyncio.run(_asession(surface, base_url, steps, after))
    done: list[tuple[Seen, Any]] = []
    with surface.client(base_url, False) as client:
        for step in steps:
            seen = Seen()
            with step.mode(), _catching(seen):
                _stream(surface, client, step.variant, seen)
            done.append((seen, after()))
    return done


async def _asession(
    surface: Surface, base_url: str, steps: Sequence[Step], after: Callable[[], Any]
) -> list[tuple[Seen, Any]]:
    done: list[tuple[Seen, Any]] = []
    async with surface.client(base_url, True) as client:
        for step in steps:
            seen = Seen()
            with step.mode(), _catching(seen):
                await _astream(surface, client, step.variant, seen)
            done.append((seen, after()))
    return done


# --------------------------------------------------------------------------------------------
# Retrying as each SDK's documentation recommends
# --------------------------------------------------------------------------------------------


def retryable(surface: Surface, error: Exception) -> bool:
    """Whether the application retries ``error``, as its SDK's documentation says to.

    openai and anthropic ("Handling errors"): ``APIConnectionError`` is raised when the SDK
    cannot reach the API or the connection fails, and is what their own retries retry.
    LiteLLM ("Exception Mapping"): its exceptions inherit from openai's, so an ``except``
    written for openai's catches them; "Should you retry exception?": ``_should_retry(
    e.status_code)``.
    """
    if surface.sdk == "openai":
        return isinstance(error, openai.APIConnectionError)
    if surface.sdk == "anthropic":
        return isinstance(error, anthropic.APIConnectionError)
    return isinstance(error, openai.APIError) and bool(
        litellm()._should_retry(getattr(error, "status_code", 0))
    )


def documented_retries(surface: Surface) -> dict[str, Any]:
    """The client options an application following its SDK's documentation has: the SDK's own
    retries (openai, anthropic: ``max_retries``, 2 by default; LiteLLM: ``num_retries``)."""
    if surface.sdk == "openai":
        return {"max_retries": openai.DEFAULT_MAX_RETRIES}
    if surface.sdk == "anthropic":
        return {"max_retries": anthropic.DEFAULT_MAX_RETRIES}
    return {"num_retries": 2}


@dataclass
class Retried:
    """What the retry loop ended with: the answer's text, and every error it retried."""

    text: str
    errors: list[Exception]


@dataclass
class _Attempts:
    """The retry loop's attempts at ``surface``: 1 to ``attempts``, and the errors retried."""

    surface: Surface
    attempts: int
    errors: list[Exception] = field(default_factory=list)

    def __iter__(self) -> Iterator[int]:
        return iter(range(1, self.attempts + 1))

    @contextlib.contextmanager
    def retrying(self, attempt: int) -> Iterator[None]:
        """Around one attempt: keeps what the block raises to retry it, or lets it through
        where the SDK's documentation says not to retry it, or on the last attempt."""
        try:
            yield
        except Exception as error:
            if not retryable(self.surface, error) or attempt == self.attempts:
                raise
            self.errors.append(error)


def retrying(
    surface: Surface, base_url: str, variants: Callable[[int], Variant], attempts: int = 3
) -> Retried:
    """The application's retry loop: stream ``variants(attempt)`` (attempt 1, 2...) with a
    client built with the SDK's default options (its own retries on), retry what the SDK's
    documentation says to retry, up to ``attempts``; re-raise anything else."""
    if surface.is_async:
        return asyncio.run(_aretrying(surface, base_url, variants, attempts))
    tries = _Attempts(surface, attempts)
    with surface.client(base_url, False, **documented_retries(surface)) as client:
        for attempt in tries:
            seen = Seen()
            with tries.retrying(attempt):
                _stream(surface, client, variants(attempt), seen)
                return Retried(surface.text(seen), tries.errors)
    raise AssertionError("unreachable")


async def _aretrying(
    surface: Surface, base_url: str, variants: Callable[[int], Variant], attempts: int
) -> Retried:
    tries = _Attempts(surface, attempts)
    async with surface.client(base_url, True, **documented_retries(surface)) as client:
        for attempt in tries:
            seen = Seen()
            with tries.retrying(attempt):
                await _astream(surface, client, variants(attempt), seen)
                return Retried(surface.text(seen), tries.errors)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# The provider's framing of a cut
# --------------------------------------------------------------------------------------------


def framing_of(port: int, job: str) -> str:
    """How the fake provider frames a ``truncated`` answer to ``job`` (it draws it from its seed
    and the job alone): ``chunked`` or ``close``, read from the reply of a raw request."""
    path, body = request_for(CHAT, DEFAULT_MODELS[CHAT], tools=False)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"{SCENARIO_HEADER}: truncated\r\n{JOB_HEADER}: {job}\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    ).encode()
    began = time.monotonic()
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=MAX_WAIT) as connection:
        connection.sendall(head + payload)
        while chunk := connection.recv(65536):
            data += chunk
    took = time.monotonic() - began
    assert took < MAX_WAIT * WELL_BEFORE, f"the reply took {took:.2f} s of its {MAX_WAIT} s bound"
    headers = data.partition(b"\r\n\r\n")[0].decode("latin-1").lower().split("\r\n")
    return "chunked" if "transfer-encoding: chunked" in headers else "close"
