"""The one client harness: the six clients an application streams with, and how it reads.

A ``Client`` is a library (httpx, httpx2, requests or aiohttp) in its sync or async dialect. An
application opens a ``Session`` (``AsyncSession``) of it, sends a POST (``send`` without ``with``,
``stream`` with the client's own context manager, or an unstreamed ``post``) and reads the body
in a ``Style``: a reading method and, where it takes one, a chunk size.

- ``CLIENTS`` (the six of httpx, httpx2, requests and aiohttp), ``SYNC_CLIENTS`` (one per
  library that has one), ``ASYNC_CLIENTS``; the ``client``/``sync_client``/``async_client``/
  ``client_style`` fixtures in ``conftest.py``.
- ``Client.styles``: every read style of that client; ``default_style``: the usual one
  (decoded bytes in network-sized pieces); ``sized_styles``: the two that take a chunk size;
  ``raw_style``: the read of the coded bytes as they came.
- ``ERRORS`` / ``Client.raises(kind)``: the client's own exceptions, one table.
- What an application sees of a response in each client's words: ``Client.response_class``,
  ``source_class``, ``body_source``, ``status``, ``request_line``.
- ``Session``/``AsyncSession``: ``send``/``stream``/``post``/``head``, ``chunks`` (the body in a
  style); ``AsyncSession.close`` (the response: httpx ``aclose()``, aiohttp ``release()``) and
  ``close_chunks`` (the application's iterator).
- ``Client.holds_abandoned`` and ``AsyncSession.let_go``: what ends a response the application
  dropped before its body ended (its collection; for aiohttp, its connection letting it go).
- ``Got``, ``read``/``aread`` (``READ``), ``fetch``: read everything and keep what the
  application got, or the exception it caught.
- ``App``, ``run``: one application behaviour in its sync and async dialect, run on a fresh
  session. ``streaming``/``astreaming``: a streaming response to hand to otelsse's reader.
- ``uninstrumented``: the reference run, with otelsse really uninstrumented.

``tests/apps/stream_app.py`` imports this module as an application would use its clients, so it
imports neither otelsse nor OpenTelemetry at module level.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import httpx
import httpx2
import requests
import urllib3

if TYPE_CHECKING:
    from tests._otel import Telemetry

__all__ = [
    "ASYNC_CLIENTS",
    "CLIENTS",
    "ERRORS",
    "READ",
    "READ_TIMEOUT",
    "STALL_TIMEOUT",
    "STREAMING",
    "SYNC_CLIENTS",
    "UNSTREAMED",
    "App",
    "AsyncSession",
    "Client",
    "ClientError",
    "Got",
    "Session",
    "Style",
    "aread",
    "astreaming",
    "fetch",
    "read",
    "run",
    "streaming",
    "uninstrumented",
    "wrapping_depths",
]

Library = Literal["httpx", "httpx2", "requests", "aiohttp"]
Kind = Literal["transport", "timeout"]

#: What every application posts unless a test says otherwise: a streaming chat request.
STREAMING = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
#: Every connect and read timeout unless a test stalls on purpose: generous, so that a loaded
#: machine never turns a test into a timeout.
READ_TIMEOUT = 10.0
#: The read timeout where a server stalls on purpose: long enough that a loaded machine still
#: delivers the bytes before the stall, short enough to keep the suite quick.
STALL_TIMEOUT = 1.5
#: Every URL here is http://, so TLS is never used; one shared context spares each httpx client
#: the ~60 ms of loading the CA bundle.
TLS = ssl.create_default_context()


# --------------------------------------------------------------------------------------------
# Read styles
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """One way an application reads a body: a method and, where it takes one, a chunk size."""

    name: str
    size: int | None = None

    def __str__(self) -> str:
        return self.name if self.size is None else f"{self.name}({self.size})"

    def sized(self, size: int | None) -> Style:
        return dataclasses.replace(self, size=size)

    @property
    def lines(self) -> bool:
        """Hands over lines: their split is part of what the application got."""
        return self.name in (
            "iter_lines",
            "aiter_lines",
            "content.readline",
            "content.readuntil",
            "content.lines",
        )

    @property
    def raw(self) -> bool:
        """Hands over the body before content-decoding."""
        return self.name in _RAW

    @property
    def at_most_size(self) -> bool:
        """Its size is a ceiling, not the piece size: aiohttp's ``read(n)``/``iter_chunked(n)``
        hand over what has arrived, up to ``n`` bytes, so their split follows the network."""
        return self.name in ("content.read", "content.iter_chunked", "coded.iter_chunked")


def _until_empty(read: Callable[[], bytes]) -> Iterator[bytes]:
    while chunk := read():
        yield chunk


async def _once(read: Callable[[], Awaitable[Any]]) -> AsyncIterator[Any]:
    yield await read()


async def _auntil_empty(read: Callable[[], Awaitable[bytes]]) -> AsyncIterator[bytes]:
    while chunk := await read():
        yield chunk


async def _exactly(content: aiohttp.StreamReader, size: int) -> AsyncIterator[bytes]:
    """``readexactly(size)`` until the body ends short of it: what was left, then no more."""
    while True:
        try:
            yield await content.readexactly(size)
        except asyncio.IncompleteReadError as short:
            if short.partial:
                yield short.partial
            return


async def _data(chunks: aiohttp.streams.ChunkTupleAsyncStreamIterator) -> AsyncIterator[bytes]:
    async for data, _end_of_http_chunk in chunks:
        yield data


#: The size of aiohttp's sized reads when a test leaves it unset (they need one).
_CHUNK = 65536
#: Style name -> (response, size) -> what the application iterates (async styles: ``async for``).
_READS: dict[str, Callable[[Any, int | None], Any]] = {
    # httpx/httpx2 ``Client.stream(...)``; ``iter_lines`` is also requests' (same call)
    "iter_bytes": lambda r, n: r.iter_bytes(n),
    "iter_text": lambda r, n: r.iter_text(n),
    "iter_lines": lambda r, n: r.iter_lines(),
    "iter_raw": lambda r, n: r.iter_raw(n),
    "read": lambda r, n: [r.read()],
    # httpx/httpx2 ``AsyncClient.stream(...)``
    "aiter_bytes": lambda r, n: r.aiter_bytes(n),
    "aiter_text": lambda r, n: r.aiter_text(n),
    "aiter_lines": lambda r, n: r.aiter_lines(),
    "aiter_raw": lambda r, n: r.aiter_raw(n),
    "aread": lambda r, n: _once(r.aread),
    # requests (``stream=True``); it leaves ``raw.decode_content`` False, so ``raw.*`` read the
    # coded bytes
    "iter_content": lambda r, n: r.iter_content(chunk_size=n),
    "raw.read-all": lambda r, n: [r.raw.read()],  # one call, no size
    "raw.read": lambda r, n: _until_empty(lambda: r.raw.read(n)),
    "raw.read1": lambda r, n: _until_empty(lambda: r.raw.read1(n)),
    "raw.stream": lambda r, n: r.raw.stream(n),
    "content": lambda r, n: [r.content],
    "text": lambda r, n: [r.text],
    # aiohttp: ``response.content`` is its ``StreamReader``; ``async for`` on it reads lines
    "content.iter_any": lambda r, n: r.content.iter_any(),
    "content.iter_chunked": lambda r, n: r.content.iter_chunked(n or _CHUNK),
    # the same on a request sent with ``auto_decompress=False`` (``AsyncSession._request``)
    "coded.iter_chunked": lambda r, n: r.content.iter_chunked(n or _CHUNK),
    "content.iter_chunks": lambda r, n: _data(r.content.iter_chunks()),
    "content.readany": lambda r, n: _auntil_empty(r.content.readany),
    "content.read": lambda r, n: _auntil_empty(lambda: r.content.read(n or _CHUNK)),
    "content.read-all": lambda r, n: _once(r.content.read),
    "content.readline": lambda r, n: _auntil_empty(r.content.readline),
    "content.readuntil": lambda r, n: _auntil_empty(lambda: r.content.readuntil(b"\n\n")),
    "content.readexactly": lambda r, n: _exactly(r.content, n or _CHUNK),
    "content.lines": lambda r, n: r.content,
    "response.read": lambda r, n: _once(r.read),
    "response.text": lambda r, n: _once(r.text),
}
_RAW = {
    "iter_raw", "aiter_raw", "raw.read-all", "raw.read", "raw.read1", "raw.stream",
    "coded.iter_chunked",
}  # fmt: skip
#: ``client.post(...)`` / requests' ``stream=False``: the client reads the body itself.
UNSTREAMED = Style("unstreamed")

_STYLES: dict[tuple[str, bool], tuple[Style, ...]] = {
    ("httpx", False): (
        Style("iter_bytes"), Style("iter_text"), Style("iter_lines"), Style("iter_raw"),
        Style("read"),
    ),
    ("httpx", True): (
        Style("aiter_bytes"), Style("aiter_text"), Style("aiter_lines"), Style("aiter_raw"),
        Style("aread"),
    ),
    ("requests", False): (
        Style("iter_content"), Style("iter_content", 1), Style("iter_content", 512),
        Style("iter_content", 65536), Style("iter_lines"), Style("raw.read-all"),
        Style("raw.read", 333), Style("raw.read1"), Style("raw.stream", 1024), Style("content"),
        Style("text"),
    ),
    ("aiohttp", True): (
        Style("content.iter_any"), Style("content.iter_chunked", 1),
        Style("content.iter_chunked", 512), Style("coded.iter_chunked", 512),
        Style("content.iter_chunks"),
        Style("content.readany"), Style("content.read", 333), Style("content.read-all"),
        Style("content.readline"), Style("content.readuntil"), Style("content.readexactly", 100),
        Style("content.lines"),
        Style("response.read"), Style("response.text"),
    ),
}  # fmt: skip
#: The two styles that read pieces of a size the application chooses.
_SIZED: dict[tuple[str, bool], tuple[str, str]] = {
    ("httpx", False): ("iter_raw", "iter_bytes"),
    ("httpx", True): ("aiter_raw", "aiter_bytes"),
    ("requests", False): ("iter_content", "raw.read"),
    ("aiohttp", True): ("content.iter_chunked", "content.read"),
}
#: The read of the coded bytes as they came (requests leaves ``raw.decode_content`` False).
_RAW_STYLE: dict[tuple[str, bool], str] = {
    ("httpx", False): "iter_raw",
    ("httpx", True): "aiter_raw",
    ("requests", False): "raw.read",
    ("aiohttp", True): "coded.iter_chunked",
}


# --------------------------------------------------------------------------------------------
# The clients and their exceptions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientError:
    """What a client raises for one kind of failure, at the three depths the tests look at."""

    #: Exactly what the application catches when it reads in the client's default style.
    raised: type[BaseException]
    #: The library's base class for it: what an application may catch instead.
    family: type[BaseException]
    #: What the body's own source raises (requests wraps urllib3's), which otelsse's reader
    #: chains as the ``__cause__`` of its fault.
    source: type[BaseException]


#: The client's own exception when the connection drops inside the body ("transport") or the
#: read deadline fires ("timeout"); requests reports a read timeout as a ``ConnectionError``.
ERRORS: dict[tuple[Library, Kind], ClientError] = {
    ("httpx", "transport"): ClientError(
        httpx.RemoteProtocolError, httpx.TransportError, httpx.RemoteProtocolError
    ),
    ("httpx", "timeout"): ClientError(httpx.ReadTimeout, httpx.TransportError, httpx.ReadTimeout),
    ("httpx2", "transport"): ClientError(
        httpx2.RemoteProtocolError, httpx2.TransportError, httpx2.RemoteProtocolError
    ),
    ("httpx2", "timeout"): ClientError(
        httpx2.ReadTimeout, httpx2.TransportError, httpx2.ReadTimeout
    ),
    ("requests", "transport"): ClientError(
        requests.exceptions.ChunkedEncodingError,
        requests.RequestException,
        urllib3.exceptions.ProtocolError,
    ),
    ("requests", "timeout"): ClientError(
        requests.exceptions.ConnectionError,
        requests.RequestException,
        urllib3.exceptions.ReadTimeoutError,
    ),
    ("aiohttp", "transport"): ClientError(
        aiohttp.ClientPayloadError, aiohttp.ClientError, aiohttp.ClientPayloadError
    ),
    ("aiohttp", "timeout"): ClientError(
        aiohttp.SocketTimeoutError, aiohttp.ClientError, aiohttp.SocketTimeoutError
    ),
}


@dataclass(frozen=True)
class Client:
    """A client library in its sync or async dialect."""

    library: Library
    is_async: bool = False

    def __post_init__(self) -> None:
        assert not (self.is_async and self.library == "requests"), "requests has no async client"
        assert self.is_async or self.library != "aiohttp", "aiohttp has no sync client"

    @property
    def id(self) -> str:
        return f"{self.library}-async" if self.is_async else self.library

    def __str__(self) -> str:
        return self.id

    @property
    def module(self) -> Any:
        modules = {"httpx": httpx, "httpx2": httpx2, "requests": requests, "aiohttp": aiohttp}
        return modules[self.library]

    @property
    def _kind(self) -> tuple[str, bool]:
        return ("httpx" if self.library == "httpx2" else self.library, self.is_async)

    @property
    def styles(self) -> tuple[Style, ...]:
        """Every way an application reads this client's body (unstreamed last)."""
        return (*_STYLES[self._kind], UNSTREAMED)

    @property
    def default_style(self) -> Style:
        """Decoded bytes in network pieces: ``iter_bytes``, ``aiter_bytes``, ``iter_content``,
        ``content.iter_any``."""
        return self.styles[0]

    @property
    def sized_styles(self) -> tuple[Style, Style]:
        """The two styles that read pieces of a size the application chooses (size unset)."""
        first, second = _SIZED[self._kind]
        return Style(first), Style(second)

    @property
    def raw_style(self) -> Style:
        """The read of the coded bytes as they came (size unset): httpx ``iter_raw``/
        ``aiter_raw``, requests ``raw.read``, aiohttp ``iter_chunked`` without decompressing."""
        return Style(_RAW_STYLE[self._kind])

    def raises(self, kind: Kind) -> ClientError:
        return ERRORS[self.library, kind]

    @property
    def patched(self) -> tuple[type, str]:
        """The method otelsse wraps for this client: (owner, name)."""
        if self.library == "requests":
            return requests.Session, "request"
        if self.library == "aiohttp":
            return aiohttp.ClientSession, "_request"
        return (self.module.AsyncClient if self.is_async else self.module.Client), "send"

    def body_source(self, response: Any) -> Any:
        """What the response reads its body from: httpx ``.stream``, requests ``.raw``,
        aiohttp ``.content``."""
        if self.library == "aiohttp":
            return response.content
        return response.raw if self.library == "requests" else response.stream

    @property
    def response_class(self) -> type:
        """The class of this client's responses."""
        return aiohttp.ClientResponse if self.library == "aiohttp" else self.module.Response

    @property
    def source_class(self) -> type:
        """What the body source is an instance of: httpx's ``SyncByteStream``/
        ``AsyncByteStream``, urllib3's ``HTTPResponse``, aiohttp's ``StreamReader``."""
        if self.library == "aiohttp":
            return aiohttp.StreamReader
        if self.library == "requests":
            return urllib3.response.HTTPResponse
        return self.module.AsyncByteStream if self.is_async else self.module.SyncByteStream  # type: ignore[no-any-return]

    def status(self, response: Any) -> int:
        """The response's status code."""
        return int(response.status if self.library == "aiohttp" else response.status_code)

    def closed(self, response: Any) -> bool:
        """Whether the response reports itself closed: httpx ``is_closed``, requests
        ``raw.closed``, aiohttp ``closed``."""
        if self.library == "requests":
            return bool(response.raw.closed)
        return bool(response.closed if self.library == "aiohttp" else response.is_closed)

    def request_line(self, response: Any) -> tuple[str, str]:
        """The method and URL of the request the response answers."""
        if self.library == "aiohttp":
            return response.method, str(response.url)
        return response.request.method, str(response.request.url)

    @property
    def runs_under_trio(self) -> bool:
        """An async client that runs under trio as under asyncio: httpx's ``AsyncClient`` (on
        anyio); aiohttp runs on asyncio only."""
        return self.is_async and self.library != "aiohttp"

    @property
    def holds_abandoned(self) -> bool:
        """Whether the client itself holds a response the application dropped before its body
        ended. aiohttp does: the connection in the session's pool holds the body reader, which
        holds the response's end-of-body callback, so the response (and its stream) lives on
        until aiohttp lets it go: the body ends, the connection drops or times out, the session
        closes (``AsyncSession.let_go``). The others hold nothing: the application's last
        reference was the only one, and the response's collection ends its stream."""
        return self.library == "aiohttp"


CLIENTS = (
    Client("httpx"),
    Client("httpx", is_async=True),
    Client("httpx2"),
    Client("httpx2", is_async=True),
    Client("requests"),
    Client("aiohttp", is_async=True),
)
SYNC_CLIENTS = tuple(c for c in CLIENTS if not c.is_async)
ASYNC_CLIENTS = tuple(c for c in CLIENTS if c.is_async)


# --------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------


class _Base:
    def __init__(
        self, client: Client, *, read_timeout: float = READ_TIMEOUT, style: Style | None = None
    ) -> None:
        self.client = client
        self.read_timeout = read_timeout
        #: What ``chunks`` reads when not told.
        self.style = style or client.default_style

    def _timeout(self) -> Any:
        if self.client.library == "aiohttp":
            return aiohttp.ClientTimeout(connect=READ_TIMEOUT, sock_read=self.read_timeout)
        if self.client.library == "requests":
            return (READ_TIMEOUT, self.read_timeout)
        return self.client.module.Timeout(READ_TIMEOUT, read=self.read_timeout)

    @staticmethod
    def _request(request: dict[str, Any]) -> dict[str, Any]:
        """``json``/``headers``/... as given; the streaming chat request when no body is."""
        if not request.keys() & {"json", "content", "data"}:
            request = {**request, "json": STREAMING}
        return request

    def chunks(self, response: Any, style: Style | None = None, size: int | None = None) -> Any:
        """The body as the application iterates it (``async for`` on an async session)."""
        style = style or self.style
        if size is not None:
            style = style.sized(size)
        return _READS[style.name](response, style.size)


class Session(_Base):
    """A sync session: an httpx/httpx2 ``Client`` or a requests ``Session``."""

    def __enter__(self) -> Session:
        assert not self.client.is_async
        self._exit = contextlib.ExitStack()
        if self.client.library == "requests":
            self.http: Any = self._exit.enter_context(requests.Session())
        else:
            module = self.client.module
            self.http = self._exit.enter_context(module.Client(timeout=self._timeout(), verify=TLS))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    def send(self, url: str, **request: Any) -> Any:
        """A streaming response the application manages itself (no ``with``)."""
        request = self._request(request)
        if self.client.library == "requests":
            return self.http.post(url, stream=True, timeout=self._timeout(), **request)
        return self.http.send(self.http.build_request("POST", url, **request), stream=True)

    def stream(self, url: str, **request: Any) -> contextlib.AbstractContextManager[Any]:
        """The client's own context manager around a streaming response (requests': the
        response itself)."""
        if self.client.library == "requests":
            return self.send(url, **request)  # type: ignore[no-any-return]
        return self.http.stream("POST", url, **self._request(request))  # type: ignore[no-any-return]

    def post(self, url: str, **request: Any) -> contextlib.AbstractContextManager[Any]:
        """An unstreamed response, the body read before it returns, as a context manager:
        requests' response is one; an httpx response has closed itself."""
        request = self._request(request)
        if self.client.library == "requests":
            return self.http.post(url, stream=False, timeout=self._timeout(), **request)  # type: ignore[no-any-return]
        return contextlib.nullcontext(self.http.post(url, **request))

    def head(self, url: str, **request: Any) -> int:
        """A HEAD request; its status."""
        return self.client.status(self.http.head(url, **request))


class AsyncSession(_Base):
    """The async twin of ``Session``: an httpx/httpx2 ``AsyncClient`` or an aiohttp
    ``ClientSession`` (whose responses always stream: ``send`` and ``stream`` are ``post``
    without and with ``async with``, ``post`` reads the body with ``response.read()``; a raw
    style asks for the coded bytes with ``auto_decompress=False``)."""

    async def __aenter__(self) -> AsyncSession:
        assert self.client.is_async
        if self.client.library == "aiohttp":
            self.http: Any = aiohttp.ClientSession(timeout=self._timeout())
        else:
            self.http = self.client.module.AsyncClient(timeout=self._timeout(), verify=TLS)
        await self.http.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.http.__aexit__(None, None, None)

    def _request(  # type: ignore[override]
        self, request: dict[str, Any], style: Style | None = None
    ) -> dict[str, Any]:
        """As the sync one's, for a body to be read in ``style`` (the session's by default)."""
        request = super()._request(request)
        if self.client.library == "aiohttp":
            if "content" in request:  # httpx's raw body
                request = {**request, "data": request.pop("content")}
            if (style or self.style).raw:  # the coded bytes: aiohttp decodes unless told not to
                request = {**request, "auto_decompress": False}
        return request

    async def send(self, url: str, *, style: Style | None = None, **request: Any) -> Any:
        """A streaming response the application manages itself (no ``async with``), to be read
        in ``style`` (the session's by default)."""
        request = self._request(request, style)
        if self.client.library == "aiohttp":
            return await self.http.post(url, **request)
        return await self.http.send(self.http.build_request("POST", url, **request), stream=True)

    def stream(
        self, url: str, *, style: Style | None = None, **request: Any
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """The client's own async context manager around a streaming response."""
        request = self._request(request, style)
        if self.client.library == "aiohttp":
            return self.http.post(url, **request)  # type: ignore[no-any-return]
        return self.http.stream("POST", url, **request)  # type: ignore[no-any-return]

    async def post(self, url: str, **request: Any) -> Any:
        response = await self.http.post(url, **self._request(request))
        if self.client.library == "aiohttp":
            await response.read()  # releases the connection, as httpx's post() does
        return response

    def body(self, response: Any) -> bytes:
        """The body an unstreamed ``post`` read."""
        return response._body if self.client.library == "aiohttp" else response.content  # type: ignore[no-any-return]

    async def head(self, url: str, **request: Any) -> int:
        """A HEAD request; its status (aiohttp's response released)."""
        if self.client.library == "aiohttp":
            async with self.http.head(url, **request) as response:
                return self.client.status(response)
        return self.client.status(await self.http.head(url, **request))

    async def close(self, response: Any) -> None:
        """The application closes a streaming response: httpx ``await response.aclose()``,
        aiohttp ``response.release()`` (which closes a connection whose body is unfinished;
        ``test_aiohttp.py`` has its ``close()``)."""
        if self.client.library == "aiohttp":
            response.release()
        else:
            await response.aclose()

    @staticmethod
    async def close_chunks(chunks: Any) -> None:
        """The application closes the iterator it stopped reading: an async generator (httpx's
        ``aiter_*``) is closed with ``aclose()``; aiohttp's own iterators hold nothing to close."""
        if inspect.isasyncgen(chunks):
            await chunks.aclose()

    async def let_go(self) -> None:
        """Make the client let go of the responses the application dropped unfinished
        (``Client.holds_abandoned``): aiohttp's session closes its connections, which held
        them, and serves no more requests; httpx held none."""
        if self.client.holds_abandoned:
            await self.http.close()


# --------------------------------------------------------------------------------------------
# Applications: one behaviour, two dialects
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class App:
    """One application behaviour, in its sync and its async dialect (first argument: the
    ``Session``/``AsyncSession``)."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]


def run(
    client: Client,
    app: App,
    *args: Any,
    read_timeout: float = READ_TIMEOUT,
    style: Style | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``app`` on a fresh session of ``client`` (reading in ``style`` unless it says
    otherwise); return what it returns."""
    options = {"read_timeout": read_timeout, "style": style}
    if client.is_async:

        async def main() -> Any:
            async with AsyncSession(client, **options) as http:
                return await app.async_(http, *args, **kwargs)

        return asyncio.run(main())
    with Session(client, **options) as http:
        return app.sync(http, *args, **kwargs)


@dataclass
class Got:
    """What the application saw: the status and headers, what it read, what it caught."""

    style: Style
    parts: list[Any] = field(default_factory=list)
    status: int | None = None
    #: The response headers, names in lower case.
    headers: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None
    #: (type of the response, type of its body source: httpx ``.stream``, requests ``.raw``)
    types: tuple[type, type] | None = None
    #: The same by ``__class__``: what ``isinstance`` sees (a transparent proxy passes on its
    #: target's class).
    classes: tuple[type, type] | None = None

    def headers_in(self, client: Client, response: Any) -> None:
        source = client.body_source(response)
        self.status = client.status(response)
        self.headers = {name.lower(): value for name, value in response.headers.items()}
        self.types = (type(response), type(source))
        self.classes = (response.__class__, source.__class__)

    @property
    def data(self) -> Any:
        """Everything read, joined (lines kept apart: their split is part of the result)."""
        if self.style.lines:
            return tuple(self.parts)
        if self.parts and isinstance(self.parts[0], str):
            return "".join(self.parts)
        return b"".join(self.parts)

    @property
    def caught(self) -> tuple[type[BaseException], str] | None:
        """The exception's type and message."""
        return None if self.error is None else (type(self.error), str(self.error))

    @property
    def seen(self) -> tuple[Any, tuple[type[BaseException], str] | None]:
        """The data and the exception, without network-sized piece boundaries (they vary)."""
        return self.data, self.caught

    @property
    def exact(self) -> tuple[tuple[Any, ...], tuple[type[BaseException], str] | None]:
        """Every piece as it was handed over, and the exception."""
        return tuple(self.parts), self.caught


def _nothing() -> None:
    pass


def read(
    http: Session,
    url: str,
    style: Style | None = None,
    *,
    on_headers: Callable[[], None] = _nothing,
    **request: Any,
) -> Got:
    """POST to ``url`` and read the whole answer in ``style`` (the session's by default).

    ``on_headers`` runs once the response headers are in, before the application reads a byte.
    Any exception the client raises is caught and kept, exactly as the application got it.
    """
    got = Got(style or http.style)
    try:
        if got.style == UNSTREAMED:
            with http.post(url, **request) as response:
                got.headers_in(http.client, response)
                on_headers()
                got.parts.append(response.content)
            return got
        with http.stream(url, **request) as response:
            got.headers_in(http.client, response)
            on_headers()
            for part in http.chunks(response, got.style):
                got.parts.append(part)
    except Exception as exc:
        got.error = exc
    return got


async def aread(
    http: AsyncSession,
    url: str,
    style: Style | None = None,
    *,
    on_headers: Callable[[], None] = _nothing,
    **request: Any,
) -> Got:
    """The async twin of ``read``."""
    got = Got(style or http.style)
    try:
        if got.style == UNSTREAMED:
            response = await http.post(url, **request)
            got.headers_in(http.client, response)
            on_headers()
            got.parts.append(http.body(response))
            return got
        async with http.stream(url, style=got.style, **request) as response:
            got.headers_in(http.client, response)
            on_headers()
            async for part in http.chunks(response, got.style):
                got.parts.append(part)
    except Exception as exc:
        got.error = exc
    return got


#: Read the whole body; keep what the application got, or the exception it caught.
READ = App(read, aread)


def fetch(
    client: Client,
    url: str,
    style: Style | None = None,
    *,
    read_timeout: float = READ_TIMEOUT,
    **options: Any,
) -> Got:
    """``READ`` on a fresh session of ``client``: one request, read like an application.

    ``options``: ``on_headers`` and the request's ``json``/``headers``/...
    """
    return run(client, READ, url, read_timeout=read_timeout, style=style, **options)


@contextlib.contextmanager
def streaming(
    client: Client, url: str, *, read_timeout: float = READ_TIMEOUT, **request: Any
) -> Iterator[Any]:
    """A streaming response of a fresh sync session of ``client``, closed on exit."""
    with (
        Session(client, read_timeout=read_timeout) as http,
        http.stream(url, **request) as response,
    ):
        yield response


@contextlib.asynccontextmanager
async def astreaming(
    client: Client, url: str, *, read_timeout: float = READ_TIMEOUT, **request: Any
) -> AsyncIterator[Any]:
    """The async twin of ``streaming``."""
    async with (
        AsyncSession(client, read_timeout=read_timeout) as http,
        http.stream(url, **request) as response,
    ):
        yield response


# --------------------------------------------------------------------------------------------
# The reference run
# --------------------------------------------------------------------------------------------


def wrapping_depths() -> list[int]:
    """How many wrappers sit on each client's patched method (a wrapper has ``__wrapped__``)."""
    depths = []
    for owner, name in (client.patched for client in CLIENTS):
        depth, attribute = 0, vars(owner)[name]
        while hasattr(attribute, "__wrapped__"):
            depth, attribute = depth + 1, attribute.__wrapped__
        depths.append(depth)
    return depths


@contextlib.contextmanager
def uninstrumented(otel: Telemetry) -> Iterator[None]:
    """Run the block with otelsse really uninstrumented (the reference run), then instrument it
    again against ``otel``'s providers. The block must leave no span and count no stream."""
    import otelsse  # here, not at the top: stream_app.py imports this module as an application

    streams = otel.streams_by_outcome()  # streams counted before (a Hypothesis test's examples)
    otelsse.uninstrument()
    # Checked before instrumenting again, which would otherwise stack a second wrapper.
    assert wrapping_depths() == [0] * len(CLIENTS), "uninstrument() left the clients wrapped"
    try:
        yield
    finally:
        otel.install()
    assert otel.spans() == [], "the reference run was observed: otelsse was still on"
    assert otel.streams_by_outcome() == streams
