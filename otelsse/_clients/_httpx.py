"""httpx and httpx2 (one body of code): their shape, and the wrappers of ``Client.send`` and
``AsyncClient.send``.

The span starts in ``send`` (so the contrib HTTP span, made deeper in the transport, is its
child whatever the instrumentation order) and is current only while ``send`` runs. The tap
replaces ``response.stream`` with a transparent proxy: ``iter_raw`` and everything built on it
(``iter_bytes``/``iter_text``/``iter_lines``/``read`` and the async twins, and the SDKs above
them) pull every body byte through it, and ``Response.close()``/``aclose()`` reach it too. The
proxy sees the body before content-decoding, so the observer decodes it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from ._base import Client, Observer, Target, Watch, Watcher
from ._scan import request_fields, rpc_fields
from ._tee import Tapped, atee, proxy, tee

__all__ = ["CLIENTS", "HttpxClient"]


class _Probed(Tapped):
    """The attributes SDKs ask of ``response.stream`` on every event, answered directly.

    The anthropic SDK looks for its tracing wrapper's ``stream_observer`` per event with
    ``getattr(response.stream, "stream_observer", None)``; a proxy answers a name its target
    lacks by raising inside twice (about 8 µs per event within the SDK's loop). Here it costs one
    lookup and gives what that ``getattr`` gives: the target's value, else None.
    """

    @property
    def stream_observer(self) -> Any:
        return getattr(self.__wrapped__, "stream_observer", None)


class _SyncStreamTap(_Probed):
    """``response.stream`` as before, but every chunk pulled also goes to the observer."""

    def __iter__(self) -> Iterator[bytes]:
        return tee(self.__wrapped__, self._self_observer)

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_observer.finish("cancelled")


class _AsyncStreamTap(_Probed):
    """The async twin of ``_SyncStreamTap``."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return atee(self.__wrapped__, self._self_observer)

    async def aclose(self) -> None:
        try:
            await self.__wrapped__.aclose()
        finally:
            self._self_observer.finish("cancelled")


class HttpxClient(Client):
    """httpx or httpx2: the same API under two import names."""

    taps_coded_body = True

    def __init__(self, library: str) -> None:
        self.library = library

    def targets(self) -> list[Target]:
        module = importlib.import_module(self.library)
        return [
            (module.Client, "send", self._sync_send_wrapper),
            (module.AsyncClient, "send", self._async_send_wrapper),
        ]

    def status(self, response: Any) -> int:
        return response.status_code  # type: ignore[no-any-return]

    def headers(self, response: Any) -> Mapping[str, str]:
        return response.headers  # type: ignore[no-any-return]

    def request_line(self, response: Any) -> tuple[str, str] | None:
        try:
            request = response.request
        except RuntimeError:  # a Response built by hand has no request
            return None
        return request.method, str(request.url)

    def consumed_body(self, response: Any) -> bytes | None:
        return response.content if response.is_stream_consumed else None

    def chunks(self, response: Any) -> Iterator[bytes]:
        return iter(response.iter_bytes())

    def achunks(self, response: Any) -> AsyncIterator[bytes]:
        return aiter(response.aiter_bytes())

    def bound_reads(self, response: Any, seconds: float) -> None:
        # The transport (httpcore) reads the request's read timeout when the body starts.
        extensions = response.request.extensions
        timeout = dict(extensions.get("timeout") or {})
        current = timeout.get("read")
        timeout["read"] = seconds if current is None else min(current, seconds)
        extensions["timeout"] = timeout

    def is_timeout(self, error: BaseException) -> bool:
        return isinstance(error, sys.modules[self.library].TimeoutException)

    def body_cut_error(self) -> type[Exception]:
        # What httpx raises itself when the peer closes before the body is whole ("peer closed
        # connection without sending complete message body"); the openai and anthropic SDKs map
        # it, as any RequestError read from a stream, onto their APIConnectionError.
        error: type[Exception] = sys.modules[self.library].RemoteProtocolError
        return error

    def is_transport(self, error: BaseException) -> bool:
        # TransportError: timeouts, network and protocol errors; DecodingError: a body its
        # Content-Encoding cannot undo. StreamConsumed and the like are misuse, not transport.
        library = sys.modules[self.library]
        return isinstance(error, (library.TransportError, library.DecodingError))

    def _watch(self, settings: Watcher, request: Any) -> Watch | None:
        url = request.url
        return settings.watch(
            self,
            request.method,
            url,
            url.path,
            url.query.decode("ascii", "replace"),
            body=lambda: request_fields(_body(request)),
            rpc=lambda: rpc_fields(_body(request)),
            header=request.headers.get,
        )

    def _sync_send_wrapper(self, settings: Watcher) -> Callable[..., Any]:
        def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            watch = settings.begin(self._watch, _request_of(args, kwargs))
            if watch is None:
                return wrapped(*args, **kwargs)
            with watch:
                response = wrapped(*args, **_send_kwargs(watch, kwargs))
            watch.observe(response, _tap_sync)
            if watch.expects_sse and not kwargs.get("stream", False):
                try:
                    response.read()
                except BaseException:
                    response.close()
                    raise
            return response

        return send

    def _async_send_wrapper(self, settings: Watcher) -> Callable[..., Any]:
        async def send(
            wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            watch = settings.begin(self._watch, _request_of(args, kwargs))
            if watch is None:
                return await wrapped(*args, **kwargs)
            with watch:
                response = await wrapped(*args, **_send_kwargs(watch, kwargs))
            watch.observe(response, _tap_async)
            if watch.expects_sse and not kwargs.get("stream", False):
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
            return response

        return send


def _tap_sync(response: Any, observer: Observer) -> _SyncStreamTap:
    response.stream = tapped = proxy(_SyncStreamTap)(response.stream, observer)
    return tapped


def _tap_async(response: Any, observer: Observer) -> _AsyncStreamTap:
    response.stream = tapped = proxy(_AsyncStreamTap)(response.stream, observer)
    return tapped


def _body(request: Any) -> bytes | None:
    try:
        return request.content  # type: ignore[no-any-return]
    except Exception:  # a streaming request body is not read: it cannot be asked
        return None


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["request"]


def _send_kwargs(watch: Watch, kwargs: dict[str, Any]) -> dict[str, Any]:
    # An expected stream is sent with stream=True, so the tap is in place before the body is
    # read; for stream=False the wrapper then reads it as httpx itself would.
    return {**kwargs, "stream": True} if watch.expects_sse else kwargs


CLIENTS: dict[str, Client] = {library: HttpxClient(library) for library in ("httpx", "httpx2")}
