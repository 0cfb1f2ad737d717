"""Amazon Bedrock InvokeModelWithResponseStream
(``POST /model/{modelId}/invoke-with-response-stream``).

The body is an AWS event stream (``_core.eventstream``) of the ``ResponseStream`` union: each
``chunk`` event's payload is a ``PayloadPart``, ``{"bytes": "<base64>"}``, whose bytes are one
event of the model provider's own streaming format, and its exception members arrive as
exception frames (``_bedrock.on_exception``) (AWS, Amazon Bedrock API reference,
"InvokeModelWithResponseStream" and "PayloadPart",
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html).

The decoded events are judged by their model family's own contract, told by the first one:

- **Anthropic Claude** (AWS, Amazon Bedrock user guide, "Anthropic Claude Messages API",
  https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html):
  Messages events (``message_start`` ... ``message_stop``), judged by the Anthropic route's
  rules, terminal and stops included (``anthropic_messages.py``).
- **Amazon Nova** (user guide, "Amazon Nova", streaming ``InvokeModelWithResponseStream``):
  each event is one ConverseStream event wrapped in an object named by its type
  (``{"messageStart": {...}}`` ... ``{"metadata": {...}}``), judged by the ConverseStream
  route's rules (``bedrock_converse.py``).
- **Meta Llama** (user guide, "Meta Llama models", model-parameters-meta.html): objects with
  ``generation`` and ``stop_reason``, null until the last (``stop`` success, ``length`` not).
- **Amazon Titan Text** (user guide, "Amazon Titan Text models", model-parameters-titan-text.html):
  objects with ``outputText`` and ``completionReason``, null until the last (``FINISH``, and
  ``FINISHED`` as the guide spells it, or ``STOP_CRITERIA_MET`` success; ``LENGTH``,
  ``CONTENT_FILTERED`` not).
- **Any other family** (Mistral, Cohere: no recording to check a rule against): no terminal
  rule is known, so a clean EOF is ``eof_unverified``, never ``complete``; exceptions, cuts
  inside a frame and corrupt frames are judged all the same.

Bedrock adds its ``amazon-bedrock-invocationMetrics`` object (``inputTokenCount``,
``outputTokenCount``) to the last event of every family; Llama's and Titan's token counts are
read from it.

A chunk whose payload is not that (not JSON, no base64 ``bytes``, bytes that are not UTF-8
JSON) is a payload error.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.eventstream import EVENT_STREAM_MEDIA_TYPE
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState
from ._base import CHUNK, Redaction, Request, Route, handles, parse_object
from ._bedrock import PROVIDER, bedrock_model, on_exception
from .anthropic_messages import AnthropicMessagesRoute
from .bedrock_converse import BedrockConverseRoute
from .generic import GenericRoute

__all__ = ["BedrockInvokeRoute"]

_OPERATION = "/invoke-with-response-stream"
_NAME = "bedrock.invoke_model_with_response_stream"
# What Bedrock adds to every family's last event, and to one a guardrail stopped.
_METRICS = "amazon-bedrock-invocationMetrics"
_GUARDRAIL = "amazon-bedrock-guardrailAction"


class _ClaudeOnBedrock(AnthropicMessagesRoute):
    """Claude's Messages events inside Bedrock's chunks: the Anthropic route's rules."""

    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER


class _NovaOnBedrock(BedrockConverseRoute):
    """Nova's events, each a ConverseStream event in an object named by its type."""

    name: ClassVar[str] = _NAME

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        wrapper = parse_object(event, state)
        if wrapper is None:
            return None
        kinds = [key for key in wrapper if key in self.handlers]
        if len(kinds) != 1:
            return "", wrapper  # counted as unknown
        return kinds[0], wrapper[kinds[0]]


class _StopFieldOnBedrock(Route):
    """A family whose every event is one object with a text field and a stop field that is
    null until the last event (Llama, Titan)."""

    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER
    operation: ClassVar[str | None] = "text_completion"
    text_key: ClassVar[str]
    stop_key: ClassVar[str]

    @handles(CHUNK)
    def _on_chunk(self, obj: dict[str, Any], state: StreamState) -> None:
        state.text(0, obj.get(self.text_key) or "")
        reason = obj.get(self.stop_key)
        if reason is None and obj.get(_GUARDRAIL) == "INTERVENED":
            # A guardrail stopped the answer: Bedrock says so in its own field and sends no
            # stop (a real Titan stream; the ConverseStream name for that stop).
            reason = "guardrail_intervened"
        if reason is None:
            return
        if type(reason) is not str:
            raise TypeError(self.stop_key)
        metrics = obj.get(_METRICS) or {}
        state.usage(metrics.get("inputTokenCount"), metrics.get("outputTokenCount"))
        state.stop(reason, reason in self.success_stops)
        self.ended = True
        state.terminal()


class _LlamaOnBedrock(_StopFieldOnBedrock):
    success_stops: ClassVar[frozenset[str]] = frozenset({"stop"})
    text_key: ClassVar[str] = "generation"
    stop_key: ClassVar[str] = "stop_reason"


class _TitanOnBedrock(_StopFieldOnBedrock):
    success_stops: ClassVar[frozenset[str]] = frozenset({"FINISH", "FINISHED", "STOP_CRITERIA_MET"})
    text_key: ClassVar[str] = "outputText"
    stop_key: ClassVar[str] = "completionReason"


class _OtherModelOnBedrock(GenericRoute):
    """A model family whose stream rules are not written yet: no terminal is known."""

    name: ClassVar[str] = _NAME
    media_type: ClassVar[str] = EVENT_STREAM_MEDIA_TYPE
    provider: ClassVar[str | None] = PROVIDER
    operation: ClassVar[str | None] = None

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        # Whatever the family, a chunk's bytes are one JSON object (PayloadPart).
        payload = parse_object(event, state)
        return None if payload is None else (CHUNK, payload)


def _every_family(*rules: Redaction | None) -> Redaction:
    """The families' rules at once, field by field: which family a stream is of, its first
    event tells."""
    declared = [each for each in rules if each is not None]

    def union(field: str) -> frozenset[str]:
        return frozenset().union(*(getattr(each, field) or () for each in declared))

    return Redaction(**{field: union(field) for field in Redaction._fields})


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
    # Of the model's own events, inside each chunk's base64 ``bytes``.
    redaction: ClassVar[Redaction | None] = _every_family(
        AnthropicMessagesRoute.redaction,
        BedrockConverseRoute.redaction,
        Redaction(
            words=frozenset({_LlamaOnBedrock.stop_key, _TitanOnBedrock.stop_key, _GUARDRAIL}),
            usage=frozenset({_METRICS}),
        ),
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
            if family is not None:
                family.ended = True  # the route that judges the stream says it ended
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
        if type(payload) is not dict:
            return _OtherModelOnBedrock()
        if AnthropicMessagesRoute.sniff_payload(payload):
            return _ClaudeOnBedrock()
        if any(key in BedrockConverseRoute.handlers for key in payload):
            return _NovaOnBedrock()
        if _LlamaOnBedrock.text_key in payload:
            return _LlamaOnBedrock()
        if _TitanOnBedrock.text_key in payload:
            return _TitanOnBedrock()
        return _OtherModelOnBedrock()

    def on_close(self, state: StreamState) -> None:
        if self._family is not None:
            self._family.on_close(state)

    def resolved(self) -> Route:
        return self if self._family is None else self._family
