"""botocore (boto3's engine) streaming from Amazon Bedrock, observed and read, over real HTTP.

Every test starts ``SSEServer`` (tests/_server.py, raw sockets on 127.0.0.1) answering Bedrock's
two streaming operations with an AWS event stream: the recorded bodies in
``tests/fixtures/real/bedrock-*.eventstream`` (sources in ``real/SOURCES.md``) and frames built
by the format's definition (``tests/_eventstream.py``). The application is the real botocore
client (``create_client("bedrock-runtime", endpoint_url=...)``, one attempt per call) calling
``converse_stream`` and ``invoke_model_with_response_stream`` and iterating
``response["stream"]``/``response["body"]`` the way boto3 code does, instrumented by the
``otel`` fixture against a real OpenTelemetry SDK.

What it proves, for a whole body, one frame per write, a byte per write, a cut at every frame
boundary and inside every frame, a corrupt CRC, exception and error frames, an error status at
the headers, a stalled body, and no answer or no connection at all:

- Transparency: the application gets the same events and the same exception (its type and
  message) as in a reference run with otelsse really uninstrumented, against the same server.
- One ``otelsse.stream`` span per attempt, ended exactly once with the right outcome, its route,
  ``gen_ai.request.model`` (percent-decoded from the URL), ``gen_ai.provider.name``
  ``aws.bedrock``, and no content: neither what the application sent nor what it received.
- Lifecycle: a stream ends at EOF, at a cut or a timeout (botocore passes urllib3's error on),
  at ``stream.close()``, and when the application drops it: botocore's ``EventStream`` and its
  event generator hold each other, so only the garbage collector frees a stream left
  unfinished, after an exception frame too (botocore raises there with the body still open).
- The enforcing reader reads ``response["stream"]`` (and another operation's
  ``StreamingBody``); strict mode raises in the application's own ``for event in
  response["stream"]`` loop as a ``StreamFault`` that is also urllib3's ``ProtocolError``, the
  error botocore's iteration raises for a body cut mid-way.
- What botocore's and urllib3's exceptions say of how a stream ended (units).
"""

from __future__ import annotations

import contextlib
import gc
import json
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.config
import botocore.endpoint
import botocore.eventstream
import botocore.exceptions
import botocore.session
import pytest
import urllib3
from opentelemetry.sdk.trace import ReadableSpan

import otelsse
from otelsse import semconv
from otelsse._clients import client_of, get_client
from otelsse._reader import StreamFault
from otelsse.gate import GateResult, SQLiteLedger, ToolCallState, ToolGate
from tests import _eventstream as es
from tests._clients import READ_TIMEOUT, STALL_TIMEOUT, uninstrumented
from tests._fixtures import read_fixture
from tests._helpers import WELL_BEFORE
from tests._otel import Telemetry, attribute_values
from tests._server import MAX_WAIT, Reply, SSEServer
from tests.instrumentation.test_lifecycle import (
    ended_once,
    opened,
    sdk_trace_warnings,
    spans_ended,
)

EVENT_STREAM = "application/vnd.amazon.eventstream"
CONVERSE = "bedrock.converse_stream"
INVOKE = "bedrock.invoke_model_with_response_stream"
#: A model id as Bedrock names it: botocore sends its ``:`` percent-encoded in the path.
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
CONVERSE_PATH = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
INVOKE_PATH = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"
#: Planted in what the application sends and in the synthetic bodies: never on a span.
CANARY = f"CANARY-{uuid.uuid4()}"
MESSAGES = [{"role": "user", "content": [{"text": f"{CANARY} what is the weather?"}]}]
INVOKE_BODY = json.dumps(
    {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": f"{CANARY} what is the weather?"}],
    }
).encode()

TEXT = read_fixture("real/bedrock-converse-stream-text.eventstream")
TEXT_ENDS = es.frame_ends(TEXT)
#: Recorded bodies of either operation, and what each must classify as (by each route's rules).
RECORDED = {
    "converse-stream-text": (CONVERSE, "complete", "end_turn"),
    "converse-stream-tool-use": (CONVERSE, "complete", "tool_use"),
    "converse-stream-reasoning": (CONVERSE, "complete", "end_turn"),
    "converse-stream-reasoning-redacted": (CONVERSE, "complete", "end_turn"),
    "converse-stream-guardrail-intervened": (CONVERSE, "incomplete", "guardrail_intervened"),
    "invoke-stream-claude-text-and-tool-use": (INVOKE, "complete", "tool_use"),
    "invoke-stream-nova-max-tokens": (INVOKE, "incomplete", "max_tokens"),
    "invoke-stream-llama-length": (INVOKE, "incomplete", "length"),
    "invoke-stream-titan-length": (INVOKE, "incomplete", "LENGTH"),
}

#: One botocore session for the module: each client made from it shares its service models
#: (a fresh session loads them again, ~0.1 s a client). Loaded here, before the heap is frozen
#: for the module's tests (tests/_tiers.py), so that no collection walks them again.
SESSION = botocore.session.get_session()
SESSION.create_client(
    "bedrock-runtime",
    region_name="us-east-1",
    endpoint_url="http://127.0.0.1",
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
).close()


# --------------------------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------------------------


def padded(frames: list[tuple[str, dict[str, Any]]]) -> bytes:
    """Event frames all of one length, each payload padded with Bedrock's own ``p`` field (every
    recorded body has one), so that a write of that length is exactly one frame."""
    bare = [es.event(name, {**payload, "p": ""}) for name, payload in frames]
    length = max(len(frame) for frame in bare)
    return b"".join(
        es.event(name, {**payload, "p": "x" * (length - len(frame))})
        for (name, payload), frame in zip(frames, bare, strict=True)
    )


def converse_frames(stop: str = "end_turn") -> list[tuple[str, dict[str, Any]]]:
    """A ConverseStream answer of three text deltas, the canary in each."""
    deltas = [f"{CANARY} part {n}" for n in range(3)]
    return [
        ("messageStart", {"role": "assistant"}),
        *(("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": d}}) for d in deltas),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": stop}),
        ("metadata", {"usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}}),
    ]


#: The synthetic ConverseStream answer, one frame per ``FRAME`` bytes.
FRAMED = padded(converse_frames())
FRAME = es.frame_ends(FRAMED)[0]


def corrupted(body: bytes, at: int) -> bytes:
    """``body`` with one bit flipped at ``at``."""
    return body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :]


# --------------------------------------------------------------------------------------------
# The application
# --------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the application saw: every event botocore parsed, and the exception it caught (its
    type and message; not the exception itself, whose traceback would keep the stream alive)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    caught: tuple[type[BaseException], str] | None = None
    #: otelsse's spans ended when the application was done, before any collection.
    ended_uncollected: int = field(default=0, compare=False)


def bedrock(endpoint: str, *, read_timeout: float = READ_TIMEOUT, attempts: int = 1) -> Any:
    """A bedrock-runtime client of ``endpoint``, making ``attempts`` attempts per call."""
    config = botocore.config.Config(
        retries={"total_max_attempts": attempts},
        read_timeout=read_timeout,
        connect_timeout=READ_TIMEOUT,
    )
    return SESSION.create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


def _iterated(endpoint: str, events: Callable[[Any], Any], **client: Any) -> Seen:
    """What a ``for`` loop over ``events(client)`` saw, as boto3 code does it."""
    seen = Seen()
    bedrock_client = bedrock(endpoint, **client)
    try:
        for event in events(bedrock_client):
            seen.events.append(event)
    except Exception as exc:
        seen.caught = (type(exc), str(exc))
    finally:
        bedrock_client.close()
    return seen


def converse(endpoint: str, **client: Any) -> Seen:
    """``converse_stream`` and a ``for`` loop over ``response["stream"]``."""
    return _iterated(
        endpoint,
        lambda bedrock_client: bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)[
            "stream"
        ],
        **client,
    )


def invoke(endpoint: str, **client: Any) -> Seen:
    """``invoke_model_with_response_stream`` and a ``for`` loop over ``response["body"]``."""
    return _iterated(
        endpoint,
        lambda bedrock_client: bedrock_client.invoke_model_with_response_stream(
            modelId=MODEL, body=INVOKE_BODY
        )["body"],
        **client,
    )


OPERATIONS: dict[str, tuple[str, Callable[..., Seen]]] = {
    CONVERSE: (CONVERSE_PATH, converse),
    INVOKE: (INVOKE_PATH, invoke),
}


def wrappers() -> int:
    """How many wrappers sit on ``Endpoint._send``."""
    depth, attribute = 0, vars(botocore.endpoint.Endpoint)["_send"]
    while hasattr(attribute, "__wrapped__"):
        depth, attribute = depth + 1, attribute.__wrapped__
    return depth


@pytest.fixture(autouse=True)
def instrumented_once(otel: Telemetry) -> Iterator[None]:
    """Each test starts with ``Endpoint._send`` wrapped exactly once, and ends every stream it
    left to the collector while its telemetry is still on."""
    assert wrappers() == 1, "uninstrument() left a wrapper behind"
    yield
    collect()


@contextlib.contextmanager
def reference(otel: Telemetry) -> Iterator[None]:
    """The harness's reference run (otelsse really uninstrumented), botocore unwrapped too."""
    with uninstrumented(otel):
        assert wrappers() == 0
        yield


def compared(
    otel: Telemetry, server: SSEServer, reply: Reply, operation: str = CONVERSE, **client: Any
) -> Seen:
    """What the application saw of ``reply``, the same with otelsse as in the reference run."""
    path, call = OPERATIONS[operation]
    server.route(path, reply)
    with reference(otel):
        expected = call(server.url(""), **client)
        collect()
    seen = call(server.url(""), **client)
    seen.ended_uncollected = len(otel.spans())
    collect()
    assert seen == expected
    return seen


def collect() -> None:
    """``gc.collect()``: what ends a stream the application dropped unfinished (botocore's
    ``EventStream`` and its event generator hold each other). Its connection's socket, left
    open by botocore, says so when collected (``ResourceWarning``, with otelsse or without):
    the application's warning, not what these tests look at."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def served(body: bytes, **reply: Any) -> Reply:
    return Reply(body, content_type=EVENT_STREAM, **reply)


# --------------------------------------------------------------------------------------------
# What the span says
# --------------------------------------------------------------------------------------------


#: The fields that carry content in either operation's events (an invoke chunk's own event
#: decoded): text, reasoning, tool input, Titan's and Llama's output.
_CONTENT_FIELDS = frozenset(
    {"text", "input", "partial_json", "thinking", "outputText", "generation"}
)


def contents(seen: Seen) -> list[str]:
    """The content the application received: every content field of every event it got, and the
    message of the exception it caught."""
    found = [] if seen.caught is None else [seen.caught[1]]

    def walk(value: Any, name: str | None = None) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, key)
        elif isinstance(value, list):
            for item in value:
                walk(item, name)
        elif isinstance(value, bytes) and name == "bytes":  # an invoke chunk's own event
            walk(json.loads(value))
        elif isinstance(value, str) and name in _CONTENT_FIELDS:
            found.append(value)

    walk(seen.events)
    return [piece for piece in found if len(piece.strip()) >= 8]  # shorter ones say nothing


def observed(
    otel: Telemetry,
    outcome: str,
    seen: Seen | None = None,
    *,
    route: str = CONVERSE,
    attempts: int = 1,
    collected: bool | None = False,
) -> ReadableSpan:
    """One span per attempt, each ended with ``outcome`` (when the application was done with
    it, unless only the collector could end it, ``collected``; None: either, where whether the
    client let go of the body before the collector is its own timing), with its route, model,
    provider and server, and none of the content the application sent or got (``seen``). The
    last."""
    if seen is not None and collected is not None:
        assert seen.ended_uncollected == (0 if collected else attempts)
    if attempts == 1:
        ended_once(otel, outcome)
    spans = otel.spans()
    assert len(spans) == attempts
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes[semconv.OUTCOME] == outcome
        assert attributes[semconv.ROUTE] == route
        assert attributes[semconv.GEN_AI_REQUEST_MODEL] == MODEL
        assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "aws.bedrock"
        assert attributes[semconv.SERVER_ADDRESS] == "127.0.0.1"
    recorded = "\n".join(attribute_values(otel.spans(None)))
    recorded += "\n".join(str(point.attributes) for point in otel.points())
    assert CANARY not in recorded
    for piece in [] if seen is None else contents(seen):
        assert piece not in recorded
    return spans[-1]


def expected_text(body: bytes) -> str:
    """The answer's text, read by botocore's own event-stream parser (not otelsse's)."""
    buffer = botocore.eventstream.EventStreamBuffer()
    buffer.add_data(body)
    text = []
    for message in buffer:
        if message.headers[":event-type"] == "contentBlockDelta":
            text.append(json.loads(message.payload)["delta"].get("text", ""))
    return "".join(text)


# --------------------------------------------------------------------------------------------
# What botocore's exceptions say
# --------------------------------------------------------------------------------------------

_READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]
_REFUSED = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
#: Each error -> (is it the read deadline, is it the transport's doing).
_ERRORS: dict[str, tuple[BaseException, bool, bool]] = {
    "urllib3-read-timeout": (_READ_TIMEOUT, True, True),
    "read-timeout": (
        botocore.exceptions.ReadTimeoutError(endpoint_url="u", error=_READ_TIMEOUT),
        True,
        True,
    ),
    "connect-timeout": (
        botocore.exceptions.ConnectTimeoutError(endpoint_url="u", error="t"),
        True,
        True,
    ),
    "urllib3-refused": (_REFUSED, False, True),
    "refused": (
        botocore.exceptions.EndpointConnectionError(endpoint_url="u", error=_REFUSED),
        False,
        True,
    ),
    "closed": (botocore.exceptions.ConnectionClosedError(endpoint_url="u"), False, True),
    "cut": (urllib3.exceptions.ProtocolError("Response ended prematurely"), False, True),
    "checksum": (botocore.eventstream.ChecksumMismatch(1, 2), False, True),
    # An exception frame: the provider said it, in the stream.
    "exception-frame": (
        botocore.exceptions.EventStreamError({"Error": {"Code": "x"}}, "ConverseStream"),
        False,
        False,
    ),
    "bug": (ValueError("a bug"), False, False),
}


@pytest.mark.parametrize("name", _ERRORS)
def test_botocores_exceptions_say_how_a_stream_ended(name: str) -> None:
    error, timeout, transport = _ERRORS[name]
    client = get_client("botocore")
    assert client.is_timeout(error) is timeout
    assert client.is_transport(error) is transport


def test_botocore_hands_out_streams_its_client_reads() -> None:
    assert client_of(botocore.eventstream.EventStream(None, None, None, "op")) is get_client(
        "botocore"
    )
    assert get_client("botocore").body_cut_error() is urllib3.exceptions.ProtocolError


# --------------------------------------------------------------------------------------------
# Whole bodies: every recording, one frame per write, a byte per write
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=() if name == "converse-stream-text" else pytest.mark.matrix)
        for name in RECORDED
    ],
)
def test_a_recorded_stream_is_unchanged_and_observed_once(
    otel: Telemetry, server: SSEServer, name: str
) -> None:
    route, outcome, stop = RECORDED[name]
    body = read_fixture(f"real/bedrock-{name}.eventstream")
    seen = compared(otel, server, served(body, piece=len(body)), route)
    assert len(seen.events) == len(es.frame_ends(body))
    assert seen.caught is None
    span = observed(otel, outcome, seen, route=route)
    attributes = span.attributes or {}
    assert attributes.get(semconv.STOP_REASON) == stop
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == 200
    assert attributes[semconv.BYTES_RECEIVED] == len(body)
    assert attributes[semconv.EVENT_COUNT] == len(seen.events)


@pytest.mark.matrix
@pytest.mark.parametrize(
    ("body", "piece"),
    [(FRAMED, FRAME), (FRAMED, 1), (TEXT, 1)],
    ids=["frame-per-write", "byte-per-write", "recorded-byte-per-write"],
)
def test_any_write_size_is_unchanged_and_complete(
    otel: Telemetry, server: SSEServer, body: bytes, piece: int
) -> None:
    seen = compared(otel, server, served(body, piece=piece))
    assert seen.caught is None
    span = observed(otel, "complete", seen)
    # Each write reached botocore as one read: the tee handed on botocore's own reads.
    assert (span.attributes or {})[semconv.CHUNK_COUNT] == -(-len(body) // piece)


def test_an_invoke_stream_of_claude_events_is_complete(otel: Telemetry, server: SSEServer) -> None:
    body = read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream")
    seen = compared(otel, server, served(body), INVOKE)
    span = observed(otel, "complete", seen, route=INVOKE)
    attributes = span.attributes or {}
    assert attributes[semconv.TOOL_CALL_COUNT] == 2
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 392


# --------------------------------------------------------------------------------------------
# A body cut short
# --------------------------------------------------------------------------------------------


def test_a_chunked_body_cut_inside_a_frame_raises_urllib3s_error_and_is_truncated(
    otel: Telemetry, server: SSEServer
) -> None:
    cut = TEXT_ENDS[3] + 10
    seen = compared(otel, server, served(TEXT, cut=cut))
    assert seen.caught == (urllib3.exceptions.ProtocolError, "Response ended prematurely")
    assert len(seen.events) == 4
    span = observed(otel, "truncated", seen)
    assert (span.attributes or {})[semconv.BYTES_RECEIVED] == cut


def _cuts() -> list[Any]:
    """Every frame boundary (the last one is EOF, no cut) and the middle of every frame."""
    starts = [0, *TEXT_ENDS[:-1]]
    boundaries = [pytest.param(at, id=f"boundary-{at}") for at in starts]
    inside = [
        pytest.param((start + end) // 2, id=f"inside-{(start + end) // 2}")
        for start, end in zip(starts, TEXT_ENDS, strict=True)
    ]
    return boundaries + inside


@pytest.mark.matrix
@pytest.mark.parametrize("cut", _cuts())
@pytest.mark.parametrize("framing", ["close", "chunked"])
def test_a_cut_anywhere_is_unchanged_and_truncated(
    otel: Telemetry, server: SSEServer, cut: int, framing: str
) -> None:
    """A connection-delimited body that stops is a clean EOF to urllib3: botocore ends its loop
    silently, dropping a frame cut short. One stopped after ``messageStop``, before
    ``metadata``, has the whole answer without the route's terminal: ``terminal_missing``. A
    chunked body that stops is a ``ProtocolError`` (a transport error): ``truncated``."""
    seen = compared(otel, server, served(TEXT, framing=framing, cut=cut))
    whole = [end for end in TEXT_ENDS if end <= cut]
    assert len(seen.events) == len(whole)
    if framing == "chunked":
        assert seen.caught is not None
        assert seen.caught[0] is urllib3.exceptions.ProtocolError
    else:
        assert seen.caught is None
    after_stop = cut == TEXT_ENDS[-2]
    observed(otel, "terminal_missing" if after_stop and framing == "close" else "truncated", seen)


# --------------------------------------------------------------------------------------------
# Bytes that are not a frame; errors the provider sends
# --------------------------------------------------------------------------------------------


@pytest.mark.matrix
@pytest.mark.parametrize(
    "at",
    [TEXT_ENDS[2] + 5, TEXT_ENDS[2] + 40, TEXT_ENDS[3] - 2],
    ids=["prelude", "payload", "message-crc"],
)
def test_a_corrupt_frame_raises_botocores_checksum_error_and_is_a_decode_error(
    otel: Telemetry, server: SSEServer, at: int
) -> None:
    seen = compared(otel, server, served(corrupted(TEXT, at)))
    assert seen.caught is not None
    assert seen.caught[0] is botocore.eventstream.ChecksumMismatch
    assert len(seen.events) == 3
    # The exception left botocore's event generator, which let go of the body's reads.
    observed(otel, "decode_error", seen)


def _frames(exception: bytes) -> bytes:
    """The recorded answer cut after its fourth frame by ``exception``."""
    return TEXT[: TEXT_ENDS[3]] + exception


@pytest.mark.parametrize(
    ("frame", "outcome", "code"),
    [
        pytest.param(
            es.exception("throttlingException", f"{CANARY} slow down"),
            "rate_limited",
            "throttlingException",
            id="throttling",
        ),
        pytest.param(
            es.exception("internalServerException", f"{CANARY} internal"),
            "provider_error",
            "internalServerException",
            id="internal-server",
            marks=pytest.mark.matrix,
        ),
        pytest.param(
            es.exception("modelStreamErrorException", f"{CANARY} model"),
            "provider_error",
            "modelStreamErrorException",
            id="model-stream-error",
            marks=pytest.mark.matrix,
        ),
        pytest.param(
            es.error_frame("InternalFailure", f"{CANARY} unmodelled"),
            "provider_error",
            "InternalFailure",
            id="error-frame",
            marks=pytest.mark.matrix,
        ),
    ],
)
def test_an_exception_frame_raises_botocores_error_and_is_judged_by_its_name(
    otel: Telemetry, server: SSEServer, frame: bytes, outcome: str, code: str
) -> None:
    """botocore raises ``EventStreamError`` for the frame with the body still open; the
    application drops the stream, and the collector frees it (see the module docstring)."""
    seen = compared(otel, server, served(_frames(frame)))
    assert seen.caught is not None
    assert seen.caught[0] is botocore.exceptions.EventStreamError
    assert f"({code})" in seen.caught[1]
    assert len(seen.events) == 4
    spans_ended(otel, 1)
    span = observed(otel, outcome, seen, collected=True)
    assert (span.attributes or {})[semconv.PROVIDER_ERROR_CODE] == code


@pytest.mark.parametrize(
    ("status", "error", "outcome"),
    [
        pytest.param(429, "ThrottlingException", "rate_limited", id="429"),
        pytest.param(400, "ValidationException", "http_error", id="400", marks=pytest.mark.matrix),
    ],
)
def test_an_error_status_is_judged_at_the_headers_and_botocore_reads_its_body(
    otel: Telemetry, server: SSEServer, status: int, error: str, outcome: str
) -> None:
    """Bedrock answers an error before the stream as JSON, its type in ``x-amzn-ErrorType``:
    botocore reads that body whole and raises the modelled error, message and all."""
    body = json.dumps({"message": f"{CANARY} no"}).encode()
    reply = Reply(
        body,
        status=status,
        reason="Error",
        content_type="application/json",
        framing="length",
        headers=(
            ("x-amzn-ErrorType", f"{error}:http://internal.amazon.com/coral/"),
            ("Retry-After", "7"),
        ),
    )
    seen = compared(otel, server, reply)
    assert seen.caught is not None
    assert seen.caught[0].__name__ == error
    assert f"{CANARY} no" in seen.caught[1]
    span = observed(otel, outcome, seen)
    attributes = span.attributes or {}
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == status
    assert attributes[semconv.RETRY_AFTER] == 7.0


@pytest.mark.matrix
def test_each_attempt_botocore_retries_is_a_stream_of_its_own(
    otel: Telemetry, server: SSEServer
) -> None:
    reply = Reply(
        b'{"message": "slow down"}',
        status=429,
        content_type="application/json",
        framing="length",
        headers=(("x-amzn-ErrorType", "ThrottlingException:http://internal.amazon.com/coral/"),),
    )
    seen = compared(otel, server, reply, attempts=2)
    assert seen.caught is not None
    assert "reached max retries: 1" in seen.caught[1]
    observed(otel, "rate_limited", seen, attempts=2)


@pytest.mark.e2e  # waits out a read timeout, twice
def test_a_stalled_body_raises_urllib3s_read_timeout_and_is_a_timeout(
    otel: Telemetry, server: SSEServer
) -> None:
    """The stall lasts until the server stops (``MAX_WAIT``): the client's read timeout, not
    the stall's end, must be what ended each run."""
    began = time.monotonic()
    seen = compared(
        otel, server, served(TEXT, cut=TEXT_ENDS[3], after_cut="stall"), read_timeout=STALL_TIMEOUT
    )
    assert time.monotonic() - began < MAX_WAIT * WELL_BEFORE
    assert seen.caught is not None
    assert seen.caught[0] is urllib3.exceptions.ReadTimeoutError
    assert len(seen.events) == 4
    observed(otel, "timeout", seen)


@pytest.mark.matrix
def test_no_answer_within_the_read_timeout_ends_the_span_as_a_timeout(otel: Telemetry) -> None:
    """botocore's own ReadTimeoutError, raised from ``_send``, before any response."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # it listens, and never answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with reference(otel):
            expected = converse(endpoint, read_timeout=0.2)
        seen = converse(endpoint, read_timeout=0.2)
    seen.ended_uncollected = len(otel.spans())
    assert seen == expected
    assert seen.caught is not None
    assert seen.caught[0] is botocore.exceptions.ReadTimeoutError
    observed(otel, "timeout", seen)


@pytest.mark.matrix
def test_a_refused_connection_ends_the_span_it_started(otel: Telemetry) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with reference(otel):
        expected = converse(endpoint)
    seen = converse(endpoint)
    seen.ended_uncollected = len(otel.spans())
    assert seen == expected
    assert seen.caught is not None
    assert seen.caught[0] is botocore.exceptions.EndpointConnectionError
    observed(otel, "truncated", seen)


# --------------------------------------------------------------------------------------------
# Lifecycle: how the application lets go of a stream
# --------------------------------------------------------------------------------------------


def _opened_stream(server: SSEServer, body: bytes, **reply: Any) -> tuple[Any, Any, list[Any]]:
    """A client, its ``response["stream"]`` and the first two events read of ``body``."""
    server.route(CONVERSE_PATH, served(body, **reply))
    bedrock_client = bedrock(server.url(""))
    stream = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    iterator = iter(stream)
    return bedrock_client, stream, [next(iterator), next(iterator)]


def test_close_mid_stream_ends_it_at_once_as_cancelled(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    bedrock_client, stream, _ = _opened_stream(server, TEXT, hold_at=TEXT_ENDS[3])
    opened(otel)
    stream.close()
    observed(otel, "cancelled")
    stream.close()
    del stream
    collect()
    bedrock_client.close()
    observed(otel, "cancelled")
    assert sdk_trace_warnings(caplog) == []


@pytest.mark.matrix
def test_a_stream_dropped_mid_way_ends_when_collected_as_cancelled(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    bedrock_client, stream, _ = _opened_stream(server, TEXT, hold_at=TEXT_ENDS[3])
    opened(otel)
    del stream
    collect()
    spans_ended(otel, 1)
    observed(otel, "cancelled")
    bedrock_client.close()
    assert sdk_trace_warnings(caplog) == []


@pytest.mark.matrix
def test_after_an_exception_frame_the_stream_is_open_until_closed(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    """botocore raises at the frame it parsed; the rest of the body (its end) is unread, and
    the stream is the application's to close."""
    body = _frames(es.exception("throttlingException"))
    server.route(CONVERSE_PATH, served(body))
    bedrock_client = bedrock(server.url(""))
    stream = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    with pytest.raises(botocore.exceptions.EventStreamError):
        for _ in stream:
            pass
    opened(otel)
    stream.close()
    observed(otel, "rate_limited")
    bedrock_client.close()
    assert sdk_trace_warnings(caplog) == []


@pytest.mark.matrix
def test_a_stream_read_to_its_end_and_closed_ends_once_complete(
    otel: Telemetry, server: SSEServer, caplog: pytest.LogCaptureFixture
) -> None:
    bedrock_client, stream, events = _opened_stream(server, TEXT)
    events += list(stream)
    assert len(events) == len(TEXT_ENDS)
    observed(otel, "complete")
    stream.close()
    del stream
    collect()
    bedrock_client.close()
    observed(otel, "complete")
    assert sdk_trace_warnings(caplog) == []


# --------------------------------------------------------------------------------------------
# The enforcing reader
# --------------------------------------------------------------------------------------------


def test_the_enforcing_reader_reads_response_stream(otel: Telemetry, server: SSEServer) -> None:
    """What boto3 hands the application, read through the enforcing reader; observed too."""
    server.route(CONVERSE_PATH, served(TEXT))
    bedrock_client = bedrock(server.url(""))
    try:
        response = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)
        result = otelsse.read_stream(response["stream"], idle_timeout=READ_TIMEOUT)
    finally:
        bedrock_client.close()
    assert result.text == expected_text(TEXT)
    assert result.stop_reason == "end_turn"
    assert result.report.route == CONVERSE
    assert (result.input_tokens, result.output_tokens) == (13, 35)
    # The reader stopped at the route's terminal and closed the stream: its verdict stands.
    observed(otel, "complete")


@pytest.mark.matrix
def test_the_enforcing_reader_reads_an_invoke_body_with_tool_calls(
    otel: Telemetry, server: SSEServer
) -> None:
    body = read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream")
    server.route(INVOKE_PATH, served(body))
    bedrock_client = bedrock(server.url(""))
    try:
        response = bedrock_client.invoke_model_with_response_stream(modelId=MODEL, body=INVOKE_BODY)
        result = otelsse.read_stream(response["body"], idle_timeout=READ_TIMEOUT)
    finally:
        bedrock_client.close()
    assert result.report.route == INVOKE
    assert [(call.name, call.arguments) for call in result.tool_calls] == [
        ("get_current_weather", {"location": "Seattle"}),
        ("get_current_weather", {"location": "San Francisco"}),
    ]
    observed(otel, "complete", route=INVOKE)


@pytest.mark.matrix
def test_the_enforcing_reader_refuses_a_cut_stream_chained_to_urllib3s_error(
    otel: Telemetry, server: SSEServer
) -> None:
    server.route(CONVERSE_PATH, served(TEXT, cut=TEXT_ENDS[3] + 10))
    bedrock_client = bedrock(server.url(""))
    try:
        response = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)
        with pytest.raises(StreamFault) as refused:
            otelsse.read_stream(response["stream"], idle_timeout=READ_TIMEOUT)
    finally:
        bedrock_client.close()
    assert refused.value.code == "truncated"
    assert isinstance(refused.value.__cause__, urllib3.exceptions.ProtocolError)
    observed(otel, "truncated")


#: The recorded ConverseStream answer with a text block, then one ``get_weather`` call.
TOOL_USE = read_fixture("real/bedrock-converse-stream-tool-use.eventstream")
WEATHER_TOOL: dict[str, dict[str, Any] | None] = {
    "get_weather": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    }
}


def _gated(gate: ToolGate, endpoint: str, ran: list[Any]) -> GateResult:
    """One attempt of run ``run-1``: ``converse_stream``, then the gate reads what boto3 hands
    the application, ``response["stream"]``."""
    bedrock_client = bedrock(endpoint)
    try:
        response = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)
        return gate.run(response["stream"], execute={"get_weather": ran.append}, run_id="run-1")
    finally:
        bedrock_client.close()


@pytest.mark.parametrize("run_at", ["response", "item"])
def test_the_tool_gate_runs_a_bedrock_call_once_across_attempts(
    otel: Telemetry, server: SSEServer, tmp_path: Any, run_at: str
) -> None:
    """The recorded call runs once, with its arguments; the retry of the same run, on the same
    SQLite ledger, replays it. ConverseStream names no response (its events carry no id): a call
    is keyed by its ``toolUseId`` alone."""
    server.route(CONVERSE_PATH, served(TOOL_USE))
    gate = ToolGate(WEATHER_TOOL, None, SQLiteLedger(tmp_path / "ledger.db"), run_at=run_at)
    ran: list[Any] = []
    states = []
    for _ in range(2):
        result = _gated(gate, server.url(""), ran)
        assert result.fault is None
        assert [(call.tool_name, call.call_id[:8], call.response_id) for call in result.calls] == [
            ("get_weather", "tooluse_", None)
        ]
        states.append(result.calls[0].state)
    assert ran == [{"location": "Barcelona"}]
    assert states == [ToolCallState.EXECUTED, ToolCallState.REPLAYED]
    observed(otel, "complete", attempts=2)


@pytest.mark.parametrize("run_at", ["response", "item"])
def test_the_tool_gate_runs_nothing_of_a_bedrock_stream_ended_inside_a_call(
    otel: Telemetry, server: SSEServer, tmp_path: Any, run_at: str
) -> None:
    """The body ends cleanly (its last chunk sent) after half the call's input: boto3 raises
    nothing, and the gate quarantines the call as the stream's truncation."""
    inside = es.frame_ends(TOOL_USE)[19]  # after '{"locati', 'on": "Bar'
    server.route(CONVERSE_PATH, served(TOOL_USE[:inside]))
    gate = ToolGate(WEATHER_TOOL, None, SQLiteLedger(tmp_path / "ledger.db"), run_at=run_at)
    ran: list[Any] = []
    result = _gated(gate, server.url(""), ran)
    assert result.fault == "truncated"
    assert [(call.state, call.error_class) for call in result.calls] == [
        (ToolCallState.QUARANTINED, "truncated")
    ]
    assert ran == []
    observed(otel, "truncated")


@pytest.mark.e2e  # waits out a read timeout
def test_the_enforcing_reader_bounds_each_read_by_its_idle_timeout(
    otel: Telemetry, server: SSEServer
) -> None:
    """The reader lowers the socket's timeout (the client's is ``READ_TIMEOUT``): its fault is
    chained to urllib3's own timeout."""
    server.route(CONVERSE_PATH, served(TEXT, cut=TEXT_ENDS[3], after_cut="stall"))
    bedrock_client = bedrock(server.url(""))
    began = time.monotonic()
    try:
        response = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)
        with pytest.raises(StreamFault) as refused:
            otelsse.read_stream(response["stream"], idle_timeout=STALL_TIMEOUT)
    finally:
        bedrock_client.close()
    assert time.monotonic() - began < READ_TIMEOUT * WELL_BEFORE
    assert refused.value.code == "timeout"
    assert isinstance(refused.value.__cause__, urllib3.exceptions.ReadTimeoutError)
    observed(otel, "timeout")


@pytest.mark.matrix
def test_an_sse_streaming_body_is_read_and_observed_by_its_events(
    otel: Telemetry, server: SSEServer
) -> None:
    """Another streaming operation's ``StreamingBody`` (InvokeModel's ``body``) answered with
    SSE: no route claims the request, so both the reader and the span sniff the route."""
    body = read_fixture("real/openai-chat-text.sse")
    server.route("/model/m/invoke", Reply(body))
    bedrock_client = bedrock(server.url(""))
    try:
        response = bedrock_client.invoke_model(modelId="m", body=b"{}")
        result = otelsse.read_stream(response["body"], idle_timeout=READ_TIMEOUT)
    finally:
        bedrock_client.close()
    assert (result.report.route, result.stop_reason) == ("openai.chat_completions", "stop")
    span = ended_once(otel, "complete")
    assert (span.attributes or {})[semconv.ROUTE] == "openai.chat_completions"


@pytest.mark.e2e  # a subprocess
def test_reading_response_stream_loads_no_wrapt_or_opentelemetry(server: SSEServer) -> None:
    """The reader reads a botocore stream with the standard library and botocore alone."""
    server.route(CONVERSE_PATH, served(TEXT))
    program = (
        "import json, sys, botocore.session, otelsse\n"
        "client = botocore.session.get_session().create_client('bedrock-runtime', "
        f"region_name='us-east-1', endpoint_url={server.url('')!r}, "
        "aws_access_key_id='t', aws_secret_access_key='t')\n"
        f"response = client.converse_stream(modelId={MODEL!r}, messages={MESSAGES!r})\n"
        "result = otelsse.read_stream(response['stream'])\n"
        "assert result.stop_reason == 'end_turn', result\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    output = subprocess.check_output([sys.executable, "-c", program], text=True)
    loaded = set(json.loads(output.splitlines()[-1]))
    assert "botocore" in loaded
    assert loaded.isdisjoint({"wrapt", "opentelemetry"}), loaded & {"wrapt", "opentelemetry"}


# --------------------------------------------------------------------------------------------
# Strict mode
# --------------------------------------------------------------------------------------------


def _strict_loop(server: SSEServer) -> tuple[list[Any], BaseException]:
    """The application's own loop over ``response["stream"]``, in a strict block; what it read
    before the exception, and the exception."""
    bedrock_client = bedrock(server.url(""))
    events: list[Any] = []
    try:
        with otelsse.strict():
            response = bedrock_client.converse_stream(modelId=MODEL, messages=MESSAGES)
        for event in response["stream"]:
            events.append(event)
    except Exception as exc:
        return events, exc
    finally:
        bedrock_client.close()
    raise AssertionError("the loop ended without an exception")


@pytest.mark.parametrize("framing", ["close", pytest.param("length", marks=pytest.mark.matrix)])
def test_strict_mode_raises_in_the_applications_loop_for_a_silently_cut_body(
    otel: Telemetry, server: SSEServer, framing: str
) -> None:
    """botocore ends its loop silently at an EOF inside a frame (Content-Length is not
    enforced); strict mode raises there, as urllib3's error for a cut body."""
    cut = TEXT_ENDS[3] + 10
    seen = compared(otel, server, served(TEXT, framing=framing, cut=cut))
    assert seen.caught is None
    otel.exporter.clear()
    events, raised = _strict_loop(server)
    assert events == seen.events
    assert isinstance(raised, StreamFault)
    assert isinstance(raised, urllib3.exceptions.ProtocolError)
    assert raised.code == "truncated"
    assert CANARY not in str(raised)
    span = observed(otel, "truncated")
    assert (span.attributes or {})[semconv.STRICT_RAISED] is True


@pytest.mark.matrix
def test_strict_mode_leaves_urllib3s_own_error_for_a_chunked_cut(
    otel: Telemetry, server: SSEServer
) -> None:
    server.route(CONVERSE_PATH, served(TEXT, cut=TEXT_ENDS[3] + 10))
    events, raised = _strict_loop(server)
    assert len(events) == 4
    assert type(raised) is urllib3.exceptions.ProtocolError
    span = observed(otel, "truncated")
    assert semconv.STRICT_RAISED not in (span.attributes or {})


@pytest.mark.matrix
def test_strict_mode_refuses_a_corrupt_frame_before_botocore_parses_it(
    otel: Telemetry, server: SSEServer
) -> None:
    server.route(CONVERSE_PATH, served(corrupted(TEXT, TEXT_ENDS[2] + 40), piece=len(TEXT)))
    events, raised = _strict_loop(server)
    assert events == []  # the read that brought the corrupt frame raised
    assert isinstance(raised, StreamFault)
    assert isinstance(raised, urllib3.exceptions.ProtocolError)
    assert raised.code == "decode_error"
    observed(otel, "decode_error")


@pytest.mark.matrix
def test_strict_mode_from_instrument_raises_too(otel: Telemetry, server: SSEServer) -> None:
    server.route(CONVERSE_PATH, served(TEXT, framing="close", cut=TEXT_ENDS[5] + 3))
    otelsse.uninstrument()
    otel.install(strict=True)  # the fixture's teardown uninstruments it
    seen = converse(server.url(""))
    seen.ended_uncollected = len(otel.spans())
    assert seen.caught is not None
    assert issubclass(seen.caught[0], StreamFault)
    assert issubclass(seen.caught[0], urllib3.exceptions.ProtocolError)
    assert len(seen.events) == 6
    observed(otel, "truncated", seen)
