"""aiohttp: its shape, the wrapper of ``ClientSession._request``, and the tap of
``response.content``.

``ClientSession._request`` is what ``request``/``get``/``post``/... (awaited or used with
``async with``) all run; the span starts there, so aiohttp's own tracing and the contrib
aiohttp-client span, made inside it, nest under it. The tap replaces ``response.content`` (a
``StreamReader``) with a transparent proxy: its reads (``readany``, ``read``, ``readline``,
``readuntil``, ``readexactly``, ``readchunk``, ``read_nowait``) call the wrapped reader and hand
the observer exactly what they returned; its iterators (``async for``, ``iter_any``,
``iter_chunked``, ``iter_chunks``) run aiohttp's own code with the tap as ``self``, so that they
read through it; ``response.read()``/``text()``/``json()`` read ``response.content``. The stream
ends at the read that leaves the reader at EOF, or with the exception a read raised;
``ClientResponse.release()``/``close()`` (leaving ``async with`` releases) end it as cancelled.
A response the application drops unreleased is not garbage: its body reader, which the
connection in the session's pool holds, holds the response's end-of-body callback. Its stream is
still open, and ends (cancelled) when aiohttp lets go of it: the rest of the body arrives, the
connection drops or times out, the session closes; or at interpreter exit.
aiohttp content-decodes the body itself unless ``auto_decompress=False``; then the observer
decodes.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from ._base import Client, Observer, Target, Watch, Watcher
from ._scan import request_fields, rpc_fields
from ._tee import Tapped, proxy

__all__ = ["CLIENTS", "AiohttpClient"]


class _ContentTap(Tapped):
    """``response.content`` as before, but every body read also goes to the observer."""

    def _self_took(self, data: bytes) -> None:
        if data:
            self._self_observer.feed(data)
        if self.__wrapped__.at_eof():
            self._self_observer.finish()

    async def _self_read(self, read: Callable[..., Awaitable[Any]], *args: Any, **kw: Any) -> Any:
        """One read of the wrapped reader; the observer hears how it failed."""
        try:
            return await read(*args, **kw)
        except BaseException as exc:
            self._self_observer.fail(exc)
            raise

    async def readany(self) -> bytes:
        data: bytes = await self._self_read(self.__wrapped__.readany)
        self._self_took(data)
        return data

    async def read(self, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = await self._self_read(self.__wrapped__.read, *args, **kwargs)
        self._self_took(data)
        return data

    async def readline(self, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = await self._self_read(self.__wrapped__.readline, *args, **kwargs)
        self._self_took(data)
        return data

    async def readuntil(self, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = await self._self_read(self.__wrapped__.readuntil, *args, **kwargs)
        self._self_took(data)
        return data

    async def readchunk(self) -> tuple[bytes, bool]:
        chunk: tuple[bytes, bool] = await self._self_read(self.__wrapped__.readchunk)
        self._self_took(chunk[0])
        return chunk

    async def readexactly(self, n: int) -> bytes:
        try:
            data: bytes = await self.__wrapped__.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            # The body ended first: the application holds what it had, and the stream its end.
            self._self_took(exc.partial)
            raise
        except BaseException as exc:
            self._self_observer.fail(exc)
            raise
        self._self_took(data)
        return data

    def read_nowait(self, *args: Any, **kwargs: Any) -> bytes:
        try:
            data: bytes = self.__wrapped__.read_nowait(*args, **kwargs)
        except BaseException as exc:
            self._self_observer.fail(exc)
            raise
        self._self_took(data)
        return data

    def __aiter__(self) -> Any:
        return type(self.__wrapped__).__aiter__(self)

    def iter_any(self) -> Any:
        return type(self.__wrapped__).iter_any(self)

    def iter_chunked(self, n: int) -> Any:
        return type(self.__wrapped__).iter_chunked(self, n)

    def iter_chunks(self) -> Any:
        return type(self.__wrapped__).iter_chunks(self)


class AiohttpClient(Client):
    """aiohttp's ``ClientSession`` (async only)."""

    library = "aiohttp"
    # aiohttp decodes for the application unless it was told not to (``auto_decompress``);
    # the tap decodes exactly then (see ``_tap``).
    taps_coded_body = False

    def targets(self) -> list[Target]:
        aiohttp = importlib.import_module("aiohttp")
        return [
            (aiohttp.ClientSession, "_request", self._request_wrapper),
            (aiohttp.ClientResponse, "release", _released),
            (aiohttp.ClientResponse, "close", _released),
        ]

    def status(self, response: Any) -> int:
        return response.status  # type: ignore[no-any-return]

    def headers(self, response: Any) -> Mapping[str, str]:
        return response.headers  # type: ignore[no-any-return]

    def request_line(self, response: Any) -> tuple[str, str] | None:
        return response.method, str(response.url)

    def consumed_body(self, response: Any) -> bytes | None:
        # Set by ``response.read()``; aiohttp never reads a body before it returns a response.
        return response._body  # type: ignore[no-any-return]

    def chunks(self, response: Any) -> Iterator[bytes]:
        raise TypeError("aiohttp responses can only be read asynchronously")

    def achunks(self, response: Any) -> AsyncIterator[bytes]:
        return aiter(response.content.iter_any())

    async def aclose(self, response: Any) -> None:
        response.release()

    def bound_reads(self, response: Any, seconds: float) -> None:
        # The connection's protocol times each wait for data by its read timeout (sock_read).
        connection = response.connection
        if connection is None or connection.protocol is None:
            return
        protocol = connection.protocol
        current = protocol.read_timeout
        protocol.read_timeout = seconds if current is None else min(current, seconds)
        protocol.start_timeout()

    def is_timeout(self, error: BaseException) -> bool:
        return isinstance(error, sys.modules["aiohttp"].ServerTimeoutError)

    def body_cut_error(self) -> type[Exception]:
        # What a read raises for a body cut short ("Response payload is not completed").
        error: type[Exception] = sys.modules["aiohttp"].ClientPayloadError
        return error

    def is_transport(self, error: BaseException) -> bool:
        # ClientPayloadError: a body cut short or that its Content-Encoding cannot undo;
        # ClientConnectionError: the connection lost, timed out or closed under the read.
        aiohttp = sys.modules["aiohttp"]
        return isinstance(error, (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError))

    def _watch(
        self, settings: Watcher, session: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Watch | None:
        method = args[0] if args else kwargs["method"]
        url = session._build_url(args[1] if len(args) > 1 else kwargs["str_or_url"])
        if not url.absolute:  # aiohttp refuses it
            return None
        if kwargs.get("params"):
            url = url.extend_query(kwargs["params"])
        return settings.watch(
            self,
            str(method),
            url,
            url.path,
            url.query_string,
            body=lambda: request_fields(_body(kwargs)),
            rpc=lambda: rpc_fields(_body(kwargs)),
            header=lambda name: _header(session, kwargs, name),
        )

    def _request_wrapper(self, settings: Watcher) -> Callable[..., Any]:
        async def request(
            wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            watch = settings.begin(self._watch, instance, args, kwargs)
            if watch is None:
                return await wrapped(*args, **kwargs)
            with watch:
                response = await wrapped(*args, **kwargs)
            decompress = kwargs.get("auto_decompress")
            coded = not (instance.auto_decompress if decompress is None else decompress)
            watch.observe(response, _tap_coded if coded else _tap)
            return response

        return request


def _released(settings: Watcher) -> Callable[..., Any]:
    """``ClientResponse.release``/``close``: a tapped body ends there, as cancelled unless it
    already ended."""

    def release(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return wrapped(*args, **kwargs)
        finally:
            content = instance.content
            if isinstance(content, _ContentTap):
                content._self_observer.finish("cancelled")

    return release


def _tap(response: Any, observer: Observer) -> _ContentTap:
    response.content = tapped = proxy(_ContentTap)(response.content, observer)
    return tapped


def _tap_coded(response: Any, observer: Observer) -> _ContentTap:
    # auto_decompress=False: the application reads the coded bytes; the monitor needs them
    # decoded.
    observer.decode_as(response.headers.get("content-encoding"))
    return _tap(response, observer)


def _body(kwargs: dict[str, Any]) -> object:
    body = kwargs.get("json")
    return kwargs.get("data") if body is None else body


def _header(session: Any, kwargs: dict[str, Any], name: str) -> str | None:
    for headers in (kwargs.get("headers"), session.headers):
        for key, value in (headers or {}).items():
            if str(key).lower() == name and isinstance(value, str):
                return value
    return None


CLIENTS: dict[str, Client] = {"aiohttp": AiohttpClient()}
