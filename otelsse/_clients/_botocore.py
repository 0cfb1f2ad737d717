"""botocore (and boto3 above it): its shape, the wrapper of ``Endpoint._send`` that taps
``response.raw``, and the reading of an ``EventStream`` for the enforcing reader.

botocore sends through urllib3 directly (``botocore/httpsession.py``, ``URLLib3Session.send``:
``urlopen(..., preload_content=False, decode_content=False)``), so no other client module sees
its requests. ``Endpoint._send(request)`` (``botocore/endpoint.py``) runs once per attempt, a
retry being a new stream, with the signed ``AWSPreparedRequest``, and returns the
``AWSResponse`` whose ``raw`` is urllib3's ``HTTPResponse``. For an operation with event-stream
output (Bedrock's ``ConverseStream``, ``InvokeModelWithResponseStream``) botocore hands that
``raw`` to the ``EventStream`` it returns as ``response["stream"]``
(``convert_to_response_dict``), which reads it through ``raw.stream()`` and closes it with
``raw.close()`` (``botocore/eventstream.py``, botocore 1.43): the tap, installed in ``raw``
before botocore builds the ``EventStream``, is the requests module's tap of the same urllib3
response (``_urllib3.RawTap``). A response with a status of 300 or more, which botocore reads
whole (``http_response.content``), is judged at its headers (``rate_limited``,
``http_error``); its body is botocore's to parse into its ``ClientError``.

The enforcing reader reads what boto3 hands the application, ``response["stream"]`` (an
``EventStream``) or another streaming operation's ``StreamingBody`` (``botocore/response.py``):
each holds that urllib3 response as ``_raw_stream``, read here. aiobotocore's
``AioEventStream`` is a subclass (``client_of`` picks this client for it too) over an aiohttp
response, read through aiohttp's client. aiobotocore's requests are not seen here: its
``AioEndpoint`` overrides ``_send`` and sends through aiohttp's ``ClientSession.request``, which
the aiohttp module observes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from . import client_of
from ._base import Client, Target, Watch, Watcher
from ._scan import request_fields, rpc_fields
from ._urllib3 import TextURL, tap_raw

__all__ = ["CLIENTS", "BotocoreClient"]

#: The method of every request botocore answers with an ``EventStream``: each operation with
#: event-stream output in botocore 1.43's service models (25 of them, Bedrock's among them) is
#: a POST.
_EVENT_STREAM_METHOD = "POST"


class BotocoreClient(Client):
    """botocore, over urllib3 (boto3 is botocore's clients under another name)."""

    library = "botocore"
    # botocore reads the coded bytes (``decode_content=False``); the tap decodes exactly then
    # (see ``_urllib3.RawTap._self_feed``).
    taps_coded_body = False

    def targets(self) -> list[Target]:
        endpoint = importlib.import_module("botocore.endpoint")
        return [(endpoint.Endpoint, "_send", self._send_wrapper)]

    # A response is an ``AWSResponse`` (the instrumentation's, from ``Endpoint._send``), or
    # what botocore hands the application (the reader's): an ``EventStream``
    # (``response["stream"]``) or a ``StreamingBody`` (another streaming operation's body). Both
    # hold their HTTP response as ``_raw_stream``: urllib3's (read here) or, for aiobotocore's
    # ``AioEventStream``, another client's.

    def status(self, response: Any) -> int:
        raw, client = _parsed(response)
        if raw is None:
            return response.status_code  # type: ignore[no-any-return]
        if client is not None:
            return client.status(raw)
        return raw.status  # type: ignore[no-any-return]

    def headers(self, response: Any) -> Mapping[str, str]:
        # botocore's HeadersDict, urllib3's HTTPHeaderDict: both case-insensitive.
        raw, client = _parsed(response)
        if raw is None:
            return response.headers  # type: ignore[no-any-return]
        if client is not None:
            return client.headers(raw)
        return raw.headers  # type: ignore[no-any-return]

    def request_line(self, response: Any) -> tuple[str, str] | None:
        raw, client = _parsed(response)
        if client is not None:
            return client.request_line(raw)
        # urllib3 keeps the request target (the path and query, or the whole URL through a
        # proxy), not the method, which only an EventStream's operation tells; ``geturl()`` has
        # the target in urllib3 1.26 and 2.
        eventstream = sys.modules.get("botocore.eventstream")
        if raw is None or eventstream is None or not isinstance(response, eventstream.EventStream):
            return None
        url = raw.geturl()
        return None if url is None else (_EVENT_STREAM_METHOD, url)

    def consumed_body(self, response: Any) -> bytes | None:
        # ``AWSResponse.content`` keeps the body it read; botocore reads it inside ``_send`` for
        # an operation without streaming output. What botocore hands the application to read
        # has read nothing yet.
        return getattr(response, "_content", None)

    def chunks(self, response: Any) -> Iterator[bytes]:
        """The body as the bytes arrive, content-decoded: urllib3's ``read1`` returns what
        arrived; urllib3 1.26 has none, and is read as botocore's ``EventStream`` reads it."""
        raw, client = _parsed(response)
        if client is not None:
            return client.chunks(raw)
        read1 = getattr(raw, "read1", None)
        if read1 is None:
            return iter(raw.stream(decode_content=True))
        return _until_empty(read1)

    def achunks(self, response: Any) -> AsyncIterator[bytes]:
        raw, client = _parsed(response)
        return super().achunks(response) if client is None else client.achunks(raw)

    async def aclose(self, response: Any) -> None:
        raw, client = _parsed(response)
        if client is None:
            await super().aclose(response)
        else:
            await client.aclose(raw)

    def bound_reads(self, response: Any, seconds: float) -> None:
        raw, client = _parsed(response)
        if client is not None:
            client.bound_reads(raw, seconds)
            return
        # urllib3 reads the body from the connection's socket, whose timeout bounds each read.
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        if sock is not None:
            current = sock.gettimeout()
            sock.settimeout(seconds if current is None else min(current, seconds))

    def is_timeout(self, error: BaseException) -> bool:
        # Reading an EventStream raises urllib3's ReadTimeoutError itself; ``_send`` raises
        # botocore's own ReadTimeoutError and ConnectTimeoutError (from its vendored requests'
        # classes, not urllib3's). urllib3's NewConnectionError (a refused connection) derives
        # from its ConnectTimeoutError for history's sake only. ``import botocore`` loads
        # neither module: one not loaded cannot have raised.
        botocore = sys.modules.get("botocore.exceptions")
        if botocore is not None and isinstance(
            error, (botocore.ReadTimeoutError, botocore.ConnectTimeoutError)
        ):
            return True
        urllib3 = sys.modules.get("urllib3.exceptions")
        return (
            urllib3 is not None
            and isinstance(error, urllib3.TimeoutError)
            and not isinstance(error, urllib3.NewConnectionError)
        )

    def body_cut_error(self) -> type[Exception]:
        # What iterating an EventStream raises for a chunked body that broke off: urllib3's own
        # ProtocolError ("Response ended prematurely", "Connection broken: IncompleteRead"),
        # which botocore passes on unwrapped. A body with Content-Length or none ends silently:
        # botocore reads with enforce_content_length=False, and its EventStreamBuffer drops a
        # frame cut short.
        error: type[Exception] = sys.modules["urllib3"].exceptions.ProtocolError
        return error

    def is_transport(self, error: BaseException) -> bool:
        kinds: list[type[BaseException]] = []
        botocore = sys.modules.get("botocore.exceptions")
        if botocore is not None:
            # HTTPClientError: a read timeout, a connection closed before the response, any
            # failure of urllib3's send; ConnectionError: no connection (refused, TLS, proxy,
            # connect timeout); IncompleteReadError: a streaming body shorter than announced.
            kinds += [botocore.HTTPClientError, botocore.ConnectionError]
            kinds.append(botocore.IncompleteReadError)
        eventstream = sys.modules.get("botocore.eventstream")
        if eventstream is not None:
            # Frames the EventStream cannot decode (a CRC or length that fails its checks).
            kinds += [
                eventstream.ChecksumMismatch,
                eventstream.DuplicateHeader,
                eventstream.InvalidHeadersLength,
                eventstream.InvalidPayloadLength,
            ]
        urllib3 = sys.modules.get("urllib3.exceptions")
        if urllib3 is not None:
            kinds += [urllib3.ProtocolError, urllib3.DecodeError, urllib3.TimeoutError]
        return isinstance(error, tuple(kinds))

    def _watch(self, settings: Watcher, request: Any) -> Watch | None:
        url = TextURL(request.url)
        return settings.watch(
            self,
            request.method,
            url,
            url.parts.path,
            url.parts.query,
            # Asked only for a request on a known route: Bedrock's take the model and that they
            # stream from the URL, but a route of the application's own may read the body. The
            # bytes botocore serialised, searched as they are; a streaming upload (a file) is
            # not read.
            body=lambda: request_fields(request.body),
            rpc=lambda: rpc_fields(request.body),
            header=lambda name: _header(request, name),
        )

    def _send_wrapper(self, settings: Watcher) -> Callable[..., Any]:
        def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            watch = settings.begin(self._watch, args[0] if args else kwargs["request"])
            if watch is None:
                return wrapped(*args, **kwargs)
            with watch:
                response = wrapped(*args, **kwargs)
            watch.observe(response, tap_raw)
            return response

        return send


def _parsed(response: Any) -> tuple[Any, Client | None]:
    """The HTTP response an ``EventStream`` or a ``StreamingBody`` reads (None for an
    ``AWSResponse``), and the client that reads it when it is not urllib3's (aiobotocore's
    aiohttp response)."""
    raw = getattr(response, "_raw_stream", None)
    return raw, None if raw is None else client_of(raw)


def _until_empty(read1: Callable[..., bytes]) -> Iterator[bytes]:
    while chunk := read1(65536, decode_content=True):
        yield chunk


def _header(request: Any, name: str) -> str | None:
    # botocore's HeadersDict answers in any case; a value may be bytes (aiobotocore's
    # httpsession.py decodes them before handing them to aiohttp).
    value = request.headers.get(name)
    return value if isinstance(value, str) else None


CLIENTS: dict[str, Client] = {"botocore": BotocoreClient()}
