"""``Client``: one HTTP client library's shape, and what a client module needs from the floor
above it (the observer), named as protocols.

A client module (``_httpx.py`` for httpx and httpx2, ``_requests.py``, ``_aiohttp.py``) owns
everything about its library's shape: where the instrumentation hooks in and how it taps a body,
a response's status, headers and request, how the enforcing reader pulls the body as it arrives,
and how the library's exceptions map onto how a stream ended. Nothing outside a client module
reads a client's attributes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from .._monitor import StreamError
from ._scan import RequestFields, RpcFields

__all__ = ["URL", "Client", "Observer", "Tap", "Target", "Watch", "Watcher"]


class URL(Protocol):
    """What the watch needs of a request URL (httpx's and yarl's ``URL`` have it); its ``str()``
    is the whole URL, matched against ``excluded_urls``."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...
    @property
    def scheme(self) -> str: ...


class Observer(Protocol):
    """What a tap feeds: the observer of one response's body (``StreamObserver``)."""

    def feed(self, chunk: bytes) -> None:
        """The application just read ``chunk``. In strict mode it may raise the stream's
        refusal instead, which the tap lets through to the application's read."""

    def fail(self, error: BaseException) -> None:
        """Reading raised ``error`` (which the tap re-raises). Never raises."""

    def finish(self, error: StreamError | None = None, *, reason: str | None = None) -> None:
        """The body ended: None at EOF (which in strict mode may raise the stream's refusal,
        as ``feed`` may), else how."""

    def decode_as(self, content_encoding: str | None) -> None:
        """The tap sees coded bytes from now on: decode them before judging."""


#: A client's tap: installs the tee in ``response`` for the observer and returns the body source
#: it put there (once nothing holds that source, nothing can read the body).
Tap = Callable[[Any, Observer], object]


class Watch(Protocol):
    """A request otelsse may observe, from send until its response headers (``Watch``)."""

    #: The request is expected to be answered with a stream (it asked for one).
    expects_sse: bool

    def __enter__(self) -> Watch: ...
    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None: ...

    def observe(self, response: Any, tap: Tap) -> None:
        """The response headers are in: observe its body through ``tap`` if it is a stream."""


_W = TypeVar("_W", bound=Watch)


class Watcher(Protocol):
    """What ``instrument()`` was given, as a client's wrappers use it (``Settings``)."""

    def begin(self, make: Callable[..., _W | None], *args: Any) -> _W | None:
        """``make(self, *args)``, the watch of a request about to be sent, or None."""

    def watch(
        self,
        client: Client,
        method: str,
        url: URL,
        path: str,
        query: str,
        *,
        body: Callable[[], RequestFields],
        rpc: Callable[[], RpcFields],
        header: Callable[[str], str | None],
    ) -> Watch | None:
        """Decide, before sending, whether this request may be a stream to observe."""


#: What a client patches: (owner class, method name, wrapper factory taking the settings).
Target = tuple[type, str, Callable[[Watcher], Callable[..., Any]]]


class Client(ABC):
    """One client library's shape: a subclass implements every abstract method; one instance
    per library.

    Attributes:
        library: the library's import name (``"httpx"``).
        taps_coded_body: the tap sees the body before content-decoding, so the observer must
            decode it (httpx's ``response.stream``); False when it sees what the app sees.
    """

    library: str
    taps_coded_body: bool

    @abstractmethod
    def targets(self) -> list[Target]:
        """The methods the instrumentation wraps (the library is imported here)."""

    # -- a response, for the instrumentation and the reader ------------------------------------

    @abstractmethod
    def status(self, response: Any) -> int:
        """The response's HTTP status code."""

    @abstractmethod
    def headers(self, response: Any) -> Mapping[str, str]:
        """The response headers, as a case-insensitive mapping."""

    @abstractmethod
    def request_line(self, response: Any) -> tuple[str, str] | None:
        """The method and URL of the request ``response`` answers, when it knows them."""

    @abstractmethod
    def consumed_body(self, response: Any) -> bytes | None:
        """The whole body when the library already read it (``stream=False``), else None."""

    @abstractmethod
    def chunks(self, response: Any) -> Iterator[bytes]:
        """The body, content-decoded, in pieces as they arrive (the enforcing reader)."""

    def achunks(self, response: Any) -> AsyncIterator[bytes]:
        """The async twin of ``chunks``."""
        raise TypeError(f"{self.library} responses cannot be read asynchronously")

    def close(self, response: Any) -> None:
        """Stop reading the body and release the connection (the reader is done with it)."""
        response.close()

    async def aclose(self, response: Any) -> None:
        """The async twin of ``close``."""
        await response.aclose()

    @abstractmethod
    def bound_reads(self, response: Any, seconds: float) -> None:
        """Make each read of the body give up after ``seconds`` at most, raising the library's
        own timeout. Called before the body is read."""

    @abstractmethod
    def is_timeout(self, error: BaseException) -> bool:
        """Whether ``error`` (one of this library's, or of the transport under it) is its read
        deadline firing. Called only when the library is imported."""

    @abstractmethod
    def body_cut_error(self) -> type[Exception]:
        """The library's own error for a body that broke off mid-way: strict mode's refusal is
        also one, so that ``except`` clauses and SDKs written for the network failure treat it
        as one. Called only when the library is imported."""

    @abstractmethod
    def is_transport(self, error: BaseException) -> bool:
        """Whether ``error`` is one this library raises when the connection or the peer fails
        while a body is read (lost connection, broken framing, a body it cannot decode), as
        opposed to a misuse of the library. Called only when the library is imported."""
