"""Example-based tests for what the fuzz properties found; each fails until its bug is fixed.

- A block with only an ``event`` field followed by two blank lines must parse (it raised
  IndexError in the framer), whole, in CRLF, and split after the field line.
- An OpenAI chat ``delta.content`` sent as a list of typed parts must give a result or a
  ``StreamFault`` from ``read_stream``, never a TypeError.
- For every route, a string field of a small complete stream replaced by a number, a list, an
  object or null, and an index replaced by a string, a float, -1, 10**30, null, a bool, a list
  or an object: the monitor never raises and ignores the chunking, ``read_stream`` gives a
  result or a ``StreamFault``, and the reader's verdict is the monitor's outcome.
- Ceilings (``Limits``) give the same report whatever the chunking: an event over
  ``max_event_bytes``/``max_line_bytes`` inside one read, the pending sizes reported at the
  ceiling, and the events after a route-state ceiling (tool arguments, tool calls, parts, kept
  text) in the same read.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import pytest

from otelsse import Limits, SSEEvent, SSEParser, StreamFault, StreamMonitor, read_stream
from otelsse.routes import route_names

from ._checks import check_agreement, check_monitor, check_parser, check_reader, run_reader
from ._inputs import INDEX_KEYS, dumps, json_get, json_paths, json_set

# --------------------------------------------------------------------------------------------
# The framer: an event-only block followed by two blank lines
# --------------------------------------------------------------------------------------------

EVENT_THEN_TWO_BLANK_LINES = {
    "lf": [b"event: ping\n\n\n"],
    "crlf": [b"event: ping\r\n\r\n\r\n"],
    "cr": [b"event: ping\r\r\r"],
    "lf split after the field line": [b"event: ping\n", b"\n\n"],
    "crlf split after the field line": [b"event: ping\r\n", b"\r\n\r\n"],
}


@pytest.mark.parametrize(
    "chunks", EVENT_THEN_TWO_BLANK_LINES.values(), ids=EVENT_THEN_TWO_BLANK_LINES.keys()
)
def test_an_event_only_block_then_two_blank_lines_parses_without_error(
    chunks: list[bytes],
) -> None:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in [*chunks, b"data: x\n\n"]:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    # The event-only block dispatches nothing (its data buffer is empty), and the type it set
    # is reset by the blank line: the next event is a plain message.
    assert events == [SSEEvent("message", "x")]


@pytest.mark.parametrize("route", route_names())
@pytest.mark.parametrize(
    "chunks", EVENT_THEN_TWO_BLANK_LINES.values(), ids=EVENT_THEN_TWO_BLANK_LINES.keys()
)
def test_the_monitor_takes_an_event_only_block_then_two_blank_lines(
    chunks: list[bytes], route: str
) -> None:
    monitor = StreamMonitor(route)
    for chunk in chunks:
        monitor.feed(chunk)
    report = monitor.close()
    assert report.event_count == 0


# --------------------------------------------------------------------------------------------
# OpenAI chat: content as a list of typed parts
# --------------------------------------------------------------------------------------------


def _chat_body(content: Any) -> bytes:
    chunks = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "gpt-x",
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": content},
                    "finish_reason": None,
                }
            ],
        },
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "gpt-x",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        },
    ]
    return b"".join(b"data: " + dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


TYPED_PARTS = [
    {"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]},
    {"type": "text", "text": "Hi"},
]


@pytest.mark.parametrize("route", ["openai.chat_completions", "auto"])
def test_openai_chat_content_as_typed_parts_gives_a_result_or_a_fault(route: str) -> None:
    body = _chat_body(TYPED_PARTS)
    try:
        read_stream([body], route)
    except StreamFault:
        pass


@pytest.mark.parametrize("route", ["openai.chat_completions", "auto"])
def test_openai_chat_content_as_typed_parts_reader_agrees_with_monitor(route: str) -> None:
    check_agreement(_chat_body(TYPED_PARTS), route, None)


# --------------------------------------------------------------------------------------------
# Every route: string fields of a small complete stream swapped for other JSON types
# --------------------------------------------------------------------------------------------

_ARGS = '{"city":"Paris"}'

CHAT = [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": "Hi", "reasoning_content": "hm"},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":'},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7},
    },
    "[DONE]",
]

RESPONSES = [
    ("response.created", {"response": {"id": "resp_1", "model": "gpt-x", "status": "x"}}),
    (
        "response.output_item.added",
        {"output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant"}},
    ),
    (
        "response.reasoning_summary_text.delta",
        {"item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "hm"},
    ),
    (
        "response.output_text.delta",
        {"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hi"},
    ),
    (
        "response.output_item.added",
        {
            "output_index": 1,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": "",
            },
        },
    ),
    (
        "response.function_call_arguments.delta",
        {"item_id": "fc_1", "output_index": 1, "delta": _ARGS},
    ),
    (
        "response.function_call_arguments.done",
        {"item_id": "fc_1", "output_index": 1, "arguments": _ARGS},
    ),
    (
        "response.output_item.done",
        {
            "output_index": 1,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": _ARGS,
            },
        },
    ),
    (
        "response.completed",
        {
            "response": {
                "id": "resp_1",
                "model": "gpt-x",
                "status": "completed",
                "usage": {"input_tokens": 5, "output_tokens": 7},
            }
        },
    ),
]

ANTHROPIC = [
    (
        "message_start",
        {
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            }
        },
    ),
    (
        "content_block_start",
        {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    ),
    ("ping", {}),
    ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
    ("content_block_stop", {"index": 0}),
    ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
    ("content_block_stop", {"index": 1}),
    (
        "content_block_start",
        {
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {},
            },
        },
    ),
    (
        "content_block_delta",
        {"index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    ),
    (
        "content_block_delta",
        {"index": 2, "delta": {"type": "input_json_delta", "partial_json": _ARGS}},
    ),
    ("content_block_stop", {"index": 2}),
    (
        "message_delta",
        {
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
    ),
    ("message_stop", {}),
]

GEMINI = [
    {
        "candidates": [
            {"content": {"parts": [{"text": "hm", "thought": True}], "role": "model"}, "index": 0}
        ],
        "modelVersion": "gemini-x",
        "responseId": "r1",
    },
    {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}, "index": 0}]},
    {
        "candidates": [
            {
                "content": {
                    "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
                    "role": "model",
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 7},
    },
]


def _events(stream: str) -> list[tuple[str | None, Any]]:
    """The stream's events as (SSE event name or None, JSON value or the raw [DONE] marker)."""
    if stream == "chat":
        return [(None, payload) for payload in CHAT]
    if stream == "gemini":
        return [(None, payload) for payload in GEMINI]
    named = RESPONSES if stream == "responses" else ANTHROPIC
    events: list[tuple[str | None, Any]] = []
    for number, (name, payload) in enumerate(named):
        payload = {"type": name, **payload}
        if stream == "responses":
            payload["sequence_number"] = number
        events.append((name, payload))
    return events


def _encode(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, payload in events:
        head = b"" if name is None else b"event: " + name.encode() + b"\n"
        data = payload if isinstance(payload, str) and payload == "[DONE]" else dumps(payload)
        out.append(head + b"data: " + data.encode() + b"\n\n")
    return b"".join(out)


#: (route, stream): each contract under its own route and under "auto"; "generic" reads chat.
CASES = [
    ("openai.chat_completions", "chat"),
    ("openai.responses", "responses"),
    ("anthropic.messages", "anthropic"),
    ("gemini.generate_content", "gemini"),
    ("generic", "chat"),
    ("auto", "chat"),
    ("auto", "responses"),
    ("auto", "anthropic"),
    ("auto", "gemini"),
]

REPLACEMENTS = {"number": 7, "list": ["x"], "object": {"k": "v"}, "null": None}
INDEXES = {
    "string": "0",
    "float": 0.0,
    "negative": -1,
    "huge": 10**30,
    "null": None,
    "bool": True,
    "list": [0],
    "object": {"i": 0},
}


@pytest.mark.parametrize(("route", "stream"), CASES)
def test_the_small_streams_are_accepted_as_they_are(route: str, stream: str) -> None:
    """The streams below are complete (eof_unverified for generic) and read as such."""
    body = _encode(_events(stream))
    report = check_monitor(body, route, None, [])
    expected = "eof_unverified" if route == "generic" else "complete"
    assert report.outcome.value == expected
    check_agreement(body, route, None)
    if route != "generic":
        result = read_stream([body], route)
        assert result.text == "Hi"
        assert [(c.name, c.arguments) for c in result.tool_calls] == [
            ("get_weather", {"city": "Paris"})
        ]


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/otelsse/" in f.filename]
    frame = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} at {frame.filename.split('/otelsse/')[-1]}:{frame.lineno}"


def _swap_failures(route: str, stream: str, replacement: Any, index_keys: bool) -> list[str]:
    """Swap each string field (or each index-like field) of the stream for ``replacement``, one
    at a time; return what failed: monitor, reader, or their agreement."""
    events = _events(stream)
    failures = []
    for position, (name, payload) in enumerate(events):
        if isinstance(payload, str):
            continue
        for path in json_paths(payload):
            old = json_get(payload, path)
            if index_keys:
                if not path or path[-1] not in INDEX_KEYS or old == replacement:
                    continue
            elif not isinstance(old, str):
                continue
            swapped = list(events)
            swapped[position] = (name, json_set(json.loads(dumps(payload)), path, replacement))
            body = _encode(swapped)
            what = f"event {position} ({name or 'data'}) {list(path)} -> {dumps(replacement)}"
            checks: list[tuple[Any, tuple[Any, ...]]] = [
                (check_monitor, (body, route, None, [])),
                (run_reader, ([body], route, None)),
                (check_agreement, (body, route, None)),
            ]
            for check, args in checks:
                try:
                    check(*args)
                except AssertionError as exc:
                    failures.append(f"{what}: disagreement: {str(exc).splitlines()[0]}")
                    break
                except Exception as exc:
                    failures.append(f"{what}: {_where(exc)}")
                    break
    return failures


@pytest.mark.parametrize("replacement", REPLACEMENTS.values(), ids=REPLACEMENTS.keys())
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_a_string_field_of_another_type_is_judged_not_raised(
    route: str, stream: str, replacement: Any
) -> None:
    """Every string field, one at a time: monitor, reader and their agreement hold."""
    failures = _swap_failures(route, stream, replacement, index_keys=False)
    assert not failures, f"{len(failures)} failing swaps:\n" + "\n".join(failures)


@pytest.mark.parametrize("replacement", INDEXES.values(), ids=INDEXES.keys())
@pytest.mark.parametrize(("route", "stream"), CASES)
def test_an_index_of_another_type_or_range_is_judged_not_raised(
    route: str, stream: str, replacement: Any
) -> None:
    """Every index-like field (``index``, ``output_index``...), one at a time."""
    failures = _swap_failures(route, stream, replacement, index_keys=True)
    assert not failures, f"{len(failures)} failing swaps:\n" + "\n".join(failures)


@pytest.mark.parametrize("route", ["openai.responses", "auto"])
def test_result_text_with_an_output_index_sent_as_a_string(route: str) -> None:
    """Two text deltas of one output, the second with ``"output_index": "0"``: whatever the
    verdict, ``StreamResult.text`` must not raise (it sorted int and str keys: TypeError)."""
    events = _events("responses")
    name, payload = events[3]
    events.insert(4, (name, {**payload, "output_index": "0", "delta": " there"}))
    try:
        result = read_stream([_encode(events)], route)
    except StreamFault:
        return
    assert isinstance(result.text, str)


# --------------------------------------------------------------------------------------------
# Limits: the same report whatever the chunking
# --------------------------------------------------------------------------------------------

_BIG_EVENT = b"data: " + b"x" * 200 + b"\n\n"


@pytest.mark.parametrize(
    "limit", [{"max_event_bytes": 64}, {"max_line_bytes": 64}], ids=["event", "line"]
)
def test_the_parser_ceilings_do_not_depend_on_the_chunking(limit: dict[str, int]) -> None:
    """A 208-byte event over a 64-byte ceiling: one read dispatched it, one byte per read
    stopped at the ceiling."""
    check_parser(_BIG_EVENT, [], **limit)


@pytest.mark.parametrize("route", route_names())
@pytest.mark.parametrize(
    "limits",
    [Limits(max_event_bytes=64), Limits(max_line_bytes=64)],
    ids=["max_event_bytes", "max_line_bytes"],
)
def test_the_monitor_ceilings_do_not_depend_on_the_chunking(route: str, limits: Limits) -> None:
    check_monitor(_BIG_EVENT, route, limits, [])


@pytest.mark.parametrize("route", ["generic", "openai.chat_completions"])
def test_the_pending_sizes_at_a_ceiling_do_not_depend_on_the_chunking(route: str) -> None:
    """Four field lines, 66 bytes, no blank line, over a 64-byte event ceiling: the pending
    sizes reported were those at the end of whichever read crossed it."""
    body = b"event: message\nevent: message\nevent: message\nevent: message_start\n"
    check_monitor(body, route, Limits(max_event_bytes=64), [])


_TOOL_CALL_THEN_FINISH = (
    b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":'
    b'{"name":"f","arguments":"{\\"a\\":1}"}}]}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    b"data: [DONE]\n\n"
)


#: A ceiling of the route state (not of the framer) hit by the first event, with the events that
#: follow in the same read; the property checked (monitor or reader).
STATE_CEILINGS = {
    "max_tool_argument_chars": (Limits(max_tool_argument_chars=3), _TOOL_CALL_THEN_FINISH, False),
    "max_tool_calls": (Limits(max_tool_calls=0), _TOOL_CALL_THEN_FINISH, False),
    "max_parts": (Limits(max_parts=0), _chat_body("Hello"), False),
    "max_text_chars in the reader": (Limits(max_text_chars=1), _chat_body("Hello"), True),
}


@pytest.mark.parametrize("route", ["openai.chat_completions", "auto"])
@pytest.mark.parametrize(
    ("limits", "body", "reader"), STATE_CEILINGS.values(), ids=STATE_CEILINGS.keys()
)
def test_events_after_a_state_ceiling_in_the_same_read_are_not_judged(
    route: str, limits: Limits, body: bytes, reader: bool
) -> None:
    """The first event breaches the ceiling: in one read the finish and ``[DONE]`` that followed
    were still judged (terminal_seen, stop_reason, event_count, decoded_char_count...), one byte
    per read they were not."""
    if reader:
        check_reader(body, route, limits, [])
    else:
        check_monitor(body, route, limits, [])


_PART = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
_PART_THEN_LONG_EVENT = _PART + _PART + b"data: " + b"x" * 80 + b"\n\n"
#: A route-state ceiling breached by the first event, a framer ceiling by the third.
STATE_THEN_FRAMER_CEILINGS = {
    "max_parts then max_event_bytes": (Limits(max_parts=0, max_event_bytes=64), False),
    "max_parts then max_line_bytes": (Limits(max_parts=0, max_line_bytes=64), False),
    "max_text_chars then max_event_bytes in the reader": (
        Limits(max_text_chars=0, max_event_bytes=64),
        True,
    ),
}


@pytest.mark.parametrize("route", ["openai.chat_completions", "auto"])
@pytest.mark.parametrize(
    ("limits", "reader"), STATE_THEN_FRAMER_CEILINGS.values(), ids=STATE_THEN_FRAMER_CEILINGS.keys()
)
def test_a_state_ceiling_then_a_framer_ceiling_in_one_read_reports_the_first(
    route: str, limits: Limits, reader: bool
) -> None:
    """In one read the framer had already stopped at the long third event when the route hit
    its ceiling on the first: the report kept the framer's counts (decoded_char_count 116,
    pending sizes 65 and 65) where one byte per read, stopped after the first event, reports
    58, 0 and 0."""
    if reader:
        check_reader(_PART_THEN_LONG_EVENT, route, limits, [])
    else:
        check_monitor(_PART_THEN_LONG_EVENT, route, limits, [])
