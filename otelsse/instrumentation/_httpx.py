"""httpx and httpx2 (one body of code): wrap ``Client.send`` and ``AsyncClient.send``.

The span starts in ``send`` (so the contrib HTTP span, made deeper in the transport, is its
child whatever the instrumentation order) and is current only while ``send`` runs. The tap
replaces ``response.stream`` with a transparent proxy: ``iter_raw`` and everything built on it
(``iter_bytes``/``iter_text``/``iter_lines``/``read`` and the async twins, and the SDKs above
them) pull every body byte through it, and ``Response.close()``/``aclose()`` reach it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import wrapt

from ._observer import Settings, StreamObserver, Watch, body_asks_for_stream, tee

__all__ = ["async_send_wrapper", "sync_send_wrapper"]

if TYPE_CHECKING:  # wrapt's stubs make ObjectProxy generic; at run time it is not
    _Proxy = wrapt.ObjectProxy[Any]
else:
    _Proxy = wrapt.ObjectProxy


class _SyncStreamTap(_Proxy):
    """``response.stream`` as before, but every chunk pulled also goes to the observer."""

    def __init__(self, stream: Any, observer: StreamObserver) -> None:
        super().__init__(stream)
        self._self_observer = observer

    def __iter__(self) -> Iterator[bytes]:
        observer = self._self_observer
        return tee(self.__wrapped__, observer, observer.feed)

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_observer.finish("cancelled")


class _AsyncStreamTap(_Proxy):
    """The async twin of ``_SyncStreamTap``."""

    def __init__(self, stream: Any, observer: StreamObserver) -> None:
        super().__init__(stream)
        self._self_observer = observer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        observer = self._self_observer
        feed = observer.feed
        try:
            async for chunk in self.__wrapped__:
                feed(chunk)
                yield chunk
        except BaseException as exc:
            observer.fail(exc)
            raise
        observer.finish()

    async def aclose(self) -> None:
        try:
            await self.__wrapped__.aclose()
        finally:
            self._self_observer.finish("cancelled")


def _watch(settings: Settings, request: Any) -> Watch | None:
    url = request.url
    return settings.watch(
        request.method,
        url,
        url.path,
        url.query.decode("ascii", "replace"),
        stream_asked=lambda: body_asks_for_stream(_body(request)),
        accept=lambda: request.headers.get("accept"),
    )


def _body(request: Any) -> bytes | None:
    try:
        return request.content  # type: ignore[no-any-return]
    except Exception:  # a streaming request body is not read: it cannot be asked
        return None


def _tap_sync(response: Any, observer: StreamObserver) -> None:
    response.stream = _SyncStreamTap(response.stream, observer)


def _tap_async(response: Any, observer: StreamObserver) -> None:
    response.stream = _AsyncStreamTap(response.stream, observer)


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["request"]


def _send_kwargs(watch: Watch, kwargs: dict[str, Any]) -> dict[str, Any]:
    # An expected stream is sent with stream=True, so the tap is in place before the body is
    # read; for stream=False the wrapper then reads it as httpx itself would.
    return {**kwargs, "stream": True} if watch.expects_sse else kwargs


def sync_send_wrapper(settings: Settings) -> Callable[..., Any]:
    def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        watch = settings.begin(_watch, _request_of(args, kwargs))
        if watch is None:
            return wrapped(*args, **kwargs)
        with watch:
            response = wrapped(*args, **_send_kwargs(watch, kwargs))
        watch.observe(response, consumed=response.is_stream_consumed, coded=True, tap=_tap_sync)
        if watch.expects_sse and not kwargs.get("stream", False):
            try:
                response.read()
            except BaseException:
                response.close()
                raise
        return response

    return send


def async_send_wrapper(settings: Settings) -> Callable[..., Any]:
    async def send(
        wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        watch = settings.begin(_watch, _request_of(args, kwargs))
        if watch is None:
            return await wrapped(*args, **kwargs)
        with watch:
            response = await wrapped(*args, **_send_kwargs(watch, kwargs))
        watch.observe(response, consumed=response.is_stream_consumed, coded=True, tap=_tap_async)
        if watch.expects_sse and not kwargs.get("stream", False):
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response

    return send
