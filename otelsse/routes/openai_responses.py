"""OpenAI Responses API (``POST /v1/responses`` and the resumable ``GET /v1/responses/{id}``).

Terminal rule (reference/provider-contracts.md §3.3): exactly one of ``response.completed``
(success), ``response.incomplete`` (non-success), ``response.failed`` or ``error`` (provider
errors). There is no ``[DONE]``, but gateways add one after the terminal, which is accepted.
Dispatch is on ``data.type``: some gateways send no ``event:`` line, so the SSE event name is
only a hint. Function-call arguments are keyed by ``item_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .._state import StreamState, ToolCall
from ..events import SSEEvent
from ._base import RouteAdapter, parse_object

__all__ = ["OpenAIResponsesAdapter"]

_TOOL_ITEM_TYPES = frozenset({"function_call", "mcp_call"})

# Progress and "done" events that repeat what the deltas already said; counted as nothing.
_KNOWN_QUIET = frozenset(
    {
        "response.queued",
        "response.in_progress",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    }
)


class OpenAIResponsesAdapter(RouteAdapter):
    name: ClassVar[str] = "openai.responses"
    provider: ClassVar[str | None] = "openai"
    success_stops: ClassVar[frozenset[str]] = frozenset({"completed"})

    def __init__(self) -> None:
        self._calls: dict[str, ToolCall] = {}
        self._sequence: int | None = None
        self._ended = False
        self._done_marker_seen = False
        self._handlers: dict[str, Callable[[dict[str, Any], StreamState], None]] = {
            "response.output_text.delta": self._on_text,
            "response.refusal.delta": self._on_text,
            "response.reasoning_summary_text.delta": self._on_reasoning,
            "response.reasoning_text.delta": self._on_reasoning,
            "response.function_call_arguments.delta": self._on_arguments_delta,
            "response.mcp_call_arguments.delta": self._on_arguments_delta,
            "response.function_call_arguments.done": self._on_arguments_done,
            "response.mcp_call_arguments.done": self._on_arguments_done,
            "response.output_item.added": self._on_item_added,
            "response.output_item.done": self._on_item_done,
            "response.created": self._on_snapshot,
            "response.completed": self._on_completed,
            "response.incomplete": self._on_incomplete,
            "response.failed": self._on_failed,
            "error": self._on_error,
        }

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        if event.data.startswith("[DONE]"):
            if not self._ended or self._done_marker_seen:
                state.anomaly("unexpected_done")
            self._done_marker_seen = True
            return
        if self._ended:
            state.anomaly("event_after_terminal")
            return
        obj = parse_object(event, state)
        if obj is None:
            return
        kind = obj.get("type")
        if type(kind) is not str:
            state.payload_invalid()
            return
        if event.event != kind and event.event != "message":
            state.anomaly("event_name_mismatch")
        sequence = obj.get("sequence_number")
        if type(sequence) is int:
            if self._sequence is not None and sequence != self._sequence + 1:
                state.anomaly("sequence_gap")
            self._sequence = sequence
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(obj, state)
        elif kind not in _KNOWN_QUIET:
            state.unknown()

    def _on_text(self, obj: dict[str, Any], state: StreamState) -> None:
        state.text(obj.get("output_index", 0), obj["delta"])

    def _on_reasoning(self, obj: dict[str, Any], state: StreamState) -> None:
        state.text(obj.get("output_index", 0), obj["delta"], reasoning=True)

    def _on_arguments_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(obj.get("item_id", ""))
        if call is None:
            state.protocol_violation("arguments_without_item")
            return
        state.tool_args(call, obj["delta"])

    def _on_arguments_done(self, obj: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(obj.get("item_id", ""))
        if call is None:
            state.protocol_violation("arguments_without_item")
            return
        whole = obj.get("arguments")
        if call.fragments and whole != "".join(call.fragments):
            state.anomaly("arguments_done_mismatch")
        state.close_tool(call, whole=whole)

    def _on_item_added(self, obj: dict[str, Any], state: StreamState) -> None:
        item = obj["item"]
        if item.get("type") in _TOOL_ITEM_TYPES:
            call = state.open_tool(item.get("call_id") or item.get("id"), item.get("name"))
            self._calls[item.get("id", "")] = call
            if item.get("arguments"):
                state.tool_args(call, item["arguments"])

    def _on_item_done(self, obj: dict[str, Any], state: StreamState) -> None:
        item = obj["item"]
        call = self._calls.get(item.get("id", ""))
        if call is not None:
            state.close_tool(call, whole=item.get("arguments"))

    def _on_snapshot(self, obj: dict[str, Any], state: StreamState) -> None:
        response = obj.get("response") or {}
        state.identify(response.get("model"), response.get("id"))

    def _end(self, obj: dict[str, Any], state: StreamState) -> dict[str, Any]:
        self._ended = True
        response: dict[str, Any] = obj.get("response") or {}
        state.identify(response.get("model"), response.get("id"))
        usage = response.get("usage")
        if usage:
            state.usage(usage.get("input_tokens"), usage.get("output_tokens"))
        state.terminal()
        return response

    def _on_completed(self, obj: dict[str, Any], state: StreamState) -> None:
        self._end(obj, state)
        if any(not call.closed for call in self._calls.values()):
            state.protocol_violation("call_open_at_terminal")
        state.stop("completed", True)

    def _on_incomplete(self, obj: dict[str, Any], state: StreamState) -> None:
        response = self._end(obj, state)
        details = response.get("incomplete_details") or {}
        reason = details.get("reason")
        state.stop(reason if type(reason) is str else "incomplete", False)

    def _on_failed(self, obj: dict[str, Any], state: StreamState) -> None:
        response = self._end(obj, state)
        error = response.get("error") or {}
        state.provider_error(error.get("code") if type(error) is dict else None)
        state.stop("failed", False)

    def _on_error(self, obj: dict[str, Any], state: StreamState) -> None:
        self._ended = True
        state.provider_error(obj.get("code"))
        state.terminal()
