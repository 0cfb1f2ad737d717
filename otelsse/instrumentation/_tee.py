"""The tee: a body's chunks, unchanged and unbuffered, each also handed to an observer.

One sync and one async tee serve every client: the application pulls, the tee passes each chunk
on as it goes by, and the stream ends at the chunks' end or with the exception that ended them
(re-raised exactly as it was).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Protocol

from ..monitor import StreamError

__all__ = ["Sink", "atee", "tee"]


class Sink(Protocol):
    """What a tee feeds (``StreamObserver``)."""

    def feed(self, chunk: bytes) -> None: ...
    def fail(self, error: BaseException) -> None: ...
    def finish(self, error: StreamError | None = None) -> None: ...


def tee(
    chunks: Iterable[bytes], sink: Sink, feed: Callable[[bytes], None] | None = None
) -> Iterator[bytes]:
    """``chunks`` unchanged, each given to ``feed`` (default ``sink.feed``) as the application
    takes it; ``sink`` hears how they ended."""
    feed = feed or sink.feed
    try:
        for chunk in chunks:
            feed(chunk)
            yield chunk
    except BaseException as exc:
        sink.fail(exc)
        raise
    sink.finish()


async def atee(chunks: AsyncIterable[bytes], sink: Sink) -> AsyncIterator[bytes]:
    """The async twin of ``tee``."""
    feed = sink.feed
    try:
        async for chunk in chunks:
            feed(chunk)
            yield chunk
    except BaseException as exc:
        sink.fail(exc)
        raise
    sink.finish()
