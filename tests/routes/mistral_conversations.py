"""A route written the way a user's own package would write it: public names only.

Mistral's Conversations API (``POST /v1/conversations`` with ``"stream": true``, and the same
stream from appending to a conversation, ``POST /v1/conversations/{id}``, or restarting it,
``.../restart``) is not a built-in contract. This module teaches it to otelsse with one ``Route``
subclass and nothing else; ``test_user_route.py`` registers it and checks that detection,
sniffing and classification all pick it up, and ``tests/proxy/test_strict.py`` that strict mode
cuts a refused stream of a route that declares no error event.

Contract, as the mistralai SDK reads it (mistralai/client-python ``src/mistralai/models/``
``conversationevents.py``: each event is ``event: <type>`` and data of the same ``type``;
``responsestartedevent.py``, ``messageoutputevent.py``, ``functioncallevent.py``,
``responsedoneevent.py``, ``responseerrorevent.py``, ``conversationusageinfo.py``):
``conversation.response.started`` first; text in ``message.output.delta`` (``content``, a string
or a chunk object), keyed by ``output_index``; a function call's arguments in
``function.call.delta`` fragments keyed by its ``tool_call_id`` (each repeats ``name``); the
built-in tools' ``tool.execution.*`` and ``agent.handoff.*`` progress; and the end:
``conversation.response.done`` with ``usage`` (``prompt_tokens``, ``completion_tokens``), or
``conversation.response.error`` (``message``, ``code``). No event closes a call on its own, so
the calls close at the done event; no event carries a finish reason either, so a stream is
complete at its done event and has no stop reason.
"""

from __future__ import annotations

from typing import Any, ClassVar

from otelsse import SSEEvent
from otelsse.routes import Request, Route, StreamState, ToolCall, handles, parse_object

__all__ = ["MistralConversationsRoute"]


class MistralConversationsRoute(Route):
    name: ClassVar[str] = "mistral.conversations"
    provider: ClassVar[str | None] = "mistral_ai"
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1/conversations")

    @classmethod
    def matches(cls, request: Request) -> bool:
        path = request.path
        return request.method == "POST" and (
            path.endswith("/v1/conversations") or "/v1/conversations/" in path
        )

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event == "conversation.response.started"

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[str, ToolCall] = {}

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        payload = parse_object(event, state)
        if payload is None:
            return None
        kind = payload.get("type")
        return (kind, payload) if isinstance(kind, str) else ("", payload)

    @handles(
        "conversation.response.started",
        "tool.execution.started",
        "tool.execution.done",
        "agent.handoff.started",
        "agent.handoff.done",
    )
    def _on_progress(self, payload: dict[str, Any], state: StreamState) -> None:
        pass

    @handles("message.output.delta")
    def _on_text(self, payload: dict[str, Any], state: StreamState) -> None:
        content = payload["content"]
        text = content if isinstance(content, str) else content.get("text", "")
        state.text(payload.get("output_index", 0), text)

    @handles("function.call.delta")
    def _on_call_delta(self, payload: dict[str, Any], state: StreamState) -> None:
        key = payload["tool_call_id"]
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = state.open_tool(key, payload.get("name"))
        state.tool_args(call, payload["arguments"])

    @handles("conversation.response.done")
    def _on_done(self, payload: dict[str, Any], state: StreamState) -> None:
        for call in self._calls.values():
            state.close_tool(call)
        usage = payload.get("usage") or {}
        state.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))
        self.ended = True
        state.terminal()

    @handles("conversation.response.error")
    def _on_error(self, payload: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        state.provider_error(payload.get("code"))
