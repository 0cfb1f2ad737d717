"""Framers: what turns a body's bytes into event envelopes, one per media type.

A route declares the media type its streams have (``Route.media_type``); the monitor reads the
body with that media type's framer, and everything above the envelope (routes, accumulators,
the monitor, the reader, the gate, telemetry) is the same for every framer. Adding a framer is
one module in this package that satisfies ``Framer``, one line in ``FRAMERS``, and for the
flight recorder a skeleton builder of its bytes (``_SKELETONS`` in ``otelsse/recorder.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .events import SSEEvent
from .eventstream import EVENT_STREAM_MEDIA_TYPE, EventStreamParser
from .framing import SSEParser
from .http import EVENT_STREAM

__all__ = ["FRAMERS", "Framer", "MakeFramer"]


class Framer(Protocol):
    """An incremental, bounded, sans-IO framer: ``feed(bytes)`` returns the envelopes the bytes
    completed, ``close()`` declares EOF. Any chunking of the same bytes gives the same
    envelopes and the same counts; bad input never raises (``SSEParser`` is the model)."""

    @property
    def ended(self) -> bool:
        """``end_after()`` ended the stream."""

    @property
    def limit_exceeded(self) -> str | None:
        """The stage of the ceiling breached (parsing stopped there), else None."""

    @property
    def decoded_chars(self) -> int:
        """Characters decoded from the envelopes dispatched."""

    @property
    def decode_error_count(self) -> int:
        """Bytes that did not decode (invalid UTF-8, a frame that fails its checks)."""

    @property
    def comment_count(self) -> int:
        """Comments seen (SSE ``:`` lines)."""

    @property
    def discarded_event(self) -> bool:
        """After ``close()``: EOF cut an event."""

    @property
    def pending_line_chars(self) -> int:
        """After ``close()``: the unterminated line's length (0 where there are no lines)."""

    @property
    def pending_event_chars(self) -> int:
        """After ``close()``: what the event EOF cut held."""

    def feed(self, data: bytes) -> list[SSEEvent]: ...

    def close(self) -> list[SSEEvent]: ...

    def dispatch_pending(self) -> list[SSEEvent]:
        """The application stopped reading: the pending event it has read all of, if any."""

    def stop(self, stage: str, *, events_used: int | None = None) -> None:
        """A ceiling downstream was breached at that event of the last ``feed()``."""

    def judged(self) -> None:
        """The consumer is done with the last ``feed()``'s events."""

    def end_after(self, events_used: int) -> None:
        """End the stream right after that event of the last ``feed()``."""


class MakeFramer(Protocol):
    """A framer's constructor: every framer takes the same ceilings."""

    def __call__(self, *, max_line_bytes: int, max_event_bytes: int) -> Framer: ...


#: Media type -> the framer of a body of that type.
FRAMERS: Mapping[str, MakeFramer] = {
    EVENT_STREAM: SSEParser,
    EVENT_STREAM_MEDIA_TYPE: EventStreamParser,
}
