"""requests: its shape, and the wrapper of ``Session.request`` that taps ``response.raw``.

``Session.request`` (not ``Session.send``, which the contrib instrumentation owns and would
unwrap) makes the span the parent of the contrib HTTP span in either order. The tap is a
transparent proxy over urllib3's ``HTTPResponse``: ``iter_content``/``iter_lines``/``.content``
/``.text`` read through its ``stream()``, and an application may read ``raw`` itself in any of
urllib3's and ``io``'s ways. A requests ``Session.send(prepared, stream=True)`` called directly
is not seen.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ._base import Client, Observer, Target, Watch, Watcher
from ._scan import request_fields
from ._tee import Tapped, proxy, tee

__all__ = ["CLIENTS", "RequestsClient"]


class _RawTap(Tapped):
    """``response.raw`` as before, but every body read also goes to the observer.

    Each way urllib3's ``HTTPResponse`` hands out body bytes hands the observer exactly what it
    returned, and no byte twice: the reads (``read``, ``read1``, ``stream``, ``read_chunked``)
    call the wrapped response; urllib3's methods built on them (``readinto``, ``data``,
    ``json``, iteration) run urllib3's own code with the tap as ``self``, so that they read
    through it; ``io``'s line methods (``readline``, ``readlines``, ``next()``), C code that
    would read the wrapped response directly, call it and pass on what it returned.
    """

    def __init__(self, raw: Any, observer: Observer, content_encoding: str | None) -> None:
        super().__init__(raw, observer)
        # Until the application first reads the coded bytes themselves.
        self._self_coded: str | None = content_encoding

    def _self_feed(self, data: bytes, decode_content: bool | None) -> None:
        observer = self._self_observer
        if decode_content is None:
            decode_content = self.__wrapped__.decode_content
        if self._self_coded and not decode_content:
            # The application reads the coded bytes; the monitor needs them decoded.
            observer.decode_as(self._self_coded)
            self._self_coded = None
        observer.feed(data)

    def _self_call(self, read: Callable[..., Any], *args: Any) -> Any:
        """One read of the wrapped response; the observer hears how it failed."""
        try:
            return read(*args)
        except BaseException as exc:
            self._self_observer.fail(exc)
            raise

    def _self_took(self, data: bytes, decode_content: bool | None, at_end: bool) -> None:
        self._self_feed(data, decode_content)
        if at_end:
            self._self_observer.finish()

    def read(
        self,
        amt: int | None = None,
        decode_content: bool | None = None,
        cache_content: bool = False,
    ) -> bytes:
        data: bytes = self._self_call(self.__wrapped__.read, amt, decode_content, cache_content)
        # Without a size (or with a negative one) it reads to the end; a zero-size read returns
        # nothing and is not the end.
        self._self_took(data, decode_content, amt is None or amt < 0 or (amt > 0 and not data))
        return data

    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        # read1() returns what has arrived, never more than one read's worth.
        data: bytes = self._self_call(self.__wrapped__.read1, amt, decode_content)
        self._self_took(data, decode_content, not data and amt != 0)
        return data

    def readinto(self, b: Any) -> int:
        return type(self.__wrapped__).readinto(self, b)  # type: ignore[no-any-return]

    @property
    def data(self) -> bytes | None:
        return type(self.__wrapped__).data.fget(self)  # type: ignore[no-any-return]

    def json(self) -> Any:
        return type(self.__wrapped__).json(self)

    def readline(self, size: int | None = -1) -> bytes:
        line: bytes = self._self_call(self.__wrapped__.readline, size)
        # io's readline stops at a line end, at ``size``, or at the end of the body.
        at_end = not line.endswith(b"\n") and (size is None or size < 0 or len(line) < size)
        self._self_took(line, None, at_end)
        return line

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        # io's readlines gathers the lines urllib3's iteration yields: decoded.
        lines: list[bytes] = self._self_call(self.__wrapped__.readlines, hint)
        for line in lines:
            self._self_feed(line, True)
        if hint is None or hint <= 0 or not lines:
            self._self_observer.finish()
        return lines

    def __next__(self) -> bytes:
        # io's: the next readline(), until it returns nothing.
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __iter__(self) -> Iterator[bytes]:
        return type(self.__wrapped__).__iter__(self)  # type: ignore[no-any-return]

    def _self_iterate(
        self, chunks: Iterator[bytes], decode_content: bool | None
    ) -> Iterator[bytes]:
        feed = partial(self._self_feed, decode_content=decode_content)
        return tee(chunks, self._self_observer, feed)

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        return self._self_iterate(self.__wrapped__.stream(amt, decode_content), decode_content)

    def read_chunked(
        self, amt: int | None = None, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        return self._self_iterate(
            self.__wrapped__.read_chunked(amt, decode_content), decode_content
        )

    def __enter__(self) -> _RawTap:
        # The proxy's own __enter__ would hand out the unwrapped response, bypassing the tap.
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_observer.finish("cancelled")

    def release_conn(self) -> None:
        try:
            self.__wrapped__.release_conn()
        finally:
            self._self_observer.finish("cancelled")


def _arguments(
    wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """``Session.request``'s arguments by name; None when they do not fit its signature (then
    requests raises its own error). ``requests.get()`` and friends pass them all by keyword."""
    if not args:
        return kwargs
    if len(args) <= 2 and "method" not in kwargs and "url" not in kwargs:
        return {**kwargs, **dict(zip(("method", "url"), args, strict=False))}
    try:
        return dict(inspect.signature(wrapped).bind(*args, **kwargs).arguments)
    except TypeError:
        return None


class _URL:
    """A requests URL as the watch needs it (httpx's ``URL`` has the same three properties)."""

    __slots__ = ("_text", "parts")

    def __init__(self, text: str) -> None:
        self._text = text
        self.parts = urlsplit(text)

    @property
    def host(self) -> str:
        return self.parts.hostname or ""

    @property
    def port(self) -> int | None:
        return self.parts.port

    @property
    def scheme(self) -> str:
        return self.parts.scheme

    def __str__(self) -> str:
        return self._text


class RequestsClient(Client):
    """requests, over urllib3."""

    library = "requests"
    # urllib3 decodes for the application unless it reads ``raw`` itself without
    # ``decode_content``; the tap decodes exactly then (see ``_RawTap._self_feed``).
    taps_coded_body = False

    def targets(self) -> list[Target]:
        sessions = importlib.import_module("requests.sessions")
        return [(sessions.Session, "request", self._request_wrapper)]

    def status(self, response: Any) -> int:
        return response.status_code  # type: ignore[no-any-return]

    def headers(self, response: Any) -> Mapping[str, str]:
        return response.headers  # type: ignore[no-any-return]

    def request_line(self, response: Any) -> tuple[str, str] | None:
        request = response.request
        if request is None or request.method is None or request.url is None:
            return None
        return request.method, request.url

    def consumed_body(self, response: Any) -> bytes | None:
        return response.content if getattr(response, "_content_consumed", False) else None

    def chunks(self, response: Any) -> Iterator[bytes]:
        """The body as the bytes arrive, content-decoded.

        ``iter_content(chunk_size=None)`` streams only chunked bodies; for a Content-Length or
        close-delimited body it waits for the whole body. urllib3's ``read1`` returns what
        arrived.
        """
        read1 = getattr(response.raw, "read1", None)
        if read1 is None:
            yield from response.iter_content(chunk_size=None)
            return
        while chunk := read1(65536, decode_content=True):
            yield chunk

    def bound_reads(self, response: Any, seconds: float) -> None:
        # urllib3 reads the body from the connection's socket, whose timeout bounds each read.
        sock = getattr(getattr(response.raw, "connection", None), "sock", None)
        if sock is not None:
            current = sock.gettimeout()
            sock.settimeout(seconds if current is None else min(current, seconds))

    def is_timeout(self, error: BaseException) -> bool:
        # While streaming, requests wraps urllib3's ReadTimeoutError in a ConnectionError, whose
        # first argument the error chain follows to urllib3's class. urllib3's NewConnectionError
        # (a refused connection) derives from its ConnectTimeoutError for history's sake only.
        urllib3 = sys.modules["urllib3"].exceptions
        if isinstance(error, urllib3.NewConnectionError):
            return False
        return isinstance(error, (sys.modules["requests"].Timeout, urllib3.TimeoutError))

    def body_cut_error(self) -> type[Exception]:
        # What iter_content raises for a body that broke off ("Connection broken:
        # IncompleteRead"), read through the response as much as through raw.
        error: type[Exception] = sys.modules["requests"].exceptions.ChunkedEncodingError
        return error

    def is_transport(self, error: BaseException) -> bool:
        requests = sys.modules["requests"].exceptions
        urllib3 = sys.modules["urllib3"].exceptions
        return isinstance(
            error,
            (
                requests.ConnectionError,
                requests.ChunkedEncodingError,
                requests.ContentDecodingError,
                requests.Timeout,
                urllib3.ProtocolError,
                urllib3.DecodeError,
                urllib3.TimeoutError,
            ),
        )

    def _watch(self, settings: Watcher, session: Any, arguments: dict[str, Any]) -> Watch | None:
        url = _URL(str(arguments.get("url") or ""))
        return settings.watch(
            self,
            str(arguments.get("method") or "GET").upper(),
            url,
            url.parts.path,
            url.parts.query,
            body=lambda: request_fields(_body(arguments)),
            accept=lambda: _header(session, arguments, "accept"),
        )

    def _request_wrapper(self, settings: Watcher) -> Callable[..., Any]:
        def request(
            wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            arguments = _arguments(wrapped, args, kwargs)
            watch = None if arguments is None else settings.begin(self._watch, instance, arguments)
            if watch is None or arguments is None:
                return wrapped(*args, **kwargs)
            with watch:
                if watch.expects_sse:  # tapped before the body is read, then read as send() would
                    response = wrapped(**{**arguments, "stream": True})
                else:
                    response = wrapped(*args, **kwargs)
            if response.raw is not None:
                watch.observe(response, _tap_raw)
            stream = arguments.get("stream")
            if watch.expects_sse and not (instance.stream if stream is None else stream):
                response.content  # noqa: B018 -- what Session.send does for stream=False
            return response

        return request


def _body(arguments: dict[str, Any]) -> object:
    body = arguments.get("json")
    return arguments.get("data") if body is None else body


def _header(session: Any, arguments: dict[str, Any], name: str) -> str | None:
    for headers in (arguments.get("headers"), session.headers):
        for key, value in (headers or {}).items():
            if key.lower() == name and isinstance(value, str):
                return value
    return None


def _tap_raw(response: Any, observer: Observer) -> _RawTap:
    coding = response.headers.get("content-encoding")
    response.raw = tapped = proxy(_RawTap)(response.raw, observer, coding)
    return tapped


CLIENTS: dict[str, Client] = {"requests": RequestsClient()}
