"""Cohere v2 chat (``POST /v2/chat`` with ``"stream": true``).

The contract: named events whose ``event:`` line repeats the data's ``type`` (the cohere SDK
dispatches on the ``type``): ``message-start`` (the response ``id``), ``content-start`` /
``content-delta`` / ``content-end`` (text or thinking, keyed by ``index``), ``tool-plan-delta``
(the plan the model writes before calling tools), ``tool-call-start`` (the call's ``id`` and
``function.name``) / ``tool-call-delta`` (a ``function.arguments`` fragment) / ``tool-call-end``,
keyed by ``index``, ``citation-start`` / ``citation-end``, ``debug``, and ``message-end`` with
``delta.finish_reason``, ``delta.error`` and ``delta.usage``. Sources: Cohere, "A Guide to
Streaming Responses" (https://docs.cohere.com/v2/docs/streaming) and "Streaming for tool use"
(https://docs.cohere.com/v2/docs/tool-use-streaming); the shapes and the finish reasons in
cohere-ai/cohere-python 7.x ``src/cohere/v2/types/v2chat_stream_response.py``,
``src/cohere/types/chat_finish_reason.py``, ``chat_message_end_event_delta.py``, ``usage.py``.

Terminal rule: ``message-end``, "the final event in the stream indicating the end of the
streamed response. Only one message-end event will be emitted" (the streaming guide above).
The API then sends ``data: [DONE]`` (no ``event:`` line; the recording in
``tests/fixtures/real/cohere-v2-chat-tool-call.sse``), which the documentation never names:
it is optional here. After ``message-end`` it is the one marker expected (not an anomaly); a
stream that ends cleanly without it is whole (``message-end`` carries everything the answer
has left: its stop and its usage). Before ``message-end`` it is a protocol error: the SDK stops
reading at it (``chat_stream``'s loop in ``src/cohere/v2/raw_client.py``: ``if _sse.data ==
"[DONE]": return``), so the application would take an answer without its end for a whole one.

Success stops: ``COMPLETE``, ``STOP_SEQUENCE`` and ``TOOL_CALL``. ``MAX_TOKENS`` (and any
other reason a newer API sends: ``ChatFinishReason`` is an open union) is ``incomplete``.
``ERROR`` is a provider error, and so is ``TIMEOUT``: it is the provider saying its generation
timed out, not the client's read deadline that otelsse's ``timeout`` outcome means, so the
stream is ``provider_error`` with ``otelsse.stop_reason`` (and the error code) ``TIMEOUT``. A
``delta.error`` ("an error message if an error occurred during the generation") makes any
``message-end`` a provider error; the message is content and is never kept, the finish reason
is its code. Every content block and tool call must be closed before a success stop (a
protocol error otherwise); under another stop one still open is an anomaly and its call stays
unfinished, as Anthropic's ``max_tokens`` may leave one.

Usage: ``gen_ai.usage.input_tokens`` / ``output_tokens`` come from ``usage.tokens``, "the
number of tokens used as input to the model" / "produced by the model" (``usage_tokens.py``),
not ``usage.billed_units``, the billed subset (62 of 968 input tokens in the recording): the
GenAI conventions define the input count as "the number of tokens used in the GenAI input",
which "SHOULD include all types of input tokens, including cached tokens"
(open-telemetry/semantic-conventions-genai ``model/gen-ai/registry.yaml``,
``gen_ai.usage.input_tokens``). The SDK types the counts as floats; the API sends integers.

The cohere SDK raises on no event in the stream: it yields a ``message-end`` with ``ERROR``
like any other, and logs and skips data it cannot read, so this route declares no strict-mode
error event: the proxy's strict mode cuts a refused stream's connection instead, which the SDK
raises as the transport error it is (``httpx.RemoteProtocolError``). Data that is not a JSON
object is a payload error here, although the SDK skips it.

Recognition: ``POST`` to a path ending ``/v2/chat`` (the SDK posts ``v2/chat`` under its base
URL, https://api.cohere.com). Cohere's v1 chat streams NDJSON (``application/stream+json``),
not SSE, and is left alone.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.state import StreamState, ToolCall
from ._base import Redaction, Request, Route, handles, parse_object

__all__ = ["CohereChatRoute"]

#: The sentinel the API sends after ``message-end`` (as the SDK compares it: the whole data).
_DONE = "[DONE]"
#: The event types only this contract sends (hyphenated; Anthropic's are snake_case).
_SNIFFED_TYPES = frozenset(
    {
        "message-start",
        "content-start",
        "content-delta",
        "content-end",
        "tool-plan-delta",
        "tool-call-start",
        "tool-call-delta",
        "tool-call-end",
        "citation-start",
        "citation-end",
        "message-end",
    }
)
#: Finish reasons by which the provider reports a failed generation.
_ERROR_STOPS = frozenset({"ERROR", "TIMEOUT"})
#: The key of the tool plan's text: the plan has no index, and content indexes start at 0.
_TOOL_PLAN = -1


def _count(value: Any) -> Any:
    """A token count as an ``int``: the SDK types them as floats, so ``62.0`` counts as 62."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


class CohereChatRoute(Route):
    name: ClassVar[str] = "cohere.chat"
    provider: ClassVar[str | None] = "cohere"
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = frozenset({"COMPLETE", "STOP_SEQUENCE", "TOOL_CALL"})
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v2/chat")
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"type", "role", "finish_reason"}),
        ids=frozenset({"id"}),
        numbers=frozenset({"index"}),
        usage=frozenset({"usage"}),
        fragments=frozenset({"arguments"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/v2/chat")

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event in _SNIFFED_TYPES

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("type") in _SNIFFED_TYPES

    def __init__(self) -> None:
        super().__init__()
        self._open_blocks: set[int] = set()
        self._calls: dict[int, ToolCall] = {}
        self._done_seen = False

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.data == _DONE:
            # Before message-end (after it, ``after_terminal`` takes it): the SDK stops here.
            self._done_seen = True
            self.ended = True
            state.protocol_violation("done_before_message_end")
            return None
        payload = parse_object(event, state)
        if payload is None:
            return None
        kind = payload.get("type")
        if event.event != "message" and event.event != kind:
            state.anomaly("event_name_mismatch")
        # A non-string ``type`` (a list, an object) is a kind no handler knows.
        return (kind, payload) if type(kind) is str else ("", payload)

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        if event.data == _DONE and not self._done_seen:
            self._done_seen = True  # the one marker that follows message-end
            return
        super().after_terminal(event, state)

    @handles("message-start")
    def _on_message_start(self, payload: dict[str, Any], state: StreamState) -> None:
        state.identify(None, payload.get("id"))

    @handles("content-start", "content-delta")
    def _on_content(self, payload: dict[str, Any], state: StreamState) -> None:
        index = payload["index"]
        if payload["type"] == "content-start":
            if index in self._open_blocks:
                state.protocol_violation("content_reopened")
            elif not state.open_part(index):
                return
            self._open_blocks.add(index)
        elif index not in self._open_blocks:
            state.protocol_violation("content_delta_without_start")
            return
        content = payload["delta"]["message"]["content"]
        text = content.get("text")
        if text is not None:
            state.text(index, text)
        thinking = content.get("thinking")
        if thinking is not None:
            state.text(index, thinking, reasoning=True)

    @handles("content-end")
    def _on_content_end(self, payload: dict[str, Any], state: StreamState) -> None:
        index = payload["index"]
        if index not in self._open_blocks:
            state.protocol_violation("content_end_without_start")
        self._open_blocks.discard(index)

    @handles("tool-plan-delta")
    def _on_tool_plan(self, payload: dict[str, Any], state: StreamState) -> None:
        # "A chain-of-thought style reflection and plan" (the API reference): reasoning text.
        state.text(_TOOL_PLAN, payload["delta"]["message"]["tool_plan"], reasoning=True)

    @handles("tool-call-start")
    def _on_call_start(self, payload: dict[str, Any], state: StreamState) -> None:
        index = payload["index"]
        if type(index) is not int:
            state.payload_invalid()
            return
        if index in self._calls:
            state.protocol_violation("tool_call_reopened")
            return
        # ``tool_calls`` is one call here, not a list (``ChatToolCallStartEventDeltaMessage``).
        call = payload["delta"]["message"]["tool_calls"]
        function = call["function"]
        opened = state.open_tool(call.get("id"), function.get("name"))
        self._calls[index] = opened
        state.tool_args(opened, function.get("arguments") or "")

    @handles("tool-call-delta")
    def _on_call_delta(self, payload: dict[str, Any], state: StreamState) -> None:
        call = self._calls.get(payload["index"])
        if call is None:
            state.protocol_violation("tool_delta_without_start")
            return
        state.tool_args(call, payload["delta"]["message"]["tool_calls"]["function"]["arguments"])

    @handles("tool-call-end")
    def _on_call_end(self, payload: dict[str, Any], state: StreamState) -> None:
        call = self._calls.pop(payload["index"], None)
        if call is None:
            state.protocol_violation("tool_end_without_start")
        else:
            state.close_tool(call)

    @handles("citation-start", "citation-end", "debug")
    def _on_ignored(self, payload: dict[str, Any], state: StreamState) -> None:
        pass  # citations point into the text; ``debug`` echoes the prompt: nothing to judge

    @handles("message-end")
    def _on_message_end(self, payload: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        state.terminal()
        delta = payload.get("delta") or {}
        tokens = (delta.get("usage") or {}).get("tokens") or {}
        state.usage(_count(tokens.get("input_tokens")), _count(tokens.get("output_tokens")))
        reason, error = delta.get("finish_reason"), delta.get("error")
        if not (reason is None or type(reason) is str) or not (error is None or type(error) is str):
            state.payload_invalid()
            return
        if reason is not None:
            open_parts = bool(self._open_blocks or self._calls)
            state.final_stop(reason, reason in self.success_stops, open_parts=open_parts)
        if reason in _ERROR_STOPS or error:
            state.provider_error(reason if reason in _ERROR_STOPS else None)
        elif reason is None:
            state.protocol_violation("message_end_without_finish_reason")
