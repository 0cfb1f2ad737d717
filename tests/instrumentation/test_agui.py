"""AG-UI end to end: a server built with the protocol's own package, a client reading it, both
observed by otelsse, with and without otelsse.

The server is the AG-UI quickstart's shape (ag-ui-protocol/ag-ui ``docs/quickstart/server.mdx``):
a POST endpoint that validates its body as ``ag_ui.core.RunAgentInput`` and answers with a
streaming response of ``ag_ui.encoder.EventEncoder().encode(event)`` for each event, media type
``encoder.get_content_type()``; here Starlette's ``StreamingResponse`` (what FastAPI's is) under
uvicorn on 127.0.0.1, one server for the module. Its app is wrapped in otelsse's ASGI middleware
(``OtelSSEMiddleware``, its own OpenTelemetry SDK) when observed.

The client reads it as the AG-UI reference client does
(``sdks/typescript/packages/client/src/transform/sse.ts`` and ``run/http-request.ts``): it POSTs
the run input as JSON with ``Accept: text/event-stream``, takes the ``data:`` lines of each event
(a blank line ends one), parses each as JSON and validates it as an ``ag_ui.core.Event``. It uses
httpx with otelsse instrumented (``tests/_otel.Telemetry``) when observed.

Each run is made first with neither side observed, then with both: the application gets the same
events and the same exception either way, and the client's ``otelsse.stream`` span (CLIENT) and
the server's (SERVER) give the same verdict on the same stream: complete (with a tool call),
complete paused on an interrupt, ``RUN_ERROR`` (provider_error), the server's generator raising
mid-run (truncated: the client gets httpx's ``RemoteProtocolError``), the client leaving mid-run
(cancelled on both sides).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from ag_ui.core import (
    Event,
    EventType,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from otelsse import semconv
from otelsse.asgi import OtelSSEMiddleware
from tests._helpers import soon
from tests._otel import Telemetry
from tests._uvicorn import Served, serving

#: Bounds every wait and the client's timeout: only a wrong test reaches it.
MAX_WAIT = 10.0
PATH = "/agent"  # the agent's own path: no route claims it, the first event tells
THREAD = "thread_1"
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


class AppFailure(Exception):
    """What the agent's event generator raises mid-run."""


def _events(scenario: str, run_id: str) -> list[Any]:
    """The events a scenario's run streams, before its ending (``_ENDINGS``)."""
    started = RunStartedEvent(thread_id=THREAD, run_id=run_id, protocol_version="1.0")
    text = [
        TextMessageStartEvent(message_id="msg_1", role="assistant"),
        TextMessageContentEvent(message_id="msg_1", delta="Checking the "),
        TextMessageContentEvent(message_id="msg_1", delta="weather."),
    ]
    if scenario in ("run_error", "cut", "hold"):
        return [started, *text[:2]]
    events = [
        started,
        *text,
        TextMessageEndEvent(message_id="msg_1"),
        ToolCallStartEvent(
            tool_call_id="call_1", tool_call_name="get_weather", parent_message_id="msg_1"
        ),
        ToolCallArgsEvent(tool_call_id="call_1", delta='{"city": '),
        ToolCallArgsEvent(tool_call_id="call_1", delta='"Paris"}'),
        ToolCallEndEvent(tool_call_id="call_1"),
    ]
    if scenario == "interrupt":
        outcome = RunFinishedInterruptOutcome(
            interrupts=[Interrupt(id="int_1", reason="tool_approval", tool_call_id="call_1")]
        )
        return [*events, RunFinishedEvent(thread_id=THREAD, run_id=run_id, outcome=outcome)]
    return [*events, RunFinishedEvent(thread_id=THREAD, run_id=run_id)]


async def _agent(request: Request) -> Response:
    """The quickstart's endpoint: the scenario rides the run input's ``forwardedProps``."""
    run = RunAgentInput.model_validate_json(await request.body())
    scenario = run.forwarded_props["scenario"]
    encoder = EventEncoder(accept=request.headers.get("accept"))

    async def stream() -> AsyncIterator[str]:
        for event in _events(scenario, run.run_id):
            yield encoder.encode(event)
        if scenario == "run_error":
            yield encoder.encode(RunErrorEvent(message="model unavailable", code="upstream_503"))
        elif scenario == "cut":
            raise AppFailure
        elif scenario == "hold":
            await anyio.sleep_forever()  # until the client leaves

    return StreamingResponse(stream(), media_type=encoder.get_content_type())


APP = Starlette(routes=[Route(PATH, _agent, methods=["POST"])])


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with serving(lambda base: APP) as served:
        yield served


# -- the client ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the application got: the events it validated, and what was raised, if anything."""

    events: list[dict[str, Any]]
    error: type[BaseException] | None


def _run_input(scenario: str) -> RunAgentInput:
    return RunAgentInput(
        thread_id=THREAD,
        run_id=f"run_{scenario}",
        messages=[UserMessage(id="user_1", content="What is the weather in Paris?")],
        forwarded_props={"scenario": scenario},
        protocol_version="1.0",
    )


def _data(lines: Iterator[str]) -> Iterator[str]:
    """Each event's data: its ``data:`` lines joined (other fields and comments ignored)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def run_agent(url: str, scenario: str, stop_after: EventType | None = None) -> Run:
    """POST the run input and read the run as the AG-UI client does; leave after the first
    ``stop_after`` event when one is named (closing the response)."""
    events: list[dict[str, Any]] = []
    body = _run_input(scenario).model_dump_json(by_alias=True)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    try:
        with (
            httpx.Client(timeout=MAX_WAIT) as client,
            client.stream("POST", url, content=body, headers=headers) as response,
        ):
            response.raise_for_status()
            for data in _data(response.iter_lines()):
                event = EVENTS.validate_python(json.loads(data))
                events.append(event.model_dump(by_alias=True))
                if event.type is stop_after:
                    break
    except httpx.HTTPError as exc:
        return Run(events, type(exc))
    return Run(events, None)


# -- the verdicts --------------------------------------------------------------------------------


def _span(telemetry: Telemetry, what: str) -> dict[str, Any]:
    (span,) = soon(telemetry.spans, MAX_WAIT, what)
    return _attributes(span)


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    attributes["kind"] = span.kind
    return attributes


#: What both sides must agree on: what the bytes decide.
AGREED = (
    semconv.ROUTE, semconv.OUTCOME, semconv.STOP_REASON, semconv.TERMINAL_SEEN,
    semconv.EVENT_COUNT, semconv.TOOL_CALL_COUNT, semconv.PROVIDER_ERROR_CODE,
    semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_RESPONSE_ID, semconv.GEN_AI_PROVIDER_NAME,
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    scenario: str
    outcome: str
    stop_reason: str | None = None
    error: type[BaseException] | None = None
    stop_after: EventType | None = None
    #: What the client's span saw, if not the whole stream: the server sent on (``event_count``).
    client_events: int | None = None


CASES = [
    Case("complete", "complete", "success"),
    Case("interrupt", "complete", "interrupt"),
    Case("run_error", "provider_error"),
    Case("cut", "truncated", error=httpx.RemoteProtocolError),
    Case("hold", "cancelled", stop_after=EventType.TEXT_MESSAGE_CONTENT),
]


@pytest.fixture
def observed(server: Served) -> Iterator[Callable[[], tuple[Telemetry, Telemetry]]]:
    """Observe both sides from the call on: the client's instrumentation and the server's
    middleware, each with its own in-memory SDK."""
    sides: list[Telemetry] = []

    def observe() -> tuple[Telemetry, Telemetry]:
        client, served = Telemetry().install(), Telemetry()
        sides.extend((client, served))
        server.mount.app = OtelSSEMiddleware(
            APP, tracer_provider=served.tracer_provider, meter_provider=served.meter_provider
        )
        return client, served

    try:
        yield observe
    finally:
        server.mount.app = server.mount.bare
        if sides:
            client, served = sides
            client.uninstall()
            served.tracer_provider.shutdown()
            served.meter_provider.shutdown()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.scenario)
def test_both_sides_judge_the_run_alike_and_the_application_sees_no_difference(
    server: Served, observed: Callable[[], tuple[Telemetry, Telemetry]], case: Case
) -> None:
    server.mount.raised.clear()
    bare = run_agent(server.base + PATH, case.scenario, case.stop_after)
    client, served = observed()
    seen = run_agent(server.base + PATH, case.scenario, case.stop_after)

    assert seen == bare
    assert seen.error is case.error
    assert [event["type"] for event in seen.events][:1] == ["RUN_STARTED"]

    at_client = _span(client, "the client's stream span")
    at_server = _span(served, "the server's stream span")
    assert (at_client["kind"], at_server["kind"]) == (SpanKind.CLIENT, SpanKind.SERVER)
    assert at_client[semconv.OUTCOME] == case.outcome
    assert at_client.get(semconv.STOP_REASON) == case.stop_reason
    assert at_client[semconv.ROUTE] == "agui.run"
    assert at_client[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert at_client[semconv.GEN_AI_RESPONSE_ID] == f"run_{case.scenario}"
    assert semconv.GEN_AI_PROVIDER_NAME not in at_client  # a protocol, not a provider
    assert {key: at_client.get(key) for key in AGREED} == {
        key: at_server.get(key) for key in AGREED
    }
    assert at_client[semconv.EVENT_COUNT] == len(seen.events)
    assert client.nonzero_outcomes() == served.nonzero_outcomes() == {case.outcome: 1}
    soon(lambda: served.active_streams() == 0, MAX_WAIT, "the server's stream to end")
    assert client.active_streams() == 0
    assert client.instrumentation_errors() == served.instrumentation_errors() == 0
    if case.scenario == "cut":
        # The generator's own exception reached the server unchanged, observed or not.
        assert [type(exc) for exc in server.mount.raised] == [AppFailure, AppFailure]


def test_the_runs_content_stays_out_of_the_telemetry(
    server: Served, observed: Callable[[], tuple[Telemetry, Telemetry]]
) -> None:
    client, served = observed()
    run_agent(server.base + PATH, "run_error")
    for side in (client, served):
        texts = [f"{k}={v}" for k, v in _span(side, "the stream span").items()]
        assert not [t for t in texts if "weather" in t or "unavailable" in t or "Paris" in t]
