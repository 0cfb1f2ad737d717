"""The proxy's own behaviour, run for real on 127.0.0.1: what passes through unchanged, how a
stream's end is passed on, what it refuses, its limits, its telemetry and its privacy.

Clients written by others (the Node and Python SDKs, curl) through every scenario of the fake
provider are in ``test_foreign_clients.py``; the ``otelsse proxy`` process itself (SIGTERM,
OTLP, ``/metrics``) in ``test_proxy_process.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from otelsse import semconv
from otelsse._demo.provider import JOB_HEADER, SCENARIO_HEADER, FakeProvider
from tests._helpers import joined, waited
from tests._otel import attribute_values
from tests._server import Reply, SSEServer

from .conftest import (
    MAX_WAIT,
    RecordingUpstream,
    RunningProxy,
    config_for,
    proxy_config,
    start_proxy,
    wait_for,
)

CHAT = "/v1/chat/completions"
MARKER = "otelsse-canary-7c1e"


def chat_body(model: str = "gpt-4o-mini", content: str = "hi") -> dict[str, Any]:
    # The model after the messages, as the openai SDK orders them.
    return {"messages": [{"role": "user", "content": content}], "model": model, "stream": True}


def scenario(name: str, job: int = 5) -> dict[str, str]:
    return {SCENARIO_HEADER: name, JOB_HEADER: str(job)}


@contextlib.contextmanager
def sse_server() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


def raw_exchange(base: str, request: bytes) -> bytes:
    """Send ``request`` as it is on a fresh socket; what came back until the server closed or
    went quiet."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=MAX_WAIT) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


class _Answer:
    def __init__(self, response: httpx.Response, body: bytes, error: str | None) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self.body = body
        self.error = error


def post(url: str, *, json_body: Any = None, headers: dict[str, str] | None = None) -> _Answer:
    """POST and read the raw (still coded) body; the client's exception type if it broke."""
    with (
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream("POST", url, json=json_body, headers=headers) as response,
    ):
        body, error = bytearray(), None
        try:
            for chunk in response.iter_raw():
                body += chunk
        except httpx.TransportError as exc:
            error = type(exc).__name__
        return _Answer(response, bytes(body), error)


# -- transparency ----------------------------------------------------------------------------

#: Headers that belong to one connection, or that the server sets for its own framing.
_PER_CONNECTION = {"connection", "transfer-encoding", "content-length", "keep-alive"}


def _end_to_end(headers: httpx.Headers) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in headers.multi_items() if k not in _PER_CONNECTION)


@pytest.mark.parametrize("name", ["complete", "gzip", "provider_error", "rate_limited"])
def test_the_client_gets_what_the_upstream_sent(
    proxy: RunningProxy, provider: FakeProvider, name: str
) -> None:
    direct = post(provider.base_url + CHAT, json_body=chat_body(), headers=scenario(name))
    through = post(proxy.url("fake", CHAT), json_body=chat_body(), headers=scenario(name))
    assert (through.status, through.body, through.error) == (direct.status, direct.body, None)
    assert _end_to_end(through.headers) == _end_to_end(direct.headers)
    # nothing of the proxy's own: no server or date header, and hop-by-hop ones stay behind
    assert "server" not in through.headers
    assert "date" not in through.headers


def test_gzip_passes_through_coded_and_is_observed_decoded(proxy: RunningProxy) -> None:
    through = post(proxy.url("fake", CHAT), json_body=chat_body(), headers=scenario("gzip"))
    assert through.headers["content-encoding"] == "gzip"
    decoded = gzip.decompress(through.body)
    assert decoded.endswith(b"data: [DONE]\n\n")
    (span,) = proxy.stream_spans()
    attributes = dict(span.attributes or {})
    assert attributes[semconv.OUTCOME] == "complete"
    assert attributes[semconv.BYTES_RECEIVED] == len(decoded)


def test_the_request_reaches_the_upstream_as_the_client_sent_it(
    recording: RecordingUpstream,
) -> None:
    body = json.dumps(chat_body()).encode()
    headers = {
        "content-type": "application/json",
        "authorization": "Bearer sk-test",
        "x-custom": "kept",
        "connection": "keep-alive, x-hop",
        "x-hop": "dropped",
        "host": "attacker.example",
    }
    with start_proxy(config_for(recording.base("/base"))) as proxy, httpx.Client() as client:
        url = proxy.url("up", "/v1/chat/completions?api-version=2024-10-21&x=%2F")
        sent = client.post(url, content=body, headers=headers)
        assert sent.status_code == 200
    (received,) = recording.received
    assert received.method == "POST"
    assert received.target == "/base/v1/chat/completions?api-version=2024-10-21&x=%2F"
    assert received.body == body
    got = dict(received.headers)
    assert got["authorization"] == "Bearer sk-test"
    assert got["x-custom"] == "kept"
    assert got["content-length"] == str(len(body))
    assert got["host"] == f"127.0.0.1:{recording.port}"  # the upstream's, never the client's
    assert "x-hop" not in got  # named by Connection: hop-by-hop
    # what the client sent, and nothing aiohttp would add of its own
    sent_names = {"content-type", "authorization", "x-custom", "content-length", "host"}
    client_defaults = {"accept", "accept-encoding", "user-agent"}  # httpx's own
    assert set(got) == sent_names | client_defaults
    assert got["user-agent"].startswith("python-httpx/")


def test_a_chunked_request_body_streams_through(recording: RecordingUpstream) -> None:
    pieces = [b'{"messages": [{"role": "user", "content": "', b"x" * 100_000, b'"}], ']
    pieces.append(b'"model": "gpt-split", "stream": true}')
    with start_proxy(config_for(recording.base())) as proxy, httpx.Client() as client:
        sent = client.post(proxy.url("up", "/v1/chat/completions"), content=iter(pieces))
        assert sent.status_code == 200
        (span,) = proxy.stream_spans()
    assert recording.received[0].body == b"".join(pieces)
    assert ("transfer-encoding", "chunked") in recording.received[0].headers
    # the model was read as the body passed, though it came last
    assert (span.attributes or {})[semconv.GEN_AI_REQUEST_MODEL] == "gpt-split"


# -- how a stream ends, passed on ------------------------------------------------------------


def test_an_upstream_cut_mid_stream_aborts_the_client_connection(
    proxy: RunningProxy, caplog: pytest.LogCaptureFixture
) -> None:
    with sse_server() as upstream:
        body = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n' * 5
        upstream.route(CHAT, Reply(body, cut=len(body) - 20))
        config = config_for(upstream.url(""))
        with caplog.at_level(logging.WARNING), start_proxy(config) as cut:
            answer = post(cut.url("up", CHAT), json_body=chat_body())
            assert answer.error == "RemoteProtocolError"  # no clean end of chunks
            assert answer.body == body[: len(body) - 20]
            assert cut.outcome() == "truncated"
            (server,) = cut.server_spans()
    attributes = dict(server.attributes or {})
    assert attributes[semconv.ERROR_TYPE] == "upstream_cut"
    assert server.status.status_code is StatusCode.ERROR
    # one line of the proxy's, and no traceback from the server for an ordinary cut
    assert [r.getMessage() for r in caplog.records if r.name == "uvicorn.error"] == []
    assert any("broke off" in r.getMessage() for r in caplog.records)


class _RawUpstream:
    """An upstream on a raw socket: it reads one request's head, then ``answer(sock)`` runs on
    its own thread."""

    HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        sock, _ = self.listener.accept()
        with sock:
            sock.settimeout(MAX_WAIT)
            request = b""
            while b"\r\n\r\n" not in request:
                request += sock.recv(65536)
            self.answer(sock)

    def answer(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()
        joined(self.thread, MAX_WAIT)


class _HoldingUpstream(_RawUpstream):
    """Answers one SSE event, then waits for the proxy to close the connection (and says so)."""

    def __init__(self) -> None:
        self.closed_by_peer = threading.Event()
        super().__init__()

    def answer(self, sock: socket.socket) -> None:
        event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
        chunk = b"%x\r\n%s\r\n" % (len(event), event)
        sock.sendall(self.HEAD + b"transfer-encoding: chunked\r\n\r\n" + chunk)
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass
        self.closed_by_peer.set()


def test_a_client_that_leaves_cancels_the_upstream_request() -> None:
    upstream = _HoldingUpstream()
    config = config_for(upstream.base)
    try:
        with start_proxy(config) as proxy:
            with (
                httpx.Client(timeout=MAX_WAIT) as client,
                client.stream("POST", proxy.url("up", CHAT), json=chat_body()) as response,
            ):
                first = next(response.iter_raw())
                assert first.startswith(b"data: ")
            # the client closed its connection mid-stream: the proxy closes the upstream's
            assert waited(upstream.closed_by_peer.wait, MAX_WAIT)
            (span,) = proxy.stream_spans()
            attributes = dict(span.attributes or {})
            assert attributes[semconv.OUTCOME] == "cancelled"
            assert attributes[semconv.CANCEL_REASON] == "client_disconnect"
            wait_for(lambda: proxy.app.in_flight == 0, "the exchange to end")
            assert proxy.otel.active_streams() == 0
    finally:
        upstream.close()


class _FloodingUpstream(_RawUpstream):
    """Sends a large SSE body as fast as its socket takes it, counting what the socket took."""

    TOTAL = 128 * 1024 * 1024
    EVENT = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"

    def __init__(self) -> None:
        self.sent = 0
        super().__init__()

    def answer(self, sock: socket.socket) -> None:
        sock.settimeout(None)  # blocked as long as the proxy does not read
        sock.sendall(self.HEAD + b"content-length: %d\r\n\r\n" % self.TOTAL)
        with contextlib.suppress(OSError):
            while self.sent < self.TOTAL:
                sock.sendall(self.EVENT)
                self.sent += len(self.EVENT)

    def settled(self) -> int:
        """What the socket took, once it took nothing more for half a second."""
        while True:
            before = self.sent
            threading.Event().wait(0.5)
            if self.sent == before:
                return before


@pytest.mark.e2e  # waits out the client's slowness
def test_a_slow_client_slows_the_upstream_read() -> None:
    upstream = _FloodingUpstream()
    with (
        contextlib.closing(upstream),
        start_proxy(config_for(upstream.base)) as proxy,
        httpx.Client(timeout=MAX_WAIT) as client,
        client.stream("GET", proxy.url("up", "/events")) as response,
    ):
        chunks = response.iter_raw()
        received = len(next(chunks))
        # The client reads no more: the proxy stops reading the upstream, which stops sending
        # once the sockets' buffers are full (a proxy that buffered would take all 128 MiB).
        held = upstream.settled()
        assert held < upstream.TOTAL // 4, held
        received += sum(len(chunk) for chunk in chunks)  # and it all arrives once read
    assert received == upstream.TOTAL
    # generic events with no contract that says where they end
    assert proxy.outcome() == "eof_unverified"


# -- what the proxy refuses ------------------------------------------------------------------


def _error(answer: httpx.Response) -> str:
    assert answer.headers["content-type"] == "application/json"
    kind: str = answer.json()["error"]["type"]
    assert answer.headers["x-otelsse-proxy-error"] == kind
    return kind


@pytest.mark.parametrize(
    "path",
    [
        "/nope/v1/chat/completions",  # no such upstream
        "/",  # no upstream named
        "/metrics",  # served on its own port only
        "/FAKE/v1/chat/completions",  # names are exact
    ],
)
def test_an_unknown_upstream_is_a_404(proxy: RunningProxy, path: str) -> None:
    answer = httpx.post(proxy.base + path, json=chat_body())
    assert answer.status_code == 404
    assert _error(answer) == "unknown_upstream"
    assert proxy.otel.spans(None) == []  # nothing forwarded, nothing observed


@pytest.mark.parametrize(
    "path", ["/fake/../admin", "/fake/v1/%2e%2e/%2E%2E/admin", "/fake/./v1", "/fake/v1/..%2f.."]
)
def test_a_path_that_would_leave_its_upstream_is_a_400(proxy: RunningProxy, path: str) -> None:
    request = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n".encode()
    answer = raw_exchange(proxy.base, request)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
    assert b'"bad_path"' in answer


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1",  # absolute form
        b"CONNECT example.com:443 HTTP/1.1",
        b"GET //example.com/ HTTP/1.1",
    ],
)
def test_the_proxy_never_forwards_where_the_client_points(
    proxy: RunningProxy, request_line: bytes
) -> None:
    answer = raw_exchange(proxy.base, request_line + b"\r\nhost: example.com\r\n\r\n")
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 404), answer[:200]
    assert proxy.otel.spans(None) == []


def test_the_host_header_does_not_choose_the_upstream(
    proxy: RunningProxy, provider: FakeProvider
) -> None:
    answer = post(
        proxy.url("fake", CHAT),
        json_body=chat_body(),
        headers={"host": "api.openai.com", **scenario("complete")},
    )
    assert answer.status == 200
    (span,) = proxy.stream_spans()
    assert (span.attributes or {})[semconv.SERVER_ADDRESS] == "127.0.0.1"


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT A REQUEST\r\n\r\n",
        b"POST /fake/v1 HTTP/1.1\r\nbad header line\r\n\r\n",
        b"POST /fake/v1 HTTP/1.1\r\ncontent-length: nope\r\n\r\n",
    ],
)
def test_a_malformed_request_is_a_400(proxy: RunningProxy, raw: bytes) -> None:
    answer = raw_exchange(proxy.base, raw)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]


# -- limits ----------------------------------------------------------------------------------


def test_a_body_larger_than_the_limit_is_a_413(recording: RecordingUpstream) -> None:
    # The upstream answers only once it has read the whole body, as an API does: the proxy's
    # limit is reached first.
    with start_proxy(config_for(recording.base(), max_request_bytes=1000)) as proxy:
        declared = httpx.post(proxy.url("up", CHAT), json=chat_body(content="x" * 2000))
        assert declared.status_code == 413
        assert _error(declared) == "request_too_large"
        pieces = iter([b"{" + b" " * 600, b" " * 600 + b"}"])  # chunked: found while sent
        streamed = httpx.post(proxy.url("up", CHAT), content=pieces)
        assert streamed.status_code == 413
        assert _error(streamed) == "request_too_large"
        small = httpx.post(proxy.url("up", CHAT), json=chat_body())
        assert small.status_code == 200
    # only the small one reached the upstream whole
    assert [json.loads(r.body) for r in recording.received] == [chat_body()]


def test_past_max_streams_a_request_gets_a_503_at_once() -> None:
    upstream = _HoldingUpstream()
    config = config_for(upstream.base, max_streams=1)
    try:
        with (
            start_proxy(config) as proxy,
            httpx.Client(timeout=MAX_WAIT) as client,
            client.stream("POST", proxy.url("up", CHAT), json=chat_body()) as held,
        ):
            chunks = held.iter_raw()  # kept: a dropped iterator closes the response
            next(chunks)
            refused = httpx.post(proxy.url("up", CHAT), json=chat_body())
            assert refused.status_code == 503
            assert _error(refused) == "too_many_streams"
            assert refused.headers["retry-after"] == "1"
    finally:
        upstream.close()


def test_an_unreachable_upstream_is_a_502() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with start_proxy(config_for(f"http://127.0.0.1:{port}")) as proxy:
        answer = httpx.post(proxy.url("up", CHAT), json=chat_body())
        assert answer.status_code == 502
        assert _error(answer) == "upstream_unreachable"
        (server,) = proxy.server_spans()
        assert (server.attributes or {})[semconv.ERROR_TYPE] == "upstream_unreachable"
        assert server.status.status_code is StatusCode.ERROR
        # the streaming request it was: one stream span, as in-process for a connect error
        (stream,) = proxy.stream_spans()
        assert (stream.attributes or {})[semconv.OUTCOME] == "truncated"
        assert (stream.attributes or {})[semconv.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
        assert stream.parent is not None
        assert stream.parent.span_id == server.context.span_id
        assert proxy.otel.nonzero_outcomes() == {"truncated": 1}


@pytest.mark.e2e  # waits out the proxy's timeout
def test_an_upstream_silent_before_its_headers_is_a_504() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        config = config_for(f"http://127.0.0.1:{silent.getsockname()[1]}", idle_timeout=0.5)
        with start_proxy(config) as proxy:
            answer = httpx.post(proxy.url("up", CHAT), json=chat_body())
            assert answer.status_code == 504
            assert _error(answer) == "upstream_timeout"


@pytest.mark.e2e  # waits out the proxy's timeout
def test_an_upstream_silent_mid_stream_times_out_and_aborts_the_client(
    provider: FakeProvider,
) -> None:
    with start_proxy(proxy_config(provider, idle_timeout=0.5)) as proxy:
        answer = post(proxy.url("fake", CHAT), json_body=chat_body(), headers=scenario("timeout"))
        assert answer.status == 200
        assert answer.error == "RemoteProtocolError"
        assert proxy.outcome() == "timeout"


# -- telemetry -------------------------------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_clients_trace_continues_through_the_proxy(proxy: RunningProxy) -> None:
    traceparent = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
    headers = {"traceparent": traceparent, **scenario("complete")}
    post(proxy.url("fake", CHAT), json_body=chat_body(), headers=headers)
    (stream,) = proxy.stream_spans()
    (server,) = proxy.server_spans()
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None
    assert server.parent.is_remote
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert stream.parent is not None
    assert stream.parent.span_id == server.context.span_id
    assert stream.kind is SpanKind.CLIENT  # the upstream call, as in-process
    assert server.name == "POST /fake/{path}"
    attributes = dict(server.attributes or {})
    assert attributes["http.route"] == "/fake/{path}"
    assert attributes[semconv.HTTP_RESPONSE_STATUS_CODE] == 200


def test_stream_attributes_match_in_process_instrumentation(proxy: RunningProxy) -> None:
    post(proxy.url("fake", CHAT), json_body=chat_body("gpt-x"), headers=scenario("complete"))
    attributes = dict(proxy.stream_spans()[0].attributes or {})
    assert attributes[semconv.ROUTE] == "openai.chat_completions"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == "gpt-x"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "openai"
    assert attributes[semconv.STOP_REASON] == "stop"
    assert attributes[semconv.REQUEST_ID] == "req_demo_5"
    assert proxy.otel.nonzero_outcomes() == {"complete": 1}


def test_nothing_secret_reaches_spans_metrics_or_logs(
    proxy: RunningProxy, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {
        "authorization": f"Bearer {MARKER}",
        "cookie": f"session={MARKER}",
        **scenario("complete"),
    }
    with caplog.at_level(logging.DEBUG):
        url = proxy.url("fake", f"{CHAT}?key={MARKER}")
        post(url, json_body=chat_body(content=MARKER), headers=headers)
        proxy.stream_spans()
        proxy.server_spans()
        truncated = post(url, json_body=chat_body(content=MARKER), headers=scenario("truncated", 9))
        assert truncated.status == 200
    spans = proxy.otel.spans(None)
    assert not any(MARKER in value for value in attribute_values(spans))
    assert not any(MARKER in span.name for span in spans)
    points = proxy.otel.points()
    assert not any(MARKER in str(point.attributes) for point in points)
    # the proxy's and its engine's logs (httpx's, the test client's own, quote its URL)
    ours = [r for r in caplog.records if r.name.split(".")[0] in ("otelsse", "uvicorn", "aiohttp")]
    assert not any(MARKER in record.getMessage() for record in ours)


def test_healthz_and_readyz(proxy: RunningProxy) -> None:
    assert httpx.get(proxy.base + "/healthz").json() == {"status": "ok"}
    assert httpx.get(proxy.base + "/readyz").status_code == 200
    proxy.app.draining = True
    assert httpx.get(proxy.base + "/readyz").status_code == 503
    assert httpx.get(proxy.base + "/healthz").status_code == 200
    refused = httpx.post(proxy.url("fake", CHAT), json=chat_body())
    assert refused.status_code == 503
    assert _error(refused) == "draining"
