"""The route adapter interface shared by every provider contract."""

from __future__ import annotations

from typing import Any, ClassVar

from .._json import JSONDecodeError, loads
from .._state import StreamState
from ..events import SSEEvent

__all__ = ["RouteAdapter", "parse_object"]


def parse_object(event: SSEEvent, state: StreamState) -> dict[str, Any] | None:
    """The event's data as a JSON object, or None after reporting a payload error."""
    try:
        obj = loads(event.data)
    except JSONDecodeError:
        state.payload_invalid()
        return None
    if type(obj) is not dict:
        state.payload_invalid()
        return None
    return obj


class RouteAdapter:
    """Maps one provider's envelopes onto ``StreamState`` and knows its terminal rule.

    Subclass it to teach otelsse a new contract, then ``register_route()`` the subclass. An
    adapter instance serves one stream; it may keep per-stream state (open calls, choices).

    Attributes:
        name: the low-cardinality route name recorded as ``otelsse.route``.
        provider: ``gen_ai.provider.name`` for this route, or None.
        success_stops: stop reasons that count as a successful end.
        has_terminal: False where no terminal rule is known, so a clean EOF is
            ``eof_unverified`` rather than ``complete`` or ``truncated``.
    """

    name: ClassVar[str] = "generic"
    provider: ClassVar[str | None] = None
    success_stops: ClassVar[frozenset[str]] = frozenset()
    has_terminal: ClassVar[bool] = True

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        """Interpret one complete event."""
        raise NotImplementedError

    def on_close(self, state: StreamState) -> None:
        """End of stream: apply any rule that can only be judged at EOF."""
