"""The client libraries otelsse knows, and what each one's exceptions say about a stream.

Each client library is one module of this package (``_httpx.py`` for httpx and httpx2,
``_requests.py``, ``_aiohttp.py``, ``_botocore.py``) with a ``CLIENTS`` mapping of its
``Client`` (``_base.py``): its shape for both the enforcing reader and the instrumentation.
Adding a client is one module plus one line in ``CLIENT_MODULES``. A client module is imported
only when its library is in use, and loads no OpenTelemetry and no wrapt until the
instrumentation installs its taps: the enforcing reader reads a response through it with the
standard library alone.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

from .._monitor import StreamError
from ._base import URL, Client, Observer, Tap, Target, Watch, Watcher
from ._scan import RequestFields, RequestScan, RpcFields, request_fields, rpc_fields

__all__ = [
    "CLIENT_MODULES",
    "URL",
    "Client",
    "Observer",
    "RequestFields",
    "RequestScan",
    "RpcFields",
    "Tap",
    "Target",
    "Watch",
    "Watcher",
    "client_of",
    "error_chain",
    "get_client",
    "is_transport_failure",
    "request_fields",
    "rpc_fields",
    "stream_error",
]

#: Client library (its import name, the ``clients=`` option value) -> the module of this package
#: that describes it in its ``CLIENTS`` mapping.
CLIENT_MODULES: dict[str, str] = {
    "httpx": "_httpx",
    "httpx2": "_httpx",
    "requests": "_requests",
    "aiohttp": "_aiohttp",
    "botocore": "_botocore",
}


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
    # A library never imported cannot have raised: its module is not imported here either. Nor
    # one another thread is still importing (CPython marks its spec ``_initializing``): its
    # classes may not be defined yet.
    return [get_client(library) for library in CLIENT_MODULES if _imported(library)]


def _imported(name: str) -> bool:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def _cancellation_types() -> tuple[type[BaseException], ...]:
    # anyio cancels with its backend's class: asyncio's or trio's. An event loop that was never
    # imported cannot have cancelled anything, so neither is imported here.
    kinds = [GeneratorExit, KeyboardInterrupt]
    return (*kinds, *_loaded_classes(("asyncio", "CancelledError"), ("trio", "Cancelled")))


def _timeout_types() -> tuple[type[BaseException], ...]:
    # Before Python 3.11 asyncio's TimeoutError is a class of its own; if asyncio was never
    # imported, none of its errors can be in hand.
    return (TimeoutError, *_loaded_classes(("asyncio", "TimeoutError")))


def _loaded_classes(*named: tuple[str, str]) -> list[type[BaseException]]:
    """The exception classes ``(module, name)`` of the modules imported so far. A module another
    thread is still importing is in ``sys.modules`` without all of its names: a class it has not
    defined yet cannot have been raised."""
    found = []
    for module_name, name in named:
        kind = getattr(sys.modules.get(module_name), name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return found
