"""The proxy's ASGI app: ``/{upstream}/...`` forwarded, observed as the in-process
instrumentation observes a client's stream, and answered byte for byte.

    client ──ASGI── ProxyApp ──aiohttp── upstream
                       │ SERVER span (the client's trace continued)
                       └─ Watch/StreamObserver (``otelsse._observe``): the
                          ``otelsse.stream`` span and metrics of the upstream stream

The request body streams upstream as the client sends it, scanned on the way for ``stream`` and
``model`` (``RequestScan``) and never kept. The response's status, headers (less hop-by-hop
ones) and bytes (still content-coded: the observer decodes its own copy) go back as they
arrive; ``send`` waits while the client's socket is full, so a slow client slows the upstream
read. How the stream ended is passed on: an upstream cut aborts the client's connection (no
clean end of chunks); a client that leaves, at any moment, cancels the upstream request and
closes its connection (``cancelled``).

Strict mode (``--strict``, or ``strict`` per upstream in the config file) is the one exception:
a stream whose verdict it refuses (a cut before the route's terminal event, a clean end without
it, a fault found mid-stream) ends with the route's own error event
(``Route.strict_error_event``) and a clean end of the body, so that the client's SDK raises its
usual error in its own loop; never with an invented success. The client gets whole events only
(``WholeEvents``), so the error event never lands inside a half-sent one; and the proxy asks the
upstream for an uncoded body (``accept-encoding: identity``), to which an event can be added.
What it cannot end so (a body the upstream coded all the same, a route with no error event) it
cuts. A stream it accepts is relayed byte for byte as without strict mode.

What the proxy will not pass on it refuses with its own short JSON error, saying why: a path
some server would read as a dot segment, a method a reverse proxy does not forward, an upstream
answer HTTP does not let it relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import re
import sys
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from yarl import URL

from .. import semconv
from .._clients import RequestScan, error_chain, get_client
from .._core.framing import WholeEvents
from .._monitor import Limits, Outcome, StreamReport
from .._observe import Settings, StreamObserver, Watch
from .._reader import StreamFault
from .._telemetry import Telemetry
from ..routes import register_host
from ._config import ProxyConfig, Upstream

__all__ = ["MAX_RESPONSE_HEADERS", "MAX_RESPONSE_LINE_BYTES", "ProxyApp"]

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Header = tuple[bytes, bytes]

_LOG = logging.getLogger("otelsse.proxy")

# RFC 9110 §7.6.1: meaningful for one connection only, never forwarded; ``host`` is the
# upstream's (aiohttp sets it from the URL).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Headers aiohttp would add to a request that lacks them: the client's request stays its own.
_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
_MAX_PATH_CHARS = 512

#: The methods forwarded: RFC 9110 §9.3's methods on a target resource, and PATCH (RFC 5789).
#: Not CONNECT (§9.3.6: a tunnel to an authority, a forward proxy's business; aiohttp would send
#: it to the upstream's host and port), nor TRACE (§9.3.8: the request, credentials and all,
#: reflected back), nor a method whose meaning the proxy does not know.
FORWARDED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: Bounds on the upstream's response head, above aiohttp's defaults (8,190 bytes a line and
#: 128 fields) that common clients read past: 16 KiB is the whole head that Node
#: (``--max-http-header-size``) and httpx (h11's ``max_incomplete_event_size``) accept, so no
#: line those clients read is refused; 512 fields is past Python's http.client (100) and
#: aiohttp (128). A head that is larger costs the proxy at most fields x line in memory.
MAX_RESPONSE_LINE_BYTES = 16 * 1024
MAX_RESPONSE_HEADERS = 512

#: The proxy's own failures: status and the ``error.type`` on its span (and in its JSON body).
_FAILURES: dict[str, tuple[int, str]] = {
    "unknown_upstream": (404, "no upstream of that name is configured"),
    "bad_path": (400, "the path has a segment a server may read as '.' or '..'"),
    "bad_method": (400, "the proxy forwards GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS only"),
    "request_too_large": (413, "the request body is larger than the proxy forwards"),
    "too_many_streams": (503, "the proxy is at its limit of concurrent requests"),
    "too_many_connections": (503, "the proxy is at its limit of open connections"),
    "draining": (503, "the proxy is shutting down"),
    "shutdown": (503, "the proxy shut down before the upstream answered"),
    # Answered by the connection (_server.BoundedHttpProtocol) before the app sees a request.
    "header_too_large": (431, "the request head is larger than the proxy reads"),
    "uri_too_long": (414, "the request line is larger than the proxy reads"),
    "request_timeout": (408, "the request did not arrive in time"),
    "upstream_unreachable": (502, "the upstream could not be reached"),
    "upstream_disconnected": (502, "the upstream closed the connection before answering"),
    "upstream_head_too_large": (
        502,
        f"the upstream's response head has more than {MAX_RESPONSE_HEADERS} fields or a line "
        f"over {MAX_RESPONSE_LINE_BYTES} bytes",
    ),
    "upstream_bad_status": (502, "the upstream answered with a status HTTP does not define"),
    "upstream_invalid_response": (502, "the upstream's response is not valid HTTP"),
    "upstream_timeout": (504, "the upstream did not answer in time"),
}
#: The proxy is full for now, not broken: its 503 says when to try again (RFC 9110 §10.2.3).
_RETRY_LATER = frozenset({"too_many_streams", "too_many_connections"})


class ProxyApp:
    """An ASGI app forwarding ``/{name}/...`` to the configured upstream ``name``.

    ``/healthz`` answers while the process serves; ``/readyz`` until it starts draining. Any
    other first path segment that names no upstream gets a 404: the proxy never forwards to a
    host the client names.
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.config = config
        telemetry = Telemetry(tracer_provider, meter_provider)
        self.settings = Settings(telemetry, Limits() if limits is None else limits)
        # Each upstream's, strict mode its own (a cut the client library raised for is refused
        # too: the proxy answers it in the route's protocol).
        self._settings = {
            upstream.name: dataclasses.replace(
                self.settings, strict=config.strict_for(upstream), strict_cuts=True
            )
            for upstream in config.upstreams
        }
        self.tracer = telemetry.tracer
        self.client = get_client("aiohttp")  # the observer reads aiohttp's errors through it
        self._session: aiohttp.ClientSession | None = None
        self._in_flight = 0
        #: Set at SIGTERM: /readyz fails, and a stream cancelled from now on was cut by the
        #: shutdown, not by its client.
        self.draining = False
        for upstream in config.upstreams:
            if upstream.host_profile is not None:
                register_host(upstream.base.host or "", upstream.host_profile)

    def settings_for(self, upstream: Upstream) -> Settings:
        """How ``upstream``'s streams are observed: strict mode is per upstream."""
        return self._settings.get(upstream.name, self.settings)

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the app serves only after its lifespan startup"
        return self._session

    @property
    def in_flight(self) -> int:
        """Requests being forwarded now."""
        return self._in_flight

    async def startup(self) -> None:
        config = self.config
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=config.connect_timeout, sock_read=config.idle_timeout
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            max_line_size=MAX_RESPONSE_LINE_BYTES,
            max_field_size=MAX_RESPONSE_LINE_BYTES,
            max_headers=MAX_RESPONSE_HEADERS,
        )

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("latin-1")
        _, _, rest = raw_path.partition(b"/")
        name, slash, rest = rest.partition(b"/")
        first = name.decode("latin-1")
        if first in ("healthz", "readyz") and not slash:
            ready = first == "healthz" or (self._session is not None and not self.draining)
            status = 200 if ready else 503
            await _json(send, status, {"status": "ok" if ready else "unavailable"})
            return
        upstream = self.config.upstream(first)
        if upstream is None:
            await _refuse(send, "unknown_upstream")
            return
        if self.draining:
            await _refuse(send, "draining")
            return
        if self._in_flight >= self.config.max_streams:
            await _refuse(send, "too_many_streams")
            return
        self._in_flight += 1
        try:
            await _Exchange(self, upstream, scope, receive, send, b"/" + rest).run()
        finally:
            self._in_flight -= 1


class UpstreamCut(Exception):
    """Raised to the server so that it aborts the client's connection: the upstream's body
    broke off (the ASGI way of saying "do not end this response cleanly")."""


class _ShutdownCut(UpstreamCut):
    """The drain ran out mid-stream: the client's connection is cut as for an upstream cut (the
    server aborts it and logs no traceback), never ended as if the answer were whole."""


class _ClientLeft(Exception):
    """The client disconnected while its request body was being sent on."""


class _RequestTooLarge(Exception):
    """The client's body went past ``max_request_bytes`` while it was being sent on."""


class _Unrelayable(Exception):
    """The upstream answered what the proxy may not relay; ``kind`` says why."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _Exchange:
    """One forwarded request: its SERVER span, the upstream request, the answer relayed."""

    def __init__(
        self,
        app: ProxyApp,
        upstream: Upstream,
        scope: Scope,
        receive: Receive,
        send: Send,
        rest: bytes,
    ) -> None:
        self._app = app
        self._upstream = upstream
        self._settings = app.settings_for(upstream)
        self._scope = scope
        self._receive = receive
        self._send = send
        self._rest = rest
        self._method: str = scope["method"]
        self._headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        self._scan = RequestScan()
        self._body_done = asyncio.Event()
        self._client_gone = False  # whichever part of the exchange heard it
        self._too_large = False
        self._response: aiohttp.ClientResponse | None = None
        #: The stream's watch until its answer or its failure is known; then the observer of
        #: its body, if it is a stream.
        self._watch: Watch | None = None
        self._observer: StreamObserver | None = None
        self._head_sent = False
        #: This exchange's task while it waits for the upstream's answer, and whether the
        #: client's leaving cancelled it.
        self._awaiting_answer: asyncio.Task[Any] | None = None
        self._cancelled_for_client = False
        self._span: Span = trace.INVALID_SPAN

    async def run(self) -> None:
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in self._headers}
        parent = propagate.extract(carrier)
        self._span = span = self._app.tracer.start_span(
            f"{self._method} /{self._upstream.name}/{{path}}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=self._server_attributes(),
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            await self._forward()
        except asyncio.CancelledError:
            # Never the client's doing (its leaving is heard, see _await_disconnect).
            if not self._app.draining:
                self._stream_cancelled(None)
                self._failed("cancelled")
                raise
            # The drain ran out: the server cancels each request once and waits for it to end.
            # Each ends here, with the proxy's own answer, or a cut once its head went out.
            self._stream_cancelled("shutdown")
            if self._head_sent:
                self._failed("shutdown")
                raise _ShutdownCut from None
            await self._refuse("shutdown")
        finally:
            otel_context.detach(token)
            span.end()

    def _server_attributes(self) -> dict[str, Any]:
        scope = self._scope
        attributes: dict[str, Any] = {
            "http.request.method": self._method,
            "http.route": f"/{self._upstream.name}/{{path}}",
            # The path only: a query string may carry a key (Gemini's ``?key=``).
            "url.path": scope["path"][:_MAX_PATH_CHARS],
            "url.scheme": scope.get("scheme", "http"),
            semconv.PROXY_UPSTREAM: self._upstream.name,
        }
        server = scope.get("server")
        if server:
            attributes[semconv.SERVER_ADDRESS], attributes[semconv.SERVER_PORT] = server
        return attributes

    def _failed(self, kind: str, status: int | None = None) -> None:
        """The span says how the exchange failed: ``error.type``, and ERROR when the proxy or
        its upstream is at fault."""
        self._span.set_attribute(semconv.ERROR_TYPE, kind)
        if status is None or status >= 500:
            self._span.set_status(Status(StatusCode.ERROR))

    async def _refuse(self, kind: str) -> None:
        status = _FAILURES[kind][0]
        self._failed(kind, status)
        self._span.set_attribute(semconv.HTTP_RESPONSE_STATUS_CODE, status)
        await _refuse(self._send, kind)

    def _watch_failed(self, error: BaseException, reason: str | None = None) -> None:
        """No answer will be relayed: the stream's span ends as in-process for a request that
        failed before its response (``reason``: why it was cancelled)."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.learned(self._scan.fields)
            watch.failed(error, reason=reason)

    def _stream_cancelled(self, reason: str | None) -> None:
        """The stream's span says ``cancelled``, whether or not its answer had come."""
        if self._observer is not None:
            self._observer.finish("cancelled", reason=reason)
        else:
            self._watch_failed(asyncio.CancelledError(), reason)

    def _client_left(self) -> None:
        self._stream_cancelled("client_disconnect")
        self._failed("client_disconnect", 499)

    async def _forward(self) -> None:
        app = self._app
        if self._method not in FORWARDED_METHODS:
            await self._refuse("bad_method")
            return
        length = _header(self._headers, b"content-length")
        if length is not None and length.isdigit() and int(length) > app.config.max_request_bytes:
            await self._refuse("request_too_large")
            return
        try:
            url = _target(self._upstream, self._rest, self._scope.get("query_string", b""))
        except ValueError:
            await self._refuse("bad_path")
            return
        # RFC 9112 §6.1: a request has a body when it says how it is framed.
        first: Message | None = None
        if _header(self._headers, b"transfer-encoding") is not None or length not in (None, "0"):
            # Its first piece before sending: for most requests it is the whole body, and the
            # stream's span can start at the send, knowing what was asked.
            first = await self._receive()
            if first["type"] == "http.disconnect":
                self._failed("client_disconnect", 499)
                return
            self._scan.feed(first.get("body", b""))
        else:
            self._body_done.set()
        self._watch = self._settings.begin(
            lambda settings: settings.watch(
                app.client,
                self._method,
                url,
                url.path,
                url.query_string,
                # What its first piece said; Watch.learned() hears the rest.
                body=lambda: self._scan.fields,
                rpc=lambda: self._scan.rpc,
                header=lambda name: _header(self._headers, name.encode("latin-1")),
            )
        )
        gone = asyncio.ensure_future(self._await_disconnect())
        try:
            response = await self._answer(url, first)
            if response is not None:
                try:
                    await self._relay(response)
                finally:
                    response.close()
        finally:
            gone.cancel()

    async def _answer(self, url: URL, first: Message | None) -> aiohttp.ClientResponse | None:
        """The upstream's answer, once it is one the proxy may relay; None when the exchange
        ended without one (refused, or the client left)."""
        started = time.monotonic()
        # Sent from this task, which goes straight on to relay the answer (aiohttp's reader
        # raises an error it holds before the bytes it holds: an upstream cut just after the
        # head would otherwise take the bytes before it). The client leaving cancels it here.
        self._awaiting_answer = asyncio.current_task()
        try:
            with self._watch if self._watch is not None else contextlib.nullcontext():
                try:
                    answer: aiohttp.ClientResponse | BaseException = await self._request(url, first)
                except BaseException as exc:  # judged below, out of the watch
                    answer = exc
        finally:
            self._awaiting_answer = None
        if self._cancelled_for_client:  # even while draining: it is the client that left
            _uncancel()
            if isinstance(answer, aiohttp.ClientResponse):
                answer.close()
            self._client_left()
            return None
        if isinstance(answer, aiohttp.ClientResponse):
            return answer
        if not isinstance(answer, Exception):
            raise answer  # the drain's cancellation (run() answers it), or worse
        if self._client_gone:  # the body's reader heard it leave: the send failed
            self._client_left()
        elif self._too_large:
            self._watch_failed(answer)
            await self._refuse("request_too_large")
        else:
            self._watch_failed(answer)
            kind = _before_answer(answer)
            _LOG.warning(
                "upstream %s: %s after %.1fs (%s)",
                self._upstream.name,
                kind,
                time.monotonic() - started,
                type(answer).__name__,
            )
            await self._refuse(kind)
        return None

    async def _request(self, url: URL, first: Message | None) -> aiohttp.ClientResponse:
        """The upstream's answer, once it is one the proxy may relay (else ``_Unrelayable``)."""
        dropped = HOP_BY_HOP | _connection_tokens(self._headers)
        if self._settings.strict:
            # An event can be added to an uncoded body only: ask for one (RFC 9110 §12.5.3).
            dropped |= {b"accept-encoding"}
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self._headers
            if name not in dropped and name not in _SET_BY_PROXY
        ]
        if self._settings.strict:
            headers.append(("Accept-Encoding", "identity"))
        sent = {name.lower() for name, _ in headers}
        session = self._app.session
        response = await session.request(
            self._method,
            url,
            headers=headers,
            data=None if first is None else self._body(first),
            allow_redirects=False,
            skip_auto_headers=[name for name in _AUTO_HEADERS if name.lower() not in sent],
        )
        kind = _unrelayable(response)
        if kind is not None:
            response.close()  # the rest of this answer is not read: the connection goes
            raise _Unrelayable(kind)
        return response

    async def _body(self, message: Message) -> AsyncIterator[bytes]:
        """The client's body as it arrives, from its first ``message`` (already scanned): the
        rest scanned, all counted against the limit, none of it kept."""
        limit, sent = self._app.config.max_request_bytes, 0
        try:
            while True:
                if message["type"] == "http.disconnect":
                    self._client_gone = True
                    raise _ClientLeft
                piece: bytes = message.get("body", b"")
                sent += len(piece)
                if sent > limit:
                    self._too_large = True
                    raise _RequestTooLarge
                if piece:
                    yield piece
                if not message.get("more_body", False):
                    return
                message = await self._receive()
                self._scan.feed(message.get("body", b""))
        finally:
            self._body_done.set()

    async def _relay(self, response: aiohttp.ClientResponse) -> None:
        """The answer: its head, then its body as it arrives, and how it ended passed on."""
        watch, self._watch = self._watch, None
        observer: StreamObserver | None = None
        if watch is not None:
            watch.learned(self._scan.fields)
            observer = watch.response(response.status, response.headers, body_decoded=False)
        self._observer = observer
        dropped = HOP_BY_HOP | _connection_tokens(response.raw_headers)
        strict = self._settings.strict if observer is not None else frozenset()
        whole: WholeEvents | None = None
        if strict:
            # A body strict mode may end with an event of its own, or cut, goes to the client
            # chunked: a Content-Length would say it had ended whole, or forbid the event.
            dropped |= {b"content-length"}
            if response.headers.get("content-encoding", "identity").lower() == "identity":
                whole = WholeEvents(self._settings.limits.max_event_bytes)
        head = [(k, v) for k, v in response.raw_headers if k.lower() not in dropped]
        self._span.set_attribute(semconv.HTTP_RESPONSE_STATUS_CODE, response.status)
        if response.status >= 500:
            self._span.set_status(Status(StatusCode.ERROR))
        send = self._send
        # From now on the client leaving closes the response (no await since the request was
        # answered, so it cannot have left unheard in between).
        self._response = response
        refused: StreamReport | None = None
        try:
            await send({"type": "http.response.start", "status": response.status, "headers": head})
            self._head_sent = True
            async for chunk in response.content.iter_any():
                if self._client_gone:
                    break
                if observer is not None:
                    try:
                        observer.feed(chunk)
                    except StreamFault as fault:  # strict mode: a refused fault in this read
                        refused = fault.report or observer.report
                        if fault.code == Outcome.PROVIDER_ERROR.value and whole is not None:
                            # The provider's own error event: relayed, the refusal after it.
                            await self._send_body(whole.take(chunk))
                        break
                if whole is not None:
                    chunk = whole.take(chunk)
                    if whole.overflowed:
                        whole = None  # an event past every ceiling: relayed as it comes
                await self._send_body(chunk)
        except Exception as exc:
            if not self._client_gone:
                if observer is not None:
                    observer.fail(exc)
                    refused = observer.report if observer.refused else None
                self._failed("upstream_cut")
                _LOG.warning(
                    "upstream %s: the body broke off (%s)", self._upstream.name, type(exc).__name__
                )
                if refused is None:  # passed on as a cut, every byte before it relayed
                    if whole is not None:
                        await self._send_body(whole.flush())
                    raise UpstreamCut from exc
                await self._strict_end(refused, whole, cut=exc)
                return
        if self._client_gone:
            self._client_left()
            return
        if observer is not None and refused is None:
            try:
                observer.finish()
            except StreamFault as fault:  # strict mode: a clean end it refuses
                refused = fault.report or observer.report
        if refused is not None:
            self._failed(refused.outcome.value)
            await self._strict_end(refused, whole)
            return
        if whole is not None:
            await self._send_body(whole.flush())
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_body(self, body: bytes) -> None:
        if body:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def _strict_end(
        self,
        report: StreamReport,
        whole: WholeEvents | None,
        *,
        cut: BaseException | None = None,
    ) -> None:
        """End a stream strict mode refused, in its route's own protocol: its error event after
        the whole events relayed, then a clean end. Where it cannot (the body is coded, the
        route has no error event), the client's connection is cut (``UpstreamCut``)."""
        assert self._observer is not None
        assert self._response is not None
        self._response.close()  # nothing more of the upstream's answer is relayed
        outcome = report.outcome.value
        _LOG.warning(
            "upstream %s: stream refused by strict mode (%s)", self._upstream.name, outcome
        )
        event = self._observer.monitor.route_class.strict_error_event(
            f"otelsse_strict_{outcome}", f"otelsse strict mode refused the stream: {outcome}"
        )
        if whole is None or event is None:
            raise UpstreamCut from cut
        await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def _await_disconnect(self) -> None:
        """The client leaving, at any moment: then the upstream request is cancelled, or its
        response closed, which ends the relay's read at once. While the body streams, its
        reader hears the client; once the body is in, the client's next message can only be
        its disconnect."""
        await self._body_done.wait()
        if not self._client_gone:
            while (await self._receive())["type"] != "http.disconnect":
                pass
            self._client_gone = True
        if self._awaiting_answer is not None:
            self._cancelled_for_client = True
            self._awaiting_answer.cancel()  # aiohttp closes the upstream connection
        if self._response is not None:
            self._response.close()


def _uncancel() -> None:
    """This task handled a cancellation it asked for itself: take it back (since Python 3.11
    tasks count them, and ``asyncio.timeout``, which aiohttp uses, reads the count)."""
    task = asyncio.current_task()
    if sys.version_info >= (3, 11) and task is not None:
        task.uncancel()


_SET_BY_PROXY = frozenset({b"host", b"expect"})  # the upstream's host; 100-continue is uvicorn's


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _connection_tokens(headers: Any) -> frozenset[bytes]:
    """Headers the ``Connection`` header names: hop-by-hop too (RFC 9110 §7.6.1)."""
    tokens: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            tokens.update(token.strip().lower() for token in value.split(b","))
    return frozenset(tokens)


def _target(upstream: Upstream, rest: bytes, query: bytes) -> URL:
    """The upstream URL for the rest of the client's path, as the client encoded it.

    Raises ValueError for a path that would leave the upstream's base path (a segment some
    server reads as ``.`` or ``..``, see ``_dot_segment``) or its host.
    """
    if _dot_segment(rest):
        raise ValueError("dot segment")
    base = upstream.base
    text = str(base) + rest.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
    url = URL(text, encoded=True)
    if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        raise ValueError("host changed")
    return url


#: What some server takes for a path separator: ``/``, and ``\`` (IIS, Windows file servers).
_SEPARATORS = re.compile(r"[/\\]")
#: Where some server ends a segment before it resolves it: path parameters (``;``: Tomcat,
#: Jetty, Spring), a query or fragment (decoded from ``%3f``, ``%23``), a NUL (C strings).
_SEGMENT_END = re.compile(r"[;?#\x00]")
#: Percent-decodings a server may apply (some decode twice); a path that a third one still
#: changes is only hiding something, and is refused.
_DECODINGS = 2


def _dot_segment(path: bytes) -> bool:
    """Whether some server may read a segment of ``path`` as ``.`` or ``..`` (and, removing
    dot segments as RFC 3986 §5.2.4 says, leave the upstream's base path).

    The path is judged as the most lenient server reads it: percent-decoded twice, UTF-8 (an
    invalid sequence, such as the overlong ``%c0%ae`` for a dot, is refused: RFC 3629 §10),
    folded by NFKC (fullwidth dots and solidus, dot leaders), split at ``/`` and ``\\``, each
    segment cut at ``_SEGMENT_END``. A segment of dots, with or without spaces, is refused:
    Windows trims trailing dots and spaces.
    """
    decoded = path
    for _ in range(_DECODINGS):
        decoded = unquote_to_bytes(decoded)
    if unquote_to_bytes(decoded) != decoded:
        return True
    try:
        text = unicodedata.normalize("NFKC", decoded.decode("utf-8"))
    except UnicodeDecodeError:
        return True
    for segment in _SEPARATORS.split(text):
        kept = _SEGMENT_END.split(segment, 1)[0]
        if "." in kept and not kept.replace(".", "").strip():
            return True
    return False


#: RFC 9110 §5.5: a field value with CR, LF or NUL is "invalid and dangerous", one with another
#: CTL invalid too (kept only where no downstream parser reads it: not a proxy's case).
_INVALID_FIELD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _unrelayable(response: aiohttp.ClientResponse) -> str | None:
    """Why the proxy may not relay the upstream's answer, or None.

    RFC 9110 §15: "Values outside the range 100..599 are invalid", and a recipient treats one
    as a 5xx: for a gateway, a 502 (§15.6.3). Any code of 200-599 is relayed as it is (a client
    treats one it does not know as the x00 of its class). Of the 1xx, aiohttp reads past the
    interim ones; a 101 switches to a protocol the proxy never asked for (it forwards no
    ``Upgrade``; §15.2.2, §7.8).
    """
    if not 200 <= response.status <= 599:
        return "upstream_bad_status"
    if any(_INVALID_FIELD_VALUE.search(value) for _, value in response.raw_headers):
        return "upstream_invalid_response"
    return None


def _before_answer(error: BaseException) -> str:
    """The proxy's name for a failure before the upstream's answer could be relayed."""
    if isinstance(error, _Unrelayable):
        return error.kind
    if isinstance(error, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return "upstream_timeout"
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "upstream_disconnected"
    if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
        return "too_many_connections"  # the proxy's descriptors ran out, not the upstream
    # aiohttp's parser: a line past its bound is a LineTooLong, too many fields a plain
    # BadHttpMessage that says so; any other HttpProcessingError is a head that is not HTTP.
    chain = list(error_chain(error))
    if any(
        isinstance(link, LineTooLong)
        or (isinstance(link, HttpProcessingError) and link.message == "Too many headers received")
        for link in chain
    ):
        return "upstream_head_too_large"
    if any(isinstance(link, HttpProcessingError) for link in chain):
        return "upstream_invalid_response"
    return "upstream_unreachable"


async def _json(send: Send, status: int, document: dict[str, Any], *extra: Header) -> None:
    await _send(send, status, *_json_body(document, *extra))


def _json_body(document: dict[str, Any], *extra: Header) -> tuple[list[Header], bytes]:
    body = json.dumps(document).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    return headers, body


async def _send(send: Send, status: int, headers: list[Header], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def refusal(kind: str) -> tuple[int, list[Header], bytes]:
    """The proxy's own short JSON error: status, headers and body. ``x-otelsse-proxy-error``
    tells it from an upstream's."""
    status, message = _FAILURES[kind]
    extra = [(b"x-otelsse-proxy-error", kind.encode())]
    if kind in _RETRY_LATER:
        extra.append((b"retry-after", b"1"))
    headers, body = _json_body({"error": {"type": kind, "message": message}}, *extra)
    return status, headers, body


async def _refuse(send: Send, kind: str) -> None:
    await _send(send, *refusal(kind))
