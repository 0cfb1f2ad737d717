"""Amazon Bedrock ConverseStream (``POST /model/{modelId}/converse-stream``), an AWS event stream.

The body is ``application/vnd.amazon.eventstream`` (``_core.eventstream``): each frame an event
of the ``ConverseStreamOutput`` union, named by ``:event-type`` or ``:exception-type``, whose
payload is the member's JSON object (AWS, Amazon Bedrock API reference, "ConverseStream",
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html and
"ConverseStreamOutput"; botocore's service model ``botocore/data/bedrock-runtime/2023-09-30/
service-2.json``, shapes ``ConverseStreamOutput``, ``StopReason``, ``ContentBlockDeltaEvent``).

Event flow: ``messageStart``; per content block, keyed by ``contentBlockIndex``, an optional
``contentBlockStart`` (sent for ``toolUse`` blocks, with ``toolUseId`` and ``name``), any number
of ``contentBlockDelta`` (``text``, ``reasoningContent``, or a ``toolUse.input`` fragment of the
JSON arguments), a ``contentBlockStop``; then ``messageStop`` with ``stopReason``; then
``metadata`` (``usage``, ``metrics``). A text block needs no start: its first delta opens it.

Terminal rule: ``metadata`` after a ``messageStop``. ``messageStop`` with every block closed
is the answer's end (a clean EOF there is ``terminal_missing``); ``metadata`` alone is no
evidence of completion (a stream cut before ``messageStop`` is truncated whatever came
before). Success stops: ``end_turn``, ``tool_use``, ``stop_sequence``; every other documented
stop (``max_tokens``, ``guardrail_intervened``, ``content_filtered``,
``model_context_window_exceeded``, ``malformed_model_output``, ``malformed_tool_use``) is a
well-formed stream whose answer the caller cannot take as finished: ``incomplete``.

Errors: the union's exception members arrive as exception frames (``_bedrock.on_exception``):
``throttlingException`` is the caller's quota (``rate_limited``, as the same error at the
headers, HTTP 429, is); the others (``internalServerException``, ``modelStreamErrorException``,
``validationException``, ``serviceUnavailableException``, and an unmodelled ``error`` frame)
are provider errors, the exception's name their code.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.eventstream import EVENT_STREAM_MEDIA_TYPE
from .._core.state import FUNCTION, SERVER, StreamState, ToolCall
from ._base import Redaction, Request, Route, handles, parse_object
from ._bedrock import PROVIDER, bedrock_model, on_exception

__all__ = ["BedrockConverseRoute"]


class BedrockConverseRoute(Route):
    name: ClassVar[str] = "bedrock.converse_stream"
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = frozenset({"end_turn", "tool_use", "stop_sequence"})
    proves_item_end: ClassVar[bool] = True
    example_request: ClassVar[tuple[str, str] | None] = (
        "POST",
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
    )
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"stopReason", "role", "type"}),
        ids=frozenset({"toolUseId"}),
        numbers=frozenset({"contentBlockIndex"}),
        usage=frozenset({"usage"}),
        fragments=frozenset({"input"}),  # contentBlockDelta's toolUse.input
    )

    _OPERATION = "/converse-stream"

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and bedrock_model(request.path, cls._OPERATION) is not None

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return True

    @classmethod
    def url_model(cls, request: Request) -> str | None:
        return bedrock_model(request.path, cls._OPERATION)

    def __init__(self) -> None:
        super().__init__()
        self._open_blocks: set[int] = set()
        self._calls: dict[int, ToolCall] = {}
        self._stopped = False

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if on_exception(event, state):
            self.ended = True
            return None
        obj = parse_object(event, state)
        return None if obj is None else (event.event, obj)

    def _block(self, obj: dict[str, Any], state: StreamState) -> int | None:
        """The event's content block, opened now if it is new; None when a ceiling stops it."""
        index = obj["contentBlockIndex"]
        if type(index) is not int:
            raise TypeError("contentBlockIndex")
        if index not in self._open_blocks:
            if self._stopped:
                state.protocol_violation("block_after_message_stop")
            if not state.open_part(index):
                return None
            self._open_blocks.add(index)
        return index

    @handles("messageStart")
    def _on_message_start(self, obj: dict[str, Any], state: StreamState) -> None:
        pass  # its role is all it says

    @handles("contentBlockStart")
    def _on_block_start(self, obj: dict[str, Any], state: StreamState) -> None:
        if obj["contentBlockIndex"] in self._open_blocks:
            state.protocol_violation("block_reopened")
            return
        index = self._block(obj, state)
        tool = (obj.get("start") or {}).get("toolUse")
        if index is not None and tool is not None:
            # A tool the provider runs itself (Nova's code interpreter) is not the client's.
            kind = SERVER if tool.get("type") == "server_tool_use" else FUNCTION
            self._calls[index] = state.open_tool(tool.get("toolUseId"), tool.get("name"), {}, kind)

    @handles("contentBlockDelta")
    def _on_block_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        index = self._block(obj, state)
        if index is None:
            return
        delta = obj["delta"]
        if "text" in delta:
            state.text(index, delta["text"])
        elif "toolUse" in delta:
            call = self._calls.get(index)
            if call is None:
                state.protocol_violation("input_delta_outside_tool_block")
            else:
                state.tool_args(call, delta["toolUse"]["input"])
        elif "reasoningContent" in delta:
            state.text(index, delta["reasoningContent"].get("text", ""), reasoning=True)

    @handles("contentBlockStop")
    def _on_block_stop(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj["contentBlockIndex"]
        if index not in self._open_blocks:
            state.protocol_violation("block_stop_without_start")
        else:
            self._open_blocks.discard(index)
            state.close_part()
        call = self._calls.pop(index, None)
        if call is not None:
            state.close_tool(call)

    @handles("messageStop")
    def _on_message_stop(self, obj: dict[str, Any], state: StreamState) -> None:
        reason = obj["stopReason"]
        if type(reason) is not str:
            raise TypeError("stopReason")
        self._stopped = True
        # With every block closed, only metadata, which carries no answer, is left.
        state.final_stop(reason, reason in self.success_stops, open_parts=bool(self._open_blocks))

    @handles("metadata")
    def _on_metadata(self, obj: dict[str, Any], state: StreamState) -> None:
        usage = obj.get("usage") or {}
        state.usage(usage.get("inputTokens"), usage.get("outputTokens"))
        if self._stopped:
            self.ended = True
            state.terminal()
        else:
            state.anomaly("metadata_before_message_stop")
