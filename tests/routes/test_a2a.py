"""``a2a.stream``: A2A streaming over JSON-RPC and HTTP+JSON, protocol 0.3 and 1.0.

Recognition (the body's JSON-RPC method, the HTTP+JSON paths), sniffing (conservative: never
an MCP stream), the terminal rules for every state in both spellings, the paused states judged at
the end of the stream, errors, the id check, artifacts being appended to, anomalies, and hostile
shapes (never an exception). The wire shapes are the ones a2a-sdk 1.3.0's server writes
(``tests/fixtures/real/a2a-sdk-*.sse``) and the spec examples (``tests/fixtures/synthetic/a2a-*``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otelsse import Limits, Outcome, StreamMonitor, read_stream
from otelsse.routes import (
    A2AStreamRoute,
    Request,
    detect_route,
    make_adapter,
    match_route,
    protocol_request,
)
from otelsse.routes import routes as registered_routes
from otelsse.routes._sniff import sniff
from tests._fixtures import read_fixture
from tests._helpers import run_monitor

ROUTE = "a2a.stream"
TASK = "task-1"


def _body(*payloads: Any, event: str | None = None, crlf: bool = False) -> bytes:
    """One SSE event per payload (a dict as compact JSON, bytes as they are)."""
    end = "\r\n" if crlf else "\n"
    out = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        head = f"event: {event}{end}" if event else ""
        out.append(f"{head}data: {data}{end}{end}")
    return "".join(out).encode()


def _rpc(result: Any, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


# 1.0 StreamResponse members (HTTP+JSON bare; JSON-RPC inside ``result``)
def _task(state: str = "TASK_STATE_SUBMITTED") -> dict[str, Any]:
    return {"task": {"id": TASK, "contextId": "ctx", "status": {"state": state}}}


def _status(state: str, **extra: Any) -> dict[str, Any]:
    return {
        "statusUpdate": {"taskId": TASK, "contextId": "ctx", "status": {"state": state}} | extra
    }


def _artifact(artifact_id: str, text: str = "x", **flags: bool) -> dict[str, Any]:
    artifact = {"artifactId": artifact_id, "parts": [{"text": text}]}
    return {"artifactUpdate": {"taskId": TASK, "contextId": "ctx", "artifact": artifact} | flags}


def _message(text: str = "hi") -> dict[str, Any]:
    return {"message": {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": text}]}}


# 0.3 JSON-RPC results, told apart by ``kind``
def _task03(state: str = "submitted") -> dict[str, Any]:
    return {"kind": "task", "id": TASK, "contextId": "ctx", "status": {"state": state}}


def _status03(state: str, final: bool = False) -> dict[str, Any]:
    return {"kind": "status-update", "taskId": TASK, "contextId": "ctx",
            "status": {"state": state}, "final": final}  # fmt: skip


def _judge(body: bytes, error: Any = None, route: str = ROUTE) -> tuple[str, str | None]:
    _, report = run_monitor([body], route, error)
    return report.outcome.value, report.stop_reason


# -- recognition ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("POST", "https://agent.example.com/message:stream"),  # 1.0
        ("POST", "https://agent.example.com/acme/message:stream"),  # 1.0, a tenant
        ("POST", "https://agent.example.com/v1/message:stream"),  # 0.3
        ("POST", "https://agent.example.com/a2a/tasks/t-1:subscribe"),  # 1.0 spec text
        ("GET", "https://agent.example.com/tasks/t-1:subscribe"),  # 1.0 protobuf binding
        ("GET", "https://agent.example.com/v1/tasks/t-1:subscribe"),  # 0.3
    ],
)
def test_the_http_json_binding_is_told_by_its_path(method: str, url: str) -> None:
    assert detect_route(method, url) == ROUTE


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "https://agent.example.com/message:stream"),
        ("POST", "https://agent.example.com/message:send"),
        ("POST", "https://agent.example.com/tasks/t-1:cancel"),
        ("DELETE", "https://agent.example.com/tasks/t-1:subscribe"),
        ("POST", "https://agent.example.com/feeds/x:subscribe"),  # not a task
        ("POST", "https://agent.example.com/rpc"),  # JSON-RPC: told by its body, not its path
    ],
)
def test_other_requests_of_the_http_json_binding_are_not_claimed(method: str, url: str) -> None:
    assert detect_route(method, url) is None


@pytest.mark.parametrize(
    "rpc_method", ["message/stream", "tasks/resubscribe", "SendStreamingMessage", "SubscribeToTask"]
)
def test_the_json_rpc_binding_is_told_by_the_body_s_method(rpc_method: str) -> None:
    plain = Request("POST", "agent.example.com", "/")
    assert match_route(plain) is None  # its URL alone says nothing
    request = protocol_request(plain, rpc_method, None, {}.get)
    assert match_route(request) is A2AStreamRoute
    assert A2AStreamRoute.always_streams(request)
    assert A2AStreamRoute.labels(request) == {}


@pytest.mark.parametrize(
    ("method", "rpc_method"),
    [("POST", "SendMessage"), ("POST", "message/send"), ("POST", "tasks/get"),
     ("GET", "message/stream"), ("POST", "tools/call")],
)  # fmt: skip
def test_other_json_rpc_methods_are_not_claimed(method: str, rpc_method: str) -> None:
    request = protocol_request(Request(method, "h", "/rpc"), rpc_method, None, {}.get)
    assert not A2AStreamRoute.matches(request)  # (MCP claims its own tools/call)


def test_the_route_declares_no_provider_and_invokes_an_agent() -> None:
    assert A2AStreamRoute.provider is None
    assert A2AStreamRoute.operation == "invoke_agent"
    assert A2AStreamRoute.request_headers == frozenset()


# -- sniffing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        _rpc(_task03()),
        _rpc(_status03("working")),
        _rpc({"kind": "artifact-update", "taskId": TASK, "artifact": {"parts": []}}),
        _rpc({"kind": "message", "messageId": "m", "role": "agent", "parts": []}),
        _rpc(_task()),
        _rpc(_status("TASK_STATE_WORKING")),
        _rpc(_artifact("a")),
        _rpc(_message()),
        _task(),
        _status("TASK_STATE_WORKING"),
        _artifact("a"),
        _message(),
        {"message": {"messageId": "m", "content": [{"text": "hi"}]}},  # 0.3 protobuf JSON
    ],
)
def test_every_event_shape_is_sniffed(payload: dict[str, Any]) -> None:
    (event,) = StreamMonitor().feed(_body(payload))
    assert sniff(event, registered_routes()) is A2AStreamRoute


@pytest.mark.parametrize(
    "payload",
    [
        # MCP: a task-augmented call's CreateTaskResult (status is a string), a tool result,
        # a notification, an error
        _rpc({"task": {"taskId": "t", "status": "working", "createdAt": "2025-11-25T00:00:00Z"}}),
        _rpc({"content": [{"type": "text", "text": "4"}], "isError": False}),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}},
        # Anthropic's message_start holds a ``message`` beside its ``type``
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {"task": {"id": "t", "status": "done"}, "extra": 1},  # two members
        {"kind": "task", "id": "t", "status": {"state": "working"}},  # kinds only in JSON-RPC
        _rpc({"kind": "task", "id": "t", "status": "working"}),
        _rpc([_task()]),
    ],
)
def test_look_alikes_are_not_sniffed(payload: Any) -> None:
    (event,) = StreamMonitor().feed(_body(payload))
    assert sniff(event, registered_routes()) is not A2AStreamRoute


# -- terminal rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "outcome", "stop"),
    [
        ("completed", "complete", "completed"),
        ("TASK_STATE_COMPLETED", "complete", "completed"),
        ("failed", "provider_error", "failed"),
        ("TASK_STATE_FAILED", "provider_error", "failed"),
        ("rejected", "provider_error", "rejected"),
        ("TASK_STATE_REJECTED", "provider_error", "rejected"),
        ("canceled", "incomplete", "canceled"),
        ("TASK_STATE_CANCELED", "incomplete", "canceled"),
        ("TASK_STATE_CANCELLED", "incomplete", "canceled"),  # the 0.3 protobuf's spelling
        ("input-required", "complete", "input-required"),
        ("TASK_STATE_INPUT_REQUIRED", "complete", "input-required"),
        ("auth-required", "complete", "auth-required"),
        ("TASK_STATE_AUTH_REQUIRED", "complete", "auth-required"),
        ("unknown", "incomplete", "unknown"),
        ("TASK_STATE_UNSPECIFIED", "incomplete", "unknown"),
        ("submitted", "truncated", None),
        ("working", "truncated", None),
        ("TASK_STATE_WORKING", "truncated", None),
    ],
)
def test_each_state_the_stream_closes_in(sent: str, outcome: str, stop: str | None) -> None:
    # The same in either envelope, and as a status update or a Task.
    bodies = [
        _body(_task(), _status(sent)),
        _body(_rpc(_task()), _rpc(_status(sent))),
        _body(_rpc(_task03()), _rpc(_status03(sent))),
        _body(_task(sent)),
    ]
    for body in bodies:
        assert _judge(body) == (outcome, stop), body


def test_a_failed_task_s_error_code_is_its_state() -> None:
    _, report = run_monitor([read_fixture("real/a2a-sdk-rest-failed.sse")], ROUTE)
    assert (report.provider_error_code, report.terminal_seen) == ("failed", True)


def test_a_message_only_stream_is_complete() -> None:
    _, report = run_monitor([_body(_message())], ROUTE)
    assert (report.outcome, report.stop_reason, report.response_id) == (
        Outcome.COMPLETE,
        "message",
        "m-1",
    )
    assert report.output_delta_count == 1  # its text part


def test_a_task_stream_is_identified_by_its_task() -> None:
    _, report = run_monitor([read_fixture("real/a2a-sdk-jsonrpc-artifacts-completed.sse")])
    assert report.response_id == "b7b942d6-8f3a-47e3-b99e-1ad2e15dc509"
    assert report.output_delta_count == 3  # three artifact text parts
    assert report.provider_name is None
    assert report.operation_name == "invoke_agent"


def test_final_true_ends_a_0_3_stream_in_whatever_state() -> None:
    working = _body(_rpc(_task03()), _rpc(_status03("working", final=True)))
    assert _judge(working) == ("incomplete", "working")
    paused = _body(_rpc(_task03()), _rpc(_status03("input-required", final=True)))
    assert _judge(paused) == ("complete", "input-required")
    # and what follows it is extra
    _, report = run_monitor([paused + _body(_rpc(_status03("working")))], ROUTE)
    assert report.anomalies == {"event_after_terminal": 1}


def test_a_pause_is_judged_when_the_stream_ends_not_at_its_event() -> None:
    # Out-of-band credentials: the agent goes on after auth-required (v1.0.0 §7.6).
    resumed = _body(_task(), _status("TASK_STATE_AUTH_REQUIRED"), _status("TASK_STATE_WORKING"))
    assert _judge(resumed) == ("truncated", None)
    done = resumed + _body(_status("TASK_STATE_COMPLETED"))
    _, report = run_monitor([done], ROUTE)
    assert (report.outcome, report.stop_reason, report.anomalies) == (
        Outcome.COMPLETE,
        "completed",
        {},
    )
    assert report.finish_reasons == ("completed",)


def test_a_stream_closed_by_the_application_during_a_pause_is_judged_by_it() -> None:
    paused = _body(_task(), _status("TASK_STATE_INPUT_REQUIRED"))
    assert _judge(paused, error="cancelled") == ("complete", "input-required")
    assert _judge(paused, error="transport") == ("complete", "input-required")
    working = _body(_task(), _status("TASK_STATE_WORKING"))
    assert _judge(working, error="cancelled") == ("cancelled", None)
    assert _judge(working, error="transport") == ("truncated", None)


def test_a_status_without_a_state_is_unknown() -> None:
    # protobuf JSON writes TASK_STATE_UNSPECIFIED (0) as no ``state`` at all
    body = _body({"statusUpdate": {"taskId": TASK, "status": {}}})
    assert _judge(body) == ("incomplete", "unknown")


def test_a_state_the_route_does_not_know_is_counted_and_ends_nothing() -> None:
    _, report = run_monitor([_body(_task(), _status("TASK_STATE_DREAMING"))], ROUTE)
    assert (report.outcome, report.unknown_event_count) == (Outcome.TRUNCATED, 1)
    body = _body(_task(), _status("TASK_STATE_DREAMING"), _status("TASK_STATE_COMPLETED"))
    assert _judge(body) == ("complete", "completed")


def test_nothing_but_a_clean_eof_is_truncated() -> None:
    assert _judge(b"") == ("truncated", None)
    assert _judge(_body(_task())) == ("truncated", None)  # submitted


def test_the_reader_releases_a_whole_task_and_its_text() -> None:
    body = read_fixture("real/a2a-sdk-jsonrpc-v03-artifacts-completed.sse")
    result = read_stream([body], ROUTE)
    assert (result.stop_reason, result.text) == ("completed", "Part one, part two.A summary.")


# -- after the end ----------------------------------------------------------------------------


def test_one_final_task_snapshot_may_follow_a_terminal_state() -> None:
    # v1.0.0 §11.7: a server MAY resend a final Task snapshot before closing.
    end = _body(_task(), _status("TASK_STATE_COMPLETED"))
    _, report = run_monitor([end + _body(_task("TASK_STATE_COMPLETED"))], ROUTE)
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {})
    rpc = _body(
        _rpc(_task03()), _rpc(_status03("completed", final=True)), _rpc(_task03("completed"))
    )
    assert run_monitor([rpc], ROUTE)[1].anomalies == {}
    twice = end + _body(_task("TASK_STATE_COMPLETED"), _task("TASK_STATE_COMPLETED"))
    assert run_monitor([twice], ROUTE)[1].anomalies == {"event_after_terminal": 1}


@pytest.mark.parametrize(
    "extra", [_status("TASK_STATE_WORKING"), _artifact("a"), _message(), "not json"]
)
def test_anything_else_after_the_end_is_an_anomaly(extra: Any) -> None:
    body = _body(_task(), _status("TASK_STATE_COMPLETED"), extra)
    _, report = run_monitor([body], ROUTE)
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {"event_after_terminal": 1})
    # after a message or an error, a Task is extra too
    for end in (_body(_message()), _body({"error": {"code": 500, "status": "INTERNAL"}})):
        assert run_monitor([end + _body(_task())], ROUTE)[1].anomalies == {
            "event_after_terminal": 1
        }


def test_a_message_in_a_task_stream_ends_it_as_an_anomaly() -> None:
    _, report = run_monitor([_body(_task(), _status("TASK_STATE_WORKING"), _message())], ROUTE)
    assert (report.outcome, report.stop_reason) == (Outcome.COMPLETE, "message")
    assert report.anomalies == {"message_in_task_stream": 1}


# -- errors ---------------------------------------------------------------------------------


def test_json_rpc_and_http_json_errors_are_provider_errors_with_their_code() -> None:
    for body, code in [
        (read_fixture("real/a2a-sdk-jsonrpc-error-event.sse"), "-32603"),
        (read_fixture("real/a2a-sdk-rest-error-event.sse"), "INTERNAL"),
        # without the event name too (a2a-sdk's v0.3 adapter sends none)
        (_body(_rpc(_task03()), {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001}}), "-32001"),
        (_body({"error": {"code": 404, "message": "x"}}), "404"),
    ]:
        _, report = run_monitor([body], ROUTE)
        assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, code)


def test_an_error_event_is_a_provider_error_whatever_its_data() -> None:
    # a2a-sdk's client raises on every ``event: error``
    for data in ["boom", "[1]", json.dumps(_rpc(_task()))]:
        _, report = run_monitor([_body(_task()) + _body(data, event="error")], ROUTE)
        assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, None)


def test_strict_mode_s_event_is_a_json_rpc_internal_error() -> None:
    event = A2AStreamRoute.strict_error_event("otelsse_strict_truncated", "refused")
    assert event is not None
    assert event.startswith(b"event: error\ndata: ")
    payload = json.loads(event.split(b"data: ", 1)[1])
    assert payload["jsonrpc"] == "2.0"
    assert payload["id"] is None
    assert payload["error"]["code"] == -32603
    assert payload["error"]["data"][0]["reason"] == "OTELSSE_STRICT_TRUNCATED"
    _, report = run_monitor([_body(_task(), _status("TASK_STATE_WORKING")) + event], ROUTE)
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, "-32603")


@pytest.mark.parametrize(
    "payload",
    [
        {"jsonrpc": "2.0", "id": 1},  # neither result nor error: the SDK raises
        {"jsonrpc": "2.0", "id": 1, "result": "done"},
        {"jsonrpc": "2.0", "id": 1, "result": None},
        "{not json",
        "[1, 2]",
    ],
)
def test_a_json_rpc_response_that_is_not_one_is_a_payload_error(payload: Any) -> None:
    assert _judge(_body(payload)) == ("payload_error", None)


def test_a_response_to_another_request_is_an_anomaly() -> None:
    body = _body(_rpc(_task(), "req-1"), _rpc(_status("TASK_STATE_COMPLETED"), "req-2"))
    for rpc_id, anomalies in [("req-1", {"response_id_mismatch": 1}), (None, {}),
                              (1, {"response_id_mismatch": 2})]:  # fmt: skip
        route = make_adapter(ROUTE)
        route.on_request(Request("POST", "h", "/rpc", rpc_method="SendStreamingMessage"), rpc_id)
        monitor = StreamMonitor(route)
        monitor.feed(body)
        report = monitor.close()
        assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, anomalies), rpc_id


def test_an_event_of_no_known_kind_is_counted() -> None:
    body = _body(_task(), {"somethingNew": {}}, _rpc({"kind": "progress"}), _status("completed"))
    _, report = run_monitor([body], ROUTE)
    assert (report.outcome, report.unknown_event_count) == (Outcome.COMPLETE, 2)


# -- artifacts ------------------------------------------------------------------------------


def test_an_artifact_being_appended_to_at_the_end_is_an_anomaly() -> None:
    start = _body(_task(), _artifact("a", "one "), _artifact("a", "two", append=True))
    end = _body(_status("TASK_STATE_COMPLETED"))
    _, report = run_monitor([start + end], ROUTE)
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {"artifact_open_at_end": 1})
    closed = start + _body(_artifact("a", "three", append=True, lastChunk=True)) + end
    assert run_monitor([closed], ROUTE)[1].anomalies == {}
    # cut while it is open: no end came
    assert _judge(start) == ("truncated", None)


def test_whole_artifacts_never_count_as_open() -> None:
    # protobuf JSON writes neither ``append`` nor ``lastChunk`` when false (the spec's own
    # v1.0 example): a whole artifact, which holds no place however many come
    body = _body(_task(), *(_artifact(f"a{n}") for n in range(50)), _status("completed"))
    monitor = StreamMonitor(ROUTE, limits=Limits(max_parts=3))
    monitor.feed(body)
    report = monitor.close()
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {})


def test_artifacts_appended_to_at_once_are_bounded() -> None:
    body = _body(_task(), *(_artifact(f"a{n}", append=True) for n in range(5)))
    monitor = StreamMonitor(ROUTE, limits=Limits(max_parts=3))
    monitor.feed(body)
    report = monitor.close()
    assert (report.outcome, report.buffer_limit_stage) == (Outcome.BUFFER_LIMIT, "accumulator")
    # closing them frees their place
    pairs = [
        _artifact(f"a{n}", append=True) if last is False else
        _artifact(f"a{n}", append=True, lastChunk=True)
        for n in range(5) for last in (False, True)
    ]  # fmt: skip
    monitor = StreamMonitor(ROUTE, limits=Limits(max_parts=3))
    monitor.feed(_body(_task(), *pairs, _status("completed")))
    assert monitor.close().outcome is Outcome.COMPLETE


# -- hostile shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"task": {"id": TASK, "status": []}},
        {"task": {"id": TASK, "status": {"state": 3}}},
        {"task": "x"},
        {"statusUpdate": {"taskId": TASK, "status": "working"}},
        {"artifactUpdate": {"taskId": TASK}},
        {"artifactUpdate": {"taskId": TASK, "artifact": []}},
        {"artifactUpdate": {"taskId": TASK, "artifact": {"artifactId": {}, "parts": []}}},
        {"artifactUpdate": {"taskId": TASK, "artifact": {"artifactId": "a", "parts": {}}}},
        {"artifactUpdate": {"taskId": TASK, "artifact": {"artifactId": "a", "parts": [1]}}},
        {"artifactUpdate": {"taskId": TASK, "artifact": {"parts": [{"text": 5}]}}},
        {"message": {"messageId": "m", "parts": "hi"}},
        {"message": []},
    ],
)
def test_a_payload_of_the_wrong_shape_is_a_payload_error_never_an_exception(payload: Any) -> None:
    assert _judge(_body(_task()) + _body(payload))[0] == "payload_error"


def test_what_a_lenient_reading_accepts_is_read_so() -> None:
    # A null status is no status (TASK_STATE_UNSPECIFIED); a kind that is no string, no kind.
    null = _rpc({"kind": "status-update", "status": None, "taskId": TASK})
    assert _judge(_body(_task()) + _body(null)) == ("incomplete", "unknown")
    _, report = run_monitor([_body(_task(), _rpc({"kind": ["task"]}))], ROUTE)
    assert (report.outcome, report.unknown_event_count) == (Outcome.TRUNCATED, 1)


def test_the_fixtures_replay_alike_through_auto_and_the_route() -> None:
    for name in (
        "synthetic/a2a-v1-spec-streaming-rest.sse",
        "synthetic/a2a-v03-spec-streaming.sse",
    ):
        body = read_fixture(name)
        assert _judge(body, route="auto") == _judge(body) == ("complete", "completed")
