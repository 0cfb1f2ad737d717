"""Generic SSE: no provider contract is known, so no terminal rule either.

A clean EOF with nothing pending is ``eof_unverified``, never ``complete``. An ``event: error``
is still taken at its word as a provider error.
"""

from __future__ import annotations

from typing import ClassVar

from .._state import StreamState
from ..events import SSEEvent
from ._base import RouteAdapter

__all__ = ["GenericAdapter"]


class GenericAdapter(RouteAdapter):
    name: ClassVar[str] = "generic"
    has_terminal: ClassVar[bool] = False

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        if event.event == "error":
            state.provider_error(None)
