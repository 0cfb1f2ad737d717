"""The demo's fake provider keeps its wire contract, through every client the demo drives.

``otelsse/_demo/provider.py`` serves ten streaming routes on 127.0.0.1 (nine in SSE, AG-UI among
them at a path of the provider's own, ``AGUI_PATH``, MCP and A2A told by their JSON-RPC request,
``agents.py``: raw requests send their headers, and the tool-call tests skip them, which stream no
tool call; and Bedrock ConverseStream in AWS's event stream); a request header picks how each
stream ends (``SCENARIOS``) and ``EXPECTED_OUTCOME`` says what otelsse must report for it. This
module proves, against a live ``FakeProvider``:

1. Wire contract: every (route, scenario) pair outside ``UNSUPPORTED``, streamed by every client
   the demo uses for the route (``otelsse._demo.run.CLIENTS``, the functions the demo runs, with
   ``Job``s built here) while otelsse is instrumented (the ``otel`` fixture): exactly one
   ``otelsse.stream`` span per job with the expected outcome, route and request id
   ``req_demo_<job number>``, and ``otelsse.streams``/``otelsse.tool_calls`` agreeing per route.
   Whether the application's client raised is exact too (``client_raises``, which
   ``test_demo.py`` reuses): always for rate_limited and timeout, for provider_error only in the
   SDKs that turn the error event into an exception (botocore on Bedrock's exception frame), for
   truncated exactly when the cut body was chunked. The provider picks chunked or
   close-delimited framing at random per truncated stream, so each framing is tested with a
   seed found by probing (``_seed_for``) and otelsse must say truncated in both cases, even
   where the client finishes silently.
2. Raw HTTP (plain sockets): 404 off the streaming endpoints (and for any method but POST); a
   400 JSON error for a request it
   cannot serve; the HTTP failures in each provider's shape (AWS's ``x-amzn-errortype``); the
   request-id header per route; the default scenario (a tool call when the request offers
   tools) in the route's media type; both truncation framings end the body inside an event,
   without the terminal event; the clean endings (``clean_cut``, ``no_terminal``) end a
   well-formed chunked body at an event boundary, the same bytes every time, which httpx reads
   without an error; and stopping the provider ends a stalled stream in flight instead of
   hanging.
3. ``script_events`` renders bodies ``StreamMonitor`` classifies as ``EXPECTED_OUTCOME``
   (offline, for every scenario decided by the body alone), with the tool-call counts and the
   model where the contract names it; a ``clean_cut`` offered tools leaves the call open.
4. Realism: the real openai, anthropic, cohere and google-genai SDKs and botocore parse the
   bodies into their typed objects and recover the text and tool arguments that were sent
   (botocore also decodes every frame's CRCs, and raises the AWS error types of the HTTP
   failures), and AG-UI's own package (``ag-ui-protocol``) validates every event of a run and
   the request the demo sends; on the clean endings they finish without raising, and hand over
   half an answer or a call built from half its arguments (what otelsse exists to report).

Timeouts cost the demo's READ_TIMEOUT (2 s) each, so all of them run at once in one test.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import socket
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import anthropic
import botocore.eventstream
import botocore.exceptions
import cohere
import httpx
import openai
import pytest
from ag_ui.core import Event as AGUIEvent
from ag_ui.core import RunAgentInput
from google import genai
from google.genai import types as genai_types
from pydantic import TypeAdapter

from otelsse import StreamMonitor, semconv
from otelsse._core.http import media_type, stream_violation
from otelsse._demo.agents import AGENT_ROUTES, agent_request_headers
from otelsse._demo.provider import (
    AGUI_PATH,
    ANSWER,
    AWS_FAILURES,
    DEFAULT_MODELS,
    EXPECTED_OUTCOME,
    HTTP_FAILURES,
    JOB_HEADER,
    SCENARIO_HEADER,
    SCENARIOS,
    UNSUPPORTED,
    UNSUPPORTED_WITH_TOOLS,
    FakeProvider,
    Turn,
    request_for,
    script_events,
)
from otelsse._demo.run import (
    CLIENTS,
    READ_TIMEOUT,
    ROUTES,
    Job,
    _aws_session,
    _bedrock_client,
    _tls,
    prepare_clients,
)
from otelsse.routes import get_route
from tests import _eventstream as es
from tests._demo_clients import client_raises
from tests._helpers import joined, waited
from tests._otel import Telemetry
from tests._server import MAX_WAIT

#: Longer than the clients' read timeout, so a ``timeout`` stream times out in the client.
STALL = 3.0
#: The provider's delays divided by this: the tests need the endings, not realistic pacing.
SPEED = 50.0
TOOL_ARGUMENTS = {"city": "Paris", "unit": "celsius"}
#: What a ``clean_cut`` tool call's argument deltas add up to: the last delta never comes.
CUT_ARGUMENTS = '{"city": "Paris", "unit"'
#: Modules an application's exception may come from: the SDKs and the HTTP clients under them
#: (botocore passes urllib3's errors for a cut or a stalled body on as they are).
CLIENT_LIBRARIES = frozenset(
    {
        "openai",
        "anthropic",
        "cohere",
        "google",  # google-genai (google.genai)
        "botocore",
        "urllib3",
        "httpx",
        "httpx2",
        "requests",
    }
)
FRAMINGS = ("chunked", "close")
BEDROCK = "bedrock.converse_stream"
COHERE = "cohere.chat"
INTERACTIONS = "gemini.interactions"
AGUI = "agui.run"
#: Routes whose streams never carry a model's tool call (MCP, A2A: ``agents.py``), and never
#: name the model (nor do ConverseStream's and Cohere's: only Bedrock's request path does).
WITHOUT_TOOL_CALLS = frozenset(r for r in DEFAULT_MODELS if (r, "tool_call") in UNSUPPORTED)
WITHOUT_MODEL = frozenset({BEDROCK, COHERE, *AGENT_ROUTES})
EVENT_STREAM = "application/vnd.amazon.eventstream"
#: Any AG-UI event, read as the protocol's own package reads it (discriminated by ``type``).
AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AGUIEvent)


def _event_stream(route: str) -> bool:
    """Whether ``route`` speaks AWS's event stream (frames), not SSE."""
    return get_route(route).media_type == EVENT_STREAM


def _ends_at_an_event_boundary(route: str, body: bytes) -> bool:
    """Whether ``body`` ends where an event ends: a blank line (SSE), or the length the last
    frame's prelude declares (AWS's event stream)."""
    if _event_stream(route):
        return es.frame_ends(body)[-1] == len(body)
    return body.endswith(b"\n\n")


def _payloads(route: str, events: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """Each event's name and JSON payload: SSE events (named by the payload's ``type``, or
    ``event_type`` on Interactions, empty where it has neither), or frames decoded by botocore's
    own reader (which checks their CRCs)."""
    found = []
    for event in events:
        if _event_stream(route):
            buffer = botocore.eventstream.EventStreamBuffer()
            buffer.add_data(event)
            for message in buffer:
                name = message.headers.get(":event-type") or message.headers[":exception-type"]
                found.append((name, json.loads(message.payload)))
        else:
            data = json.loads(event.decode().partition("data: ")[2])
            found.append((data.get("type") or data.get("event_type", ""), data))
    return found


def _route_clients() -> Iterator[tuple[str, str]]:
    for route, (_, clients) in ROUTES.items():
        for client in clients:
            yield route, client


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    assert STALL > READ_TIMEOUT
    with FakeProvider(seed=11, stall=STALL, speed=SPEED) as running:
        yield running


# -- through the demo's clients, instrumented ----------------------------------------------------


def _run(jobs: list[Job], base_url: str) -> dict[int, Exception | None]:
    """Run the jobs' clients at once, as the demo does; what each raised, by job number."""
    prepare_clients(job.client for job in jobs)  # only theirs: an SDK's import takes seconds

    def one(job: Job) -> Exception | None:
        try:
            CLIENTS[job.client](job, base_url)
        except Exception as exc:
            return exc
        return None

    with ThreadPoolExecutor(len(jobs)) as pool:
        return dict(zip([job.number for job in jobs], pool.map(one, jobs), strict=True))


def _assert_raised(job: Job, raised: Exception | None, expected: bool) -> None:
    if expected:
        assert raised is not None, f"{job}: the client finished without an exception"
        library = type(raised).__module__.split(".")[0]
        assert library in CLIENT_LIBRARIES, f"{job}: {raised!r}"
    else:
        assert raised is None, f"{job}: {raised!r}"


def _assert_observed(otel: Telemetry, jobs: list[Job]) -> None:
    """One span per job with its expected outcome and route; the metrics say the same."""
    spans: dict[Any, list[Mapping[str, Any]]] = {}
    for span in otel.spans():
        attributes = dict(span.attributes or {})
        spans.setdefault(attributes.get(semconv.REQUEST_ID), []).append(attributes)
    assert sorted(spans, key=str) == sorted(job.request_id for job in jobs)
    for job in jobs:
        [attributes] = spans[job.request_id]
        assert attributes[semconv.OUTCOME] == EXPECTED_OUTCOME[job.scenario], job
        assert attributes[semconv.ROUTE] == job.route, job
    streams: Counter[tuple[str, str]] = Counter()
    for point in otel.points(semconv.STREAMS.name):
        streams[point.attributes[semconv.ROUTE], point.attributes[semconv.OUTCOME]] += point.value
    assert +streams == Counter((job.route, EXPECTED_OUTCOME[job.scenario]) for job in jobs)
    tool_calls: Counter[tuple[str, bool]] = Counter()
    for point in otel.points(semconv.TOOL_CALLS.name):
        valid = point.attributes[semconv.TOOL_CALL_VALID]
        tool_calls[point.attributes[semconv.ROUTE], valid] += point.value
    expected_calls = Counter(
        (job.route, job.scenario == "tool_call")
        for job in jobs
        if job.scenario in ("tool_call", "tool_call_invalid")
    )
    assert +tool_calls == expected_calls


@pytest.mark.matrix  # every scenario and client
@pytest.mark.parametrize(
    ("route", "scenario", "client"),
    [
        pytest.param(route, scenario, client, id=f"{route}-{scenario}-{client}")
        for route, client in _route_clients()
        for scenario in SCENARIOS
        # truncated and timeout have their own tests below (framing; a 2 s read timeout each)
        if (route, scenario) not in UNSUPPORTED and scenario not in ("truncated", "timeout")
    ],
)
def test_every_scenario_through_every_client(
    otel: Telemetry, provider: FakeProvider, route: str, scenario: str, client: str
) -> None:
    job = Job(17, route, client, scenario)
    raised = _run([job], provider.base_url)[job.number]
    _assert_raised(job, raised, client_raises(job))
    _assert_observed(otel, [job])


@functools.cache
def _seed_for(route: str, framing: str) -> int:
    """A provider seed whose job 23, when truncated, is cut with ``framing`` (a job's draws
    follow from the seed and its number alone)."""
    for seed in range(64):
        with FakeProvider(seed=seed, speed=SPEED) as probe:
            reply = _exchange(probe.port, _stream_request(route, "truncated", job=23))
        if reply.framing == framing:
            return seed
    raise AssertionError(f"no seed in 0..63 truncates {route} with {framing} framing")


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize(
    ("route", "client"),
    [pytest.param(*pair, id="-".join(pair)) for pair in _route_clients()],
)
def test_truncated_through_every_client_in_both_framings(
    otel: Telemetry, route: str, client: str, framing: str
) -> None:
    job = Job(23, route, client, "truncated")
    with FakeProvider(seed=_seed_for(route, framing), speed=SPEED) as fresh:
        raised = _run([job], fresh.base_url)[job.number]
    _assert_raised(job, raised, client_raises(job, framing))
    _assert_observed(otel, [job])


@pytest.mark.e2e  # waits out the clients' read timeout
def test_timeout_through_every_client(otel: Telemetry, provider: FakeProvider) -> None:
    # All at once: each costs the 2 s read timeout, so in turn they would cost 26 s.
    jobs = [
        Job(100 + number, route, client, "timeout")
        for number, (route, client) in enumerate(_route_clients())
    ]
    raised = _run(jobs, provider.base_url)
    for job in jobs:
        _assert_raised(job, raised[job.number], True)
    _assert_observed(otel, jobs)


# -- raw HTTP ------------------------------------------------------------------------------------


class RawReply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes  # de-chunked
    framing: str  # "chunked", "length" or "close"
    last_chunk: bool  # the zero-size chunk that ends a chunked body arrived


def _http(method: str, target: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "host: 127.0.0.1", f"content-length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _stream_request(
    route: str, scenario: str | None = None, *, tools: bool = False, job: int | None = None
) -> bytes:
    path, body = request_for(route, DEFAULT_MODELS[route], tools=tools)
    headers = agent_request_headers(route)
    if scenario is not None:
        headers[SCENARIO_HEADER] = scenario
    if job is not None:
        headers[JOB_HEADER] = str(job)
    return _http("POST", path, json.dumps(body).encode(), headers)


def _dechunk(data: bytes) -> tuple[bytes, bool]:
    body, rest = b"", data
    while rest:
        size_line, found, rest = rest.partition(b"\r\n")
        if not found:
            break
        size = int(size_line, 16)
        if size == 0:
            return body, True
        body += rest[:size]
        rest = rest[size + 2 :]
    return body, False


def _exchange(port: int, request: bytes, streaming: threading.Event | None = None) -> RawReply:
    """Send ``request`` and read the reply to EOF; ``streaming`` is set once body bytes arrive."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=MAX_WAIT) as connection:
        connection.sendall(request)
        while chunk := connection.recv(65536):
            data += chunk
            if streaming is not None and data.partition(b"\r\n\r\n")[2]:
                streaming.set()
    assert data, "the provider closed the connection without a reply"
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body, last_chunk = _dechunk(payload)
        framing = "chunked"
    else:
        body, last_chunk = payload, False
        framing = "length" if "content-length" in headers else "close"
    return RawReply(int(status_line.split(" ")[1]), headers, body, framing, last_chunk)


def _classify(route: str, body: bytes) -> Any:
    monitor = StreamMonitor(route)
    monitor.feed(body)
    return monitor.close()


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/v1/nope"),
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1beta/models/gemini-2.5-flash:generateContent"),
        ("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),  # no alt=sse
        ("POST", "/model/amazon.nova-lite-v1%3A0/converse"),  # Converse, not ConverseStream
        ("GET", "/model/amazon.nova-lite-v1%3A0/converse-stream"),
        ("POST", "/model/amazon.nova-lite-v1%3A0/invoke-with-response-stream"),  # not spoken
        ("POST", "/v1/chat"),  # Cohere's v1 chat (NDJSON, not SSE)
        ("GET", "/v1beta/interactions/v1_demo?stream=true"),  # no interaction to resume
        ("GET", AGUI_PATH),
        ("POST", "/agui/other"),  # AG-UI is served at its one path
    ],
)
def test_unknown_endpoint_is_a_404(provider: FakeProvider, method: str, target: str) -> None:
    reply = _exchange(provider.port, _http(method, target, b"{}", {}))
    assert reply.status == 404
    assert json.loads(reply.body)["error"]["type"] == "not_found"


def _bad_requests() -> Iterator[Any]:
    for route in DEFAULT_MODELS:
        path, body = request_for(route, DEFAULT_MODELS[route], tools=False)
        said = agent_request_headers(route)
        # MCP's and A2A's are told by their JSON-RPC body: without one, no route's (404)
        if route not in AGENT_ROUTES:
            yield pytest.param(path, b"{not json", {}, id=f"{route}-invalid-json")
            # A JSON value that is not an object is as unusable as invalid JSON.
            yield pytest.param(path, b"[]", {}, id=f"{route}-json-array")
        unknown = {**said, SCENARIO_HEADER: "meltdown"}
        yield pytest.param(path, json.dumps(body).encode(), unknown, id=f"{route}-scenario")
        if "stream" in body:  # Gemini streams by its path, not by a body field
            not_streaming = json.dumps({**body, "stream": False}).encode()
            yield pytest.param(path, not_streaming, {}, id=f"{route}-stream-false")
    for route, scenario in sorted(UNSUPPORTED | UNSUPPORTED_WITH_TOOLS):  # one order per worker
        path, body = request_for(route, DEFAULT_MODELS[route], tools=True)
        headers = {**agent_request_headers(route), SCENARIO_HEADER: scenario}
        yield pytest.param(path, json.dumps(body).encode(), headers, id=f"{route}-{scenario}")


@pytest.mark.parametrize(("path", "body", "headers"), list(_bad_requests()))
def test_a_request_it_cannot_serve_is_a_400_json_error(
    provider: FakeProvider, path: str, body: bytes, headers: dict[str, str]
) -> None:
    reply = _exchange(provider.port, _http("POST", path, body, headers))
    assert reply.status == 400
    assert reply.headers["content-type"] == "application/json"
    assert json.loads(reply.body)["error"]["type"] == "invalid_request_error"


def _served(scenarios: list[str]) -> list[Any]:
    """Every route with each of ``scenarios`` it serves."""
    return [
        pytest.param(route, scenario, id=f"{route}-{scenario}")
        for route in DEFAULT_MODELS
        for scenario in scenarios
        if (route, scenario) not in UNSUPPORTED
    ]


@pytest.mark.parametrize(("route", "scenario"), _served(list(HTTP_FAILURES)))
def test_http_failures_answer_with_their_status_and_retry_advice(
    provider: FakeProvider, route: str, scenario: str
) -> None:
    reply = _exchange(provider.port, _stream_request(route, scenario, job=7))
    assert reply.headers["content-type"] == "application/json"
    if route == BEDROCK:
        # AWS's shape: the error type in a header, a message in the body, no Retry-After.
        status, kind, message = AWS_FAILURES[scenario]
        assert (reply.status, reply.headers["x-amzn-errortype"]) == (status, kind)
        assert json.loads(reply.body) == {"message": message}
        assert "retry-after" not in reply.headers
    else:
        status = HTTP_FAILURES[scenario][0]
        assert reply.status == (529 if (status, route) == (503, "anthropic.messages") else status)
        assert json.loads(reply.body)["error"]["type"] == HTTP_FAILURES[scenario][1]
        # A quota or an overload says when to come back; bad credentials do not.
        assert ("retry-after" in reply.headers) is (status != 401)
    # and otelsse, at the headers, tells the quota from the other failures
    monitor = StreamMonitor(route)
    violation = stream_violation(reply.status, reply.headers["content-type"])
    assert violation is not None
    monitor.refuse(violation)
    assert monitor.close().outcome.value == EXPECTED_OUTCOME[scenario]


@pytest.mark.parametrize(("route", "scenario"), _served(["complete", *HTTP_FAILURES]))
def test_request_id_header_is_named_per_route(
    provider: FakeProvider, route: str, scenario: str
) -> None:
    # Anthropic's name, AWS's, everyone else's.
    names = {"anthropic.messages": "request-id", BEDROCK: "x-amzn-requestid"}
    expected = names.get(route, "x-request-id")
    with_job = _exchange(provider.port, _stream_request(route, scenario, job=42))
    assert with_job.headers[expected] == "req_demo_42"
    assert set(with_job.headers) & set(semconv.REQUEST_ID_HEADERS) == {expected}
    # Without the job header the id counts the provider's streams (this is its second).
    without = _exchange(provider.port, _stream_request(route, scenario))
    assert without.headers[expected] == "req_demo_2"


@pytest.mark.parametrize(
    ("route", "tools"),
    [
        pytest.param(route, tools, id=f"{route}-{tools}")
        for route in DEFAULT_MODELS
        for tools in (False, True)
        if not (tools and route in WITHOUT_TOOL_CALLS)
    ],
)
def test_default_scenario_is_complete_or_a_tool_call_when_offered_tools(
    provider: FakeProvider, route: str, tools: bool
) -> None:
    reply = _exchange(provider.port, _stream_request(route, tools=tools))
    assert reply.status == 200
    assert media_type(reply.headers["content-type"]) == get_route(route).media_type
    report = _classify(route, reply.body)
    assert report.outcome == "complete"
    assert (report.tool_call_count, report.tool_call_invalid_count) == (int(tools), 0)


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("route", DEFAULT_MODELS)
def test_both_truncation_framings_end_without_the_terminal(route: str, framing: str) -> None:
    with FakeProvider(seed=_seed_for(route, framing), speed=SPEED) as fresh:
        reply = _exchange(fresh.port, _stream_request(route, "truncated", job=23))
    assert (reply.status, reply.framing, reply.last_chunk) == (200, framing, False)
    assert not _ends_at_an_event_boundary(route, reply.body)  # cut inside an event
    report = _classify(route, reply.body)
    assert (report.outcome, report.terminal_seen) == ("truncated", False)


def _clean_endings() -> Iterator[Any]:
    for route in DEFAULT_MODELS:
        for scenario, tools in (("clean_cut", False), ("clean_cut", True), ("no_terminal", False)):
            pair = (route, scenario)
            if pair in UNSUPPORTED or (tools and pair in UNSUPPORTED_WITH_TOOLS):
                continue
            if tools and route in WITHOUT_TOOL_CALLS:
                continue  # its requests offer no tools: the cut falls in its text
            name = f"{route}-{scenario}" + ("-tools" if tools else "")
            yield pytest.param(route, scenario, tools, id=name)


@pytest.mark.parametrize(("route", "scenario", "tools"), list(_clean_endings()))
def test_clean_endings_end_a_well_formed_chunked_body(
    provider: FakeProvider, route: str, scenario: str, tools: bool
) -> None:
    # Unlike truncated, never close-delimited and never cut inside an event: every job's body is
    # chunked, ends with its last chunk, at an event boundary.
    for job in range(1, 9):
        reply = _exchange(provider.port, _stream_request(route, scenario, tools=tools, job=job))
        assert (reply.status, reply.framing, reply.last_chunk) == (200, "chunked", True), job
        assert _ends_at_an_event_boundary(route, reply.body), job
        report = _classify(route, reply.body)
        assert (report.outcome, report.terminal_seen) == (EXPECTED_OUTCOME[scenario], False)
        assert (report.pending_line_chars, report.discarded_event) == (0, False)
        # with tools, the cut falls inside the call's arguments: the call is left open
        cut_call = scenario == "clean_cut" and tools
        assert (report.tool_call_count, report.open_accumulator_count) == (
            int(cut_call),
            int(cut_call),
        )
    # A client library reads the same body to its end without an error.
    path, body = request_for(route, DEFAULT_MODELS[route], tools=tools)
    headers = {**agent_request_headers(route), SCENARIO_HEADER: scenario, JOB_HEADER: "8"}
    with (
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream("POST", provider.base_url + path, json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        read = b"".join(response.iter_bytes())
    assert read == reply.body


def test_stopping_ends_a_stalled_stream_in_flight() -> None:
    # The stall outlasts every bound below: only the provider stopping can end this stream.
    running = FakeProvider(stall=MAX_WAIT * 4, speed=SPEED).__enter__()
    streaming = threading.Event()
    replies: list[RawReply] = []
    request = _stream_request("openai.responses", "timeout")
    reader = threading.Thread(
        target=lambda: replies.append(_exchange(running.port, request, streaming))
    )
    try:
        reader.start()
        assert waited(streaming.wait, MAX_WAIT), "the stream never started"
    finally:
        stopper = threading.Thread(target=running.__exit__, args=(None, None, None))
        stopper.start()
        joined(stopper, MAX_WAIT)  # FakeProvider.__exit__ must not hang with a stream in flight
        joined(reader, MAX_WAIT)  # nor the stalled stream stay open after the provider stopped
    [reply] = replies  # ended by EOF, not by the socket's timeout (that would raise)
    assert (reply.status, reply.last_chunk) == (200, False)
    assert _classify("openai.responses", reply.body).outcome == "truncated"


def test_ctrl_c_during_wait_stops_the_server_before_the_block_ends() -> None:
    # `otelsse demo --provider-only` waits in FakeProvider.wait until Ctrl-C. Wherever the
    # KeyboardInterrupt lands, leaving the with-block must mean the server has stopped: its
    # port refuses and the stream it was serving has ended.
    main = threading.get_ident()
    streaming = threading.Event()
    replies: list[RawReply] = []
    readers: list[threading.Thread] = []
    request = _stream_request("openai.responses", "timeout")

    def serve_a_stream_until_ctrl_c(running: FakeProvider) -> None:
        with running:
            readers.append(
                threading.Thread(
                    target=lambda: replies.append(_exchange(running.port, request, streaming))
                )
            )
            readers[0].start()
            assert waited(streaming.wait, MAX_WAIT), "the stream never started"
            threading.Timer(0.05, signal.pthread_kill, (main, signal.SIGINT)).start()
            running.wait()

    provider = FakeProvider(stall=MAX_WAIT * 4)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            serve_a_stream_until_ctrl_c(provider)
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", provider.port), timeout=MAX_WAIT).close()
    joined(readers[0], MAX_WAIT)
    [reply] = replies
    assert (reply.status, reply.last_chunk) == (200, False)


# -- script_events, offline ----------------------------------------------------------------------


@pytest.mark.parametrize("words", [8, len(ANSWER)])  # the range the provider draws from
@pytest.mark.parametrize(
    ("route", "scenario"),
    [
        pytest.param(route, scenario, id=f"{route}-{scenario}")
        for route in DEFAULT_MODELS
        for scenario in SCENARIOS
        # these end on the network (a cut, a stall, a status, a line never ended), not in
        # the events
        if scenario not in ("truncated", "timeout", "bad_gateway", "endless_line", *HTTP_FAILURES)
        and (route, scenario) not in UNSUPPORTED
    ],
)
def test_script_events_classify_as_expected(route: str, scenario: str, words: int) -> None:
    body = b"".join(script_events(route, Turn("model-x", scenario, words, "req_demo_5")))
    report = _classify(route, body)
    assert report.outcome == EXPECTED_OUTCOME[scenario]
    tool = scenario in ("tool_call", "tool_call_invalid")
    invalid = scenario == "tool_call_invalid"
    assert (report.tool_call_count, report.tool_call_invalid_count) == (int(tool), int(invalid))
    assert report.response_model == ("model-x" if _names_the_model(route, scenario) else None)


def _names_the_model(route: str, scenario: str) -> bool:
    """Whether ``route``'s events for ``scenario`` name the model: ConverseStream's, Cohere's and
    the agent protocols' never do (only Bedrock's request path does); an AG-UI run names it in
    its terminal event's usage alone, which a cut body never reaches."""
    if route in WITHOUT_MODEL:
        return False
    return not (route == AGUI and scenario == "clean_cut")


def _sent_arguments(route: str, events: list[bytes]) -> str:
    """The argument text a tool call's deltas add up to, in ``route``'s events."""
    text = ""
    for kind, data in _payloads(route, events):
        if route == "openai.chat_completions":
            for choice in data["choices"]:
                for call in choice["delta"].get("tool_calls") or ():
                    text += call["function"]["arguments"]
        elif kind == "response.function_call_arguments.delta":
            text += data["delta"]
        elif kind == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            text += data["delta"]["partial_json"]
        elif kind == "contentBlockDelta" and "toolUse" in data["delta"]:
            text += data["delta"]["toolUse"]["input"]
        elif kind == "tool-call-delta":
            text += data["delta"]["message"]["tool_calls"]["function"]["arguments"]
        elif kind == "step.delta" and data["delta"]["type"] == "arguments_delta":
            text += data["delta"]["arguments"]
        elif kind == "TOOL_CALL_ARGS":
            text += data["delta"]
    return text


@pytest.mark.parametrize("words", [8, len(ANSWER)])
@pytest.mark.parametrize(
    "route",
    [
        route
        for route in DEFAULT_MODELS
        if (route, "clean_cut") not in UNSUPPORTED_WITH_TOOLS and route not in WITHOUT_TOOL_CALLS
    ],
)
def test_clean_cut_offered_tools_ends_inside_the_arguments(route: str, words: int) -> None:
    events = script_events(route, Turn("model-x", "clean_cut", words, "req_demo_5", tools=True))
    report = _classify(route, b"".join(events))
    assert (report.outcome, report.stop_reason) == ("truncated", None)
    # one call, still open: it was never closed, so never judged valid or invalid
    assert (report.tool_call_count, report.open_accumulator_count) == (1, 1)
    assert report.tool_call_invalid_count == 0
    # some of its argument deltas came, the rest never did
    assert _sent_arguments(route, events) == CUT_ARGUMENTS
    with pytest.raises(json.JSONDecodeError):
        json.loads(CUT_ARGUMENTS)
    assert _sent_arguments(route, events[-1:]), "the body does not end on an argument delta"


# -- realism: the real SDKs parse what the provider sends ----------------------------------------


def _assert_answer(text: str) -> None:
    """``text`` is the first words of the provider's answer (it draws 8 to all of them)."""
    words = text.split(" ")[:-1]
    assert 8 <= len(words) <= len(ANSWER), text
    assert text == " ".join(ANSWER[: len(words)]) + " "


def _assert_half_answer(text: str) -> None:
    """``text`` is the first half of a ``clean_cut`` answer's words (4 to half of them)."""
    words = text.split(" ")[:-1]
    assert 4 <= len(words) <= len(ANSWER) // 2, text
    assert text == " ".join(ANSWER[: len(words)]) + " "


def _sdk_request(route: str, scenario: str, tools: bool | None = None) -> dict[str, Any]:
    offered = scenario == "tool_call" if tools is None else tools
    _, body = request_for(route, DEFAULT_MODELS[route], tools=offered)
    return {**body, "extra_headers": {SCENARIO_HEADER: scenario}}


@pytest.mark.parametrize("scenario", ["complete", "tool_call"])
def test_openai_sdk_parses_chat_chunks(provider: FakeProvider, scenario: str) -> None:
    route = "openai.chat_completions"
    with (
        openai.OpenAI(base_url=f"{provider.base_url}/v1", api_key="demo", max_retries=0) as client,
        client.chat.completions.create(**_sdk_request(route, scenario)) as stream,
    ):
        chunks = list(stream)
    assert all(chunk.model == DEFAULT_MODELS[route] for chunk in chunks)
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert chunks[-1].usage is not None
    if scenario == "complete":
        _assert_answer("".join(delta.content or "" for delta in deltas))
        assert finish[-1] == "stop"
    else:
        calls = [call for delta in deltas for call in delta.tool_calls or ()]
        assert calls[0].function is not None
        assert calls[0].function.name == "get_weather"
        arguments = "".join(call.function.arguments or "" for call in calls if call.function)
        assert json.loads(arguments) == TOOL_ARGUMENTS
        assert finish[-1] == "tool_calls"


@pytest.mark.parametrize("scenario", ["complete", "tool_call"])
def test_openai_sdk_parses_responses_events(provider: FakeProvider, scenario: str) -> None:
    route = "openai.responses"
    with (
        openai.OpenAI(base_url=f"{provider.base_url}/v1", api_key="demo", max_retries=0) as client,
        client.responses.create(**_sdk_request(route, scenario)) as stream,
    ):
        events = list(stream)
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.model == DEFAULT_MODELS[route]
    if scenario == "complete":
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        _assert_answer(text)
        assert final.response.output_text == text
    else:
        [item] = final.response.output
        assert item.type == "function_call"
        assert item.name == "get_weather"
        assert json.loads(item.arguments) == TOOL_ARGUMENTS


@pytest.mark.parametrize("scenario", ["complete", "tool_call"])
def test_anthropic_stream_helper_builds_the_final_message(
    provider: FakeProvider, scenario: str
) -> None:
    route = "anthropic.messages"
    request = _sdk_request(route, scenario)
    del request["stream"]  # the helper streams by itself
    with (
        anthropic.Anthropic(base_url=provider.base_url, api_key="demo", max_retries=0) as client,
        client.messages.stream(**request) as stream,
    ):
        message = stream.get_final_message()
    assert message.model == DEFAULT_MODELS[route]
    text, *tools = message.content
    assert text.type == "text"
    _assert_answer(text.text)
    if scenario == "complete":
        assert (tools, message.stop_reason) == ([], "end_turn")
    else:
        [tool] = tools
        assert tool.type == "tool_use"
        assert (tool.name, tool.input) == ("get_weather", TOOL_ARGUMENTS)
        assert message.stop_reason == "tool_use"


# -- the clean endings, as the SDKs report them today ---------------------------------------------
# Nothing at the byte level is wrong, so no SDK raises: the application is handed half an answer
# (or a call built from half its arguments) or a whole answer whose end marker never came, as if
# it were a success. Only otelsse says truncated or terminal_missing.

CLEAN_ENDINGS = [
    pytest.param("clean_cut", False, id="clean_cut"),
    pytest.param("clean_cut", True, id="clean_cut-tools"),
    pytest.param("no_terminal", False, id="no_terminal"),
]


@pytest.mark.parametrize(("scenario", "tools"), CLEAN_ENDINGS)
def test_openai_sdk_reads_a_clean_ending_of_chat_without_raising(
    provider: FakeProvider, scenario: str, tools: bool
) -> None:
    route = "openai.chat_completions"
    with (
        openai.OpenAI(base_url=f"{provider.base_url}/v1", api_key="demo", max_retries=0) as client,
        client.chat.completions.create(**_sdk_request(route, scenario, tools)) as stream,
    ):
        chunks = list(stream)  # to the end of the body: nothing raised
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    text = "".join(delta.content or "" for delta in deltas)
    calls = [call for delta in deltas for call in delta.tool_calls or ()]
    arguments = "".join(call.function.arguments or "" for call in calls if call.function)
    if scenario == "no_terminal":
        _assert_answer(text)
        assert (finish[-1], calls) == ("stop", [])
        assert chunks[-1].usage is not None
        return
    assert set(finish) == {None}  # no finish_reason, no usage: the stream just ended
    assert chunks[-1].usage is None
    if tools:
        assert calls[0].function is not None
        assert calls[0].function.name == "get_weather"
        assert arguments == CUT_ARGUMENTS
        with pytest.raises(json.JSONDecodeError):
            json.loads(arguments)
    else:
        _assert_half_answer(text)
        assert calls == []


@pytest.mark.parametrize("tools", [False, True], ids=["clean_cut", "clean_cut-tools"])
def test_openai_sdk_reads_a_clean_cut_of_responses_without_raising(
    provider: FakeProvider, tools: bool
) -> None:
    route = "openai.responses"
    with (
        openai.OpenAI(base_url=f"{provider.base_url}/v1", api_key="demo", max_retries=0) as client,
        client.responses.create(**_sdk_request(route, "clean_cut", tools)) as stream,
    ):
        events = list(stream)  # to the end of the body: nothing raised
    kinds = {event.type for event in events}
    assert not kinds & {"response.completed", "response.incomplete", "response.failed", "error"}
    if tools:
        arguments = "".join(
            e.delta for e in events if e.type == "response.function_call_arguments.delta"
        )
        assert arguments == CUT_ARGUMENTS
        assert events[-1].type == "response.function_call_arguments.delta"
    else:
        _assert_half_answer(
            "".join(e.delta for e in events if e.type == "response.output_text.delta")
        )
        assert events[-1].type == "response.output_text.delta"


@pytest.mark.parametrize(("scenario", "tools"), CLEAN_ENDINGS)
def test_anthropic_stream_helper_reads_a_clean_ending_without_raising(
    provider: FakeProvider, scenario: str, tools: bool
) -> None:
    route = "anthropic.messages"
    request = _sdk_request(route, scenario, tools)
    del request["stream"]  # the helper streams by itself
    with (
        anthropic.Anthropic(base_url=provider.base_url, api_key="demo", max_retries=0) as client,
        client.messages.stream(**request) as stream,
    ):
        message = stream.get_final_message()  # to the end of the body: nothing raised
    assert message.model == DEFAULT_MODELS[route]
    text, *blocks = message.content
    assert text.type == "text"
    if scenario == "no_terminal":
        _assert_answer(text.text)
        assert (blocks, message.stop_reason) == ([], "end_turn")
        return
    assert message.stop_reason is None
    if tools:
        _assert_answer(text.text)
        [tool] = blocks
        assert tool.type == "tool_use"
        # A call built from half its arguments: the SDK's partial-JSON parse of the deltas
        # that came, schema-valid (the unit is optional) and missing what the model said.
        assert (tool.name, tool.input) == ("get_weather", {"city": "Paris"})
    else:
        _assert_half_answer(text.text)
        assert blocks == []


# -- botocore: Bedrock's event stream, as boto3 hands it to the application ----------------------


def _converse(base_url: str, scenario: str, tools: bool) -> list[dict[str, Any]]:
    """The events the demo's boto3 client's ``converse_stream`` hands over, each
    ``{member: fields}``, read to the end of the body."""
    client = _bedrock_client(_aws_session(), base_url)

    def add_scenario(request: Any, **_: Any) -> None:
        request.headers[SCENARIO_HEADER] = scenario

    client.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_scenario)
    _, body = request_for(BEDROCK, DEFAULT_MODELS[BEDROCK], tools=tools)
    try:
        stream = client.converse_stream(modelId=DEFAULT_MODELS[BEDROCK], **body)["stream"]
        with contextlib.closing(stream):
            return list(stream)
    finally:
        client.close()


def _members(events: list[dict[str, Any]], member: str) -> list[dict[str, Any]]:
    return [event[member] for event in events if member in event]


def _converse_text(events: list[dict[str, Any]]) -> str:
    deltas = _members(events, "contentBlockDelta")
    return "".join(delta["delta"].get("text", "") for delta in deltas)


def _converse_arguments(events: list[dict[str, Any]]) -> str:
    deltas = _members(events, "contentBlockDelta")
    return "".join(
        delta["delta"]["toolUse"]["input"] for delta in deltas if "toolUse" in delta["delta"]
    )


@pytest.mark.parametrize("scenario", ["complete", "tool_call"])
def test_botocore_parses_converse_stream_events(provider: FakeProvider, scenario: str) -> None:
    events = _converse(provider.base_url, scenario, tools=scenario == "tool_call")
    assert [*events[0]] == ["messageStart"]
    assert events[0]["messageStart"]["role"] == "assistant"
    _assert_answer(_converse_text(events))
    [stop] = _members(events, "messageStop")
    [metadata] = _members(events, "metadata")
    assert events[-1] == {"metadata": metadata}
    usage = metadata["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    starts = _members(events, "contentBlockStart")
    if scenario == "complete":
        assert (starts, stop["stopReason"]) == ([], "end_turn")
    else:
        [start] = starts
        assert start["start"]["toolUse"]["name"] == "get_weather"
        assert json.loads(_converse_arguments(events)) == TOOL_ARGUMENTS
        assert stop["stopReason"] == "tool_use"


@pytest.mark.parametrize(
    ("scenario", "status", "code"),
    [
        *((scenario, status, kind) for scenario, (status, kind, _) in AWS_FAILURES.items()),
        ("provider_error", 200, "modelStreamErrorException"),  # an exception frame in the stream
    ],
)
def test_botocore_raises_the_aws_error_type(
    provider: FakeProvider, scenario: str, status: int, code: str
) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        _converse(provider.base_url, scenario, tools=False)
    error = raised.value.response
    assert error["Error"]["Code"] == code
    if status != 200:  # an exception frame has no status of its own
        assert error["ResponseMetadata"]["HTTPStatusCode"] == status
    assert isinstance(raised.value, botocore.exceptions.EventStreamError) is (status == 200)


@pytest.mark.parametrize(("scenario", "tools"), CLEAN_ENDINGS)
def test_botocore_reads_a_clean_ending_without_raising(
    provider: FakeProvider, scenario: str, tools: bool
) -> None:
    events = _converse(provider.base_url, scenario, tools)  # to the end of the body: no raise
    assert _members(events, "metadata") == []
    stops = [stop["stopReason"] for stop in _members(events, "messageStop")]
    if scenario == "no_terminal":
        _assert_answer(_converse_text(events))
        assert stops == ["end_turn"]
        return
    assert stops == []
    if tools:
        _assert_answer(_converse_text(events))
        assert _converse_arguments(events) == CUT_ARGUMENTS
        assert [*events[-1]] == ["contentBlockDelta"]
    else:
        _assert_half_answer(_converse_text(events))
        assert _converse_arguments(events) == ""


# -- cohere: Cohere v2 chat, as the SDK's chat_stream hands it to the application ----------------

#: Each ending the cohere SDK reads without raising, and the finish reason it hands over.
COHERE_FINISH = {
    "complete": "COMPLETE",
    "tool_call": "TOOL_CALL",
    "incomplete": "MAX_TOKENS",
    "provider_error": "ERROR",  # a failed generation is an event like any other: no exception
}


def _cohere_events(base_url: str, scenario: str, tools: bool) -> list[Any]:
    """The events the demo's ``chat_stream`` call yields, read to the end (it stops at
    ``[DONE]``)."""
    _, body = request_for(COHERE, DEFAULT_MODELS[COHERE], tools=tools)
    del body["stream"]  # chat_stream asks for the stream itself
    headers = {"additional_headers": {SCENARIO_HEADER: scenario}}
    with httpx.Client(timeout=MAX_WAIT) as http:
        client = cohere.ClientV2(base_url=base_url, api_key="demo", httpx_client=http)
        return list(client.chat_stream(**body, request_options=headers))


def _cohere_text(events: list[Any]) -> str:
    return "".join(e.delta.message.content.text for e in events if e.type == "content-delta")


def _cohere_arguments(events: list[Any]) -> str:
    deltas = [e.delta.message.tool_calls.function for e in events if e.type == "tool-call-delta"]
    return "".join(function.arguments for function in deltas)


@pytest.mark.parametrize("scenario", list(COHERE_FINISH))
def test_cohere_sdk_parses_chat_stream_events(provider: FakeProvider, scenario: str) -> None:
    events = _cohere_events(provider.base_url, scenario, tools=scenario == "tool_call")
    assert events[0].type == "message-start"
    end = events[-1]
    assert end.type == "message-end"
    assert end.delta.finish_reason == COHERE_FINISH[scenario]
    assert (end.delta.error is not None) is (scenario == "provider_error")
    assert end.delta.usage.tokens.input_tokens == 24
    if scenario == "tool_call":
        [start] = [e for e in events if e.type == "tool-call-start"]
        assert start.delta.message.tool_calls.function.name == "get_weather"
        assert json.loads(_cohere_arguments(events)) == TOOL_ARGUMENTS
        assert [e.type for e in events[-2:]] == ["tool-call-end", "message-end"]
    else:
        _assert_answer(_cohere_text(events))
        assert [e.type for e in events[-2:]] == ["content-end", "message-end"]


# -- google-genai: the Interactions API, as interactions.create(stream=True) hands it over -------

#: Each ending google-genai reads without raising, and the interaction's last status.
INTERACTION_STATUS = {
    "complete": "completed",
    "tool_call": "requires_action",  # the application runs the call and sends its result
    "incomplete": "incomplete",
}


def _interaction_events(base_url: str, scenario: str, tools: bool) -> list[Any]:
    """The events the demo's ``interactions.create(..., stream=True)`` call yields, read to
    the end (it stops at ``[DONE]``)."""
    _, body = request_for(INTERACTIONS, DEFAULT_MODELS[INTERACTIONS], tools=tools)
    options = genai_types.HttpOptions(
        base_url=base_url,
        timeout=round(MAX_WAIT * 1000),
        retry_options=genai_types.HttpRetryOptions(attempts=1),
        client_args={"verify": _tls()},
        async_client_args={"verify": _tls(), "ssl": _tls()},
    )
    with (
        genai.Client(api_key="demo", http_options=options) as client,
        client.interactions.create(**body, extra_headers={SCENARIO_HEADER: scenario}) as stream,
    ):
        return list(stream)


def _interaction_deltas(events: list[Any], kind: str) -> list[Any]:
    return [e.delta for e in events if e.event_type == "step.delta" and e.delta.type == kind]


def _interaction_text(events: list[Any]) -> str:
    return "".join(delta.text for delta in _interaction_deltas(events, "text"))


def _interaction_arguments(events: list[Any]) -> str:
    return "".join(delta.arguments for delta in _interaction_deltas(events, "arguments_delta"))


@pytest.mark.parametrize("scenario", [*INTERACTION_STATUS, "provider_error"])
def test_google_genai_parses_interaction_events(provider: FakeProvider, scenario: str) -> None:
    events = _interaction_events(provider.base_url, scenario, tools=scenario == "tool_call")
    created, *_, last = events
    assert created.event_type == "interaction.created"
    assert created.interaction.model == DEFAULT_MODELS[INTERACTIONS]
    if scenario == "provider_error":
        # An error event ends the stream; the SDK yields it and raises nothing.
        assert (last.event_type, last.error.code) == ("error", "unavailable")
        _assert_answer(_interaction_text(events))
        return
    assert last.event_type == "interaction.completed"
    assert last.interaction.status == INTERACTION_STATUS[scenario]
    assert last.interaction.usage.total_input_tokens == 24
    if scenario == "tool_call":
        [start] = [e for e in events if e.event_type == "step.start"]
        assert (start.step.type, start.step.name) == ("function_call", "get_weather")
        assert json.loads(_interaction_arguments(events)) == TOOL_ARGUMENTS
    else:
        _assert_answer(_interaction_text(events))


# -- AG-UI: the protocol's own package validates every event -------------------------------------


@pytest.mark.parametrize(
    "scenario", ["complete", "tool_call", "tool_call_invalid", "incomplete", "provider_error"]
)
def test_agui_events_and_request_validate_against_the_protocols_schema(scenario: str) -> None:
    """``ag-ui-protocol``'s models (generated from the AG-UI 1.0 schema) read each event of a
    run and the demo's request, every field a known one (they keep unknown fields aside)."""
    events = script_events(AGUI, Turn("gpt-x", scenario, 9, "req_demo_5", tools=True))
    read = [AGUI_EVENT.validate_json(event.decode().removeprefix("data: ")) for event in events]
    assert [event.model_extra for event in read] == [{}] * len(read)
    first, *_, last = read
    assert first.type == "RUN_STARTED"
    assert last.type == ("RUN_ERROR" if scenario == "provider_error" else "RUN_FINISHED")
    assert [(entry.model, entry.input_tokens) for entry in last.usage] == [("gpt-x", 24)]
    outcome = getattr(last, "outcome", None)
    assert (outcome and outcome.type) == ("cancelled" if scenario == "incomplete" else None)
    for tools in (False, True):
        _, body = request_for(AGUI, DEFAULT_MODELS[AGUI], tools=tools)
        request = RunAgentInput.model_validate(body)
        assert request.model_extra == {}
        assert [tool.name for tool in request.tools or ()] == ["get_weather"] * tools


# -- the clean cuts, as the cohere and google-genai SDKs report them -----------------------------
# (neither route has a no_terminal: their stop comes in the terminal event itself)

CLEAN_CUTS = CLEAN_ENDINGS[:2]


@pytest.mark.parametrize(("scenario", "tools"), CLEAN_CUTS)
def test_cohere_sdk_reads_a_clean_cut_without_raising(
    provider: FakeProvider, scenario: str, tools: bool
) -> None:
    events = _cohere_events(provider.base_url, scenario, tools)  # to the end: nothing raised
    assert "message-end" not in {e.type for e in events}
    if tools:
        assert _cohere_arguments(events) == CUT_ARGUMENTS
        assert events[-1].type == "tool-call-delta"
    else:
        _assert_half_answer(_cohere_text(events))
        assert events[-1].type == "content-delta"


@pytest.mark.parametrize(("scenario", "tools"), CLEAN_CUTS)
def test_google_genai_reads_a_clean_cut_without_raising(
    provider: FakeProvider, scenario: str, tools: bool
) -> None:
    events = _interaction_events(provider.base_url, scenario, tools)  # to the end: no raise
    kinds = {e.event_type for e in events}
    assert not kinds & {"step.stop", "interaction.completed", "error"}
    if tools:
        assert _interaction_arguments(events) == CUT_ARGUMENTS
    else:
        _assert_half_answer(_interaction_text(events))
    assert events[-1].event_type == "step.delta"
