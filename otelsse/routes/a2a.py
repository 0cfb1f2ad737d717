"""A2A (Agent2Agent) streaming: ``message/stream`` and task subscriptions, JSON-RPC and HTTP+JSON.

Recognition. The JSON-RPC binding is served at whatever URL the agent card names, so a request
is told by its body's ``method`` (``Request.rpc_method``): ``message/stream`` and
``tasks/resubscribe`` (protocol 0.2 and 0.3), ``SendStreamingMessage`` and ``SubscribeToTask``
(1.0). The HTTP+JSON binding by its path: ``POST .../message:stream`` (``/v1/message:stream`` in
0.3, an optional ``/{tenant}`` prefix in 1.0) and ``.../tasks/{id}:subscribe``, whose method is
``GET`` in the protobuf bindings and ``POST`` in the 1.0 spec's text (the a2a-sdk serves both).
Sources: a2aproject/A2A ``docs/specification.md`` v0.3.0 §3.3, §7.2, §7.9 and v1.0.0 §5.3, §9.4,
§11.3; ``specification/a2a.proto`` v1.0.0 (``google.api.http`` options); a2aproject/a2a-python
1.3.0 ``a2a/server/routes/rest_routes.py`` and ``a2a/compat/v0_3/rest_adapter.py``. Every such
request streams (``always_streams``). The a2a-sdk client asks for SSE (``Accept:
text/event-stream``, ``a2a/client/transports/http_helpers.py`` ``_SSEEventSource``).

Events. Each event's data is one object: a JSON-RPC 2.0 response whose ``result`` is the event
(JSON-RPC), or the bare event (HTTP+JSON). The event is a Task, a Message, a task status update
or a task artifact update, told apart by ``kind`` (``task``, ``message``, ``status-update``,
``artifact-update``) in 0.2/0.3 JSON-RPC, or by the one member that holds it (``task``,
``message``, ``statusUpdate``, ``artifactUpdate``: ``StreamResponse``) in 1.0 and in 0.3's
HTTP+JSON. States are spelled ``working`` (0.3 JSON-RPC) or ``TASK_STATE_WORKING`` (protobuf JSON);
this route reports each in the lower-case spelling, as a2a-sdk's own v0.3 conversion maps them
(``a2a/compat/v0_3/conversions.py``), so one state is one ``otelsse.stop_reason`` whatever the
protocol version: ``TASK_STATE_INPUT_REQUIRED`` is ``input-required``, the 0.3 protobuf's
``TASK_STATE_CANCELLED`` is ``canceled``, and ``TASK_STATE_UNSPECIFIED`` (which protobuf JSON
writes as no ``state`` at all) is ``unknown``. Sources: v0.3.0 ``types/src/types.ts``
(``SendStreamingMessageSuccessResponse``, ``TaskState``), v0.3.0 ``specification/grpc/a2a.proto``
and v1.0.0 ``specification/a2a.proto`` (``StreamResponse``, ``TaskState``), v1.0.0 spec §9.4.2 and
§11.7.

Terminal rule. A stream is finished at (v1.0.0 spec §3.1.2, §11.7; v0.3.0 §7.2.2, §9.3):

- a Message: a message-only stream holds exactly one, then closes (stop reason ``message``;
  a2a-sdk's client stops reading there too, ``a2a/client/base_client.py`` ``_process_stream``);
- a terminal state, in a status update or a Task: ``completed`` (success), ``failed`` and
  ``rejected`` (a provider error, its code the state), ``canceled`` (``incomplete``: the task was
  cancelled by the agent's side, a proper end the caller cannot take as an answer; ``cancelled``
  is kept for an application that closes the stream itself, docs/users/outcomes.md);
- in 0.3, a status update with ``final: true`` ("the final event in the stream for this
  interaction"), whatever its state: under ``working`` that is a proper end that is not an
  answer (``incomplete``).

An interrupted state, ``input-required`` or ``auth-required``, pauses the task until the client
answers: the stream closes there (v1.0.0 §11.7), and that turn is whole (``complete``, its state
the stop reason). It is judged at the end of the stream, not at its event: an agent waiting for
out-of-band credentials keeps the stream open and goes on working (v1.0.0 §7.6, and a2a-sdk 1.3.0
ends a stream when the agent's ``execute`` returns, not at a state); a later state supersedes
the pause. ``unknown`` is judged so too, as a non-success end (a2a-sdk's event consumer ended a
stream at it, 0.3.26 ``a2a/server/events/event_consumer.py``). EOF in ``submitted`` or
``working``, or before any state, is ``truncated``.

A2A 1.0 has no ``final`` flag (v1.0.0 ``docs/whats-new-v1.md``: "leverage protocol binding
specific stream closure"): events after the end are anomalies, except one last Task snapshot,
which a server MAY resend before closing (§11.7).

Errors. A JSON-RPC response with an ``error`` member, a bare ``{"error": {...}}`` (HTTP+JSON,
``google.rpc.Status``, v1.0.0 §11.6) and any ``event: error`` (the a2a-sdk server's frame for an
error after the stream began, ``a2a/server/routes/jsonrpc_dispatcher.py`` and
``rest_dispatcher.py``; its client raises on every such event, ``http_helpers.py``
``send_http_stream_request``) are provider errors: the code is the JSON-RPC ``code``, or the
Status's ``status`` (else its ``code``). A JSON-RPC response with neither ``result`` nor
``error`` is a payload error (the client raises on it, ``jsonrpc.py``
``_check_jsonrpc_response``); an event of none of the four kinds is counted as unknown (the
client's lenient parse yields an empty event). A response whose ``id`` is not the request's
(when the instrumentation read it) is counted as an anomaly.

Artifacts stream in chunks keyed by ``artifactId``: ``append: true`` adds to an artifact sent
before, ``lastChunk: true`` ends it. An artifact sent whole has neither (protobuf JSON drops
``false``, so a whole artifact and an unfinished first chunk look alike): only one being appended
to (``append`` without ``lastChunk``) is known to be open. A stream that ends with one open is
cut inside it when no end came (``truncated``, as above); after an end it is counted as the
anomaly ``artifact_open_at_end``. Text parts of artifacts and messages are the agent's output
(they time the first output).

Strict mode's error event (``strict_error_event``): ``event: error`` with a JSON-RPC error
response, ``{"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message", "data":
[ErrorInfo]}}``: -32603 is JSON-RPC's ``InternalError`` and ``data`` holds a
``google.rpc.ErrorInfo`` whose ``reason`` carries the code (v1.0.0 §9.5); ``id`` is null, which
JSON-RPC 2.0 allows when the request's id is not known (the event is declared once per route).
The a2a-sdk client raises on every ``event: error`` in its read loop, over either binding
(``A2AError``/``A2AClientError``, ``http_helpers.py`` above); this route judges it
``provider_error``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState
from ._base import Redaction, Request, Route, error_info, handles, parse_object, sse_event

__all__ = ["A2AStreamRoute"]

#: The JSON-RPC methods that answer with a stream: 0.2/0.3, then 1.0.
_STREAM_METHODS = frozenset(
    {"message/stream", "tasks/resubscribe", "SendStreamingMessage", "SubscribeToTask"}
)

# Each state as sent (0.3 JSON-RPC, then protobuf JSON) -> its lower-case spelling.
_STATES = {
    "submitted": "submitted",
    "working": "working",
    "completed": "completed",
    "failed": "failed",
    "canceled": "canceled",
    "rejected": "rejected",
    "input-required": "input-required",
    "auth-required": "auth-required",
    "unknown": "unknown",
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_CANCELLED": "canceled",  # the 0.3 protobuf's spelling
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_UNSPECIFIED": "unknown",
}
#: States that end the task, and the ones of them the agent reports as its failure.
_TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
_FAILED = frozenset({"failed", "rejected"})
#: States the task rests in until the client acts: an end when the stream closes in one.
_PAUSED = frozenset({"input-required", "auth-required"})
_RESTING = _PAUSED | {"unknown"}
#: The stop reason of a message-only stream.
_MESSAGE = "message"

# The event kinds: 0.2/0.3 ``kind`` values, then 1.0 ``StreamResponse`` members, -> payload kind.
_KINDS = {
    "task": "task",
    "message": "message",
    "status-update": "status",
    "artifact-update": "artifact",
}
_MEMBERS = {
    "task": "task",
    "message": "message",
    "statusUpdate": "status",
    "artifactUpdate": "artifact",
}
#: The 1.0 spec's ``POST /tasks/{id}:subscribe`` and the protobuf bindings' ``GET``.
_SUBSCRIBE_METHODS = frozenset({"GET", "POST"})


def _has_shape(kind: str, event: Any) -> bool:
    """Whether ``event`` holds what an event of ``kind`` must (sniffing): a status object (not
    MCP's ``status`` string), an artifact object, a message id."""
    if type(event) is not dict:
        return False
    if kind == "task":
        return "id" in event and type(event.get("status")) is dict
    if kind == "status":
        return "taskId" in event and type(event.get("status")) is dict
    if kind == "artifact":
        return "taskId" in event and type(event.get("artifact")) is dict
    return "messageId" in event and type(event.get("parts", event.get("content"))) is list


def _is_event(result: dict[str, Any], *, kinds: bool) -> bool:
    """Whether ``result`` is one A2A event: by its ``kind`` (when ``kinds``: 0.3 JSON-RPC) or as
    an object whose one member is the event."""
    kind = result.get("kind")
    if kinds and type(kind) is str and kind in _KINDS:
        return _has_shape(_KINDS[kind], result)
    if len(result) != 1:
        return False
    ((member, event),) = result.items()
    name = _MEMBERS.get(member)
    return name is not None and _has_shape(name, event)


def _texts(parts: Any, state: StreamState) -> None:
    """The text parts of an artifact or message: the agent's output."""
    if type(parts) is not list:
        state.payload_invalid()
        return
    for part in parts:
        text = part.get("text")
        if text is not None:
            state.text(0, text)


class A2AStreamRoute(Route):
    name: ClassVar[str] = "a2a.stream"
    # A2A is a protocol between agents, not a GenAI provider: no gen_ai.provider.name.
    operation: ClassVar[str | None] = "invoke_agent"
    success_stops: ClassVar[frozenset[str]] = frozenset(
        {"completed", _MESSAGE, "input-required", "auth-required"}
    )
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/message:stream")
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"jsonrpc", "kind", "state", "role"}),
        # a JSON-RPC error's code; a google.rpc.Status's code and status
        errors=frozenset({"code", "status"}),
        ids=frozenset({"id", "taskId", "contextId", "artifactId", "messageId", "referenceTaskIds"}),
        # A data part's value and any metadata are the agent's own JSON, keys and all.
        opaque=frozenset({"data", "metadata"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        method = request.method
        if request.rpc_method:
            return method == "POST" and request.rpc_method in _STREAM_METHODS
        path = request.path
        if path.endswith("/message:stream"):
            return method == "POST"
        return path.endswith(":subscribe") and "/tasks/" in path and method in _SUBSCRIBE_METHODS

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return True  # every request this route claims is a streaming call

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        if "jsonrpc" in payload:
            result = payload.get("result")
            return type(result) is dict and _is_event(result, kinds=True)
        return _is_event(payload, kinds=False)

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        # JSON-RPC's InternalError with an ErrorInfo (the module docstring cites why).
        error = {"code": -32603, "message": message, "data": [error_info(code)]}
        return sse_event({"jsonrpc": "2.0", "id": None, "error": error}, "error")

    def __init__(self) -> None:
        super().__init__()
        self._rpc_id: str | int | None = None
        # Whether a Task or a task event came (a Message then is out of place).
        self._task_seen = False
        # The paused (or unknown) state the task rests in, judged at the end; None otherwise.
        self._resting: str | None = None
        # The terminal state that ended the stream (a Task snapshot may follow it).
        self._terminal_state: str | None = None
        # Artifacts being appended to, whose last chunk has not come.
        self._appending: set[str] = set()

    def on_request(self, request: Request, rpc_id: str | int | None) -> None:
        self._rpc_id = rpc_id

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.event == "error":
            # The SDK raises on the event whatever its data holds: an error, never a payload's.
            try:
                found = loads(event.data)
            except JSONDecodeError:
                found = None
            return "error", found if type(found) is dict else {}
        payload = parse_object(event, state)
        if payload is None:
            return None
        if payload.get("error") is not None:
            return "error", payload
        if "jsonrpc" in payload:
            if "result" not in payload:
                state.payload_invalid()  # neither result nor error: the SDK raises
                return None
            if self._rpc_id is not None and not _same_id(payload.get("id"), self._rpc_id):
                state.anomaly("response_id_mismatch")
            payload = payload["result"]
            if type(payload) is not dict:
                state.payload_invalid()
                return None
            kind = payload.get("kind")
            if kind is not None:
                return _KINDS.get(kind, "") if type(kind) is str else "", payload
        for member, name in _MEMBERS.items():
            inner = payload.get(member)
            if inner is not None:
                return name, inner
        return "", payload  # no event this route knows: counted as unknown

    @handles("error")
    def _on_error(self, payload: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        error = payload.get("error")
        code = None
        if type(error) is dict:
            code = error.get("status") or error.get("code")
        state.provider_error(code)

    @handles("task")
    def _on_task(self, task: dict[str, Any], state: StreamState) -> None:
        self._task_seen = True
        state.identify(None, task.get("id"))
        self._on_status(task.get("status"), None, state)

    @handles("status")
    def _on_status_update(self, update: dict[str, Any], state: StreamState) -> None:
        self._task_seen = True
        self._on_status(update.get("status"), update.get("final"), state)

    @handles("artifact")
    def _on_artifact(self, update: dict[str, Any], state: StreamState) -> None:
        self._task_seen = True
        artifact = update["artifact"]
        artifact_id = artifact.get("artifactId")
        if not (artifact_id is None or type(artifact_id) is str):
            state.payload_invalid()
            return
        _texts(artifact.get("parts", []), state)
        if artifact_id is None:
            return  # nothing to append to or end
        if update.get("lastChunk") is True:
            if artifact_id in self._appending:
                self._appending.discard(artifact_id)
                state.close_part()
        elif (
            update.get("append") is True
            and artifact_id not in self._appending
            # bounded as the other routes' open blocks are (``max_parts``)
            and state.open_part(len(self._appending))
        ):
            self._appending.add(artifact_id)

    @handles("message")
    def _on_message(self, message: dict[str, Any], state: StreamState) -> None:
        if self._task_seen:
            state.anomaly("message_in_task_stream")
        state.identify(None, message.get("messageId"))
        # ``content`` in the 0.3 protobuf's Message (its HTTP+JSON binding), ``parts`` elsewhere
        _texts(message.get("parts", message.get("content", [])), state)
        self._end(_MESSAGE, state)

    def _on_status(self, status: Any, final: Any, state: StreamState) -> None:
        value = None if status is None else status.get("state")
        if value is None:
            name = "unknown"  # protobuf JSON writes TASK_STATE_UNSPECIFIED as no state
        elif type(value) is not str:
            state.payload_invalid()
            return
        else:
            found = _STATES.get(value)
            if found is None:
                state.unknown()  # a state this route does not know: not an end
                self._resting = None
                return
            name = found
        if name in _TERMINAL or final is True:
            self._end(name, state)
        else:
            self._resting = name if name in _RESTING else None

    def _end(self, reason: str, state: StreamState) -> None:
        self.ended = True
        if reason in _TERMINAL:
            self._terminal_state = reason
        if reason in _FAILED:
            state.provider_error(reason)
        if self._appending:
            state.anomaly("artifact_open_at_end")
        state.stop(reason, reason in self.success_stops)
        state.terminal()

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        # A server MAY resend the final Task snapshot before closing (v1.0.0 §11.7).
        if self._terminal_state is not None and self._is_task_snapshot(event):
            self._terminal_state = None  # once
            return
        state.anomaly("event_after_terminal")

    @staticmethod
    def _is_task_snapshot(event: SSEEvent) -> bool:
        try:
            payload = loads(event.data)
        except JSONDecodeError:
            return False
        if type(payload) is not dict or event.event == "error":
            return False
        if "jsonrpc" in payload:
            payload = payload.get("result")
            if type(payload) is not dict:
                return False
            if payload.get("kind") == "task":
                return True
        return type(payload.get("task")) is dict

    def on_close(self, state: StreamState) -> None:
        if not self.ended and self._resting is not None:
            # The stream closed while the task rests: paused (a whole turn) or unknown.
            self._end(self._resting, state)


def _same_id(sent: Any, expected: str | int) -> bool:
    """JSON-RPC ids match by type and value (``1`` is not ``"1"``, and ``true`` no id)."""
    return type(sent) is type(expected) and sent == expected
