"""The tool gate's requirements as a test list, on every route that has tool calls.

The list the gate was specified with: "Split SSE input at every practical byte boundary, include
multi-line data fields and comments, interleave text with two tool calls, inject an error before
the terminal marker, omit the final event, send malformed JSON, send one valid JSON value followed
by trailing data, fail schema validation, add an unknown event, and simulate a disconnect followed
by a fresh attempt. [...] repeat the suite across approved model routes." Then the happy-path and
error-path operator workflows, each walked step by step.

The bodies come from ``tests/gate/_streams.py`` (wire-exact, shaped on the recorded fixtures).
Every executor here is a ``Recorder``: it keeps what it was called with, so "never called" and
"called once with exactly these arguments" are facts, not hopes. Every argument value holds
``SECRET``, so "no content in the records" is a search for one word. Disconnects and retries
use the real ``SSEServer`` on 127.0.0.1, real httpx/httpx2/requests responses and a real
``SQLiteLedger`` file.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from otelsse import (
    CallKey,
    Decision,
    GateCall,
    GateResult,
    MemoryLedger,
    SQLiteLedger,
    ToolCallState,
    ToolCallView,
    ToolGate,
    semconv,
)
from otelsse.routes import get_route
from tests._clients import ASYNC_CLIENTS, Client, astreaming, streaming
from tests._helpers import sse_events
from tests._otel import Telemetry, attribute_values
from tests._server import Reply, SSEServer
from tests.gate._streams import (
    ANTHROPIC,
    CHAT,
    GEMINI,
    RESPONSES,
    TOOL_ROUTES,
    Call,
    Stream,
    build,
    call,
)

S = ToolCallState

READ_FILE = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200},
        "lines": {"type": "integer", "minimum": 1, "maximum": 500},
        "note": {"type": "string"},
    },
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS = {"read_file": READ_FILE}
#: Present in every argument value: absent from every record, span and ledger row.
SECRET = "SECRET"
#: The SSE event type of each route's last event on a good stream (``message``: no ``event:``).
TERMINAL_EVENT = {
    CHAT: "message",
    RESPONSES: "response.completed",
    ANTHROPIC: "message_stop",
    GEMINI: "message",
}
#: The provider's call-id style, per route.
ID_PREFIX = {CHAT: "call_", RESPONSES: "call_", ANTHROPIC: "toolu_", GEMINI: "fc-"}


def two_calls(route: str, *, pieces: int = 4) -> tuple[Call, Call]:
    """Two parallel calls to the SAME tool with different arguments (multi-byte text in A)."""
    prefix = ID_PREFIX[route]
    first = call(
        f"{prefix}01Alpha",
        "read_file",
        {"path": f"src/{SECRET}_alpha.py", "lines": 40, "note": f"café € {SECRET}"},
        pieces,
    )
    second = call(f"{prefix}02Beta", "read_file", {"path": f"docs/{SECRET}_beta.md"}, pieces + 1)
    return first, second


def good_stream(route: str, **faults: Any) -> Stream:
    first, second = two_calls(route)
    return build(route, ["Reading both files. ", first, second], **faults)


# --------------------------------------------------------------------------------------------
# Running the gate
# --------------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Executors that keep every call they get (a deep copy of the arguments)."""

    seen: list[tuple[str, Any]] = field(default_factory=list)

    def executors(self, *names: str) -> dict[str, Callable[[Any], Any]]:
        return {name: self._executor(name) for name in names}

    def _executor(self, name: str) -> Callable[[Any], Any]:
        def run(arguments: Any) -> Any:
            self.seen.append((name, copy.deepcopy(arguments)))
            return {"ran": name, "arguments": copy.deepcopy(arguments)}

        return run


def run_gate(
    stream: Stream,
    chunks: Sequence[bytes] | None = None,
    *,
    gate: ToolGate | None = None,
    recorder: Recorder | None = None,
    run_id: str = "run-42",
    executors: Sequence[str] = ("read_file",),
) -> GateResult:
    gate = gate if gate is not None else ToolGate(TOOLS)
    recorder = recorder if recorder is not None else Recorder()
    source = iter(chunks if chunks is not None else [stream.body])
    return gate.run(source, stream.route, execute=recorder.executors(*executors), run_id=run_id)


def snapshot(result: GateResult) -> dict[str, Any]:
    """Everything the gate decided and recorded, without the run id (tests vary it) and the
    moment each record was observed."""
    return {
        "fault": result.fault,
        "attempt": result.attempt,
        "response_id": result.response_id,
        "last_event_type": result.last_event_type,
        "last_item_id": result.last_item_id,
        "disconnect_reason": result.disconnect_reason,
        "calls": [
            (
                {**record.record(), "run_id": None, "observed_at": None},
                [state.value for state in record.history],
            )
            for record in result.calls
        ],
    }


def by_id(result: GateResult) -> dict[str | None, GateCall]:
    return {record.call_id: record for record in result.calls}


def assert_no_content(result: GateResult, stream: Stream) -> None:
    """No argument text in any record, the records' reprs or the result's repr."""
    texts = [json.dumps([record.record() for record in result.calls])]
    texts.extend(repr(record) for record in result.calls)
    texts.append(repr(result))
    dumped = "\n".join(texts)
    assert SECRET not in dumped
    for sent in stream.calls:
        assert sent.arguments not in dumped


def assert_quarantined(record: GateCall, error_class: str) -> None:
    assert record.state is S.QUARANTINED
    assert record.error_class == error_class
    assert S.POLICY_APPROVED not in record.history
    assert record.policy_decision is None
    assert record.execution_status is None
    assert record.output is None


def expected_bytes(route: str, sent: Call) -> int | None:
    """A record's byte count: Gemini sends ``args`` as an object, so there is no argument text
    to count (None); elsewhere the UTF-8 bytes of the whole argument text."""
    return None if route == GEMINI else sent.byte_count


def two_piece_splits(body: bytes) -> Iterator[tuple[int, list[bytes]]]:
    for at in range(1, len(body)):
        yield at, [body[:at], body[at:]]


# --------------------------------------------------------------------------------------------
# The builders: what they write is what the routes accept, and what the fixtures look like
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_the_builders_plain_and_multiline_bodies_carry_the_same_events(route: str) -> None:
    plain, multi = good_stream(route), good_stream(route, multiline=True)
    assert multi.body.count(b"\n:") > 0

    def parsed_events(body: bytes) -> list[tuple[str, Any]]:
        return [
            (kind, data if data == "[DONE]" else json.loads(data))
            for kind, data in sse_events(body)
        ]

    plain_events = parsed_events(plain.body)
    assert parsed_events(multi.body) == plain_events
    assert len(plain_events) == len(plain.marks)
    newline = b"\r\n" if route == GEMINI else b"\n"
    assert plain.body.endswith(newline + newline)
    assert plain.marks[-1].end == len(plain.body)


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_the_builders_good_stream_is_read_as_the_provider_means_it(route: str) -> None:
    """The route reads the built body as complete, with both calls and their arguments."""
    stream = good_stream(route)
    recorder = Recorder()
    result = run_gate(stream, recorder=recorder)
    assert result.fault is None
    assert result.stream is not None
    assert result.stream.report.outcome.value == "complete"
    assert result.stream.report.route == route
    assert result.stream.text == "Reading both files. "
    assert [(c.id, c.name, c.arguments) for c in result.stream.tool_calls] == [
        (sent.id, sent.name, sent.value()) for sent in stream.calls
    ]
    assert result.last_event_type == TERMINAL_EVENT[route]


# --------------------------------------------------------------------------------------------
# (a) Split at every byte boundary
# --------------------------------------------------------------------------------------------


@pytest.mark.matrix  # every split of the stream
@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_records_are_identical_whatever_the_split_and_each_call_runs_once(route: str) -> None:
    stream = good_stream(route)
    gate = ToolGate(TOOLS)  # one gate, many runs: each run id is its own run in its ledger
    want_seen = [("read_file", sent.value()) for sent in stream.calls]

    whole_recorder = Recorder()
    whole = run_gate(stream, gate=gate, recorder=whole_recorder, run_id="whole")
    reference = snapshot(whole)
    assert [record.state for record in whole.calls] == [S.EXECUTED, S.EXECUTED]
    assert whole_recorder.seen == want_seen
    assert [record.buffer_bytes for record in whole.calls] == [
        expected_bytes(route, sent) for sent in stream.calls
    ]

    for at, chunks in two_piece_splits(stream.body):
        recorder = Recorder()
        result = run_gate(stream, chunks, gate=gate, recorder=recorder, run_id=f"split-{at}")
        assert snapshot(result) == reference, at
        assert recorder.seen == want_seen, at

    recorder = Recorder()
    bytewise = [stream.body[i : i + 1] for i in range(len(stream.body))]
    result = run_gate(stream, bytewise, gate=gate, recorder=recorder, run_id="one-byte-reads")
    assert snapshot(result) == reference
    assert recorder.seen == want_seen


# --------------------------------------------------------------------------------------------
# (b) Multi-line data fields and comments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_multi_line_data_and_comments_give_the_same_records(route: str) -> None:
    plain, multi = good_stream(route), good_stream(route, multiline=True)
    reference = snapshot(run_gate(plain))

    for chunks in ([multi.body], [multi.body[i : i + 1] for i in range(len(multi.body))]):
        recorder = Recorder()
        result = run_gate(multi, chunks, recorder=recorder)
        assert snapshot(result) == reference
        assert recorder.seen == [("read_file", sent.value()) for sent in multi.calls]
        assert result.report is not None
        # every event has comments before and inside it, plus a comment-only block
        assert result.report.comment_count >= 3 * len(multi.marks) - 1
        assert_no_content(result, multi)


# --------------------------------------------------------------------------------------------
# (c) Text interleaved with two parallel calls to the same tool
# --------------------------------------------------------------------------------------------

TEXT = ["I will read ", "both files", " in parallel: ", "first ", "then ", "second."]


def interleaved(route: str, **options: Any) -> Stream:
    first, second = two_calls(route, pieces=5)
    parts: list[str | Call] = [TEXT[0], first, TEXT[1], TEXT[2], second, *TEXT[3:]]
    return build(route, parts, interleave=route != ANTHROPIC, **options)


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_two_parallel_calls_to_the_same_tool_are_two_records_each_run_once_with_its_own_arguments(
    route: str,
) -> None:
    stream = interleaved(route)
    if route in (CHAT, RESPONSES):
        # the fragments of the two calls really are mixed with each other and with the text
        labels = stream.labels()
        assert labels.index("args:0:4") > labels.index("args:1:0") > labels.index("text:1")
    ledger = MemoryLedger()
    recorder = Recorder()
    result = run_gate(stream, gate=ToolGate(TOOLS, ledger=ledger), recorder=recorder)

    assert result.fault is None
    assert result.stream is not None
    assert result.stream.text == "".join(TEXT)
    first, second = stream.calls
    assert first.value() != second.value()
    assert [record.tool_name for record in result.calls] == ["read_file", "read_file"]
    records = by_id(result)
    assert set(records) == {first.id, second.id}
    for sent in stream.calls:
        record = records[sent.id]
        assert record.state is S.EXECUTED
        assert record.history == [
            S.RECEIVING, S.ITEM_OPEN, S.ITEM_TERMINAL, S.PARSED, S.SCHEMA_VALID,
            S.POLICY_APPROVED, S.EXECUTED,
        ]  # fmt: skip
        assert record.buffer_bytes == expected_bytes(route, sent)
        # what the executor got for this call id is this call's arguments, nothing else
        assert record.output == {"ran": "read_file", "arguments": sent.value()}
        entry = ledger.get(CallKey("run-42", stream.response_id, sent.id))
        assert entry is not None
        assert entry.status == "succeeded"
    assert recorder.seen == [("read_file", first.value()), ("read_file", second.value())]
    assert_no_content(result, stream)


def test_gemini_parallel_calls_without_ids_are_kept_apart_by_position() -> None:
    """Gemini's ``functionCall.id`` is optional (the recorded fixture has none): two calls to
    the same tool are then two records keyed by their position in the response."""
    stream = interleaved(GEMINI, gemini_ids=False)
    ledger = MemoryLedger()
    recorder = Recorder()
    result = run_gate(stream, gate=ToolGate(TOOLS, ledger=ledger), recorder=recorder)

    first, second = stream.calls
    assert [record.call_id for record in result.calls] == [None, None]
    assert [record.state for record in result.calls] == [S.EXECUTED, S.EXECUTED]
    assert [record.output["arguments"] for record in result.calls] == [
        first.value(),
        second.value(),
    ]
    assert recorder.seen == [("read_file", first.value()), ("read_file", second.value())]
    for position in (0, 1):
        entry = ledger.get(CallKey("run-42", stream.response_id, f"#{position}"))
        assert entry is not None
        assert entry.status == "succeeded"


# --------------------------------------------------------------------------------------------
# (d)-(g) Stream and argument faults: every affected call quarantined, nothing executed
# --------------------------------------------------------------------------------------------


def run_refused(stream: Stream) -> GateResult:
    """Run the gate on a stream it must refuse: no executor is called, nothing is executed, every
    call is quarantined and no record holds content."""
    recorder = Recorder()
    result = run_gate(stream, recorder=recorder)
    assert recorder.seen == []
    assert result.executed == ()
    for record in result.calls:
        assert record.state is S.QUARANTINED
    assert_no_content(result, stream)
    return result


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_an_error_event_before_the_terminal_quarantines_every_call(route: str) -> None:
    stream = good_stream(route, error_before_terminal=True)
    result = run_refused(stream)

    assert result.fault == "provider_error"
    assert [record.call_id for record in result.calls] == [sent.id for sent in stream.calls]
    for record, sent in zip(result.calls, stream.calls, strict=True):
        assert_quarantined(record, "provider_error")
        assert record.buffer_bytes == expected_bytes(route, sent)
        assert record.response_id == stream.response_id
    assert result.last_event_type == ("error" if route in (RESPONSES, ANTHROPIC) else "message")


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_an_in_stream_error_is_not_reported_as_a_disconnect(route: str) -> None:
    """The provider's error event is the route's last event: the gate stops reading there, so
    it never sees the connection close; the stream ended on an error, not on a disconnect or a
    clean EOF ("eof"), whichever route carried it."""
    stream = good_stream(route, error_before_terminal=True)
    result = run_gate(stream, [stream.body + stream.body])  # the peer keeps sending after it
    assert result.fault == "provider_error"
    assert result.disconnect_reason is None


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_a_stream_whose_final_event_is_omitted_quarantines_every_call(route: str) -> None:
    stream = good_stream(route, omit_final=True)
    result = run_refused(stream)

    # Chat's [DONE] and Anthropic's message_stop follow the whole answer: missing, they make it
    # terminal_missing, refused all the same; Responses and Gemini end the answer in theirs.
    fault = "terminal_missing" if route in (CHAT, ANTHROPIC) else "truncated"
    assert result.fault == fault
    assert result.disconnect_reason == "eof"  # a clean close, not a dropped connection
    assert result.report is not None
    assert result.report.terminal_seen is False
    assert len(result.calls) == 2
    for record, sent in zip(result.calls, stream.calls, strict=True):
        assert_quarantined(record, fault)
        assert record.call_id == sent.id
        assert record.buffer_bytes == expected_bytes(route, sent)
    last_event = {
        CHAT: "message",
        RESPONSES: "response.output_item.done",
        ANTHROPIC: "message_delta",
        GEMINI: "message",
    }
    assert result.last_event_type == last_event[route]


def assert_argument_fault(route: str, stream: Stream, result: GateResult, problem: str) -> None:
    """Call 0's arguments are broken, call 1's are fine: call 0 is quarantined for its own
    problem, call 1 because the stream is refused (a broken call makes the response a payload
    error). On Gemini the broken call is a broken chunk: it never reaches the gate."""
    bad, good = stream.calls
    assert result.fault == "payload_error"
    if route == GEMINI:
        assert [record.call_id for record in result.calls] == [good.id]
        assert_quarantined(result.calls[0], "payload_error")
        return
    first, second = result.calls
    assert (first.call_id, second.call_id) == (bad.id, good.id)
    assert_quarantined(first, problem)
    assert first.json_status == "invalid"
    assert first.trailing_data is (problem == "trailing_data")
    assert first.schema_status == "unchecked"
    assert first.buffer_bytes == bad.byte_count
    assert_quarantined(second, "payload_error")
    assert second.trailing_data is False


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_malformed_json_arguments_are_quarantined(route: str) -> None:
    stream = good_stream(route, malformed=(0,))
    if route != GEMINI:
        with pytest.raises(json.JSONDecodeError):
            json.loads(stream.calls[0].arguments)
    result = run_refused(stream)
    assert_argument_fault(route, stream, result, "invalid_json")


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_one_json_value_followed_by_trailing_data_is_quarantined(route: str) -> None:
    stream = good_stream(route, trailing=(0,))
    if route != GEMINI:
        value, end = json.JSONDecoder().raw_decode(stream.calls[0].arguments)
        assert value == two_calls(route)[0].value()  # a valid value first...
        assert stream.calls[0].arguments[end:].strip()  # ...and more after it
    result = run_refused(stream)
    assert_argument_fault(route, stream, result, "trailing_data")


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_a_malformed_sse_message_quarantines_every_call(route: str) -> None:
    """The event carrying the first call's first fragment is not JSON: that fragment is lost,
    so the first call's buffer is not its arguments, and the stream is refused."""
    stream = good_stream(route, malformed_event=True)
    result = run_refused(stream)

    assert result.fault == "payload_error"
    first, second = stream.calls
    if route == GEMINI:  # the malformed chunk was the first call's: it never reached the gate
        assert [record.call_id for record in result.calls] == [second.id]
        assert_quarantined(result.calls[0], "payload_error")
        return
    a, b = result.calls
    assert (a.call_id, b.call_id) == (first.id, second.id)
    assert_quarantined(a, "invalid_json")
    assert a.buffer_bytes == first.byte_count - len(first.fragments[0].encode())
    assert_quarantined(b, "payload_error")
    assert b.buffer_bytes == second.byte_count


#: (stream fault, first call's error class) when argument bytes follow a closed call: chat and
#: Anthropic forbid any delta after the choice's finish / the block's stop (a protocol error);
#: on Responses the bytes reach the closed call, whose arguments are then not one value.
LATE = {
    CHAT: ("protocol_error", "protocol_error"),
    RESPONSES: ("payload_error", "trailing_data"),
    ANTHROPIC: ("protocol_error", "protocol_error"),
}


@pytest.mark.parametrize("route", list(LATE))
def test_argument_bytes_after_a_call_closed_are_never_appended_to_it(route: str) -> None:
    """Seed 001: a closed JSON value takes no more bytes; later argument bytes are trailing
    data, and the call never runs (neither with its first value nor with the late one)."""
    stream = good_stream(route, late_fragment=(0,))
    result = run_refused(stream)

    fault, error_class = LATE[route]
    assert result.fault == fault
    first, second = stream.calls
    a, b = result.calls[:2]
    assert (a.call_id, b.call_id) == (first.id, second.id)
    assert_quarantined(a, error_class)
    assert a.trailing_data is (error_class == "trailing_data")
    assert a.buffer_bytes == first.byte_count
    assert b.error_class == fault
    # chat: the late fragment names no call (its id and name came with the first fragment),
    # so it opens a nameless one, quarantined as well
    for extra in result.calls[2:]:
        assert (extra.call_id, extra.tool_name) == (None, None)
        assert_quarantined(extra, fault)


@pytest.mark.matrix  # every split of every fault
@pytest.mark.parametrize("route", TOOL_ROUTES)
@pytest.mark.parametrize(
    "fault",
    ["error_before_terminal", "omit_final", "malformed", "trailing", "malformed_event"],
)
def test_a_faulty_stream_is_quarantined_however_it_is_split(route: str, fault: str) -> None:
    """The fault cases at every split too (every 7th byte, and one byte per read)."""
    faults: dict[str, Any] = {fault: (0,) if fault in ("malformed", "trailing") else True}
    stream = good_stream(route, **faults)
    gate = ToolGate(TOOLS)
    reference = snapshot(run_gate(stream, gate=gate, run_id="whole"))
    assert reference["fault"] is not None
    body = stream.body
    splits = [[body[:at], body[at:]] for at in range(1, len(body), 7)]
    splits.append([body[i : i + 1] for i in range(len(body))])
    for number, chunks in enumerate(splits):
        recorder = Recorder()
        result = run_gate(stream, chunks, gate=gate, recorder=recorder, run_id=f"r{number}")
        assert snapshot(result) == reference
        assert recorder.seen == []


# --------------------------------------------------------------------------------------------
# (h) Schema failures and (i) unregistered tools: the call is quarantined, its sibling runs
# --------------------------------------------------------------------------------------------

SCHEMA_FAILURES: dict[str, dict[str, Any]] = {
    "additionalProperties": {"path": f"a/{SECRET}.txt", "mode": "rw"},
    "required": {"lines": 3, "note": SECRET},
    "maximum": {"path": f"a/{SECRET}.txt", "lines": 9000},
}


@pytest.mark.parametrize("route", TOOL_ROUTES)
@pytest.mark.parametrize("keyword", list(SCHEMA_FAILURES))
def test_a_schema_failure_quarantines_that_call_only(route: str, keyword: str) -> None:
    prefix = ID_PREFIX[route]
    bad = call(f"{prefix}0bad", "read_file", SCHEMA_FAILURES[keyword], 3)
    good = call(f"{prefix}1good", "read_file", {"path": f"ok/{SECRET}.txt"}, 3)
    stream = build(route, ["Reading. ", bad, good])
    recorder = Recorder()
    result = run_gate(stream, recorder=recorder)

    assert result.fault is None  # the stream itself is sound
    first, second = result.calls
    assert first.call_id == bad.id
    assert_quarantined(first, "tool_schema_error")
    assert first.schema_status == "invalid"
    assert first.schema_keyword == keyword
    assert first.json_status == "valid"
    assert first.trailing_data is False
    assert first.record()["schema_status"] == "invalid"
    assert first.buffer_bytes == expected_bytes(route, bad)
    assert second.state is S.EXECUTED
    assert recorder.seen == [("read_file", good.value())]
    assert_no_content(result, stream)


@pytest.mark.parametrize("route", TOOL_ROUTES)
@pytest.mark.parametrize("registered_by", ["tools", "execute"])
def test_a_call_to_an_unregistered_tool_is_quarantined_and_never_run(
    route: str, registered_by: str
) -> None:
    prefix = ID_PREFIX[route]
    rogue = call(f"{prefix}0rogue", "delete_repository", {"path": f"/{SECRET}", "force": True})
    good = call(f"{prefix}1good", "read_file", {"path": f"ok/{SECRET}.txt"})
    stream = build(route, ["Cleaning up. ", rogue, good])
    recorder = Recorder()
    # "tools": registered by schema, and an executor exists even for the rogue name;
    # "execute": no tools=, the executors' names are the registered tools.
    gate = ToolGate(TOOLS) if registered_by == "tools" else ToolGate()
    names = ("read_file", "delete_repository") if registered_by == "tools" else ("read_file",)
    result = run_gate(stream, gate=gate, recorder=recorder, executors=names)

    first, second = result.calls
    assert (first.call_id, first.tool_name) == (rogue.id, "delete_repository")
    assert_quarantined(first, "unregistered_tool")
    assert first.schema_status == "unchecked"
    assert second.state is S.EXECUTED
    assert recorder.seen == [("read_file", good.value())]
    assert_no_content(result, stream)


# --------------------------------------------------------------------------------------------
# (j) An unknown event is ignored: the calls still run
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_an_unknown_event_is_ignored_and_the_calls_still_run(route: str) -> None:
    plain, odd = good_stream(route), good_stream(route, unknown_event=True)
    assert "unknown" in odd.labels()
    recorder = Recorder()
    result = run_gate(odd, recorder=recorder)

    assert result.fault is None
    assert snapshot(result) == snapshot(run_gate(plain))
    assert recorder.seen == [("read_file", sent.value()) for sent in odd.calls]
    assert result.report is not None
    if route in (RESPONSES, ANTHROPIC):  # routes that dispatch on the event's type count it
        assert result.report.unknown_event_count == 1


# --------------------------------------------------------------------------------------------
# (k) A disconnect, then a fresh attempt with the same run id
# --------------------------------------------------------------------------------------------


def cut_point(stream: Stream) -> tuple[int, int | None]:
    """Where the connection drops: 10 bytes into the event after the second call's second
    argument fragment (Gemini: into the second call's chunk). Also how many argument bytes of
    the second call were complete before it (None: Gemini's second call is never seen)."""
    if stream.route == GEMINI:
        return stream.end_of("call:0") + 10, None
    second = stream.calls[1]
    return stream.end_of("args:1:1") + 10, len("".join(second.fragments[:2]).encode())


def assert_first_attempt(result: GateResult, stream: Stream, client_error: str) -> None:
    first, second = stream.calls
    partial = cut_point(stream)[1]
    assert result.attempt == 1
    assert result.fault == "truncated"
    assert result.disconnect_reason == client_error
    assert result.response_id == stream.response_id
    assert result.executed == ()
    if stream.route == GEMINI:
        assert [record.call_id for record in result.calls] == [first.id]
        assert_quarantined(result.calls[0], "truncated")
        assert result.calls[0].buffer_bytes is None
        assert result.last_item_id == first.id
        return
    a, b = result.calls
    assert (a.call_id, b.call_id) == (first.id, second.id)
    for record in (a, b):
        assert_quarantined(record, "truncated")
        assert record.response_id == stream.response_id
        assert record.run_id == "run-42"
        assert record.attempt == 1
    assert a.buffer_bytes == first.byte_count
    assert b.buffer_bytes == partial
    assert b.json_status == "unchecked"  # its buffer was never parsed as a complete call
    assert b.history == [S.RECEIVING, S.ITEM_OPEN, S.QUARANTINED]
    assert result.last_item_id == second.id
    assert (
        result.last_event_type
        == {
            CHAT: "message",
            RESPONSES: "response.function_call_arguments.delta",
            ANTHROPIC: "content_block_delta",
        }[stream.route]
    )


def assert_fresh_attempt(
    result: GateResult, stream: Stream, recorder: Recorder, attempt: int
) -> None:
    assert result.attempt == attempt
    assert result.fault is None
    assert result.response_id == stream.response_id
    assert [record.call_id for record in result.calls] == [sent.id for sent in stream.calls]
    for record, sent in zip(result.calls, stream.calls, strict=True):
        assert record.state is S.EXECUTED
        assert record.attempt == attempt
        # fresh accumulators: the whole argument text of this attempt, nothing of the last
        assert record.buffer_bytes == expected_bytes(stream.route, sent)
    assert recorder.seen == [("read_file", sent.value()) for sent in stream.calls]


def ledger_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT run_id, response_id, call_id, attempt, tool_name, status, error_class"
            " FROM otelsse_calls ORDER BY decided_at"
        ).fetchall()
    db.close()
    return rows


def client_error_name(client: Client) -> str:
    return client.raises("transport").source.__name__


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_a_disconnect_then_a_fresh_attempt_over_http(
    route: str, server: SSEServer, sync_client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.sqlite"
    first_stream = good_stream(route)
    cut, _ = cut_point(first_stream)
    url = server.route(first_stream.path, Reply(first_stream.body, cut=cut))

    # Attempt 1: the connection drops in the middle of the second call's arguments.
    ledger = SQLiteLedger(path)
    recorder = Recorder()
    with streaming(sync_client, url) as response:
        first = ToolGate(TOOLS, ledger=ledger).run(
            response, execute=recorder.executors("read_file"), run_id="run-42"
        )
    ledger.close()
    assert_first_attempt(first, first_stream, client_error_name(sync_client))
    assert recorder.seen == []
    assert ledger_rows(path) == []  # nothing was ever claimed for execution
    assert_no_content(first, first_stream)

    # Attempt 2: a new gate on the same ledger file, a fresh response for the same run.
    retry = good_stream(route, response_id=f"{first_stream.response_id}-retry")
    server.route(retry.path, Reply(retry.body))
    ledger = SQLiteLedger(path)
    recorder = Recorder()
    with streaming(sync_client, url) as response:
        second = ToolGate(TOOLS, ledger=ledger).run(
            response, execute=recorder.executors("read_file"), run_id="run-42"
        )
    assert_fresh_attempt(second, retry, recorder, attempt=2)
    for sent in first_stream.calls:  # attempt 1's calls were never claimed
        assert ledger.get(CallKey("run-42", first_stream.response_id, sent.id)) is None
    ledger.close()
    assert [record.state for record in first.calls] == [S.QUARANTINED] * len(first.calls)
    rows = ledger_rows(path)
    assert [(row[1], row[2], row[3], row[5]) for row in rows] == [
        (retry.response_id, sent.id, 2, "succeeded") for sent in retry.calls
    ]
    assert SECRET not in repr(rows)


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_a_disconnect_then_a_fresh_attempt_over_async_http(
    route: str, server: SSEServer, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.sqlite"
    first_stream = good_stream(route)
    retry = good_stream(route, response_id=f"{first_stream.response_id}-retry")
    cut, _ = cut_point(first_stream)

    async def attempt(client: Client, stream: Stream, recorder: Recorder) -> GateResult:
        ledger = SQLiteLedger(path)
        try:
            async with astreaming(client, server.url(stream.path)) as response:
                return await ToolGate(TOOLS, ledger=ledger).arun(
                    response, execute=recorder.executors("read_file"), run_id=client.id
                )
        finally:
            ledger.close()

    for number, client in enumerate(ASYNC_CLIENTS):
        server.route(first_stream.path, Reply(first_stream.body, cut=cut))
        recorder = Recorder()
        first = asyncio.run(attempt(client, first_stream, recorder))
        assert first.run_id == client.id
        assert recorder.seen == []
        assert first.attempt == 1
        assert first.fault == "truncated"
        assert first.disconnect_reason == client_error_name(client)
        assert [record.state for record in first.calls] == [S.QUARANTINED] * len(first.calls)

        server.route(retry.path, Reply(retry.body))
        recorder = Recorder()
        second = asyncio.run(attempt(client, retry, recorder))
        assert_fresh_attempt(second, retry, recorder, attempt=2)
        assert len(ledger_rows(path)) == 2 * (number + 1)


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_a_retry_never_continues_the_abandoned_buffer(route: str, tmp_path: Path) -> None:
    """Seed 001: "Never concatenate a new stream with the previous attempt, even if the new
    bytes appear to continue the same JSON text." Attempt 2 is the rest of attempt 1's bytes;
    attempt 3 a whole fresh response; attempt 4 replays attempt 3 (never run twice)."""
    path = tmp_path / "ledger.sqlite"
    stream = good_stream(route)
    cut, _ = cut_point(stream)
    ledger = SQLiteLedger(path)
    gate = ToolGate(TOOLS, ledger=ledger)
    try:
        recorder = Recorder()
        first = run_gate(stream, [stream.body[:cut]], gate=gate, recorder=recorder)
        assert first.fault == "truncated"
        rest = run_gate(stream, [stream.body[cut:]], gate=gate, recorder=recorder)
        assert rest.attempt == 2
        if route == GEMINI:
            # the rest of a cut chunk is not an event; what follows is a whole chunk (the
            # finishReason): a stream with no call, never the cut call completed
            assert rest.calls == ()
        else:
            assert rest.fault is not None
        assert rest.executed == ()
        assert all(record.state is S.QUARANTINED for record in rest.calls)
        assert recorder.seen == []
        assert ledger_rows(path) == []

        retry = good_stream(route, response_id=f"{stream.response_id}-retry")
        fresh = run_gate(retry, gate=gate, recorder=recorder)
        assert_fresh_attempt(fresh, retry, recorder, attempt=3)

        replay = run_gate(retry, gate=gate, recorder=recorder)
        assert replay.attempt == 4
        assert [record.state for record in replay.calls] == [S.REPLAYED, S.REPLAYED]
        assert [record.execution_status for record in replay.calls] == ["succeeded"] * 2
        assert len(recorder.seen) == 2  # still only attempt 3's two runs
    finally:
        ledger.close()


# --------------------------------------------------------------------------------------------
# The sanitized record each call gets
# --------------------------------------------------------------------------------------------

#: Seed 001, "Keep logs useful and sanitized": the compact structured record's fields.
SEED_RECORD_FIELDS = (
    "observed_at", "run_id", "response_id", "item_id", "model_route", "stream_event",
    "tool_name", "buffer_bytes", "terminal_seen", "json_status", "trailing_data",
    "schema_status", "policy_status", "execution_state", "error_class",
)  # fmt: skip
#: The events that end a call's item, per route (what ``stream_event`` may say).
ITEM_TERMINAL_EVENTS = {
    CHAT: {"message"},
    RESPONSES: {"response.function_call_arguments.done", "response.output_item.done"},
    ANTHROPIC: {"content_block_stop"},
    GEMINI: {"message"},
}


@pytest.mark.parametrize("route", TOOL_ROUTES)
def test_every_record_has_the_fields_of_the_sanitized_record(route: str) -> None:
    stream = good_stream(route)
    result = run_gate(stream)
    for record in result.calls:
        fields = record.record()
        missing = [name for name in SEED_RECORD_FIELDS if name not in fields]
        assert missing == [], f"record() lacks the sanitized record's fields {missing}"
        assert fields["model_route"] == route
        assert fields["terminal_seen"] is True
        assert fields["stream_event"] in ITEM_TERMINAL_EVENTS[route]
        observed = datetime.datetime.fromisoformat(fields["observed_at"].replace("Z", "+00:00"))
        assert observed.tzinfo is not None


# --------------------------------------------------------------------------------------------
# (l) The operator workflows
# --------------------------------------------------------------------------------------------

RESPONSES_TOOLS = [
    {"type": "function", "name": "read_file", "parameters": READ_FILE, "strict": True},
    {
        "type": "function",
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        "strict": True,
    },
]


def test_happy_path_operator_workflow(tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "todo.txt").write_text(f"{SECRET} plans\n")
    ledger_path = tmp_path / "ledger.sqlite"

    # 1. Select the model route and load its versioned stream adapter, tool schemas, execution
    #    policy and approval rules.
    route = get_route(RESPONSES)
    assert route.name == RESPONSES
    assert route.proves_item_end  # Responses declares an item's own terminal event
    seen_by_policy: list[ToolCallView] = []

    def policy(view: ToolCallView) -> Decision:
        seen_by_policy.append(view)
        target = (workspace / view.arguments["path"]).resolve()
        inside = target.is_relative_to(workspace.resolve())
        return Decision.APPROVE if inside else Decision.DENY

    telemetry = Telemetry()
    ledger = SQLiteLedger(ledger_path)
    gate = ToolGate(
        RESPONSES_TOOLS,
        policy,
        ledger,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    assert gate.registry is not None
    assert gate.registry.names == {"read_file", "write_file"}

    # 2. Open the stream with execution disabled; assign a run identifier and create an empty
    #    response record. The source checks, at every read, that nothing has run yet.
    read_call = call("call_read01", "read_file", {"path": "notes/todo.txt", "note": SECRET}, 4)
    write_call = call(
        "call_write02", "write_file", {"path": "out.txt", "content": f"{SECRET} result"}, 5
    )
    stream = build(RESPONSES, ["Reading, then writing. ", read_call, write_call])
    chunks = [
        stream.body[a:b]
        for a, b in zip([0, *stream_ends(stream)[:-1]], stream_ends(stream), strict=True)
    ]
    read_so_far: list[int] = []
    ran: list[tuple[str, Any]] = []

    def source() -> Iterator[bytes]:
        for chunk in chunks:
            assert ran == [], "a tool ran while the stream was still being read"
            read_so_far.append(len(chunk))
            yield chunk

    def decided_in_ledger(call_id: str) -> str | None:
        with sqlite3.connect(ledger_path) as db:  # another connection: what is on disk
            row = db.execute(
                "SELECT status FROM otelsse_calls WHERE call_id = ?", (call_id,)
            ).fetchone()
        db.close()
        return None if row is None else str(row[0])

    def read_file(arguments: dict[str, Any]) -> dict[str, Any]:
        # 7. (the decision is on disk before the tool runs)
        assert decided_in_ledger(read_call.id) == "decided"
        assert sum(read_so_far) == len(stream.body)  # only after the response's terminal
        ran.append(("read_file", arguments))
        return {"content": (workspace / arguments["path"]).read_text()}

    def write_file(arguments: dict[str, Any]) -> dict[str, Any]:
        assert decided_in_ledger(write_call.id) == "decided"
        ran.append(("write_file", arguments))
        (workspace / arguments["path"]).write_text(arguments["content"])
        return {"written": len(arguments["content"])}

    result = gate.run(
        source(), RESPONSES, execute={"read_file": read_file, "write_file": write_file},
        run_id="run-42",
    )  # fmt: skip
    assert result.run_id == "run-42"
    assert result.attempt == 1

    # 3. Decode complete SSE messages; normalize each named event, keeping the provider's
    #    event type.
    assert result.report is not None
    assert result.report.event_count == len(stream.marks)
    assert result.last_event_type == "response.completed"

    # 4. One accumulator per output item; text rendered separately.
    assert result.stream is not None
    assert result.stream.text == "Reading, then writing. "
    reading, writing = result.calls
    assert (reading.call_id, writing.call_id) == (read_call.id, write_call.id)
    assert reading.buffer_bytes == read_call.byte_count
    assert writing.buffer_bytes == write_call.byte_count

    # 5. The item's terminal event marks it terminal (not a text-completion event).
    for record in (reading, writing):
        assert record.history[:3] == [S.RECEIVING, S.ITEM_OPEN, S.ITEM_TERMINAL]

    # 6. Parse the whole buffer as one value, no trailing bytes, schema, then policy.
    for record in (reading, writing):
        assert (record.json_status, record.trailing_data) == ("valid", False)
        assert record.schema_status == "valid"
        assert record.policy_decision == "approve"
    assert [(view.name, view.call_id, view.run_id) for view in seen_by_policy] == [
        ("read_file", read_call.id, "run-42"),
        ("write_file", write_call.id, "run-42"),
    ]
    assert [view.arguments for view in seen_by_policy] == [read_call.value(), write_call.value()]

    # 7. Persist the decision before invoking; execute once; capture the structured result on
    #    the same item's record.
    assert ran == [("read_file", read_call.value()), ("write_file", write_call.value())]
    assert reading.output == {"content": f"{SECRET} plans\n"}
    assert writing.output == {"written": len(f"{SECRET} result")}
    assert (workspace / "out.txt").read_text() == f"{SECRET} result"
    assert [record.state for record in result.calls] == [S.EXECUTED, S.EXECUTED]
    assert [record.execution_status for record in result.calls] == ["succeeded", "succeeded"]
    assert decided_in_ledger(read_call.id) == "succeeded"

    # 8. The tool results go back in the follow-up request, matched by call id; the response
    #    record closes only at the overall terminal event.
    follow_up = [
        {"type": "function_call_output", "call_id": record.call_id, "output": record.output}
        for record in result.calls
    ]
    assert [item["call_id"] for item in follow_up] == [read_call.id, write_call.id]
    assert result.report.terminal_seen is True
    assert result.report.outcome.value == "complete"

    # 9. The log holds the terminal marker, validation outcomes, decision and result status,
    #    and no raw arguments.
    for record, sent in zip(result.calls, stream.calls, strict=True):
        fields = record.record()
        observed_at = fields.pop("observed_at")
        assert datetime.datetime.fromisoformat(observed_at.replace("Z", "+00:00")).tzinfo
        assert fields == {
            "run_id": "run-42",
            "attempt": 1,
            "response_id": stream.response_id,
            "item_id": sent.id,
            "model_route": RESPONSES,
            "stream_event": "response.function_call_arguments.done",
            "terminal_seen": True,
            "tool_name": sent.name,
            "state": "executed",
            "buffer_bytes": sent.byte_count,
            "json_status": "valid",
            "trailing_data": False,
            "schema_status": "valid",
            "policy_status": "approve",
            "execution_state": "succeeded",
            "error_class": None,
        }
    (attempt_span,) = telemetry.spans(semconv.GATE_SPAN_NAME)
    assert attempt_span.attributes is not None
    assert attempt_span.attributes[semconv.OUTCOME] == "complete"
    assert attempt_span.attributes[semconv.ROUTE] == RESPONSES
    call_spans = telemetry.spans(semconv.TOOL_CALL_SPAN_NAME)
    assert sorted(
        (
            span.attributes[semconv.GEN_AI_TOOL_CALL_ID],
            span.attributes[semconv.TOOL_CALL_STATE],
            span.attributes[semconv.TOOL_CALL_JSON_STATUS],
            span.attributes[semconv.TOOL_CALL_SCHEMA_STATUS],
            span.attributes[semconv.TOOL_CALL_POLICY],
            span.attributes[semconv.TOOL_CALL_EXECUTION],
        )
        for span in call_spans
        if span.attributes is not None
    ) == [
        (read_call.id, "executed", "valid", "valid", "approve", "succeeded"),
        (write_call.id, "executed", "valid", "valid", "approve", "succeeded"),
    ]
    assert all(span.parent is not None for span in call_spans)
    everything_logged = "\n".join(
        [
            *attribute_values(telemetry.spans(None)),
            json.dumps([record.record() for record in result.calls]),
        ]
    )
    assert SECRET not in everything_logged
    assert SECRET not in repr(ledger_rows(ledger_path))
    executed = {
        point.attributes[semconv.GEN_AI_TOOL_NAME]: point.value
        for point in telemetry.points(semconv.GATE_CALLS.name)
        if point.attributes[semconv.TOOL_CALL_STATE] == "executed"
    }
    assert executed == {"read_file": 1, "write_file": 1}
    ledger.close()
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()


def stream_ends(stream: Stream) -> list[int]:
    return [mark.end for mark in stream.marks]


class Crash(BaseException):
    """The process dies while a tool runs (as a kill would): not an ``Exception``."""


class Cancelled(BaseException):
    """The application stops reading (as a task's cancellation would)."""


def test_error_path_operator_workflow(server: SSEServer, tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.sqlite"
    telemetry = Telemetry()
    client = Client("httpx")

    def new_gate(**options: Any) -> tuple[ToolGate, SQLiteLedger]:
        ledger = SQLiteLedger(ledger_path)  # a new process would open the same file
        gate = ToolGate(
            TOOLS,
            ledger=ledger,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
            **options,
        )
        return gate, ledger

    def call_spans(run_id: str) -> list[tuple[Any, Any]]:
        return [
            (span.attributes[semconv.TOOL_CALL_STATE], span.attributes.get(semconv.ERROR_TYPE))
            for span in telemetry.spans(semconv.TOOL_CALL_SPAN_NAME)
            if span.attributes is not None and span.attributes[semconv.GATE_RUN_ID] == run_id
        ]

    stream = good_stream(ANTHROPIC)
    first_call, second_call = stream.calls
    cut, partial = cut_point(stream)
    url = server.route(stream.path, Reply(stream.body, cut=cut))

    # 1. On a disconnect, stop advancing every affected item toward execution.
    gate, ledger = new_gate()
    recorder = Recorder()
    with streaming(client, url) as response:
        result = gate.run(response, execute=recorder.executors("read_file"), run_id="run-42")
    ledger.close()
    assert result.fault == "truncated"
    assert recorder.seen == []
    assert all(S.POLICY_APPROVED not in record.history for record in result.calls)
    #    A stalled connection (the gate's own idle timeout) and a run the application
    #    cancels stop the same way, each with its own error class for the operator.
    server.route(stream.path, Reply(stream.body, cut=cut, after_cut="stall"))
    stall_gate, stall_ledger = new_gate(idle_timeout=0.5)
    with streaming(client, url) as response:
        stalled = stall_gate.run(
            response, execute=recorder.executors("read_file"), run_id="run-stalled"
        )
    stall_ledger.close()
    assert (stalled.fault, stalled.disconnect_reason) == ("timeout", "ReadTimeout")
    for record in stalled.calls:
        assert_quarantined(record, "timeout")

    def cancelled_source() -> Iterator[bytes]:
        yield stream.body[:cut]
        raise Cancelled

    cancel_gate, cancel_ledger = new_gate()
    with pytest.raises(Cancelled):
        cancel_gate.run(
            cancelled_source(), ANTHROPIC, execute=recorder.executors("read_file"),
            run_id="run-cancelled",
        )  # fmt: skip
    cancel_ledger.close()
    assert recorder.seen == []
    assert call_spans("run-stalled") == [("quarantined", "timeout")] * 2
    assert call_spans("run-cancelled") == [("quarantined", "cancelled")] * 2

    # 2. Mark the affected accumulators QUARANTINED with their byte counts and opaque ids,
    #    without parsing or running them as complete calls.
    first, second = result.calls
    for record in (first, second):
        assert_quarantined(record, "truncated")
        assert (record.run_id, record.response_id) == ("run-42", stream.response_id)
    assert (first.call_id, first.buffer_bytes) == (first_call.id, first_call.byte_count)
    assert (second.call_id, second.buffer_bytes) == (second_call.id, partial)
    assert second.json_status == "unchecked"
    assert second.schema_status == "unchecked"

    # 3. Keep the last valid event type, response id, item id and disconnect reason; no raw
    #    argument buffer in the records, spans or ledger.
    assert result.last_event_type == "content_block_delta"
    assert result.response_id == stream.response_id
    assert result.last_item_id == second_call.id
    assert result.disconnect_reason == "RemoteProtocolError"
    assert_no_content(result, stream)
    assert ledger_rows(ledger_path) == []

    # 4. A retry is a separate attempt: never the old buffer continued, even by bytes that
    #    continue the same JSON text.
    gate, ledger = new_gate()
    continued = gate.run(
        iter([stream.body[cut:]]), ANTHROPIC, execute=recorder.executors("read_file"),
        run_id="run-42",
    )  # fmt: skip
    assert continued.attempt == 2
    assert continued.fault is not None
    assert continued.executed == ()
    assert recorder.seen == []
    retry = good_stream(ANTHROPIC, response_id="msg_gate0002")
    server.route(retry.path, Reply(retry.body))
    with streaming(client, url) as response:
        fresh = gate.run(response, execute=recorder.executors("read_file"), run_id="run-42")
    ledger.close()
    assert_fresh_attempt(fresh, retry, recorder, attempt=3)

    # 5. The executor may have started before a local crash: reconcile, never re-run.
    gate, ledger = new_gate()
    crashing = Recorder()

    def dies(arguments: Any) -> Any:
        crashing.seen.append(("read_file", arguments))
        raise Crash

    crash_stream = good_stream(ANTHROPIC, response_id="msg_gate0003")
    with pytest.raises(Crash):
        gate.run(iter([crash_stream.body]), ANTHROPIC, execute={"read_file": dies}, run_id="run-43")
    ledger.close()
    assert len(crashing.seen) == 1  # it started, and died in the first call
    gate, ledger = new_gate()  # the restarted process
    after = Recorder()
    restarted = gate.run(
        iter([crash_stream.body]), ANTHROPIC, execute=after.executors("read_file"),
        run_id="run-43",
    )  # fmt: skip
    ledger.close()
    crashed, untouched = restarted.calls
    assert crashed.state is S.NEEDS_RECONCILIATION
    assert crashed.execution_status == "decided"
    assert untouched.state is S.EXECUTED  # never started: safe to run
    assert after.seen == [("read_file", crash_stream.calls[1].value())]

    # 6. Repeated contract mismatches escalate (counted by state and error class); schema
    #    checks are never relaxed to let a failing stream through.
    prefix = ID_PREFIX[ANTHROPIC]
    bad = call(f"{prefix}0bad", "read_file", SCHEMA_FAILURES["additionalProperties"])
    for attempt in range(3):
        gate, ledger = new_gate()
        mismatch = build(ANTHROPIC, [bad], response_id=f"msg_mismatch{attempt}")
        refused = gate.run(
            iter([mismatch.body]), ANTHROPIC, execute=recorder.executors("read_file"),
            run_id="run-44",
        )  # fmt: skip
        ledger.close()
        assert refused.attempt == attempt + 1
        assert_quarantined(refused.calls[0], "tool_schema_error")
    assert len(recorder.seen) == 2  # attempt 3's two calls of step 4, nothing since
    schema_quarantines = sum(
        point.value
        for point in telemetry.points(semconv.GATE_CALLS.name)
        if point.attributes[semconv.TOOL_CALL_STATE] == "quarantined"
        and point.attributes.get(semconv.ERROR_TYPE) == "tool_schema_error"
    )
    assert schema_quarantines == 3
    assert SECRET not in "\n".join(attribute_values(telemetry.spans(None)))
    assert SECRET not in repr(ledger_rows(ledger_path))
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()
