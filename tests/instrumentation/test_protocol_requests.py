"""A contract served at any path is told by what its request names (``Request``).

A user route of a made-up JSON-RPC protocol (``echo/stream``, answered at whatever path the
server chose) declares a version header and a label, and judges a stream complete at the
JSON-RPC response to its own request's ``id``. Through every client, against a real server:
the route is chosen from the body's ``method`` and the declared header only when the request
asks for SSE; it learns the body's ``id`` (a response to another id does not end the stream);
its label reaches the span and the metric series.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest

from otelsse import semconv
from otelsse._clients import RequestScan, rpc_fields
from otelsse.routes import (
    Request,
    Route,
    StreamState,
    declared_headers,
    handles,
    parse_object,
    protocol_request,
    register_route,
    unregister_route,
)
from tests._clients import Client, fetch
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

LABEL = "echo.method"
VERSION = "x-echo-version"


class EchoRoute(Route):
    name: ClassVar[str] = "test.echo"
    request_headers: ClassVar[frozenset[str]] = frozenset({VERSION})

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.rpc_method == "echo/stream" or request.header(VERSION) is not None

    @classmethod
    def labels(cls, request: Request) -> Mapping[str, str]:
        return {LABEL: request.rpc_method or "listen"}

    def __init__(self) -> None:
        super().__init__()
        self._id: str | int | None = None

    def on_request(self, request: Request, rpc_id: str | int | None) -> None:
        self._id = rpc_id

    def envelope(self, event: Any, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        payload = parse_object(event, state)
        return None if payload is None else ("message", payload)

    @handles("message")
    def _on_message(self, payload: dict[str, Any], state: StreamState) -> None:
        if "result" in payload and payload.get("id") == self._id:
            self.ended = True
            state.final_stop("result", True, open_parts=False)
            state.terminal()


@pytest.fixture
def echo() -> Iterator[type[EchoRoute]]:
    register_route(EchoRoute)
    try:
        yield EchoRoute
    finally:
        unregister_route(EchoRoute.name)


def _body(*messages: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(m).encode() + b"\n\n" for m in messages)


CALL = {"jsonrpc": "2.0", "id": 7, "method": "echo/stream", "params": {"name": "t", "id": 9}}
SSE = {"accept": "application/json, text/event-stream"}


def test_the_route_is_chosen_by_the_body_and_learns_its_id(
    echo: type[EchoRoute], client: Client, server: SSEServer, otel: Telemetry
) -> None:
    # A response to another id (the nested params.id) first: only the request's own ends it.
    body = _body(
        {"jsonrpc": "2.0", "id": 9, "result": {}}, {"jsonrpc": "2.0", "id": 7, "result": {}}
    )
    got = fetch(client, server.route("/any/path", Reply(body)), json=CALL, headers=SSE)
    assert got.error is None
    attributes = otel.stream_span().attributes or {}
    assert attributes[semconv.ROUTE] == "test.echo"
    assert attributes[semconv.OUTCOME] == "complete"
    assert attributes[LABEL] == "echo/stream"
    series = [p.attributes for p in otel.points(semconv.STREAMS.name) if p.value]
    assert [s[LABEL] for s in series] == ["echo/stream"]


def test_without_its_own_response_the_stream_is_truncated(
    echo: type[EchoRoute], client: Client, server: SSEServer, otel: Telemetry
) -> None:
    body = _body({"jsonrpc": "2.0", "id": 9, "result": {}})
    fetch(client, server.route("/any/path", Reply(body)), json=CALL, headers=SSE)
    attributes = otel.stream_span().attributes or {}
    assert (attributes[semconv.ROUTE], attributes[semconv.OUTCOME]) == ("test.echo", "truncated")


def test_a_request_that_does_not_ask_for_sse_is_not_read(
    echo: type[EchoRoute], client: Client, server: SSEServer, otel: Telemetry
) -> None:
    # Its answer is still a stream: observed, but sniffed (auto), as any unknown stream is.
    body = _body({"jsonrpc": "2.0", "id": 7, "result": {}})
    fetch(client, server.route("/any/path", Reply(body)), json=CALL)
    assert (otel.stream_span().attributes or {})[semconv.ROUTE] == "generic"


def test_a_declared_header_alone_claims_a_request(
    echo: type[EchoRoute], client: Client, server: SSEServer, otel: Telemetry
) -> None:
    headers = {**SSE, VERSION: "1"}
    fetch(client, server.route("/listen", Reply(_body())), json={"a": 1}, headers=headers)
    attributes = otel.stream_span().attributes or {}
    assert (attributes[semconv.ROUTE], attributes[LABEL]) == ("test.echo", "listen")


def test_declared_headers_follow_the_registry(echo: type[EchoRoute]) -> None:
    assert VERSION in declared_headers()
    request = protocol_request(
        Request("POST", "h", "/p"), "echo/stream", None, {VERSION: "1" * 500}.get
    )
    assert request.header(VERSION) == "1" * 128
    unregister_route(EchoRoute.name)
    assert VERSION not in declared_headers()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}}',
            ("tools/call", 1, "add"),
        ),
        ('{"params":{"id":"nested"},"id":"top","method":"m","jsonrpc":"2.0"}', ("m", "top", None)),
        ({"jsonrpc": "2.0", "method": "notifications/x"}, ("notifications/x", None, None)),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}', ("m", None, None)),  # not an id type
        (b'[{"jsonrpc":"2.0","id":1,"method":"m"}]', (None, None, None)),  # a batch
        (b'{"id":1,"method":"m"}', (None, None, None)),  # not JSON-RPC
        (b'{"jsonrpc":"2.0","id":1,"method":"' + b"m" * 200 + b'"}', (None, 1, None)),
        (b'{"jsonrpc":"2.0",' + b" " * 70000 + b'"id":1}', (None, None, None)),  # too long
        (b"\xff not json", (None, None, None)),
        (None, (None, None, None)),
    ],
)
def test_rpc_fields_read_only_a_short_json_rpc_body(
    body: object, expected: tuple[Any, ...]
) -> None:
    assert tuple(rpc_fields(body)) == expected


def test_a_scanned_body_in_pieces_is_read_whole_or_not_at_all() -> None:
    scan = RequestScan()
    for piece in (b'{"jsonrpc":"2.0",', b'"id":"a","method":"m"}'):
        scan.feed(piece)
    assert tuple(scan.rpc) == ("m", "a", None)
    long = RequestScan()
    long.feed(b'{"jsonrpc":"2.0","id":1,"method":"m","pad":"' + b"x" * 70000)
    long.feed(b'"}')
    assert tuple(long.rpc) == (None, None, None)


def test_a_json_answer_to_a_protocol_that_may_send_one_is_no_stream(
    echo: type[EchoRoute], client: Client, server: SSEServer, otel: Telemetry
) -> None:
    # MCP's server answers a request with one JSON object or an SSE stream, its choice: a route
    # that does not always stream is observed only when the answer is SSE.
    answer = Reply(b'{"jsonrpc":"2.0","id":7,"result":{}}', content_type="application/json")
    got = fetch(client, server.route("/any/path", answer), json=CALL, headers=SSE)
    assert got.error is None
    assert otel.spans() == []
    assert otel.points(semconv.STREAMS.name) == []
