"""The tee: a body's chunks, unchanged and unbuffered, each also handed to an observer; and the
transparent proxy a client module installs it behind.

One sync and one async tee serve every client: the application pulls, the tee passes each chunk
on as it goes by, and the stream ends at the chunks' end or with the exception that ended them
(re-raised exactly as it was). In strict mode the observer may raise the stream's refusal from
``feed`` (the chunk is then not handed on) or from ``finish`` at the end: it reaches the
application's read like the library's own error for a body cut short.

A client module writes each tap's behaviour as a plain class and installs ``proxy(behaviour)``:
that class in front of wrapt's transparent proxy, so that ``isinstance`` and every attribute the
tap does not handle pass through to the object it wraps. The proxy class is made on first use:
wrapt is loaded by the instrumentation only, never by the enforcing reader, which reads a
response through the same client module.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

from ._base import Observer

__all__ = ["Tapped", "atee", "proxy", "tee"]

_B = TypeVar("_B", bound="Tapped")


class Tapped:
    """Base of a tap's behaviour: what the proxy wraps, and the observer it feeds.

    Attributes starting ``_self_`` are the proxy's own (wrapt's rule); any other attribute set
    on the proxy would be set on the wrapped object.
    """

    __wrapped__: Any
    _self_observer: Observer

    def __init__(self, wrapped: Any, observer: Observer) -> None:
        super().__init__(wrapped)  # type: ignore[call-arg]  # wrapt.ObjectProxy's
        self._self_observer = observer


#: Each tap's behaviour -> its proxy class, made once.
_PROXIES: dict[type, type] = {}


def proxy(behaviour: type[_B]) -> type[_B]:
    """``behaviour`` in front of wrapt's ``ObjectProxy``: the class a tap is made of."""
    made = _PROXIES.get(behaviour)
    if made is None:
        import wrapt

        made = type(behaviour.__name__, (behaviour, wrapt.ObjectProxy), {})
        made.__module__ = behaviour.__module__
        made.__qualname__ = behaviour.__qualname__
        _PROXIES[behaviour] = made
    return made


def tee(
    chunks: Iterable[bytes], sink: Observer, feed: Callable[[bytes], None] | None = None
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


async def atee(chunks: AsyncIterable[bytes], sink: Observer) -> AsyncIterator[bytes]:
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
