"""The flight recorder (``otelsse/recorder.py``, docs/users/recorder.md).

Every stream is recorded the way the instrumentation does it (one ``Tape`` fed the chunks the
live ``StreamMonitor`` gets, at the same times, then ``keep``), loaded back from disk and
replayed: the replay must report what the live monitor reported (every field but the response
id, which is a pseudonym), for every fixture, for a stream of every outcome a body can have,
under every chunking. The files must hold no content (canaries), and stay within their bounds.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import logging
import random
import re
import struct
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otelsse import Limits, Outcome, SSEParser, StreamMonitor, StreamReport
from otelsse._cli import main
from otelsse._core.eventstream import EventStreamParser
from otelsse._core.framers import FRAMERS
from otelsse._monitor import StreamError
from otelsse.recorder import (
    _SKELETONS,
    FORMAT,
    FlightRecorder,
    Recording,
    _is_protocol_value,
    is_recording,
    load_recording,
)
from otelsse.routes import (
    BUILT_IN,
    AnthropicMessagesRoute,
    OpenAIResponsesRoute,
    redaction_rules,
)
from tests import _eventstream as es
from tests._fixtures import BEDROCK_EXPECTED, EDGE_FIXTURES, EXPECTED, read_fixture
from tests._helpers import ANTHROPIC, CHAT, GEMINI, RESPONSES, one_byte_at_a_time, random_split
from tests._tiers import examples
from tests.gate._streams import Call, build, call

_T0 = 1000.0  # perf_counter at the request, for the live monitor and the tape alike
# Enough for one chunk record per byte of the largest fixture read one byte at a time.
_ROOMY = 8 * 1024 * 1024

Chunking = Callable[[bytes], list[bytes]]
CHUNKINGS: dict[str, Chunking] = {
    "whole": lambda body: [body],
    "one-byte": one_byte_at_a_time,
    "random": lambda body: random_split(body, random.Random(len(body))),
}

#: What the recorder keeps of each built-in route, as the route declares it.
_RULES = {route.name: redaction_rules(route.name) for route in BUILT_IN}


class Live(NamedTuple):
    report: StreamReport
    recording: Recording | None


def _record(
    directory: Path,
    body: bytes,
    route: str,
    chunking: Chunking = CHUNKINGS["whole"],
    *,
    limits: Limits | None = None,
    error: StreamError | None = None,
    refused: Any = None,
    **recorder: Any,
) -> Live:
    """Read ``body`` as the instrumentation does: one monitor, one tape, the same chunks at the
    same (uneven) times; keep the tape, and load what was written."""
    recorder = {"sample_rate": 1.0, "max_stream_bytes": _ROOMY, **recorder}
    flight = FlightRecorder(directory, limits=limits, **recorder)
    tape = flight.start(route, _T0)
    monitor = StreamMonitor(route, limits=limits, started_at=_T0)
    if refused is not None:
        monitor.refuse(refused)
    now = _T0
    for step, chunk in enumerate(chunking(body) if refused is None else []):
        now += 0.001 * (1 + step % 7)
        monitor.feed(chunk, now)
        tape.write(chunk, now)
    report = monitor.close(now + 0.25, error=error)
    kept = flight.keep(tape, report)
    return Live(report, None if kept is None else _load(directory, kept))


def _load(directory: Path, recording_id: str) -> Recording:
    (path,) = directory.glob(f"otelsse-*-{recording_id}.json")
    recording = load_recording(path)
    assert recording.id == recording_id
    return recording


# Report fields the stream's vocabulary fills: a value that is no protocol value (say, cut up
# by a damaged body) is redacted, and replays as a placeholder of its length.
_WORD_FIELDS = ("stop_reason", "response_model", "provider_error_code")


def _same_word(now: str | None, was: str | None) -> bool:
    if was is None or _is_protocol_value(was):
        return now == was
    return now is not None and len(now) == len(was) and not _is_protocol_value(now)


def _replays(live: Live) -> Recording:
    """The recording replays to the live report: same outcome, counts, stop, timings."""
    recording = live.recording
    assert recording is not None
    assert recording.outcome == live.report.outcome.value
    assert recording.capture_complete
    replayed = recording.replay()
    for field in dataclasses.fields(StreamReport):
        was, now = getattr(live.report, field.name), getattr(replayed, field.name)
        if field.name in _WORD_FIELDS:
            assert _same_word(now, was), field.name
        elif field.name == "finish_reasons":
            assert len(now) == len(was), field.name
            assert all(map(_same_word, now, was)), field.name
        elif field.name == "response_id":  # pseudonymised: same length
            assert (was is None and now is None) or len(was) == len(now)
        elif isinstance(was, float):
            assert now == pytest.approx(was, rel=1e-9, abs=1e-12), field.name
        else:
            assert now == was, field.name
    return recording


def _skeleton(recording: Recording) -> bytes:
    return b"".join(chunk for _, chunk in recording.chunks)


# -- every fixture ----------------------------------------------------------------------------

_EDGE = sorted(f"edge/{path.name}" for path in EDGE_FIXTURES.glob("*.sse"))
_ALL_FIXTURES = sorted(EXPECTED) + _EDGE


def _route(name: str) -> str:
    # Edge fixtures are judged sniffed (tests/test_monitor.py); the others by their route.
    return EXPECTED[name].route if name in EXPECTED else "auto"


@pytest.mark.matrix  # every fixture and chunking
@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", _ALL_FIXTURES)
def test_every_fixture_replays_to_its_live_report(tmp_path: Path, name: str, chunking: str) -> None:
    body = read_fixture(name)
    live = _record(tmp_path, body, _route(name), CHUNKINGS[chunking])
    recording = _replays(live)
    assert [len(chunk) for _, chunk in recording.chunks] == [
        len(chunk) for chunk in CHUNKINGS[chunking](body)
    ]
    assert len(_skeleton(recording)) == len(body)


@pytest.mark.parametrize("name", _ALL_FIXTURES)
def test_a_stream_stopped_before_its_last_blank_line_replays_to_its_live_report(
    tmp_path: Path, name: str
) -> None:
    """The application stopped reading after the last event's lines, before the blank line
    that would dispatch it: the monitor takes that pending event as read (a line-based client
    acts on a line as it ends), so the skeleton must keep it an event, its JSON JSON."""
    body = read_fixture(name).rstrip(b"\r\n") + b"\n"
    _replays(_record(tmp_path, body, _route(name), error="cancelled"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_sniffed_fixture_replays_sniffed(tmp_path: Path, name: str) -> None:
    live = _record(tmp_path, read_fixture(name), "auto", CHUNKINGS["random"])
    assert _replays(live).route == "auto"


# -- a stream of every outcome a body can have ------------------------------------------------


class Case(NamedTuple):
    body: bytes
    route: str
    limits: Limits | None = None
    error: StreamError | None = None
    refused: str | None = None


def _without_last_event(body: bytes) -> bytes:
    separator = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    return body[: body.rstrip(b"\r\n").rfind(separator) + len(separator)]


def _cases() -> dict[str, Case]:
    chat = read_fixture("real/openai-chat-text.sse")
    tools = read_fixture("real/openai-chat-parallel-tool-calls.sse")
    anthropic = read_fixture("real/anthropic-text-and-two-tool-use.sse")
    responses = read_fixture("real/openai-responses-function-call.sse")
    gemini = read_fixture("real/gemini-function-call.sse")
    first_text = chat.index(b'"content":"') + len(b'"content":"') + 1
    cut_in_call = tools.index(b'"arguments":"') + 40
    error_event = (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )
    return {
        "complete": Case(chat, CHAT),
        "complete-tool-calls": Case(tools, CHAT),
        "incomplete": Case(read_fixture("real/vllm-chat-finish-length.sse"), CHAT),
        "incomplete-tool-input": Case(
            read_fixture("synthetic/anthropic-max-tokens-truncated-tool-input.sse"), ANTHROPIC
        ),
        "truncated-mid-event": Case(chat[: len(chat) // 2], CHAT),
        "truncated-before-done": Case(_without_last_event(chat), CHAT),
        "truncated-inside-a-call": Case(tools[:cut_in_call], CHAT),
        "truncated-responses": Case(_without_last_event(responses), RESPONSES),
        "truncated-gemini": Case(gemini[: len(gemini) // 3], GEMINI),
        "truncated-mid-utf8": Case(read_fixture("edge/chat-cut-mid-utf8.sse"), "auto"),
        "truncated-after-a-lead-byte": Case(chat[:first_text] + b"\xc3", CHAT),
        "truncated-transport": Case(chat[: len(chat) // 3], CHAT, error="transport"),
        "complete-then-transport": Case(chat, CHAT, error="transport"),
        "timeout": Case(chat[: len(chat) // 3], CHAT, error="timeout"),
        "cancelled": Case(tools[:cut_in_call], CHAT, error="cancelled"),
        "provider-error-event": Case(_without_last_event(anthropic) + error_event, ANTHROPIC),
        "provider-error-groq": Case(read_fixture("real/groq-chat-error-event.sse"), CHAT),
        "protocol-error-in-stream": Case(
            read_fixture("edge/anthropic-stop-without-stop-reason.sse"), "auto"
        ),
        "decode-error-in-text": Case(chat[:first_text] + b"\xff\xe2\x82" + chat[first_text:], CHAT),
        "decode-error-fixture": Case(read_fixture("edge/chat-invalid-utf8.sse"), "auto"),
        "payload-error-event": Case(read_fixture("edge/chat-invalid-json-event.sse"), "auto"),
        "payload-error-arguments": Case(
            tools.replace(b'"arguments":"}"', b'"arguments":"]"'), CHAT
        ),
        "payload-error-trailing": Case(
            read_fixture("edge/chat-tool-arguments-two-values.sse"), "auto"
        ),
        "buffer-limit-line": Case(chat, CHAT, Limits(max_line_bytes=120)),
        "buffer-limit-event": Case(
            b"data: short line\n" * 40, "generic", Limits(max_event_bytes=300)
        ),
        "buffer-limit-accumulator": Case(tools, CHAT, Limits(max_tool_argument_chars=6)),
        "buffer-limit-calls": Case(tools, CHAT, Limits(max_tool_calls=1)),
        "buffer-limit-parts": Case(
            read_fixture("real/openai-chat-multiple-choices.sse"), CHAT, Limits(max_parts=1)
        ),
        "buffer-limit-events": Case(anthropic, ANTHROPIC, Limits(max_events=5)),
        "eof-unverified": Case(read_fixture("edge/generic-clean-eof.sse"), "auto"),
        "complete-cohere-sniffed": Case(read_fixture("real/cohere-v2-chat-tool-call.sse"), "auto"),
        "refused-rate-limited": Case(b"", CHAT, refused="rate_limited"),
        "refused-http-status": Case(b"", RESPONSES, refused="http_status"),
        "refused-media-type": Case(b"", ANTHROPIC, refused="media_type"),
        "refused-no-content": Case(b"", GEMINI, refused="no_content"),
    }


CASES = _cases()


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", CASES)
def test_a_stream_of_every_outcome_replays_to_its_live_report(
    tmp_path: Path, case: str, chunking: str
) -> None:
    body, route, limits, error, refused = CASES[case]
    _replays(
        _record(
            tmp_path, body, route, CHUNKINGS[chunking], limits=limits, error=error, refused=refused
        )
    )


def test_the_cases_reach_every_outcome_but_internal_error(tmp_path: Path) -> None:
    reached = set()
    for name, (body, route, limits, error, refused) in CASES.items():
        live = _record(tmp_path / name, body, route, limits=limits, error=error, refused=refused)
        reached.add(live.report.outcome)
    assert reached == set(Outcome) - {Outcome.INTERNAL_ERROR}


def test_an_internal_error_replays_to_the_verdict_its_body_deserved(tmp_path: Path) -> None:
    """``internal_error`` is the instrumentation's failure, not the body's: the recording keeps
    the live verdict, and the replay says what the body itself was."""
    body = read_fixture("real/openai-chat-text.sse")
    flight = FlightRecorder(tmp_path)
    tape = flight.start(CHAT, _T0)
    monitor = StreamMonitor(CHAT, started_at=_T0)
    monitor.feed(body, _T0 + 0.1)
    tape.write(body, _T0 + 0.1)
    report = dataclasses.replace(monitor.close(_T0 + 0.2), outcome=Outcome.INTERNAL_ERROR)
    recording = _load(tmp_path, str(flight.keep(tape, report)))
    assert recording.outcome == "internal_error"
    assert recording.replay().outcome is Outcome.COMPLETE


# -- random bodies: cuts, corruption, chunkings; random tool-argument texts --------------------

_SMALL_FIXTURES = [name for name in _ALL_FIXTURES if len(read_fixture(name)) <= 16 * 1024]
_SNIPPETS = [
    b'"', b"\\", b"\\u12", b"\\ud83d", b"\\ud83d\\ude00", b"\xff", b"\xe2\x82", b"\xc3\xa9",
    b"\xf0\x9f\x98", b"\n", b"\r", b"\r\n", b"\n\n", b"{", b"}", b"[", b"]", b",", b":",
    b"1e999", b"-0", b"01", b"tru", b"null", b"data: ", b": note\n", b"event: error\n",
    b'\\"', b"\\n", b"\\u0000", b"\x00", b" ", b"x", b"99999", b"\xef\xbb\xbf",
]  # fmt: skip
_LIMITS = [
    None,
    Limits(max_line_bytes=300),
    Limits(max_event_bytes=500),
    Limits(max_tool_argument_chars=20),
    Limits(max_parts=1),
    Limits(max_events=5),
]


@st.composite
def _damaged(draw: st.DrawFn) -> tuple[bytes, str]:
    name = draw(st.sampled_from(_SMALL_FIXTURES))
    body = bytearray(read_fixture(name))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(body)))
        if draw(st.booleans()):
            body[at:at] = draw(st.sampled_from(_SNIPPETS))
        else:
            del body[at : at + draw(st.integers(1, 8))]
    if draw(st.booleans()):
        del body[draw(st.integers(0, len(body))) :]
    return bytes(body), draw(st.sampled_from([_route(name), "auto", "generic"]))


@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    damaged=_damaged(),
    seed=st.integers(0, 2**32),
    error=st.sampled_from([None, "transport", "timeout", "cancelled"]),
    limits=st.sampled_from(_LIMITS),
)
def test_a_cut_or_corrupted_fixture_replays_to_its_live_report(
    tmp_path_factory: pytest.TempPathFactory,
    damaged: tuple[bytes, str],
    seed: int,
    error: StreamError | None,
    limits: Limits | None,
) -> None:
    body, route = damaged
    chunking = lambda data: random_split(data, random.Random(seed))  # noqa: E731
    directory = tmp_path_factory.mktemp("damaged")
    _replays(_record(directory, body, route, chunking, limits=limits, error=error))


# Argument text from JSON's own characters and the ones that break it.
_ARGUMENT_TEXT = st.text(
    alphabet=st.sampled_from(
        [*'{}[]:," \t\n\\u0aF9-+.eEtrufalsn#', "é", "中", "😀", "\x0b", "\x01"]
    ),
    max_size=30,
) | st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
).map(lambda value: json.dumps(value, ensure_ascii=False))


@st.composite
def _calls(draw: st.DrawFn) -> list[Call]:
    calls = []
    for number in range(draw(st.integers(1, 3))):
        text = draw(_ARGUMENT_TEXT)
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        calls.append(
            Call(f"call_{number}", f"tool_{number}", tuple(p for p in pieces if p) or ("",))
        )
    return calls


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    route=st.sampled_from([CHAT, RESPONSES, ANTHROPIC]),
    calls=_calls(),
    interleave=st.booleans(),
    multiline=st.booleans(),
    late=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_any_tool_argument_text_replays_to_the_same_verdict(
    tmp_path_factory: pytest.TempPathFactory,
    route: str,
    calls: list[Call],
    interleave: bool,
    multiline: bool,
    late: bool,
    seed: int,
) -> None:
    """Valid, invalid, trailing, empty, split anywhere (inside escapes, literals, numbers):
    the lexer keeps each call's verdict."""
    stream = build(
        route,
        ["Let me check.", *calls],
        interleave=interleave and route != ANTHROPIC,
        multiline=multiline,
        late_fragment=(0,) if late else (),
    )
    chunking = lambda data: random_split(data, random.Random(seed))  # noqa: E731
    live = _record(tmp_path_factory.mktemp("calls"), stream.body, route, chunking)
    _replays(live)


# -- no content on disk -------------------------------------------------------------------------

_CANARY_TEXT = "CANARYTEXT ünïcödé 中文 😀"
_CANARY_CALL = call(
    "call_CANARYID7",
    "canary_tool_name",
    {"CANARYKEY": "CANARYVALUE", "n": 918273645, "x": [True, None, 0.918273645, "CANARYITEM\n"]},
    pieces=5,
)
_CANARIES = ("CANARY", "canary", "918273645", "ünïcödé", "中文", "😀", "FOLLOWUPTEXT")


def _assert_no_canary(recording: Recording, directory: Path) -> None:
    skeleton = _skeleton(recording).decode("utf-8", "replace")
    files = b"".join(path.read_bytes() for path in directory.iterdir())
    for canary in _CANARIES:
        assert canary not in skeleton
        assert canary.encode() not in files


_FAULTS: dict[str, dict[str, Any]] = {
    "none": {},
    "error": {"error_before_terminal": True},
    "omit-final": {"omit_final": True},
    "malformed": {"malformed": (0,)},
    "trailing": {"trailing": (0,)},
    "unknown-event": {"unknown_event": True},
    "multiline": {"multiline": True},
    "malformed-event": {"malformed_event": True},
}


@pytest.mark.parametrize("fault", _FAULTS)
@pytest.mark.parametrize("route", [CHAT, RESPONSES, ANTHROPIC, GEMINI])
def test_canaries_never_reach_the_disk(tmp_path: Path, route: str, fault: str) -> None:
    stream = build(
        route,
        [_CANARY_TEXT, _CANARY_CALL, "FOLLOWUPTEXT"],
        response_id="resp_CANARYRESPONSE",
        **_FAULTS[fault],
    )
    body = b": CANARYCOMMENT heartbeat\n\n" + stream.body
    recording = _replays(_record(tmp_path, body, route, CHUNKINGS["random"]))
    _assert_no_canary(recording, tmp_path)


def test_canaries_in_error_messages_comments_ids_and_non_json_data_never_reach_the_disk(
    tmp_path: Path,
) -> None:
    body = (
        b": CANARYCOMMENT\n"
        b"id: CANARYSSEID\n"
        b"x-CANARYFIELD: CANARYVALUE\n"
        b"CANARYLINE\n"
        b"data: CANARY not json 918273645\n\n"
        b'data: {"error": {"message": "CANARYMESSAGE", "type": "server_error", "code": "boom"}}\n\n'
        b'data: {"id": "CANARYID", "choices": [{"index": 0, "delta": {"content": "CANARY"}}]}\n\n'
        b"data: [DONE] CANARYAFTERDONE\n\n"
        b"data: CANARYPENDING"
    )
    live = _record(tmp_path, body, CHAT, CHUNKINGS["one-byte"])
    recording = _replays(live)
    _assert_no_canary(recording, tmp_path)
    assert live.report.provider_error_code == "boom"  # vocabulary: kept


# -- free text under any key: only a route's protocol values are kept verbatim ------------------

# Every key a route reads text, code, arguments or ids from (otelsse/routes/*.py), every key a
# provider sends content under (code interpreter code and logs, search queries, error messages,
# a failed generation), and every key the recorder keeps or pseudonymises a value of.
_CONTENT_KEYS = sorted(
    {
        "text", "delta", "content", "refusal", "reasoning", "reasoning_content", "thinking",
        "signature", "arguments", "partial_json", "input", "args", "output", "outputs", "logs",
        "code", "query", "queries", "url", "title", "result", "name", "id", "call_id", "item_id",
        "tool_use_id", "responseId", "previous_response_id", "message", "finishMessage",
        "failed_generation", "param", "instructions", "summary", "error", "stdout", "stderr",
        "command", "language", "outcome", "model", "modelVersion", "type", "object", "role",
        "status", "reason", "finish_reason", "stop_reason", "finishReason", "blockReason",
    }.union(
        *(
            rules.words | rules.errors | rules.ids | rules.numbers | rules.usage
            | rules.arguments | (rules.opaque or frozenset()) | (rules.fragments or frozenset())
            for rules in _RULES.values()
        )
    )
)  # fmt: skip
# The keys some route keeps a value of wherever it is: a token-shaped canary there is kept.
_WORD_KEYS = frozenset().union(*(rules.words for rules in _RULES.values()))
# A program, a sentence: free text, whatever key it is under.
_FREE = 'x = "CANARY13 Ünïcode 中文 😀"; print(x)'
# Shaped like a protocol value: kept under a route's vocabulary, and under no other key.
_TOKEN = "CANARY13_token"
_FREE_PIECES = ("CANARY13", "Ünïcode", "中文", "😀")


def _event(payload: Any, name: str | None, number: int) -> bytes:
    data = json.dumps(payload, ensure_ascii=number % 2 == 0)  # raw and escaped text alike
    return (b"" if name is None else f"event: {name}\n".encode()) + f"data: {data}\n\n".encode()


def _canary_body(kinds: list[str | None]) -> bytes:
    """Each key holding the canaries at an event's top level, inside objects and arrays (where
    each route reads its text, calls and stops), inside an error object, at an error event's top
    level; an SSE event name of free text; each route's stop reason; each event kind (a route's
    ``type``, None for none) with every key at once. Stops and errors last: they end a route."""
    events: list[tuple[Any, str | None]] = []
    for number, key in enumerate(sorted(_CONTENT_KEYS, key=lambda key: key == "error")):
        kind = kinds[number % len(kinds)]
        head = {} if kind is None else {"type": kind}
        for canary in (_FREE, _TOKEN) if key not in _WORD_KEYS else (_FREE,):
            inner = {key: canary}
            events.append((head | inner, kind))
            nested = dict.fromkeys(("item", "response", "part", "content_block", "delta"), inner)
            events.append((
                head | nested | {
                    "index": 0,
                    "choices": [{"index": 0, "delta": inner}, {"index": 1} | inner],
                    "candidates": [{"content": {"parts": [inner]}}, {"index": 1} | inner],
                    "message": inner, "tools": [inner, [inner]], "usage": inner,
                },
                kind,
            ))  # fmt: skip
    events.append(({}, _FREE))
    events.extend([
        ({"choices": [{"index": 7, "finish_reason": _FREE}]}, None),
        ({"candidates": [{"index": 7, "finishReason": _FREE}]}, None),
        ({"type": "message_delta", "delta": {"stop_reason": _FREE}}, None),
        ({"type": "response.incomplete", "response": {"incomplete_details": {"reason": _FREE}}},
         None),
    ])  # fmt: skip
    for kind in kinds:
        head = {} if kind is None else {"type": kind}
        events.append((head | {key: _FREE for key in _CONTENT_KEYS if key != "type"}, kind))
    for key in _CONTENT_KEYS:
        events.append(({"error": {key: _FREE}, "response": {"error": {key: _FREE}}}, None))
        events.append(({"type": "error"} | {key: _FREE}, "error"))
        events.append(({key: _FREE}, "error"))
    return b"".join(_event(payload, name, number) for number, (payload, name) in enumerate(events))


def _assert_neither_canary(recording: Recording, directory: Path) -> None:
    """Neither canary, in any form: raw or JSON-escaped in the files, in the skeleton, in what
    its JSON strings and event names decode to."""
    files = b"".join(path.read_bytes() for path in directory.iterdir())
    skeleton = _skeleton(recording)
    decoded = [skeleton.decode("utf-8", "replace")]
    for event in SSEParser().feed(skeleton):
        decoded.append(event.event)
        try:
            decoded.append(json.dumps(json.loads(event.data), ensure_ascii=False))
        except ValueError:
            pass
    for piece in (*_FREE_PIECES, _TOKEN):
        for form in (piece, json.dumps(piece)[1:-1]):
            assert form.encode() not in files, form
        assert not [text for text in decoded if piece in text], piece


# Each route's event kinds, but those that end it (they come last, in ``_canary_body``).
_ROUTE_KINDS: dict[str, list[str | None]] = {
    CHAT: [None],
    RESPONSES: sorted(
        set(OpenAIResponsesRoute.handlers)
        - {"error", "response.completed", "response.incomplete", "response.failed"}
    ),
    ANTHROPIC: sorted(set(AnthropicMessagesRoute.handlers) - {"error", "message_stop"}),
    GEMINI: [None],
}
_ROUTE_KINDS["generic"] = _ROUTE_KINDS["auto"] = [
    None,
    *_ROUTE_KINDS[RESPONSES],
    *_ROUTE_KINDS[ANTHROPIC],
    "other",
]


@pytest.mark.parametrize("route", _ROUTE_KINDS)
def test_free_text_under_any_key_never_reaches_the_disk(tmp_path: Path, route: str) -> None:
    """A value is kept verbatim only where the route declares it a protocol value (a bounded
    token, and an error code only in an error): free text under any key (a vocabulary key, a
    top-level ``code``) is redacted, and the replay still reaches the live outcome."""
    live = _record(tmp_path, _canary_body(_ROUTE_KINDS[route]), route)
    recording = live.recording
    assert recording is not None
    assert recording.replay().outcome is live.report.outcome
    if route != "generic":  # the route read a free-text stop reason, which the file also holds
        assert "CANARY13" in str(live.report.stop_reason)
    _assert_neither_canary(recording, tmp_path)


def _code_streams() -> dict[str, tuple[str, bytes]]:
    """Code the model wrote, where each provider sends it (documented shapes): the Responses
    code interpreter's ``response.code_interpreter_call_code.*`` events and item, Gemini's
    ``executableCode`` and ``codeExecutionResult`` parts, Anthropic's ``code_execution`` tool."""
    code, logs = _TOKEN, f"{_FREE}\n{_TOKEN}"
    item = {"id": "ci_1", "type": "code_interpreter_call", "status": "in_progress", "code": "",
            "container_id": "cntr_1", "outputs": None}  # fmt: skip
    done = item | {"status": "completed", "code": code, "outputs": [{"type": "logs", "logs": logs}]}

    def step(kind: str, **fields: Any) -> dict[str, Any]:
        event = f"response.code_interpreter_call{kind}"
        return {"type": event, "output_index": 0, "item_id": "ci_1", **fields}

    responses = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        step(".in_progress"),
        step("_code.delta", delta=code),
        step("_code.delta", delta=_FREE),
        step("_code.done", code=code),
        step("_code.done", code=_FREE),
        step(".completed"),
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    ]
    for number, event in enumerate(responses):
        event["sequence_number"] = number
    gemini = [{"candidates": [{"index": 0, "content": {"role": "model", "parts": [
        {"executableCode": {"language": "PYTHON", "code": code}},
        {"executableCode": {"language": "PYTHON", "code": _FREE}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": logs}},
    ]}}]}]  # fmt: skip
    anthropic = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
         "model": "claude-sonnet-4-5", "content": [], "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use",
         "id": "srvtoolu_1", "name": "code_execution", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
         "partial_json": json.dumps({"code": _FREE})}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
         "type": "code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {
         "type": "code_execution_result", "stdout": logs, "stderr": code, "return_code": 0}}},
        {"type": "content_block_stop", "index": 1},
    ]  # fmt: skip

    def body(events: list[dict[str, Any]], named: bool) -> bytes:
        return b"".join(
            _event(event, event["type"] if named else None, number)
            for number, event in enumerate(events)
        )

    return {
        RESPONSES: (RESPONSES, body(responses, True)),
        GEMINI: (GEMINI, body(gemini, False)),
        ANTHROPIC: (ANTHROPIC, body(anthropic, True)),
        "auto": ("auto", body(responses, False)),
    }


_CODE_STREAMS = _code_streams()


@pytest.mark.parametrize("stream", _CODE_STREAMS)
def test_the_code_a_model_writes_never_reaches_the_disk(tmp_path: Path, stream: str) -> None:
    """A code interpreter's code (a top-level ``code``, a one-word program too) and its output
    are content: only an error's ``code`` is an error code."""
    route, body = _CODE_STREAMS[stream]
    recording = _replays(_record(tmp_path, body, route, CHUNKINGS["random"]))
    _assert_neither_canary(recording, tmp_path)


# What the routes judge by (docs/users/recorder.md): kept verbatim, so never a canary.
_VOCABULARY_KEYS = {
    "type", "object", "role", "finish_reason", "stop_reason", "finishReason", "blockReason",
    "status", "model", "modelVersion", "reason", "code", "stopReason", "completionReason",
    "amazon-bedrock-guardrailAction", "kind", "state", "jsonrpc", "method", "resultType",
}  # fmt: skip
_WORD = re.compile(r"[A-Za-z]{6,}")


def _content_words(body: bytes, events: list[tuple[str, str]] | None = None) -> set[str]:
    """Words of the body's content (string values, comments, non-JSON data) that are nowhere
    else in it (JSON keys, vocabulary values, event names, ``[DONE]``). ``events``: its
    (name, data) when it is no SSE (``_frame_events``)."""
    content: set[str] = set()
    kept: set[str] = {"DONE", "REDACTED"}

    def walk(value: Any, key: str | None) -> None:
        if isinstance(value, dict):
            for name, item in value.items():
                kept.update(_WORD.findall(name))
                walk(item, name)
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
        elif isinstance(value, str):
            (kept if key in _VOCABULARY_KEYS else content).update(_WORD.findall(value))

    sse = events is None
    if events is None:
        events = [(event.event, event.data) for event in SSEParser().feed(body)]
    for name, data in events:
        kept.update(_WORD.findall(name))
        try:
            walk(json.loads(data), None)
        except ValueError:
            content.update(_WORD.findall(data))
    for line in re.split(rb"\r\n|\r|\n", body) if sse else ():
        if line.startswith(b":"):
            content.update(_WORD.findall(line.decode("utf-8", "replace")))
    # A word inside a kept one (``thread`` of a ``thread_1`` id, in the key ``threadId``) is in
    # every skeleton: it cannot tell whether content leaked.
    return {word for word in content - kept if not any(word in other for other in kept)}


@pytest.mark.parametrize("name", _ALL_FIXTURES)
def test_no_word_of_a_fixtures_content_reaches_the_disk(tmp_path: Path, name: str) -> None:
    """Each fixture's own text, reasoning, tool names, arguments, ids and error messages are its
    canaries: none of their words is in the skeleton."""
    body = read_fixture(name)
    recording = _replays(_record(tmp_path, body, _route(name)))
    canaries = _content_words(body)
    skeleton = _skeleton(recording).decode("utf-8", "replace")
    # Whole words: a word of the text may be part of a kept one ("complete" of the status
    # "completed"); a longer word the text holds is a canary of its own.
    words = set(_WORD.findall(skeleton))
    assert not canaries & words


# -- the skeleton's conventions (docs/users/recorder.md) ----------------------------------------


# (line, what it becomes) for every convention of docs/users/recorder.md; CRLF framing.
_CONVENTIONS = [
    (b": keepalive", b":[REDACTED]"),
    (b"event: message", b"event: message"),
    (
        b'data: {"type": "x", "text": "Hello, world",',
        b'data: {"type": "x", "text": "[REDACTED][R",',
    ),
    (
        b'data: "n": 42.5, "ok": true, "v": null, "index": 7,',
        b'data: "n": 10.0, "ok": true, "v": null, "index": 7,',
    ),
    (
        b'data:  "wide": "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80",',
        b'data:  "wide": "\xc2\xa4\xe2\x96\x88\xf0\x9f\x94\x92",',
    ),
    (b'data: "esc": "a\\n\\u00e9\\ud83d\\ude00",', b'data: "esc": "[\\/\\u00a4\\ud83d\\udd12",'),
    (b'data: "bad": "\xff\xe2\x82z",', b'data: "bad": "\xff\xe1\x80E",'),
]


def test_the_skeleton_conventions(tmp_path: Path) -> None:
    ids = b'data: "id": "abc", "item_id": "abc", "call_id": "abd"}'
    body = b"".join(line + b"\r\n" for line, _ in _CONVENTIONS) + ids + b"\r\n\r\n"
    skeleton = _skeleton(_replays(_record(tmp_path, body, RESPONSES))).split(b"\r\n")
    assert skeleton[: len(_CONVENTIONS)] == [kept for _, kept in _CONVENTIONS]
    # Ids: the same stand-in for the same id, another for another, each of its length.
    found = re.fullmatch(
        rb'data: "id": "(.*)", "item_id": "(.*)", "call_id": "(.*)"}', skeleton[-3]
    )
    assert found is not None
    same, again, other = found.groups()
    assert same == again != other
    assert len(same) == len(other) == 3
    assert b"abc" not in skeleton[-3]


def test_tool_arguments_keep_their_json_shape(tmp_path: Path) -> None:
    arguments = '{"city": "Paris", "days": 12, "metric": true, "tags": ["a\\n", null], "x": -0.5e3}'
    stream = build(
        CHAT, [Call("call_1", "weather", (arguments[:9], arguments[9:30], arguments[30:]))]
    )
    recording = _replays(_record(tmp_path, stream.body, CHAT, CHUNKINGS["one-byte"]))
    fragments = [
        tool["function"].get("arguments", "")
        for data in re.findall(rb"^data: (\{.*)$", _skeleton(recording), re.M)
        for choice in json.loads(data).get("choices") or ()
        for tool in choice["delta"].get("tool_calls") or ()
    ]
    assert "".join(fragments) == (
        '{"[RED": "[REDA", "[RED": 10, "[REDAC": true, "[RED": ["[\\n", null], "[": -0.1e3}'
    )


# -- bounds ---------------------------------------------------------------------------------


def _failing(flight: FlightRecorder, body: bytes = b"data: {}\n\n") -> str | None:
    """Keep one stream that ends ``payload_error``; its id."""
    tape = flight.start(CHAT, _T0)
    monitor = StreamMonitor(CHAT, started_at=_T0)
    monitor.feed(body, _T0 + 0.1)
    tape.write(body, _T0 + 0.1)
    return flight.keep(tape, monitor.close(_T0 + 0.2))


def _recordings(directory: Path) -> list[Path]:
    return sorted(directory.glob("otelsse-*.json"))


def test_the_ring_keeps_the_newest_max_recordings_and_leaves_other_files_alone(
    tmp_path: Path,
) -> None:
    foreign = [tmp_path / "notes.txt", tmp_path / "otelsse-mine.json"]
    for path in foreign:
        path.write_text("not a recording")
    flight = FlightRecorder(tmp_path, max_recordings=3)
    ids = [_failing(flight) for _ in range(5)]
    assert [
        load_recording(path).id for path in _recordings(tmp_path) if path not in foreign
    ] == ids[2:]
    assert all(path.read_text() == "not a recording" for path in foreign)


def test_the_ring_stays_within_max_total_bytes_oldest_first(tmp_path: Path) -> None:
    body = b"data: {" + b" " * 2000 + b"\n\n"
    probe = FlightRecorder(tmp_path / "probe")
    _failing(probe, body)
    (one,) = _recordings(tmp_path / "probe")
    size = one.stat().st_size
    flight = FlightRecorder(tmp_path / "ring", max_total_bytes=int(size * 2.5))
    ids = [_failing(flight, body) for _ in range(4)]
    kept = _recordings(tmp_path / "ring")
    assert [load_recording(path).id for path in kept] == ids[2:]
    assert sum(path.stat().st_size for path in kept) <= int(size * 2.5)


@pytest.mark.parametrize("bound", ["max_recordings", "max_total_bytes"])
def test_an_entry_the_ring_cannot_remove_is_skipped_and_the_bounds_hold_over_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bound: str
) -> None:
    """A directory named like the oldest recording (``os.unlink`` refuses it, even as root):
    every ``keep()`` still succeeds, the newest three recordings stay, the entry is left alone,
    and each failed removal is counted (the first one logged)."""
    probe = FlightRecorder(tmp_path / "probe")
    _failing(probe)
    (one,) = _recordings(tmp_path / "probe")
    ring = tmp_path / "ring"
    stuck = ring / f"otelsse-{0:020d}-{0:016x}.json"
    stuck.mkdir(parents=True)
    (stuck / "inside").write_bytes(b"not a recording")
    limit = {"max_recordings": 3, "max_total_bytes": int(one.stat().st_size * 3.5)}[bound]
    flight = FlightRecorder(ring, **{bound: limit})
    with caplog.at_level(logging.DEBUG, logger="otelsse"):
        ids = [_failing(flight) for _ in range(8)]
    assert None not in ids
    assert [load_recording(path).id for path in _recordings(ring) if path != stuck] == ids[-3:]
    assert (stuck / "inside").read_bytes() == b"not a recording"
    # Once per keep() past the bound: from the third for the count (the entry counts until it
    # fails); for bytes from the fourth, or sooner by the directory's own (filesystem's) size.
    assert flight.prune_failures in {"max_recordings": {6}, "max_total_bytes": range(5, 9)}[bound]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert stuck.name in warnings[0].getMessage()


def test_a_recording_larger_than_the_whole_ring_is_not_kept(tmp_path: Path) -> None:
    flight = FlightRecorder(tmp_path, max_total_bytes=100)
    assert _failing(flight) is None
    assert _recordings(tmp_path) == []
    assert [path.name for path in tmp_path.iterdir()] == []  # no temporary file either


def test_a_tape_is_kept_once(tmp_path: Path) -> None:
    flight = FlightRecorder(tmp_path)
    tape = flight.start(CHAT, _T0)
    tape.write(b"data: {}\n\n", _T0)
    report = StreamReport(route=CHAT, outcome=Outcome.PAYLOAD_ERROR)
    assert flight.keep(tape, report) is not None
    assert flight.keep(tape, report) is None
    assert len(_recordings(tmp_path)) == 1


def test_the_capture_stops_at_max_stream_bytes_and_says_so(tmp_path: Path) -> None:
    body = read_fixture("real/openai-chat-text.sse")
    live = _record(tmp_path, body, CHAT, CHUNKINGS["random"], max_stream_bytes=1000)
    assert live.report.outcome is Outcome.COMPLETE
    recording = live.recording
    assert recording is not None
    assert not recording.capture_complete
    assert len(_skeleton(recording)) == 1000
    # The replay ends where the capture did.
    assert recording.replay().outcome is Outcome.TRUNCATED


@pytest.mark.parametrize("chunk_size", [1, 900])
def test_a_tape_holds_at_most_its_bounds_in_memory(tmp_path: Path, chunk_size: int) -> None:
    bound = 64 * 1024
    flight = FlightRecorder(tmp_path, max_stream_bytes=bound)
    tape = flight.start(CHAT, _T0)
    chunk = b"x" * chunk_size
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(200_000 // chunk_size + 20_000):
            tape.write(chunk, _T0 + step)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The body and the chunk index, each at most the bound (plus growth slack).
    assert held <= 2 * bound * 1.25
    report = StreamReport(route=CHAT, outcome=Outcome.TRUNCATED)
    recording = _load(tmp_path, str(flight.keep(tape, report)))
    assert not recording.capture_complete


# -- sampling -------------------------------------------------------------------------------


def test_a_complete_stream_is_kept_only_when_sampled(tmp_path: Path) -> None:
    body = read_fixture("real/openai-chat-text.sse")
    assert _record(tmp_path / "never", body, CHAT, sample_rate=0.0).recording is None
    assert _recordings(tmp_path / "never") == []
    kept = _record(tmp_path / "always", body, CHAT, sample_rate=1.0).recording
    assert kept is not None
    assert kept.sampled
    failing = _record(tmp_path / "failing", body[:100], CHAT, sample_rate=0.0).recording
    assert failing is not None
    assert not failing.sampled


def test_the_sample_is_drawn_at_start(tmp_path: Path) -> None:
    draws = iter([0.2, 0.7])
    flight = FlightRecorder(tmp_path, sample_rate=0.5, random=lambda: next(draws))
    first, second = flight.start(CHAT, _T0), flight.start(CHAT, _T0)
    report = StreamReport(route=CHAT, outcome=Outcome.COMPLETE)
    assert flight.keep(second, report) is None
    assert flight.keep(first, report) is not None


@pytest.mark.parametrize(
    "arguments",
    [
        {"sample_rate": 1.5},
        {"sample_rate": -0.1},
        {"max_recordings": 0},
        {"max_total_bytes": 0},
        {"max_stream_bytes": 0},
    ],
)
def test_bounds_are_checked(tmp_path: Path, arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(arguments))):
        FlightRecorder(tmp_path, **arguments)


# -- the file ---------------------------------------------------------------------------------


def test_the_file_is_versioned_json_with_base64_chunks_and_counts(tmp_path: Path) -> None:
    body = read_fixture("real/openai-chat-parallel-tool-calls.sse")
    live = _record(tmp_path, body[:-40], CHAT, CHUNKINGS["random"], error="transport")
    (path,) = _recordings(tmp_path)
    record = json.loads(path.read_bytes())
    assert record["format"] == FORMAT == "otelsse-recording/1"
    assert re.fullmatch(r"otelsse-\d{20}-[0-9a-f]{16}\.json", path.name)
    assert re.fullmatch(r"[0-9a-f]{16}", record["id"])
    assert record["route"] == record["judged_as"] == CHAT
    assert (record["outcome"], record["error"]) == ("truncated", "transport")
    assert record["capture_complete"] is True
    assert record["report"]["event_count"] == live.report.event_count
    assert record["report"]["bytes_received"] == len(body) - 40
    assert record["report"]["stop_reason"] == live.report.stop_reason
    assert record["limits"] == dataclasses.asdict(Limits())
    assert sum(len(base64.b64decode(chunk)) for _, chunk in record["chunks"]) == len(body) - 40
    assert is_recording(path.read_bytes())
    # Pretty-printed (``jq .``), it is still a recording.
    pretty = _write(tmp_path / "pretty.json", json.dumps(record, indent=2).encode())
    assert is_recording(pretty.read_bytes())
    assert load_recording(pretty).replay().outcome is Outcome.TRUNCATED


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "data",
    [b"", b"data: {}\n\n", b'{"format": "something-else"}', b"\x00\xff" * 10, b"[1, 2]"],
)
def test_other_files_are_not_recordings(tmp_path: Path, data: bytes) -> None:
    assert not is_recording(data)
    with pytest.raises(ValueError, match="not an otelsse recording"):
        load_recording(_write(tmp_path / "file", data))


def _recorded(tmp_path: Path) -> dict[str, Any]:
    _failing(FlightRecorder(tmp_path))
    (path,) = _recordings(tmp_path)
    return json.loads(path.read_bytes())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "otelsse-recording/2"}, "format 'otelsse-recording/2'"),
        ({"chunks": [[0.1, "not base64!"]]}, "damaged"),
        ({"outcome": "fine"}, "damaged"),
        ({"error": "meteor"}, "damaged"),
        ({"refused": "teapot"}, "damaged"),
        ({"capture_complete": 1}, "damaged"),
        ({"limits": {}}, "damaged"),
    ],
)
def test_a_wrong_version_or_a_damaged_recording_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    record = _recorded(tmp_path) | change
    data = json.dumps(record, separators=(",", ":")).encode()
    assert is_recording(data)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_recording(_write(tmp_path / "changed.json", data))


def test_a_cut_recording_is_refused(tmp_path: Path) -> None:
    _failing(FlightRecorder(tmp_path))
    (path,) = _recordings(tmp_path)
    data = path.read_bytes()[:-30]
    assert is_recording(data)
    with pytest.raises(ValueError, match="not valid JSON"):
        load_recording(_write(tmp_path / "cut.json", data))


def test_the_recording_id_names_its_file_and_the_rest_of_the_ring(tmp_path: Path) -> None:
    flight = FlightRecorder(tmp_path)
    ids = [_failing(flight) for _ in range(3)]
    assert [path.name.split("-")[-1] for path in _recordings(tmp_path)] == [
        f"{i}.json" for i in ids
    ]


def test_the_documented_vocabulary_is_the_recorders() -> None:
    """docs/users/recorder.md's table names, per route, what its ``redaction`` keeps and
    pseudonymises."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "users" / "recorder.md").read_text(
        encoding="utf-8"
    )
    lines = doc.splitlines()
    header = [cell.strip() for cell in lines[lines.index(_TABLE_HEADER)].split("|")]
    for route, rules in _RULES.items():
        (row,) = [line for line in lines if line.startswith(f"| `{route}`")]
        cells = {
            column: set(re.findall(r"`([^`]+)`", cell))
            for column, cell in zip(header, row.split("|"), strict=True)
        }
        assert cells["string values kept"] == rules.words, route
        assert cells["error codes kept"] == rules.errors, route
        assert cells["numbers kept"] == rules.numbers | rules.usage, route
        assert cells["ids pseudonymised"] == rules.ids, route


_TABLE_HEADER = (
    "| route | string values kept | error codes kept | numbers kept | ids pseudonymised "
    "| tool arguments |"
)


def test_otelsse_inspect_replays_a_recording_to_its_live_verdict(tmp_path: Path) -> None:
    """End to end: a stream cut inside a tool call, recorded, then ``otelsse inspect FILE``."""
    body = read_fixture("real/anthropic-text-and-two-tool-use.sse")
    cut = body.index(b"input_json_delta") + 60
    live = _record(tmp_path, body[:cut], "auto", CHUNKINGS["random"], error="transport")
    assert live.recording is not None
    (path,) = _recordings(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "otelsse", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    verdict, replay = run.stdout.splitlines()[:2]
    assert run.returncode == 1, run.stderr
    assert verdict.startswith("truncated: ")
    assert (
        replay == f"replay: matches the live outcome (truncated) of recording {live.recording.id}"
    )


def test_names_the_model_gives_a_shell_call_s_variables_never_reach_the_disk(
    tmp_path: Path,
) -> None:
    """A Responses ``local_shell_call`` carries the environment the model chose: its variables'
    names are the model's output as much as their values (the subtree is redacted, keys too)."""
    action = {"type": "exec", "command": ["env"], "env": {_TOKEN: _FREE, f"{_TOKEN}_2": "1"}}
    item = {"id": "lsc_1", "type": "local_shell_call", "call_id": "call_1", "status": "completed",
            "action": action}  # fmt: skip
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    ]
    body = b"".join(
        _event(event | {"sequence_number": number}, event["type"], number)
        for number, event in enumerate(events)
    )
    live = _record(tmp_path, body[: -len(b"\n\n") - 1], RESPONSES)  # cut: a failed stream
    recording = live.recording
    assert recording is not None
    assert recording.replay().outcome is live.report.outcome
    _assert_neither_canary(recording, tmp_path)


# -- Bedrock: AWS event streams -----------------------------------------------------------------

_CONVERSE = "bedrock.converse_stream"
_PRELUDE = 12  # total length, headers length, prelude CRC (tests/_eventstream.py)
_INVOKE = "bedrock.invoke_model_with_response_stream"
_BEDROCK = sorted(BEDROCK_EXPECTED)
_FRAME_CHUNKINGS: dict[str, Chunking] = {
    "whole": CHUNKINGS["whole"],
    "frames": lambda body: list(es.frames(body)) or [body],
    "random": CHUNKINGS["random"],
}
_CANARY_ARGUMENTS = json.dumps(
    {"CANARYKEY": "CANARYVALUE", "n": 918273645, "x": [True, None, 0.918273645, "CANARYITEM\n"]}
)


def _pieces(text: str, count: int = 5) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[at : at + size] for at in range(0, len(text), size)]


def _converse_body(arguments: str = _CANARY_ARGUMENTS, stop: str = "tool_use") -> bytes:
    """A ConverseStream answer: a text block, then a tool call whose arguments come in five
    pieces (frames 4 to 8). Its usage numbers are kept (the route reads them): no canary."""
    start = {"toolUse": {"toolUseId": "tooluse_CANARYID7", "name": "canary_tool_name"}}
    usage = {"inputTokens": 12, "outputTokens": 34, "totalTokens": 46}
    return b"".join([
        es.event("messageStart", {"role": "assistant"}),
        es.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": _CANARY_TEXT}}),
        es.event("contentBlockStop", {"contentBlockIndex": 0}),
        es.event("contentBlockStart", {"contentBlockIndex": 1, "start": start}),
        *(
            es.event(
                "contentBlockDelta",
                {"contentBlockIndex": 1, "delta": {"toolUse": {"input": piece}}},
            )
            for piece in _pieces(arguments)
        ),
        es.event("contentBlockStop", {"contentBlockIndex": 1}),
        es.event("messageStop", {"stopReason": stop}),
        es.event("metadata", {"usage": usage, "metrics": {"latencyMs": 918273645}}),
    ])  # fmt: skip


def _claude_body(arguments: str = _CANARY_ARGUMENTS, stop: str = "tool_use") -> bytes:
    """An InvokeModelWithResponseStream answer of Claude's events, each one base64 in a chunk:
    text, then a tool call whose ``partial_json`` comes in five pieces (chunks 5 to 9)."""
    message = {"id": "msg_bdrk_CANARYID", "type": "message", "role": "assistant",
               "model": "claude-3-5-haiku", "content": [],
               "usage": {"input_tokens": 12, "output_tokens": 1}}  # fmt: skip
    tool = {"type": "tool_use", "id": "toolu_CANARYID", "name": "canary_tool_name", "input": {}}
    text = {"type": "text_delta", "text": _CANARY_TEXT}
    events = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": text},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": tool},
        *(
            {"type": "content_block_delta", "index": 1,
             "delta": {"type": "input_json_delta", "partial_json": piece}}
            for piece in _pieces(arguments)
        ),
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 34}},
        {"type": "message_stop",
         "amazon-bedrock-invocationMetrics": {"inputTokenCount": 12, "outputTokenCount": 34}},
    ]  # fmt: skip
    return b"".join(es.chunk(event) for event in events)


def _flipped(body: bytes, at: int) -> bytes:
    return body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :]


def _resealed(frame: bytearray) -> bytes:
    """A frame edited after its prelude, its message CRC made right again."""
    return bytes(frame[:-4]) + struct.pack(">I", zlib.crc32(frame[:-4]))


def _odd_frames() -> dict[str, bytes]:
    """Frames whose CRCs are right but whose header block is unusual."""
    text = b'{"contentBlockIndex":0,"delta":{"text":"CANARY in odd frames"}}'
    unparsable = bytearray(es.event("contentBlockDelta", text))
    unparsable[_PRELUDE + 1 + len(":event-type")] = 11  # the first header's type: none is 11
    # A timestamp header (type 8) where a string of six bytes was: its 8 value bytes are the
    # string's length and text.
    headers = {":date": "CANARY", ":event-type": "contentBlockDelta", ":message-type": "event"}
    stamped = bytearray(es.frame(headers, text))
    stamped[_PRELUDE + 1 + len(":date")] = 8
    short = struct.pack(">II", 8, 0)  # a frame shorter than a prelude and CRC: its CRC is right
    return {
        "unparsable": _resealed(unparsable),
        "stamped": _resealed(stamped),
        "too-short": short + struct.pack(">I", zlib.crc32(short)) + b"CANARY after it",
    }


def _bedrock_cases() -> dict[str, tuple[str, Case]]:
    """Name -> (the live outcome, the stream), for a stream of every outcome a Bedrock body can
    have and every way its frames can end."""
    converse, claude, odd = _converse_body(), _claude_body(), _odd_frames()
    ends, chunk_ends = es.frame_ends(converse), es.frame_ends(claude)
    bad_utf8 = es.event(
        "contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"CANARY \xff\xe2\x82 x"}}'
    )

    def chunk(encoded: str) -> bytes:
        return es.event("chunk", {"bytes": encoded, "p": "abcdefghijCANARY"})

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "complete": ("complete", Case(converse, _CONVERSE)),
        "incomplete": ("incomplete", Case(_converse_body(stop="max_tokens"), _CONVERSE)),
        "arguments-cut-by-max-tokens": (
            "incomplete",
            Case(_converse_body(_CANARY_ARGUMENTS[:30], "max_tokens"), _CONVERSE),
        ),
        "arguments-invalid": ("payload_error", Case(_converse_body('{"CANARY": tru'), _CONVERSE)),
        "arguments-trailing": (
            "payload_error",
            Case(_converse_body(_CANARY_ARGUMENTS + ' {"CANARYMORE": 1}'), _CONVERSE),
        ),
        "cut-inside-a-frame": ("truncated", Case(converse[: ends[5] + 30], _CONVERSE)),
        "cut-inside-a-prelude": ("truncated", Case(converse[: ends[5] + 7], _CONVERSE)),
        "cut-between-frames": ("truncated", Case(converse[: ends[-3]], _CONVERSE)),
        "cut-transport": (
            "truncated",
            Case(converse[: ends[5] + 30], _CONVERSE, error="transport"),
        ),
        "timeout": ("timeout", Case(converse[: ends[5] + 30], _CONVERSE, error="timeout")),
        "cancelled": ("cancelled", Case(converse[: ends[6]], _CONVERSE, error="cancelled")),
        "message-crc": ("decode_error", Case(_flipped(converse, ends[5] + 40), _CONVERSE)),
        "prelude-crc": ("decode_error", Case(_flipped(converse, ends[5] + 2), _CONVERSE)),
        "unparsable-headers": (
            "decode_error",
            Case(converse[: ends[5]] + odd["unparsable"] + converse[ends[5] :], _CONVERSE),
        ),
        "lengths-the-format-forbids": (
            "decode_error",
            Case(converse[: ends[5]] + odd["too-short"], _CONVERSE),
        ),
        "junk-after-the-frames": (
            "decode_error",
            Case(converse + b'{"message":"CANARY internal failure"}', _CONVERSE),
        ),
        "short-junk-after-the-frames": ("truncated", Case(converse + b"CANARY!", _CONVERSE)),
        "invalid-utf8": (
            "decode_error",
            Case(converse[: ends[0]] + bad_utf8 + converse[ends[0] :], _CONVERSE),
        ),
        "a-timestamp-header": (
            "complete",
            Case(converse[: ends[0]] + odd["stamped"] + converse[ends[0] :], _CONVERSE),
        ),
        "throttled": (
            "rate_limited",
            Case(
                converse[: ends[5]] + es.exception("throttlingException", "CANARY slow"), _CONVERSE
            ),
        ),
        "exception": (
            "provider_error",
            Case(
                claude[: chunk_ends[3]] + es.exception("modelStreamErrorException", "CANARY"),
                _INVOKE,
            ),
        ),
        "error-frame": (
            "provider_error",
            Case(
                converse[: ends[5]] + es.error_frame("InternalFailure", "CANARY went wrong"),
                _CONVERSE,
            ),
        ),
        "buffer-limit-frame": (
            "buffer_limit",
            Case(converse, _CONVERSE, Limits(max_event_bytes=200)),
        ),
        "buffer-limit-arguments": (
            "buffer_limit",
            Case(converse, _CONVERSE, Limits(max_tool_argument_chars=6)),
        ),
        "buffer-limit-events": ("buffer_limit", Case(claude, _INVOKE, Limits(max_events=5))),
        "invoke-complete": ("complete", Case(claude, _INVOKE)),
        "invoke-arguments-invalid": ("payload_error", Case(_claude_body('{"CANARY": [}'), _INVOKE)),
        "invoke-cut-in-a-chunk": ("truncated", Case(claude[: chunk_ends[6] + 50], _INVOKE)),
        "invoke-message-crc": ("decode_error", Case(_flipped(claude, chunk_ends[6] + 60), _INVOKE)),
        "invoke-not-base64": ("payload_error", Case(chunk("CANARY!!") + claude, _INVOKE)),
        "invoke-base64-not-utf8": (
            "payload_error",
            Case(claude[: chunk_ends[2]] + chunk(b64(b"\xff\xfeCANARY\xc3")), _INVOKE),
        ),
        "invoke-base64-not-json": (
            "payload_error",
            Case(chunk(b64(b"CANARY plain text")) + claude, _INVOKE),
        ),
    }


BEDROCK_CASES = _bedrock_cases()


def _frames_read(body: bytes, limits: Limits | None) -> tuple[Any, ...]:
    """What the framer makes of ``body``: each frame's event and decoded size, then where and
    why it stopped."""
    parser = EventStreamParser(max_event_bytes=(limits or Limits()).max_event_bytes)
    events = parser.feed(body)
    parser.close()
    return (
        [(event.event, len(event.data)) for event in events],
        parser.corrupt,
        parser.limit_exceeded,
        parser.pending_event_chars,
        parser.decode_error_count,
        parser.decoded_chars,
    )


def _frame_events(body: bytes) -> list[tuple[str, str]]:
    """(name, data) of each frame the framer reads; a chunk's data without its base64
    ``bytes``, then its own event, decoded, named ``""``."""
    found = []
    for event in EventStreamParser(max_event_bytes=len(body) + 16).feed(body):
        try:
            part = json.loads(event.data)
            inner = base64.b64decode(part.pop("bytes"), validate=True)
        except (ValueError, KeyError, TypeError, AttributeError):
            found.append((event.event, event.data))
            continue
        found.append((event.event, json.dumps(part)))
        found.append(("", inner.decode("utf-8", "replace")))
    return found


def _frame_texts(body: bytes) -> list[str]:
    """Every text a body holds, decoded: its bytes, each frame's name and data (its JSON's
    escapes decoded), each chunk's own event."""
    texts = [body.decode("utf-8", "replace")]
    for name, data in _frame_events(body):
        texts += [name, data]
        try:
            texts.append(json.dumps(json.loads(data), ensure_ascii=False))
        except ValueError:
            pass
    return texts


@pytest.mark.parametrize("chunking", _FRAME_CHUNKINGS)
@pytest.mark.parametrize("name", _BEDROCK)
def test_every_bedrock_fixture_replays_to_its_live_report(
    tmp_path: Path, name: str, chunking: str
) -> None:
    body = read_fixture(name)
    live = _record(tmp_path, body, BEDROCK_EXPECTED[name].route, _FRAME_CHUNKINGS[chunking])
    assert live.report.outcome.value == BEDROCK_EXPECTED[name].outcome
    recording = _replays(live)
    skeleton = _skeleton(recording)
    assert [len(chunk) for _, chunk in recording.chunks] == [
        len(chunk) for chunk in _FRAME_CHUNKINGS[chunking](body)
    ]
    assert _frames_read(skeleton, None) == _frames_read(body, None)
    assert es.frame_ends(skeleton) == es.frame_ends(body)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", BEDROCK_CASES)
def test_a_bedrock_stream_of_every_outcome_replays_to_its_live_report(
    tmp_path: Path, case: str, chunking: str
) -> None:
    """The skeleton's frames read as the body's did (each event, a corrupt frame refused by the
    same check, a cut frame held as long), and the replay reports what the live monitor did."""
    outcome, (body, route, limits, error, _) = BEDROCK_CASES[case]
    live = _record(tmp_path, body, route, CHUNKINGS[chunking], limits=limits, error=error)
    assert live.report.outcome.value == outcome
    recording = _replays(live)
    assert _frames_read(_skeleton(recording), limits) == _frames_read(body, limits)


def test_the_bedrock_cases_reach_every_outcome_a_bedrock_body_can_have() -> None:
    reached = {outcome for outcome, _ in BEDROCK_CASES.values()}
    # eof_unverified and terminal_missing: no terminal-less family here; the rest are header
    # refusals (the same for every route) and internal_error.
    assert reached == {o.value for o in Outcome} - {
        "eof_unverified", "terminal_missing", "http_error", "protocol_error", "internal_error"
    }  # fmt: skip


@pytest.mark.parametrize("case", BEDROCK_CASES)
def test_no_bedrock_content_reaches_the_disk(tmp_path: Path, case: str) -> None:
    """The canaries (text, tool names and arguments, ids, exception messages, an error frame's
    ``:error-message``, a non-string header's bytes, bytes that are no frame) are in each body,
    also inside the chunks' base64; none is in the skeleton, in any of its decodings, or in the
    files."""
    _, (body, route, limits, error, _) = BEDROCK_CASES[case]
    live = _record(tmp_path, body, route, CHUNKINGS["random"], limits=limits, error=error)
    recording = live.recording
    assert recording is not None
    assert any("CANARY" in text for text in _frame_texts(body))
    skeleton = _frame_texts(_skeleton(recording))
    files = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    for canary in _CANARIES:
        assert not [text for text in skeleton if canary in text], canary
        assert canary.encode() not in files


@pytest.mark.parametrize("name", _BEDROCK)
def test_no_word_of_a_bedrock_fixtures_content_reaches_the_disk(tmp_path: Path, name: str) -> None:
    body = read_fixture(name)
    recording = _replays(_record(tmp_path, body, BEDROCK_EXPECTED[name].route))
    canaries = _content_words(body, _frame_events(body))
    assert canaries  # each fixture has text of its own
    # Whole words: a word of the text may be part of a kept one ("assist", role "assistant").
    texts = [text for event in _frame_events(_skeleton(recording)) for text in event]
    skeleton = set(_WORD.findall("\n".join(texts)))
    assert not canaries & skeleton


def test_a_bedrock_skeleton_keeps_headers_json_structure_and_the_arguments_shape(
    tmp_path: Path,
) -> None:
    converse = _converse_body()
    ends = es.frame_ends(converse)
    body = converse[: ends[-3]] + es.error_frame("InternalFailure", "CANARY went wrong")
    recording = _replays(_record(tmp_path, body, _CONVERSE, CHUNKINGS["one-byte"]))
    skeleton = _skeleton(recording)
    assert es.frame_ends(skeleton) == es.frame_ends(body)
    # Headers: every name and protocol value kept; an error frame's message is free text.
    for frame, kept in zip(es.frames(skeleton), es.frames(body), strict=True):
        assert frame[:_PRELUDE] == kept[:_PRELUDE]
        if b":error-message" not in kept:
            headers_end = _PRELUDE + struct.unpack_from(">I", kept, 4)[0]
            assert frame[_PRELUDE:headers_end] == kept[_PRELUDE:headers_end]
    assert es.header(":error-code", "InternalFailure") in skeleton
    assert es.header(":error-message", "[REDACTED][REDACT") in skeleton
    # Payloads: the same JSON keys; the indexes and the stop kept; the arguments' JSON shape
    # kept across the pieces, its content not.
    original, redacted = _frame_events(body), _frame_events(skeleton)
    assert [name for name, _ in redacted] == [name for name, _ in original]
    payloads = [json.loads(data) for name, data in redacted[:-1]]
    assert [p.get("contentBlockIndex") for p in payloads] == [
        json.loads(data).get("contentBlockIndex") for _, data in original[:-1]
    ]
    arguments = "".join(
        p["delta"]["toolUse"]["input"] for p in payloads if "toolUse" in p.get("delta", {})
    )
    assert arguments == (
        '{"[REDACTED": "[REDACTED][", "[": 100000000, "[": [true, null, 0.100000000, '
        '"[REDACTED]\\n"]}'
    )


def test_every_framer_has_a_skeleton() -> None:
    """A body of any registered route can be recorded: ``keep()`` never raises for a body."""
    assert set(_SKELETONS) == set(FRAMERS)


# Frames and bytes a damaged body may gain.
_FRAME_SNIPPETS = [
    es.exception("throttlingException"), es.error_frame("InternalFailure"),
    es.event("messageStop", {"stopReason": "end_turn"}), es.chunk({"type": "message_stop"}),
    b"\x00" * 12, b"CANARY", b"\xff", *_odd_frames().values(),
]  # fmt: skip


@st.composite
def _damaged_frames(draw: st.DrawFn) -> tuple[bytes, str]:
    name = draw(st.sampled_from(_BEDROCK))
    body = bytearray(read_fixture(name))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(body) - 1))
        how = draw(st.sampled_from(["flip", "delete", "insert"]))
        if how == "flip":
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "delete":
            del body[at : at + draw(st.integers(1, 20))]
        else:
            body[at:at] = draw(st.sampled_from(_FRAME_SNIPPETS))
    if draw(st.booleans()):
        del body[draw(st.integers(0, len(body))) :]
    return bytes(body), BEDROCK_EXPECTED[name].route


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    damaged=_damaged_frames(),
    seed=st.integers(0, 2**32),
    error=st.sampled_from([None, "transport", "cancelled"]),
    limits=st.sampled_from([None, Limits(max_event_bytes=300), Limits(max_events=5)]),
)
def test_a_cut_or_corrupted_bedrock_fixture_replays_to_its_live_report(
    tmp_path_factory: pytest.TempPathFactory,
    damaged: tuple[bytes, str],
    seed: int,
    error: StreamError | None,
    limits: Limits | None,
) -> None:
    body, route = damaged
    chunking = lambda data: random_split(data, random.Random(seed))  # noqa: E731
    directory = tmp_path_factory.mktemp("damaged")
    recording = _replays(_record(directory, body, route, chunking, limits=limits, error=error))
    assert _frames_read(_skeleton(recording), limits) == _frames_read(body, limits)


@pytest.mark.parametrize("as_json", [False, True])
def test_otelsse_inspect_replays_a_bedrock_recording_and_lists_its_frames(
    tmp_path: Path, as_json: bool
) -> None:
    body = _claude_body()
    body = body[: es.frame_ends(body)[6] + 50]  # cut inside a chunk of the tool's arguments
    live = _record(tmp_path, body, _INVOKE, CHUNKINGS["random"], error="transport")
    assert live.recording is not None
    (path,) = _recordings(tmp_path)
    out = io.StringIO()
    status = main(["inspect", str(path), "--events", *(["--json"] if as_json else [])], out)
    assert status == 1
    frames = [name for name, _ in _frame_events(body) if name]
    assert frames == ["chunk"] * 7
    if as_json:
        document = json.loads(out.getvalue())
        assert document["verdict"] == "truncated"
        assert document["recording.live_outcome"] == "truncated"
        assert [event["event"] for event in document["events"]] == frames
        return
    verdict, replay, _, table, *rows = out.getvalue().splitlines()
    assert verdict.startswith("truncated: ")
    assert (
        replay == f"replay: matches the live outcome (truncated) of recording {live.recording.id}"
    )
    assert table.split() == ["#", "event", "data", "chars"]
    listed = [row.split() for row in rows[: len(frames)]]
    assert [(int(number), name) for number, name, _ in listed] == list(enumerate(frames))
