"""Generic SSE: no provider contract is known, so no terminal rule either.

A clean EOF with nothing pending is ``eof_unverified``, never ``complete``. An ``event: error``
is still taken at its word as a provider error. Data is not parsed: it need not be JSON.

Strict mode's error event (``strict_error_event``): ``event: error`` with ``{"error": {"code",
"message"}}``. No contract says more: this route, otelsse's own reading of any SSE, takes that
event as a provider error, a WHATWG ``EventSource`` dispatches it to its ``error`` listeners
(the event's type is its ``event`` field: https://html.spec.whatwg.org/multipage/
server-sent-events.html#dispatchMessage), and the OpenAI-style clients that read OpenAI-
compatible streams raise on an ``error`` object.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.state import StreamState
from ._base import Redaction, Route, handles, sse_event

__all__ = ["GenericRoute"]

_NO_PAYLOAD: dict[str, Any] = {}


class GenericRoute(Route):
    name: ClassVar[str] = "generic"
    has_terminal: ClassVar[bool] = False
    # It judges by nothing in its data: no value is kept. The subtrees whose keys are content
    # under any contract go keys and all, as under every route.
    redaction: ClassVar[Redaction | None] = Redaction(opaque=None)

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        return sse_event({"error": {"code": code, "message": message}}, "error")

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        return event.event, _NO_PAYLOAD

    def on_unknown(self, kind: str, payload: dict[str, Any], state: StreamState) -> None:
        pass  # every event type is as good as any other here

    @handles("error")
    def _on_error(self, payload: dict[str, Any], state: StreamState) -> None:
        state.provider_error(None)
