"""Route sniffing: when the request does not say which contract a stream follows, its events do.

The sniffer holds back a few events (bounded by ``SNIFF_EVENTS``) and asks every registered
route, in detection order, whether the event proves its contract: first by the SSE event name
(``Route.sniff_event``), then by the data's JSON object (``Route.sniff_payload``, parsed once).
The first route that claims it reads every held event in order, so it sees the whole stream
exactly as if it had been chosen up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState
from ._base import Route
from .generic import GenericRoute

__all__ = ["SNIFF_EVENTS", "Sniffer", "sniff"]

# Events held back before giving up and treating the stream as generic SSE.
SNIFF_EVENTS = 8


def sniff(event: SSEEvent, routes: Sequence[type[Route]]) -> type[Route] | None:
    """The first of ``routes`` whose contract this event proves, or None."""
    for route in routes:
        if route.sniff_event(event):
            return route
    try:
        payload: Any = loads(event.data)
    except JSONDecodeError:
        return None
    if type(payload) is not dict:
        return None
    for route in routes:
        if route.sniff_payload(payload):
            return route
    return None


class Sniffer(Route):
    """Stands in for the route until the stream's first telling event chooses it."""

    name: ClassVar[str] = GenericRoute.name
    has_terminal: ClassVar[bool] = False

    def __init__(self, routes: Sequence[type[Route]]) -> None:
        super().__init__()
        self._routes = routes
        self.chosen: Route | None = None
        self._held: list[SSEEvent] = []

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        if self.chosen is not None:
            self.chosen.on_event(event, state)
            return
        self._held.append(event)
        found = sniff(event, self._routes)
        if found is not None:
            self._choose(found(), state)
        elif len(self._held) >= SNIFF_EVENTS:
            self._choose(GenericRoute(), state)

    def on_close(self, state: StreamState) -> None:
        if self.chosen is None:
            self._choose(GenericRoute(), state)
        self.resolved().on_close(state)

    def resolved(self) -> Route:
        return self if self.chosen is None else self.chosen

    def _choose(self, route: Route, state: StreamState) -> None:
        self.chosen = route
        held, self._held = self._held, []
        for event in held:
            state.event = event
            route.on_event(event, state)
