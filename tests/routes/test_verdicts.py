"""Verdicts found wrong on real traffic: each test names the kind of input, per route.

Every case is judged twice, by the observing monitor and by the enforcing reader, and the two
must agree: the reader returns a result exactly when the monitor says ``complete`` (or an
accepted ``incomplete``), and otherwise raises ``StreamFault`` with the monitor's outcome.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otelsse import Outcome, StreamFault, StreamResult, read_stream
from otelsse.routes import (
    CHUNK,
    Route,
    StreamState,
    detect_route,
    handles,
    register_host,
    unregister_host,
)
from tests._helpers import run_monitor


def _data(*payloads: Any, done: bool = False) -> bytes:
    body = b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads)
    return body + (b"data: [DONE]\n\n" if done else b"")


def _named(*events: tuple[str, Any]) -> bytes:
    return b"".join(
        b"event: " + name.encode() + b"\ndata: " + json.dumps(p).encode() + b"\n\n"
        for name, p in events
    )


def _judge(
    body: bytes, route: str | type[Route], **reader: Any
) -> tuple[Outcome, StreamResult | StreamFault]:
    """The monitor's outcome and the reader's answer, checked to agree."""
    _, report = run_monitor([body], route=route)
    try:
        answer: StreamResult | StreamFault = read_stream([body], route, **reader)
    except StreamFault as fault:
        answer = fault
    if isinstance(answer, StreamFault):
        assert answer.report is not None
        assert answer.code in (report.outcome.value, "unaccepted_stop", "tool_schema_error")
        assert answer.report.outcome is report.outcome
    else:
        assert report.outcome in (Outcome.COMPLETE, Outcome.INCOMPLETE)
    return report.outcome, answer


def _chunk(delta: dict[str, Any], finish: str | None = None, index: Any = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


# -- OpenAI chat --------------------------------------------------------------------------------


def test_mistral_typed_content_parts_are_text_and_reasoning() -> None:
    parts = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "let me see"}]},
        {"type": "text", "text": "Hi"},
    ]
    body = _data(_chunk({"content": parts}), _chunk({"content": " there"}, "stop"), done=True)
    outcome, result = _judge(body, "openai.chat_completions")
    assert outcome is Outcome.COMPLETE
    assert isinstance(result, StreamResult)
    assert (result.text, result.reasoning[0]) == ("Hi there", "let me see")


@pytest.mark.parametrize(
    "content",
    [
        7,
        {"type": "text", "text": "x"},
        [{"type": "text", "text": 7}],
        [{"type": "text"}],
        [{"type": "thinking", "thinking": 3}],
        ["bare string"],
        [None],
    ],
)
def test_content_of_any_other_shape_is_a_payload_error(content: Any) -> None:
    body = _data(_chunk({"content": content}), _chunk({}, "stop"), done=True)
    outcome, result = _judge(body, "openai.chat_completions")
    assert outcome is Outcome.PAYLOAD_ERROR
    assert isinstance(result, StreamFault)


@pytest.mark.parametrize("index", ["0", 1.5, None, True, [0], {"i": 0}])
def test_a_choice_index_that_is_not_an_integer_is_a_payload_error(index: Any) -> None:
    body = _data(_chunk({"content": "a"}, index=0), _chunk({"content": "b"}, "stop", index=index))
    outcome, _ = _judge(body + b"data: [DONE]\n\n", "openai.chat_completions")
    assert outcome is Outcome.PAYLOAD_ERROR


@pytest.mark.parametrize(
    "late",
    [
        {"content": "more"},
        {"refusal": "no"},
        {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": "{}"}}]},
    ],
)
def test_content_after_a_choice_finished_is_a_protocol_error(late: dict[str, Any]) -> None:
    body = _data(_chunk({"content": "Hi"}, "stop"), _chunk(late), done=True)
    outcome, _ = _judge(body, "openai.chat_completions")
    assert outcome is Outcome.PROTOCOL_ERROR


def test_an_empty_delta_after_the_finish_is_not_content() -> None:
    """Gateways repeat the finish chunk beside the usage, with an empty delta."""
    body = _data(_chunk({"content": "Hi"}, "stop"), _chunk({"content": ""}, "stop"), done=True)
    outcome, _ = _judge(body, "openai.chat_completions")
    assert outcome is Outcome.COMPLETE


def test_a_worse_repeated_finish_reason_wins() -> None:
    """Azure's asynchronous filter can follow ``stop`` with ``content_filter``."""
    body = _data(_chunk({"content": "Hi"}, "stop"), _chunk({}, "content_filter"), done=True)
    _, report = run_monitor([body], route="openai.chat_completions")
    assert (report.outcome, report.stop_reason) == (Outcome.INCOMPLETE, "content_filter")


@pytest.mark.parametrize(
    ("finish", "outcome"),
    [
        ("eos", Outcome.COMPLETE),  # Together's natural end
        ("error", Outcome.PROVIDER_ERROR),  # Mistral, vLLM, OpenRouter
        ("abort", Outcome.INCOMPLETE),  # vLLM
    ],
)
def test_gateway_finish_reasons(finish: str, outcome: Outcome) -> None:
    body = _data(_chunk({"content": "Hi"}, finish), done=True)
    assert _judge(body, "openai.chat_completions")[0] is outcome


def test_an_empty_finish_reason_is_no_finish_yet() -> None:
    """Old Ollama builds sent ``"finish_reason": ""`` on every chunk."""
    body = _data(_chunk({"content": "Hi"}, ""), _chunk({"content": "!"}, "stop"), done=True)
    _, report = run_monitor([body], route="openai.chat_completions")
    assert (report.outcome, report.finish_reasons) == (Outcome.COMPLETE, ("stop",))


def test_refusal_text_is_kept_apart_and_reported() -> None:
    body = _data(_chunk({"refusal": "I can't"}), _chunk({"refusal": " help."}, "stop"), done=True)
    outcome, result = _judge(body, "openai.chat_completions")
    assert outcome is Outcome.COMPLETE
    assert isinstance(result, StreamResult)
    assert (result.text, result.refusals, result.refused) == ("", {0: "I can't help."}, True)
    assert result.report.refusal is True
    _, plain = run_monitor(
        [_data(_chunk({"content": "ok"}, "stop"), done=True)], "openai.chat_completions"
    )
    assert plain.refusal is False


def test_argument_bytes_after_the_call_closed_make_it_invalid() -> None:
    """Seed 001: trailing data after a complete value; the first value is never released."""
    call = {"index": 0, "id": "t1", "function": {"name": "f", "arguments": '{"a": 1}'}}
    tail = {"index": 0, "function": {"arguments": '{"b": 2}'}}
    body = _data(_chunk({"tool_calls": [call]}, "tool_calls"), _chunk({"tool_calls": [tail]}))
    outcome, _ = _judge(body + b"data: [DONE]\n\n", "openai.chat_completions")
    assert outcome is not Outcome.COMPLETE


# -- Anthropic ----------------------------------------------------------------------------------

_MESSAGE_START = ("message_start", {"type": "message_start", "message": {"id": "m", "model": "c"}})


def _tool_stream(stop: str, *, close_block: bool) -> bytes:
    start = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    events = [
        _MESSAGE_START,
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Par'},
            },
        ),
    ]
    if close_block:
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _named(*events)


def test_max_tokens_inside_a_fine_grained_tool_block_is_incomplete() -> None:
    """Anthropic documents that the stream may end mid-parameter, without content_block_stop."""
    body = _tool_stream("max_tokens", close_block=False)
    outcome, _ = _judge(body, "anthropic.messages")
    _, report = run_monitor([body], route="anthropic.messages")
    assert (outcome, report.stop_reason) == (Outcome.INCOMPLETE, "max_tokens")
    assert report.anomalies == {"block_open_at_stop": 1}
    assert report.open_accumulator_count == 1
    # Accepting max_tokens releases no half-made call.
    with pytest.raises(StreamFault) as fault:
        read_stream([body], "anthropic.messages", accept_stop_reasons=["max_tokens"])
    assert fault.value.code == "payload_error"


def test_a_block_left_open_under_a_success_stop_stays_a_protocol_error() -> None:
    outcome, _ = _judge(_tool_stream("tool_use", close_block=False), "anthropic.messages")
    assert outcome is Outcome.PROTOCOL_ERROR


def test_anthropic_refusal_stop_is_reported() -> None:
    body = _named(
        _MESSAGE_START,
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "refusal"}}),
        ("message_stop", {"type": "message_stop"}),
    )
    _, report = run_monitor([body], route="anthropic.messages")
    assert (report.outcome, report.refusal) == (Outcome.INCOMPLETE, True)


def _server_tool_stream() -> bytes:
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    client = {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}

    def block(index: int, content: dict[str, Any], partial: str | None) -> list[tuple[str, Any]]:
        events = [
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": content},
            )
        ]
        if partial is not None:
            delta = {"type": "input_json_delta", "partial_json": partial}
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        return events

    return _named(
        _MESSAGE_START,
        *block(0, server, '{"query": "weather"}'),
        *block(1, result, None),
        *block(2, client, '{"city": "Paris"}'),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
        ("message_stop", {"type": "message_stop"}),
    )


def test_server_tool_calls_are_reported_apart_from_the_calls_to_run() -> None:
    outcome, result = _judge(_server_tool_stream(), "anthropic.messages")
    assert outcome is Outcome.COMPLETE
    assert isinstance(result, StreamResult)
    assert [(c.name, c.kind) for c in result.tool_calls] == [("get_weather", "function")]
    assert [(c.name, c.kind) for c in result.server_tool_calls] == [("web_search", "server")]
    assert result.server_tool_calls[0].arguments == {"query": "weather"}
    assert (result.report.tool_call_count, result.report.server_tool_call_count) == (1, 1)


def test_legacy_text_completions_are_not_sniffed_as_messages() -> None:
    """``ping`` proves nothing: the legacy API sends it too."""
    completion = {"type": "completion", "completion": " Hi", "stop_reason": None, "model": "c"}
    body = _named(
        ("ping", {"type": "ping"}), ("completion", completion), ("ping", {"type": "ping"})
    )
    _, report = run_monitor([body], route="auto")
    assert (report.route, report.outcome) == ("generic", Outcome.EOF_UNVERIFIED)
    assert detect_route("POST", "https://api.anthropic.com/v1/complete") == "generic"
    assert detect_route("POST", "https://api.anthropic.com/v1/messages") == "anthropic.messages"


# -- OpenAI Responses ---------------------------------------------------------------------------


def _responses(*events: dict[str, Any]) -> bytes:
    created = {"type": "response.created", "response": {"id": "r", "model": "m"}}
    completed = {"type": "response.completed", "response": {"id": "r", "model": "m"}}
    return _named(*((e["type"], e) for e in (created, *events, completed)))


def test_responses_server_calls_and_custom_tool_input() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "in_progress"}
    custom = {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_1",
        "name": "grammar",
        "input": "",
    }
    body = _responses(
        {"type": "response.output_item.added", "output_index": 0, "item": search},
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**search, "status": "completed"},
        },
        {"type": "response.output_item.added", "output_index": 1, "item": custom},
        {
            "type": "response.custom_tool_call_input.delta",
            "output_index": 1,
            "item_id": "ctc_1",
            "delta": "SELECT 1",
        },
        {
            "type": "response.custom_tool_call_input.done",
            "output_index": 1,
            "item_id": "ctc_1",
            "input": "SELECT 1",
        },
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {**custom, "input": "SELECT 1"},
        },
    )
    outcome, result = _judge(body, "openai.responses")
    assert outcome is Outcome.COMPLETE
    assert isinstance(result, StreamResult)
    assert [(c.id, c.kind, c.arguments) for c in result.tool_calls] == [
        ("call_1", "custom", "SELECT 1")
    ]
    assert [(c.name, c.kind) for c in result.server_tool_calls] == [("web_search_call", "server")]
    assert result.report.unknown_event_count == 0


def test_responses_refusal_is_kept_apart() -> None:
    body = _responses(
        {"type": "response.refusal.delta", "output_index": 0, "item_id": "m", "delta": "No."}
    )
    outcome, result = _judge(body, "openai.responses")
    assert isinstance(result, StreamResult)
    assert (outcome, result.text, result.refusals) == (Outcome.COMPLETE, "", {0: "No."})


def test_responses_error_then_failed_is_one_failure() -> None:
    failed = {"type": "response.failed", "response": {"id": "r", "error": {"code": "server_error"}}}
    body = _named(
        ("response.created", {"type": "response.created", "response": {"id": "r"}}),
        ("error", {"type": "error", "code": "server_error", "message": "boom"}),
        ("response.failed", failed),
    )
    _, report = run_monitor([body], route="openai.responses")
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert "event_after_terminal" not in report.anomalies


def test_responses_arguments_after_done_make_the_call_invalid() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": ""}
    body = _responses(
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"a": 1}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "arguments": '{"a": 1}',
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "}"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "arguments": '{"a": 1}'},
        },
    )
    outcome, _ = _judge(body, "openai.responses")
    assert outcome is Outcome.PAYLOAD_ERROR


# -- bounds -------------------------------------------------------------------------------------


def test_distinct_parts_are_bounded() -> None:
    """80k choice indices once grew state without limit; now they hit a ceiling."""
    chunks = [_chunk({"content": "x"}, "stop", index=i) for i in range(5000)]
    _, report = run_monitor([_data(*chunks, done=True)], route="openai.chat_completions")
    assert (report.outcome, report.buffer_limit_stage) == (Outcome.BUFFER_LIMIT, "accumulator")
    assert len(report.finish_reasons) <= 1024


def test_repeated_stops_do_not_grow_the_finish_reasons() -> None:
    delta = ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    body = _named(_MESSAGE_START, *[delta] * 3000, ("message_stop", {"type": "message_stop"}))
    _, report = run_monitor([body], route="anthropic.messages")
    assert len(report.finish_reasons) <= 1024


class _LeavesCallsOpen(Route):
    """A contract whose terminal can arrive while a call is still open (any route may)."""

    name = "test.leaves_calls_open"
    success_stops = frozenset({"done"})

    @handles(CHUNK)
    def _on_chunk(self, payload: dict[str, Any], state: StreamState) -> None:
        if "call" in payload:
            state.tool_args(state.open_tool("c1", "f"), payload["call"])
        if payload.get("end"):
            self.ended = True
            state.stop("done", True)
            state.terminal()


def test_a_call_still_open_at_a_success_terminal_is_a_payload_error_for_both() -> None:
    body = _data({"call": '{"a": 1'}, {"end": True})
    outcome, answer = _judge(body, _LeavesCallsOpen)
    assert outcome is Outcome.PAYLOAD_ERROR
    assert isinstance(answer, StreamFault)


# -- Gemini -------------------------------------------------------------------------------------


def _candidate(text: str | None, finish: Any = None, index: int = 0) -> dict[str, Any]:
    candidate: dict[str, Any] = {"index": index}
    if text is not None:
        candidate["content"] = {"role": "model", "parts": [{"text": text}]}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-x"}


def test_gemini_content_for_a_finished_candidate_is_a_protocol_error() -> None:
    """Candidate 0 finished while candidate 1 still streams: more text for 0 breaks the rule."""
    body = _data(_candidate("a", None, 1), _candidate("Hi", "STOP", 0), _candidate("more", None, 0))
    body += _data(_candidate("b", "STOP", 1))
    assert _judge(body, "gemini.generate_content")[0] is Outcome.PROTOCOL_ERROR


def test_gemini_events_after_every_candidate_finished_are_anomalies() -> None:
    """The last finish reason is the terminal; like events after [DONE], later ones are counted."""
    body = _data(_candidate("Hi", "STOP"), _candidate("more"), _candidate(None, "STOP"))
    _, report = run_monitor([body], route="gemini.generate_content")
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"event_after_terminal": 2}


@pytest.mark.parametrize("finish", [["STOP"], {"r": "STOP"}, 7])
def test_gemini_finish_reason_that_is_not_a_string_is_a_payload_error(finish: Any) -> None:
    body = _data(_candidate("Hi", finish))
    assert _judge(body, "gemini.generate_content")[0] is Outcome.PAYLOAD_ERROR


@pytest.mark.parametrize("late", [{"id": 7}, {"name": ["get_weather"]}], ids=["id", "name"])
def test_a_late_chat_tool_identity_of_another_type_is_a_payload_error(
    late: dict[str, object],
) -> None:
    """A name or id sent after a call's first arguments is judged as one sent with them."""
    first = {"index": 0, "function": {"arguments": '{"city": '}}
    then = {"index": 0, **({"id": late["id"]} if "id" in late else {}), "function": {
        "arguments": '"Paris"}', **({"name": late["name"]} if "name" in late else {})
    }}  # fmt: skip
    body = _data(
        {"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [then]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        done=True,
    )
    _, report = run_monitor([body], route="openai.chat_completions")
    assert report.outcome is Outcome.PAYLOAD_ERROR


# -- a whole answer without its end marker (any host), and a cut before it -------------------

_USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
#: Shapes of a finished Chat Completions answer as compatible servers end it, before [DONE]:
#: usage inside the finish chunk, usage in a chunk of its own with no choices (OpenAI's
#: include_usage), a repeated finish chunk beside the usage (OpenRouter), two choices
#: finishing apart, and a tool call finished by tool_calls.
_FINISHED_CHAT = {
    "usage-in-finish": [_chunk({"content": "Hi"}), {**_chunk({}, "stop"), "usage": _USAGE}],
    "usage-after": [
        _chunk({"content": "Hi"}),
        _chunk({}, "stop"),
        {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": _USAGE},
    ],
    "finish-repeated": [
        _chunk({"content": "Hi"}), _chunk({}, "stop"), {**_chunk({}, "stop"), "usage": _USAGE},
    ],
    "two-choices": [
        _chunk({"content": "A"}, index=0), _chunk({"content": "B"}, index=1),
        _chunk({}, "stop", index=1), _chunk({}, "length", index=0),
    ],
    "tool-call": [
        _chunk({"tool_calls": [
            {"index": 0, "id": "t", "function": {"name": "f", "arguments": '{"a": 1}'}},
        ]}),
        _chunk({}, "tool_calls"),
    ],
}  # fmt: skip
#: Hosts and paths a Chat Completions stream arrives on: OpenAI itself, an unlisted provider,
#: a router whose path names the provider behind it, a self-hosted server.
_CHAT_URLS = (
    "https://api.openai.com/v1/chat/completions",
    "https://api.unlisted-llm.example/v1/chat/completions",
    "https://router.example/api/providers/groq/v1/chat/completions",
    "http://127.0.0.1:8000/v1/chat/completions",
)


@pytest.mark.parametrize("shape", sorted(_FINISHED_CHAT))
@pytest.mark.parametrize("url", [*_CHAT_URLS, "auto"])
def test_a_finished_chat_answer_without_done_is_terminal_missing_on_any_host(
    shape: str, url: str
) -> None:
    """Every choice finished and the body ended cleanly at an event boundary: not complete (a
    cut just before ``[DONE]`` is the same bytes), not truncated (the answer is whole)."""
    route = "auto" if url == "auto" else detect_route("POST", url)
    assert route in ("auto", "openai.chat_completions")
    body = _data(*_FINISHED_CHAT[shape])
    outcome, answer = _judge(body, route)
    assert outcome is Outcome.TERMINAL_MISSING
    assert isinstance(answer, StreamFault)
    assert answer.code == "terminal_missing"
    assert answer.report is not None
    assert not answer.report.terminal_seen
    assert _judge(body + b"data: [DONE]\n\n", route)[0] in (Outcome.COMPLETE, Outcome.INCOMPLETE)


@pytest.mark.parametrize("shape", sorted(_FINISHED_CHAT))
def test_every_cut_before_the_last_finish_or_inside_an_event_stays_truncated(shape: str) -> None:
    """Before every choice has finished, or with part of an event pending, the answer is not
    whole: truncated, whatever the host."""
    body = _data(*_FINISHED_CHAT[shape])
    _, whole = run_monitor([body], route="openai.chat_completions")
    for cut in range(len(body)):
        _, report = run_monitor([body[:cut]], route="openai.chat_completions")
        if report.outcome is Outcome.TERMINAL_MISSING:
            assert report.finish_reasons == whole.finish_reasons, cut
            assert body[:cut].endswith(b"\n\n"), cut
        else:
            assert report.outcome is Outcome.TRUNCATED, cut


def test_a_host_profile_makes_the_missing_done_complete_for_its_host_only() -> None:
    body = _data(*_FINISHED_CHAT["usage-in-finish"])
    register_host("api.unlisted-llm.example", "openai.chat_completions:no_done")
    try:
        route = detect_route("POST", _CHAT_URLS[1])
        assert route == "openai.chat_completions:no_done"
        outcome, answer = _judge(body, route)
        assert outcome is Outcome.COMPLETE
        assert isinstance(answer, StreamResult)
        assert answer.text == "Hi"
        # Its own rule forgives the marker, never a cut before the finish.
        assert _judge(body[: body.index(b"\n\n") + 2], route)[0] is Outcome.TRUNCATED
    finally:
        unregister_host("api.unlisted-llm.example")
    assert _judge(body, detect_route("POST", _CHAT_URLS[1]))[0] is Outcome.TERMINAL_MISSING


def test_an_anthropic_message_delta_without_message_stop_is_terminal_missing() -> None:
    start = ("message_start", {"type": "message_start", "message": {"id": "m", "model": "c"}})
    block = ("content_block_start", {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}})  # fmt: skip
    delta = ("content_block_delta", {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "Hi"}})  # fmt: skip
    stop_block = ("content_block_stop", {"type": "content_block_stop", "index": 0})
    finish = ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
              "usage": {"output_tokens": 1}})  # fmt: skip
    whole = _named(start, block, delta, stop_block, finish)
    assert _judge(whole, "anthropic.messages")[0] is Outcome.TERMINAL_MISSING
    # A block still open at the stop: the answer is not whole.
    assert _judge(_named(start, block, delta, finish), "anthropic.messages")[0] is not (
        Outcome.TERMINAL_MISSING
    )
    assert _judge(_named(start, block, delta, stop_block), "anthropic.messages")[0] is (
        Outcome.TRUNCATED
    )


# -- empty tool arguments: a call without arguments -------------------------------------------


@pytest.mark.parametrize("arguments", ["", "  ", None])
def test_empty_arguments_are_no_arguments_on_every_route(arguments: str | None) -> None:
    """``""`` (or no argument text at all) for a tool that takes no parameters reads as ``{}``,
    as Anthropic's empty ``partial_json`` does; the tool's schema decides in the reader."""
    function: dict[str, Any] = {"name": "now"}
    if arguments is not None:
        function["arguments"] = arguments
    chat = _data(
        _chunk({"tool_calls": [{"index": 0, "id": "t", "function": function}]}),
        _chunk({}, "tool_calls"),
        done=True,
    )
    item = {"type": "function_call", "id": "fc", "call_id": "t", "name": "now"}
    done_item = {**item, "arguments": arguments or ""}
    responses = _named(
        ("response.created", {"type": "response.created", "response": {"id": "r"}}),
        ("response.output_item.added",
         {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.function_call_arguments.done", {
            "type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc",
            "arguments": arguments or "",
        }),
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": done_item}),
        ("response.completed",
         {"type": "response.completed", "response": {"id": "r", "status": "completed"}}),
    )  # fmt: skip
    for body, route in ((chat, "openai.chat_completions"), (responses, "openai.responses")):
        outcome, answer = _judge(body, route)
        assert outcome is Outcome.COMPLETE, route
        assert isinstance(answer, StreamResult)
        assert [call.arguments for call in answer.tool_calls] == [{}], route
        takes_none = {"now": {"type": "object", "properties": {}}}
        assert isinstance(_judge(body, route, tools=takes_none)[1], StreamResult)
        needs_one = {"now": {"type": "object", "required": ["zone"]}}
        refused = _judge(body, route, tools=needs_one)[1]
        assert isinstance(refused, StreamFault)
        assert refused.code == "tool_schema_error"
