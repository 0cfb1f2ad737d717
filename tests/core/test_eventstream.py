"""Conformance of ``EventStreamParser`` to AWS's event-stream encoding
(``application/vnd.amazon.eventstream``), and its verdicts on bytes that are not frames.

The format: "Event stream encoding" (https://docs.aws.amazon.com/AmazonS3/latest/API/
RESTSelectObjectAppendix.html) and the Smithy "Amazon Event Stream Specification"; the reference
decoder is ``botocore/eventstream.py``. The verdicts are those the module docstring of
``otelsse/_core/eventstream.py`` decides. One test per rule.

Every check that feeds bytes feeds them under several chunkings: the reads must never show
through, in the envelopes or in the counts. The envelopes are checked against botocore's own
``EventStreamBuffer`` on every recorded body and every synthetic case (the ``matrix`` tier:
CI's floor runs the fast tier without botocore). Sweeps (every two-part split of every fixture
and case, every cut of every fixture) run in the ``matrix`` tier, and every split of the larger
fixtures (past 8 KiB, of their ``sweep_excerpt``) in the ``slow`` one (``tests/_tiers.py``); the
fast loop checks one small fixture of each and the splits at each frame's landmarks.
"""

from __future__ import annotations

import itertools
import pickle
import random
import struct
import tracemalloc
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from otelsse import Limits, Outcome, ParserClosedError, StreamMonitor
from otelsse._core import eventstream as eventstream_module
from otelsse._core.eventstream import ERROR_EVENT, EXCEPTION_EVENT, EventStreamParser
from otelsse._core.framing import DEFAULT_MAX_EVENT_BYTES
from tests._eventstream import error_frame, event, exception, frame, frame_ends, frames, header
from tests._fixtures import bedrock_fixture_names, read_fixture
from tests._helpers import FULL_SWEEP_LIMIT, STRIDE, random_split

KiB = 1024
MiB = 1024 * KiB
#: The format's maxima (botocore's ``_MAX_HEADERS_LENGTH`` and ``_MAX_PAYLOAD_LENGTH``).
MAX_HEADERS = 128 * KiB
MAX_PAYLOAD = 24 * MiB
#: Positions either side of a frame's landmarks that the windowed sweep splits at.
WINDOW = 3
#: The ``slow`` sweep splits a recording longer than this at every byte of its excerpt only.
SLOW_SWEEP_LIMIT = 8 * KiB

FIXTURES = bedrock_fixture_names()
SMALL = [name for name in FIXTURES if len(read_fixture(name)) <= FULL_SWEEP_LIMIT]
LARGE = [name for name in FIXTURES if name not in SMALL]
#: The fast loop's fixture: the smallest (Titan through InvokeModel, two frames).
FAST_FIXTURE = min(FIXTURES, key=lambda name: len(read_fixture(name)))

Envelope = tuple[str, str]
#: The events of ConverseStream's union (what the converse recordings are made of).
CONVERSE_EVENTS = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    }
)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def parse(
    chunks: Sequence[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> tuple[list[Envelope], EventStreamParser]:
    """Feed ``chunks`` to a new parser, then close it; the envelopes and the closed parser."""
    parser = EventStreamParser(max_event_bytes=max_event_bytes)
    found: list[Envelope] = []
    for chunk in chunks:
        found.extend((e.event, e.data) for e in parser.feed(chunk))
    found.extend((e.event, e.data) for e in parser.close())
    return found, parser


def counts(parser: EventStreamParser) -> dict[str, Any]:
    """Everything a (closed) parser reports about the stream."""
    return {
        "decoded_chars": parser.decoded_chars,
        "decode_error_count": parser.decode_error_count,
        "corrupt": parser.corrupt,
        "limit_exceeded": parser.limit_exceeded,
        "discarded_event": parser.discarded_event,
        "pending_event_chars": parser.pending_event_chars,
        "pending_line_chars": parser.pending_line_chars,
        "comment_count": parser.comment_count,
        "ended": parser.ended,
    }


def reads_of(body: bytes, size: int) -> list[bytes]:
    return [body[at : at + size] for at in range(0, len(body), size)]


def random_reads(body: bytes, seed: object, max_size: int) -> list[bytes]:
    return random_split(body, random.Random(str(seed)), max_size)


def frame_reads(body: bytes) -> list[bytes]:
    """``body`` one frame per read, a cut last frame (or bytes that are no frame) last."""
    cuts = [0, *(end for end in frame_ends(body) if end < len(body)), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def chunkings(body: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """The reads every check of a fixture feeds: whole, one byte, one frame and 4 KiB per read,
    and seeded random reads."""
    yield "whole", [body]
    yield "one byte per read", reads_of(body, 1)
    yield "one frame per read", frame_reads(body)
    yield "4 KiB reads", reads_of(body, 4 * KiB)
    for max_size in (3, 17, 300):
        yield f"random reads up to {max_size}", random_reads(body, (len(body), max_size), max_size)


def landmarks(body: bytes) -> list[int]:
    """Split positions where a frame's reading changes: either side of each frame's start, of
    its length fields, of the end of its prelude and of its header block, and of its message
    CRC (frames walked by their declared lengths while those make sense)."""
    positions: set[int] = set()
    at = 0
    while at < len(body):
        points = [at, at + 4, at + 8, at + 12]
        if at + 12 > len(body):
            positions.update(p + d for p in points for d in (-1, 0, 1))
            break
        total, headers = struct.unpack_from(">II", body, at)
        points += [at + 12 + headers, at + total - 4]
        positions.update(p + d for p in points for d in (-1, 0, 1))
        if total < 16:
            break
        at += total
    return sorted(p for p in positions if 0 < p < len(body))


def every_split(body: bytes, full: bool) -> Iterator[tuple[str, list[bytes]]]:
    """The whole body, one byte per read, and every two-part split (``full``) or those at its
    ``landmarks``."""
    yield "whole", [body]
    yield "one byte per read", reads_of(body, 1)
    for cut in range(1, len(body)) if full else landmarks(body):
        yield f"split at {cut}", [body[:cut], body[cut:]]


def verdict(
    body: bytes, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, full: bool = False
) -> tuple[list, dict]:
    """The envelopes and counts of ``body``, checked to be the same for one byte per read and
    two-part splits (``every_split``): every one of them in the ``matrix`` sweep below."""
    expected: tuple[list, dict] | None = None
    for name, chunks in every_split(body, full):
        found, parser = parse(chunks, max_event_bytes)
        got = (found, counts(parser))
        if expected is None:
            expected = got
        assert got == expected, f"{name} differs from one read"
    assert expected is not None
    return expected


def botocore_envelopes(body: bytes) -> list[Envelope]:
    """The envelopes of ``body`` by botocore's decoder: each event frame's ``:event-type`` and
    its payload decoded as UTF-8 (invalid sequences replaced); ``EXCEPTION_EVENT`` and its
    ``:exception-type`` for an exception, ``ERROR_EVENT`` and its ``:error-code`` for an error."""
    from botocore import eventstream  # the test extra's; CI's floor runs no test that needs it

    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(body)
    found = []
    for message in buffer:
        headers = message.headers
        kind = headers.get(":message-type", "event")
        if kind == "error":
            found.append((ERROR_EVENT, headers.get(":error-code", "")))
        elif kind == "exception":
            found.append((EXCEPTION_EVENT, headers.get(":exception-type", "")))
        else:
            found.append(
                (headers.get(":event-type", ""), message.payload.decode("utf-8", "replace"))
            )
    return found


def botocore_refuses(body: bytes) -> bool:
    """botocore's decoder raises on ``body`` (it stops silently only at a cut frame)."""
    from botocore import eventstream

    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(body)
    try:
        list(buffer)
    except Exception:
        return True
    return False


def raw_frame(block: bytes, payload: bytes = b"") -> bytes:
    """A frame with this header block as is (valid lengths and CRCs around whatever it holds)."""
    head = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    head += struct.pack(">I", zlib.crc32(head))
    message = head + block + payload
    return message + struct.pack(">I", zlib.crc32(message))


def prelude(total: int, headers: int) -> bytes:
    """A frame's first 12 bytes declaring these lengths, with a valid prelude CRC."""
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


def typed_header(name: bytes, kind: int, value: bytes) -> bytes:
    """One header of any value type: name length, name, type byte, the value's bytes."""
    return bytes([len(name)]) + name + bytes([kind]) + value


def flip(body: bytes, at: int) -> bytes:
    return body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1 :]


def envelope_of(frame_bytes: bytes) -> Envelope:
    found, _ = parse([frame_bytes])
    assert len(found) == 1
    return found[0]


# Good frames around the bad ones: the events before a bad frame are dispatched, none after.
BEFORE = [
    event("messageStart", {"role": "assistant"}),
    event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "héllo ✓"}}),
]
AFTER = event("messageStop", {"stopReason": "end_turn"})
BEFORE_ENVELOPES = [envelope_of(f) for f in BEFORE]
BEFORE_CHARS = sum(len(data) for _, data in BEFORE_ENVELOPES)


# --------------------------------------------------------------------------------------------
# Real recordings, under every chunking
# --------------------------------------------------------------------------------------------


def _fixture_param(name: str) -> Any:
    return pytest.param(name, marks=[] if name == FAST_FIXTURE else [pytest.mark.matrix])


@pytest.mark.parametrize("name", [_fixture_param(name) for name in FIXTURES])
def test_every_recorded_body_gives_the_same_envelopes_under_every_chunking(name: str) -> None:
    body = read_fixture(name)
    expected, parser = parse([body])
    assert len(expected) == len(frame_ends(body)) > 1
    assert frame_ends(body)[-1] == len(body), "every recorded body ends at a frame's end"
    assert {kind for kind, _ in expected} <= {"chunk", *CONVERSE_EVENTS}
    expected_counts = counts(parser)
    assert expected_counts["decoded_chars"] == sum(len(data) for _, data in expected)
    assert expected_counts["decode_error_count"] == 0
    assert not expected_counts["discarded_event"]
    assert expected_counts["pending_event_chars"] == 0
    assert expected_counts["corrupt"] is None
    for how, chunks in chunkings(body):
        assert b"".join(chunks) == body
        found, parser = parse(chunks)
        assert found == expected, how
        assert counts(parser) == expected_counts, how


def _mismatched_splits(body: bytes, positions: Sequence[int]) -> list[int]:
    expected_found, parser = parse([body])
    expected = (expected_found, counts(parser))
    bad = []
    for position in positions:
        found, parser = parse([body[:position], body[position:]])
        if (found, counts(parser)) != expected:
            bad.append(position)
    return bad


def windowed_positions(body: bytes) -> list[int]:
    """Split positions around each frame's landmarks (its start, the end of its prelude and of
    its header block, its message CRC) and at a stride."""
    positions = set(range(STRIDE, len(body), STRIDE))
    start = 0
    for end in frame_ends(body):
        (headers,) = struct.unpack_from(">I", body, start + 4)
        for landmark in (start, start + 12, start + 12 + headers, end - 4):
            positions.update(range(landmark - WINDOW, landmark + WINDOW + 1))
        start = end
    return sorted(p for p in positions if 0 < p < len(body))


@pytest.mark.matrix  # every split of every small fixture, a window of each large one
@pytest.mark.parametrize("name", FIXTURES)
def test_every_two_part_split_gives_the_envelopes_and_counts_of_one_read(name: str) -> None:
    body = read_fixture(name)
    if name in SMALL:
        positions = list(range(1, len(body)))
    else:
        positions = windowed_positions(body)
        assert len(positions) > len(body) // STRIDE
    assert _mismatched_splits(body, positions) == []


def sweep_excerpt(body: bytes) -> bytes:
    """``body``, or past ``SLOW_SWEEP_LIMIT`` its frames up to that size and its last two: every
    kind of frame a recording has is in its first frames and its last (one run of ``chunk``
    frames is what makes the Llama recording long), and a split costs a parse of the body."""
    if len(body) <= SLOW_SWEEP_LIMIT:
        return body
    ends = [0, *frame_ends(body)]
    head = max(end for end in ends if end <= SLOW_SWEEP_LIMIT)
    return body[:head] + body[ends[-3] :]


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_every_two_part_split_of_a_large_fixture_gives_the_same_result(name: str) -> None:
    body = sweep_excerpt(read_fixture(name))
    assert frame_ends(body)[-1] == len(body)
    assert _mismatched_splits(body, range(1, len(body))) == []


# --------------------------------------------------------------------------------------------
# EOF inside a frame: truncation, never an error, never silence
# --------------------------------------------------------------------------------------------


def assert_every_cut_is_judged(body: bytes, cuts: Sequence[int] | None = None) -> None:
    """Cut ``body`` at each of ``cuts`` (every offset by default): the frames before the cut
    are dispatched; a cut inside a frame is ``discarded_event`` with the bytes it held as
    ``pending_event_chars``; a cut at a frame boundary leaves nothing pending.

    The parser is snapshotted at each frame boundary (fed one frame per read) and each cut
    resumes from the last boundary before it: what each parser is fed is exactly ``body[:cut]``.
    """
    ends = [0, *frame_ends(body)]
    assert ends[-1] == len(body)
    expected, _ = parse([body])
    parser = EventStreamParser(max_event_bytes=DEFAULT_MAX_EVENT_BYTES)
    snapshots = [pickle.dumps(parser)]
    for start, end in itertools.pairwise(ends):
        parser.feed(body[start:end])
        snapshots.append(pickle.dumps(parser))
    index = 0
    for cut in range(len(body) + 1) if cuts is None else cuts:
        while index + 1 < len(ends) and ends[index + 1] <= cut:
            index += 1
        boundary = ends[index]
        resumed: EventStreamParser = pickle.loads(snapshots[index])
        found = [(e.event, e.data) for e in resumed.feed(body[boundary:cut])]
        assert found == [], cut
        assert resumed.close() == []
        assert resumed.discarded_event is (cut != boundary), cut
        assert resumed.pending_event_chars == cut - boundary, cut
        assert resumed.decode_error_count == 0, cut
        assert resumed.corrupt is None, cut
        chars = sum(len(data) for _, data in expected[:index])
        assert resumed.decoded_chars == chars, cut


@pytest.mark.parametrize("name", [_fixture_param(name) for name in FIXTURES])
def test_a_cut_at_any_byte_discards_the_frame_it_cuts_and_holds_its_bytes(name: str) -> None:
    assert_every_cut_is_judged(read_fixture(name))


def test_a_cut_gives_the_same_verdict_under_any_chunking() -> None:
    body = read_fixture(FAST_FIXTURE)
    ends = frame_ends(body)
    for cut in (1, 11, 12, 13, ends[0] - 1, ends[0], ends[0] + 5, len(body) - 4, len(body) - 1):
        cut_body = body[:cut]
        found, parser = parse([cut_body])
        for how, chunks in chunkings(cut_body):
            got, other = parse(chunks)
            assert (got, counts(other)) == (found, counts(parser)), (cut, how)
        boundary = max(end for end in [0, *ends] if end <= cut)
        assert parser.pending_event_chars == cut - boundary, cut
        assert parser.discarded_event is (cut != boundary), cut


def test_an_empty_body_has_no_events_and_nothing_pending() -> None:
    found, parser = parse([])
    assert found == []
    assert counts(parser) == counts(EventStreamParser(max_event_bytes=1))


def test_feeding_empty_bytes_changes_nothing() -> None:
    body = b"".join(BEFORE)
    found, parser = parse([b"", body[:5], b"", body[5:], b""])
    expected, whole = parse([body])
    assert (found, counts(parser)) == (expected, counts(whole))


# --------------------------------------------------------------------------------------------
# Bytes that are not a frame: a decode error, parsing stopped at it
# --------------------------------------------------------------------------------------------

_GOOD = event("contentBlockStop", {"contentBlockIndex": 0})
_PAYLOAD_AT = len(_GOOD) - 8  # a byte of the payload


def _bad_header_block(block: bytes) -> bytes:
    return raw_frame(block, b"{}")


# (frame that is not a frame, the check it fails). A declared length the format forbids needs
# only the prelude: nothing after it is read.
NOT_FRAMES = {
    "prelude CRC flipped": (flip(_GOOD, 9), "prelude_crc"),
    "total length flipped": (flip(_GOOD, 3), "prelude_crc"),
    "headers length flipped": (flip(_GOOD, 7), "prelude_crc"),
    "payload byte flipped": (flip(_GOOD, _PAYLOAD_AT), "message_crc"),
    "header byte flipped": (flip(_GOOD, 14), "message_crc"),
    "message CRC flipped": (flip(_GOOD, len(_GOOD) - 1), "message_crc"),
    "total length 0": (prelude(0, 0), "length"),
    "total length 12": (prelude(12, 0) + b"\0" * 4, "length"),
    "total length 15": (prelude(15, 0) + b"\0" * 4, "length"),
    "headers longer than the frame": (prelude(20, 5) + b"\0" * 8, "length"),
    "headers length 2**32 - 1": (prelude(16, 0xFFFFFFFF), "length"),
    "headers over 128 KiB declared": (prelude(16 + MAX_HEADERS + 1, MAX_HEADERS + 1), "length"),
    "payload over 24 MiB declared": (prelude(16 + MAX_PAYLOAD + 1, 0), "length"),
    "unknown value type 10": (_bad_header_block(typed_header(b"x", 10, b"")), "headers"),
    "unknown value type 255": (_bad_header_block(typed_header(b"x", 255, b"")), "headers"),
    "string value past the block": (
        _bad_header_block(typed_header(b"x", 7, b"\x00\x32abc")),
        "headers",
    ),
    "long value past the block": (_bad_header_block(typed_header(b"n", 5, b"\0\0")), "headers"),
    "uuid value past the block": (_bad_header_block(typed_header(b"u", 9, b"\0" * 15)), "headers"),
    "value length cut": (_bad_header_block(typed_header(b"x", 6, b"\x00")), "headers"),
    "name past the block": (_bad_header_block(bytes([20]) + b"abc"), "headers"),
    "name without a type": (_bad_header_block(bytes([3]) + b"abc"), "headers"),
    "duplicate name": (
        _bad_header_block(header(":event-type", "a") + header(":event-type", "a")),
        "headers",
    ),
    "duplicate name of another type": (
        _bad_header_block(typed_header(b"flag", 0, b"") + typed_header(b"flag", 1, b"")),
        "headers",
    ),
    "name not UTF-8": (_bad_header_block(typed_header(b"\xff\xfe", 0, b"")), "headers"),
    "event name not UTF-8": (
        _bad_header_block(typed_header(b":event-type", 7, b"\x00\x02\xc3\x28")),
        "headers",
    ),
}


@pytest.mark.parametrize(("bad", "why"), NOT_FRAMES.values(), ids=list(NOT_FRAMES))
def test_bytes_that_are_not_a_frame_stop_parsing_as_a_decode_error(bad: bytes, why: str) -> None:
    body = b"".join(BEFORE) + bad + AFTER
    found, state = verdict(body)
    assert found == BEFORE_ENVELOPES  # the events before it, none after
    assert state["corrupt"] == why
    assert state["decode_error_count"] == 1
    assert state["decoded_chars"] == BEFORE_CHARS
    # Nothing is pending: the bytes after the bad frame are ignored, not a cut frame.
    assert not state["discarded_event"]
    assert state["pending_event_chars"] == 0
    assert state["limit_exceeded"] is None


@pytest.mark.matrix  # botocore
@pytest.mark.parametrize(
    "name",
    [
        "prelude CRC flipped",
        "total length flipped",
        "payload byte flipped",
        "message CRC flipped",
        "headers over 128 KiB declared",
        "payload over 24 MiB declared",
        "duplicate name",
        "unknown value type 10",
    ],
)
def test_botocore_refuses_the_frames_the_parser_calls_corrupt(name: str) -> None:
    bad, _ = NOT_FRAMES[name]
    assert botocore_refuses(b"".join(BEFORE) + bad + AFTER)


def test_bytes_after_a_bad_frame_are_never_parsed_in_later_reads() -> None:
    parser = EventStreamParser(max_event_bytes=DEFAULT_MAX_EVENT_BYTES)
    bad, _ = NOT_FRAMES["payload byte flipped"]
    found = [(e.event, e.data) for e in parser.feed(b"".join(BEFORE) + bad)]
    assert found == BEFORE_ENVELOPES
    before = counts(parser)
    assert parser.feed(AFTER * 3) == []
    assert parser.feed(b"\0" * 100) == []
    assert parser.close() == []
    assert counts(parser) == before | {"decode_error_count": 1}


def test_garbage_at_the_start_is_corrupt_once_a_prelude_is_in() -> None:
    found, state = verdict(b"data: {}\n\n" + AFTER)
    assert found == []
    assert (state["corrupt"], state["decode_error_count"]) == ("prelude_crc", 1)
    # Fewer bytes than a prelude: a cut frame, never a decode error.
    found, state = verdict(b"data: {}\n\n")
    assert found == []
    assert (state["corrupt"], state["decode_error_count"]) == (None, 0)
    assert (state["discarded_event"], state["pending_event_chars"]) == (True, 10)


def test_the_format_maxima_themselves_are_frames() -> None:
    # Exactly 128 KiB of headers and 24 MiB of payload: declared lengths the format allows (a
    # ceiling that high holds them), so their preludes alone are a cut frame, not corrupt.
    big = 16 + MAX_HEADERS + MAX_PAYLOAD
    for head in (prelude(big, MAX_HEADERS), prelude(16 + MAX_PAYLOAD, 0)):
        found, parser = parse([head], max_event_bytes=64 * MiB)
        assert found == []
        assert parser.corrupt is None
        assert (parser.discarded_event, parser.pending_event_chars) == (True, 12)


def test_a_declared_payload_past_the_format_maximum_is_corrupt_whatever_the_ceiling() -> None:
    head = prelude(16 + MAX_PAYLOAD + 1, 0)
    for ceiling in (1 * MiB, DEFAULT_MAX_EVENT_BYTES, 64 * MiB):
        _, parser = parse([head], max_event_bytes=ceiling)
        assert (parser.corrupt, parser.limit_exceeded) == ("length", None), ceiling


# --------------------------------------------------------------------------------------------
# Payloads: UTF-8, replaced and counted
# --------------------------------------------------------------------------------------------


_UTF8_BODY = (
    BEFORE[0] + event("contentBlockDelta", b'{"t": "a\xffb\xfe\xe2\x82 \xef\xbf\xbd ok"}') + AFTER
)


def test_invalid_utf8_in_a_payload_is_replaced_and_counted() -> None:
    body = _UTF8_BODY
    found, state = verdict(body)
    assert [name for name, _ in found] == ["messageStart", "contentBlockDelta", "messageStop"]
    assert found[1][1] == '{"t": "a\ufffdb\ufffd\ufffd \ufffd ok"}'
    # Three invalid sequences (the valid U+FFFD is not one); parsing goes on.
    assert state["decode_error_count"] == 3
    assert state["corrupt"] is None
    assert state["decoded_chars"] == sum(len(data) for _, data in found)


def test_a_valid_replacement_character_is_not_counted() -> None:
    found, state = verdict(event("x", "\ufffd".encode() * 3))
    assert found == [("x", "\ufffd" * 3)]
    assert state["decode_error_count"] == 0


def test_decoded_chars_counts_characters_not_bytes() -> None:
    _, state = verdict(event("x", "é✓🙂".encode()))
    assert state["decoded_chars"] == 3


# --------------------------------------------------------------------------------------------
# The ceiling on one frame
# --------------------------------------------------------------------------------------------

CEILING = 256


def _sized_event(total: int) -> bytes:
    """An event frame of exactly ``total`` bytes."""
    base = event("x", b"")
    return event("x", b"p" * (total - len(base)))


def test_a_frame_longer_than_the_ceiling_stops_parsing_at_its_prelude() -> None:
    big = _sized_event(CEILING + 1)
    body = b"".join(BEFORE) + big + AFTER
    found, state = verdict(body, CEILING)
    assert found == BEFORE_ENVELOPES
    assert state["limit_exceeded"] == "event"
    assert state["pending_event_chars"] == CEILING + 1  # its declared length
    assert not state["discarded_event"]
    assert (state["corrupt"], state["decode_error_count"]) == (None, 0)


def test_a_frame_over_the_ceiling_is_judged_before_its_bytes_are_held() -> None:
    # The prelude alone decides: the 16 MiB the peer declares are never waited for.
    declared = 16 * MiB
    parser = EventStreamParser(max_event_bytes=CEILING)
    assert parser.feed(BEFORE[0] + prelude(declared, 0)) != []
    assert parser.limit_exceeded == "event"
    assert parser.pending_event_chars == declared
    assert parser.feed(b"\0" * 4096) == []
    parser.close()
    assert not parser.discarded_event
    assert parser.pending_event_chars == declared


def test_a_frame_exactly_at_the_ceiling_is_read() -> None:
    found, state = verdict(_sized_event(CEILING) + AFTER, CEILING)
    assert [name for name, _ in found] == ["x", "messageStop"]
    assert state["limit_exceeded"] is None


def test_a_corrupt_prelude_over_the_ceiling_is_corrupt_not_a_ceiling() -> None:
    bad = flip(prelude(CEILING * 2, 0), 9)
    _, state = verdict(bad, CEILING)
    assert (state["corrupt"], state["limit_exceeded"]) == ("prelude_crc", None)


# --------------------------------------------------------------------------------------------
# stop() and end_after(): the counters of a read that ended after that event
# --------------------------------------------------------------------------------------------

_STOP_FRAMES = [
    event("a", {"t": "é" * 10}),
    event("b", b'{"t": "\xff\xff"}'),  # two invalid sequences
    event("c", {"t": "x" * 50}),
    exception("throttlingException"),
    event("d", b'{"t": "\xfe"}'),
]
# What may follow in the same read: nothing, another frame, a cut frame, a corrupt frame, a
# frame over the ceiling.
_TAILS = {
    "nothing": b"",
    "a cut frame": AFTER[:-3],
    "a corrupt frame": NOT_FRAMES["payload byte flipped"][0],
    "a frame over the ceiling": _sized_event(CEILING + 1),
}


def _as_if_ended_after(used: int) -> dict[str, Any]:
    """The counters of a parser fed only the first ``used`` frames."""
    _, parser = parse([b"".join(_STOP_FRAMES[:used])], CEILING)
    return counts(parser)


@pytest.mark.parametrize("tail", _TAILS.values(), ids=list(_TAILS))
def test_stop_after_an_event_gives_the_counters_of_a_read_ending_there(tail: bytes) -> None:
    for used in range(1, len(_STOP_FRAMES) + 1):
        parser = EventStreamParser(max_event_bytes=CEILING)
        assert len(parser.feed(b"".join(_STOP_FRAMES) + tail)) == len(_STOP_FRAMES)
        parser.stop("text", events_used=used)
        parser.judged()
        assert parser.feed(AFTER) == [], used
        assert parser.close() == [], used
        assert counts(parser) == _as_if_ended_after(used) | {"limit_exceeded": "text"}, used


@pytest.mark.parametrize("tail", _TAILS.values(), ids=list(_TAILS))
def test_end_after_an_event_gives_the_counters_of_a_read_ending_there(tail: bytes) -> None:
    for used in range(1, len(_STOP_FRAMES) + 1):
        parser = EventStreamParser(max_event_bytes=CEILING)
        assert len(parser.feed(b"".join(_STOP_FRAMES) + tail)) == len(_STOP_FRAMES)
        parser.end_after(used)
        assert parser.ended, used
        assert parser.feed(AFTER) == [], used
        assert parser.close() == [], used
        assert counts(parser) == _as_if_ended_after(used) | {"ended": True}, used


def test_stop_after_an_event_of_a_later_read_forgets_only_that_read() -> None:
    parser = EventStreamParser(max_event_bytes=CEILING)
    parser.feed(b"".join(_STOP_FRAMES[:2]))
    parser.judged()
    parser.feed(b"".join(_STOP_FRAMES[2:]))
    parser.stop("accumulator", events_used=1)
    parser.close()
    assert counts(parser) == _as_if_ended_after(3) | {"limit_exceeded": "accumulator"}


def test_the_first_ceiling_named_stays() -> None:
    parser = EventStreamParser(max_event_bytes=CEILING)
    parser.feed(b"".join(_STOP_FRAMES))
    parser.stop("text")
    parser.stop("events")
    assert parser.limit_exceeded == "text"
    assert parser.feed(AFTER) == []


def test_dispatch_pending_never_dispatches_a_cut_frame() -> None:
    parser = EventStreamParser(max_event_bytes=CEILING)
    parser.feed(AFTER[:-1])
    assert parser.dispatch_pending() == []
    parser.close()
    assert (parser.discarded_event, parser.pending_event_chars) == (True, len(AFTER) - 1)


# --------------------------------------------------------------------------------------------
# After close
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["fresh", "holding", "corrupt", "over the ceiling", "ended"])
def test_feed_and_close_after_close_raise(state: str) -> None:
    parser = EventStreamParser(max_event_bytes=CEILING)
    if state == "holding":
        parser.feed(AFTER[:5])
    elif state == "corrupt":
        parser.feed(NOT_FRAMES["prelude CRC flipped"][0])
    elif state == "over the ceiling":
        parser.feed(_sized_event(CEILING + 1))
    elif state == "ended":
        parser.feed(AFTER)
        parser.end_after(1)
    parser.close()
    with pytest.raises(ParserClosedError):
        parser.feed(AFTER)
    with pytest.raises(ParserClosedError):
        parser.feed(b"")
    with pytest.raises(ParserClosedError):
        parser.close()


# --------------------------------------------------------------------------------------------
# Message types and header values
# --------------------------------------------------------------------------------------------


def test_an_error_frame_is_the_error_envelope_with_its_code_as_data() -> None:
    body = BEFORE[0] + error_frame("InternalFailure", "a message that is never kept")
    found, state = verdict(body)
    assert found == [BEFORE_ENVELOPES[0], (ERROR_EVENT, "InternalFailure")]
    assert "never kept" not in repr(found)
    assert state["decode_error_count"] == 0


def test_an_exception_frame_is_the_exception_envelope_with_its_type() -> None:
    # Its message is free text: not in the envelope.
    body = exception("modelStreamErrorException", "the model failed") + AFTER
    found, _ = verdict(body)
    assert found == [(EXCEPTION_EVENT, "modelStreamErrorException"), envelope_of(AFTER)]


def test_a_frame_without_a_message_type_is_an_event() -> None:
    found, _ = verdict(frame({":event-type": "chunk"}, b"{}"))
    assert found == [("chunk", "{}")]


def test_a_frame_of_an_unknown_message_type_is_named_by_its_event_type() -> None:
    found, _ = verdict(frame({":message-type": "future", ":event-type": "x"}, b"{}"))
    assert found == [("x", "{}")]


def test_an_event_frame_without_an_event_type_is_named_by_the_empty_string() -> None:
    found, state = verdict(frame({":message-type": "event"}, b"{}") + raw_frame(b"", b""))
    assert found == [("", "{}"), ("", "")]
    assert state["corrupt"] is None


def test_header_order_does_not_matter() -> None:
    a = frame({":message-type": "event", ":content-type": "x", ":event-type": "e"}, b"1")
    b = frame({":event-type": "e", ":message-type": "event", ":content-type": "x"}, b"1")
    assert envelope_of(a) == envelope_of(b) == ("e", "1")


@pytest.mark.parametrize(
    "headers",
    [
        {":event-type": "contentBlockDelta", ":content-type": "application/json"},
        {":message-type": "exception", ":exception-type": "throttlingException"},
        {":event-type": "é" * 100, "x": "v" * 40_000},  # multi-byte, a long value
        {},
    ],
)
def test_encode_frame_writes_the_frame_the_format_defines(headers: dict[str, str]) -> None:
    # Against this suite's own encoder, built from the format's definition.
    payload = '{"text":"ü"}'.encode()
    assert eventstream_module.encode_frame(headers.items(), payload) == frame(headers, payload)


# Every value type the format defines (type byte, value bytes), each taking its own width.
VALUE_TYPES = {
    "bool true": (0, b""),
    "bool false": (1, b""),
    "byte": (2, b"\xff"),
    "short": (3, struct.pack(">h", -2)),
    "integer": (4, struct.pack(">i", 7)),
    "long": (5, struct.pack(">q", -(2**40))),
    "byte array": (6, struct.pack(">H", 3) + b"\x00\xff\x07"),
    "empty byte array": (6, struct.pack(">H", 0)),
    "string": (7, struct.pack(">H", 5) + "é✓".encode()),
    "timestamp": (8, struct.pack(">q", 1_700_000_000_000)),
    "uuid": (9, bytes(range(16))),
}


@pytest.mark.parametrize(("kind", "value"), VALUE_TYPES.values(), ids=list(VALUE_TYPES))
def test_every_header_value_type_parses(kind: int, value: bytes) -> None:
    other = typed_header(b"x-other", kind, value)
    named = [header(":message-type", "event"), header(":event-type", "contentBlockStop")]
    # Before, between and after the headers that name the frame.
    for block in (other + b"".join(named), named[0] + other + named[1], b"".join(named) + other):
        body = raw_frame(block, b'{"contentBlockIndex": 0}') + AFTER
        found, state = verdict(body)
        assert found == [("contentBlockStop", '{"contentBlockIndex": 0}'), envelope_of(AFTER)]
        assert state["corrupt"] is None


def test_a_naming_header_of_another_type_names_nothing() -> None:
    # ``:event-type`` as a byte array is not the string that names the event.
    block = header(":message-type", "event") + typed_header(b":event-type", 6, b"\x00\x01x")
    assert envelope_of(raw_frame(block, b"{}")) == ("", "{}")


# --------------------------------------------------------------------------------------------
# The memo of header blocks
# --------------------------------------------------------------------------------------------


def test_the_memo_does_not_change_what_a_recorded_body_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = read_fixture("real/bedrock-converse-stream-tool-use.eventstream")
    monkeypatch.setattr(eventstream_module, "_memo", {})
    cold, cold_parser = parse([body])
    assert eventstream_module._memo, "the blocks are kept"
    warm, warm_parser = parse(list(frames(body)))
    assert (warm, counts(warm_parser)) == (cold, counts(cold_parser))


def test_the_same_block_twice_gives_the_same_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventstream_module, "_memo", {})
    error = error_frame("SomeCode")
    body = exception("throttlingException") + error + exception("throttlingException") + error
    found, _ = parse([body])
    assert (
        found
        == [
            (EXCEPTION_EVENT, "throttlingException"),
            (ERROR_EVENT, "SomeCode"),
        ]
        * 2
    )


def test_distinct_blocks_beyond_the_memo_size_are_all_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventstream_module, "_memo", {})
    size = eventstream_module._MEMO_SIZE
    names = [f"event{n}" for n in range(2 * size + 7)]
    body = b"".join(event(name, {"n": n}) for n, name in enumerate(names))
    for _ in range(2):  # from a cold memo, then from whatever it kept
        found, parser = parse([body])
        assert [name for name, _ in found] == names
        assert parser.corrupt is None
        assert len(eventstream_module._memo) <= size


def test_a_small_memo_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"".join(read_fixture(name) for name in FIXTURES[:3])
    expected = parse([body])[0]
    monkeypatch.setattr(eventstream_module, "_memo", {})
    monkeypatch.setattr(eventstream_module, "_MEMO_SIZE", 2)
    assert parse([body])[0] == expected
    assert parse(list(frames(body)))[0] == expected


def test_a_long_block_is_read_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventstream_module, "_memo", {})
    name = "e" * (eventstream_module._MEMO_BLOCK_BYTES + 1)
    found, _ = parse([event(name, {}) * 3])
    assert found == [(name, "{}")] * 3
    assert eventstream_module._memo == {}


def test_a_block_that_does_not_parse_is_never_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventstream_module, "_memo", {})
    bad, why = NOT_FRAMES["duplicate name"]
    for _ in range(2):
        _, parser = parse([bad])
        assert parser.corrupt == why
    assert eventstream_module._memo == {}


# --------------------------------------------------------------------------------------------
# Bounded memory: what is held never exceeds one frame
# --------------------------------------------------------------------------------------------


def test_a_frame_in_pieces_is_held_only_until_it_is_whole() -> None:
    # A frame near a ceiling of 1 MiB, in 64 KiB reads: after each read, what EOF would find
    # held is exactly the bytes fed, and the frame is dispatched once whole.
    ceiling = 1 * MiB
    big = _sized_event(ceiling)
    pieces = reads_of(big + AFTER[:7], 64 * KiB)
    for count in range(1, len(pieces) + 1):
        found, parser = parse(pieces[:count], ceiling)
        fed = sum(len(piece) for piece in pieces[:count])
        if fed < len(big):
            assert found == []
            assert parser.pending_event_chars == fed
        else:
            assert found == [("x", "p" * (ceiling - len(event("x", b""))))]
            assert parser.pending_event_chars == fed - len(big)
        assert parser.pending_event_chars <= ceiling


def test_what_is_held_is_at_most_one_frame_under_every_read_size() -> None:
    body = read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream")
    longest = max(b - a for a, b in itertools.pairwise([0, *frame_ends(body)]))
    for size in (1, 5, 100, 1000):
        parser = EventStreamParser(max_event_bytes=longest)
        for piece in reads_of(body, size):
            parser.feed(piece)
            assert parser._held_len < longest, size
        assert parser._held_len == 0
    # A ceiling below the longest frame stops at it, holding nothing.
    _, parser = parse([body], longest - 1)
    assert parser.limit_exceeded == "event"
    assert parser._held_len == 0


@pytest.mark.parametrize("declared", ["over the ceiling", "at the ceiling, never whole"])
def test_an_unending_frame_holds_at_most_the_ceiling(declared: str) -> None:
    limits = Limits(max_event_bytes=2 * MiB)
    size = 64 * KiB
    # (Past the ceiling, within the format's 24 MiB payload: a frame, too long to hold.)
    total = 20 * MiB if declared == "over the ceiling" else limits.max_event_bytes
    sent_after = (64 * MiB if declared == "over the ceiling" else total - 13) // size
    monitor = StreamMonitor("bedrock.converse_stream", limits=limits)
    tracemalloc.start()
    try:
        monitor.feed(prelude(total, 0))
        for _ in range(sent_after):
            monitor.feed(b"\0" * size)  # a new object each read, as a client's reads are
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    report = monitor.close()
    if declared == "over the ceiling":
        assert report.outcome is Outcome.BUFFER_LIMIT
        assert (report.buffer_limit_stage, report.pending_event_chars) == ("event", total)
        assert peak < 4 * size, peak
    else:
        assert report.outcome is Outcome.TRUNCATED
        assert report.discarded_event
        assert report.pending_event_chars == 12 + sent_after * size
        assert peak < limits.max_event_bytes + 4 * size, peak


# --------------------------------------------------------------------------------------------
# The sweep: every two-part split of every synthetic case above
# --------------------------------------------------------------------------------------------

SWEPT: dict[str, tuple[bytes, int]] = {
    **{
        f"not a frame: {name}": (b"".join(BEFORE) + bad + AFTER, DEFAULT_MAX_EVENT_BYTES)
        for name, (bad, _) in NOT_FRAMES.items()
    },
    **{
        f"header value: {name}": (
            raw_frame(header(":event-type", "x") + typed_header(b"x-other", kind, value), b"{}")
            + AFTER,
            DEFAULT_MAX_EVENT_BYTES,
        )
        for name, (kind, value) in VALUE_TYPES.items()
    },
    "invalid UTF-8": (_UTF8_BODY, DEFAULT_MAX_EVENT_BYTES),
    "over the ceiling": (b"".join(BEFORE) + _sized_event(CEILING + 1) + AFTER, CEILING),
    "at the ceiling": (_sized_event(CEILING) + AFTER, CEILING),
    "exception and error frames": (
        exception("throttlingException") + error_frame("InternalFailure") + AFTER,
        DEFAULT_MAX_EVENT_BYTES,
    ),
    "stop frames": (b"".join(_STOP_FRAMES), CEILING),
}


@pytest.mark.matrix
@pytest.mark.parametrize(("body", "ceiling"), SWEPT.values(), ids=list(SWEPT))
def test_every_two_part_split_of_a_synthetic_case_gives_its_verdict(
    body: bytes, ceiling: int
) -> None:
    verdict(body, ceiling, full=True)


# --------------------------------------------------------------------------------------------
# botocore's decoder agrees, on every recording and every well-formed synthetic case
# --------------------------------------------------------------------------------------------

AGREED: dict[str, bytes] = {
    **{name: read_fixture(name) for name in FIXTURES},
    **{name: body for name, (body, _) in SWEPT.items() if not name.startswith("not a frame")},
    "an exception frame": exception("modelStreamErrorException", "the model failed") + AFTER,
    "an error frame": BEFORE[0] + error_frame("InternalFailure", "a message never kept"),
    "no message type": frame({":event-type": "chunk"}, b"{}"),
    "an unknown message type": frame({":message-type": "future", ":event-type": "x"}, b"{}"),
    "no event type": frame({":message-type": "event"}, b"{}") + raw_frame(b"", b""),
    "the memo's size of names": b"".join(
        event(f"event{n}", {"n": n}) for n in range(eventstream_module._MEMO_SIZE + 3)
    ),
}


@pytest.mark.matrix  # botocore
@pytest.mark.parametrize("body", AGREED.values(), ids=list(AGREED))
def test_the_envelopes_are_botocores(body: bytes) -> None:
    expected = botocore_envelopes(body)
    assert expected
    for chunks in ([body], frame_reads(body), reads_of(body, 7)):
        assert parse(chunks)[0] == expected
