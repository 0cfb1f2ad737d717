"""``mcp.streamable_http``: recognised by what its request names, judged by the JSON-RPC response
to its request (the module docstring of ``otelsse/routes/mcp_streamable_http.py`` cites each rule).

Streams are framed as the SDK's servers frame them (``tests/fixtures/synthetic/README.md``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from otelsse import Outcome, StreamMonitor, StreamReport
from otelsse._monitor import StreamError
from otelsse.routes import (
    MCPStreamableHTTPRoute,
    Request,
    declared_headers,
    detect_route,
    match_route,
    protocol_request,
    routes,
)
from otelsse.routes._sniff import sniff
from otelsse.routes.mcp_streamable_http import REQUEST_CANCELLED
from tests._fixtures import read_fixture
from tests._helpers import run_monitor

ROUTE = MCPStreamableHTTPRoute.name
VERSION = "mcp-protocol-version"


def _request(
    method: str = "POST",
    rpc_method: str | None = "tools/call",
    rpc_name: str | None = None,
    **headers: str,
) -> Request:
    """An MCP endpoint's request as the instrumentation builds it (headers by their names with
    ``_`` for ``-``)."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    return protocol_request(
        Request(method, "mcp.example", "/any/path"), rpc_method, rpc_name, named.get
    )


def _event(message: Any, *, event_id: str | None = None, name: str | None = "message") -> bytes:
    """One event as sse-starlette writes it: CRLF, ``id``, ``event``, ``data``."""
    head = (f"id: {event_id}\r\n" if event_id is not None else "") + (
        f"event: {name}\r\n" if name else ""
    )
    data = message if isinstance(message, str) else json.dumps(message, separators=(",", ":"))
    return f"{head}data: {data}\r\n\r\n".encode()


PRIMING = b"id: 1\r\ndata: \r\nretry: 1000\r\n\r\n"


def _progress(token: object = 7) -> dict[str, Any]:
    params = {"progressToken": token, "progress": 1, "total": 2}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def _result(rpc_id: object = 7, **result: Any) -> dict[str, Any]:
    body = result or {"content": [{"type": "text", "text": "x"}], "isError": False}
    return {"jsonrpc": "2.0", "id": rpc_id, "result": body}


def _error(rpc_id: object = 7, code: object = -32603) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": "m"}}


def _judge(
    body: bytes,
    request: Request | None = None,
    rpc_id: str | int | None = None,
    error: StreamError | None = None,
) -> StreamReport:
    """``body`` read by the route, told about its request when one is given."""
    route = MCPStreamableHTTPRoute()
    if request is not None:
        route.on_request(request, rpc_id)
    monitor = StreamMonitor(route)
    monitor.feed(body)
    return monitor.close(error=error)


def _verdict(report: StreamReport) -> tuple[str, str | None]:
    return report.outcome.value, report.stop_reason


# -- recognition ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "claimed"),
    [
        (_request(rpc_method="initialize"), True),  # no version header yet
        (_request(rpc_method="tools/call", rpc_name="add"), True),
        (_request(rpc_method="tools/list"), True),
        (_request(rpc_method="resources/read"), True),
        (_request(rpc_method="prompts/get"), True),
        (_request(rpc_method="ping"), True),
        (_request(rpc_method="completion/complete"), True),
        (_request(rpc_method="subscriptions/listen"), True),
        # tasks/* is A2A's too: MCP's only with MCP's version header
        (_request(rpc_method="tasks/get"), False),
        (_request(rpc_method="tasks/get", mcp_protocol_version="2025-11-25"), True),
        (_request(rpc_method="tasks/resubscribe"), False),
        (_request(rpc_method="message/stream"), False),  # A2A
        (_request(rpc_method="echo/stream"), False),
        # with the header any method is MCP's (an extension's too)
        (_request(rpc_method="acme/run", mcp_protocol_version="2025-06-18"), True),
        # answered 202 without a body: never a stream
        (_request(rpc_method="notifications/initialized"), False),
        (_request(rpc_method="notifications/cancelled", mcp_protocol_version="2025-11-25"), False),
        # a posted response (no method), or a body too long to read without 2026's header
        (_request(rpc_method=None, mcp_protocol_version="2025-11-25"), False),
        # 2026-07-28 names its method in a header
        (
            _request(rpc_method=None, mcp_method="tools/call", mcp_protocol_version="2026-07-28"),
            True,
        ),
        (_request("GET", None, mcp_protocol_version="2025-11-25"), True),  # the listening stream
        (_request("GET", None), False),
        (_request("DELETE", None, mcp_protocol_version="2025-11-25"), False),  # ends a session
    ],
)
def test_a_request_is_claimed_by_what_it_names(request_: Request, claimed: bool) -> None:
    assert (match_route(request_) is MCPStreamableHTTPRoute) is claimed


def test_the_url_alone_claims_nothing_and_the_declared_headers_are_read() -> None:
    assert detect_route("POST", "http://127.0.0.1:8000/mcp", "text/event-stream") == "auto"
    assert match_route(Request("POST", "127.0.0.1", "/mcp")) is None
    assert {VERSION, "mcp-method", "mcp-name"} <= set(declared_headers())


def _wrapped(text: str) -> str:
    return f"=?base64?{base64.b64encode(text.encode()).decode()}?="


@pytest.mark.parametrize(
    ("request_", "labels"),
    [
        (
            _request(rpc_name="get_weather"),
            {
                "mcp.method.name": "tools/call",
                "gen_ai.tool.name": "get_weather",
            },
        ),
        # 2026-07-28: the headers, Mcp-Name in its base64 form when it needs one
        (
            _request(rpc_method=None, mcp_method="tools/call", mcp_name=_wrapped("météo")),
            {
                "mcp.method.name": "tools/call",
                "gen_ai.tool.name": "météo",
            },
        ),
        (
            _request(rpc_method=None, mcp_method="tools/call", mcp_name="=?base64?*?="),
            {"mcp.method.name": "tools/call"},
        ),
        # the body wins over the header
        (
            _request(rpc_name="a", mcp_method="tools/call", mcp_name="b"),
            {
                "mcp.method.name": "tools/call",
                "gen_ai.tool.name": "a",
            },
        ),
        # a tool only for tools/call (prompts/get has a params.name too)
        (
            _request(rpc_method="prompts/get", rpc_name="greeting"),
            {"mcp.method.name": "prompts/get"},
        ),
        (_request("GET", None, mcp_protocol_version="2025-11-25"), {}),
    ],
)
def test_labels_name_the_method_and_a_tool_calls_tool(
    request_: Request, labels: dict[str, str]
) -> None:
    assert dict(MCPStreamableHTTPRoute.labels(request_)) == labels


# -- sniffing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "mcp"),
    [
        (_progress(), True),
        ({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}, True),
        ({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {}}, True),
        ({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}}, True),
        (_result(), True),
        (_result(tools=[]), True),
        (_result(protocolVersion="2025-11-25", capabilities={}, serverInfo={"name": "s"}), True),
        # A2A 0.3's results (by kind) and 1.0's (wrapped): never MCP's
        (_result(kind="task", id="t", contextId="c", status={"state": "working"}), False),
        (_result(kind="status-update", taskId="t", status={}, final=False), False),
        (_result(kind="artifact-update", taskId="t", artifact={"parts": []}), False),
        (_result(kind="message", role="agent", parts=[{"kind": "text", "text": "x"}]), False),
        (_result(statusUpdate={"taskId": "t", "status": {}}), False),
        (_result(task={"id": "t"}), False),
        # the same shapes without JSON-RPC's marker, a bare error, a client request
        ({"method": "notifications/progress", "params": {}}, False),
        (_error(), False),
        ({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {}}, False),
        ({"jsonrpc": "2.0", "method": 7}, False),
        ({"jsonrpc": "2.0", "id": 1, "result": "text"}, False),
    ],
)
def test_sniffing_takes_only_what_mcp_alone_sends(message: dict[str, Any], mcp: bool) -> None:
    assert MCPStreamableHTTPRoute.sniff_payload(message) is mcp


def test_a_sniffed_stream_is_read_as_if_named() -> None:
    body = PRIMING + _event(_progress(), event_id="2") + _event(_result(), event_id="3")
    _, sniffed = run_monitor([body], "auto")
    assert (sniffed.route, *_verdict(sniffed)) == (ROUTE, "complete", "result")
    assert sniffed == run_monitor([body], ROUTE)[1]


def test_a_stream_holding_only_an_error_is_not_proven_mcp() -> None:
    _, report = run_monitor([_event(_error())], "auto")
    assert (report.route, report.outcome) == ("generic", Outcome.EOF_UNVERIFIED)


def test_the_sniffer_finds_mcp_before_generic_and_no_other_route_claims_it() -> None:
    events = [_event(_progress()), _event(_result())]
    for raw in events:
        (event,) = StreamMonitor("generic").feed(raw)
        assert sniff(event, routes()) is MCPStreamableHTTPRoute


# -- a POST's stream -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        (_event(_result()), ("complete", "result")),
        (_event(_result(content=[], isError=True)), ("complete", "tool_error")),
        (_event(_result(resultType="complete", content=[])), ("complete", "result")),
        (
            _event(_result(resultType="input_required", requestState="s")),
            ("complete", "input_required"),
        ),
        (_event(_error(code=REQUEST_CANCELLED)), ("incomplete", "request_cancelled")),
        (_event(_error(code=-32601)), ("provider_error", None)),
        # what the server sends first is progress, never the end
        (_event(_progress()) + _event(_progress()), ("truncated", None)),
        (
            _event({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}}),
            ("truncated", None),
        ),
    ],
)
def test_the_response_to_the_request_ends_its_stream(
    body: bytes, verdict: tuple[str, str | None]
) -> None:
    report = _judge(body, _request(), 7)
    assert _verdict(report) == verdict
    assert report.terminal_seen is (verdict[0] != "truncated")


def test_a_json_rpc_error_carries_its_code() -> None:
    report = _judge(_event(_progress()) + _event(_error(code=-32602)), _request(), 7)
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, "-32602")
    report = _judge(_event({"jsonrpc": "2.0", "id": 7, "error": "boom"}), _request(), 7)
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, None)


def test_a_response_to_another_id_does_not_end_the_stream() -> None:
    body = _event(_result(9)) + _event(_progress())
    report = _judge(body, _request(), 7)
    assert (report.outcome, report.anomalies) == (
        Outcome.TRUNCATED,
        {"response_to_another_request": 1},
    )
    report = _judge(body + _event(_result(7)), _request(), 7)
    assert _verdict(report) == ("complete", "result")
    assert report.anomalies == {"response_to_another_request": 1}


def test_without_the_request_id_the_first_response_ends_the_stream() -> None:
    body = _event(_result(9)) + _event(_result(7))
    report = _judge(body, _request(), None)
    assert _verdict(report) == ("complete", "result")
    assert report.anomalies == {"event_after_terminal": 1}
    # No request at all (a sniffed stream, a replayed recording): the same, but the operation
    # only the request names.
    assert _judge(body) == dataclasses.replace(report, operation_name=None)


@pytest.mark.parametrize(("sent", "asked"), [("7", 7), (7, "7")])
def test_an_id_retyped_by_the_server_still_matches(sent: object, asked: str | int) -> None:
    report = _judge(_event(_result(sent)), _request(), asked)
    assert _verdict(report) == ("complete", "result")
    assert report.anomalies == {"response_id_retyped": 1}


@pytest.mark.parametrize("sent", [True, 7.0, None, [7]])
def test_an_id_of_another_type_is_another_request(sent: object) -> None:
    report = _judge(_event(_result(sent)), _request(), 1)
    if sent is None:  # a result with a null id: its request's, whose id could not be read
        assert _verdict(report) == ("complete", "result")
    else:
        assert report.anomalies == {"response_to_another_request": 1}


def test_an_error_with_a_null_id_is_the_posts_answer() -> None:
    # JSON-RPC 2.0 §5: null when the request's id could not be read; on a POST, its request's.
    report = _judge(_event(_error(None, -32700)), _request(), 7)
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, "-32700")


def test_a_priming_event_and_ping_comments_are_no_payload() -> None:
    body = read_fixture("edge/mcp-priming-ids-complete.sse")
    report = _judge(body, _request(mcp_protocol_version="2025-11-25"), 2)
    assert _verdict(report) == ("complete", "result")
    assert (report.event_count, report.comment_count, report.anomalies) == (3, 1, {})
    assert _verdict(run_monitor([body])[1]) == ("complete", "result")


def test_an_event_of_another_type_is_skipped_as_the_sdk_skips_it() -> None:
    body = _event(_result(), name="endpoint") + _event(_result(), name="message")
    report = _judge(body, _request(), 7)
    assert _verdict(report) == ("complete", "result")
    assert report.unknown_event_count == 1


def test_a_2025_03_26_batch_is_read_message_by_message() -> None:
    batch = _event([_progress(), _result(), _progress()])
    report = _judge(batch, _request(), 7)
    assert _verdict(report) == ("complete", "result")
    assert report.anomalies == {"event_after_terminal": 1}
    assert _judge(_event([_progress(), "x"]), _request(), 7).outcome is Outcome.PAYLOAD_ERROR


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        "[]",
        '"text"',
        "7",
        json.dumps({"jsonrpc": "2.0", "id": 7}),  # neither result nor error
        json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}, "error": {}}),  # both
        json.dumps({"jsonrpc": "2.0", "id": 7, "result": "text"}),  # MCP results are objects
        json.dumps({"jsonrpc": "2.0", "method": ["notifications/progress"]}),
    ],
)
def test_what_is_not_one_json_rpc_message_is_a_payload_error(data: str) -> None:
    assert _judge(_event(data), _request(), 7).outcome is Outcome.PAYLOAD_ERROR


# -- the early close, by revision ----------------------------------------------------------------

AFTER_AN_ID = PRIMING + _event(_progress(), event_id="2")


@pytest.mark.parametrize(
    ("version", "outcome"),
    [
        ("2025-11-25", Outcome.EOF_UNVERIFIED),  # SEP-1699: the server may close to be polled
        (None, Outcome.EOF_UNVERIFIED),  # unknown: an initialize, or no header sent
        ("draft", Outcome.EOF_UNVERIFIED),  # not a dated revision: unknown
        ("2025-06-18", Outcome.TRUNCATED),  # "SHOULD NOT close the SSE stream before" it
        ("2025-03-26", Outcome.TRUNCATED),
        ("2026-07-28", Outcome.TRUNCATED),  # resumability removed
    ],
)
def test_a_clean_end_after_an_event_id_is_resumable_where_the_revision_allows(
    version: str | None, outcome: Outcome
) -> None:
    headers = {} if version is None else {"mcp_protocol_version": version}
    report = _judge(AFTER_AN_ID, _request(**headers), 7)
    assert (report.outcome, report.stop_reason, report.terminal_seen) == (outcome, None, False)


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        ("transport", Outcome.TRUNCATED),
        ("cancelled", Outcome.CANCELLED),
        ("timeout", Outcome.TIMEOUT),
    ],
)
def test_only_a_clean_end_after_an_event_id_is_resumable(
    error: StreamError, outcome: Outcome
) -> None:
    request = _request(mcp_protocol_version="2025-11-25")
    assert _judge(AFTER_AN_ID, request, 7, error).outcome is outcome


def test_without_an_event_id_a_clean_end_before_the_response_is_truncated() -> None:
    body = _event(_progress()) + _event(_progress())
    assert _judge(body, _request(mcp_protocol_version="2025-11-25"), 7).outcome is Outcome.TRUNCATED
    assert _judge(body).outcome is Outcome.TRUNCATED


def test_a_cut_mid_event_after_an_event_id_is_truncated() -> None:
    body = AFTER_AN_ID + _event(_result(), event_id="3")[:-20]
    request = _request(mcp_protocol_version="2025-11-25")
    assert _judge(body, request, 7).outcome is Outcome.TRUNCATED


def test_the_response_after_an_event_id_still_completes_the_stream() -> None:
    body = AFTER_AN_ID + _event(_result(), event_id="3")
    request = _request(mcp_protocol_version="2025-11-25")
    assert _verdict(_judge(body, request, 7)) == ("complete", "result")


# -- the GET stream ------------------------------------------------------------------------------

LISTEN = _request("GET", None, mcp_protocol_version="2025-11-25")
NOTICE = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, Outcome.EOF_UNVERIFIED),
        ("cancelled", Outcome.CANCELLED),
        ("transport", Outcome.TRUNCATED),
    ],
)
def test_the_get_stream_has_no_terminal(error: StreamError | None, outcome: Outcome) -> None:
    body = _event(NOTICE) + _event({"jsonrpc": "2.0", "id": 3, "method": "roots/list"})
    report = _judge(body, LISTEN, None, error)
    assert (report.outcome, report.terminal_seen) == (outcome, False)


def test_a_posts_answer_resumed_on_a_get_ends_it() -> None:
    body = PRIMING + _event(_progress(), event_id="4") + _event(_result(), event_id="5")
    assert _verdict(_judge(body, LISTEN)) == ("complete", "result")
    assert _judge(_event(_error(5, -32603)), LISTEN).outcome is Outcome.PROVIDER_ERROR


def test_an_error_without_an_id_on_a_get_stream_belongs_to_no_request() -> None:
    body = _event(_error(None, -32700)) + _event(NOTICE)
    report = _judge(body, LISTEN)
    assert (report.outcome, report.anomalies) == (
        Outcome.EOF_UNVERIFIED,
        {"response_without_id": 1},
    )


def test_a_tool_call_is_the_execute_tool_operation_and_no_other_request_is() -> None:
    body = _event(_result())
    assert _judge(body, _request(rpc_name="add"), 7).operation_name == "execute_tool"
    assert _judge(body, _request(rpc_method="prompts/get"), 7).operation_name is None
    assert _judge(body).operation_name is None  # its request unknown


def test_a_route_instance_judges_one_stream_its_requests_do_not_leak() -> None:
    listening, calling = MCPStreamableHTTPRoute(), MCPStreamableHTTPRoute()
    listening.on_request(LISTEN, None)
    calling.on_request(_request(rpc_name="add"), 1)
    assert (listening.has_terminal, calling.operation) == (False, "execute_tool")
    assert (MCPStreamableHTTPRoute.has_terminal, MCPStreamableHTTPRoute.operation) == (True, None)
    fresh = MCPStreamableHTTPRoute()
    assert (fresh.has_terminal, fresh.operation) == (True, None)
