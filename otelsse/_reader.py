"""The enforcing reader: text and tool calls, released only once the stream has really ended.

``read_stream()`` reads a whole response through the same ``StreamMonitor`` the instrumentation
uses and returns a ``StreamResult`` only after the route's terminal event, with every tool call's
arguments parsed as exactly one JSON value (and checked against the tool's JSON Schema when one is
given). Anything else raises ``StreamFault`` with a stable ``code``: an outcome name
(``truncated``, ``provider_error``, ``incomplete``...) or one of ``FAULT_CODES``
(``unaccepted_stop``, ``tool_schema_error``, ``unregistered_tool``, ``duplicate_tool_call_id``).
A fault's message never contains content. Reading stops at the route's last event, a breached
ceiling or a deadline, and the response is closed.

The reader accepts by the monitor's verdict, so its rules are the observer's: a body that ends
cleanly after the whole answer but without the route's terminal event (no ``data: [DONE]``) is
refused as ``terminal_missing``, since a cut just before the marker is the same bytes, unless
the host's profile says the server ends so (``no_done``: then it is ``complete``). An empty
argument text is a call without arguments (``{}``), which the tool's schema may refuse.

For a UI that must show tokens as they come, ``StreamReader`` yields ``TextDelta`` values
first: they are marked ``provisional`` because nothing is accepted until ``result()`` returns.

Sources: an httpx or httpx2 ``Response`` (sync or async), a requests ``Response`` opened with
``stream=True``, an aiohttp ``ClientResponse``, the ``EventStream`` boto3 and aiobotocore hand
out as ``response["stream"]`` (Bedrock), or any (async) iterable of ``bytes``. A response is
read through its client module (``otelsse._clients``), which knows its status, headers,
request, body and exceptions; it is checked for a 2xx status and the route's media type
(``text/event-stream``; AWS's event stream for Bedrock) before its body is read.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any

from ._clients import Client, client_of, is_transport_failure, stream_error
from ._core.http import EVENT_STREAM, media_type, retry_after, stream_violation
from ._core.state import CUSTOM, FUNCTION, SERVER, ToolCall
from ._exceptions import OtelSSEError
from ._monitor import VIOLATION_OUTCOMES, Limits, Outcome, StreamError, StreamMonitor, StreamReport
from ._tools import (
    DUPLICATE_TOOL_CALL_ID,
    TOOL_SCHEMA_ERROR,
    UNREGISTERED_TOOL,
    ToolRegistry,
    ToolSchemas,
)
from .routes import AUTO, Route, detect_route, get_route, make_adapter

__all__ = [
    "AsyncStreamReader",
    "StreamFault",
    "StreamReader",
    "StreamResult",
    "TextDelta",
    "ToolCallResult",
    "aread_stream",
    "read_stream",
]

#: The stream's stop reason is not one the caller accepts.
UNACCEPTED_STOP = "unaccepted_stop"
#: Codes a ``StreamFault`` may carry besides the outcome names (the tool-call ones are
#: ``_tools``'s, shared with the tool gate).
FAULT_CODES: tuple[str, ...] = (
    UNACCEPTED_STOP, TOOL_SCHEMA_ERROR, UNREGISTERED_TOOL, DUPLICATE_TOOL_CALL_ID,
)  # fmt: skip


class StreamFault(OtelSSEError):
    """The enforcing reader refused a stream.

    Attributes:
        code: stable machine-readable reason: an outcome name, ``unaccepted_stop`` or
            ``tool_schema_error``.
        report: the stream's report, when the body was read (None for a refused status).
        retry_after: for ``rate_limited`` and ``http_error``, the seconds the server asked the
            caller to wait (``Retry-After``), when it said.
    """

    def __init__(
        self,
        code: str,
        report: StreamReport | None = None,
        *,
        detail: str = "",
        retry_after: float | None = None,
    ):
        self.code = code
        self.report = report
        self.retry_after = retry_after
        message = f"stream refused: {code}"
        if report is not None:
            message += f" (route={report.route}, stop_reason={report.stop_reason})"
        if detail:
            message += f": {detail}"
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of text as it arrived; ``provisional`` until the stream is accepted."""

    key: int
    text: str
    reasoning: bool = False
    provisional: bool = True

    def __repr__(self) -> str:
        return (
            f"TextDelta(key={self.key}, text=<{len(self.text)} chars>, reasoning={self.reasoning})"
        )


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """One accepted tool call.

    ``kind`` is ``"function"`` (``arguments`` parsed as exactly one JSON value), ``"custom"``
    (OpenAI's free-text tools: ``arguments`` is the input text, not judged as JSON) or
    ``"server"`` (a call the provider ran itself: reported, never the application's to run).
    """

    id: str | None
    name: str | None
    arguments: Any = field(repr=False)
    kind: str = FUNCTION


@dataclass(frozen=True, slots=True)
class StreamResult:
    """An accepted stream.

    ``texts`` maps the route's own key (choice index for chat and Gemini, content-block index
    for Anthropic, output index for Responses) to that part's text; ``reasoning`` and
    ``refusals`` likewise for reasoning/thinking text and refusal text (never part of ``text``).
    ``tool_calls`` are the calls the application is asked to run; ``server_tool_calls`` the ones
    the provider ran itself (web search, code execution, MCP), for the record only.
    """

    texts: Mapping[int, str] = field(repr=False)
    reasoning: Mapping[int, str] = field(repr=False)
    tool_calls: tuple[ToolCallResult, ...]
    stop_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    report: StreamReport
    refusals: Mapping[int, str] = field(default_factory=dict, repr=False)
    server_tool_calls: tuple[ToolCallResult, ...] = ()

    @property
    def text(self) -> str:
        """All visible text, in key order."""
        return "".join(self.texts[key] for key in sorted(self.texts))

    @property
    def refused(self) -> bool:
        """The model refused (with or without refusal text)."""
        return self.report.refusal


class _Enforcer:
    """What the sync and async readers share: route choice, HTTP checks, monitor, verdict."""

    def __init__(
        self,
        source: Any,
        route: str | type[Route] | None,
        tools: ToolSchemas | None,
        limits: Limits | None,
        accept_stop_reasons: Iterable[str] | None,
        *,
        drain: bool,
        asynchronous: bool,
        clock: Callable[[], float],
    ) -> None:
        self._clock = clock
        #: The registered tools; None when ``tools=`` was not given (any call is released).
        self.registry = None if tools is None else ToolRegistry(tools)
        self._accept = frozenset(accept_stop_reasons) if accept_stop_reasons is not None else None
        #: The source's client, None for a plain (async) iterable of bytes.
        self.client = client_of(source)
        if self.client is not None:
            try:
                route = self._check_response(self.client, source, route)
            except StreamFault:
                if not asynchronous:  # an async response is closed by its caller's context
                    _close_quietly(self.client.close, source)
                raise
        self.monitor = StreamMonitor(
            make_adapter(route or AUTO),
            limits=limits,
            started_at=clock(),
            collect_text=True,
            stop_at_end=not drain,
        )
        self._delivered: dict[tuple[bool, int], int] = {}
        #: The SSE event type of the last event read (for the tool gate's record).
        self.last_event_type: str | None = None

    @staticmethod
    def _check_response(
        client: Client, response: Any, route: str | type[Route] | None
    ) -> str | type[Route] | None:
        """Refuse a response that cannot be a stream; return the route (detected if None)."""
        status = client.status(response)
        content_type = client.headers(response).get("content-type")
        request = client.request_line(response)
        if route is None and request is not None:
            route = detect_route(*request, content_type)
        chosen = get_route(route) if isinstance(route, str) and route != AUTO else route
        expected = EVENT_STREAM if chosen is None or isinstance(chosen, str) else chosen.media_type
        violation = stream_violation(status, content_type, expected)
        if violation == "media_type":
            media = media_type(content_type)
            raise StreamFault(Outcome.PROTOCOL_ERROR.value, detail=f"media type {media!r}")
        if violation is not None:
            raise StreamFault(
                VIOLATION_OUTCOMES[violation].value,
                detail=f"HTTP status {status}",
                retry_after=retry_after(client.headers(response)),
            )
        return route

    @property
    def done(self) -> bool:
        """Nothing more will be parsed: the route's last event arrived (unless draining), or a
        ceiling stopped parsing. The reader stops reading there."""
        monitor = self.monitor
        return monitor.ended or monitor.stopped

    def feed(self, chunk: bytes) -> list[TextDelta]:
        monitor = self.monitor
        events = monitor.feed(chunk, self._clock())
        if not events:
            return []
        self.last_event_type = events[-1].event
        state = monitor.state
        deltas: list[TextDelta] = []
        for reasoning, store in ((False, state.texts), (True, state.reasoning)):
            for key, parts in store.items():
                seen = self._delivered.get((reasoning, key), 0)
                if seen < len(parts):
                    deltas.extend(TextDelta(key, part, reasoning) for part in parts[seen:])
                    self._delivered[(reasoning, key)] = len(parts)
        return deltas

    def finish(self, error: StreamError | None = None) -> StreamResult:
        report = self.monitor.close(self._clock(), error=error)
        outcome, stop = report.outcome, report.stop_reason
        accept = self._accept
        if outcome is Outcome.INCOMPLETE:
            if accept is None or stop not in accept:
                raise StreamFault(outcome.value, report)
        elif outcome is Outcome.COMPLETE:
            if accept is not None and stop is not None and stop not in accept:
                raise StreamFault(UNACCEPTED_STOP, report)
        else:
            raise StreamFault(outcome.value, report)
        state = self.monitor.state
        calls: list[ToolCallResult] = []
        server_calls: list[ToolCallResult] = []
        for call in state.tool_calls:
            if not call.valid:
                # Only reachable under an accepted non-success stop (e.g. max_tokens).
                raise StreamFault(Outcome.PAYLOAD_ERROR.value, report, detail="tool arguments")
            result = ToolCallResult(call.call_id, call.name, call.arguments, call.kind)
            (server_calls if call.kind == SERVER else calls).append(result)
        self._check_calls(calls, report)
        return StreamResult(
            texts=_joined(state.texts),
            reasoning=_joined(state.reasoning),
            tool_calls=tuple(calls),
            stop_reason=stop,
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            report=report,
            refusals=_joined(state.refusals),
            server_tool_calls=tuple(server_calls),
        )

    def _check_calls(self, calls: list[ToolCallResult], report: StreamReport) -> None:
        """Every call the application is asked to run has an id of its own and, when tools
        were registered, a registered name and arguments its schema accepts."""
        ids = [call.id for call in calls if call.id is not None]
        if len(ids) != len(set(ids)):
            raise StreamFault(DUPLICATE_TOOL_CALL_ID, report)
        registry = self.registry
        if registry is None:
            return
        for position, call in enumerate(calls):
            # The position only: a name the model made up is its output, not ours to log.
            if call.name not in registry.names:
                raise StreamFault(UNREGISTERED_TOOL, report, detail=f"tool call {position}")
            if call.kind == CUSTOM:
                continue
            keyword = registry.schema_error(call.name, call.arguments)
            if keyword is not None:
                detail = f"tool call {position} failed schema keyword {keyword!r}"
                raise StreamFault(TOOL_SCHEMA_ERROR, report, detail=detail)

    def finish_after(self, exc: BaseException) -> StreamResult:
        """The source raised ``exc``, which is a transport failure: judge the stream as ended by
        it. Unless the terminal event had already arrived (then the stream is judged as usual),
        this refuses it with the outcome as code (``truncated``, ``timeout``), chained to
        ``exc``."""
        try:
            return self.finish(stream_error(exc))
        except StreamFault as fault:
            raise fault from exc


def _propagates(exc: BaseException) -> bool:
    """Whether an exception from the source reaches the caller unchanged instead of a fault.

    Only a transport failure is the stream's fault (``is_transport_failure``). Cancellation,
    the interpreter's own exceptions (``SystemExit``, ``KeyboardInterrupt``), ``MemoryError``
    and a bug in whatever produced the bytes are the caller's business, and a verdict must not
    hide them.
    """
    return (
        not isinstance(exc, Exception)
        or isinstance(exc, MemoryError)
        or not (is_transport_failure(exc))
    )


def _joined(store: Mapping[int, list[str]]) -> dict[int, str]:
    return {key: "".join(parts) for key, parts in store.items()}


def _close_quietly(close: Callable[..., object], *args: Any) -> None:
    # The verdict is made: a connection that fails to close changes nothing about the stream.
    try:
        close(*args)
    except Exception:
        pass


class _Reader:
    """What the sync and async readers share: construction, deadlines, pending deltas, the
    verdict."""

    _asynchronous = False

    def __init__(
        self,
        source: Iterable[bytes] | AsyncIterable[bytes] | Any,
        route: str | type[Route] | None = None,
        *,
        tools: ToolSchemas | None = None,
        limits: Limits | None = None,
        accept_stop_reasons: Iterable[str] | None = None,
        idle_timeout: float | None = None,
        deadline: float | None = None,
        drain: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._enforcer = _Enforcer(
            source, route, tools, limits, accept_stop_reasons,
            drain=drain, asynchronous=self._asynchronous, clock=clock,
        )  # fmt: skip
        self._source: Any = source
        self._clock = clock
        self._idle_timeout = idle_timeout
        self._deadline_at = None if deadline is None else clock() + deadline
        # The read loop (a generator of one step per chunk), made on the first step.
        self._generator: Any = None
        # Deltas read but not yet handed to the caller: a loop that breaks loses none of them.
        self._pending: deque[TextDelta] = deque()
        self._ended = False
        self._result: StreamResult | None = None
        self._fault: StreamFault | None = None

    @property
    def monitor(self) -> StreamMonitor:
        """The monitor reading the stream (its state is what the route has established)."""
        return self._enforcer.monitor

    @property
    def ended(self) -> bool:
        """The stream is judged: nothing more will be read, and ``verdict()`` answers."""
        return self._ended

    @property
    def last_event_type(self) -> str | None:
        """The SSE event type of the last event read (None before the first)."""
        return self._enforcer.last_event_type

    @property
    def tool_calls(self) -> Sequence[ToolCall]:
        """The stream's tool calls so far, in the order they opened (server-run calls too):
        each one's accumulator, open or closed. The tool gate walks them as the stream goes."""
        return self._enforcer.monitor.state.tool_calls

    @property
    def response_id(self) -> str | None:
        """The response id the stream has reported so far."""
        return self._enforcer.monitor.state.response_id

    def _read_budget(self) -> float | None:
        """How long the next read may wait: the idle timeout, cut to what is left of the
        deadline (0 once it has passed); None when neither was given."""
        budget = self._idle_timeout
        if self._deadline_at is not None:
            left = max(0.0, self._deadline_at - self._clock())
            budget = left if budget is None else min(budget, left)
        return budget

    def _open(self, *, asynchronous: bool) -> tuple[Any, float | None]:
        """The source's chunk iterator, and the first read's budget (a response's client
        bounds its own reads by it)."""
        source, client = self._source, self._enforcer.client
        budget = self._read_budget()
        if client is None:
            return (aiter(source) if asynchronous else iter(source)), budget
        if budget is not None:
            client.bound_reads(source, budget)
        return (client.achunks(source) if asynchronous else client.chunks(source)), budget

    def _settle(self, error: StreamError | None = None) -> None:
        """Judge the stream once and keep the verdict: it ended cleanly, at its last event or
        a ceiling (``error`` None), or at the reader's own deadline (``"timeout"``)."""
        self._ended = True
        try:
            self._result = self._enforcer.finish(error)
        except StreamFault as fault:
            self._fault = fault

    def _settle_raised(self, exc: BaseException) -> None:
        """The source raised ``exc``. A transport failure is judged as the end of the stream
        (``truncated``, ``timeout``...); anything else propagates unchanged (re-raised outside
        any handler of the reader's own, so it gains no context), the stream judged cancelled.
        """
        self._ended = True
        enforcer = self._enforcer
        propagate = _propagates(exc)
        try:
            if propagate:
                self._result = enforcer.finish("cancelled")
            else:
                self._result = enforcer.finish_after(exc)
        except StreamFault as fault:
            self._fault = fault
        if propagate:
            raise exc

    def verdict(self) -> StreamResult:
        """The accepted stream, once ``ended``; else raises its ``StreamFault``."""
        if not self._ended:
            raise RuntimeError("the stream is not judged yet: step() until it has ended")
        if self._fault is not None:
            raise self._fault
        assert self._result is not None
        return self._result


class StreamReader(_Reader):
    """Reads a stream through the enforcer: iterate for provisional text, then ``result()``.

    Reading stops at the route's last event (its terminal, or a fatal error) or at a breached
    ceiling, and the response is then closed: a peer that keeps the connection open, or never
    stops sending, is not read further.

    Args:
        source: an httpx/httpx2/requests response or an iterable of bytes.
        route: a route name or class; detected from the response's request when None (``"auto"``
            sniffs the contract from the events).
        tools: the registered tools: JSON Schemas by tool name (None for a tool without one),
            or an OpenAI/Anthropic ``tools`` list. When given, a call to any other tool is
            refused (``unregistered_tool``).
        limits: ceilings on buffers and (``max_events``) on the events read.
        accept_stop_reasons: the stop reasons to accept; defaults to the route's success stops.
            Naming a non-success stop (``"max_tokens"``, ``"pause_turn"``) accepts it.
        idle_timeout: seconds one read may wait for bytes; the stream is then refused with
            ``timeout``. An httpx or requests response's own read timeout is lowered to it; a
            plain iterable's slow read is judged once it returns (async: cancelled in time).
        deadline: seconds the whole read may take, from construction; ``timeout`` after it.
        drain: read on to EOF after the route's last event (the events after it are judged
            too, as observe mode judges them) instead of closing the response there.
        clock: seconds, monotonic (``time.monotonic`` by default): what ``idle_timeout``,
            ``deadline`` and the report's timings are measured by. A read is still cancelled
            after ``idle_timeout`` seconds of real waiting.

    Raises:
        StreamFault: at construction for a bad status or media type; from ``result()`` (and
            from iteration's end) when the stream is not accepted, a transport failure
            included (chained to the client's exception). Anything else the source raises
            propagates unchanged.
    """

    def __iter__(self) -> Iterator[TextDelta]:
        """Provisional text deltas as they arrive; then the stream is judged.

        Breaking out of the loop and iterating again (or calling ``result()``) goes on from
        the next delta.
        """
        pending = self._pending
        while True:
            while pending:
                yield pending.popleft()
            if self._ended:
                self.verdict()
                return
            self.step()

    def step(self) -> bool:
        """Read and feed one chunk, or judge the stream once nothing is left to read; False once
        it is judged (``ended``). The tool gate looks at the calls after each step."""
        if self._generator is None:
            self._generator = self._read()
        next(self._generator, None)
        return not self._ended

    def _read(self) -> Iterator[None]:
        enforcer = self._enforcer
        chunks, budget = self._open(asynchronous=False)
        error: StreamError | None = None
        while not enforcer.done:
            if budget == 0.0:
                error = "timeout"
                break
            began = self._clock()
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except BaseException as exc:
                self._settle_raised(exc)
                _close_quietly(self._close_source, chunks)
                return
            if budget is not None and self._clock() - began > budget:
                error = "timeout"  # the read outlasted its budget: judged as the async one is
                break
            self._pending.extend(enforcer.feed(chunk))
            yield
            budget = self._read_budget()
        self._settle(error)
        _close_quietly(self._close_source, chunks)

    def _close_source(self, chunks: Iterator[bytes]) -> None:
        # The chunk iterator first (a client's is a generator over the body), then the response.
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
        client = self._enforcer.client
        if client is not None:
            client.close(self._source)

    def result(self) -> StreamResult:
        """Read whatever is left and return the accepted result, or raise ``StreamFault``."""
        for _ in self:
            pass
        return self.verdict()


class AsyncStreamReader(_Reader):
    """The async twin of ``StreamReader``: ``async for`` deltas, then ``await result()``.

    ``idle_timeout`` and ``deadline`` cancel a read that waits too long, under asyncio and
    trio alike. A response refused at construction (status, media type) is closed by its
    caller's ``async with``.
    """

    _asynchronous = True

    async def __aiter__(self) -> AsyncIterator[TextDelta]:
        pending = self._pending
        while True:
            while pending:
                yield pending.popleft()
            if self._ended:
                self.verdict()
                return
            await self.step()

    async def step(self) -> bool:
        """Read and feed one chunk, or judge the stream (see ``StreamReader.step``)."""
        if self._generator is None:
            self._generator = self._read()
        await anext(self._generator, None)
        return not self._ended

    async def _read(self) -> AsyncIterator[None]:
        enforcer = self._enforcer
        chunks, budget = self._open(asynchronous=True)
        error: StreamError | None = None
        while not enforcer.done:
            if budget == 0.0:
                error = "timeout"
                break
            began = self._clock()
            try:
                chunk = await _next_within(chunks, budget)
            except StopAsyncIteration:
                break
            except BaseException as exc:
                if budget is not None and _is_own_timeout(exc, self._clock() - began, budget):
                    error = "timeout"
                    break
                self._settle_raised(exc)
                await self._close_source(chunks)
                return
            if budget is not None and self._clock() - began > budget:
                error = "timeout"  # a read that returned late (the source did not wait in time)
                break
            self._pending.extend(enforcer.feed(chunk))
            yield
            budget = self._read_budget()
        self._settle(error)
        await self._close_source(chunks)

    async def _close_source(self, chunks: AsyncIterator[bytes]) -> None:
        # The verdict is made: a connection that fails to close changes nothing about it.
        try:
            client = self._enforcer.client
            if client is not None:
                await client.aclose(self._source)
                await _finish_after_close(chunks)
            else:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
        except Exception:
            pass

    async def result(self) -> StreamResult:
        async for _ in self:
            pass
        return self.verdict()


#: How much a closed response's chunk iterator may still serve: what its client had received.
#: A closed httpx response keeps yielding the chunks its connection buffered (h11 parses them
#: without reading the network), and httpcore reads at most 64 KiB at a time
#: (``READ_NUM_BYTES``); a chunk counts as one byte at least, so an iterator that never ends
#: is left after this many.
_DRAIN_AFTER_CLOSE = 128 * 1024


async def _finish_after_close(chunks: AsyncIterator[bytes]) -> None:
    """Run a closed response's chunk iterator to its end: a client's body iterator nests async
    generators of its own (httpx's transport stream iterates httpcore's without closing it),
    which the reader cannot close, and trio warns of any left unfinished to the garbage
    collector. On a closed connection they end once the client's buffer is served."""
    served = 0
    try:
        while served < _DRAIN_AFTER_CLOSE:
            served += max(len(await anext(chunks)), 1)
    except Exception:
        return
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


async def _next_within(chunks: AsyncIterator[bytes], budget: float | None) -> bytes:
    """The next chunk, the read cancelled after ``budget`` seconds (TimeoutError)."""
    if budget is None:
        return await anext(chunks)
    try:
        import anyio
    except ImportError:  # pragma: no cover - anyio comes with httpx
        return await asyncio.wait_for(anext(chunks), budget)
    with anyio.fail_after(budget):
        return await anext(chunks)


def _is_own_timeout(exc: BaseException, waited: float, budget: float) -> bool:
    """Whether ``exc`` is the reader's own budget firing rather than the source's error."""
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError)) and waited >= budget


def read_stream(
    source: Iterable[bytes] | Any,
    route: str | type[Route] | None = None,
    *,
    tools: ToolSchemas | None = None,
    limits: Limits | None = None,
    accept_stop_reasons: Iterable[str] | None = None,
    idle_timeout: float | None = None,
    deadline: float | None = None,
    drain: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> StreamResult:
    """Read a whole stream and return it only if it is accepted (see ``StreamReader``)."""
    return StreamReader(
        source, route, tools=tools, limits=limits, accept_stop_reasons=accept_stop_reasons,
        idle_timeout=idle_timeout, deadline=deadline, drain=drain, clock=clock,
    ).result()  # fmt: skip


async def aread_stream(
    source: AsyncIterable[bytes] | Any,
    route: str | type[Route] | None = None,
    *,
    tools: ToolSchemas | None = None,
    limits: Limits | None = None,
    accept_stop_reasons: Iterable[str] | None = None,
    idle_timeout: float | None = None,
    deadline: float | None = None,
    drain: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> StreamResult:
    """The async twin of ``read_stream``."""
    return await AsyncStreamReader(
        source, route, tools=tools, limits=limits, accept_stop_reasons=accept_stop_reasons,
        idle_timeout=idle_timeout, deadline=deadline, drain=drain, clock=clock,
    ).result()  # fmt: skip
