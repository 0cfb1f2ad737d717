"""The tee: a body's chunks, unchanged and unbuffered, each also handed to an observer.

One sync and one async tee serve every client: the application pulls, the tee passes each chunk
on as it goes by, and the stream ends at the chunks' end or with the exception that ended them
(re-raised exactly as it was). Each client module installs them behind a ``Proxy`` (wrapt's
transparent proxy: ``isinstance`` and every attribute the tap does not handle pass through).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import wrapt

from ..monitor import StreamError

__all__ = ["Proxy", "Sink", "atee", "tee"]

if TYPE_CHECKING:  # wrapt's stubs make ObjectProxy generic; at run time it is not
    Proxy = wrapt.ObjectProxy[Any]
else:
    Proxy = wrapt.ObjectProxy


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
