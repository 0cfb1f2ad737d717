"""``bedrock.converse_stream`` and ``bedrock.invoke_model_with_response_stream`` through the
monitor: the recorded bodies, then one test per rule of the routes' docstrings
(``otelsse/routes/bedrock_converse.py``, ``bedrock_invoke.py``, ``_bedrock.py``) and of
``docs/users/bedrock.md``, on frames built by the format's definition (``tests/_eventstream.py``).

Every case is judged by ``judge``: one read, one frame per read and a few bytes per read (one
for the recordings) must give the same report (``chunk_count`` aside), and the enforcing
reader must agree with the monitor (it returns a result exactly for a ``complete`` or
``incomplete`` stream, and otherwise raises the monitor's outcome), which stops the framer at
the route's last event. ``tests/fuzz/test_eventstream_fuzz.py`` reads bodies one byte per read.
"""

from __future__ import annotations

import base64
import itertools
import pickle
import struct
from collections.abc import Sequence
from typing import Any

import pytest

from otelsse import (
    Limits,
    Outcome,
    StreamFault,
    StreamMonitor,
    StreamReport,
    detect_route,
    read_stream,
)
from otelsse._telemetry import span_attributes
from otelsse.routes import (
    BedrockConverseRoute,
    BedrockInvokeRoute,
    Request,
    get_route,
    match_route,
)
from tests._eventstream import chunk, error_frame, event, exception, frame_ends, frames
from tests._fixtures import BEDROCK_EXPECTED, FIXTURES, bedrock_fixture_names, read_fixture
from tests._helpers import comparable, run_monitor

CONVERSE = "bedrock.converse_stream"
INVOKE = "bedrock.invoke_model_with_response_stream"
HOST = "bedrock-runtime.us-east-1.amazonaws.com"

# The exception members of each operation's event-stream union (botocore's service model
# ``bedrock-runtime/2023-09-30``: ``ConverseStreamOutput`` and ``ResponseStream``).
CONVERSE_EXCEPTIONS = (
    "internalServerException",
    "modelStreamErrorException",
    "validationException",
    "throttlingException",
    "serviceUnavailableException",
)
INVOKE_EXCEPTIONS = (*CONVERSE_EXCEPTIONS, "modelTimeoutException")
# ConverseStream's ``StopReason`` enum.
SUCCESS_STOPS = ("end_turn", "tool_use", "stop_sequence")
OTHER_STOPS = (
    "max_tokens",
    "guardrail_intervened",
    "content_filtered",
    "model_context_window_exceeded",
    "malformed_model_output",
    "malformed_tool_use",
)

# What each recording holds besides its outcome (tests/fixtures/real/SOURCES.md): client tool
# calls, and the usage its route reads (ConverseStream's ``metadata.usage``; Claude's
# ``message_start`` and ``message_delta`` usage; Nova's ``metadata.usage``; Llama's and
# Titan's ``amazon-bedrock-invocationMetrics``).
FIXTURE_FACTS: dict[str, tuple[int, int | None, int | None]] = {
    "real/bedrock-converse-stream-guardrail-intervened.eventstream": (0, 17, 16),
    "real/bedrock-converse-stream-reasoning-redacted.eventstream": (0, 92, 253),
    "real/bedrock-converse-stream-reasoning.eventstream": (0, 36, 73),
    "real/bedrock-converse-stream-text.eventstream": (0, 13, 35),
    "real/bedrock-converse-stream-tool-use.eventstream": (1, 236, 58),
    "real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream": (2, 392, 134),
    "real/bedrock-invoke-stream-llama-length.eventstream": (0, 23, 120),
    "real/bedrock-invoke-stream-nova-max-tokens.eventstream": (0, 5, 10),
    "real/bedrock-invoke-stream-titan-length.eventstream": (0, 13, 100),
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def judge(
    frames_: Sequence[bytes] | bytes, route: str, *, read_size: int = 5, **limits: Any
) -> StreamReport:
    """The report of the body, checked to be the same for one read, one frame per read (the
    monitor's one-event path) and ``read_size`` bytes per read (every frame in pieces; one byte
    per read for the recordings here, for every body in the fuzz tests), and checked against
    the enforcing reader."""
    body = frames_ if isinstance(frames_, bytes) else b"".join(frames_)
    monitor_limits = Limits(**limits) if limits else None
    reports = []
    for chunks in (
        [body],
        list(frames(body)) or [body],
        [body[i : i + read_size] for i in range(0, len(body), read_size)],
    ):
        monitor = StreamMonitor(route, limits=monitor_limits)
        for piece in chunks:
            monitor.feed(piece)
        reports.append(monitor.close())
    first = comparable(reports[0])
    for other in reports[1:]:
        assert comparable(other) == first
    report = reports[0]
    try:
        answer: Any = read_stream([body], route, limits=monitor_limits)
    except StreamFault as fault:
        answer = fault
    if isinstance(answer, StreamFault):
        assert answer.report is not None
        assert answer.code in (report.outcome.value, "unaccepted_stop")
        assert answer.report.outcome is report.outcome
    else:
        assert report.outcome in (Outcome.COMPLETE, Outcome.INCOMPLETE)
        assert answer.report.outcome is report.outcome
    return report


def verdict(report: StreamReport) -> tuple[str, str | None]:
    return report.outcome.value, report.stop_reason


# ConverseStream events (the API reference's shapes, as the recordings carry them).


def message_start() -> bytes:
    return event("messageStart", {"role": "assistant"})


def text(index: int, piece: str) -> bytes:
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}})


def reasoning(index: int, **delta: str) -> bytes:
    body = {"contentBlockIndex": index, "delta": {"reasoningContent": delta}}
    return event("contentBlockDelta", body)


def tool_start(index: int, call_id: str = "tooluse_1", name: str = "get_weather") -> bytes:
    start = {"toolUse": {"toolUseId": call_id, "name": name}}
    return event("contentBlockStart", {"contentBlockIndex": index, "start": start})


def tool_input(index: int, fragment: str) -> bytes:
    delta = {"toolUse": {"input": fragment}}
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})


def block_stop(index: int) -> bytes:
    return event("contentBlockStop", {"contentBlockIndex": index})


def message_stop(reason: str = "end_turn") -> bytes:
    return event("messageStop", {"stopReason": reason})


def metadata(input_tokens: int = 11, output_tokens: int = 7) -> bytes:
    usage = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens,
    }
    return event("metadata", {"usage": usage, "metrics": {"latencyMs": 321}})


def text_answer(reason: str = "end_turn") -> list[bytes]:
    return [
        message_start(),
        text(0, "Hel"),
        text(0, "lo ✓"),
        block_stop(0),
        message_stop(reason),
        metadata(),
    ]


def tool_answer(*fragments: str, reason: str = "tool_use") -> list[bytes]:
    return [
        message_start(),
        text(0, "Let me look."),
        block_stop(0),
        tool_start(1),
        *(tool_input(1, fragment) for fragment in fragments),
        block_stop(1),
        message_stop(reason),
        metadata(),
    ]


# InvokeModelWithResponseStream: each model family's own events, in chunks.

INVOCATION_METRICS = {
    "inputTokenCount": 12,
    "outputTokenCount": 5,
    "invocationLatency": 100,
    "firstByteLatency": 20,
}


def claude_events(reason: str = "end_turn", *fragments: str) -> list[dict[str, Any]]:
    """Claude's Messages events as Bedrock sends them: a text block, a tool block when
    ``fragments`` are given, and the invocation metrics on ``message_stop``."""
    found: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_bdrk_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-3-5-sonnet-20240620",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 12, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
    ]
    if fragments:
        block = {"type": "tool_use", "id": "toolu_bdrk_01", "name": "get_weather", "input": {}}
        found.append({"type": "content_block_start", "index": 1, "content_block": block})
        for fragment in fragments:
            delta = {"type": "input_json_delta", "partial_json": fragment}
            found.append({"type": "content_block_delta", "index": 1, "delta": delta})
        found.append({"type": "content_block_stop", "index": 1})
    found.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
    )
    found.append({"type": "message_stop", "amazon-bedrock-invocationMetrics": INVOCATION_METRICS})
    return found


def nova_events(reason: str = "end_turn", deltas: Sequence[str] = ("It", " is")) -> list[dict]:
    """Nova's events as Nova Micro sends them: each text delta its own block."""
    found: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    for index, piece in enumerate(deltas):
        delta = {"delta": {"text": piece}, "contentBlockIndex": index}
        found.append({"contentBlockDelta": delta})
        found.append({"contentBlockStop": {"contentBlockIndex": index}})
    found.append({"messageStop": {"stopReason": reason}})
    usage = {"usage": {"inputTokens": 5, "outputTokens": 10}, "metrics": {}, "trace": {}}
    found.append({"metadata": usage, "amazon-bedrock-invocationMetrics": INVOCATION_METRICS})
    return found


def llama_events(reason: Any = "stop") -> list[dict[str, Any]]:
    return [
        {"generation": "Here", "prompt_token_count": 23, "generation_token_count": 1},
        {"generation": " it", "prompt_token_count": None, "generation_token_count": 2},
        {
            "generation": " is",
            "prompt_token_count": None,
            "generation_token_count": 3,
            "stop_reason": reason,
            "amazon-bedrock-invocationMetrics": INVOCATION_METRICS,
        },
    ]


def titan_events(reason: Any = "FINISH") -> list[dict[str, Any]]:
    return [
        {"outputText": "Once", "index": 0, "totalOutputTextTokenCount": None},
        {
            "outputText": " upon a time",
            "index": 0,
            "totalOutputTextTokenCount": 5,
            "completionReason": reason,
            "inputTextTokenCount": 12,
            "amazon-bedrock-invocationMetrics": INVOCATION_METRICS,
        },
    ]


def chunks(events: Sequence[dict[str, Any]]) -> list[bytes]:
    """Every model event in its own ``chunk`` frame, first in its null ``stop`` fields."""
    found = []
    for one in events:
        if "generation" in one:
            one = {"stop_reason": None, **one}
        if "outputText" in one:
            one = {"completionReason": None, **one}
        found.append(chunk(one))
    return found


def raw_chunk(data: bytes) -> bytes:
    """A ``chunk`` whose ``bytes`` hold exactly ``data``."""
    return event("chunk", {"bytes": base64.b64encode(data).decode(), "p": "abcdef"})


# --------------------------------------------------------------------------------------------
# The recorded bodies
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", bedrock_fixture_names())
def test_a_recorded_body_classifies_as_expected(name: str) -> None:
    expected = BEDROCK_EXPECTED[name]
    body = read_fixture(name)
    report = judge(body, expected.route, read_size=1)
    assert (report.route, report.outcome.value, report.stop_reason) == expected
    tools, input_tokens, output_tokens = FIXTURE_FACTS[name]
    assert (report.tool_call_count, report.tool_call_invalid_count) == (tools, 0)
    assert (report.input_tokens, report.output_tokens) == (input_tokens, output_tokens)
    assert report.event_count == len(frame_ends(body))
    assert report.provider_name == "aws.bedrock"
    assert report.terminal_seen
    assert (report.decode_error_count, report.unknown_event_count) == (0, 0)
    assert report.anomalies == {}
    assert not report.discarded_event


def test_every_recorded_body_is_in_the_table() -> None:
    recorded = {f"real/{path.name}" for path in (FIXTURES / "real").glob("*.eventstream")}
    assert recorded == set(BEDROCK_EXPECTED)


def test_the_recorded_claude_stream_names_its_model_and_response() -> None:
    report = judge(
        read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream"), INVOKE
    )
    assert report.response_model == "claude-3-5-sonnet-20240620"
    assert str(report.response_id).startswith("msg_bdrk_")


def _inner_cuts(body: bytes) -> list[int]:
    """Cuts inside each frame where its reading changes: one byte in, either side of the end of
    its prelude and of its header block, in its payload, and either side of its message CRC
    (every byte is cut in ``tests/core/test_eventstream.py``: a cut frame never reaches a
    route, wherever it is cut)."""
    cuts, start = set(), 0
    for end in frame_ends(body):
        (headers,) = struct.unpack_from(">I", body, start + 4)
        payload = start + 12 + headers
        cuts.update((start + 1, start + 11, start + 12, payload - 1, payload))
        cuts.update(((payload + end - 4) // 2, end - 5, end - 4, end - 1))
        start = end
    return sorted(cuts)


def _cut_verdicts(name: str, inside: bool) -> None:
    """Cut the recording at every frame boundary (and inside every frame with ``inside``):
    before its terminal frame never ``complete``, and ``truncated`` unless the answer had all
    its stops (``terminal_missing``); a cut inside a frame is always ``truncated``."""
    expected = BEDROCK_EXPECTED[name]
    body = read_fixture(name)
    ends = [0, *frame_ends(body)]
    whole = run_monitor([body], expected.route)[1]
    monitor = StreamMonitor(expected.route)
    snapshots = [pickle.dumps(monitor)]
    terminal_at = None
    for start, end in itertools.pairwise(ends):
        monitor.feed(body[start:end])
        snapshots.append(pickle.dumps(monitor))
        if terminal_at is None and monitor.terminal_seen:
            terminal_at = end
    assert terminal_at == len(body), "the terminal is the last frame"
    cuts = sorted({*ends, *_inner_cuts(body)}) if inside else ends
    index = 0
    for cut in cuts:
        while index + 1 < len(ends) and ends[index + 1] <= cut:
            index += 1
        resumed: StreamMonitor = pickle.loads(snapshots[index])
        resumed.feed(body[ends[index] : cut])
        report = resumed.close()
        outcome = report.outcome.value
        if cut == len(body):
            assert verdict(report) == expected[1:]
        elif cut != ends[index]:
            assert outcome == "truncated", cut
            assert report.discarded_event, cut
            assert report.pending_event_chars == cut - ends[index], cut
        elif outcome == "terminal_missing":
            assert report.finish_reasons == whole.finish_reasons, cut
        else:
            assert outcome == "truncated", cut


@pytest.mark.parametrize("name", bedrock_fixture_names())
def test_a_recording_cut_at_a_frame_boundary_before_its_terminal_is_not_complete(
    name: str,
) -> None:
    _cut_verdicts(name, inside=False)


@pytest.mark.matrix  # inside every frame of every recording
@pytest.mark.parametrize("name", bedrock_fixture_names())
def test_a_recording_cut_inside_any_frame_before_its_terminal_is_not_complete(name: str) -> None:
    _cut_verdicts(name, inside=True)


def test_the_recorded_converse_stream_cut_after_message_stop_is_terminal_missing() -> None:
    body = read_fixture("real/bedrock-converse-stream-text.eventstream")
    report = run_monitor([body[: frame_ends(body)[-2]]], CONVERSE)[1]
    assert verdict(report) == ("terminal_missing", "end_turn")


# --------------------------------------------------------------------------------------------
# ConverseStream
# --------------------------------------------------------------------------------------------


def test_a_whole_text_answer_is_complete() -> None:
    report = judge(text_answer(), CONVERSE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.route == CONVERSE
    assert report.terminal_seen
    assert (report.input_tokens, report.output_tokens) == (11, 7)
    assert report.output_delta_count == 2
    assert (report.provider_name, report.operation_name) == ("aws.bedrock", "chat")
    assert report.event_count == 6
    assert report.anomalies == {}


def test_a_tool_call_in_fragments_is_complete() -> None:
    report = judge(tool_answer("", '{"loca', 'tion": "Par', 'is"}'), CONVERSE)
    assert verdict(report) == ("complete", "tool_use")
    assert (report.tool_call_count, report.tool_call_invalid_count) == (1, 0)
    assert report.open_accumulator_count == 0


def test_a_tool_the_provider_ran_itself_is_a_server_call() -> None:
    # Nova's code interpreter: a ``toolUse`` block with ``type: "server_tool_use"``, its result
    # in a ``toolResult`` block Bedrock sends, then the client's own tool (the events of
    # pydantic/pydantic-ai tests/models/cassettes/test_bedrock/
    # test_bedrock_model_code_execution_tool_stream.yaml, padding aside; SOURCES.md lists it).
    # The client must not run it: it is no client call (StreamReport.server_tool_call_count).
    server = {
        "name": "nova_code_interpreter",
        "toolUseId": "tooluse_3io",
        "type": "server_tool_use",
    }
    result = {
        "status": "success",
        "toolUseId": "tooluse_3io",
        "type": "nova_code_interpreter_result",
    }
    client = {"name": "final_result", "toolUseId": "tooluse_7hz", "type": "tool_use"}
    output = [{"json": {"stdOut": "7006652", "stdErr": "", "exitCode": 0, "isError": False}}]
    body = [
        message_start(),
        event("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": server}}),
        tool_input(0, '{"snippet":"1234 * 5678"}'),
        block_stop(0),
        event("contentBlockStart", {"contentBlockIndex": 1, "start": {"toolResult": result}}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolResult": output}}),
        block_stop(1),
        event("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": client}}),
        tool_input(2, '{"result":7006652.0}'),
        block_stop(2),
        message_stop("tool_use"),
        metadata(1002, 59),
    ]
    report = judge(body, CONVERSE)
    assert verdict(report) == ("complete", "tool_use")
    assert (report.tool_call_count, report.server_tool_call_count) == (1, 1)


def test_a_tool_call_without_input_fragments_has_empty_arguments() -> None:
    report = judge(tool_answer(), CONVERSE)
    assert verdict(report) == ("complete", "tool_use")
    assert report.tool_call_invalid_count == 0


@pytest.mark.parametrize(
    "fragments",
    [('{"location": ',), ('{"a": 1}', "{}"), ('{"a": 1} x',), ("not json",)],
    ids=["cut", "two values", "trailing data", "not json"],
)
def test_invalid_tool_arguments_under_a_success_stop_are_a_payload_error(
    fragments: tuple[str, ...],
) -> None:
    report = judge(tool_answer(*fragments), CONVERSE)
    assert verdict(report) == ("payload_error", "tool_use")
    assert (report.tool_call_count, report.tool_call_invalid_count) == (1, 1)


def test_cut_tool_arguments_under_max_tokens_are_incomplete() -> None:
    report = judge(tool_answer('{"location": ', reason="max_tokens"), CONVERSE)
    assert verdict(report) == ("incomplete", "max_tokens")


def test_reasoning_deltas_are_output_and_the_answer_is_complete() -> None:
    body = [
        message_start(),
        reasoning(0, text="Let me "),
        reasoning(0, text="think."),
        reasoning(0, signature="c2lnbmF0dXJl"),
        block_stop(0),
        reasoning(1, redactedContent="cmVkYWN0ZWQ="),
        block_stop(1),
        text(2, "Answer."),
        block_stop(2),
        message_stop(),
        metadata(),
    ]
    report = judge(body, CONVERSE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.output_delta_count == 3  # the reasoning texts and the text
    assert report.anomalies == {}


@pytest.mark.parametrize("reason", SUCCESS_STOPS)
def test_a_success_stop_is_complete(reason: str) -> None:
    assert verdict(judge(text_answer(reason), CONVERSE)) == ("complete", reason)


@pytest.mark.parametrize("reason", [*OTHER_STOPS, "a_stop_added_later"])
def test_every_other_stop_is_incomplete(reason: str) -> None:
    assert verdict(judge(text_answer(reason), CONVERSE)) == ("incomplete", reason)


def test_a_cut_at_every_frame_boundary_of_a_complete_answer() -> None:
    answer = text_answer()
    stop_at = answer.index(message_stop())
    for count in range(len(answer) + 1):
        report = judge(answer[:count], CONVERSE)
        if count <= stop_at:
            expected = "truncated"  # before messageStop, whatever came before
        elif count < len(answer):
            expected = "terminal_missing"  # the answer whole, metadata missing
        else:
            expected = "complete"
        assert report.outcome.value == expected, count
        assert not report.discarded_event


def test_a_cut_inside_any_frame_is_truncated() -> None:
    body = b"".join(text_answer())
    ends = frame_ends(body)
    for end in ends:
        for cut in (end - 1, end - 4, end - 13):
            report = run_monitor([body[:cut]], CONVERSE)[1]
            assert report.outcome is Outcome.TRUNCATED, cut
            assert report.discarded_event, cut


@pytest.mark.parametrize(
    "body",
    [
        [message_start(), text(0, "Hi"), block_stop(0), metadata()],
        [metadata()],
        [message_start(), metadata(), text(0, "Hi"), block_stop(0)],
    ],
    ids=["without messageStop", "alone", "first"],
)
def test_metadata_alone_never_completes(body: list[bytes]) -> None:
    report = judge(body, CONVERSE)
    assert report.outcome is Outcome.TRUNCATED
    assert not report.terminal_seen
    assert report.anomalies == {"metadata_before_message_stop": 1}


def test_metadata_before_message_stop_does_not_end_the_stream() -> None:
    body = [message_start(), metadata(), text(0, "Hi"), block_stop(0), message_stop()]
    report = judge(body, CONVERSE)
    assert verdict(report) == ("terminal_missing", "end_turn")
    report = judge([*body, metadata()], CONVERSE)
    assert verdict(report) == ("complete", "end_turn")


def test_events_after_the_terminal_are_an_anomaly() -> None:
    report = judge([*text_answer(), text(0, "more"), metadata()], CONVERSE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.anomalies == {"event_after_terminal": 2}


def test_an_unknown_event_is_counted_and_ignored() -> None:
    answer = text_answer()
    body = [*answer[:2], event("citationsDelta", {"x": 1}), *answer[2:]]
    report = judge(body, CONVERSE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.unknown_event_count == 1


@pytest.mark.parametrize(
    ("body", "anomaly"),
    [
        (
            [message_start(), tool_input(1, "{}"), block_stop(1), message_stop(), metadata()],
            "input_delta_outside_tool_block",
        ),
        (
            [message_start(), text(0, "x"), block_stop(0), block_stop(1), message_stop()],
            "block_stop_without_start",
        ),
        (
            [message_start(), tool_start(0), tool_start(0), block_stop(0), message_stop()],
            "block_reopened",
        ),
        (
            [message_start(), text(0, "x"), message_stop("end_turn"), metadata()],
            "stop_with_open_block",
        ),
        (
            [*text_answer()[:-1], text(1, "late"), block_stop(1), metadata()],
            "block_after_message_stop",
        ),
    ],
    ids=["delta for a tool block never started", "stop without start", "reopened",
         "success stop with a block open", "block after messageStop"],
)  # fmt: skip
def test_an_event_order_the_contract_forbids_is_a_protocol_error(
    body: list[bytes], anomaly: str
) -> None:
    report = judge(body, CONVERSE)
    assert report.outcome is Outcome.PROTOCOL_ERROR
    assert report.anomalies.get(anomaly) == 1


def test_a_block_open_at_a_non_success_stop_is_an_anomaly_not_an_error() -> None:
    body = [message_start(), tool_start(0), tool_input(0, '{"a'), message_stop("max_tokens")]
    report = judge([*body, metadata()], CONVERSE)
    assert verdict(report) == ("incomplete", "max_tokens")
    assert report.anomalies == {"block_open_at_stop": 1}


@pytest.mark.parametrize(
    "bad",
    [
        event("contentBlockDelta", b"not json"),
        event("contentBlockDelta", b"[1, 2]"),
        event("contentBlockDelta", {"contentBlockIndex": "0", "delta": {"text": "x"}}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": "text"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": 5}}),
        event("contentBlockDelta", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": 3}),
        event("messageStop", {}),
    ],
    ids=["not json", "not an object", "index a string", "delta a string", "text a number",
         "no delta", "stop a number", "no stop"],
)  # fmt: skip
def test_an_event_that_is_not_the_contracts_shape_is_a_payload_error(bad: bytes) -> None:
    answer = text_answer()
    report = judge([*answer[:2], bad, *answer[2:]], CONVERSE)
    assert report.outcome is Outcome.PAYLOAD_ERROR


def test_invalid_utf8_in_a_payload_is_a_decode_error() -> None:
    answer = text_answer()
    bad = event("contentBlockDelta", b'{"contentBlockIndex": 0, "delta": {"text": "\xff"}}')
    report = judge([*answer[:2], bad, *answer[2:]], CONVERSE)
    assert report.outcome is Outcome.DECODE_ERROR
    assert report.decode_error_count == 1
    assert report.stop_reason == "end_turn"  # events kept flowing


def test_a_corrupt_frame_is_a_decode_error_and_nothing_after_it_is_read() -> None:
    answer = text_answer()
    bad = bytearray(answer[3])
    bad[-6] ^= 0x01
    report = judge([*answer[:3], bytes(bad), *answer[4:]], CONVERSE)
    assert report.outcome is Outcome.DECODE_ERROR
    assert report.event_count == 3
    assert report.stop_reason is None


def test_a_frame_over_the_ceiling_is_a_buffer_limit() -> None:
    answer = text_answer()
    body = [*answer[:2], text(0, "x" * 400), *answer[2:]]
    report = judge(body, CONVERSE, max_event_bytes=256)
    assert report.outcome is Outcome.BUFFER_LIMIT
    assert report.buffer_limit_stage == "event"
    assert report.event_count == 2


def test_more_blocks_open_than_max_parts_is_a_buffer_limit() -> None:
    body = [message_start(), *(text(index, "x") for index in range(4))]
    body += [*(block_stop(index) for index in range(4)), message_stop(), metadata()]
    report = judge(body, CONVERSE, max_parts=3)
    assert report.outcome is Outcome.BUFFER_LIMIT
    assert report.buffer_limit_stage == "accumulator"


def test_an_empty_body_is_truncated() -> None:
    for route in (CONVERSE, INVOKE):
        report = run_monitor([], route)[1]
        assert report.outcome is Outcome.TRUNCATED, route


# --------------------------------------------------------------------------------------------
# Exception and error frames (both routes)
# --------------------------------------------------------------------------------------------


def _mid_stream(route: str) -> list[bytes]:
    if route == CONVERSE:
        return text_answer()[:3]
    return chunks(claude_events()[:3])


ROUTE_EXCEPTIONS = [(CONVERSE, name) for name in CONVERSE_EXCEPTIONS] + [
    (INVOKE, name) for name in INVOKE_EXCEPTIONS
]


@pytest.mark.parametrize(("route", "name"), ROUTE_EXCEPTIONS)
@pytest.mark.parametrize("where", ["first", "mid-stream"])
def test_an_exception_frame_is_a_provider_error_named_by_its_member(
    route: str, name: str, where: str
) -> None:
    before = [] if where == "first" else _mid_stream(route)
    report = judge([*before, exception(name, "Too many requests")], route)
    expected = Outcome.RATE_LIMITED if name == "throttlingException" else Outcome.PROVIDER_ERROR
    assert report.outcome is expected
    assert report.provider_error_code == name
    attributes = span_attributes(report)
    assert attributes["otelsse.provider_error_code"] == name
    assert "Too many requests" not in repr(attributes)


@pytest.mark.parametrize("route", [CONVERSE, INVOKE])
def test_an_exception_frame_is_the_last_word(route: str) -> None:
    after = text_answer()[3:] if route == CONVERSE else chunks(claude_events()[3:])
    body = [*_mid_stream(route), exception("modelStreamErrorException"), *after]
    report = judge(body, route)
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.anomalies == {"event_after_terminal": len(after)}
    assert not report.terminal_seen


@pytest.mark.parametrize(
    ("route", "before"),
    [
        (CONVERSE, text_answer()[:3]),
        (INVOKE, []),  # no model family chosen yet
        (INVOKE, chunks(claude_events()[:3])),  # Claude's rules read the stream
        (INVOKE, chunks(nova_events()[:3])),
        (INVOKE, chunks(llama_events()[:1])),
    ],
    ids=["converse", "invoke, first", "invoke, claude", "invoke, nova", "invoke, llama"],
)
def test_an_exception_frame_ends_the_stream_for_the_enforcing_reader(
    route: str, before: list[bytes]
) -> None:
    # stop_at_end: the monitor stops right after the route's last event, "its terminal, or a
    # fatal error" (StreamMonitor's docstring), as the enforcing reader reads.
    monitor = StreamMonitor(route, stop_at_end=True)
    monitor.feed(b"".join([*before, exception("modelStreamErrorException"), *before]))
    assert monitor.ended
    report = monitor.close()
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.event_count == len(before) + 1
    assert report.anomalies == {}


@pytest.mark.parametrize("route", [CONVERSE, INVOKE])
def test_an_error_frame_is_a_provider_error_with_its_code(route: str) -> None:
    report = judge([*_mid_stream(route), error_frame("InternalFailure", "secret text")], route)
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.provider_error_code == "InternalFailure"
    assert "secret text" not in repr(span_attributes(report))


@pytest.mark.parametrize("route", [CONVERSE, INVOKE])
def test_an_exception_frame_of_a_member_added_later_is_a_provider_error(route: str) -> None:
    # Every ``exception`` frame is an error the provider sent (botocore raises EventStreamError
    # for any of them, modelled or not): a union member this version does not list is still one.
    report = judge([*_mid_stream(route), exception("serviceQuotaExceededException")], route)
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.provider_error_code == "serviceQuotaExceededException"


# --------------------------------------------------------------------------------------------
# Recognition
# --------------------------------------------------------------------------------------------

ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-7-v1:0"
MODELS = {
    "base model id, ':' encoded": ("anthropic.claude-3-haiku-20240307-v1%3A0", None),
    "base model id, raw ':'": ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", None),
    "no ':'": ("amazon.titan-text-express-v1", None),
    "ARN, ':' and '/' encoded": (
        ARN.replace(":", "%3A").replace("/", "%2F"),
        ARN,
    ),
    "ARN, raw ':' and '/' encoded": (ARN.replace("/", "%2F"), ARN),
    "ARN, lower-case escapes": (ARN.replace(":", "%3a").replace("/", "%2f"), ARN),
}


@pytest.mark.parametrize(("segment", "decoded"), MODELS.values(), ids=list(MODELS))
@pytest.mark.parametrize(
    ("operation", "route"),
    [
        ("converse-stream", BedrockConverseRoute),
        ("invoke-with-response-stream", BedrockInvokeRoute),
    ],
)
def test_a_streaming_request_is_recognised_and_names_its_model(
    segment: str, decoded: str | None, operation: str, route: type
) -> None:
    path = f"/model/{segment}/{operation}"
    model = decoded or segment.replace("%3A", ":")
    assert match_route(Request("POST", HOST, path)) is route
    assert route.url_model(Request("POST", HOST, path)) == model
    assert route.always_streams(Request("POST", HOST, path))
    url = f"https://{HOST}{path}"
    assert detect_route("POST", url) == route.name
    assert detect_route("post", url, "application/vnd.amazon.eventstream") == route.name
    # Whatever the host: VPC, FIPS and dual-stack endpoints are the same API.
    for host in ("bedrock-runtime-fips.us-east-1.amazonaws.com", "vpce-1.example", "localhost"):
        assert detect_route("POST", f"https://{host}{path}") == route.name


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/model/amazon.titan-text-express-v1/converse-stream"),
        ("PUT", "/model/amazon.titan-text-express-v1/invoke-with-response-stream"),
        ("POST", "/model/amazon.titan-text-express-v1/converse"),
        ("POST", "/model/amazon.titan-text-express-v1/invoke"),
        ("POST", "/model/amazon.titan-text-express-v1/invoke-with-bidirectional-stream"),
        ("POST", "/model//converse-stream"),
        ("POST", "/model/converse-stream"),
        ("POST", "/models/amazon.titan-text-express-v1/converse-stream"),
        ("POST", "/model/amazon.titan-text-express-v1/converse-stream/extra"),
    ],
)
def test_other_requests_are_not_bedrock_streams(method: str, path: str) -> None:
    # No route reads them (an event-stream body is never sniffed: sniffing reads SSE).
    assert match_route(Request(method, HOST, path)) is None
    url = f"https://{HOST}{path}"
    assert detect_route(method, url) is None
    assert detect_route(method, url, "application/vnd.amazon.eventstream") is None


def test_the_routes_are_registered_by_name_with_their_media_type() -> None:
    for route in (BedrockConverseRoute, BedrockInvokeRoute):
        assert get_route(route.name) is route
        assert route.media_type == "application/vnd.amazon.eventstream"
        assert route.provider == "aws.bedrock"
        assert route.example_request is not None
        method, path = route.example_request
        assert match_route(Request(method, HOST, path)) is route


@pytest.mark.parametrize("name", bedrock_fixture_names())
def test_the_provider_name_is_aws_bedrock(name: str) -> None:
    report = run_monitor([read_fixture(name)], BEDROCK_EXPECTED[name].route)[1]
    attributes = span_attributes(report)
    assert attributes["gen_ai.provider.name"] == "aws.bedrock"
    assert attributes["gen_ai.request.stream"] is True


# --------------------------------------------------------------------------------------------
# InvokeModelWithResponseStream
# --------------------------------------------------------------------------------------------


def test_claude_events_in_chunks_are_judged_by_the_anthropic_rules() -> None:
    report = judge(chunks(claude_events()), INVOKE)
    assert verdict(report) == ("complete", "end_turn")
    assert (report.input_tokens, report.output_tokens) == (12, 5)
    assert (report.response_model, report.response_id) == (
        "claude-3-5-sonnet-20240620",
        "msg_bdrk_01",
    )
    assert (report.provider_name, report.operation_name) == ("aws.bedrock", "chat")
    assert report.anomalies == {}


def test_a_claude_tool_call_in_fragments_is_complete() -> None:
    report = judge(chunks(claude_events("tool_use", "", '{"location"', ': "Seattle"}')), INVOKE)
    assert verdict(report) == ("complete", "tool_use")
    assert (report.tool_call_count, report.tool_call_invalid_count) == (1, 0)


def test_invalid_claude_tool_arguments_under_a_success_stop_are_a_payload_error() -> None:
    report = judge(chunks(claude_events("tool_use", "", '{"location": ')), INVOKE)
    assert verdict(report) == ("payload_error", "tool_use")


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [("end_turn", "complete"), ("stop_sequence", "complete"), ("tool_use", "complete"),
     ("max_tokens", "incomplete"), ("refusal", "incomplete"), ("pause_turn", "incomplete")],
)  # fmt: skip
def test_claude_stops_are_anthropics(reason: str, outcome: str) -> None:
    assert verdict(judge(chunks(claude_events(reason)), INVOKE)) == (outcome, reason)


def test_a_claude_stream_cut_at_every_chunk() -> None:
    answer = chunks(claude_events())
    delta_at = len(answer) - 2  # message_delta, then message_stop
    for count in range(len(answer) + 1):
        report = judge(answer[:count], INVOKE)
        if count <= delta_at:
            expected = "truncated"
        elif count < len(answer):
            expected = "terminal_missing"  # after message_delta: only message_stop is missing
        else:
            expected = "complete"
        assert report.outcome.value == expected, count


def test_a_claude_error_event_in_a_chunk_is_a_provider_error() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    report = judge(chunks([*claude_events()[:3], error]), INVOKE)
    assert report.outcome is Outcome.PROVIDER_ERROR
    assert report.provider_error_code == "overloaded_error"


def test_claude_events_after_message_stop_are_an_anomaly() -> None:
    events = claude_events()
    report = judge(chunks([*events, events[2]]), INVOKE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.anomalies == {"event_after_terminal": 1}


@pytest.mark.parametrize(
    "bad",
    [
        event("chunk", {"bytes": "not base64!"}),
        event("chunk", {"bytes": "eyJ0eXBlIjo"}),  # base64 cut short
        raw_chunk(b"\xff\xfe not UTF-8"),
        raw_chunk(b"not json"),
        raw_chunk(b'{"type": "content_block_delta", '),
        raw_chunk(b"[1, 2]"),
        event("chunk", b"not json"),
        event("chunk", {"no": "bytes"}),
        event("chunk", {"bytes": 5}),
        event("chunk", b"[]"),
    ],
    ids=["bytes not base64", "base64 cut", "bytes not UTF-8", "bytes not JSON",
         "bytes cut JSON", "bytes not an object", "part not JSON", "part without bytes",
         "bytes not a string", "part not an object"],
)  # fmt: skip
@pytest.mark.parametrize("where", ["first", "in a Claude stream"])
def test_a_chunk_that_is_not_a_payload_part_of_json_is_a_payload_error(
    bad: bytes, where: str
) -> None:
    events = chunks(claude_events())
    body = [bad, *events] if where == "first" else [*events[:3], bad, *events[3:]]
    report = judge(body, INVOKE)
    assert report.outcome is Outcome.PAYLOAD_ERROR


def test_an_event_other_than_chunk_is_counted_as_unknown() -> None:
    events = chunks(claude_events())
    report = judge([*events[:2], event("initial-response", {}), *events[2:]], INVOKE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.unknown_event_count == 1


# Mistral's text completion (AWS's example reads ``outputs[0].text``), a Cohere shape: no
# recording to check a rule against, so no rule is written; and a family nobody knows.
OTHER_FAMILIES = {
    "mistral": [
        {"outputs": [{"text": "Hi", "stop_reason": None}]},
        {"outputs": [{"text": "!", "stop_reason": "stop"}]},
    ],
    "cohere": [
        {"text": "Hi", "is_finished": False},
        {"is_finished": True, "finish_reason": "COMPLETE"},
    ],
    "unknown": [{"something": "new"}],
}


@pytest.mark.parametrize("family", OTHER_FAMILIES.values(), ids=list(OTHER_FAMILIES))
def test_a_family_without_a_rule_is_eof_unverified(family: list[dict[str, Any]]) -> None:
    body = chunks(family)
    report = judge(body, INVOKE)
    assert report.outcome is Outcome.EOF_UNVERIFIED
    assert report.route == INVOKE
    assert report.provider_name == "aws.bedrock"
    # Cut inside a frame, it is truncated all the same.
    joined = b"".join(body)
    assert run_monitor([joined[:-1]], INVOKE)[1].outcome is Outcome.TRUNCATED


@pytest.mark.parametrize("reason", ["end_turn", "tool_use", "max_tokens"])
def test_nova_events_are_judged_by_the_converse_rules(reason: str) -> None:
    report = judge(chunks(nova_events(reason)), INVOKE)
    outcome = "incomplete" if reason == "max_tokens" else "complete"
    assert verdict(report) == (outcome, reason)
    assert (report.input_tokens, report.output_tokens) == (5, 10)
    assert (report.provider_name, report.operation_name) == ("aws.bedrock", "chat")


def test_a_nova_tool_call_is_read() -> None:
    start = {"start": {"toolUse": {"toolUseId": "t1", "name": "f"}}, "contentBlockIndex": 0}
    delta = {"delta": {"toolUse": {"input": '{"a": 1}'}}, "contentBlockIndex": 0}
    events = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockStart": start},
        {"contentBlockDelta": delta},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "tool_use"}},
        {"metadata": {"usage": {"inputTokens": 5, "outputTokens": 10}}},
    ]
    report = judge(chunks(events), INVOKE)
    assert verdict(report) == ("complete", "tool_use")
    assert (report.tool_call_count, report.tool_call_invalid_count) == (1, 0)


def test_a_nova_stream_cut_at_every_chunk() -> None:
    answer = chunks(nova_events())
    stop_at = len(answer) - 2  # messageStop, then metadata
    for count in range(len(answer) + 1):
        report = judge(answer[:count], INVOKE)
        if count <= stop_at:
            expected = "truncated"
        elif count < len(answer):
            expected = "terminal_missing"
        else:
            expected = "complete"
        assert report.outcome.value == expected, count


def test_a_nova_event_that_names_two_kinds_is_unknown() -> None:
    events = nova_events()
    both = {"contentBlockStop": {"contentBlockIndex": 0}, "messageStop": {"stopReason": "x"}}
    report = judge(chunks([*events[:2], both, *events[2:]]), INVOKE)
    assert verdict(report) == ("complete", "end_turn")
    assert report.unknown_event_count == 1


def test_a_long_nova_answer_is_not_a_buffer_limit() -> None:
    # Nova Micro opens a content block per text delta (the recording
    # real/bedrock-invoke-stream-nova-max-tokens.eventstream: blocks 0..9, each closed at
    # once): a long answer has more blocks than Limits.max_parts, though only one is ever open.
    deltas = [f" word{n}" for n in range(Limits().max_parts + 10)]
    report = run_monitor([b"".join(chunks(nova_events(deltas=deltas)))], INVOKE)[1]
    assert verdict(report) == ("complete", "end_turn")


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [("stop", "complete"), ("length", "incomplete"), ("a_stop_added_later", "incomplete")],
)
def test_llama_is_judged_by_its_stop_reason(reason: str, outcome: str) -> None:
    report = judge(chunks(llama_events(reason)), INVOKE)
    assert verdict(report) == (outcome, reason)
    assert (report.input_tokens, report.output_tokens) == (12, 5)  # the invocation metrics
    assert report.operation_name == "text_completion"
    assert report.output_delta_count == 3


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [("FINISH", "complete"), ("FINISHED", "complete"), ("STOP_CRITERIA_MET", "complete"),
     ("LENGTH", "incomplete"), ("CONTENT_FILTERED", "incomplete")],
)  # fmt: skip
def test_titan_is_judged_by_its_completion_reason(reason: str, outcome: str) -> None:
    report = judge(chunks(titan_events(reason)), INVOKE)
    assert verdict(report) == (outcome, reason)
    assert (report.input_tokens, report.output_tokens) == (12, 5)
    assert report.operation_name == "text_completion"


@pytest.mark.parametrize("family", [llama_events, titan_events], ids=["llama", "titan"])
def test_a_stop_field_family_cut_before_its_last_event_is_truncated(family: Any) -> None:
    answer = chunks(family())
    for count in range(len(answer)):
        assert judge(answer[:count], INVOKE).outcome is Outcome.TRUNCATED, count


@pytest.mark.parametrize("family", [llama_events, titan_events], ids=["llama", "titan"])
def test_a_stop_field_that_is_not_a_string_is_a_payload_error(family: Any) -> None:
    assert judge(chunks(family(7)), INVOKE).outcome is Outcome.PAYLOAD_ERROR


@pytest.mark.parametrize("family", [llama_events, titan_events], ids=["llama", "titan"])
def test_events_after_a_stop_field_family_ends_are_an_anomaly(family: Any) -> None:
    events = family("LENGTH" if family is titan_events else "length")
    report = judge(chunks([*events, events[0]]), INVOKE)
    assert report.outcome is Outcome.INCOMPLETE
    assert report.anomalies == {"event_after_terminal": 1}


def test_a_titan_stream_a_guardrail_blocked_is_not_truncated() -> None:
    # A whole stream: the one chunk Bedrock sends when a guardrail blocks Titan's input, with
    # no completionReason and no invocation metrics (traceloop/openllmetry, packages/
    # opentelemetry-instrumentation-bedrock/tests/traces/cassettes/test_guardrails/
    # test_guardrail_invoke_stream.yaml, HTTP 200; tests/fixtures/real/SOURCES.md lists it).
    blocked = {
        "outputText": "Input blocked",
        "index": 0.0,
        "totalOutputTextTokenCount": 3.0,
        "inputTextTokenCount": 6.0,
        "amazon-bedrock-guardrailAction": "INTERVENED",
        "amazon-bedrock-trace": {"guardrail": {"input": {}}, "actionReason": "Guardrail blocked."},
    }
    report = judge([chunk(blocked)], INVOKE)
    assert report.outcome is Outcome.INCOMPLETE
