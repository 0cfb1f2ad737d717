"""The real a2a-sdk streams from a real A2A server, with and without otelsse, on both sides.

The server is a2a-sdk's own (``DefaultRequestHandler``, its JSON-RPC routes at ``/rpc`` and its
HTTP+JSON routes, each with the v0.3 compatibility layer on) in a Starlette app, served by
uvicorn on 127.0.0.1 in a thread, once for the module. Its agent (``_Agent``) reads the user's
text: ``ok`` streams a task through ``working``, an artifact in two chunks and a whole one, to
``completed``; ``fail`` ends ``failed``; ``input`` asks for input; ``raise`` raises (the server
then sends ``event: error``); ``hang`` sends one artifact chunk and waits until the task is
cancelled. The client is a2a-sdk's (``ClientFactory``: its JSON-RPC transport, its HTTP+JSON one,
and its v0.3 JSON-RPC one for an agent card that declares protocol 0.3).

Each test runs the same application code twice: first with nothing instrumented (the
reference), then with otelsse instrumenting the client (``tests/_otel.Telemetry``) and the
server wrapped in ``OtelSSEMiddleware`` (a second in-memory SDK). It proves that the application
sees the same events and the same exception either way, and that the client's ``otelsse.stream``
span and the server's agree on the route, the outcome and the stop reason: read to the end
(complete, failed, input-required, an error event); the application stopping early (cancelled on
both sides); the task cancelled while streaming (``canceled``). What a real server cannot do on
cue, a body cut in the middle of an event or a clean EOF while the task works, ``SSEServer``
(``tests/_server.py``) does with a body captured from this server.

It also checks what the route's recognition relies on: the a2a-sdk client asks for SSE
(``Accept: text/event-stream``) on its streaming calls, over both bindings; and that both of its
transports raise on the route's strict-mode error event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from a2a.client import A2AClientError, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_message_text, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError
from opentelemetry.sdk.trace import ReadableSpan
from starlette.applications import Starlette

from otelsse import semconv
from otelsse.asgi import OtelSSEMiddleware
from otelsse.routes import A2AStreamRoute
from tests._fixtures import read_fixture
from tests._helpers import event_ends, soon
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests._uvicorn import Served, serving

#: Upper bound for every wait here (never a measured duration).
MAX_WAIT = 30.0
ROUTE = "a2a.stream"
JSONRPC, HTTP_JSON = "JSONRPC", "HTTP+JSON"


class _Agent(AgentExecutor):
    """Streams what the user's text asks for (the module docstring)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = get_message_text(context.message)
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if text == "fail":
            await updater.failed()
        elif text == "input":
            await updater.requires_input(updater.new_agent_message([Part(text="Which?")]))
        elif text == "raise":
            raise RuntimeError("the agent broke")
        elif text == "hang":
            await updater.add_artifact([Part(text="Part one, ")], artifact_id="report")
            await asyncio.sleep(MAX_WAIT)  # until the task is cancelled
        else:
            await updater.add_artifact([Part(text="Part one, ")], artifact_id="report")
            await updater.add_artifact(
                [Part(text="part two.")], artifact_id="report", append=True, last_chunk=True
            )
            await updater.add_artifact([Part(text="A summary.")], artifact_id="summary")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _card(base: str, binding: str = JSONRPC, version: str = "1.0") -> AgentCard:
    url = f"{base}/rpc" if binding == JSONRPC else base
    return AgentCard(
        name="test agent",
        description="streams on request",
        version="1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="s", name="s", description="s", tags=["t"])],
        supported_interfaces=[
            AgentInterface(protocol_binding=binding, url=url, protocol_version=version)
        ],
    )


def _app(card: AgentCard) -> Starlette:
    handler = DefaultRequestHandler(
        agent_executor=_Agent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [
        *create_jsonrpc_routes(handler, "/rpc", enable_v0_3_compat=True),
        *create_rest_routes(handler, enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes)


@pytest.fixture(scope="module")
def agent() -> Iterator[Served]:
    with serving(lambda base: _app(_card(base))) as served:
        yield served


# -- what the application sees ------------------------------------------------------------------


def _seen(event: StreamResponse) -> tuple[str, str]:
    """An event as the application reads it, without the ids each run draws afresh."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return kind, TaskState.Name(event.task.status.state)
    if kind == "status_update":
        return kind, TaskState.Name(event.status_update.status.state)
    if kind == "artifact_update":
        return kind, get_artifact_text(event.artifact_update.artifact)
    assert kind == "message"
    return kind, get_message_text(event.message)


@dataclass
class _Run:
    events: list[tuple[str, str]]
    error: str | None  # the exception's type, when the application got one


def _request(text: str) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, parts=[Part(text=text)], message_id=f"msg-{text}")
    return SendMessageRequest(message=message)


Reading = Callable[[Any, AsyncIterator[StreamResponse], list[tuple[str, str]]], Awaitable[None]]


async def _to_the_end(client: Any, stream: AsyncIterator[StreamResponse], seen: list[Any]) -> None:
    async for event in stream:
        seen.append(_seen(event))


def _stream(card: AgentCard, text: str, read: Reading = _to_the_end) -> _Run:
    """Send ``text`` to the agent with the a2a-sdk client for ``card``; what came back."""

    async def main() -> _Run:
        bindings = [iface.protocol_binding for iface in card.supported_interfaces]
        client = ClientFactory(ClientConfig(supported_protocol_bindings=bindings)).create(card)
        seen: list[tuple[str, str]] = []
        error = None
        stream = client.send_message(_request(text))
        try:
            await read(client, stream, seen)
        except (A2AError, A2AClientError) as exc:
            error = type(exc).__name__
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            await client.close()
        return _Run(seen, error)

    return asyncio.run(main())


@dataclass
class _Verdicts:
    run: _Run
    client: dict[str, Any]
    server: dict[str, Any] | None


def _both(
    agent: Served, card: AgentCard, text: str, read: Reading = _to_the_end
) -> tuple[_Run, _Verdicts]:
    """The reference run, then the run with otelsse on both sides and both spans."""
    reference = _stream(card, text, read)
    server_sdk, client_sdk = Telemetry(), Telemetry()
    agent.mount.app = OtelSSEMiddleware(
        agent.mount.bare,
        tracer_provider=server_sdk.tracer_provider,
        meter_provider=server_sdk.meter_provider,
    )
    client_sdk.install()
    try:
        run = _stream(card, text, read)
        client = _attributes(client_sdk.stream_span())
        soon(server_sdk.spans, MAX_WAIT, "the server's stream span")
        server = _attributes(server_sdk.stream_span())
    finally:
        client_sdk.uninstall()
        agent.mount.app = agent.mount.bare
        server_sdk.tracer_provider.shutdown()
        server_sdk.meter_provider.shutdown()
    return reference, _Verdicts(run, client, server)


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _verdict(attributes: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (
        attributes[semconv.ROUTE],
        attributes[semconv.OUTCOME],
        attributes.get(semconv.STOP_REASON),
    )


BINDINGS = pytest.mark.parametrize(
    ("binding", "version"),
    [
        (JSONRPC, "1.0"),
        pytest.param(HTTP_JSON, "1.0", marks=pytest.mark.matrix),
        pytest.param(JSONRPC, "0.3", marks=pytest.mark.matrix),
    ],
    ids=["jsonrpc", "http-json", "jsonrpc-0.3"],
)


# -- read to the end ----------------------------------------------------------------------------


@BINDINGS
@pytest.mark.parametrize(
    ("text", "outcome", "stop", "last", "error"),
    [
        ("ok", "complete", "completed", ("status_update", "TASK_STATE_COMPLETED"), None),
        ("fail", "provider_error", "failed", ("status_update", "TASK_STATE_FAILED"), None),
        (
            "input",
            "complete",
            "input-required",
            ("status_update", "TASK_STATE_INPUT_REQUIRED"),
            None,
        ),
        ("raise", "provider_error", None, ("status_update", "TASK_STATE_WORKING"), "InternalError"),
    ],
    ids=["completed", "failed", "input-required", "error-event"],
)
def test_a_stream_read_to_its_end_is_judged_alike_on_both_sides(
    agent: Served,
    binding: str,
    version: str,
    text: str,
    outcome: str,
    stop: str | None,
    last: tuple[str, str],
    error: str | None,
) -> None:
    card = _card(agent.base, binding, version)
    reference, got = _both(agent, card, text)
    assert got.run == reference
    assert reference.events[0] == ("task", "TASK_STATE_SUBMITTED")
    assert reference.events[-1] == last
    if error is not None and binding == HTTP_JSON:
        error = "A2AClientError"  # the REST error frame names no A2A error type
    assert reference.error == error
    assert _verdict(got.client) == (ROUTE, outcome, stop)
    assert got.server is not None
    assert _verdict(got.server) == _verdict(got.client)
    assert got.client[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    # every response answers the request's own id (the route learnt it from the body)
    assert got.client[semconv.ANOMALY_COUNT] == got.server[semconv.ANOMALY_COUNT] == 0
    assert semconv.GEN_AI_PROVIDER_NAME not in got.client
    if text == "ok":
        assert ("artifact_update", "part two.") in reference.events


# -- the application stops early; the task is cancelled -----------------------------------------


def _task_id(event: StreamResponse) -> str | None:
    return event.task.id if event.WhichOneof("payload") == "task" else None


def _until_the_artifact_then_close(hung: list[str]) -> Reading:
    """Read up to the first artifact, then close the stream; the task's id goes to ``hung``."""

    async def read(client: Any, stream: AsyncIterator[StreamResponse], seen: list[Any]) -> None:
        async for event in stream:
            seen.append(_seen(event))
            if event.WhichOneof("payload") == "task":
                hung.append(event.task.id)
            if event.WhichOneof("payload") == "artifact_update":
                break
        await stream.aclose()  # type: ignore[attr-defined]

    return read


def _cancel(card: AgentCard, task_ids: list[str]) -> None:
    """Cancel the tasks whose agent still waits, so that they end now."""

    async def main() -> None:
        client = ClientFactory(ClientConfig()).create(card)
        try:
            for task_id in task_ids:
                await client.cancel_task(CancelTaskRequest(id=task_id))
        finally:
            await client.close()

    asyncio.run(main())


async def _cancel_the_task_while_reading(
    client: Any, stream: AsyncIterator[StreamResponse], seen: list[Any]
) -> None:
    task_id = None
    async for event in stream:
        seen.append(_seen(event))
        task_id = task_id or _task_id(event)
        if event.WhichOneof("payload") == "artifact_update":
            assert task_id is not None
            await client.cancel_task(CancelTaskRequest(id=task_id))


def test_an_application_that_stops_reading_is_cancelled_on_both_sides(agent: Served) -> None:
    # The tasks are cancelled only once the server's span ended: a cancel sooner could reach
    # the stream before the server noticed that its client left.
    hung: list[str] = []
    card = _card(agent.base)
    try:
        reference, got = _both(agent, card, "hang", _until_the_artifact_then_close(hung))
    finally:
        _cancel(card, hung)
    assert len(hung) == 2
    assert got.run == reference
    assert reference.events[-1] == ("artifact_update", "Part one, ")
    assert _verdict(got.client) == (ROUTE, "cancelled", None)
    assert got.server is not None
    assert _verdict(got.server) == (ROUTE, "cancelled", None)


def test_a_task_cancelled_while_streaming_is_incomplete_on_both_sides(agent: Served) -> None:
    reference, got = _both(agent, _card(agent.base), "hang", _cancel_the_task_while_reading)
    assert got.run == reference
    assert reference.events[-1] == ("status_update", "TASK_STATE_CANCELED")
    assert reference.error is None
    assert _verdict(got.client) == (ROUTE, "incomplete", "canceled")
    assert got.server is not None
    assert _verdict(got.server) == _verdict(got.client)


@pytest.mark.xfail(
    strict=True,
    reason="an error a2a-sdk's server meets before the stream starts is answered as a JSON-RPC "
    "error in a JSON body (HTTP 200): the core's media-type rule judges it protocol_error, "
    "though it is the agent's answer",
)
def test_an_error_before_the_stream_is_the_agent_s_error(agent: Served) -> None:
    async def main() -> str | None:
        client = ClientFactory(ClientConfig()).create(_card(agent.base))
        try:
            async for _ in client.subscribe(SubscribeToTaskRequest(id="no-such-task")):
                pass
        except A2AError as exc:
            return type(exc).__name__
        finally:
            await client.close()
        return None

    client_sdk = Telemetry().install()
    try:
        assert asyncio.run(main()) == "TaskNotFoundError"
        attributes = _attributes(client_sdk.stream_span())
    finally:
        client_sdk.uninstall()
    assert _verdict(attributes)[:2] == (ROUTE, "provider_error")


# -- a server that cuts the stream (SSEServer) ----------------------------------------------------

CAPTURED = "real/a2a-sdk-jsonrpc-artifacts-completed.sse"


def _cut_run(reply: Reply) -> tuple[_Run, _Run, dict[str, Any], SSEServer]:
    """The captured stream served as ``reply`` to the JSON-RPC client, without then with
    otelsse on the client."""
    with SSEServer() as server:
        server.route("/rpc", reply)
        card = _card(server.url(""))
        reference = _stream(card, "ok")
        client_sdk = Telemetry().install()
        try:
            run = _stream(card, "ok")
            attributes = _attributes(client_sdk.stream_span())
        finally:
            client_sdk.uninstall()
    return reference, run, attributes, server


def test_a_stream_cut_inside_an_event_is_truncated() -> None:
    body = read_fixture(CAPTURED)
    cut = event_ends(body)[2] + 40  # inside the second artifact chunk
    reference, run, attributes, _ = _cut_run(Reply(body, cut=cut))
    assert run == reference
    assert reference.error == "A2AClientError"  # its network error
    assert reference.events[-1] == ("artifact_update", "Part one, ")
    assert _verdict(attributes) == (ROUTE, "truncated", None)


def test_a_clean_eof_while_the_task_works_is_truncated_though_the_sdk_sees_no_error() -> None:
    body = read_fixture(CAPTURED)
    reference, run, attributes, _ = _cut_run(Reply(body[: event_ends(body)[3]], framing="close"))
    assert run == reference
    assert reference.error is None
    assert reference.events[-1] == ("artifact_update", "part two.")
    assert _verdict(attributes) == (ROUTE, "truncated", None)


def test_the_client_asks_for_sse_over_both_bindings() -> None:
    # What the route's recognition of the JSON-RPC binding rests on (``Request``).
    body = read_fixture(CAPTURED)
    _, _, attributes, server = _cut_run(Reply(body))
    assert _verdict(attributes) == (ROUTE, "complete", "completed")
    rest = read_fixture("real/a2a-sdk-rest-message.sse")
    with SSEServer() as rest_server:
        rest_server.route("/message:stream", Reply(rest))
        run = _stream(_card(rest_server.url(""), HTTP_JSON), "message")
    assert run == _Run([("message", "Hello from the agent.")], None)
    legacy = read_fixture("real/a2a-sdk-jsonrpc-v03-artifacts-completed.sse")
    with SSEServer() as legacy_server:
        legacy_server.route("/rpc", Reply(legacy))
        run = _stream(_card(legacy_server.url(""), JSONRPC, "0.3"), "ok")
    assert run.events[-1] == ("status_update", "TASK_STATE_COMPLETED")
    received = [*server.received, *rest_server.received, *legacy_server.received]
    for request in received:
        assert request.method == "POST"
        assert "text/event-stream" in request.headers["accept"]
    assert [r.target for r in rest_server.received] == ["/message:stream"]
    assert {json.loads(r.body)["method"] for r in server.received} == {"SendStreamingMessage"}
    assert [json.loads(r.body)["method"] for r in legacy_server.received] == ["message/stream"]


# -- strict mode's error event ------------------------------------------------------------------


@pytest.mark.parametrize("binding", [JSONRPC, HTTP_JSON])
def test_both_transports_raise_on_the_strict_error_event(binding: str) -> None:
    body = read_fixture(CAPTURED if binding == JSONRPC else "real/a2a-sdk-rest-failed.sse")
    half = body[: event_ends(body)[1]]
    event = A2AStreamRoute.strict_error_event("otelsse_strict_truncated", "refused: truncated")
    assert event is not None
    with SSEServer() as server:
        server.route("/rpc" if binding == JSONRPC else "/message:stream", Reply(half + event))
        run = _stream(_card(server.url(""), binding), "ok")
    assert run.events == [("task", "TASK_STATE_SUBMITTED"), ("status_update", "TASK_STATE_WORKING")]
    assert run.error == ("InternalError" if binding == JSONRPC else "A2AClientError")
