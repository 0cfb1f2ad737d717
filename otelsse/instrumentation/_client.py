"""What otelsse needs to know about an HTTP client library, and which libraries it knows.

A client module (``_httpx.py`` for httpx and httpx2, ``_requests.py``, ``_aiohttp.py``) owns
everything about its
library's shape: where the instrumentation hooks in and how it taps a body, a response's status,
headers and request, how the enforcing reader pulls the body as it arrives, and how the library's
exceptions map onto how a stream ended. Nothing outside a client module reads a client's
attributes. Adding a client is one module with a ``CLIENTS`` mapping plus one line in
``CLIENT_MODULES``.

Standard library only: the enforcing reader finds a response's client here without loading
OpenTelemetry. A client module is imported only when its library is in use.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..monitor import StreamError

if TYPE_CHECKING:
    from ._observer import Settings

__all__ = [
    "CLIENT_MODULES",
    "Client",
    "RequestFields",
    "client_of",
    "error_chain",
    "get_client",
    "is_transport_failure",
    "request_fields",
    "stream_error",
]

#: Client library (its import name, the ``clients=`` option value) -> the module of this package
#: that describes it in its ``CLIENTS`` mapping.
CLIENT_MODULES: dict[str, str] = {
    "httpx": "_httpx",
    "httpx2": "_httpx",
    "requests": "_requests",
    "aiohttp": "_aiohttp",
}

#: What a client patches: (owner class, method name, wrapper factory taking the ``Settings``).
Target = tuple[type, str, Callable[["Settings"], Callable[..., Any]]]


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
    def is_transport(self, error: BaseException) -> bool:
        """Whether ``error`` is one this library raises when the connection or the peer fails
        while a body is read (lost connection, broken framing, a body it cannot decode), as
        opposed to a misuse of the library. Called only when the library is imported."""


_STREAM_TRUE = re.compile(rb'"stream"\s*:\s*true')
# A JSON string value of at most 256 characters; inside a string (content) the quotes would be
# escaped, so message text cannot match.
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\\x00-\x1f]|\\.){1,256})"')


class RequestFields(NamedTuple):
    """What otelsse reads of a JSON request body: identifiers, never content."""

    #: The body says ``"stream": true``.
    stream: bool
    #: Its ``model`` field (``gen_ai.request.model``), when it is a short string.
    model: str | None


def request_fields(body: object) -> RequestFields:
    """``stream`` and ``model`` of a JSON request body, read without parsing it: two regular
    expression searches over the bytes (the body may be megabytes of messages)."""
    if type(body) is bytes:  # what every client holds: no conversion, no copy
        data = body
    elif isinstance(body, dict):
        model = body.get("model")
        model = model if isinstance(model, str) and 0 < len(model) <= 256 else None
        return RequestFields(body.get("stream") is True, model)
    elif isinstance(body, str):
        data = body.encode("utf-8", "replace")
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    else:
        return RequestFields(False, None)
    stream = b'"stream"' in data and _STREAM_TRUE.search(data) is not None
    found = _MODEL.search(data) if b'"model"' in data else None
    return RequestFields(stream, None if found is None else _json_string(found.group(1)))


class RequestScan:
    """``request_fields`` of a body that passes in pieces (a server's app or a proxy reads it):
    each piece is searched with the tail of the one before, so a field cut between two pieces
    is found, and nothing of the body is kept beyond that tail."""

    # Enough for a ``"model": "..."`` pair (256 characters, each at most a 6-byte JSON escape).
    _TAIL = 2048

    __slots__ = ("_tail", "model", "stream")

    def __init__(self) -> None:
        self._tail = b""
        self.stream = False
        self.model: str | None = None

    def feed(self, piece: bytes) -> None:
        window = self._tail + piece
        found = request_fields(window)
        self.stream = self.stream or found.stream
        if self.model is None:
            self.model = found.model
        self._tail = window[-self._TAIL :]

    @property
    def fields(self) -> RequestFields:
        return RequestFields(self.stream, self.model)


def _json_string(raw: bytes) -> str | None:
    if b"\\" not in raw:  # no escape (nearly every model name): the bytes are the text
        try:
            return raw.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes
        except UnicodeDecodeError:
            return None
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def get_client(library: str) -> Client:
    """The ``Client`` of a library named in ``CLIENT_MODULES`` (imports its module).

    Raises:
        KeyError: otelsse knows no client of that name.
    """
    module = importlib.import_module(f"{__package__}.{CLIENT_MODULES[library]}")
    client: Client = module.CLIENTS[library]
    return client


def client_of(response: object) -> Client | None:
    """The client whose library made ``response`` (by its class's module), or None."""
    for cls in type(response).__mro__:
        library = cls.__module__.partition(".")[0]
        if library in CLIENT_MODULES:
            return get_client(library)
    return None


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it wraps: its cause or context, or an exception given as its first
    argument (requests wraps urllib3's errors that way). Cycles and long chains are cut."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return
        yield seen
        wrapped = seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None
        seen = seen.__cause__ or seen.__context__ or wrapped


def stream_error(error: BaseException) -> StreamError:
    """How an exception raised while a body was read ended the stream, whatever the source.

    Cancellation (generator close, Ctrl-C, asyncio's, anyio's or trio's cancellation) is the
    application's doing. A timeout anywhere in the chain (Python's or asyncio's, or one a loaded
    client library recognises as its own: each client module owns its timeout classes) is the
    read deadline. Anything else lost the connection.
    """
    if isinstance(error, _cancellation_types()):
        return "cancelled"
    builtin = _timeout_types()
    loaded = _loaded_clients()
    for link in error_chain(error):
        if isinstance(link, builtin) or any(client.is_timeout(link) for client in loaded):
            return "timeout"
    return "transport"


def is_transport_failure(error: BaseException) -> bool:
    """Whether ``error`` is the network's or the peer's doing: an I/O error (``OSError``,
    timeouts included, or ``EOFError``) anywhere in its chain, or one a loaded client library
    raises for its transport. A bug in whatever produced the bytes is not."""
    loaded = _loaded_clients()
    for link in error_chain(error):
        if isinstance(link, (OSError, EOFError, *_timeout_types())) or any(
            client.is_transport(link) for client in loaded
        ):
            return True
    return False


def _loaded_clients() -> list[Client]:
    # A library never imported cannot have raised: its module is not imported here either.
    return [get_client(library) for library in CLIENT_MODULES if library in sys.modules]


def _cancellation_types() -> tuple[type[BaseException], ...]:
    # anyio cancels with its backend's class: asyncio's or trio's. An event loop that was never
    # imported cannot have cancelled anything, so neither is imported here.
    kinds: list[type[BaseException]] = [GeneratorExit, KeyboardInterrupt]
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:
        kinds.append(asyncio.CancelledError)
    trio = sys.modules.get("trio")
    if trio is not None:
        kinds.append(trio.Cancelled)
    return tuple(kinds)


def _timeout_types() -> tuple[type[BaseException], ...]:
    # Before Python 3.11 asyncio's TimeoutError is a class of its own; if asyncio was never
    # imported, none of its errors can be in hand.
    asyncio = sys.modules.get("asyncio")
    return (TimeoutError,) if asyncio is None else (TimeoutError, asyncio.TimeoutError)
