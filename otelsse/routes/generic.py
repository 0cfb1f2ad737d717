"""Generic SSE: no provider contract is known, so no terminal rule either.

A clean EOF with nothing pending is ``eof_unverified``, never ``complete``. An ``event: error``
is still taken at its word as a provider error. Data is not parsed: it need not be JSON.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.state import StreamState
from ._base import Redaction, Route, handles

__all__ = ["GenericRoute"]

_NO_PAYLOAD: dict[str, Any] = {}


class GenericRoute(Route):
    name: ClassVar[str] = "generic"
    has_terminal: ClassVar[bool] = False
    # It judges by nothing in its data: no value is kept. The subtrees whose keys are content
    # under any contract go keys and all, as under every route.
    redaction: ClassVar[Redaction | None] = Redaction(opaque=None)

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        return event.event, _NO_PAYLOAD

    def on_unknown(self, kind: str, payload: dict[str, Any], state: StreamState) -> None:
        pass  # every event type is as good as any other here

    @handles("error")
    def _on_error(self, payload: dict[str, Any], state: StreamState) -> None:
        state.provider_error(None)
