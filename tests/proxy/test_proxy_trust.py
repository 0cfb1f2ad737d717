"""What the proxy refuses and what it relays, run for real on 127.0.0.1, with a raw-socket
upstream that answers exactly the bytes each case gives it:

- paths some server reads as a dot segment, and methods a reverse proxy does not forward: a 400
  before anything reaches the upstream; legitimate paths and methods still pass unchanged;
- upstream answers: what HTTP allows is relayed, what the proxy cannot relay is a 502 that
  says why, with the same reason on the span;
- a client that leaves at any moment cancels the upstream request at once (the upstream sees its
  connection closed) and the stream span says ``cancelled``, ``client_disconnect``;
- the end of the SIGTERM drain: every request still alive gets the proxy's own answer (or, once
  its head went out, a cut connection), its span says ``shutdown``, and nothing is logged as a
  crash.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from otelsse import semconv
from otelsse.proxy._app import MAX_RESPONSE_HEADERS, MAX_RESPONSE_LINE_BYTES
from tests._helpers import waited

from .conftest import MAX_WAIT, RunningProxy, config_for, start_proxy, wait_for

Header = tuple[bytes, bytes]


def _reply(status: bytes = b"200 OK", *fields: bytes) -> bytes:
    """A whole answer with ``fields``: two bytes of body, and the connection closed after."""
    head = [b"HTTP/1.1 " + status, *fields, b"content-length: 2", b"connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\nok"


EVENT = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
#: The head of an SSE stream and its first event, the stream left open.
SSE_OPENING = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
)
#: "stream" first: the first piece of a body cut short already says it asks for a stream.
BODY = json.dumps(
    {"stream": True, "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
).encode()


class _ScriptedUpstream:
    """An upstream on a raw socket: each connection's request gets ``replies[target]`` (or a
    plain 200) as it is, and is then held open until the proxy closes it. ``event("asked",
    target)`` is set once that request's head arrived, ``event("closed", target)`` once the
    proxy closed its connection."""

    def __init__(self) -> None:
        self.replies: dict[str, bytes] = {}
        self.request_lines: list[bytes] = []
        self._events: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def event(self, name: str, target: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault((name, target), threading.Event())

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                sock, _ = self.listener.accept()
                threading.Thread(target=self._answer, args=(sock,), daemon=True).start()

    def _answer(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(MAX_WAIT)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0]
            self.request_lines.append(line)
            target = line.split(b" ")[1].decode("latin-1")
            self.event("asked", target).set()
            reply = self.replies.get(target, _reply())
            if line.startswith(b"HEAD "):  # RFC 9110 §9.3.2: the head only
                reply = reply.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"
            try:
                sock.sendall(reply)
                while sock.recv(65536):
                    pass
            except TimeoutError:
                return  # never closed by the proxy: "closed" stays unset
            except OSError:
                pass  # reset by the proxy: closed too
            self.event("closed", target).set()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[_ScriptedUpstream]:
    scripted = _ScriptedUpstream()
    try:
        yield scripted
    finally:
        scripted.close()


@pytest.fixture(scope="module")
def proxy(upstream: _ScriptedUpstream) -> Iterator[RunningProxy]:
    """The scripted upstream as ``up`` behind the proxy's default settings (a 300 s idle
    timeout), one for the module: here ``proxy`` is this one, not conftest's."""
    with start_proxy(config_for(upstream.base)) as running:
        yield running


@contextlib.contextmanager
def _connection(proxy: RunningProxy) -> Iterator[socket.socket]:
    host, port = proxy.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=MAX_WAIT) as sock:
        yield sock


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _ask(proxy: RunningProxy, method: str, target: str) -> bytes:
    """``method target`` on a fresh connection; the whole answer (the proxy closes after it)."""
    request = f"{method} {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    with _connection(proxy) as sock:
        sock.sendall(request.encode("latin-1"))
        return _read_until_closed(sock)


def _parse(answer: bytes) -> tuple[int, list[Header], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    fields = [
        (name.lower(), value.strip()) for name, _, value in (f.partition(b":") for f in lines)
    ]
    return int(status_line.split(b" ")[1]), fields, body


def _refusal(answer: bytes) -> tuple[int, str]:
    """The status and type of the proxy's own error."""
    status, fields, body = _parse(answer)
    kind: str = json.loads(body)["error"]["type"]
    assert dict(fields)[b"x-otelsse-proxy-error"] == kind.encode()
    assert dict(fields)[b"content-type"] == b"application/json"
    return status, kind


def _server_span(proxy: RunningProxy, target: str) -> ReadableSpan:
    """The SERVER span of the one request (since the test began) to ``/up{target}``."""
    path = "/up" + target.partition("?")[0]

    def found() -> list[ReadableSpan]:
        return [
            span
            for span in proxy.otel.spans(None)
            if span.kind is SpanKind.SERVER and (span.attributes or {})["url.path"] == path
        ]

    wait_for(found, f"the server span of {path}")
    (span,) = found()
    return span


def _stream_span(proxy: RunningProxy, server: ReadableSpan) -> ReadableSpan:
    def found() -> list[ReadableSpan]:
        return [
            span
            for span in proxy.otel.spans()
            if span.parent is not None and span.parent.span_id == server.context.span_id
        ]

    wait_for(found, "the stream span")
    (span,) = found()
    return span


# -- paths and methods -----------------------------------------------------------------------

#: Segments some server reads as "." or "..", each after the proxy's ``/up``.
DOT_SEGMENTS = [
    "/..",
    "/./v1",
    "/v1/../admin",
    # percent-encoded dots, in any case, whole or in part
    "/%2e%2e/admin",
    "/%2E%2e/admin",
    "/.%2E/admin",
    "/%2e/v1",
    # encoded twice (a server that decodes twice), and more (refused: only hiding needs it)
    "/%252e%252e/admin",
    "/%25252e%25252e/admin",
    # backslash as a separator (IIS, Windows file servers), raw or encoded
    "/..\\admin",
    "/v1\\..\\admin",
    "/..%5cadmin",
    "/..%5Cadmin",
    "/v1%5c..%5cadmin",
    # an encoded slash
    "/..%2fadmin",
    "/v1%2F..%2Fadmin",
    # path parameters (Tomcat, Jetty, Spring drop ";..." before resolving), raw or encoded
    "/..;/admin",
    "/..;jsessionid=1/admin",
    "/%2e%2e;/admin",
    "/.;/v1",
    "/..%3b/admin",
    # what a server may cut or trim: NUL, trailing spaces or tabs, a query or fragment
    "/..%00/admin",
    "/..%20/admin",
    "/..%09/admin",
    "/..%3fx",
    "/..%23x",
    # dots only: Windows trims trailing dots
    "/.../admin",
    # overlong UTF-8 of '.' (RFC 3629 §10; old IIS and Tomcat decoded them)
    "/%c0%ae%c0%ae/admin",
    "/%e0%80%ae%e0%80%ae/admin",
    # fullwidth dots, fullwidth solidus, TWO DOT LEADER: NFKC makes them '.', '/', '..'
    "/%ef%bc%8e%ef%bc%8e/admin",
    "/v1%ef%bc%8f..%ef%bc%8fadmin",
    "/%e2%80%a5/admin",
]

#: Paths that look close but no server reads as a dot segment: forwarded as sent.
LEGITIMATE = [
    "/v1/chat/completions",
    "/v1/models/gpt-4.1",
    "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
    "/openai/deployments/gpt-4o/chat/completions",
    "/.well-known/openid-configuration",
    "/v1/files/a..b",
    "/v1/files/..a",
    "/v1/files/a.",
    "/v1/files/%2E%2Ea",
    "/v1/files/x;version=2",
    "/v1/files/100%25",
    "/v1/files/caf%C3%A9",
    "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Afoundation-model%2Fx/invoke",
]


@pytest.mark.parametrize("path", DOT_SEGMENTS)
def test_a_path_some_server_reads_as_a_dot_segment_is_a_400(
    proxy: RunningProxy, upstream: _ScriptedUpstream, path: str
) -> None:
    before = len(upstream.request_lines)
    assert _refusal(_ask(proxy, "GET", "/up" + path)) == (400, "bad_path")
    assert len(upstream.request_lines) == before  # nothing reached the upstream


@pytest.mark.parametrize("path", LEGITIMATE)
def test_a_legitimate_path_is_forwarded_as_sent(
    proxy: RunningProxy, upstream: _ScriptedUpstream, path: str
) -> None:
    status, _, body = _parse(_ask(proxy, "GET", "/up" + path + "?api-version=1"))
    assert (status, body) == (200, b"ok")
    assert upstream.request_lines[-1] == f"GET {path}?api-version=1 HTTP/1.1".encode()


@pytest.mark.parametrize(
    "method",
    [
        "CONNECT",  # RFC 9110 §9.3.6: a tunnel to the target's authority, for a forward proxy
        "TRACE",  # RFC 9110 §9.3.8: a loop-back that would reflect the client's credentials
        "PROPFIND",  # any method the proxy does not know: WebDAV here
        "LOCK",
    ],
)
def test_a_method_a_reverse_proxy_does_not_forward_is_a_400(
    proxy: RunningProxy, upstream: _ScriptedUpstream, method: str
) -> None:
    proxy.otel.exporter.clear()
    before = len(upstream.request_lines)
    assert _refusal(_ask(proxy, method, "/up/v1/x")) == (400, "bad_method")
    assert len(upstream.request_lines) == before
    server = _server_span(proxy, "/v1/x")
    assert (server.attributes or {})[semconv.ERROR_TYPE] == "bad_method"


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_a_method_an_api_uses_is_forwarded(
    proxy: RunningProxy, upstream: _ScriptedUpstream, method: str
) -> None:
    status, _, _ = _parse(_ask(proxy, method, "/up/v1/x"))
    assert status == 200
    assert upstream.request_lines[-1] == f"{method} /v1/x HTTP/1.1".encode()


# -- upstream answers ------------------------------------------------------------------------

LONG = MAX_RESPONSE_LINE_BYTES

#: Answers HTTP allows and common clients read: relayed as they are.
RELAYED = {
    "past aiohttp's 128 fields": _reply(
        # with _reply's two, one under the bound (aiohttp's pure-Python parser counts the
        # status line too)
        b"200 OK",
        *(b"x-f%d: v" % i for i in range(MAX_RESPONSE_HEADERS - 3)),
    ),
    "a field line past aiohttp's 8,190 bytes": _reply(b"200 OK", b"x-long: " + b"a" * (LONG - 100)),
    "a long field name": _reply(b"200 OK", b"x-" + b"n" * (LONG - 100) + b": v"),
    "a long reason phrase": _reply(b"200 " + b"r" * (LONG - 100)),
    "obs-text and a tab in a value": _reply(b"200 OK", b"x-t: caf\xe9\tau lait"),
    # RFC 9110 §15: a recipient treats an unknown code as the x00 of its class; relayed as is
    "status 299": _reply(b"299 Whatever"),
    "status 418": _reply(b"418 I'm a teapot"),
    "status 599": _reply(b"599 Whatever"),
}


@pytest.mark.parametrize("case", list(RELAYED))
def test_an_answer_http_allows_is_relayed(
    proxy: RunningProxy, upstream: _ScriptedUpstream, case: str
) -> None:
    path = f"/relayed/{list(RELAYED).index(case)}"
    sent = RELAYED[case]
    upstream.replies[path] = sent
    status, fields, body = _parse(_ask(proxy, "GET", "/up" + path))
    expected_status, expected_fields, _ = _parse(sent)
    assert (status, body) == (expected_status, b"ok")
    assert [f for f in fields if f[0] != b"connection"] == [
        f for f in expected_fields if f[0] != b"connection"
    ]


#: Answers the proxy cannot relay, and the reason it gives.
REFUSED = {
    "too many fields": (
        _reply(b"200 OK", *(b"x-f%d: v" % i for i in range(MAX_RESPONSE_HEADERS + 1))),
        "upstream_head_too_large",
    ),
    "a field value too long": (
        _reply(b"200 OK", b"x-long: " + b"a" * (LONG + 1)),
        "upstream_head_too_large",
    ),
    "a field name too long": (
        _reply(b"200 OK", b"x-" + b"n" * (LONG + 1) + b": v"),
        "upstream_head_too_large",
    ),
    "a status line too long": (_reply(b"200 " + b"r" * (LONG + 1)), "upstream_head_too_large"),
    # RFC 9110 §15: codes outside 100-599 are invalid, treated as a 5xx
    "status 999": (_reply(b"999 Odd"), "upstream_bad_status"),
    "status 600": (_reply(b"600 Odd"), "upstream_bad_status"),
    "status 099": (_reply(b"099 Odd"), "upstream_bad_status"),
    # RFC 9110 §15.2.2: a switch the proxy never asked for (it forwards no Upgrade)
    "status 101": (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n",
        "upstream_bad_status",
    ),
    "a status that is not a number": (_reply(b"2xx OK"), "upstream_invalid_response"),
    "not HTTP at all": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "upstream_invalid_response"),
    # RFC 9110 §5.5: CR, LF, NUL and other CTLs in a field value are invalid
    "a control character in a value": (
        _reply(b"200 OK", b"x-t: a\x01b"),
        "upstream_invalid_response",
    ),
    "DEL in a value": (_reply(b"200 OK", b"x-t: a\x7fb"), "upstream_invalid_response"),
    "NUL in a value": (_reply(b"200 OK", b"x-t: a\x00b"), "upstream_invalid_response"),
    "a field name that is not a token": (
        _reply(b"200 OK", b"x(t): v"),
        "upstream_invalid_response",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_answer_the_proxy_cannot_relay_is_a_502_that_says_why(
    proxy: RunningProxy, upstream: _ScriptedUpstream, case: str
) -> None:
    path = f"/refused/{list(REFUSED).index(case)}"
    upstream.replies[path], kind = REFUSED[case]
    assert _refusal(_ask(proxy, "GET", "/up" + path)) == (502, kind)
    server = _server_span(proxy, path)
    assert (server.attributes or {})[semconv.ERROR_TYPE] == kind
    assert (server.attributes or {})[semconv.HTTP_RESPONSE_STATUS_CODE] == 502
    assert server.status.status_code is StatusCode.ERROR
    # the upstream's connection is not kept for another request
    assert waited(upstream.event("closed", path).wait, MAX_WAIT)


# -- a client that leaves --------------------------------------------------------------------


def _post(target: str, body: bytes, length: int) -> bytes:
    head = f"POST {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    return head.encode() + b"content-length: %d\r\n\r\n" % length + body


#: How far a request got when its client left or the drain ran out: what the upstream answers,
#: what the client sends, and whether the client waits for an event (else for the upstream to
#: have the request's head).
PHASES: dict[str, tuple[bytes, Callable[[str], bytes], bool]] = {
    "while the proxy waits for the upstream's headers": (
        b"",
        lambda target: _post(target, BODY, len(BODY)),
        False,
    ),
    "while its body is being sent": (
        b"",
        lambda target: _post(target, BODY[:30], len(BODY)),
        False,
    ),
    "mid-stream": (SSE_OPENING, lambda target: _post(target, BODY, len(BODY)), True),
}


def _until_in_phase(
    sock: socket.socket, upstream: _ScriptedUpstream, path: str, phase: str
) -> bytes:
    """Send the phase's request for ``path``; what the client read once it is there."""
    reply, request, waits_for_event = PHASES[phase]
    upstream.replies[path] = reply
    sock.sendall(request("/up" + path))
    received = b""
    if waits_for_event:
        while b"data: " not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    else:
        assert waited(upstream.event("asked", path).wait, MAX_WAIT)
    return received


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_client_that_leaves_at_any_moment_cancels_the_upstream_request(
    proxy: RunningProxy, upstream: _ScriptedUpstream, phase: str
) -> None:
    # the route's own path (its stream span starts at the send), told apart by its query
    path = f"/v1/chat/completions?leave={list(PHASES).index(phase)}"
    proxy.otel.exporter.clear()
    with _connection(proxy) as sock:
        _until_in_phase(sock, upstream, path, phase)
    # The client closed its connection: the proxy closes the upstream's at once (its idle
    # timeout, 300 s, is far past this wait).
    assert waited(upstream.event("closed", path).wait, MAX_WAIT)
    server = _server_span(proxy, path)
    assert (server.attributes or {})[semconv.ERROR_TYPE] == "client_disconnect"
    stream = dict(_stream_span(proxy, server).attributes or {})
    assert stream[semconv.OUTCOME] == "cancelled"
    assert stream[semconv.CANCEL_REASON] == "client_disconnect"
    wait_for(lambda: proxy.app.in_flight == 0, "the exchange to end")
    assert proxy.otel.active_streams() == 0


# -- the drain's end -------------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


DRAINED = ["before its body arrives", *PHASES]


@pytest.mark.e2e  # waits out the drain
@pytest.mark.parametrize("phase", DRAINED)
def test_past_the_drain_every_request_alive_gets_the_proxys_answer_and_a_shutdown_span(
    upstream: _ScriptedUpstream, phase: str
) -> None:
    path = f"/v1/chat/completions?drain={DRAINED.index(phase)}"
    logs = [logging.getLogger(name) for name in ("uvicorn.error", "otelsse.proxy")]
    with start_proxy(config_for(upstream.base, drain_timeout=0.2)) as proxy:
        records = _Records()
        for log in logs:
            log.addHandler(records)  # after uvicorn configured its logging
        try:
            with _connection(proxy) as sock:
                if phase == "before its body arrives":
                    sock.sendall(_post("/up" + path, b"", len(BODY)))
                    wait_for(lambda: proxy.app.in_flight == 1, "the request to be in flight")
                    opened = b""
                else:
                    opened = _until_in_phase(sock, upstream, path, phase)
                proxy.server.handle_exit(signal.SIGTERM, None)
                answer = opened + _read_until_closed(sock)
            server = _server_span(proxy, path)
            stream = None if phase == "before its body arrives" else _stream_span(proxy, server)
        finally:
            for log in logs:
                log.removeHandler(records)
    if phase == "mid-stream":
        # its head and first event went out: the connection is cut, never a clean end
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert EVENT in answer
        assert not answer.endswith(b"0\r\n\r\n")
    else:
        assert _refusal(answer) == (503, "shutdown")
    assert (server.attributes or {})[semconv.ERROR_TYPE] == "shutdown"
    if stream is not None:
        assert (stream.attributes or {})[semconv.OUTCOME] == "cancelled"
        assert (stream.attributes or {})[semconv.CANCEL_REASON] == "shutdown"
        assert waited(upstream.event("closed", path).wait, MAX_WAIT)
    # the drain's end is the proxy's business, not a crash: one warning, no error, no traceback
    assert [(r.name, r.levelname, r.getMessage()) for r in records.records] == [
        (
            "otelsse.proxy",
            "WARNING",
            "drain_timeout 0.2s ran out: 1 request(s) still in flight cancelled"
            " (otelsse.cancel_reason=shutdown)",
        )
    ]
