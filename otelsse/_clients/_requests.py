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
from typing import Any

from ._base import Client, Target, Watch, Watcher
from ._scan import request_fields, rpc_fields
from ._urllib3 import TextURL, tap_raw

__all__ = ["CLIENTS", "RequestsClient"]


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


class RequestsClient(Client):
    """requests, over urllib3."""

    library = "requests"
    # urllib3 decodes for the application unless it reads ``raw`` itself without
    # ``decode_content``; the tap decodes exactly then (see ``RawTap._self_feed``).
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
        url = TextURL(str(arguments.get("url") or ""))
        return settings.watch(
            self,
            str(arguments.get("method") or "GET").upper(),
            url,
            url.parts.path,
            url.parts.query,
            body=lambda: request_fields(_body(arguments)),
            rpc=lambda: rpc_fields(_body(arguments)),
            header=lambda name: _header(session, arguments, name),
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
                watch.observe(response, tap_raw)
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


CLIENTS: dict[str, Client] = {"requests": RequestsClient()}
