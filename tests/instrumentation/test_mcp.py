"""The official MCP Python SDK, client and server, over streamable HTTP, with and without otelsse.

One uvicorn server on 127.0.0.1 serves the whole module: two servers built with the SDK
(``mcp.server.mcpserver.MCPServer.streamable_http_app()``), one as the SDK makes it by default
(``/plain``: no event store, so no event ids) and one with an event store and a retry interval
(``/resumable``: priming events, ids, and a tool that closes its own stream for the client to
resume it, SEP-1699). Each test runs the same application code, the SDK's own client
(``streamable_http_client`` and ``ClientSession``, which read through httpx2), first with
otelsse nowhere, then with otelsse instrumenting the client and ``OtelSSEMiddleware`` around
the server, each with its own in-memory OpenTelemetry SDK. It proves:

1. The application sees the same either way: each call's result (``model_dump()``), the
   progress it was told of, and the exception it got.
2. The client's ``otelsse.stream`` span of each MCP exchange and the server's agree on the route
   (``mcp.streamable_http``, chosen by the request's JSON-RPC method and MCP-Protocol-Version
   header at a path no route knows), the outcome, the stop reason and the labels
   (``mcp.method.name``; ``gen_ai.tool.name`` and ``gen_ai.operation.name`` for a tools/call):
   a result (complete/result), progress notifications then a result (complete/result, each
   event counted), a tool that raised (complete/tool_error: the SDK reports it in the result),
   a JSON-RPC error (provider_error with its code), the server's connection cut mid-event (the
   application's stream ends without its last bytes: truncated), the application cancelling its
   call (the SDK's notifications/cancelled, answered -32800: incomplete/request_cancelled) or
   abandoning it (cancelled), the server closing a stream after event ids for the client to
   resume (eof_unverified; the answer then comes on the client's GET with Last-Event-ID:
   complete/result), and the GET stream of server messages, which has no terminal
   (eof_unverified when the session ends).

The cut is made inside the server: the app's own ``send`` passes half of the event holding the
``cut`` tool's answer and raises, so the app returns with its response unfinished and uvicorn
drops the connection; the middleware around it judges what the app sent, as the client judges
what it received.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from mcp_types import JSONRPCMessage

from otelsse import semconv
from otelsse.asgi import ASGIApp, OtelSSEMiddleware
from tests._helpers import joined, soon
from tests._otel import Telemetry

MAX_WAIT = 30.0
ROUTE = "mcp.streamable_http"
#: The text of the ``cut`` tool's answer, where the server's connection is cut.
CUT_MARK = b"cut-here"
TOOL = {semconv.MCP_METHOD_NAME: "tools/call", semconv.GEN_AI_OPERATION_NAME: "execute_tool"}


def _tools(server: MCPServer) -> None:
    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    async def slow(steps: int, ctx: Context) -> str:
        for step in range(steps):
            await ctx.report_progress(step + 1, steps)
        return "done"

    @server.tool()
    def fail() -> str:
        raise ValueError("the tool failed")

    @server.tool()
    async def hang() -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    @server.tool()
    def cut() -> str:
        return CUT_MARK.decode()


class _Store(EventStore):
    """The smallest event store: every event of the session, by its position (its id)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        self.events.append((stream_id, message))
        return str(len(self.events))

    async def replay_events_after(
        self, last_event_id: str, send_callback: Callable[[EventMessage], Awaitable[None]]
    ) -> str | None:
        after = int(last_event_id)
        stream = self.events[after - 1][0]
        for number, (owner, message) in enumerate(self.events[after:], after + 1):
            if owner == stream and message is not None:
                await send_callback(EventMessage(message, str(number)))
        return stream


PLAIN = MCPServer("plain")
_tools(PLAIN)
RESUMABLE = MCPServer("resumable")


@RESUMABLE.tool()
async def poll(ctx: Context) -> str:
    await ctx.report_progress(0, 1)
    await ctx.close_sse_stream()  # SEP-1699: the client polls with GET and Last-Event-ID
    await anyio.sleep(0.05)
    return "polled"


class _Cut(Exception):
    """What the server's send raises where it cuts the connection."""


def _cutting(app: ASGIApp) -> ASGIApp:
    """``app``, whose body piece holding ``CUT_MARK`` is sent half, then the connection cut."""

    async def cutting(scope: Any, receive: Any, send: Any) -> None:
        async def cut_send(message: Any) -> None:
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and CUT_MARK in body:
                half = {"type": "http.response.body", "body": body[: len(body) // 2]}
                await send({**half, "more_body": True})
                raise _Cut
            await send(message)

        await app(scope, receive, cut_send)

    return cutting


@dataclass
class _Mount:
    """The two SDK apps: their lifespans, and what serves their requests (bare, or inside the
    middleware)."""

    plain: Any = field(
        default_factory=lambda: PLAIN.streamable_http_app(streamable_http_path="/plain")
    )
    resumable: Any = field(
        default_factory=lambda: RESUMABLE.streamable_http_app(
            streamable_http_path="/resumable", event_store=_Store(), retry_interval=50
        )
    )
    app: ASGIApp | None = None

    def __post_init__(self) -> None:
        self.bare: ASGIApp = _cutting(self._route)
        self.app = self.bare

    async def _route(self, scope: Any, receive: Any, send: Any) -> None:
        served = self.resumable if scope["path"].startswith("/resumable") else self.plain
        await served(scope, receive, send)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            assert self.app is not None
            await self.app(scope, receive, send)
            return
        async with contextlib.AsyncExitStack() as stack:
            for app in (self.plain, self.resumable):
                await stack.enter_async_context(app.router.lifespan_context(app))
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
        await send({"type": "lifespan.shutdown.complete"})


@dataclass
class _Server:
    mount: _Mount
    base: str


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    mount = _Mount()
    config = uvicorn.Config(mount, host="127.0.0.1", port=0, log_level="critical")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run)
    thread.start()
    try:
        soon(lambda: running.started, MAX_WAIT, "the server to start")
        port = running.servers[0].sockets[0].getsockname()[1]
        yield _Server(mount, f"http://127.0.0.1:{port}")
    finally:
        running.should_exit = True
        joined(thread, MAX_WAIT)


@dataclass
class _Sides:
    """The spans of each side: the application's (otelsse instrumented) and the server's
    (``OtelSSEMiddleware``)."""

    client: Telemetry
    server: Telemetry


@contextlib.contextmanager
def _observed(server: _Server) -> Iterator[_Sides]:
    sides = _Sides(Telemetry().install(), Telemetry())
    server.mount.app = OtelSSEMiddleware(
        server.mount.bare,
        tracer_provider=sides.server.tracer_provider,
        meter_provider=sides.server.meter_provider,
    )
    try:
        yield sides
    finally:
        server.mount.app = server.mount.bare
        sides.client.uninstall()
        sides.server.tracer_provider.shutdown()
        sides.server.meter_provider.shutdown()


Attributes = dict[str, Any]
#: What the application saw: each step's result or exception, and the progress it was told of.
Transcript = list[tuple[str, Any]]


@dataclass
class _Run:
    """One run of an application: what it saw, and (otelsse on) the client's spans."""

    seen: Transcript = field(default_factory=list)
    observed: Telemetry | None = None

    async def step(self, what: str, call: Awaitable[Any]) -> None:
        try:
            result = await call
        except MCPError as exc:
            self.seen.append((what, ("MCPError", exc.error.code, exc.error.message)))
        else:
            self.seen.append((what, result.model_dump()))

    async def settled(self, selector: Callable[[Attributes], bool]) -> None:
        """With otelsse on, until the client's span ``selector`` picks has ended: what the SDK
        still reads after the application's own wait ended (a cancelled call's answer) is read
        before the session closes. Without, at once: the application sees the same."""
        if self.observed is None:
            return
        with anyio.fail_after(MAX_WAIT):
            while not _spans(self.observed, selector):
                await anyio.sleep(0.005)


Application = Callable[[ClientSession, _Run], Awaitable[None]]


def _run(
    server: _Server,
    path: str,
    application: Application,
    observed: Telemetry | None = None,
    *,
    terminate: bool = True,
    modern: bool = False,
) -> Transcript:
    run = _Run(observed=observed)

    async def main() -> None:
        url = server.base + path
        with anyio.fail_after(MAX_WAIT):
            async with (
                streamable_http_client(url, terminate_on_close=terminate) as (read, write),
                ClientSession(read, write) as session,
            ):
                # 2026-07-28 has no initialize: a server/discover, then self-contained requests.
                await (session.discover() if modern else session.initialize())
                await application(session, run)

    anyio.run(main)
    return run.seen


@contextlib.contextmanager
def _both(
    server: _Server, path: str, application: Application, **options: bool
) -> Iterator[tuple[Transcript, _Sides]]:
    """The application's transcript without otelsse, checked equal to the one with it; and,
    while otelsse is still on, the spans of the run with it."""
    bare = _run(server, path, application, **options)
    with _observed(server) as sides:
        seen = _run(server, path, application, sides.client, **options)
        assert seen == bare
        yield seen, sides


def _spans(telemetry: Telemetry, selector: Callable[[Attributes], bool]) -> list[Attributes]:
    return [
        dict(s.attributes or {}) for s in telemetry.spans() if selector(dict(s.attributes or {}))
    ]


def _agreed(sides: _Sides, what: str, selector: Callable[[Attributes], bool]) -> Attributes:
    """The one span of each side ``selector`` picks, once both ended; asserted to agree on the
    route, outcome, stop reason, error code, operation and labels. Returns the client's."""

    def found() -> tuple[Attributes, Attributes] | None:
        client, server = _spans(sides.client, selector), _spans(sides.server, selector)
        return (client[0], server[0]) if len(client) == len(server) == 1 else None

    client, server = soon(found, MAX_WAIT, what)
    keys = (
        semconv.ROUTE,
        semconv.OUTCOME,
        semconv.STOP_REASON,
        semconv.PROVIDER_ERROR_CODE,
        semconv.GEN_AI_OPERATION_NAME,
        *semconv.ROUTE_LABELS,
    )
    assert {k: client.get(k) for k in keys} == {k: server.get(k) for k in keys}, what
    assert client[semconv.ROUTE] == ROUTE, what
    return client


def _tool(name: str) -> Callable[[Attributes], bool]:
    return lambda attributes: attributes.get(semconv.GEN_AI_TOOL_NAME) == name


def _method(name: str) -> Callable[[Attributes], bool]:
    return lambda attributes: attributes.get(semconv.MCP_METHOD_NAME) == name


def _verdict(attributes: Attributes) -> tuple[Any, Any]:
    return attributes[semconv.OUTCOME], attributes.get(semconv.STOP_REASON)


# -- the tests ----------------------------------------------------------------------------------


def test_a_result_progress_and_a_tool_error_complete_on_both_sides(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        progress: list[float] = []

        async def told(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        await run.step("add", session.call_tool("add", {"a": 1, "b": 2}))
        await run.step("slow", session.call_tool("slow", {"steps": 2}, progress_callback=told))
        run.seen.append(("progress", progress))
        await run.step("fail", session.call_tool("fail", {}))

    with _both(server, "/plain", application) as (seen, sides):
        assert seen[0][1]["structured_content"] == {"result": 3}
        assert seen[2] == ("progress", [1.0, 2.0])
        assert seen[3][1]["is_error"] is True

        add = _agreed(sides, "add", _tool("add"))
        assert _verdict(add) == ("complete", "result")
        assert {k: add[k] for k in TOOL} == TOOL
        slow = _agreed(sides, "slow", _tool("slow"))
        assert _verdict(slow) == ("complete", "result")
        assert slow[semconv.EVENT_COUNT] == 3  # two progress notifications, then the result
        assert _verdict(_agreed(sides, "fail", _tool("fail"))) == ("complete", "tool_error")
        initialize = _agreed(sides, "initialize", _method("initialize"))
        assert _verdict(initialize) == ("complete", "result")
        assert semconv.GEN_AI_TOOL_NAME not in initialize
        assert semconv.GEN_AI_PROVIDER_NAME not in initialize
        # The GET stream of server messages has no terminal. The session's end closes it: the
        # server's, on the client's DELETE (eof_unverified), which races the client's own close
        # of its reader (cancelled), so each side tells what it saw first.
        for side in (sides.client, sides.server):
            (listening,) = soon(
                lambda side=side: _spans(side, lambda a: semconv.MCP_METHOD_NAME not in a),
                MAX_WAIT,
                "the GET stream",
            )
            assert listening[semconv.ROUTE] == ROUTE
            assert listening[semconv.OUTCOME] in ("eof_unverified", "cancelled")
            assert listening[semconv.TERMINAL_SEEN] is False
        # The labels reach the metric series of both sides.
        for side in (sides.client, sides.server):
            series = [p.attributes for p in side.points(semconv.STREAMS.name) if p.value]
            assert {s.get(semconv.GEN_AI_TOOL_NAME) for s in series} == {
                None,
                "add",
                "slow",
                "fail",
            }


def test_a_json_rpc_error_is_a_provider_error_with_its_code(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        reference = {"type": "ref/prompt", "name": "greeting"}
        await run.step("complete", session.complete(reference, {"name": "a", "value": "b"}))

    with _both(server, "/plain", application) as (seen, sides):
        # The server has no completion handler.
        assert seen == [("complete", ("MCPError", -32601, "Method not found"))]
        error = _agreed(sides, "the error", _method("completion/complete"))
        assert _verdict(error) == ("provider_error", None)
        assert error[semconv.PROVIDER_ERROR_CODE] == "-32601"


def test_a_cut_connection_is_truncated_on_both_sides(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        await run.step("cut", session.call_tool("cut", {}))

    with _both(server, "/plain", application) as (seen, sides):
        # Without an event id the SDK cannot resume: it fails the call.
        assert seen == [("cut", ("MCPError", -32000, "SSE stream ended without a response"))]
        cut = _agreed(sides, "the cut", _tool("cut"))
        assert _verdict(cut) == ("truncated", None)
        assert cut[semconv.PENDING_LINE_CHARS] > 0


def test_a_call_the_application_cancels_ends_incomplete_on_both_sides(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        with anyio.move_on_after(0.2):
            await session.call_tool("hang", {})
        run.seen.append(("hang", "timed out"))
        await run.settled(_tool("hang"))

    with _both(server, "/plain", application) as (seen, sides):
        assert seen == [("hang", "timed out")]
        # The SDK sends notifications/cancelled; its server answers -32800 on the call's stream.
        assert _verdict(_agreed(sides, "the cancelled call", _tool("hang"))) == (
            "incomplete",
            "request_cancelled",
        )


def test_a_call_the_application_abandons_is_cancelled_on_both_sides(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(session.call_tool, "hang", {})
            await anyio.sleep(0.2)
            group.cancel_scope.cancel()  # its HTTP response closed mid-stream
        run.seen.append(("hang", "abandoned"))

    with _both(server, "/plain", application, terminate=False) as (seen, sides):
        assert seen == [("hang", "abandoned")]
        assert _verdict(_agreed(sides, "the abandoned call", _tool("hang"))) == ("cancelled", None)


def test_a_stream_closed_for_the_client_to_resume_is_answered_on_its_get(server: _Server) -> None:
    async def application(session: ClientSession, run: _Run) -> None:
        async def told(value: float, total: float | None, message: str | None) -> None:
            pass

        await run.step("poll", session.call_tool("poll", {}, progress_callback=told))

    with _both(server, "/resumable", application) as (seen, sides):
        assert seen[0][1]["structured_content"] == {"result": "polled"}
        # The POST's stream: a priming event (and the progress, if it was written before the
        # close), each with its id, then the server's clean close (2025-11-25): no terminal was
        # owed.
        poll = _agreed(sides, "the polled call", _tool("poll"))
        assert _verdict(poll) == ("eof_unverified", None)
        assert poll[semconv.EVENT_COUNT] >= 1
        # Its answer, replayed on the client's GET with Last-Event-ID.
        resumed = _agreed(
            sides,
            "the resumed GET",
            lambda a: semconv.MCP_METHOD_NAME not in a and a[semconv.OUTCOME] == "complete",
        )
        assert _verdict(resumed) == ("complete", "result")


def test_on_2026_07_28_a_json_answer_is_no_stream_and_a_stream_is_judged(server: _Server) -> None:
    """A 2026-07-28 server answers a call that emits nothing within its window with one JSON
    body (the client asked for ``application/json, text/event-stream``): not a stream, so no
    span on either side (never a protocol error); a call that notifies commits to SSE."""

    async def application(session: ClientSession, run: _Run) -> None:
        async def told(value: float, total: float | None, message: str | None) -> None:
            pass

        await run.step("add", session.call_tool("add", {"a": 2, "b": 3}))
        await run.step("slow", session.call_tool("slow", {"steps": 2}, progress_callback=told))

    with _both(server, "/plain", application, modern=True) as (seen, sides):
        assert seen[0][1]["structured_content"] == {"result": 5}
        slow = _agreed(sides, "slow", _tool("slow"))
        assert _verdict(slow) == ("complete", "result")
        assert {k: slow[k] for k in TOOL} == TOOL
        for side in (sides.client, sides.server):
            assert _spans(side, _tool("add")) == []
            assert [a for a in _spans(side, bool) if a[semconv.OUTCOME] != "complete"] == []
