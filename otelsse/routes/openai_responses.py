"""OpenAI Responses API (``POST /v1/responses`` and the resumable ``GET /v1/responses/{id}``).

Terminal rule: exactly one of ``response.completed`` (success), ``response.incomplete``
(non-success), ``response.failed`` or ``error`` (provider errors), as the OpenAI API reference's
streaming events list them (https://platform.openai.com/docs/api-reference/responses-streaming;
``ResponseStreamEvent`` in openai/openai-openapi ``openapi.yaml``). There is no ``[DONE]``, but
gateways add one after the terminal, which is accepted.
Dispatch is on ``data.type``: some gateways send no ``event:`` line, so the SSE event name is
only a hint. Function-call arguments are keyed by ``item_id``.

Output items the provider runs itself (``mcp_call``, ``web_search_call``, ``file_search_call``,
``code_interpreter_call``, ``image_generation_call``) are server calls, never the application's
to run; a ``custom_tool_call``'s input is free text, not JSON. An ``error`` event may be followed
by the ``response.failed`` that closes the same failure.

Strict mode's error event (``strict_error_event``): the documented ``error`` event, ``event:
error`` with ``{"type": "error", "code", "message", "param"}`` (``ResponseErrorEvent`` in the
streaming events reference above; openai-python ``src/openai/types/responses/
response_error_event.py``), with an ``error`` object beside them (``{"type": "server_error",
"code", "message"}``), and without ``sequence_number``, which only the upstream could number.
The ``error`` object is what the official SDKs raise on: openai-python
``src/openai/_streaming.py`` ``Stream.__stream__`` raises ``APIError`` for data whose ``error`` is
set, never for the documented event alone (it yields it, as it yields ``response.failed``), and so
do openai-node releases before 7 (``if (data && data.error) throw new APIError(...)`` in
``src/core/streaming.ts`` ``Stream.fromSSEResponse``); later ones also raise on ``event: error``
(``data?.error ?? data``). This route judges it ``provider_error``.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import parse_qs

from .._core.events import SSEEvent
from .._core.state import CUSTOM, FUNCTION, SERVER, StreamState, ToolCall
from ._base import Redaction, Request, Route, handles, sse_event, typed_object

__all__ = ["OpenAIResponsesRoute"]

# Output-item type -> the kind of tool call it is.
_TOOL_ITEM_KINDS = {
    "function_call": FUNCTION,
    "custom_tool_call": CUSTOM,
    "mcp_call": SERVER,
    "web_search_call": SERVER,
    "file_search_call": SERVER,
    "code_interpreter_call": SERVER,
    "image_generation_call": SERVER,
}
_DONE = "[DONE]"


def _input_key(kind: str) -> str:
    """Where an item or its ``.done`` event holds a call's input: free text for custom tools."""
    return "input" if kind == CUSTOM else "arguments"


class OpenAIResponsesRoute(Route):
    name: ClassVar[str] = "openai.responses"
    provider: ClassVar[str | None] = "openai"
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = frozenset({"completed"})
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1/responses")
    proves_item_end: ClassVar[bool] = True
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"object", "type", "role", "status", "model", "reason"}),
        errors=frozenset({"code"}),
        ids=frozenset({"id", "item_id", "call_id", "previous_response_id"}),
        numbers=frozenset(
            {"output_index", "content_index", "summary_index", "sequence_number", "index"}
        ),
        usage=frozenset({"usage"}),
        fragments=frozenset({"delta", "arguments", "input"}),
        arguments=frozenset({"arguments", "input"}),
        # ``env``: a local_shell_call's variables, their names the model's too.
        opaque=frozenset({"metadata", "env"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        if request.method == "POST":
            return request.path.endswith("/responses")
        # Resuming a background response: GET /v1/responses/{id}?stream=true
        return (
            request.method == "GET"
            and "/responses/" in request.path
            and parse_qs(request.query).get("stream", [""])[0].lower() == "true"
        )

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return "stream=" in request.query  # GET .../responses/{id}?stream=true

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event.startswith("response.")

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        kind = payload.get("type")
        return type(kind) is str and kind.startswith("response.")

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        # The documented ``error`` event, with the ``error`` object the SDKs raise on (the
        # module docstring cites both).
        error = {"type": "server_error", "code": code, "message": message}
        data = {"type": "error", "code": code, "message": message, "param": None, "error": error}
        return sse_event(data, "error")

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[str, ToolCall] = {}
        self._outputs: set[int] = set()
        self._sequence: int | None = None
        self._done_marker_seen = False
        self._error_seen = False

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.data.startswith(_DONE):
            state.anomaly("unexpected_done")  # gateways add it after the terminal, not before
            self._done_marker_seen = True
            return None
        found = typed_object(event, state, "type")
        if found is None:
            return None
        kind, obj = found
        sequence = obj.get("sequence_number")
        if type(sequence) is int:
            if self._sequence is not None and sequence != self._sequence + 1:
                state.anomaly("sequence_gap")
            self._sequence = sequence
        return kind, obj

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        if event.data.startswith(_DONE) and not self._done_marker_seen:
            self._done_marker_seen = True  # the one ``[DONE]`` a gateway adds
            return
        if self._error_seen and event.event == "response.failed":
            self._error_seen = False  # the failure the ``error`` event announced
            found = self.envelope(event, state)
            if found is not None and found[0] == "response.failed":
                self._on_failed(found[1], state)
                return
        state.anomaly("unexpected_done" if event.data.startswith(_DONE) else "event_after_terminal")

    # Progress and "done" events that repeat what the deltas already said.
    @handles(
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
        # What the provider's own tools report while it runs them.
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
    )
    def _on_progress(self, obj: dict[str, Any], state: StreamState) -> None:
        pass

    def _output(self, obj: dict[str, Any], state: StreamState) -> int | None:
        """The event's output index, admitted as a part the first time it is seen."""
        index: Any = obj.get("output_index", 0)
        if index not in self._outputs:
            if not state.open_part(index):
                return None
            self._outputs.add(index)
        return index  # type: ignore[no-any-return]

    @handles("response.output_text.delta")
    def _on_text(self, obj: dict[str, Any], state: StreamState) -> None:
        index = self._output(obj, state)
        if index is not None:
            state.text(index, obj["delta"])

    @handles("response.refusal.delta")
    def _on_refusal(self, obj: dict[str, Any], state: StreamState) -> None:
        index = self._output(obj, state)
        if index is not None:
            state.refusal(index, obj["delta"])

    @handles("response.reasoning_summary_text.delta", "response.reasoning_text.delta")
    def _on_reasoning(self, obj: dict[str, Any], state: StreamState) -> None:
        index = self._output(obj, state)
        if index is not None:
            state.text(index, obj["delta"], reasoning=True)

    @handles(
        "response.function_call_arguments.delta",
        "response.mcp_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    )
    def _on_arguments_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(obj.get("item_id", ""))
        if call is None:
            state.protocol_violation("arguments_without_item")
            return
        state.tool_args(call, obj["delta"])

    @handles(
        "response.function_call_arguments.done",
        "response.mcp_call_arguments.done",
        "response.custom_tool_call_input.done",
    )
    def _on_arguments_done(self, obj: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(obj.get("item_id", ""))
        if call is None:
            state.protocol_violation("arguments_without_item")
            return
        whole = obj.get(_input_key(call.kind))
        if call.fragments and whole != "".join(call.fragments):
            state.anomaly("arguments_done_mismatch")
        state.close_tool(call, whole=whole)

    @handles("response.output_item.added")
    def _on_item_added(self, obj: dict[str, Any], state: StreamState) -> None:
        item = obj["item"]
        kind = _TOOL_ITEM_KINDS.get(item.get("type"))
        if kind is None:
            return
        # Only calls with streamed arguments (functions, custom tools, MCP) have a value to
        # judge; the other server tools report an action, and their arguments are empty.
        empty_means: Any = {} if kind == SERVER and item.get("type") != "mcp_call" else None
        call_id = item.get("call_id") or item.get("id")
        call = state.open_tool(call_id, item.get("name", item.get("type")), empty_means, kind)
        self._calls[item.get("id", "")] = call
        initial = item.get(_input_key(kind))
        if initial:
            state.tool_args(call, initial)

    @handles("response.output_item.done")
    def _on_item_done(self, obj: dict[str, Any], state: StreamState) -> None:
        item = obj["item"]
        call = self._calls.get(item.get("id", ""))
        if call is not None:
            state.close_tool(call, whole=item.get(_input_key(call.kind)))

    # A stream resumed with ``starting_after`` may begin after ``response.created``: every
    # snapshot names the response.
    @handles("response.created", "response.queued", "response.in_progress")
    def _on_snapshot(self, obj: dict[str, Any], state: StreamState) -> None:
        response = obj.get("response") or {}
        state.identify(response.get("model"), response.get("id"))

    def _end(self, obj: dict[str, Any], state: StreamState) -> dict[str, Any]:
        self.ended = True
        response: dict[str, Any] = obj.get("response") or {}
        state.identify(response.get("model"), response.get("id"))
        usage = response.get("usage")
        if usage:
            state.usage(usage.get("input_tokens"), usage.get("output_tokens"))
        state.terminal()
        return response

    @handles("response.completed")
    def _on_completed(self, obj: dict[str, Any], state: StreamState) -> None:
        self._end(obj, state)
        if any(not call.closed for call in self._calls.values()):
            state.protocol_violation("call_open_at_terminal")
        state.stop("completed", True)

    @handles("response.incomplete")
    def _on_incomplete(self, obj: dict[str, Any], state: StreamState) -> None:
        response = self._end(obj, state)
        details = response.get("incomplete_details") or {}
        reason = details.get("reason")
        state.stop(reason if type(reason) is str else "incomplete", False)

    @handles("response.failed")
    def _on_failed(self, obj: dict[str, Any], state: StreamState) -> None:
        response = self._end(obj, state)
        error = response.get("error") or {}
        state.provider_error(error.get("code") if type(error) is dict else None)
        state.stop("failed", False)

    @handles("error")
    def _on_error(self, obj: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        self._error_seen = True
        state.provider_error(obj.get("code"))
        state.terminal()
