"""What the parser produces: complete SSE envelopes.

``SSEEvent`` is a small immutable value. It is a ``NamedTuple`` rather than a frozen dataclass
because one is built per event on the hot path, and a tuple is several times cheaper to create
than a frozen dataclass. Its ``repr`` never shows ``data``: a stray log line must not leak a
prompt or a completion. Don't subclass it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEEvent"]


class SSEEvent(NamedTuple):
    """One dispatched server-sent event.

    Attributes:
        event: the event type; ``"message"`` when the stream named none.
        data: the data lines joined with ``"\\n"``.
        id: the last event ID in force when the event was dispatched (``""`` if none).
        retry: the reconnection time in milliseconds in force, ``None`` if never set.
    """

    event: str
    data: str
    id: str = ""
    retry: int | None = None

    def __repr__(self) -> str:
        return (
            f"SSEEvent(event={self.event!r}, data=<{len(self.data)} chars>, "
            f"id={self.id!r}, retry={self.retry!r})"
        )
