"""Amazon Bedrock InvokeModelWithResponseStream
(``POST /model/{modelId}/invoke-with-response-stream``).

The body is an AWS event stream (``_core.eventstream``) of the ``ResponseStream`` union: each
``chunk`` event's payload is a ``PayloadPart``, ``{"bytes": "<base64>"}``, whose bytes are one
event of the model provider's own streaming format, and its exception members arrive as
exception frames (``_bedrock.on_exception``) (AWS, Amazon Bedrock API reference,
"InvokeModelWithResponseStream" and "PayloadPart",
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html).

The decoded events are judged by their provider's own contract, chosen by the first one:

- **Anthropic Claude** (Anthropic, "Anthropic Claude Messages API" in the Amazon Bedrock user
  guide, https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html):
  Messages events (``message_start`` ... ``message_stop``), judged by the Anthropic route's
  rules, terminal and stops included (``anthropic_messages.py``). Bedrock adds its
  ``amazon-bedrock-invocationMetrics`` object to the last event: no event of the contract.
- **Any other model family** (Titan, Llama, Mistral, Cohere, Nova: each its own shape): no
  terminal rule is written here yet, so a clean EOF is ``eof_unverified``, never ``complete``;
  exceptions, cuts inside a frame and corrupt frames are judged all the same.

A chunk whose payload is not that (not JSON, no base64 ``bytes``, bytes that are not UTF-8
JSON) is a payload error.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import ClassVar

from .._core.events import SSEEvent
from .._core.eventstream import EVENT_STREAM_MEDIA_TYPE
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState
from ._base import Request, Route, parse_object
from ._bedrock import PROVIDER, bedrock_model, on_exception
from .anthropic_messages import AnthropicMessagesRoute
from .generic import GenericRoute

__all__ = ["BedrockInvokeRoute"]

_OPERATION = "/invoke-with-response-stream"
_NAME = "bedrock.invoke_model_with_response_stream"


class _ClaudeOnBedrock(AnthropicMessagesRoute):
    """Claude's Messages events inside Bedrock's chunks: the Anthropic route's rules."""

    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER


class _OtherModelOnBedrock(GenericRoute):
    """A model family whose stream rules are not written yet: no terminal is known."""

    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER
    operation: ClassVar[str | None] = None


class BedrockInvokeRoute(Route):
    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = AnthropicMessagesRoute.success_stops
    proves_item_end: ClassVar[bool] = True
    example_request: ClassVar[tuple[str, str] | None] = (
        "POST",
        f"/model/anthropic.claude-3-haiku-20240307-v1%3A0{_OPERATION}",
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and bedrock_model(request.path, _OPERATION) is not None

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return True

    @classmethod
    def url_model(cls, request: Request) -> str | None:
        return bedrock_model(request.path, _OPERATION)

    def __init__(self) -> None:
        super().__init__()
        # The contract of the model's own events, once the first one told it.
        self._family: Route | None = None

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        family = self._family
        if self.ended or (family is not None and family.ended):
            self.after_terminal(event, state)
            return
        if on_exception(event, state):
            self.ended = True
            return
        if event.event != "chunk":
            state.unknown()
            return
        inner = self._unwrap(event, state)
        if inner is None:
            return
        if family is None:
            family = self._family = self._choose(inner.data)
        family.on_event(inner, state)

    @staticmethod
    def _unwrap(event: SSEEvent, state: StreamState) -> SSEEvent | None:
        """The model's own event inside a chunk, or None after reporting a payload error."""
        part = parse_object(event, state)
        if part is None:
            return None
        encoded = part.get("bytes")
        try:
            if type(encoded) is not str:
                raise TypeError("bytes")
            text = b64decode(encoded, validate=True).decode("utf-8")
        except (TypeError, binascii.Error, UnicodeDecodeError):
            state.payload_invalid()
            return None
        return SSEEvent("message", text)

    @staticmethod
    def _choose(data: str) -> Route:
        """The family whose events these are, from the first one."""
        try:
            payload = loads(data)
        except JSONDecodeError:
            payload = None  # the family's reading reports it
        if type(payload) is dict and AnthropicMessagesRoute.sniff_payload(payload):
            return _ClaudeOnBedrock()
        return _OtherModelOnBedrock()

    def on_close(self, state: StreamState) -> None:
        if self._family is not None:
            self._family.on_close(state)

    def resolved(self) -> Route:
        return self if self._family is None else self._family
