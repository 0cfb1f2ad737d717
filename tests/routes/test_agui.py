"""``agui.run``: AG-UI runs over SSE, recognised by their first event, judged at their last run.

Every rule of otelsse/routes/agui.py's docstring, on streams written here as the AG-UI encoders
write them (``data: <compact JSON>`` and a blank line, no ``event:`` line); the whole fixtures
(tests/fixtures/synthetic/agui-*.sse) are judged under every chunking by tests/core.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsse import Outcome, SSEEvent, StreamMonitor, detect_route, read_stream
from otelsse._core.state import StreamState
from otelsse._monitor import Limits, StreamError, StreamReport
from otelsse._reader import StreamFault
from otelsse.routes import AGUIRoute, Request, match_route
from tests._fixtures import read_fixture
from tests._helpers import run_monitor
from tests._tiers import examples

ROUTE = "agui.run"
STARTED = {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}
FINISHED = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


def sse(*events: dict[str, Any]) -> bytes:
    """The events as ``EventEncoder`` writes them."""
    return b"".join(b"data: %s\n\n" % json.dumps(e, separators=(",", ":")).encode() for e in events)


def judge(*events: dict[str, Any], error: StreamError | None = None) -> StreamReport:
    """The report of these events read by ``agui.run`` (and, sniffed, the same)."""
    body = sse(*events)
    _, report = run_monitor([body], route=ROUTE, error=error)
    return report


def run(*events: dict[str, Any], **finished: Any) -> list[dict[str, Any]]:
    """One whole run around ``events``."""
    return [STARTED, *events, {**FINISHED, **finished}]


def message(message_id: str = "m1", text: str = "Hello.", **fields: Any) -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant", **fields},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": message_id},
    ]


def call(call_id: str = "c1", *deltas: str, name: str = "search") -> list[dict[str, Any]]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
        *({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": d} for d in deltas),
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
    ]


def violations(report: StreamReport) -> dict[str, int]:
    assert report.outcome is Outcome.PROTOCOL_ERROR, report
    return report.anomalies


# -- recognition ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/agent", "/api/copilotkit", "/v1/agents/run"])
def test_no_path_is_claimed_an_sse_answer_is_sniffed(path: str) -> None:
    assert match_route(Request("POST", "agent.example", path)) is None
    assert detect_route("POST", f"https://agent.example{path}") is None
    assert detect_route("POST", f"https://agent.example{path}", "text/event-stream") == "auto"
    assert not AGUIRoute.always_streams(Request("POST", "agent.example", path))


@pytest.mark.parametrize(
    ("payload", "claimed"),
    [
        (STARTED, True),
        (FINISHED, True),
        ({"type": "RUN_ERROR", "message": "boom"}, True),
        ({"type": "RUN_ERROR", "message": "boom", "code": "x"}, True),
        ({"type": "RUN_STARTED", "threadId": "t1"}, False),  # the schema requires both ids
        ({"type": "RUN_ERROR"}, False),
        ({"type": "TEXT_MESSAGE_START", "messageId": "m1"}, False),  # never first
        ({"type": "run_started", "threadId": "t1", "runId": "r1"}, False),
        ({"type": ["RUN_STARTED"], "threadId": "t1", "runId": "r1"}, False),
    ],
)
def test_what_sniffing_claims(payload: dict[str, Any], claimed: bool) -> None:
    assert AGUIRoute.sniff_payload(payload) is claimed


def test_the_first_event_makes_the_sniffed_stream_agui() -> None:
    body = read_fixture("synthetic/agui-spec-example.sse")
    monitor = StreamMonitor("auto")
    monitor.feed(body[: body.index(b"\n\n") + 2])  # RUN_STARTED alone
    assert monitor.route == ROUTE
    monitor.feed(body[body.index(b"\n\n") + 2 :])
    report = monitor.close()
    assert (report.route, report.outcome, report.stop_reason) == (
        ROUTE,
        Outcome.COMPLETE,
        "success",
    )
    assert report.operation_name == "invoke_agent"
    assert report.provider_name is None  # a protocol, not a model provider


def test_a_stream_whose_run_starts_late_is_sniffed_there_and_judged_from_its_start() -> None:
    body = sse(*message(), *run())
    _, sniffed = run_monitor([body])
    assert sniffed.route == ROUTE
    assert violations(sniffed) == {"event_before_run_started": 3}


def test_sse_fields_other_than_data_are_ignored() -> None:
    body = (
        b"event: agent\nid: 7\nretry: 1000\n" + sse(STARTED) + b": keep-alive\n\n" + sse(FINISHED)
    )
    _, report = run_monitor([body])
    assert (report.route, report.outcome, report.comment_count) == (ROUTE, Outcome.COMPLETE, 1)


# -- the terminal: the last run's end --------------------------------------------------------------


def test_a_whole_run_is_complete_and_identified_by_its_run_id() -> None:
    report = judge(*run(*message()))
    assert (report.outcome, report.stop_reason, report.terminal_seen) == (
        Outcome.COMPLETE,
        "success",
        True,
    )
    assert report.response_id == "r1"
    assert report.output_delta_count == 1


@pytest.mark.parametrize("events", [1, 2, 3, 4], ids=lambda n: f"after-{n}-events")
def test_a_clean_end_inside_the_run_is_truncated(events: int) -> None:
    report = judge(*run(*message())[:events])
    assert (report.outcome, report.terminal_seen) == (Outcome.TRUNCATED, False)


def test_an_empty_body_is_truncated() -> None:
    _, report = run_monitor([b""], route=ROUTE)
    assert report.outcome is Outcome.TRUNCATED


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        ("transport", Outcome.TRUNCATED),
        ("timeout", Outcome.TIMEOUT),
        ("cancelled", Outcome.CANCELLED),
    ],
)
def test_a_stream_that_ends_inside_the_run(error: StreamError, outcome: Outcome) -> None:
    assert judge(*run(*message())[:3], error=error).outcome is outcome


@pytest.mark.parametrize("error", ["transport", "cancelled"])
def test_after_the_last_terminal_event_a_broken_or_closed_stream_is_judged_by_it(
    error: StreamError,
) -> None:
    report = judge(*run(*message()), error=error)
    assert (report.outcome, report.stop_reason) == (Outcome.COMPLETE, "success")


def test_a_second_run_cut_short_is_truncated_whatever_the_first_one_did() -> None:
    report = judge(*run(*message()), {**STARTED, "runId": "r2"}, *message("m2")[:2])
    assert (report.outcome, report.terminal_seen) == (Outcome.TRUNCATED, False)
    assert report.finish_reasons == ("success",)


def test_several_runs_are_one_complete_stream() -> None:
    second = {"runId": "r2"}
    report = judge(*run(*message()), {**STARTED, **second}, *message("m2"), {**FINISHED, **second})
    assert (report.outcome, report.finish_reasons, report.response_id) == (
        Outcome.COMPLETE,
        ("success", "success"),
        "r1",
    )


# -- stops ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "verdict", "stop_reason"),
    [
        (None, Outcome.COMPLETE, "success"),  # absent means success
        ({"type": "success"}, Outcome.COMPLETE, "success"),
        ({"type": "success", "pendingToolCallIds": ["c1"]}, Outcome.COMPLETE, "success"),
        (
            {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "tool_approval"}]},
            Outcome.COMPLETE,
            "interrupt",
        ),
        ({"type": "cancelled"}, Outcome.INCOMPLETE, "cancelled"),
    ],
)
def test_the_run_outcome_is_the_stop(
    outcome: dict[str, Any] | None, verdict: Outcome, stop_reason: str
) -> None:
    report = judge(*run(*message(), outcome=outcome))
    assert (report.outcome, report.stop_reason, report.anomalies) == (verdict, stop_reason, {})


def test_an_outcome_no_version_names_is_success_counted_as_an_anomaly() -> None:
    report = judge(*run(outcome={"type": "suspended"}))
    assert (report.outcome, report.stop_reason) == (Outcome.COMPLETE, "suspended")
    assert report.anomalies == {"unknown_run_outcome": 1}


@pytest.mark.parametrize(
    "outcome",
    [
        "success",
        {"kind": "success"},
        {"type": 1},
        {"type": "interrupt"},
        {"type": "interrupt", "interrupts": []},
        {"type": "interrupt", "interrupts": "i1"},
    ],
)
def test_a_malformed_outcome_is_a_payload_error(outcome: Any) -> None:
    assert judge(*run(outcome=outcome)).outcome is Outcome.PAYLOAD_ERROR


def test_the_worst_stop_of_several_runs_wins() -> None:
    second = {"runId": "r2"}
    report = judge(
        *run(outcome={"type": "cancelled"}), {**STARTED, **second}, {**FINISHED, **second}
    )
    assert (report.outcome, report.stop_reason) == (Outcome.INCOMPLETE, "cancelled")


# -- RUN_ERROR -----------------------------------------------------------------------------------


def test_run_error_is_a_provider_error_with_its_code() -> None:
    report = judge(STARTED, *message()[:2], {"type": "RUN_ERROR", "message": "m", "code": "E42"})
    assert (report.outcome, report.provider_error_code, report.terminal_seen) == (
        Outcome.PROVIDER_ERROR,
        "E42",
        True,
    )


def test_a_run_may_fail_before_it_starts() -> None:
    report = judge({"type": "RUN_ERROR", "message": "refused"})
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, None)


def test_a_late_run_error_after_run_finished_fails_the_run() -> None:
    report = judge(*run(*message()), {"type": "RUN_ERROR", "message": "flush failed"})
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.anomalies == {}


def test_a_failed_run_followed_by_a_whole_one_is_still_the_streams_provider_error() -> None:
    second = {"runId": "r2"}
    report = judge(
        STARTED,
        {"type": "RUN_ERROR", "message": "m"},
        {**STARTED, **second},
        {**FINISHED, **second},
    )
    assert (report.outcome, report.anomalies) == (Outcome.PROVIDER_ERROR, {})


def test_run_error_ends_whatever_was_open() -> None:
    report = judge(
        STARTED,
        {"type": "STEP_STARTED", "stepName": "s"},
        *call("c1", '{"q":')[:2],
        {"type": "RUN_ERROR", "message": "m"},
    )
    assert (report.outcome, report.anomalies) == (Outcome.PROVIDER_ERROR, {})
    assert (report.tool_call_count, report.open_accumulator_count) == (1, 1)


@pytest.mark.parametrize(
    "after",
    [FINISHED, {"type": "RUN_ERROR", "message": "again"}, message()[0]],
    ids=["run-finished", "run-error", "message"],
)
def test_nothing_but_a_new_run_may_follow_run_error(after: dict[str, Any]) -> None:
    # agentscope-ai/agentscope-java#2642: an adapter that sent RUN_FINISHED after RUN_ERROR.
    report = judge(STARTED, {"type": "RUN_ERROR", "message": "m"}, after)
    assert violations(report) == {"event_after_run_closed": 1}


def test_nothing_but_a_new_run_or_a_late_failure_may_follow_run_finished() -> None:
    assert violations(judge(*run(), message()[0])) == {"event_after_run_closed": 1}
    assert violations(judge(*run(), FINISHED)) == {"event_after_run_closed": 1}


def test_a_run_cannot_start_inside_another() -> None:
    report = judge(STARTED, {**STARTED, "runId": "r2"}, FINISHED)
    assert violations(report) == {"run_started_during_run": 1}


def test_an_unknown_event_is_counted_and_judged_no_further() -> None:
    report = judge({"type": "FUTURE_EVENT", "x": 1}, *run({"type": "FUTURE_EVENT"}))
    assert (report.outcome, report.unknown_event_count, report.anomalies) == (
        Outcome.COMPLETE,
        2,
        {},
    )


# -- items: open, continue, close ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "violation"),
    [
        (message()[:2], "text_message_open_at_run_finished"),
        (call("c1", "{}")[:2], "tool_call_open_at_run_finished"),
        ([{"type": "STEP_STARTED", "stepName": "s"}], "step_open_at_run_finished"),
        ([{"type": "REASONING_START", "messageId": "r"}], "reasoning_open_at_run_finished"),
        (
            [{"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"}],
            "reasoning_message_open_at_run_finished",
        ),
        (
            [{"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "helper"}],
            "subagent_open_at_run_finished",
        ),
        ([{"type": "THINKING_START"}], "thinking_open_at_run_finished"),
    ],
)
def test_everything_opened_must_close_before_run_finished(
    events: list[dict[str, Any]], violation: str
) -> None:
    assert violations(judge(*run(*events))) == {violation: 1}


@pytest.mark.parametrize(
    ("events", "violation"),
    [
        (message()[1:], "text_message_not_open"),
        ([*message(), message()[2]], "text_message_not_open"),
        ([message()[0], *message()], "text_message_already_open"),
        (call("c1", "{}")[1:], "tool_call_not_open"),
        ([call()[0], *call()], "tool_call_already_open"),
        ([{"type": "STEP_FINISHED", "stepName": "s"}], "step_not_open"),
        (
            [{"type": "STEP_STARTED", "stepName": "s"}] * 2
            + [{"type": "STEP_FINISHED", "stepName": "s"}],
            "step_already_open",
        ),
        ([{"type": "REASONING_END", "messageId": "r"}], "reasoning_not_open"),
        (
            [{"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "x"}],
            "reasoning_message_not_open",
        ),
        ([{"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "x"}], "thinking_message_not_open"),
        ([{"type": "THINKING_END"}], "thinking_not_open"),
        ([{"type": "REASONING_START", "messageId": "r"}] * 2, "reasoning_already_open"),
        (
            [{"type": "REASONING_MESSAGE_START", "messageId": "r"}] * 2,
            "reasoning_message_already_open",
        ),
        ([{"type": "REASONING_MESSAGE_END", "messageId": "r"}], "reasoning_message_not_open"),
        ([{"type": "THINKING_START"}] * 2, "thinking_already_open"),
        ([{"type": "THINKING_TEXT_MESSAGE_START"}] * 2, "thinking_message_already_open"),
    ],
)
def test_an_item_continued_or_closed_unopened_or_opened_twice(
    events: list[dict[str, Any]], violation: str
) -> None:
    assert violation in violations(judge(*run(*events)))


def test_a_closed_message_may_be_reopened() -> None:
    report = judge(*run(*message(), *message()))
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {})


def test_steps_are_per_owner() -> None:
    def step(kind: str, **owner: str) -> dict[str, Any]:
        return {"type": kind, "stepName": "plan", **owner}

    both = [step("STEP_STARTED"), step("STEP_STARTED", subagentRunId="s1")]
    ends = [step("STEP_FINISHED", subagentRunId="s1"), step("STEP_FINISHED")]
    assert judge(*run(*both, *ends)).outcome is Outcome.COMPLETE
    # A STEP_FINISHED must carry its STEP_STARTED's attribution.
    report = judge(*run(step("STEP_STARTED", subagentRunId="s1"), step("STEP_FINISHED")))
    assert violations(report) == {"step_not_open": 1, "step_open_at_run_finished": 1}


def test_a_continuation_may_omit_its_owner_but_not_name_another() -> None:
    start, content, end = message(subagentRunId="s1")
    assert judge(*run(start, content, end)).outcome is Outcome.COMPLETE
    report = judge(*run(start, {**content, "subagentRunId": "s2"}, end))
    assert violations(report) == {"owner_mismatch": 1}


def test_subagents_announced_must_end_and_may_fail_without_failing_the_run() -> None:
    started = {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "helper"}
    failed = {"type": "SUBAGENT_ERROR", "subagentRunId": "s1", "message": "m"}
    report = judge(*run(started, *message(subagentRunId="s1"), failed))
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {"subagent_error": 1})
    assert violations(judge(*run(started, started))) == {
        "subagent_already_open": 1,
        "subagent_open_at_run_finished": 1,
    }
    # Attribution without any announcement is allowed, and so is ending it.
    finished = {"type": "SUBAGENT_FINISHED", "subagentRunId": "s9"}
    assert judge(*run(*message(subagentRunId="s9"), finished)).outcome is Outcome.COMPLETE


def test_reasoning_spans_and_messages_are_separate_namespaces() -> None:
    events = [
        {"type": "REASONING_START", "messageId": "x"},
        {"type": "REASONING_MESSAGE_START", "messageId": "x", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "x", "delta": "hmm"},
        {"type": "REASONING_MESSAGE_END", "messageId": "x"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "x",
         "encryptedValue": "opaque"},
        {"type": "REASONING_END", "messageId": "x"},
    ]  # fmt: skip
    report = judge(*run(*events))
    assert (report.outcome, report.output_delta_count) == (Outcome.COMPLETE, 1)


def test_the_retired_thinking_events_are_read_as_one_span_and_message() -> None:
    events = [
        {"type": "THINKING_START", "title": "Planning"},
        {"type": "THINKING_TEXT_MESSAGE_START"},
        {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "Let me think"},
        {"type": "THINKING_TEXT_MESSAGE_END"},
        {"type": "THINKING_END"},
    ]
    report = judge(*run(*events))
    assert (report.outcome, report.output_delta_count) == (Outcome.COMPLETE, 1)


def test_only_the_agents_text_is_output() -> None:
    report = judge(*run(*message(role="user")[:1], *message()[1:]))
    assert (report.outcome, report.output_delta_count) == (Outcome.COMPLETE, 0)
    start, content, _ = message(role="user")
    assert judge(STARTED, start, {**content, "delta": 5}).outcome is Outcome.PAYLOAD_ERROR


# -- tool calls ----------------------------------------------------------------------------------


def test_tool_arguments_accumulate_by_call_id_and_are_judged_at_the_run_end() -> None:
    first, second = call("c1", '{"q":', ' "a"}'), call("c2", "{}", name="now")
    interleaved = [first[0], second[0], first[1], second[1], first[2], second[2], first[3]]
    report = judge(*run(*interleaved))
    assert (report.outcome, report.tool_call_count, report.tool_call_invalid_count) == (
        Outcome.COMPLETE,
        2,
        0,
    )


def test_arguments_that_are_not_one_json_value_under_success_are_a_payload_error() -> None:
    report = judge(*run(*call("c1", '{"q": "a"')))
    assert (report.outcome, report.tool_call_invalid_count) == (Outcome.PAYLOAD_ERROR, 1)


def test_under_a_cancelled_run_broken_arguments_are_the_expected_shape() -> None:
    # "a call cut off mid-arguments closes like any other" (lifecycle.mdx, Cancelled runs).
    report = judge(*run(*call("c1", '{"q": "a'), outcome={"type": "cancelled"}))
    assert (report.outcome, report.tool_call_invalid_count) == (Outcome.INCOMPLETE, 1)


def test_a_cut_inside_a_call_leaves_it_open() -> None:
    report = judge(STARTED, *call("c1", '{"q":')[:2])
    assert (report.outcome, report.open_accumulator_count) == (Outcome.TRUNCATED, 1)


def test_a_reopened_call_appends_arguments_after_its_close() -> None:
    report = judge(*run(*call("c1", "{}"), *call("c1", '{"more": 1}')))
    assert report.anomalies == {"tool_call_reopened": 1, "arguments_after_close": 1}
    assert (report.outcome, report.tool_call_count) == (Outcome.PAYLOAD_ERROR, 1)


def test_a_tool_result_does_not_reopen_its_call() -> None:
    result = {"type": "TOOL_CALL_RESULT", "messageId": "m9", "toolCallId": "c1", "content": "3"}
    report = judge(*run(*call("c1", "{}"), result))
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {})


def test_the_enforcing_reader_returns_the_runs_text_and_calls() -> None:
    body = sse(*run(*message("m1", "Hel"), *call("c1", '{"q":', ' "a"}')))
    result = read_stream([body], ROUTE)
    assert result.text == "Hel"
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("search", {"q": "a"})]
    with pytest.raises(StreamFault) as refused:
        read_stream([sse(*run(outcome={"type": "cancelled"}))], ROUTE)
    assert refused.value.code == "incomplete"


# -- chunks --------------------------------------------------------------------------------------


def text_chunk(delta: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CHUNK", **fields, **({} if delta is None else {"delta": delta})}


def tool_chunk(delta: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"type": "TOOL_CALL_CHUNK", **fields, **({} if delta is None else {"delta": delta})}


def test_chunks_open_continue_and_end_at_the_run_end() -> None:
    events = [
        text_chunk("Hel", messageId="m1"),
        text_chunk("lo"),
        tool_chunk('{"q":', toolCallId="c1", toolCallName="search"),
        tool_chunk(' "a"}'),
    ]
    report = judge(*run(*events))
    assert (report.outcome, report.tool_call_count, report.output_delta_count) == (
        Outcome.COMPLETE,
        1,
        5,  # two text pieces, the call, two argument pieces
    )


@pytest.mark.parametrize(
    "events",
    [
        [text_chunk("x")],
        [tool_chunk("{}", toolCallId="c1")],
        [tool_chunk("{}", toolCallName="search")],
        [{"type": "REASONING_MESSAGE_CHUNK", "delta": "x"}],
    ],
    ids=["text-without-id", "tool-without-name", "tool-without-id", "reasoning-without-id"],
)
def test_a_first_chunk_must_name_its_item(events: list[dict[str, Any]]) -> None:
    assert violations(judge(*run(*events))) == {"first_chunk_without_id": 1}


def test_an_event_in_the_lane_ends_its_chunk_stream() -> None:
    # The state event ends the message's chunk stream: a continuation without id has nothing
    # to continue.
    events = [
        text_chunk("a", messageId="m1"),
        {"type": "STATE_DELTA", "delta": []},
        text_chunk("b"),
    ]
    assert violations(judge(*run(*events))) == {"first_chunk_without_id": 1}
    # RAW, ACTIVITY_* and REASONING_ENCRYPTED_VALUE stand aside.
    raw = {"type": "RAW", "event": {"x": 1}}
    assert judge(*run(events[0], raw, events[2])).outcome is Outcome.COMPLETE


def test_a_chunk_naming_another_item_ends_the_previous_one() -> None:
    events = [text_chunk("a", messageId="m1"), text_chunk("b", messageId="m2"), text_chunk("c")]
    assert judge(*run(*events)).outcome is Outcome.COMPLETE


def test_a_continuation_repeats_its_openers_fields_only_with_the_same_value() -> None:
    same = [text_chunk("a", messageId="m1"), text_chunk("b", role="assistant")]
    assert judge(*run(*same)).outcome is Outcome.COMPLETE
    other = [text_chunk("a", messageId="m1"), text_chunk("b", role="user")]
    assert violations(judge(*run(*other))) == {"chunk_field_conflict": 1}
    renamed = [
        tool_chunk("{", toolCallId="c1", toolCallName="search"),
        tool_chunk("}", toolCallName="fetch"),
    ]
    assert violations(judge(*run(*renamed))) == {"chunk_field_conflict": 1}


def test_mixing_the_two_forms_in_one_item_is_rejected() -> None:
    # An explicit event naming the chunk stream's item ends the shorthand first.
    events = [text_chunk("a", messageId="m1"), {"type": "TEXT_MESSAGE_END", "messageId": "m1"}]
    assert violations(judge(*run(*events))) == {"text_message_not_open": 1}


def test_each_subagent_has_its_own_chunk_lane() -> None:
    events = [
        text_chunk("a", messageId="m1"),
        text_chunk("x", messageId="m2", subagentRunId="s1"),
        text_chunk("b"),  # the parent's own stream: it has one
        text_chunk("y", subagentRunId="s1"),
        {"type": "STEP_STARTED", "stepName": "s", "subagentRunId": "s1"},  # ends s1's lane only
        text_chunk("c"),
        {"type": "STEP_FINISHED", "stepName": "s", "subagentRunId": "s1"},
    ]
    assert judge(*run(*events)).outcome is Outcome.COMPLETE


def test_an_untagged_continuation_several_subagents_could_continue_is_ambiguous() -> None:
    events = [
        text_chunk("x", messageId="m1", subagentRunId="s1"),
        text_chunk("y", messageId="m2", subagentRunId="s2"),
        text_chunk("z"),
    ]
    assert violations(judge(*run(*events))) == {"chunk_ambiguous": 1}
    # With only one, it continues that one; by its id, it is never ambiguous.
    assert judge(*run(events[0], text_chunk("z"))).outcome is Outcome.COMPLETE
    assert judge(*run(*events[:2], text_chunk("z", messageId="m2"))).outcome is Outcome.COMPLETE


def test_reasoning_chunks_are_reasoning_messages() -> None:
    def chunk(delta: str, **fields: Any) -> dict[str, Any]:
        return {"type": "REASONING_MESSAGE_CHUNK", "delta": delta, **fields}

    events = [chunk("a", messageId="r1"), chunk("b"), chunk("c", messageId="r2"), chunk("d")]
    report = judge(*run(*events))
    assert (report.outcome, report.output_delta_count) == (Outcome.COMPLETE, 4)
    reopened = [chunk("a", messageId="r1"), {"type": "REASONING_MESSAGE_START", "messageId": "r1"}]
    assert violations(judge(*run(*reopened))).keys() == {"reasoning_message_open_at_run_finished"}


def test_an_untagged_continuation_is_in_its_openers_lane() -> None:
    """A subagent's call and reasoning continued without their tag do not end the parent's
    chunk stream: they are in the subagent's lane."""
    events = [
        text_chunk("a", messageId="m1"),
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "subagentRunId": "s"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r1", "subagentRunId": "s"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "hmm"},
        text_chunk("b"),
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "REASONING_MESSAGE_END", "messageId": "r1"},
    ]
    assert judge(*run(*events)).outcome is Outcome.COMPLETE


def test_a_subagents_end_ends_its_chunk_stream() -> None:
    events = [
        text_chunk("x", messageId="m1", subagentRunId="s1"),
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"},
        text_chunk("y", subagentRunId="s1"),
    ]
    assert violations(judge(*run(*events))) == {"first_chunk_without_id": 1}


# -- usage ---------------------------------------------------------------------------------------


def usage(**counts: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "gpt-x", **counts}


def test_usage_is_summed_over_entries_and_runs_and_absent_counts_stay_absent() -> None:
    second = {"runId": "r2"}
    report = judge(
        *run(usage=[usage(inputTokens=10, outputTokens=2), usage(inputTokens=5)]),
        {**STARTED, **second},
        {"type": "RUN_ERROR", "message": "m", "usage": [usage(inputTokens=1, outputTokens=1)]},
    )
    assert (report.input_tokens, report.output_tokens) == (16, 3)
    assert report.response_model == "gpt-x"
    only_input = judge(*run(usage=[usage(inputTokens=7)]))
    assert (only_input.input_tokens, only_input.output_tokens) == (7, None)


def test_the_model_is_named_only_where_a_runs_entries_name_one() -> None:
    report = judge(*run(usage=[usage(inputTokens=1), {**usage(inputTokens=1), "model": "other"}]))
    assert (report.input_tokens, report.response_model) == (2, None)


@pytest.mark.parametrize(
    "entries",
    [{"inputTokens": 1}, [1], [{"inputTokens": -1}], [{"inputTokens": 1.5}], [{"model": 3}]],
)
def test_malformed_usage_is_a_payload_error(entries: Any) -> None:
    assert judge(*run(usage=entries)).outcome is Outcome.PAYLOAD_ERROR


# -- hostile shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        {"type": 1},
        {"type": "TEXT_MESSAGE_START"},
        {"type": "TEXT_MESSAGE_START", "messageId": ["m1"]},
        {"type": "TEXT_MESSAGE_START", "messageId": {"a": 1}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": 5},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": 5},
        {"type": "TOOL_CALL_START", "toolCallId": "c9"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": {"q": 1}},
        {"type": "STEP_STARTED", "stepName": None},
        {"type": "SUBAGENT_STARTED", "subagentRunId": 7, "name": "x"},
        {"type": "STEP_STARTED", "stepName": "s2", "subagentRunId": ["s1"]},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": 3},
        {"type": "TOOL_CALL_RESULT", "messageId": "m9"},
        {"type": "RUN_ERROR", "message": 3},
        {"type": "REASONING_START"},
        {"type": "REASONING_END", "messageId": None},
        {"type": "REASONING_MESSAGE_START"},
        {"type": "REASONING_MESSAGE_CONTENT", "delta": "x"},
        {"type": "REASONING_MESSAGE_END"},
        {"type": "TEXT_MESSAGE_CONTENT", "delta": "x"},
        {"type": "TEXT_MESSAGE_END"},
        {"type": "TOOL_CALL_ARGS", "delta": "x"},
        {"type": "TOOL_CALL_END"},
        {"type": "STEP_FINISHED"},
        {"type": "SUBAGENT_STARTED", "name": "x"},
        {"type": "SUBAGENT_FINISHED"},
    ],
)
def test_a_malformed_known_value_is_a_payload_error_never_an_exception(
    event: dict[str, Any],
) -> None:
    body = [STARTED, message()[0], call()[0], {"type": "STEP_STARTED", "stepName": "s"}]
    report = judge(*body, event)
    assert report.outcome is Outcome.PAYLOAD_ERROR


@pytest.mark.parametrize("data", [b"[1, 2]", b"not json", b'"RUN_STARTED"', b"null", b"{"])
def test_data_that_is_not_one_json_object_is_a_payload_error(data: bytes) -> None:
    body = sse(STARTED) + b"data: " + data + b"\n\n" + sse(FINISHED)
    _, report = run_monitor([body], route=ROUTE)
    assert report.outcome is Outcome.PAYLOAD_ERROR


def test_nulls_for_absent_optional_fields_are_read_as_absent() -> None:
    # The 0.x Python SDK wrote ``null`` for every optional field it did not set.
    events = [
        {**STARTED, "parentRunId": None, "input": None},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": None, "subagentRunId": None},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x", "rawEvent": None},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1", "timestamp": None},
        {**FINISHED, "outcome": None, "usage": None, "result": None},
    ]
    report = judge(*events)
    assert (report.outcome, report.stop_reason, report.anomalies) == (
        Outcome.COMPLETE,
        "success",
        {},
    )


def test_open_items_are_bounded_by_max_parts() -> None:
    events = [STARTED, *({"type": "STEP_STARTED", "stepName": f"s{i}"} for i in range(20))]
    monitor = StreamMonitor(ROUTE, limits=Limits(max_parts=8))
    monitor.feed(sse(*events))
    report = monitor.close()
    assert (report.outcome, report.buffer_limit_stage) == (Outcome.BUFFER_LIMIT, "accumulator")


def test_closed_items_free_their_place() -> None:
    steps = [
        event
        for i in range(20)
        for event in (
            {"type": "STEP_STARTED", "stepName": f"s{i}"},
            {"type": "STEP_FINISHED", "stepName": f"s{i}"},
        )
    ]
    monitor = StreamMonitor(ROUTE, limits=Limits(max_parts=8))
    monitor.feed(sse(*run(*steps, *message(), *message())))
    assert monitor.close().outcome is Outcome.COMPLETE


# -- any shape, any order ------------------------------------------------------------------------

_KINDS = [*sorted(AGUIRoute.handlers), "FUTURE_EVENT"]
_FIELDS = [
    "threadId", "runId", "messageId", "toolCallId", "toolCallName", "parentMessageId", "stepName",
    "subagentRunId", "role", "name", "delta", "outcome", "usage", "code", "message",
]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["m1", "c1", "s1", "s", "assistant", "user", "{", "}", "", '{"a": 1}']),
    st.none(),
    st.integers(-1, 3),
    st.lists(
        st.sampled_from([{"inputTokens": 1, "model": "x"}, {"outputTokens": -1}, 1]), max_size=2
    ),
    st.sampled_from([{"type": "interrupt"}, {"type": "cancelled"}, {"type": 1}, {}, []]),
)
_EVENTS = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(_KINDS),
    st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=4),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_EVENTS, max_size=12), st.sampled_from([None, "transport", "cancelled"]))
def test_any_events_in_any_order_never_raise_and_are_judged_once(
    events: list[dict[str, Any]], error: StreamError | None
) -> None:
    """The handlers themselves never raise (the monitor's shape-error net is not needed), and a
    stream of AG-UI events is the same whether the route was named or sniffed."""
    route, state = (
        AGUIRoute(),
        StreamState(
            collect_text=True, max_tool_chars=1 << 20, max_tool_calls=64, max_text_chars=1 << 20
        ),
    )
    for event in events:
        sse_event = SSEEvent("message", json.dumps(event))
        state.event = sse_event
        route.on_event(sse_event, state)
    route.on_close(state)
    body = sse(STARTED, *events)
    _, named = run_monitor([body], route=ROUTE, error=error)
    _, sniffed = run_monitor([body], error=error)
    assert named == sniffed
