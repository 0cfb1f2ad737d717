"""The compiled hot paths of the framers answer exactly what the pure-Python framers answer.

``simple_event`` takes a read that is one whole simple event (``data: V`` or ``event: N`` then
``data: V``, strict UTF-8) and declines everything else; a declined read goes the pure way. So
the property is: for any read, and any stream of reads, a parser with the compiled path and one
without give the same events, counters and verdicts.
"""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsse._core import eventstream, framing
from otelsse._core.eventstream import EventStreamParser
from otelsse._core.framing import DEFAULT_MAX_EVENT_BYTES, SSEParser
from tests._eventstream import event, exception, frame, frames
from tests._fixtures import bedrock_fixture_names, fixture_names, read_fixture
from tests._tiers import examples

COMPILED = framing.simple_event


def test_the_compiled_path_is_built_unless_pure_python_was_asked() -> None:
    # A build without a compiler works (pure Python), but CI must test the compiled one too.
    if os.environ.get("OTELSSE_PURE_PYTHON") == "1":
        assert COMPILED is None
    else:
        assert COMPILED is not None, "the C speedup is not built (see hatch_build.py)"


def _parse(reads: list[bytes], compiled: bool) -> tuple[object, ...]:
    saved = framing.simple_event
    framing.simple_event = COMPILED if compiled else None
    try:
        parser = SSEParser()
        events = [event for read in reads for event in parser.feed(read)]
        parser.close()
    finally:
        framing.simple_event = saved
    return (
        events,
        parser.decoded_chars,
        parser.invalid_utf8_count,
        parser.comment_count,
        parser.unknown_field_count,
        parser.pending_line_chars,
        parser.pending_event_chars,
        parser.discarded_event,
        parser.last_event_id,
        parser.retry,
    )


def _same(reads: list[bytes]) -> None:
    assert _parse(reads, compiled=True) == _parse(reads, compiled=False)


# Reads close to the taken shape: every way of being almost one simple event.
_PIECES = [
    b"data: ", b"data:", b"event: ", b"event:", b"id: 7", b": c", b"retry: 5", b"\n", b"\n\n",
    b"\r", b"x", b"\xc3\xa9", b"\xc3", b"\xff", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\x00",
    b"\xef\xbb\xbf", b"data", b" ", b'{"a": 1}', b"message",
]  # fmt: skip
_near = st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join)
_simple = st.builds(
    lambda name, value, named: (
        (b"event: " + name + b"\n" if named else b"") + b"data: " + value + b"\n\n"
    ),
    st.binary(max_size=12),
    st.binary(max_size=24),
    st.booleans(),
)
_read = st.one_of(_simple, _near, st.binary(max_size=40))


@settings(max_examples=examples(1500), deadline=None)
@given(st.lists(_read, min_size=1, max_size=8))
def test_any_reads_give_what_the_pure_parser_gives(reads: list[bytes]) -> None:
    _same(reads)


@given(st.binary(max_size=12), st.binary(max_size=24), st.booleans())
def test_a_simple_event_is_taken_unless_it_is_not_one_line_of_strict_utf8(
    name: bytes, value: bytes, named: bool
) -> None:
    if COMPILED is None:
        pytest.fail("the C speedup is not built (see hatch_build.py)")
    read = (b"event: " + name + b"\n" if named else b"") + b"data: " + value + b"\n\n"
    head = name if named else b""
    # (A CR is taken as any other byte: the parser has turned every CR into LF before asking.)
    taken = b"\n" not in value and b"\n" not in head
    try:
        text = (head.decode("utf-8"), value.decode("utf-8"))
    except UnicodeDecodeError:
        taken = False
    found = COMPILED(read)
    if not taken:
        assert found is None
    else:
        assert found == (text[0] or "message", text[1], len(read.decode("utf-8")))
    _same([read])


@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_read_one_event_at_a_time_is_the_same(name: str) -> None:
    body = read_fixture(name)
    reads = [piece + b"\n\n" for piece in body.split(b"\n\n")[:-1]]
    _same(reads)
    _same([body])


def test_what_the_compiled_path_declines_is_left_to_the_parser() -> None:
    if COMPILED is None:
        pytest.fail("the C speedup is not built (see hatch_build.py)")
    assert COMPILED(b"data: x\n\n") == ("message", "x", 9)
    assert COMPILED(b"event: ping\ndata: {}\n\n") == ("ping", "{}", 22)
    assert COMPILED(b"event: \ndata: \n\n") == ("message", "", 16)
    for declined in (
        b"data: \xff\n\n",  # invalid UTF-8: the parser counts it
        b"event: \xed\xa0\x80\ndata: x\n\n",  # a surrogate's bytes
        b"data:x\n\n",  # no space: the general field rules
        b"data: a\nb\n\n",  # two lines
        b"event: a\ndata: b\ndata: c\n\n",
        b"data: x\n",  # not a whole event
        b"id: 1\ndata: x\n\n",
        b"",
    ):
        assert COMPILED(declined) is None, declined
    with pytest.raises(TypeError):
        COMPILED("data: x\n\n")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The event-stream framer's: whole_frame
# --------------------------------------------------------------------------------------------
#
# ``whole_frame`` takes a read that is one whole frame (both CRCs right, lengths within the
# format's maxima, a strict UTF-8 payload) and declines everything else; the parser then takes
# it whole only when the frame's header block is an event's it has read before. The property
# is the same: with it and without it, any reads give the same envelopes, counters and verdicts.

WHOLE_FRAME = eventstream.whole_frame
#: Ceilings the differential runs under: the default, and one a frame of the draws may pass.
CEILINGS = (DEFAULT_MAX_EVENT_BYTES, 64)


def test_the_compiled_frame_path_is_built_unless_pure_python_was_asked() -> None:
    if os.environ.get("OTELSSE_PURE_PYTHON") == "1":
        assert WHOLE_FRAME is None
    else:
        assert WHOLE_FRAME is not None, "the C speedup is not built (see hatch_build.py)"


def _frames_parse(reads: list[bytes], compiled: bool, ceiling: int) -> tuple[object, ...]:
    saved = eventstream.whole_frame
    eventstream.whole_frame = WHOLE_FRAME if compiled else None
    try:
        parser = EventStreamParser(max_event_bytes=ceiling)
        events = [event for read in reads for event in parser.feed(read)]
        parser.close()
    finally:
        eventstream.whole_frame = saved
    return (
        events,
        parser.decoded_chars,
        parser.decode_error_count,
        parser.corrupt,
        parser.limit_exceeded,
        parser.discarded_event,
        parser.pending_event_chars,
    )


def _same_frames(reads: list[bytes], ceiling: int = DEFAULT_MAX_EVENT_BYTES) -> None:
    assert _frames_parse(reads, True, ceiling) == _frames_parse(reads, False, ceiling)


def _damaged(frame_bytes: bytes, how: int, at: int) -> bytes:
    """``frame_bytes`` as is, with a bit flipped, cut short, or with a byte too many."""
    at %= len(frame_bytes)
    if how == 1:
        return frame_bytes[:at] + bytes([frame_bytes[at] ^ 0x01]) + frame_bytes[at + 1 :]
    if how == 2:
        return frame_bytes[:at]
    if how == 3:
        return frame_bytes + b"\x00"
    return frame_bytes


_payload = st.one_of(
    st.binary(max_size=40),  # invalid UTF-8 too
    st.text(max_size=20).map(str.encode),
    st.sampled_from([b'{"contentBlockIndex":0,"delta":{"text":"h\xc3\xa9"}}', b""]),
)
_frame = st.builds(
    lambda name, payload, how, at: _damaged(
        frame({":event-type": name, ":message-type": "event"}, payload), how, at
    ),
    st.sampled_from(["contentBlockDelta", "chunk", "é"]),
    _payload,
    st.integers(0, 3),
    st.integers(0, 1000),
)
_frame_read = st.one_of(
    _frame,
    st.builds(lambda t: exception(t), st.sampled_from(["throttlingException", "x"])),
    st.binary(max_size=30),
)


@settings(max_examples=examples(1500), deadline=None)
@given(st.lists(_frame_read, min_size=1, max_size=8), st.sampled_from(CEILINGS))
def test_any_frame_reads_give_what_the_pure_framer_gives(reads: list[bytes], ceiling: int) -> None:
    _same_frames(reads, ceiling)
    _same_frames([b"".join(reads)], ceiling)


@pytest.mark.parametrize("name", bedrock_fixture_names())
def test_every_bedrock_recording_read_one_frame_at_a_time_is_the_same(name: str) -> None:
    body = read_fixture(name)
    _same_frames(list(frames(body)))
    _same_frames([body])


def test_a_frame_is_taken_whole_only_when_its_block_is_an_event_read_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if WHOLE_FRAME is None:
        pytest.fail("the C speedup is not built (see hatch_build.py)")
    monkeypatch.setattr(eventstream, "_memo", {})
    taken: list[bytes] = []

    def counting(read: bytes) -> tuple[bytes, str] | None:
        taken.append(read)
        return WHOLE_FRAME(read)

    monkeypatch.setattr(eventstream, "whole_frame", counting)
    payload = '{"contentBlockIndex": 0, "delta": {"text": "é"}}'
    delta = event("contentBlockDelta", payload.encode())
    parser = EventStreamParser(max_event_bytes=DEFAULT_MAX_EVENT_BYTES)
    # Read by the loop, its block memoised; then taken whole, without the loop.
    assert [(e.event, e.data) for e in parser.feed(delta)] == [("contentBlockDelta", payload)]
    loop = EventStreamParser._frames
    monkeypatch.setattr(EventStreamParser, "_frames", None)
    assert [(e.event, e.data) for e in parser.feed(delta)] == [("contentBlockDelta", payload)]
    monkeypatch.setattr(EventStreamParser, "_frames", loop)
    assert taken == [delta, delta]
    assert parser.decoded_chars == 2 * len(payload)
    # An exception frame's block is never taken whole (the loop reads its type): asked, declined.
    assert [e.data for e in parser.feed(exception("throttlingException"))] == [
        "throttlingException"
    ]


def test_what_the_compiled_frame_path_declines_is_left_to_the_parser() -> None:
    if WHOLE_FRAME is None:
        pytest.fail("the C speedup is not built (see hatch_build.py)")
    headers = {":event-type": "chunk", ":message-type": "event"}
    good = frame(headers, '{"t":"é"}'.encode())
    block = good[12 : 12 + int.from_bytes(good[4:8], "big")]
    assert WHOLE_FRAME(good) == (block, '{"t":"é"}')
    assert WHOLE_FRAME(frame({}, b"")) == (b"", "")
    for declined in (
        frame(headers, b"\xff"),  # invalid UTF-8: the parser counts it
        frame(headers, b"\xed\xa0\x80"),  # a surrogate's bytes
        _damaged(good, 1, 9),  # the prelude's CRC
        _damaged(good, 1, 20),  # a header byte: the message CRC
        _damaged(good, 1, len(good) - 1),  # the message CRC itself
        good[:-1],  # not a whole frame
        good + good,  # two frames
        good + b"\x00",
        frame(headers, b"x")[:15],
        raw_frame(b"\x00" * (128 * 1024 + 1)),  # headers past the format's maximum
        b"",
    ):
        assert WHOLE_FRAME(declined) is None, declined[:40]
        _same_frames([declined])
    # Not bytes: the parser reads it.
    assert WHOLE_FRAME(bytearray(good)) is None  # type: ignore[arg-type]
    assert WHOLE_FRAME(memoryview(good)) is None  # type: ignore[arg-type]


def raw_frame(block: bytes) -> bytes:
    """A frame with this header block as is, its lengths and CRCs right."""
    head = len(block).to_bytes(4, "big")
    head = (16 + len(block)).to_bytes(4, "big") + head
    head += zlib.crc32(head).to_bytes(4, "big")
    message = head + block
    return message + zlib.crc32(message).to_bytes(4, "big")
