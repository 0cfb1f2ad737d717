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
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from ._observer import Settings, StreamObserver, Watch, body_asks_for_stream

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
        feed = observer.feed
        try:
            for chunk in self.__wrapped__:
                feed(chunk)
                yield chunk
        except BaseException as exc:
            observer.fail(exc)
            raise
        observer.finish()

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


def _observe(watch: Watch, response: Any, tap: Callable[[Any, StreamObserver], object]) -> None:
    """The response headers are in: install the tap when the body is a stream to observe."""
    if response.is_stream_consumed:  # send(stream=False) of an unexpected stream: read already
        observer = watch.response(response.status_code, response.headers, body_decoded=True)
        if observer is not None:
            observer.feed(response.content)
            observer.finish()
        return
    observer = watch.response(response.status_code, response.headers, body_decoded=False)
    if observer is not None:
        response.stream = tap(response.stream, observer)
        observer.end_when_collected(response)


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["request"]


def sync_send_wrapper(settings: Settings) -> Callable[..., Any]:
    def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        try:
            watch = _watch(settings, _request_of(args, kwargs))
        except Exception as exc:
            settings.telemetry.count_error(exc, "send")
            watch = None
        if watch is None:
            return wrapped(*args, **kwargs)
        if watch.span is None:
            response = wrapped(*args, **kwargs)
            try:
                _observe(watch, response, _SyncStreamTap)
            except Exception as exc:
                watch.contain(exc)
            return response
        # Expected SSE: send with stream=True so the tap is in place before the body is read,
        # then read it as httpx itself would for stream=False.
        stream = kwargs.get("stream", False)
        token = otel_context.attach(trace.set_span_in_context(watch.span, watch.context))
        try:
            response = wrapped(*args, **{**kwargs, "stream": True})
        except BaseException as exc:
            watch.failed(exc)
            raise
        finally:
            otel_context.detach(token)
        try:
            _observe(watch, response, _SyncStreamTap)
        except Exception as exc:
            watch.contain(exc)
        if not stream:
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
        if not is_instrumentation_enabled():
            return await wrapped(*args, **kwargs)
        try:
            watch = _watch(settings, _request_of(args, kwargs))
        except Exception as exc:
            settings.telemetry.count_error(exc, "send")
            watch = None
        if watch is None:
            return await wrapped(*args, **kwargs)
        if watch.span is None:
            response = await wrapped(*args, **kwargs)
            try:
                _observe(watch, response, _AsyncStreamTap)
            except Exception as exc:
                watch.contain(exc)
            return response
        stream = kwargs.get("stream", False)
        token = otel_context.attach(trace.set_span_in_context(watch.span, watch.context))
        try:
            response = await wrapped(*args, **{**kwargs, "stream": True})
        except BaseException as exc:
            watch.failed(exc)
            raise
        finally:
            otel_context.detach(token)
        try:
            _observe(watch, response, _AsyncStreamTap)
        except Exception as exc:
            watch.contain(exc)
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response

    return send
