"""Anthropic Messages (``POST /v1/messages``; also Vertex ``:streamRawPredict`` and Bedrock Mantle).

Terminal rule: ``message_stop`` after a ``message_delta`` that carried a ``stop_reason``;
``event: error`` is a provider error (Anthropic, "Streaming Messages", event flow and error
events: https://docs.anthropic.com/en/docs/build-with-claude/streaming; stop reasons:
https://docs.anthropic.com/en/api/handling-stop-reasons). Content blocks are keyed by
``index``; a tool block's input is the concatenated ``partial_json``, and an empty buffer means
the ``input`` from ``content_block_start`` (``{}``), not invalid JSON. Every block must be
closed before a ``message_delta`` with a success stop; with fine-grained tool streaming,
``max_tokens`` may stop the message inside a ``tool_use`` block without its
``content_block_stop`` (documented: "it is possible that the stream will end mid-parameter"),
so under a non-success stop an open block is an anomaly and its call stays unfinished.
``server_tool_use`` and ``mcp_tool_use`` blocks are calls Anthropic runs itself. Once that
``message_delta`` arrived with every block closed, only ``message_stop`` is left: a clean EOF
there is ``terminal_missing``, and an application that closes the stream there (some SDKs stop
at the final stop reason) stopped after the answer ended, not ``cancelled``.

Sniffing: only events this contract alone sends prove it; ``ping`` does not (the legacy Text
Completions API, ``POST /v1/complete`` with ``event: completion``, sends it too, and that path is
disowned: read as generic, never guessed).

Strict mode's error event (``strict_error_event``): the documented error event, ``event: error``
with ``{"type": "error", "error": {"type": "api_error", "message"}}`` ("Streaming Messages", error
events, above; ``api_error``, "an unexpected error has occurred internal to Anthropic's
systems", is the one of the documented error types, https://docs.anthropic.com/en/api/errors,
that says the server failed; the error object has no code, so the message names the outcome).
The official SDKs raise on every ``event: error``: anthropic-sdk-python
``src/anthropic/_streaming.py`` ``Stream.__stream__`` (``if sse.event == "error": raise
self._client._make_status_error(...)``) and anthropic-sdk-typescript ``src/core/streaming.ts``
``Stream.fromSSEResponse`` (``if (sse.event === 'error') throw new APIError(...)``); this route
judges it ``provider_error``.

Speed: the hot event, a ``content_block_delta``, is read first through its typed shape
(``_BlockDelta``, with msgspec) straight into the state; any text that is not exactly that shape
is read by ``loads`` and the dispatch table, which stay the definition.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core import json as core_json
from .._core.events import SSEEvent
from .._core.json import TypedShape, typed_decoder
from .._core.state import FUNCTION, SERVER, StreamState, ToolCall
from ._base import Redaction, Request, Route, handles, parse_object, sse_event

__all__ = ["AnthropicMessagesRoute"]

# Content-block type -> the kind of tool call it opens.
_TOOL_BLOCK_KINDS = {"tool_use": FUNCTION, "server_tool_use": SERVER, "mcp_tool_use": SERVER}
# The event types whose name or ``type`` proves this contract when sniffing.
_SNIFFED_TYPES = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "message_delta"}
)


class _Delta(TypedShape):
    """A ``content_block_delta``'s delta: its ``type`` and the piece each known type carries."""

    type: str
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None  # a thinking block's, read by nobody


class _BlockDelta(TypedShape):
    """The hot event, every key it may hold (an unknown one leaves it to the generic reading)."""

    type: str
    index: int
    delta: _Delta


_read_block_delta = typed_decoder(_BlockDelta)


class AnthropicMessagesRoute(Route):
    name: ClassVar[str] = "anthropic.messages"
    provider: ClassVar[str | None] = "anthropic"
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = frozenset({"end_turn", "stop_sequence", "tool_use"})
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1/messages")
    proves_item_end: ClassVar[bool] = True
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"type", "role", "model", "stop_reason"}),
        # its error code is the error's ``type``, a word
        ids=frozenset({"id", "tool_use_id"}),
        numbers=frozenset({"index"}),
        usage=frozenset({"usage"}),
        fragments=frozenset({"partial_json"}),
        opaque=frozenset({"input"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        path = request.path
        return request.method == "POST" and (
            path.endswith("/messages")
            or ("/publishers/anthropic/" in path and path.endswith(":streamRawPredict"))
        )

    @classmethod
    def disowns(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/v1/complete")

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return request.path.endswith(":streamRawPredict")  # Vertex AI's streaming endpoint

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event in _SNIFFED_TYPES

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("type") in _SNIFFED_TYPES

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        # The documented error event (the module docstring cites the docs and SDKs); its error
        # object has a type and a message only.
        return sse_event(
            {"type": "error", "error": {"type": "api_error", "message": message}}, "error"
        )

    def __init__(self) -> None:
        super().__init__()
        self._open_blocks: set[int] = set()
        self._calls: dict[int, ToolCall] = {}
        # A subclass with its own delta handler reads every delta through it. (A flag, not the
        # reader itself: a monitor, and so its route, can be pickled.)
        self._typed = (
            _read_block_delta is not None
            and core_json.typed_decoding
            and self.handlers.get("content_block_delta") is AnthropicMessagesRoute._on_block_delta
        )

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        name: Any = event.event
        if name == "ping":
            return None  # keepalive
        if (
            name == "content_block_delta"
            and self._typed  # so the reader exists
            and self._on_typed_delta(_read_block_delta(event.data), state)  # type: ignore[misc]
        ):
            return None
        obj = parse_object(event, state)
        if obj is None:
            return None
        kind = obj.get("type")
        if name == "message":
            name = kind  # no ``event:`` line: the data's type is all there is
        elif kind != name:
            state.anomaly("event_name_mismatch")
        # A non-string ``type`` (a list, an object) is a kind no handler knows.
        return (name, obj) if type(name) is str else ("", obj)

    @handles("content_block_start")
    def _on_block_start(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj["index"]
        if index in self._open_blocks:
            state.protocol_violation("block_reopened")
        elif not state.open_part(index):
            return
        self._open_blocks.add(index)
        block = obj["content_block"]
        kind = _TOOL_BLOCK_KINDS.get(block.get("type"))
        if kind is not None:
            empty_means = block.get("input")
            self._calls[index] = state.open_tool(
                block.get("id"),
                block.get("name"),
                {} if empty_means is None else empty_means,
                kind,
            )

    @handles("content_block_delta")
    def _on_block_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj["index"]
        if index not in self._open_blocks:
            state.protocol_violation("delta_without_block")
            return
        delta = obj["delta"]
        kind = delta.get("type")
        if kind == "text_delta":
            state.text(index, delta["text"])
        elif kind == "input_json_delta":
            call = self._calls.get(index)
            if call is None:
                state.protocol_violation("input_delta_outside_tool_block")
            else:
                state.tool_args(call, delta["partial_json"])
        elif kind == "thinking_delta":
            state.text(index, delta["thinking"], reasoning=True)

    def _on_typed_delta(self, found: _BlockDelta | None, state: StreamState) -> bool:
        """A ``content_block_delta`` read through its typed shape, as ``_on_block_delta`` reads
        it; False, with nothing done, when the data was not exactly that shape (None) or its
        piece is missing or null (the generic reading then judges it)."""
        if found is None or found.type != "content_block_delta":
            return False  # another shape, or a payload type that contradicts the event name
        delta = found.delta
        kind = delta.type
        if kind == "text_delta":
            piece = delta.text
        elif kind == "input_json_delta":
            piece = delta.partial_json
        elif kind == "thinking_delta":
            piece = delta.thinking
        else:
            piece = ""  # a kind this route does not read
        if piece is None:
            return False
        index = found.index
        if index not in self._open_blocks:
            state.protocol_violation("delta_without_block")
        elif kind == "text_delta":
            state.text(index, piece)
        elif kind == "input_json_delta":
            call = self._calls.get(index)
            if call is None:
                state.protocol_violation("input_delta_outside_tool_block")
            else:
                state.tool_args(call, piece)
        elif kind == "thinking_delta":
            state.text(index, piece, reasoning=True)
        return True

    @handles("content_block_stop")
    def _on_block_stop(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj["index"]
        if index not in self._open_blocks:
            state.protocol_violation("block_stop_without_start")
        self._open_blocks.discard(index)
        call = self._calls.pop(index, None)
        if call is not None:
            state.close_tool(call)

    @handles("message_start")
    def _on_message_start(self, obj: dict[str, Any], state: StreamState) -> None:
        message = obj["message"]
        state.identify(message.get("model"), message.get("id"))
        usage = message.get("usage") or {}
        # Its output_tokens is a placeholder (1): only message_delta's cumulative count is the
        # answer's, so a stream cut before it reports no output tokens rather than one.
        state.usage(usage.get("input_tokens"), None)

    @handles("message_delta")
    def _on_message_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        reason = (obj.get("delta") or {}).get("stop_reason")
        if reason is not None:
            if type(reason) is not str:
                state.payload_invalid()
                return
            if reason == "refusal":
                state.refused_without_text()
            # With every block closed, only message_stop, which carries nothing, is left.
            state.final_stop(
                reason, reason in self.success_stops, open_parts=bool(self._open_blocks)
            )
        usage = obj.get("usage") or {}
        state.usage(usage.get("input_tokens"), usage.get("output_tokens"))

    @handles("message_stop")
    def _on_message_stop(self, obj: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        if state.stop_success is None:
            state.protocol_violation("message_stop_without_stop_reason")
        state.terminal()

    @handles("error")
    def _on_error(self, obj: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        error = obj.get("error")
        state.provider_error(error.get("type") if type(error) is dict else None)
