"""The Bedrock routes and their framer (``EventStreamParser``) on garbage and on mutated
recordings: ``StreamMonitor.feed``/``close`` never raise, the report is the same whatever the
chunking, and what the framer holds never exceeds its ceiling.

Inputs (Hypothesis draws, so they shrink):

- arbitrary bytes, and runs of well-formed frames whose names and JSON payloads are the words
  and keys the routes branch on (so that the routes, not only the framer, are exercised);
- the recorded ``bedrock-*.eventstream`` bodies (trimmed to their first and last frames), with
  one to four mutations: a bit flipped or bytes inserted anywhere (a CRC then fails), a cut, a
  frame dropped, duplicated, swapped with its neighbour or spliced in from another recording,
  an exception or error frame inserted, and a JSON value swapped inside a frame's payload or
  inside a chunk's base64 model event, its CRCs made right again (the route must judge it).

Every body is judged by both routes, with default or small ``Limits``, a drawn ``close()``
error and ``stop_at_end`` (the enforcing reader's mode), under one read, one byte per read, one
frame per read and a drawn split. A last property checks the framer's envelopes against
botocore's decoder on frames with every header value type (the ``matrix`` tier: CI's floor
runs the fast tier without botocore).

Examples per property: ``examples(100)`` (``tests/_tiers.py``: a tenth in the fast loop).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from otelsse import Limits, Outcome, StreamMonitor, StreamReport
from otelsse._core.eventstream import ERROR_EVENT, EXCEPTION_EVENT, EventStreamParser
from otelsse._monitor import StreamError
from tests._eventstream import chunk, error_frame, event, exception
from tests._fixtures import bedrock_fixture_names, read_fixture
from tests._tiers import examples

from ._checks import context, differences, untimed
from ._inputs import SWAP_VALUES
from ._strategies import FUZZ, close_errors, draw_cuts, route_json, small_limits

ROUTES = ("bedrock.converse_stream", "bedrock.invoke_model_with_response_stream")
#: Fewer examples than the SSE properties: each judges a body eight times over (two routes,
#: four chunkings), one byte per read included.
BEDROCK_FUZZ = settings(FUZZ, max_examples=examples(100))

# The words the Bedrock routes (and the families the invoke route reads) branch on.
WORDS = [
    "messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
    "messageStop", "metadata", "chunk", "end_turn", "tool_use", "max_tokens", "stop_sequence",
    "guardrail_intervened", "message_start", "content_block_start", "content_block_delta",
    "content_block_stop", "message_delta", "message_stop", "text_delta", "input_json_delta",
    "error", "stop", "length", "FINISH", "LENGTH", "throttlingException",
    "modelStreamErrorException", ":error", "",
]  # fmt: skip
KEYS = [
    "contentBlockIndex", "delta", "text", "toolUse", "input", "toolUseId", "name", "start",
    "reasoningContent", "stopReason", "usage", "inputTokens", "outputTokens", "bytes", "type",
    "index", "content_block", "partial_json", "stop_reason", "message", "generation",
    "outputText", "completionReason", "amazon-bedrock-invocationMetrics", "inputTokenCount",
]  # fmt: skip
EXCEPTIONS = ["throttlingException", "modelStreamErrorException", "internalServerException"]
#: A recording longer than this many frames keeps its first and last ones only.
HEAD_FRAMES, TAIL_FRAMES = 8, 5


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------


def split_frames(body: bytes) -> list[bytes]:
    """``body`` cut by the lengths its preludes declare (bytes that are no frame end it)."""
    found, at = [], 0
    while at + 4 <= len(body):
        (total,) = struct.unpack_from(">I", body, at)
        if total < 16 or at + total > len(body):
            break
        found.append(body[at : at + total])
        at += total
    if at < len(body):
        found.append(body[at:])
    return found


def reframe(whole: bytes, payload: bytes) -> bytes:
    """The frame ``whole`` with another payload, its lengths and CRCs made right."""
    (headers,) = struct.unpack_from(">I", whole, 4)
    block = whole[12 : 12 + headers]
    head = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    head += struct.pack(">I", zlib.crc32(head))
    message = head + block + payload
    return message + struct.pack(">I", zlib.crc32(message))


def payload_of(whole: bytes) -> bytes:
    (headers,) = struct.unpack_from(">I", whole, 4)
    return whole[12 + headers : -4]


def _trimmed(name: str) -> list[bytes]:
    found = split_frames(read_fixture(name))
    if len(found) > HEAD_FRAMES + TAIL_FRAMES:
        found = found[:HEAD_FRAMES] + found[-TAIL_FRAMES:]
    return found


SEEDS: dict[str, list[bytes]] = {name: _trimmed(name) for name in bedrock_fixture_names()}
ALL_SEED_FRAMES = [one for found in SEEDS.values() for one in found]


# --------------------------------------------------------------------------------------------
# JSON swaps inside payloads
# --------------------------------------------------------------------------------------------


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*at, index))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


_swap_values = st.one_of(st.sampled_from(SWAP_VALUES), st.sampled_from(WORDS))


def swap_json(data: st.DataObject, raw: bytes) -> bytes | None:
    """``raw`` (a JSON text) with one value swapped, or None when it is not JSON."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    path = data.draw(st.sampled_from(_paths(value)), label="path")
    if (
        path
        and data.draw(st.booleans(), label="delete the key instead")
        and isinstance(path[-1], str)
    ):
        parent = path[:-1]
        holder = value
        for step in parent:
            holder = holder[step]
        new = {key: item for key, item in holder.items() if key != path[-1]}
        return json.dumps(_replaced(value, parent, new)).encode()
    return json.dumps(_replaced(value, path, data.draw(_swap_values, label="value"))).encode()


def swap_in_frame(data: st.DataObject, whole: bytes) -> bytes:
    """A JSON value swapped in the frame's payload, or in the model event a chunk carries (a
    piece that is no whole frame, left by an earlier cut, stays as it is)."""
    if len(whole) < 16 or struct.unpack_from(">I", whole)[0] != len(whole):
        return whole
    payload = payload_of(whole)
    try:
        part = json.loads(payload)
    except ValueError:
        part = None
    if isinstance(part, dict) and isinstance(part.get("bytes"), str):
        try:
            inner = base64.b64decode(part["bytes"])
        except binascii.Error:  # an earlier mutation broke it: swap in the part itself
            inner = b""
        swapped = swap_json(data, inner)
        if swapped is not None:
            encoded = base64.b64encode(swapped).decode()
            return reframe(whole, json.dumps({**part, "bytes": encoded}).encode())
    swapped = swap_json(data, payload)
    return whole if swapped is None else reframe(whole, swapped)


# --------------------------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------------------------


def _frame_mutation(data: st.DataObject, found: list[bytes]) -> tuple[list[bytes], str]:
    kind = data.draw(
        st.sampled_from(["drop", "duplicate", "swap", "splice", "exception", "json"]),
        label="frame mutation",
    )
    if not found:
        return [data.draw(st.sampled_from(ALL_SEED_FRAMES), label="spliced")], "splice"
    at = data.draw(st.integers(0, len(found) - 1), label="frame")
    if kind == "drop":
        return found[:at] + found[at + 1 :], f"drop {at}"
    if kind == "duplicate":
        return found[: at + 1] + found[at:], f"duplicate {at}"
    if kind == "swap" and at + 1 < len(found):
        return [*found[:at], found[at + 1], found[at], *found[at + 2 :]], f"swap {at}"
    if kind == "exception":
        extra = data.draw(
            st.one_of(
                st.sampled_from(EXCEPTIONS).map(exception),
                st.just(error_frame("InternalFailure")),
            ),
            label="exception",
        )
        return [*found[:at], extra, *found[at:]], f"exception at {at}"
    if kind == "json":
        return [*found[:at], swap_in_frame(data, found[at]), *found[at + 1 :]], f"json {at}"
    spliced = data.draw(st.sampled_from(ALL_SEED_FRAMES), label="spliced")
    return [*found[:at], spliced, *found[at:]], f"splice at {at}"


def _byte_mutation(data: st.DataObject, body: bytes) -> tuple[bytes, str]:
    kind = data.draw(st.sampled_from(["flip", "cut", "junk"]), label="byte mutation")
    at = data.draw(st.integers(0, max(0, len(body) - 1)), label="at")
    if kind == "flip" and body:
        bit = data.draw(st.integers(0, 7), label="bit")
        return body[:at] + bytes([body[at] ^ (1 << bit)]) + body[at + 1 :], f"flip {at}.{bit}"
    if kind == "cut":
        return body[:at], f"cut at {at}"
    junk = data.draw(st.binary(min_size=1, max_size=16), label="junk")
    return body[:at] + junk + body[at:], f"junk at {at}"


def draw_mutated_recording(data: st.DataObject) -> bytes:
    name = data.draw(st.sampled_from(sorted(SEEDS)), label="recording")
    found = list(SEEDS[name])
    done = []
    for _ in range(data.draw(st.integers(1, 4), label="mutation count")):
        if data.draw(st.integers(0, 3), label="byte-level?") == 0:
            body, what = _byte_mutation(data, b"".join(found))
            found = split_frames(body)
        else:
            found, what = _frame_mutation(data, found)
        done.append(what)
    body = b"".join(found)
    note(f"recording {name}, mutations: {done}")
    note(f"body = {body!r}")
    return body


_names = st.sampled_from(WORDS)
_payloads = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), route_json, max_size=4).map(
        lambda value: json.dumps(value).encode()
    ),
    route_json.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=24),
)
_model_events = st.dictionaries(
    st.sampled_from(KEYS), st.one_of(route_json, _names), max_size=4
).map(chunk)
_frames = st.one_of(
    st.builds(event, _names, _payloads),
    _model_events,
    st.sampled_from(EXCEPTIONS).map(exception),
    st.just(error_frame("InternalFailure")),
    st.sampled_from(ALL_SEED_FRAMES),
)
#: Arbitrary bytes, or well-formed frames of the routes' words and keys (now and then cut).
garbage = st.one_of(
    st.binary(max_size=512),
    st.lists(_frames, max_size=12).map(b"".join),
    st.tuples(st.lists(_frames, min_size=1, max_size=8).map(b"".join), st.integers(0, 64)).map(
        lambda pair: pair[0][: max(0, len(pair[0]) - pair[1])]
    ),
)


def draw_garbage(data: st.DataObject) -> bytes:
    body = data.draw(garbage, label="garbage")
    note(f"body = {body!r}")
    return body


# --------------------------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------------------------


def frame_reads(body: bytes) -> list[bytes]:
    return split_frames(body) or [body]


def chunkings(body: bytes, cuts: list[int]) -> list[tuple[str, list[bytes]]]:
    points = sorted({cut for cut in cuts if 0 < cut < len(body)})
    split = [body[a:b] for a, b in itertools.pairwise([0, *points, len(body)])]
    return [
        ("one read", [body]),
        ("one byte per read", [body[i : i + 1] for i in range(len(body))]),
        ("one frame per read", frame_reads(body)),
        (f"split at {points}", split),
    ]


def run(
    chunks: list[bytes],
    route: str,
    limits: Limits | None,
    error: StreamError | None,
    stop_at_end: bool,
) -> tuple[list[tuple[Any, ...]], StreamReport]:
    """Feed ``chunks``; check after each read that the framer holds no more than its ceiling."""
    monitor = StreamMonitor(route, limits=limits, stop_at_end=stop_at_end)
    ceiling = max((limits or Limits()).max_event_bytes, 11)
    events = []
    for at, piece in enumerate(chunks):
        events.extend(tuple(one) for one in monitor.feed(piece, now=float(at)))
        held = monitor._parser._held_len  # type: ignore[attr-defined]
        assert held <= ceiling, f"the framer holds {held} bytes, past its ceiling {ceiling}"
    report = monitor.close(float(len(chunks)), error=error)
    assert isinstance(report.outcome, Outcome)
    return events, report


def check(data: st.DataObject, body: bytes) -> None:
    """Both routes, every chunking: never raises, the same events and report as one read."""
    limits = data.draw(st.none() | small_limits, label="limits")
    error = data.draw(close_errors, label="close error")
    stop_at_end = data.draw(st.booleans(), label="stop_at_end")
    cuts = draw_cuts(data, body)
    note(f"limits = {limits!r}, close(error={error!r}), stop_at_end={stop_at_end}")
    for route in ROUTES:
        expected: tuple[list[tuple[Any, ...]], dict[str, Any]] | None = None
        for name, chunks in chunkings(body, cuts):
            with context(f"{route}, chunking {name}"):
                events, report = run(chunks, route, limits, error, stop_at_end)
            got = (events, untimed(report))
            if expected is None:
                expected = got
                continue
            assert got[1] == expected[1], (
                f"{route}: report differs from one read under {name}: "
                f"{differences(expected[1], got[1])} (field: (one read, this chunking))"
            )
            assert got[0] == expected[0], f"{route}: events differ from one read under {name}"


@BEDROCK_FUZZ
@given(data=st.data())
def test_bedrock_routes_on_garbage_never_raise_and_ignore_the_chunking(
    data: st.DataObject,
) -> None:
    check(data, draw_garbage(data))


@BEDROCK_FUZZ
@given(data=st.data())
def test_bedrock_routes_on_mutated_recordings_never_raise_and_ignore_the_chunking(
    data: st.DataObject,
) -> None:
    check(data, draw_mutated_recording(data))


# --------------------------------------------------------------------------------------------
# The framer against botocore, on frames with any header value
# --------------------------------------------------------------------------------------------

_VALUE = {
    0: st.just(b""),
    1: st.just(b""),
    2: st.binary(min_size=1, max_size=1),
    3: st.binary(min_size=2, max_size=2),
    4: st.binary(min_size=4, max_size=4),
    5: st.binary(min_size=8, max_size=8),
    6: st.binary(max_size=12).map(lambda raw: struct.pack(">H", len(raw)) + raw),
    7: st.one_of(st.sampled_from(WORDS), st.text(max_size=6))
    .map(str.encode)
    .map(lambda raw: struct.pack(">H", len(raw)) + raw),
    8: st.binary(min_size=8, max_size=8),
    9: st.binary(min_size=16, max_size=16),
}
_header_names = st.one_of(
    st.sampled_from([":event-type", ":message-type", ":exception-type", ":error-code"]),
    st.sampled_from([":content-type", "x", ""]),
    st.sampled_from(["event", "exception", "error"]),  # as names too: any string will do
).map(str.encode)
_message_types = st.sampled_from([b"event", b"exception", b"error", b"other"])


@st.composite
def _header(draw: Callable[..., Any]) -> bytes:
    name = draw(_header_names)
    if name == b":message-type" and draw(st.booleans()):
        kind, value = 7, draw(_message_types)
        value = struct.pack(">H", len(value)) + value
    else:
        kind = draw(st.integers(0, 9))
        value = draw(_VALUE[kind])
    return bytes([len(name)]) + name + bytes([kind]) + value


def _raw_frame(block: bytes, payload: bytes) -> bytes:
    head = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    head += struct.pack(">I", zlib.crc32(head))
    message = head + block + payload
    return message + struct.pack(">I", zlib.crc32(message))


_typed_frames = st.builds(
    _raw_frame, st.lists(_header(), max_size=5).map(b"".join), st.binary(max_size=16)
)


@pytest.mark.matrix  # botocore, which CI's floor (the fast tier) does not install
@BEDROCK_FUZZ
@given(frames=st.lists(_typed_frames, min_size=1, max_size=6), data=st.data())
def test_the_framer_reads_every_header_value_type_as_botocore_does(
    frames: list[bytes], data: st.DataObject
) -> None:
    from botocore import eventstream

    body = b"".join(frames)
    note(f"body = {body!r}")
    expected: list[tuple[str, str]] = []
    refused = False
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(body)
    try:
        for message in buffer:
            headers = message.headers
            kind = headers.get(":message-type", "event")
            if kind == "error":
                code = headers.get(":error-code", "")
                expected.append((ERROR_EVENT, code if isinstance(code, str) else ""))
                continue
            if kind == "exception":
                name = headers.get(":exception-type", "")
                expected.append((EXCEPTION_EVENT, name if isinstance(name, str) else ""))
                continue
            name = headers.get(":event-type", "")
            expected.append(
                (name if isinstance(name, str) else "", message.payload.decode("utf-8", "replace"))
            )
    except eventstream.DuplicateHeader:
        refused = True
    parser = EventStreamParser(max_event_bytes=1 << 20)
    cuts = draw_cuts(data, body)
    found = []
    for piece in chunkings(body, cuts)[3][1]:
        found.extend((one.event, one.data) for one in parser.feed(piece))
    parser.close()
    assert found == expected
    assert (parser.corrupt == "headers") is refused
    assert not parser.discarded_event
