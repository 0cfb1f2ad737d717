"""The enforcing reader: text and tool calls, released only once the stream has really ended.

``read_stream()`` reads a whole response through the same ``StreamMonitor`` the instrumentation
uses and returns a ``StreamResult`` only after the route's terminal event, with every tool call's
arguments parsed as exactly one JSON value (and checked against the tool's JSON Schema when one is
given). Anything else raises ``StreamFault`` with a stable ``code``: an outcome name
(``truncated``, ``provider_error``, ``incomplete``...) or ``unaccepted_stop`` /
``tool_schema_error``. A fault's message never contains content.

For a UI that must show tokens as they come, ``StreamReader`` yields ``TextDelta`` values
first: they are marked ``provisional`` because nothing is accepted until ``result()`` returns.

Sources: an httpx or httpx2 ``Response`` (sync or async), a requests ``Response`` opened with
``stream=True``, or any (async) iterable of ``bytes``. A response is read through its client
module (``otelsse.instrumentation``), which knows its status, headers, request, body and
exceptions; it is checked for a 2xx status and the ``text/event-stream`` media type before its
body is read.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._core.http import media_type, stream_violation
from ._core.state import CUSTOM, FUNCTION, SERVER
from ._exceptions import OtelSSEError
from .instrumentation._client import Client, client_of, is_transport_failure, stream_error
from .monitor import Limits, Outcome, StreamError, StreamMonitor, StreamReport
from .routes import AUTO, Route, detect_route, make_adapter

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

#: Codes a ``StreamFault`` may carry besides the outcome names.
UNACCEPTED_STOP = "unaccepted_stop"
TOOL_SCHEMA_ERROR = "tool_schema_error"

ToolSchemas = Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]]


class StreamFault(OtelSSEError):
    """The enforcing reader refused a stream.

    Attributes:
        code: stable machine-readable reason: an outcome name, ``unaccepted_stop`` or
            ``tool_schema_error``.
        report: the stream's report, when the body was read (None for a refused status).
    """

    def __init__(self, code: str, report: StreamReport | None = None, *, detail: str = ""):
        self.code = code
        self.report = report
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


def _normalise_tools(tools: ToolSchemas | None) -> dict[str, Mapping[str, Any]]:
    """Tool name -> JSON Schema, from a mapping or from OpenAI/Anthropic tool lists."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        return dict(tools)
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        spec = tool.get("function", tool)  # OpenAI chat nests the function
        schema = spec.get("parameters") or spec.get("input_schema")
        if spec.get("name") and schema is not None:
            schemas[spec["name"]] = schema
    return schemas


class _Enforcer:
    """What the sync and async readers share: route choice, HTTP checks, monitor, verdict."""

    def __init__(
        self,
        source: Any,
        route: str | type[Route] | None,
        tools: ToolSchemas | None,
        limits: Limits | None,
        accept_stop_reasons: Iterable[str] | None,
    ) -> None:
        self._schemas = _normalise_tools(tools)
        if self._schemas:
            try:
                import jsonschema  # noqa: F401 - optional extra, checked up front
            except ImportError as exc:  # pragma: no cover - jsonschema is a test dependency
                raise OtelSSEError(
                    "tools= needs jsonschema: pip install 'otelsse[schema]'"
                ) from exc
        self._accept = frozenset(accept_stop_reasons) if accept_stop_reasons is not None else None
        #: The source's client, None for a plain (async) iterable of bytes.
        self.client = client_of(source)
        if self.client is not None:
            route = self._check_response(self.client, source, route)
        self.monitor = StreamMonitor(
            make_adapter(route or AUTO),
            limits=limits,
            started_at=time.monotonic(),
            collect_text=True,
        )
        self._delivered: dict[tuple[bool, int], int] = {}

    @staticmethod
    def _check_response(
        client: Client, response: Any, route: str | type[Route] | None
    ) -> str | type[Route] | None:
        """Refuse a response that cannot be a stream; return the route (detected if None)."""
        status = client.status(response)
        content_type = client.headers(response).get("content-type")
        violation = stream_violation(status, content_type)
        if violation == "status":
            raise StreamFault(Outcome.PROTOCOL_ERROR.value, detail=f"HTTP status {status}")
        if violation == "media_type":
            media = media_type(content_type)
            raise StreamFault(Outcome.PROTOCOL_ERROR.value, detail=f"media type {media!r}")
        request = client.request_line(response)
        if route is None and request is not None:
            route = detect_route(*request, content_type)
        return route

    def feed(self, chunk: bytes) -> list[TextDelta]:
        monitor = self.monitor
        if not monitor.feed(chunk, time.monotonic()):
            return []
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
        report = self.monitor.close(time.monotonic(), error=error)
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
        self._check_schemas(calls, report)
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

    def _check_schemas(self, calls: list[ToolCallResult], report: StreamReport) -> None:
        if not self._schemas:
            return
        import jsonschema

        for position, call in enumerate(calls):
            schema = self._schemas.get(call.name or "")
            if schema is None or call.kind == CUSTOM:
                continue
            error = jsonschema.exceptions.best_match(
                jsonschema.validators.validator_for(schema)(schema).iter_errors(call.arguments)
            )
            if error is not None:
                # The validator keyword only: jsonschema's own message quotes the arguments.
                detail = f"tool call {position} failed schema keyword {error.validator!r}"
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


class _Reader:
    """What the sync and async readers share: construction, pending deltas, the verdict."""

    def __init__(
        self,
        source: Iterable[bytes] | AsyncIterable[bytes] | Any,
        route: str | type[Route] | None = None,
        *,
        tools: ToolSchemas | None = None,
        limits: Limits | None = None,
        accept_stop_reasons: Iterable[str] | None = None,
    ) -> None:
        self._enforcer = _Enforcer(source, route, tools, limits, accept_stop_reasons)
        self._source: Any = source
        self._chunks: Any = None  # the source's chunk iterator, made on first read
        # Deltas read but not yet handed to the caller: a loop that breaks loses none of them.
        self._pending: deque[TextDelta] = deque()
        self._ended = False
        self._result: StreamResult | None = None
        self._fault: StreamFault | None = None

    def _settle(self, exc: BaseException | None) -> None:
        """The source ended (``exc`` None) or raised: judge the stream once, keep the verdict.

        An exception that is not a transport failure propagates unchanged (re-raised outside
        any handler of the reader's own, so it gains no context); the stream is then judged as
        cancelled, and a later ``result()`` gives that verdict.
        """
        self._ended = True
        enforcer = self._enforcer
        propagate = exc is not None and _propagates(exc)
        try:
            if exc is None:
                self._result = enforcer.finish()
            elif propagate:
                self._result = enforcer.finish("cancelled")
            else:
                self._result = enforcer.finish_after(exc)
        except StreamFault as fault:
            self._fault = fault
        if exc is not None and propagate:
            raise exc

    def _verdict(self) -> StreamResult:
        if self._fault is not None:
            raise self._fault
        assert self._result is not None
        return self._result


class StreamReader(_Reader):
    """Reads a stream through the enforcer: iterate for provisional text, then ``result()``.

    Args:
        source: an httpx/httpx2/requests response or an iterable of bytes.
        route: a route name or class; detected from the response's request when None (``"auto"``
            sniffs the contract from the events).
        tools: JSON Schemas by tool name (or an OpenAI/Anthropic ``tools`` list).
        limits: buffer ceilings.
        accept_stop_reasons: the stop reasons to accept; defaults to the route's success stops.
            Naming a non-success stop (``"max_tokens"``, ``"pause_turn"``) accepts it.

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
        if self._chunks is None:
            client = self._enforcer.client
            self._chunks = iter(self._source) if client is None else client.chunks(self._source)
        pending = self._pending
        while True:
            while pending:
                yield pending.popleft()
            if self._ended:
                self._verdict()
                return
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self._settle(None)
            except BaseException as exc:
                self._settle(exc)
            else:
                pending.extend(self._enforcer.feed(chunk))

    def result(self) -> StreamResult:
        """Read whatever is left and return the accepted result, or raise ``StreamFault``."""
        for _ in self:
            pass
        return self._verdict()


class AsyncStreamReader(_Reader):
    """The async twin of ``StreamReader``: ``async for`` deltas, then ``await result()``."""

    async def __aiter__(self) -> AsyncIterator[TextDelta]:
        if self._chunks is None:
            client = self._enforcer.client
            self._chunks = aiter(self._source) if client is None else client.achunks(self._source)
        pending = self._pending
        while True:
            while pending:
                yield pending.popleft()
            if self._ended:
                self._verdict()
                return
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._settle(None)
            except BaseException as exc:
                self._settle(exc)
            else:
                pending.extend(self._enforcer.feed(chunk))

    async def result(self) -> StreamResult:
        async for _ in self:
            pass
        return self._verdict()


def read_stream(
    source: Iterable[bytes] | Any,
    route: str | type[Route] | None = None,
    *,
    tools: ToolSchemas | None = None,
    limits: Limits | None = None,
    accept_stop_reasons: Iterable[str] | None = None,
) -> StreamResult:
    """Read a whole stream and return it only if it is accepted (see ``StreamReader``)."""
    return StreamReader(
        source, route, tools=tools, limits=limits, accept_stop_reasons=accept_stop_reasons
    ).result()


async def aread_stream(
    source: AsyncIterable[bytes] | Any,
    route: str | type[Route] | None = None,
    *,
    tools: ToolSchemas | None = None,
    limits: Limits | None = None,
    accept_stop_reasons: Iterable[str] | None = None,
) -> StreamResult:
    """The async twin of ``read_stream``."""
    return await AsyncStreamReader(
        source, route, tools=tools, limits=limits, accept_stop_reasons=accept_stop_reasons
    ).result()
