"""``gemini.interactions``: recognition, sniffing, the terminal and its statuses, errors, steps and
their tool calls, usage, and payloads of the wrong shape.

The event shapes are those of google-genai 3.6.1 (``google/genai/_gaos/types/interactions/``) and
of the recordings in ``tests/fixtures/real/gemini-interactions-*.sse``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from otelsse import Outcome, StreamFault, ToolCallState, ToolGate, detect_route, read_stream
from otelsse._core.events import SSEEvent
from otelsse.routes import GeminiInteractionsRoute, Request, match_route
from tests._fixtures import read_fixture
from tests._helpers import run_monitor

ROUTE = "gemini.interactions"
ID = "v1_test_interaction"


def event(kind: str, name: str | None = None, **fields: Any) -> bytes:
    """One event as the API sends it: ``event:`` names the data's ``event_type``."""
    data = json.dumps({**fields, "event_type": kind})
    return f"event: {kind if name is None else name}\ndata: {data}\n\n".encode()


DONE = b"event: done\ndata: [DONE]\n\n"
CREATED = event("interaction.created", interaction={"id": ID, "status": "in_progress"})


def completed(status: str = "completed", **interaction: Any) -> bytes:
    return event("interaction.completed", interaction={"id": ID, "status": status, **interaction})


def start(index: int, **step: Any) -> bytes:
    return event("step.start", index=index, step=step)


def delta(index: int, **piece: Any) -> bytes:
    return event("step.delta", index=index, delta=piece)


def stop(index: int, **fields: Any) -> bytes:
    return event("step.stop", index=index, **fields)


TEXT_STEP = start(0, type="model_output") + delta(0, type="text", text="Hi") + stop(0)


def judge(*events: bytes) -> Any:
    _, report = run_monitor([b"".join(events)], route=ROUTE)
    return report


# -- recognition ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "content_type", "route"),
    [
        ("POST", "https://generativelanguage.googleapis.com/v1beta/interactions", None, ROUTE),
        ("POST", "https://generativelanguage.googleapis.com/v1/interactions", None, ROUTE),
        (
            "POST",
            "https://us-central1-aiplatform.googleapis.com/v1beta1/projects/p/locations/"
            "us-central1/interactions",
            None,
            ROUTE,
        ),
        (
            "GET",
            "https://generativelanguage.googleapis.com/v1beta/interactions/v1_abc?stream=true",
            None,
            ROUTE,
        ),
        (
            "GET",
            "https://generativelanguage.googleapis.com/v1beta/interactions/v1_abc"
            "?stream=true&last_event_id=evt_7",
            None,
            ROUTE,
        ),
        # Not streams: the interaction as JSON, its cancellation, the list.
        ("GET", "https://generativelanguage.googleapis.com/v1beta/interactions/v1_abc", None, None),
        (
            "GET",
            "https://generativelanguage.googleapis.com/v1beta/interactions/v1_abc?stream=false",
            None,
            None,
        ),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/interactions/v1_abc/cancel",
            None,
            None,
        ),
        (
            "GET",
            "https://generativelanguage.googleapis.com/v1beta/interactions?stream=true",
            None,
            None,
        ),
        # generateContent stays its own route.
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:"
            "streamGenerateContent?alt=sse",
            None,
            "gemini.generate_content",
        ),
    ],
)
def test_which_requests_are_interactions_streams(
    method: str, url: str, content_type: str | None, route: str | None
) -> None:
    assert detect_route(method, url, content_type) == route


@pytest.mark.parametrize(
    ("method", "url", "streams"),
    [
        ("POST", "https://g.example.com/v1beta/interactions", False),  # "stream": true says it
        ("GET", "https://g.example.com/v1beta/interactions/v1_abc?stream=true", True),
    ],
)
def test_only_the_get_of_a_stream_asks_for_one_by_its_url(
    method: str, url: str, streams: bool
) -> None:
    parts = urlsplit(url)
    request = Request(method, parts.hostname or "", parts.path, parts.query)
    assert match_route(request) is GeminiInteractionsRoute
    assert GeminiInteractionsRoute.always_streams(request) is streams
    assert GeminiInteractionsRoute.url_model(request) is None  # the body names it


@pytest.mark.parametrize(
    "name",
    ["interaction.created", "interaction.status_update", "step.start", "interaction.start"],
)
def test_an_event_name_of_the_contract_proves_it(name: str) -> None:
    assert GeminiInteractionsRoute.sniff_event(SSEEvent(name, "{}"))


def test_generic_names_prove_nothing_but_the_event_type_key_does() -> None:
    assert not GeminiInteractionsRoute.sniff_event(SSEEvent("content.delta", "{}"))
    assert not GeminiInteractionsRoute.sniff_event(SSEEvent("error", "{}"))
    assert GeminiInteractionsRoute.sniff_payload({"event_type": "content.delta"})
    assert GeminiInteractionsRoute.sniff_payload({"event_type": "error", "error": {}})
    assert not GeminiInteractionsRoute.sniff_payload({"type": "step.delta"})
    assert not GeminiInteractionsRoute.sniff_payload({"event_type": ["step.delta"]})


def test_a_stream_without_event_names_is_sniffed_from_its_data() -> None:
    named = CREATED + TEXT_STEP + completed() + DONE
    plain = b"".join(line + b"\n" for line in named.split(b"\n") if not line.startswith(b"event:"))
    _, report = run_monitor([plain])
    assert (report.route, report.outcome, report.anomalies) == (ROUTE, Outcome.COMPLETE, {})


# -- the terminal and its statuses ---------------------------------------------------------------


def test_a_completed_interaction_is_complete_and_its_done_marker_expected() -> None:
    report = judge(CREATED, TEXT_STEP, completed(), DONE)
    assert (report.outcome, report.stop_reason, report.terminal_seen) == (
        Outcome.COMPLETE,
        "completed",
        True,
    )
    assert report.anomalies == {}
    assert report.response_id == ID


def test_the_terminal_is_the_completed_interaction_not_the_done_marker() -> None:
    assert judge(CREATED, TEXT_STEP, completed()).outcome is Outcome.COMPLETE


def test_a_second_done_marker_or_an_event_after_the_terminal_is_an_anomaly() -> None:
    report = judge(CREATED, TEXT_STEP, completed(), DONE, DONE, stop(0))
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"event_after_terminal": 2}


def test_the_done_marker_before_the_interaction_completed_is_a_protocol_error() -> None:
    # The SDK stops reading at it: the interaction never completed.
    report = judge(CREATED, TEXT_STEP, DONE)
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies == {"done_before_completed": 1}


def test_requires_action_is_the_paused_state_a_success() -> None:
    body = read_fixture("synthetic/gemini-interactions-function-call-requires-action.sse")
    result = read_stream([body], ROUTE)
    assert result.stop_reason == "requires_action"
    assert result.report.outcome is Outcome.COMPLETE
    (call,) = result.tool_calls
    assert (call.id, call.name) == ("call_synthetic_1", "get_weather")
    assert call.arguments == {"location": "Paris", "unit": "celsius"}
    assert (result.input_tokens, result.output_tokens) == (12, 18)


@pytest.mark.parametrize(
    "status",
    [
        "incomplete",
        "budget_exceeded",
        "cancelled",
        "requires_continuation",
        "idle",
        "in_progress",
        "a_future_status",
    ],
)
def test_every_other_final_status_is_incomplete_with_that_stop(status: str) -> None:
    report = judge(CREATED, TEXT_STEP, completed(status), DONE)
    assert (report.outcome, report.stop_reason, report.terminal_seen) == (
        Outcome.INCOMPLETE,
        status,
        True,
    )
    with pytest.raises(StreamFault) as refused:
        read_stream([CREATED + TEXT_STEP + completed(status) + DONE], ROUTE)
    assert refused.value.code == "incomplete"


def test_a_failed_interaction_is_a_provider_error_with_its_first_error_code() -> None:
    errors = [{"code": "internal", "message": "m"}, {"code": "other"}]
    report = judge(CREATED, TEXT_STEP, completed("failed", errors=errors), DONE)
    assert (report.outcome, report.stop_reason, report.provider_error_code) == (
        Outcome.PROVIDER_ERROR,
        "failed",
        "internal",
    )
    assert judge(CREATED, completed("failed")).provider_error_code is None


def test_a_failed_status_update_is_a_provider_error_even_if_the_stream_is_then_cut() -> None:
    failed = event("interaction.status_update", interaction_id=ID, status="failed")
    report = judge(CREATED, TEXT_STEP, failed)
    assert (report.outcome, report.terminal_seen) == (Outcome.PROVIDER_ERROR, False)


def test_other_status_updates_change_nothing() -> None:
    updates = [
        event("interaction.status_update", interaction_id=ID, status=status)
        for status in ("in_progress", "requires_action", "completed", "cancelled")
    ]
    assert judge(CREATED, *updates, TEXT_STEP, completed()).outcome is Outcome.COMPLETE
    assert judge(CREATED, *updates, TEXT_STEP).outcome is Outcome.TRUNCATED


def test_an_error_event_is_a_provider_error_with_its_code() -> None:
    error = event("error", error={"code": "resource_exhausted", "message": "quota exceeded"})
    report = judge(CREATED, start(0, type="model_output"), error)
    assert (report.outcome, report.provider_error_code, report.stop_reason) == (
        Outcome.PROVIDER_ERROR,
        "resource_exhausted",
        None,
    )
    # The end marker may follow it; anything else after it is counted.
    assert judge(CREATED, error, DONE).anomalies == {}
    assert judge(CREATED, error, completed("failed")).anomalies == {"event_after_terminal": 1}
    assert judge(CREATED, event("error")).outcome is Outcome.PROVIDER_ERROR


def test_a_cut_before_the_completed_interaction_is_truncated() -> None:
    assert judge(CREATED, TEXT_STEP).outcome is Outcome.TRUNCATED
    _, report = run_monitor([CREATED + TEXT_STEP + completed()[:40]], route=ROUTE)
    assert report.outcome is Outcome.TRUNCATED


def test_a_step_open_at_a_success_is_a_protocol_error_and_at_another_stop_an_anomaly() -> None:
    open_step = start(0, type="model_output") + delta(0, type="text", text="Hi")
    success = judge(CREATED, open_step, completed())
    assert success.outcome is Outcome.PROTOCOL_ERROR
    assert success.anomalies == {"stop_with_open_block": 1}
    cut_off = judge(CREATED, open_step, completed("incomplete"))
    assert (cut_off.outcome, cut_off.anomalies) == (
        Outcome.INCOMPLETE,
        {"block_open_at_stop": 1},
    )


# -- steps and tool calls ------------------------------------------------------------------------


def test_a_step_started_twice_is_a_protocol_error() -> None:
    report = judge(CREATED, start(0, type="model_output"), start(0, type="thought"))
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies == {"step_reopened": 1}


def test_argument_fragments_without_their_call_are_a_protocol_error() -> None:
    report = judge(
        CREATED,
        start(0, type="model_output"),
        delta(0, type="arguments_delta", arguments="{}"),
        stop(0),
        completed(),
    )
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies == {"arguments_without_call": 1}


def test_a_stream_resumed_inside_a_step_is_read() -> None:
    """``GET ...?stream=true&last_event_id=...`` resumes after an event: its first step may have
    started on the first connection."""
    report = judge(delta(3, type="text", text=" more"), stop(3), TEXT_STEP, completed(), DONE)
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {})
    report = judge(stop(3), completed(), DONE)
    assert (report.outcome, report.anomalies) == (
        Outcome.COMPLETE,
        {"step_stop_without_start": 1},
    )


def _call_stream(*steps: bytes, status: str = "requires_action") -> bytes:
    return b"".join((CREATED, *steps, completed(status), DONE))


def test_arguments_sent_whole_in_the_step_are_the_calls() -> None:
    step = start(0, type="function_call", id="c1", name="f", arguments={"x": 1})
    result = read_stream([_call_stream(step, stop(0))], ROUTE)
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "f", {"x": 1})


def test_a_call_without_arguments_has_none() -> None:
    result = read_stream(
        [_call_stream(start(0, type="function_call", id="c1", name="f"), stop(0))], ROUTE
    )
    assert result.tool_calls[0].arguments == {}


def test_the_fragments_of_google_genai_2_0_are_read_too() -> None:
    """google-genai 2.0.0 named the fragment ``partial_arguments`` (``step_delta.py``)."""
    body = _call_stream(
        start(0, type="function_call", id="c1", name="f", arguments={}),
        delta(0, type="arguments_delta", partial_arguments='{"x": '),
        delta(0, type="arguments_delta", partial_arguments="1}"),
        stop(0),
    )
    assert read_stream([body], ROUTE).tool_calls[0].arguments == {"x": 1}


def test_arguments_that_are_not_one_json_value_under_a_success_are_a_payload_error() -> None:
    body = _call_stream(
        start(0, type="function_call", id="c1", name="f"),
        delta(0, type="arguments_delta", arguments='{"x": 1'),
        stop(0),
    )
    _, report = run_monitor([body], route=ROUTE)
    assert (report.outcome, report.tool_call_count, report.tool_call_invalid_count) == (
        Outcome.PAYLOAD_ERROR,
        1,
        1,
    )


def test_a_call_cut_before_its_step_stop_is_truncated() -> None:
    body = read_fixture("synthetic/gemini-interactions-function-call-truncated.sse")
    _, report = run_monitor([body], route=ROUTE)
    assert (report.outcome, report.tool_call_count) == (Outcome.TRUNCATED, 1)


def test_the_legacy_events_send_a_call_whole_in_one_delta() -> None:
    """Before google-genai 2.0.0: ``content.*`` events, a ``function_call`` delta with the call's
    ``id``, ``name`` and ``arguments`` object (1.75.0 ``content_delta.py``)."""
    body = b"".join(
        (
            event("interaction.start", interaction={"id": ID, "status": "in_progress"}),
            event("content.start", index=0, content={"type": "function_call"}),
            event(
                "content.delta",
                index=0,
                delta={"type": "function_call", "id": "c1", "name": "f", "arguments": {"x": 1}},
            ),
            event("content.stop", index=0),
            event("interaction.complete", interaction={"id": ID, "status": "requires_action"}),
            DONE,
        )
    )
    result = read_stream([body], ROUTE)
    assert result.report.outcome is Outcome.COMPLETE
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "f", {"x": 1})


def test_a_call_the_provider_runs_is_never_the_applications() -> None:
    search = {"queries": ["otelsse"]}
    body = _call_stream(
        start(0, type="google_search_call", id="s1"),
        delta(0, type="google_search_call", arguments=search),
        stop(0),
        start(
            1,
            type="mcp_server_tool_call",
            id="m1",
            name="lookup",
            server_name="srv",
            arguments={"q": 1},
        ),
        stop(1),
        TEXT_STEP.replace(b'"index": 0', b'"index": 2'),
        status="completed",
    )
    result = read_stream([body], ROUTE)
    assert result.tool_calls == ()
    servers = {call.name: call.arguments for call in result.server_tool_calls}
    assert servers == {"google_search_call": search, "lookup": {"q": 1}}
    assert result.text == "Hi"


def test_text_and_thought_summaries_are_the_answer_and_its_reasoning() -> None:
    result = read_stream([read_fixture("real/gemini-interactions-thinking.sse")], ROUTE)
    assert result.text.startswith("The sky is blue because")
    assert result.reasoning[0].startswith("**Clarifying the Explanation**")
    # two thought summaries and two texts; a thought signature is no output
    assert result.report.output_delta_count == 4


class Chunks:
    """One event a read, counting the reads handed out."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.sent = 0

    def __iter__(self) -> Chunks:
        return self

    def __next__(self) -> bytes:
        if self.sent == len(self._chunks):
            raise StopIteration
        self.sent += 1
        return self._chunks[self.sent - 1]


def test_the_tool_gate_can_run_a_call_at_its_step_stop() -> None:
    """A call's ``step.stop`` proves its arguments whole (``proves_item_end``): with
    ``run_at="item"`` the gate runs it there, before the interaction completes."""
    events = [
        CREATED,
        start(0, type="function_call", id="c1", name="get_weather"),
        delta(0, type="arguments_delta", arguments='{"city": '),
        delta(0, type="arguments_delta", arguments='"Paris"}'),
        stop(0),
        completed("requires_action"),
        DONE,
    ]
    source = Chunks(events)
    ran: list[tuple[Any, int]] = []
    result = ToolGate(run_at="item").run(
        source,
        ROUTE,
        execute={"get_weather": lambda arguments: ran.append((arguments, source.sent))},
    )
    assert [call.state for call in result.calls] == [ToolCallState.EXECUTED]
    assert ran == [({"city": "Paris"}, events.index(stop(0)) + 1)]


# -- usage and identity --------------------------------------------------------------------------


def test_usage_is_the_latest_cumulative_snapshot() -> None:
    body = read_fixture("real/gemini-interactions-thinking.sse")
    cut = body[: body.index(b"event: step.stop")]  # before the thought step ends
    _, truncated = run_monitor([cut], route=ROUTE)
    assert (truncated.outcome, truncated.input_tokens, truncated.output_tokens) == (
        Outcome.TRUNCATED,
        11,
        37,  # the metadata.usage of the last delta read
    )
    _, whole = run_monitor([body], route=ROUTE)
    assert (whole.input_tokens, whole.output_tokens) == (11, 42)
    assert (whole.response_model, whole.response_id) == (
        "gemini-2.5-flash",
        "v1_Chc0UWdqYXJtSkt2T21qdU1QNF8zRzJBcxIXNFFnamFybUpLdk9tanVNUDRfM0cyQXM",
    )


def test_usage_on_status_updates_step_stops_and_total_usage_metadata() -> None:
    def usage(output: int) -> dict[str, int]:
        return {"total_input_tokens": 5, "total_output_tokens": output}

    status = event(
        "interaction.status_update", interaction_id=ID, status="in_progress", usage=usage(1)
    )
    assert judge(CREATED, status).output_tokens == 1
    assert judge(CREATED, start(0, type="model_output"), stop(0, usage=usage(2))).output_tokens == 2
    text = event(
        "step.delta",
        index=0,
        delta={"type": "text", "text": "a"},
        metadata={"total_usage": usage(3)},
    )
    assert judge(CREATED, start(0, type="model_output"), text).output_tokens == 3


def test_a_resumed_stream_names_its_interaction_in_its_first_status_update() -> None:
    status = event("interaction.status_update", interaction_id=ID, status="in_progress")
    assert judge(status).response_id == ID


def test_the_event_name_is_only_a_hint() -> None:
    report = judge(
        CREATED,
        event("step.start", "step.begin", index=0, step={"type": "text"}),
        stop(0),
        completed(),
    )
    assert (report.outcome, report.anomalies) == (Outcome.COMPLETE, {"event_name_mismatch": 1})


def test_an_unknown_event_type_is_counted_and_ignored() -> None:
    report = judge(CREATED, event("interaction.new_thing"), TEXT_STEP, completed())
    assert (report.outcome, report.unknown_event_count) == (Outcome.COMPLETE, 1)


# -- payloads of the wrong shape -----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        "[1, 2]",
        '{"no_event_type": 1}',
        '{"event_type": 5}',
        '{"event_type": "interaction.created", "interaction": "v1"}',
        '{"event_type": "interaction.status_update", "status": 1}',
        '{"event_type": "interaction.completed"}',
        '{"event_type": "interaction.completed", "interaction": {"status": 7}}',
        '{"event_type": "interaction.completed", "interaction": {"status": ""}}',
        '{"event_type": "step.start", "index": "0", "step": {"type": "text"}}',
        '{"event_type": "step.start", "index": [0], "step": {"type": "text"}}',
        '{"event_type": "step.start", "index": true, "step": {"type": "text"}}',
        '{"event_type": "step.start", "index": 0, "step": ["text"]}',
        '{"event_type": "step.start", "index": 0, "step": {"type": "function_call", "arguments":'
        ' "{}"}}',
        '{"event_type": "step.delta", "index": 0, "delta": "text"}',
        '{"event_type": "step.delta", "index": {}, "delta": {"type": "text", "text": "a"}}',
        '{"event_type": "step.delta", "index": 0, "delta": {"type": "text", "text": 1}}',
        '{"event_type": "step.delta", "index": 0, "delta": {"type": "function_call",'
        ' "arguments": [1]}}',
        '{"event_type": "step.stop", "index": null}',
        '{"event_type": "step.stop", "index": [0]}',
    ],
)
def test_a_payload_of_the_wrong_shape_is_a_payload_error_never_an_exception(data: str) -> None:
    # (Ended short of a success: a step the bad event opened is then no protocol error.)
    hostile = f"event: x\ndata: {data}\n\n".encode()
    report = judge(
        CREATED, hostile, TEXT_STEP.replace(b'"index": 0', b'"index": 9'), completed("incomplete")
    )
    assert report.outcome is Outcome.PAYLOAD_ERROR, data


@pytest.mark.parametrize(
    "data",
    [
        '{"event_type": "error", "error": "boom"}',
        '{"event_type": "error", "error": {"code": ["a"]}}',
    ],
)
def test_an_error_of_the_wrong_shape_is_still_a_provider_error(data: str) -> None:
    report = judge(CREATED, f"data: {data}\n\n".encode())
    assert (report.outcome, report.provider_error_code) == (Outcome.PROVIDER_ERROR, None)


@pytest.mark.parametrize(
    "fields",
    [
        {"metadata": "usage"},
        {"metadata": {"total_usage": [1]}},
        {"metadata": {"total_usage": {"total_input_tokens": "5"}}},
    ],
)
def test_usage_of_the_wrong_shape_is_ignored(fields: dict[str, Any]) -> None:
    text = event("step.delta", index=0, delta={"type": "text", "text": "a"}, **fields)
    report = judge(CREATED, start(0, type="model_output"), text, stop(0), completed())
    assert (report.outcome, report.input_tokens) == (Outcome.COMPLETE, None)
