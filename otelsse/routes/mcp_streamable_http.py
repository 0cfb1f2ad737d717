"""MCP streamable HTTP: the SSE answers of a Model Context Protocol server, at any path.

Sources: the transport's specification, modelcontextprotocol/modelcontextprotocol
``docs/specification/{2025-03-26,2025-06-18,2025-11-25}/basic/transports.mdx`` and
``docs/specification/2026-07-28/basic/transports/streamable-http.mdx``
(https://modelcontextprotocol.io/specification/2025-11-25/basic/transports); the official Python
SDK, PyPI ``mcp`` 2.x: its client ``mcp/client/streamable_http.py`` (``_handle_sse_event``,
``_handle_sse_response``) and its servers ``mcp/server/streamable_http.py`` and
``mcp/server/_streamable_http_modern.py``; the OpenTelemetry MCP conventions,
open-telemetry/semantic-conventions ``docs/gen-ai/mcp.md``.

Recognition. The endpoint's path is the server's choice, so a request is told by what it names
(``Request.rpc_method``, ``Request.header``), and only when no route claims its URL and its
``Accept`` lists ``text/event-stream`` (an MCP client's is ``application/json,
text/event-stream``):

- a ``POST`` whose JSON-RPC method (the body's ``method``, or the ``Mcp-Method`` header of
  2026-07-28) is an MCP client request: ``initialize``, ``ping``, ``tools/*``, ``resources/*``,
  ``prompts/*``, ``completion/complete``, ``logging/setLevel``, ``server/discover``,
  ``subscriptions/listen`` (``mcp_types.methods.CLIENT_REQUESTS``). ``tasks/*`` (2025-11-25) is
  claimed only with an ``MCP-Protocol-Version`` header, which every MCP request after
  ``initialize`` carries (2025-06-18 and later): A2A's methods include ``tasks/get``,
  ``tasks/cancel`` and ``tasks/resubscribe`` too, without it. With that header any method is
  MCP's (an extension's too). A client's notifications and responses are not claimed: the server
  answers them ``202 Accepted`` without a body, never a stream;
- a ``GET`` with an ``MCP-Protocol-Version`` header: the stream of server-to-client messages.

A request whose body is past ``MAX_RPC_BODY_BYTES`` has no method to read: before 2026-07-28 it
is then sniffed. ``sniff_payload`` is conservative: a JSON-RPC 2.0 notification whose method is
``notifications/...``, or a request only a server sends (``sampling/createMessage``,
``elicitation/create``, ``roots/list``); or a JSON-RPC response whose ``result`` holds a key
only MCP's results have (``content``, ``isError``, ``tools``, ``contents``, ``serverInfo``...)
and none of A2A's (``kind``, ``task``, ``status``, ``statusUpdate``...). A stream that holds
only a JSON-RPC error is not proven MCP's and reads as generic.

A POST's stream. Every event is ``event: message`` (the SDK client reads no other type) whose
data is one JSON-RPC message, or, in 2025-03-26, a batch of them. The server may send its
requests and notifications first (progress, log messages, sampling, elicitation): progress, not
the end. The stream is complete at the JSON-RPC response (``result`` or ``error``, no
``method``) whose ``id`` is the request's ("The SSE stream SHOULD eventually include a JSON-RPC
response for the JSON-RPC request sent in the POST body"; the SDK client stops there,
``isinstance(message, JSONRPCResponse | JSONRPCError)``). The request's id comes from its body
(``on_request``); without it (a sniffed stream, a replayed recording, a body too long to read)
the first response ends the stream. A response to another id is an anomaly and does not end it;
a response whose ``id`` is null is an error about a request whose id the server could not read
(JSON-RPC 2.0 §5): on a POST's stream, its request's. An id sent as a string for a number (or
the reverse) still matches, counted as the anomaly ``response_id_retyped``.

- ``result``: success, stop reason ``result``. A ``tools/call`` result with ``isError: true``
  (the tool failed, its error reported in the result, "Error Handling" in
  ``docs/specification/2025-11-25/server/tools.mdx``) is a whole, well-formed answer: stop
  reason ``tool_error``, the OpenTelemetry MCP conventions' ``error.type`` for it, and the
  stream is ``complete``. A 2026-07-28 ``resultType: "input_required"`` (the server asks the
  client for input before it can answer, SEP-2322) is a paused state: the answer is whole and
  the client sends the input in a request of its own, so it is ``complete``, stop reason
  ``input_required``, as A2A's ``input-required`` is (docs/users/outcomes.md, "Paused states").
- ``error``: a provider error, its JSON-RPC ``code`` the error code; except ``-32800``, which the
  SDK's 2025-era server sends to end the stream of a request the client cancelled
  (``REQUEST_CANCELLED``, ``_terminate_unanswered_request``): ``incomplete``, stop reason
  ``request_cancelled``, not the server's fault.
- An event with empty data is a priming event (an ``id:`` and an empty ``data``, 2025-11-25
  "Sending Messages" item 6), never a payload error; ``: ping`` comments are comments.
- EOF before the response is ``truncated``, except where the negotiated revision lets the
  server close the connection early so that the client resumes: 2025-11-25 ("After the server
  has sent an SSE event with an event ID to the client, the server MAY close the connection
  (without terminating the SSE stream) at any time"; the response then comes on a GET with
  ``Last-Event-ID``). When the ``MCP-Protocol-Version`` is 2025-11-25 or unknown (absent: an
  ``initialize``, a sniffed stream; or not a dated revision) and the stream carried an ``id:``,
  no terminal is owed on this exchange: a clean EOF is then ``eof_unverified``, as on a route
  without a terminal rule (a ``retry:`` field is not required: the SDK client reconnects after
  its default delay without one), while a cut connection is still ``truncated`` and the
  application's close ``cancelled``. Before 2025-11-25 the server "SHOULD NOT close the SSE
  stream before sending the JSON-RPC response", and 2026-07-28 removed resumability ("A broken
  response stream loses the in-flight request"): there a clean EOF before it is ``truncated``.

The GET stream (2025-03-26 to 2025-11-25, "Listening for Messages from the Server") has no
terminal: "either side MAY close it at any time". A clean close is ``eof_unverified``, the
application's close ``cancelled``, a cut ``truncated``. A response on it is a POST's answer
resumed there ("MUST NOT send a JSON-RPC response on the stream unless resuming a stream
associated with a previous client request"): it ends it as above; a response without an id (the
SDK server sends a parse error it cannot attribute there) is an anomaly. The route's
declarations cannot make a clean close ``complete``: ``on_close`` is not told whether the
stream ended cleanly, was cut, or was closed by the application.

Labels (``labels``, on the span and, capped like model names, on the metric series): the
OpenTelemetry MCP conventions' ``mcp.method.name``; for ``tools/call``, ``gen_ai.tool.name``
(``params.name``, or the ``Mcp-Name`` header, decoded from its ``=?base64?...?=`` form). A
``tools/call``'s operation is ``execute_tool`` (``gen_ai.operation.name``, the conventions' for
tool calls alone): this exchange's ``operation``, on its span, never a series of its own (it
follows from the method). No provider: MCP names none (``gen_ai.provider.name`` is absent, and
so are the GenAI client metrics), nor an operation for its other methods.

Strict mode's error event (``strict_error_event``): none. A JSON-RPC error must carry the
request's id, which the declaration is not given; one with a null id is taken as the request's
answer by the Python SDK client (it rewrites the id of any response on a POST's stream) but not
by every client: the TypeScript SDK looks the id up and leaves the call waiting. The proxy cuts
the connection instead.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from .. import semconv
from .._core.events import SSEEvent
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState
from ._base import Redaction, Request, Route, handles

__all__ = ["MCPStreamableHTTPRoute"]

#: The request headers this contract's recognition and rules read.
VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"

# The client requests of every revision (mcp_types.methods.CLIENT_REQUESTS, mcp 2.x).
_REQUESTS = frozenset(
    {
        "initialize",
        "ping",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "subscriptions/listen",
    }
)
_REQUEST_PREFIXES = ("tools/", "resources/", "prompts/")
# MCP's and A2A's: MCP's only with MCP's version header.
_SHARED_PREFIX = "tasks/"
_NOTIFICATION_PREFIX = "notifications/"
# What only a server sends a client (mcp_types.methods.SERVER_REQUESTS, but ``ping``).
_SERVER_REQUESTS = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
# Keys only MCP's results have (CallToolResult, ListToolsResult, ReadResourceResult,
# ListResourcesResult, ListResourceTemplatesResult, ListPromptsResult, InitializeResult,
# CompleteResult), and keys A2A's results have (0.3: Task, Message and the update events by
# ``kind``; 1.0: wrapped in ``task``, ``message``, ``statusUpdate``, ``artifactUpdate``).
_MCP_RESULT_KEYS = frozenset(
    {
        "content",
        "isError",
        "structuredContent",
        "tools",
        "contents",
        "resources",
        "resourceTemplates",
        "prompts",
        "serverInfo",
        "completion",
    }
)
_A2A_RESULT_KEYS = frozenset(
    {"kind", "task", "message", "statusUpdate", "artifactUpdate", "status", "artifact", "parts"}
)

#: The SDK's 2025-era answer to a request that settled without a response (it was cancelled).
REQUEST_CANCELLED = -32800

# Revisions whose server may close a POST's stream for the client to resume it: from 2025-11-25
# (SEP-1699) until 2026-07-28 removed resumability. Revisions are dates, which sort as text.
_RESUMABLE_FROM = "2025-11-25"
_RESUMABLE_UNTIL = "2026-07-28"
_REVISION = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_BASE64_VALUE = re.compile(r"=\?base64\?(.*)\?=")

_TOOLS_CALL = "tools/call"
_EXECUTE_TOOL = "execute_tool"
_BATCH = "batch"
_MESSAGE = "message"


def _method(request: Request) -> str:
    """The JSON-RPC method a request names: its body's, else its ``Mcp-Method`` header's."""
    return request.rpc_method or request.header(METHOD_HEADER) or ""


def _header_text(value: str | None) -> str | None:
    """A 2026-07-28 header value, decoded from its ``=?base64?...?=`` form when it has it (as
    the SDK's ``mcp.shared.inbound.decode_header_value``); None when that form is broken."""
    if value is None:
        return None
    wrapped = _BASE64_VALUE.fullmatch(value)
    if wrapped is None:
        return value
    try:
        return base64.b64decode(wrapped.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _may_close_early(version: str | None) -> bool:
    """Whether a server of this ``MCP-Protocol-Version`` may close a POST's stream before its
    response for the client to resume it; an unknown version (none sent, not a date) may."""
    if version is None or _REVISION.fullmatch(version) is None:
        return True
    return _RESUMABLE_FROM <= version < _RESUMABLE_UNTIL


class MCPStreamableHTTPRoute(Route):
    name: ClassVar[str] = "mcp.streamable_http"
    success_stops: ClassVar[frozenset[str]] = frozenset({"result", "tool_error", "input_required"})
    example_request: ClassVar[tuple[str, str] | None] = None  # any path: told by its body
    request_headers: ClassVar[frozenset[str]] = frozenset(
        {VERSION_HEADER, METHOD_HEADER, NAME_HEADER}
    )
    redaction: ClassVar[Redaction | None] = Redaction(
        # What the route and its sniffing judge by; a content block's ``type`` is not.
        words=frozenset({"jsonrpc", "method", "resultType"}),
        errors=frozenset({"code"}),
        ids=frozenset({"id", "progressToken", "requestId"}),
        numbers=frozenset({"id"}),
        # Objects whose keys are content: tool inputs and structured outputs, schemas, error
        # and log data, metadata.
        opaque=frozenset(
            {
                "arguments",
                "structuredContent",
                "inputSchema",
                "outputSchema",
                "requestedSchema",
                "data",
                "_meta",
            }
        ),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        versioned = request.header(VERSION_HEADER) is not None
        if request.method == "GET":
            return versioned
        if request.method != "POST":
            return False
        method = _method(request)
        if not method or method.startswith(_NOTIFICATION_PREFIX):
            return False
        # tasks/* is A2A's too: MCP's only with the version header.
        return versioned or method in _REQUESTS or method.startswith(_REQUEST_PREFIXES)

    @classmethod
    def labels(cls, request: Request) -> Mapping[str, str]:
        method = _method(request) if request.method == "POST" else ""
        if not method:
            return {}
        labels = {semconv.MCP_METHOD_NAME: method}
        if method == _TOOLS_CALL:
            tool = request.rpc_name or _header_text(request.header(NAME_HEADER))
            if tool:
                labels[semconv.GEN_AI_TOOL_NAME] = tool
        return labels

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        if payload.get("jsonrpc") != "2.0":
            return False
        method = payload.get("method")
        if method is not None:
            return type(method) is str and (
                method.startswith(_NOTIFICATION_PREFIX) or method in _SERVER_REQUESTS
            )
        result = payload.get("result")
        return (
            "id" in payload
            and type(result) is dict
            and not _MCP_RESULT_KEYS.isdisjoint(result)
            and _A2A_RESULT_KEYS.isdisjoint(result)
        )

    def __init__(self) -> None:
        super().__init__()
        # The request's JSON-RPC id; None when unknown (then the first response is its answer).
        self._request_id: str | int | None = None
        # A GET: the stream of server-to-client messages, with no terminal of its own.
        self._listening = False
        # The revision lets the server close the stream early for the client to resume it.
        self._resumable = True

    def on_request(self, request: Request, rpc_id: str | int | None) -> None:
        self._request_id = rpc_id
        self._resumable = _may_close_early(request.header(VERSION_HEADER))
        if request.method == "GET":
            self._listening = True
            self._without_terminal()
        elif _method(request) == _TOOLS_CALL:
            # The monitor reports the operation of the route instance that judged the stream.
            self.operation = _EXECUTE_TOOL  # type: ignore[misc]  # the contract's, for this call

    def _without_terminal(self) -> None:
        """No terminal is owed on this exchange (a GET stream; a POST's stream its server may
        close to be resumed): a clean EOF is judged as on a route without a terminal rule. The
        monitor reads ``has_terminal`` off the route instance that judges the stream, so this
        instance's reading of it is this exchange's."""
        self.has_terminal = False  # type: ignore[misc]  # the contract's, for this exchange

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.event != _MESSAGE:
            # The SDK client skips any other type ("Unknown SSE event").
            state.unknown()
            return None
        if event.id and self._resumable and self.has_terminal:
            self._without_terminal()
        if not event.data:
            return None  # a priming event: its id is all it carries
        try:
            message = loads(event.data)
        except JSONDecodeError:
            state.payload_invalid()
            return None
        if type(message) is dict:
            return _MESSAGE, message
        if type(message) is list and message:  # a 2025-03-26 batch
            return _BATCH, {_BATCH: message}
        state.payload_invalid()
        return None

    @handles(_BATCH)
    def _on_batch(self, payload: dict[str, Any], state: StreamState) -> None:
        for message in payload[_BATCH]:
            if self.ended:
                state.anomaly("event_after_terminal")
            elif type(message) is dict:
                self._on_message(message, state)
            else:
                state.payload_invalid()

    @handles(_MESSAGE)
    def _on_message(self, message: dict[str, Any], state: StreamState) -> None:
        method = message.get("method")
        if method is not None:
            # The server's request or notification (progress, a log message, sampling): it
            # relates to the request, and never ends its stream.
            if type(method) is not str:
                state.payload_invalid()
            return
        has_result, has_error = "result" in message, "error" in message
        if has_result == has_error:  # neither: not JSON-RPC; both: JSON-RPC 2.0 §5 forbids it
            state.payload_invalid()
            return
        if self._answers(message.get("id"), state):
            self._on_answer(message, has_error, state)

    def _answers(self, response_id: Any, state: StreamState) -> bool:
        """Whether a response with this id is the answer this stream waits for."""
        if response_id is None:
            if self._listening:
                state.anomaly("response_without_id")
                return False
            return True  # JSON-RPC 2.0 §5: its request's id could not be read
        expected = self._request_id
        if expected is None:
            return True
        if type(response_id) is type(expected) and response_id == expected:
            return True
        if type(response_id) in (str, int) and str(response_id) == str(expected):
            state.anomaly("response_id_retyped")
            return True
        state.anomaly("response_to_another_request")
        return False

    def _on_answer(self, message: dict[str, Any], has_error: bool, state: StreamState) -> None:
        self.ended = True
        state.terminal()
        if has_error:
            error = message["error"]
            code = error.get("code") if type(error) is dict else None
            if type(code) is int and code == REQUEST_CANCELLED:
                state.final_stop("request_cancelled", False, open_parts=False)
            else:
                state.provider_error(code)
            return
        result = message["result"]
        if type(result) is not dict:
            state.payload_invalid()
        elif result.get("resultType") == "input_required":
            state.final_stop("input_required", True, open_parts=False)
        elif result.get("isError") is True:
            state.final_stop("tool_error", True, open_parts=False)
        else:
            state.final_stop("result", True, open_parts=False)
