"""Route sniffing: when the request does not say which contract a stream follows, its events do.

The sniffer holds back a few events (bounded by ``SNIFF_EVENTS``), decides from the first one
whose shape is telling, then hands every held event to the chosen adapter in order, so the chosen
adapter sees the whole stream exactly as if it had been chosen up front.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._json import JSONDecodeError, loads
from .._state import StreamState
from ..events import SSEEvent
from ._base import RouteAdapter
from .anthropic_messages import AnthropicMessagesAdapter
from .gemini import GeminiAdapter
from .generic import GenericAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter

__all__ = ["SNIFF_EVENTS", "SniffingAdapter", "sniff"]

# Events held back before giving up and treating the stream as generic SSE.
SNIFF_EVENTS = 8

_ANTHROPIC_TYPES = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "message_delta", "ping"}
)


def sniff(event: SSEEvent) -> type[RouteAdapter] | None:
    """The adapter class that this event's shape reveals, or None when it reveals nothing."""
    if event.event in _ANTHROPIC_TYPES:
        return AnthropicMessagesAdapter
    if event.event.startswith("response."):
        return OpenAIResponsesAdapter
    try:
        obj: Any = loads(event.data)
    except JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    kind = obj.get("type")
    if type(kind) is str:
        if kind.startswith("response."):
            return OpenAIResponsesAdapter
        if kind in _ANTHROPIC_TYPES:
            return AnthropicMessagesAdapter
    if obj.get("object") == "chat.completion.chunk" or "choices" in obj:
        return OpenAIChatAdapter
    if "candidates" in obj or "usageMetadata" in obj or "promptFeedback" in obj:
        return GeminiAdapter
    return None


class SniffingAdapter(RouteAdapter):
    """Stands in for the route until the stream's first telling event chooses it."""

    name: ClassVar[str] = "generic"
    has_terminal: ClassVar[bool] = False

    def __init__(self) -> None:
        self.chosen: RouteAdapter | None = None
        self._held: list[SSEEvent] = []

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        if self.chosen is not None:
            self.chosen.on_event(event, state)
            return
        self._held.append(event)
        found = sniff(event)
        if found is not None:
            self._choose(found(), state)
        elif len(self._held) >= SNIFF_EVENTS:
            self._choose(GenericAdapter(), state)

    def on_close(self, state: StreamState) -> None:
        if self.chosen is None:
            self._choose(GenericAdapter(), state)
        assert self.chosen is not None
        self.chosen.on_close(state)

    def _choose(self, adapter: RouteAdapter, state: StreamState) -> None:
        self.chosen = adapter
        held, self._held = self._held, []
        for event in held:
            adapter.on_event(event, state)
