"""The typed reading of the hot events (Anthropic ``content_block_delta``, Chat Completions
chunks) is the generic reading, only faster: for every body and chunking the monitor gives the
same events, the same ``StreamReport`` and the same state (texts, tool calls) with the switch
``otelsse._core.json.typed_decoding`` on and off.

The generic reading (``loads`` and the routes' dict handlers) is the definition; the typed one
must either agree with it or hand the text back. The hostile values below are the ways the two
readings of JSON could part: repeated keys, unknown keys, null against a missing key, booleans
and floats where integers belong, integers past 64 bits or 4,300 digits, floats that overflow,
NaN, nesting past 256 levels inside a key the route skips, lone surrogates, trailing data.
"""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from otelsse import StreamMonitor, StreamReport
from otelsse._core import json as core_json
from otelsse._core.json import TypedShape, typed_decoder
from otelsse.routes import anthropic_messages, handles, openai_chat
from otelsse.routes.anthropic_messages import AnthropicMessagesRoute
from otelsse.routes.openai_chat import OpenAIChatRoute
from tests._fixtures import EDGE_FIXTURES, EXPECTED, read_fixture
from tests._helpers import ANTHROPIC, CHAT, random_split
from tests.fuzz._checks import event_reads, pieces
from tests.fuzz._strategies import FUZZ, draw_any, draw_cuts

Events = list[tuple[Any, ...]]


@pytest.fixture(autouse=True, scope="module")
def typed_decoding() -> None:
    """This module sets the switch itself (overrides the conftest's run-twice fixture)."""


@contextmanager
def switch(on: bool) -> Iterator[None]:
    saved = core_json.typed_decoding
    core_json.typed_decoding = on
    try:
        yield
    finally:
        core_json.typed_decoding = saved


def state_of(monitor: StreamMonitor) -> dict[str, Any]:
    """What the route told the state beyond the report: kept text and every tool call."""
    state = monitor.state
    calls = [
        (c.call_id, c.name, c.kind, c.closed, c.closed_by, c.verdict, c.problem, c.arguments)
        for c in state.tool_calls
    ]
    return {
        "texts": state.texts, "reasoning": state.reasoning, "refusals": state.refusals,
        "refused": state.refused, "output_deltas": state.output_deltas, "calls": calls,
        "limit_stage": state.limit_stage, "part_count": state.part_count,
    }  # fmt: skip


def run(chunks: list[bytes], route: str, *, typed: bool) -> tuple[Events, StreamReport, Any]:
    with switch(typed):
        monitor = StreamMonitor(route, collect_text=True)
    events: Events = []
    for at, chunk in enumerate(chunks):
        events.extend(tuple(event) for event in monitor.feed(chunk, now=float(at)))
    report = monitor.close(float(len(chunks)))
    return events, report, state_of(monitor)


def assert_same(chunks: list[bytes], route: str) -> StreamReport:
    """Typed and generic readings agree on ``chunks``: events, the whole report, the state."""
    generic = run(chunks, route, typed=False)
    typed = run(chunks, route, typed=True)
    assert typed[0] == generic[0], "events differ"
    assert typed[1] == generic[1], f"reports differ:\n typed   {typed[1]}\n generic {generic[1]}"
    assert typed[2] == generic[2], f"states differ:\n typed   {typed[2]}\n generic {generic[2]}"
    return typed[1]


class Hits:
    """Counts the texts a route's typed reader took (so a test cannot pass by never using it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken = 0
        for module, name in (
            (anthropic_messages, "_read_block_delta"),
            (openai_chat, "_read_chunk"),
        ):
            read = getattr(module, name)
            assert read is not None, "msgspec is installed: the typed readers exist"
            monkeypatch.setattr(module, name, self._counting(read))

    def _counting(self, read: Any) -> Any:
        def counted(text: str) -> Any:
            found = read(text)
            self.taken += found is not None
            return found

        return counted


# --------------------------------------------------------------------------------------------
# (a) Every recorded fixture of the two routes, under several chunkings
# --------------------------------------------------------------------------------------------

_TYPED_ROUTES = (ANTHROPIC, CHAT)
FIXTURES = sorted(name for name, expected in EXPECTED.items() if expected.route in _TYPED_ROUTES)
FIXTURES += sorted(
    f"edge/{path.name}"
    for path in EDGE_FIXTURES.iterdir()
    if path.name.startswith(("anthropic-", "chat-"))
)


#: Fixtures no chunk of which is the typed shape: Writer's chunks carry keys the shape does not
#: declare (``choices[].message``, ``usage.prompt_token_details``), so they are read by the
#: generic reading alone (the two readings still agree on them above).
_UNTYPED = frozenset({"real/writer-chat-no-done.sse", "real/writer-chat-tool-call-no-done.sse"})


def fixture_chunkings(body: bytes) -> Iterator[tuple[str, list[bytes]]]:
    yield "one read", [body]
    yield "one read per event", event_reads(body)
    yield "one byte per read", [body[i : i + 1] for i in range(len(body))]
    for seed in range(3):
        yield f"random reads (seed {seed})", random_split(body, random.Random(seed))


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_reads_the_same_typed_and_generic(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = read_fixture(name)
    route = ANTHROPIC if "anthropic" in name else CHAT
    hits = Hits(monkeypatch)
    reports = []
    for chunking, chunks in fixture_chunkings(body):
        for as_route in (route, "auto"):
            with_context = f"{chunking}, route {as_route}"
            try:
                reports.append(assert_same(chunks, as_route))
            except AssertionError as failure:
                failure.add_note(with_context)
                raise
    if name not in _UNTYPED:
        assert hits.taken > 0, "the typed reader never took an event of this fixture"
    if name in EXPECTED:
        assert reports[0].outcome.value == EXPECTED[name].outcome


def test_every_route_fixture_is_compared() -> None:
    assert len([n for n in FIXTURES if "anthropic" in n]) >= 8
    assert len([n for n in FIXTURES if "anthropic" not in n]) >= 15


# --------------------------------------------------------------------------------------------
# (b) Hostile variants of the hot shapes
# --------------------------------------------------------------------------------------------


class Raw(str):
    """A JSON token written as is (what ``json.dumps`` cannot write: NaN, 1e400, a repeated
    key's object, a lone surrogate's escape)."""


class Obj(list[tuple[str, Any]]):
    """A JSON object as its members in order: keys may repeat."""


def render(value: Any, space: str) -> str:
    """``value`` as JSON text, ``space`` around every structural character."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Obj):
        members = (f"{json.dumps(k)}{space}:{space}{render(v, space)}" for k, v in value)
        return "{" + space + f"{space},{space}".join(members) + space + "}"
    if isinstance(value, list):
        return "[" + space + f"{space},{space}".join(render(v, space) for v in value) + space + "]"
    return json.dumps(value, ensure_ascii=False)


def obj(value: Any) -> Any:
    """A plain JSON value with its dicts as ``Obj``."""
    if isinstance(value, dict):
        return Obj((k, obj(v)) for k, v in value.items())
    if isinstance(value, list):
        return [obj(v) for v in value]
    return value


_RAW = [
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1.7976931348623159e308", "1.0", "1E2",
    "-0", "0.5e-400", "1" + "0" * 309 + ".5", "9" * 4301, "-" + "9" * 4301, "9" * 4300,
    '"\\ud800"', '"x\\udfff"', '"\\ud83d\\ude00"', '"a\\u0000b"', '"\\u00e9\\n"',
    "[" * 300 + "]" * 300, "[" * 256 + "]" * 256, '{"a":' * 257 + "1" + "}" * 257,
    "[1.5]", '{"x":1e999}', '{"a":{"b":{"c":{"d":1}}}}', "[[[[1]]]]", "[]", "{}",
]  # fmt: skip
_WORDS = [
    "content_block_delta", "text_delta", "input_json_delta", "thinking_delta", "signature_delta",
    "citations_delta", "message", "stop", "length", "tool_calls", "", "error", "end_turn", "f",
    "call_1", "call_2", '{"a":', "1}", "]", "caf\u00e9", "\u6771\u4eac", "\U0001f642",
]  # fmt: skip
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(_RAW).map(Raw),
    st.sampled_from(_WORDS),
    st.text(max_size=5),
)
_ANTHROPIC_KEYS = [
    "type", "index", "delta", "text", "partial_json", "thinking", "signature", "citation", "x",
]  # fmt: skip
_CHAT_KEYS = [
    "id", "model", "choices", "usage", "error", "object", "content", "tool_calls", "refusal",
    "reasoning", "reasoning_content", "function_call", "role", "index", "finish_reason", "delta",
    "function", "name", "arguments", "prompt_tokens", "completion_tokens", "logprobs", "x", "p",
    "type", "provider", "content_filter_results",
]  # fmt: skip


def hostile(keys: list[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        _leaf,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.lists(st.tuples(st.sampled_from(keys), inner), max_size=3).map(Obj)
        ),
        max_leaves=6,
    )


def objects(value: Any) -> Iterator[Obj]:
    if isinstance(value, Obj):
        yield value
        for _, member in value:
            yield from objects(member)
    elif isinstance(value, list) and not isinstance(value, Raw):
        for item in value:
            yield from objects(item)


def mutate(data: st.DataObject, value: Any, keys: list[str]) -> Any:
    """``value`` (an ``Obj`` tree) with zero to three members set, dropped, added or repeated."""
    for _ in range(data.draw(st.integers(0, 3), label="mutations")):
        target = data.draw(st.sampled_from(list(objects(value))), label="object")
        how = data.draw(st.sampled_from(["set", "drop", "add", "repeat"]), label="how")
        if how == "add" or not target:
            at = data.draw(st.integers(0, len(target)), label="at")
            key = data.draw(st.sampled_from(keys), label="key")
            target.insert(at, (key, data.draw(hostile(keys), label="value")))
            continue
        at = data.draw(st.integers(0, len(target) - 1), label="member")
        key, old = target[at]
        if how == "set":
            target[at] = (key, data.draw(hostile(keys), label="value"))
        elif how == "drop":
            del target[at]
        else:
            new = data.draw(st.one_of(st.just(old), hostile(keys)), label="repeated value")
            target.insert(at + data.draw(st.integers(0, 1), label="after"), (key, new))
    return value


def data_line(data: st.DataObject, value: Any) -> str:
    space = data.draw(st.sampled_from(["", " ", "\t", " \t "]), label="space")
    text = render(value, space)
    around = data.draw(st.sampled_from(["", " ", "\t"]), label="around")
    trailing = data.draw(
        st.sampled_from(["", "", "", " x", "{}", ",1", "]", " 1", "\t", "null", "\u00a0"]),
        label="trailing",
    )
    return around + text + around + trailing


def sse(name: str | None, data: str) -> bytes:
    head = "" if name is None else f"event: {name}\n"
    return f"{head}data: {data}\n\n".encode("utf-8", "surrogatepass")


_ANTHROPIC_OPENING = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "model": "claude", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}}),
    ("content_block_start", {"type": "content_block_start", "index": 1,
        "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
    ("content_block_start", {"type": "content_block_start", "index": 2,
        "content_block": {"type": "thinking", "thinking": ""}}),
]  # fmt: skip
_ANTHROPIC_HOT = [
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_delta", "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
    {"type": "content_block_delta", "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": "1}"}},
    {"type": "content_block_delta", "index": 2,
        "delta": {"type": "thinking_delta", "thinking": "hm"}},
    {"type": "content_block_delta", "index": 2,
        "delta": {"type": "signature_delta", "signature": "c2ln"}},
]  # fmt: skip
_ANTHROPIC_CLOSING = [
    *(
        ("content_block_stop", {"type": "content_block_stop", "index": index})
        for index in (0, 1, 2)
    ),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 9}}),
    ("message_stop", {"type": "message_stop"}),
]  # fmt: skip


def draw_anthropic(data: st.DataObject) -> bytes:
    """An Anthropic stream whose hot events are hostile variants of the real shape."""
    hot = data.draw(st.lists(st.sampled_from(_ANTHROPIC_HOT), min_size=1, max_size=6), label="hot")
    opening = data.draw(st.integers(0, len(_ANTHROPIC_OPENING)), label="opening events")
    names = st.sampled_from(["content_block_delta"] * 6 + ["message", None, "content_block_stop"])
    body = [sse(name, json.dumps(value)) for name, value in _ANTHROPIC_OPENING[:opening]]
    for template in hot:
        value = mutate(data, obj(template), _ANTHROPIC_KEYS)
        body.append(sse(data.draw(names, label="event name"), data_line(data, value)))
    body.extend(sse(name, json.dumps(value)) for name, value in _ANTHROPIC_CLOSING)
    if data.draw(st.booleans(), label="a delta after message_stop"):
        value = mutate(data, obj(hot[0]), _ANTHROPIC_KEYS)
        body.append(sse("content_block_delta", data_line(data, value)))
    return b"".join(body)


def _chunk(choice: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
        "system_fingerprint": None, "choices": [] if choice is None else [choice], **extra,
    }  # fmt: skip


def _choice(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


_CHAT_OPENING = _chunk(_choice({"role": "assistant", "content": "", "refusal": None}))
_CHAT_HOT = [
    _chunk(_choice({"content": "Hi"}), obfuscation="abc"),
    _chunk(_choice({"content": " there"}), usage=None),
    _chunk(_choice({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "f", "arguments": ""}}]})),
    _chunk(_choice({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]})),
    _chunk(_choice({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})),
    _chunk(_choice({"reasoning": "hm", "channel": "analysis"})),
    _chunk(_choice({"reasoning_content": "so"})),
    _chunk(_choice({"refusal": "no"})),
    _chunk(_choice({"content": "two"}, index=1)),
    _chunk(_choice({}, "stop")),
    _chunk(_choice({}, "tool_calls", index=1)),
    _chunk(usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
]  # fmt: skip
_CHAT_CLOSING = [_chunk(_choice({}, "stop")), _chunk(_choice({}, "stop", index=1))]


def draw_chat(data: st.DataObject) -> bytes:
    """A Chat Completions stream whose chunks are hostile variants of the real shapes."""
    hot = data.draw(st.lists(st.sampled_from(_CHAT_HOT), min_size=1, max_size=6), label="hot")
    names = st.sampled_from([None] * 6 + ["message", "error"])
    body = [sse(None, json.dumps(_CHAT_OPENING))]
    for template in hot:
        value = mutate(data, obj(template), _CHAT_KEYS)
        body.append(sse(data.draw(names, label="event name"), data_line(data, value)))
    if data.draw(st.booleans(), label="finish"):
        body.extend(sse(None, json.dumps(value)) for value in _CHAT_CLOSING)
    body.append(b"data: [DONE]\n\n")
    if data.draw(st.booleans(), label="a chunk after [DONE]"):
        body.append(sse(None, json.dumps(_CHAT_HOT[0])))
    return b"".join(body)


def draw_chunkings(data: st.DataObject, body: bytes) -> list[list[bytes]]:
    return [[body], event_reads(body), pieces(body, draw_cuts(data, body))]


@FUZZ
@given(st.data())
def test_hostile_anthropic_deltas_read_the_same(data: st.DataObject) -> None:
    body = draw_anthropic(data)
    note(f"body = {body!r}")
    for chunks in draw_chunkings(data, body):
        assert_same(chunks, ANTHROPIC)
    assert_same([body], "auto")


@FUZZ
@given(st.data())
def test_hostile_chat_chunks_read_the_same(data: st.DataObject) -> None:
    body = draw_chat(data)
    note(f"body = {body!r}")
    route = data.draw(st.sampled_from([CHAT, f"{CHAT}:no_done", f"{CHAT}:no_finish_reason"]))
    for chunks in draw_chunkings(data, body):
        assert_same(chunks, route)
    assert_same([body], "auto")


def test_the_hostile_streams_reach_the_typed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unmutated streams of the strategies above are read by the typed readers."""
    hits = Hits(monkeypatch)
    anthropic = [sse(n, json.dumps(v)) for n, v in _ANTHROPIC_OPENING]
    anthropic += [sse("content_block_delta", json.dumps(v)) for v in _ANTHROPIC_HOT]
    anthropic += [sse(n, json.dumps(v)) for n, v in _ANTHROPIC_CLOSING]
    assert assert_same(anthropic, ANTHROPIC).outcome.value == "complete"
    assert hits.taken == len(_ANTHROPIC_HOT)  # the typed run's (the generic run has no reader)
    chat = [sse(None, json.dumps(v)) for v in [_CHAT_OPENING, *_CHAT_HOT, *_CHAT_CLOSING]]
    report = assert_same([*chat, b"data: [DONE]\n\n"], CHAT)
    assert report.outcome.value == "complete", report
    assert hits.taken == len(_ANTHROPIC_HOT) + 1 + len(_CHAT_HOT) + len(_CHAT_CLOSING)


# The pitfalls one by one: (route, event name, data) where the two readings could part.
_DELTA = '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}%s}'
_CHUNK = '{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}%s}]%s}'
PITFALLS = {
    "repeated key, last wins": (ANTHROPIC, _DELTA % ',"index":2'),
    "repeated key, last of another type": (ANTHROPIC, _DELTA % ',"index":"0"'),
    "repeated delta": (ANTHROPIC, _DELTA % ',"delta":{"type":"thinking_delta","thinking":"x"}'),
    "unknown key": (ANTHROPIC, _DELTA % ',"x":1'),
    "float overflow in an unknown key": (ANTHROPIC, _DELTA % ',"x":1e400'),
    "NaN in an unknown key": (ANTHROPIC, _DELTA % ',"x":NaN'),
    "deep nesting in an unknown key": (ANTHROPIC, _DELTA % (',"x":' + "[" * 300 + "]" * 300)),
    "huge integer in an unknown key": (ANTHROPIC, _DELTA % (',"x":' + "9" * 4301)),
    "index true": (ANTHROPIC, _DELTA % ',"index":true'),
    "index 0.0": (ANTHROPIC, _DELTA % ',"index":0.0'),
    "index -1": (ANTHROPIC, _DELTA % ',"index":-1'),
    "index past 64 bits": (ANTHROPIC, _DELTA % ',"index":18446744073709551616'),
    "text null": (ANTHROPIC, _DELTA.replace('"Hi"', "null") % ""),
    "text missing": (ANTHROPIC, _DELTA.replace(',"text":"Hi"', "") % ""),
    "escaped lone surrogate": (ANTHROPIC, _DELTA.replace("Hi", "\\ud800") % ""),
    "trailing data": (ANTHROPIC, _DELTA % "" + " {}"),
    "type mismatch": (ANTHROPIC, _DELTA.replace('"content_block_delta"', '"message_delta"') % ""),
    "chat: error object": (CHAT, _CHUNK % ("", ',"error":{"code":"x"}')),
    "chat: empty error object": (CHAT, _CHUNK % ("", ',"error":{}')),
    "chat: choice index null": (CHAT, _CHUNK % (',"index":null', "")),
    "chat: choice index missing": (CHAT, _CHUNK.replace('"index":0,', "") % ("", "")),
    "chat: usage with a float": (CHAT, _CHUNK % ("", ',"usage":{"prompt_tokens":1.0}')),
    "chat: usage true": (CHAT, _CHUNK % ("", ',"usage":{"prompt_tokens":true}')),
    "chat: usage empty": (CHAT, _CHUNK % ("", ',"usage":{}')),
    "chat: logprobs with floats": (CHAT, _CHUNK % (',"logprobs":{"content":[{"p":-0.5}]}', "")),
    "chat: content parts": (CHAT, _CHUNK.replace('"Hi"', '[{"type":"text"}]') % ("", "")),
    "chat: model not a string": (CHAT, _CHUNK.replace('"m"', "5") % ("", "")),
    "chat: overflow in obfuscation": (CHAT, _CHUNK % ("", ',"obfuscation":-1e400')),
}  # fmt: skip


@pytest.mark.parametrize("case", PITFALLS)
def test_pitfall_reads_the_same(case: str) -> None:
    route, data = PITFALLS[case]
    if route == ANTHROPIC:
        events = [sse(n, json.dumps(v)) for n, v in _ANTHROPIC_OPENING]
        events += [sse("content_block_delta", data), sse("content_block_delta", data)]
        events += [sse(n, json.dumps(v)) for n, v in _ANTHROPIC_CLOSING]
    else:
        events = [sse(None, data), sse(None, data), sse(None, json.dumps(_CHAT_CLOSING[0]))]
        events.append(b"data: [DONE]\n\n")
    assert_same(events, route)
    assert_same([b"".join(events)], route)


# --------------------------------------------------------------------------------------------
# (c) Hostile input never raises on the typed path, and reads as the generic path reads it
# --------------------------------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_typed_path_never_raises_on_hostile_input(data: st.DataObject) -> None:
    body = draw_any(data)
    route = data.draw(st.sampled_from([ANTHROPIC, CHAT, "auto"]), label="route")
    for chunks in draw_chunkings(data, body):
        assert_same(chunks, route)  # run() would raise out of feed/close


# --------------------------------------------------------------------------------------------
# The switch, subclasses and the shapes
# --------------------------------------------------------------------------------------------


def test_the_switch_is_read_when_a_stream_starts() -> None:
    with switch(False):
        assert not AnthropicMessagesRoute()._typed
        assert not OpenAIChatRoute()._typed
    assert AnthropicMessagesRoute()._typed
    assert OpenAIChatRoute()._typed


def test_a_subclass_with_its_own_handlers_reads_generically() -> None:
    class OwnDeltas(AnthropicMessagesRoute):
        name = "test.own_deltas"

        @handles("content_block_delta")
        def _count(self, obj: dict[str, Any], state: Any) -> None:
            state.unknown()

    class OwnRest(OpenAIChatRoute):
        name = "test.own_rest"

        def _on_delta_rest(self, index: int, delta: dict[str, Any], state: Any) -> None:
            state.unknown()

    assert not OwnDeltas()._typed
    assert not OwnRest()._typed
    assert all(profile()._typed for profile in openai_chat.OPENAI_CHAT_PROFILES)


def test_a_stream_of_foreign_chunks_stops_trying_the_typed_shape() -> None:
    route = OpenAIChatRoute()
    monitor = StreamMonitor(route)
    foreign = sse(None, '{"choices":[{"index":0,"delta":{"content":"a","x_new":1}}]}')
    monitor.feed(foreign * 3)
    assert route._typed
    monitor.feed(foreign)
    assert not route._typed
    assert monitor.state.output_deltas == 4


def test_typed_decoder_refuses_a_shape_it_would_not_read_in_full() -> None:
    class WithFloat(TypedShape):
        x: float

    class Lenient(msgspec.Struct):
        x: int

    class WithAny(TypedShape):
        x: Any

    for shape in (WithFloat, Lenient, WithAny):
        with pytest.raises(TypeError):
            typed_decoder(shape)


def test_typed_decoder_hands_back_what_it_does_not_take() -> None:
    class Point(TypedShape):
        x: int

    read = typed_decoder(Point)
    assert read is not None
    assert read('{"x": 1}') == Point(1)
    for text in ['{"x":1,"y":2}', '{"x":true}', '{"x":1} 1', "[DONE]", '{"x":1e400}', "\ud800"]:
        assert read(text) is None, text


_WITHOUT_MSGSPEC = """
import json, sys
sys.modules["msgspec"] = None  # as if the ``fast`` extra were not installed
from otelsse import StreamMonitor
from otelsse._core import json as core_json
from otelsse.routes import anthropic_messages, openai_chat
assert core_json.JSON_DECODER == "json"
assert anthropic_messages._read_block_delta is None and openai_chat._read_chunk is None
reports = {}
for route, path in json.loads(sys.argv[1]).items():
    monitor = StreamMonitor(route)
    monitor.feed(open(path, "rb").read())
    report = monitor.close()
    reports[route] = [report.outcome.value, report.stop_reason, report.event_count]
print(json.dumps(reports))
"""


def test_a_monitor_reading_typed_can_be_pickled() -> None:
    """As ``tests/core/test_truncation.py`` snapshots monitors: the route holds no reader."""
    for route in (ANTHROPIC, CHAT):
        monitor = StreamMonitor(route)
        copy = pickle.loads(pickle.dumps(monitor))
        assert copy.route == route


def test_routes_read_the_same_without_msgspec() -> None:
    from tests._fixtures import FIXTURES as ROOT

    paths = {
        ANTHROPIC: str(ROOT / "real/anthropic-text-and-two-tool-use.sse"),
        CHAT: str(ROOT / "real/openai-chat-parallel-tool-calls.sse"),
    }
    out = subprocess.check_output(
        [sys.executable, "-c", _WITHOUT_MSGSPEC, json.dumps(paths)], text=True
    )
    expected = {}
    for route, path in paths.items():
        _, report, _ = run([Path(path).read_bytes()], route, typed=True)
        expected[route] = [report.outcome.value, report.stop_reason, report.event_count]
    assert json.loads(out) == expected
