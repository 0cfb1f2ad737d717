"""A route written the way a user's own package would write it: public names only.

Cohere's v2 chat (``POST /v2/chat``) is not a built-in contract. This module teaches it to
otelsse with one ``Route`` subclass and nothing else; ``test_user_route.py`` registers it and
checks that detection, sniffing and classification all pick it up.

Contract (docs.cohere.com, "Streaming"): named events with hyphens; text in ``content-delta``,
tool calls opened by ``tool-call-start`` (id and name), argument fragments in
``tool-call-delta`` and closed by ``tool-call-end``, all keyed by ``index``; ``message-end``
carries the finish reason and the usage, then ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from otelsse import SSEEvent
from otelsse.routes import Request, Route, StreamState, ToolCall, handles, parse_object

__all__ = ["CohereChatRoute"]


class CohereChatRoute(Route):
    name: ClassVar[str] = "cohere.chat"
    provider: ClassVar[str | None] = "cohere"
    success_stops: ClassVar[frozenset[str]] = frozenset({"COMPLETE", "STOP_SEQUENCE", "TOOL_CALL"})
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v2/chat")

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/v2/chat")

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event == "message-start"

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, ToolCall] = {}

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.data == "[DONE]":  # before message-end: the end marker without the end
            state.anomaly("done_before_message_end")
            return None
        payload = parse_object(event, state)
        if payload is None:
            return None
        kind = payload.get("type")
        return (kind, payload) if isinstance(kind, str) else ("", payload)

    @handles("message-start", "tool-plan-delta", "content-start", "content-end")
    def _on_progress(self, payload: dict[str, Any], state: StreamState) -> None:
        pass

    @handles("content-delta")
    def _on_text(self, payload: dict[str, Any], state: StreamState) -> None:
        state.text(payload["index"], payload["delta"]["message"]["content"]["text"])

    @handles("tool-call-start")
    def _on_call_start(self, payload: dict[str, Any], state: StreamState) -> None:
        call = payload["delta"]["message"]["tool_calls"]
        opened = state.open_tool(call.get("id"), call["function"].get("name"))
        self._calls[payload["index"]] = opened
        state.tool_args(opened, call["function"].get("arguments") or "")

    @handles("tool-call-delta")
    def _on_call_delta(self, payload: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(payload["index"])
        if call is None:
            state.protocol_violation("arguments_without_call")
            return
        fragment = payload["delta"]["message"]["tool_calls"]["function"]["arguments"]
        state.tool_args(call, fragment)

    @handles("tool-call-end")
    def _on_call_end(self, payload: dict[str, Any], state: StreamState) -> None:
        call = self._calls.pop(payload["index"], None)
        if call is None:
            state.protocol_violation("end_without_call")
        else:
            state.close_tool(call)

    @handles("message-end")
    def _on_message_end(self, payload: dict[str, Any], state: StreamState) -> None:
        delta = payload.get("delta") or {}
        reason = delta.get("finish_reason")
        if isinstance(reason, str):
            state.stop(reason, reason in self.success_stops)
        tokens = (delta.get("usage") or {}).get("tokens") or {}
        state.usage(tokens.get("input_tokens"), tokens.get("output_tokens"))
        if self._calls:
            state.protocol_violation("call_open_at_message_end")
        self.ended = True
        state.terminal()

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        if event.data != "[DONE]":  # the one marker that follows message-end
            super().after_terminal(event, state)
