"""Differential test: ``SSEParser`` against a reference written straight from the WHATWG spec.

Spec: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

``tests/_whatwg.py``'s ``reference()`` follows the algorithm line by line (with the parser's
documented decisions where the spec leaves a choice). Hypothesis feeds both the same streams
(arbitrary bytes, a soup of SSE tokens, and structured streams of fields, comments, CR/LF/CRLF
line ends, BOMs, invalid UTF-8 and arbitrary Unicode) under random chunkings, with the default
ceilings, which these streams never reach, and compares every dispatched event (type, data, last
event ID, retry), and then the last event ID and reconnection time left at the end of the stream.

Each test runs 200 examples, scaled by the tier (``tests/_tiers.py``). For a long fuzzing run:

    OTELSSE_FUZZ_SCALE=1000 python -m pytest tests/core/test_framing_reference.py
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otelsse import SSEEvent, SSEParser
from tests._tiers import examples
from tests._whatwg import BOM, reference

FUZZ = settings(
    max_examples=examples(200),
    # The machine is shared and noisy: no example may fail for being slow.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def parse(chunks: list[bytes]) -> tuple[list[SSEEvent], str, int | None]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    assert parser.limit_exceeded is None
    return events, parser.last_event_id, parser.retry


def split_at(stream: bytes, cuts: Iterable[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[start:end] for start, end in itertools.pairwise(bounds)]


def assert_parser_agrees(stream: bytes, data: st.DataObject) -> None:
    """The parser matches the reference on ``stream`` under several chunkings.

    Whole, one byte per read, cut anywhere, and cut only after a run of line ends: there each
    read holds whole lines with their blank lines, often exactly one event, as in a live stream,
    which is what the parser's fast paths are for.
    """
    expected = reference(stream)
    anywhere = data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=12))
    run_ends = [
        i + 1
        for i, byte in enumerate(stream)
        if byte in b"\r\n" and stream[i + 1 : i + 2] not in (b"\r", b"\n")
    ]
    some_run_ends = data.draw(st.sets(st.sampled_from(run_ends))) if run_ends else set()
    byte_at_a_time = [stream[i : i + 1] for i in range(len(stream))]
    for chunks in (
        [stream],
        byte_at_a_time,
        split_at(stream, anywhere),
        split_at(stream, run_ends),
        split_at(stream, some_run_ends),
    ):
        assert parse(chunks) == expected, chunks


# --------------------------------------------------------------------------------------------
# The reference itself
# --------------------------------------------------------------------------------------------


def test_the_reference_reproduces_the_spec_examples() -> None:
    """The spec's examples, then several rules at once: a wrong reference cannot pass."""
    events, last_id, _ = reference(
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
        b"data:  third event\n"
    )
    assert events == [SSEEvent("message", "first event", "1"), SSEEvent("message", "second event")]
    assert last_id == ""
    assert reference(b"data\n\ndata\ndata\n\ndata:")[0] == [
        SSEEvent("message", ""),
        SSEEvent("message", "\n"),
    ]
    assert reference(b"data:test\n\ndata: test\n\n")[0] == [SSEEvent("message", "test")] * 2
    events, _, retry = reference(
        BOM + b"event: add\r\ndata: 73857293\r\rretry: 0050\rid: \x00\ndata: x\r\n\r\n"
    )
    assert events == [SSEEvent("add", "73857293"), SSEEvent("message", "x", "", 50)]
    assert retry == 50


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------

LINE_ENDS = st.sampled_from([b"\n", b"\n", b"\r", b"\r\n"])  # LF the most, as streams do
INVALID_UTF8 = st.sampled_from(
    [
        b"\xff",
        b"\xc3",  # a two-byte sequence cut short
        b"\xe2\x82",  # a three-byte sequence cut short
        b"\xc0\xaf",  # overlong
        b"\xed\xa0\x80",  # a UTF-16 surrogate
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\x80",  # a lone continuation byte
        BOM[:2],
    ]
)
UNICODE = st.text(st.characters(codec="utf-8"), max_size=12).map(str.encode)
TEXT = st.lists(
    st.one_of(
        UNICODE,
        INVALID_UTF8,
        st.sampled_from([b"", b" ", b"  ", b":", b": ", b"\x00", b"\t", BOM, b"\r", b"\n"]),
    ),
    max_size=4,
).map(b"".join)
DIGITS = st.one_of(
    st.from_regex(rb"\A[0-9]{1,6}\Z"),
    st.sampled_from([b"18446744073709551617", b"0050", b"-1", b"1.5", b"1e3", "\u0663".encode()]),
    st.sampled_from([b"9" * 299, b"9" * 300, b"9" * 301, b"1" * 4301]),
)
FIELD_NAMES = st.sampled_from(
    [b"data", b"event", b"id", b"retry", b"Data", b"data ", b" data", b"foo", b"", BOM + b"data"]
)
FIELD = st.one_of(
    st.tuples(st.sampled_from([b"data: ", b"event: "]), TEXT).map(b"".join),  # the common shapes
    st.tuples(FIELD_NAMES, st.sampled_from([b":", b": ", b":  "]), TEXT).map(b"".join),
    st.tuples(st.just(b"retry"), st.sampled_from([b":", b": "]), DIGITS).map(b"".join),
    st.tuples(st.just(b"id"), st.sampled_from([b":", b": "]), TEXT).map(b"".join),
    FIELD_NAMES,  # no colon: the whole line is the name, the value is empty
    st.tuples(st.just(b":"), TEXT).map(b"".join),  # a comment
)
# Lines, then one or more blank lines (a CR then an LF is one CRLF line end, not two).
BLOCK = st.tuples(
    st.lists(st.tuples(FIELD, LINE_ENDS).map(b"".join), max_size=5).map(b"".join),
    st.lists(LINE_ENDS, min_size=1, max_size=3).map(b"".join),
).map(b"".join)
STRUCTURED = st.tuples(
    st.sampled_from([b"", BOM, BOM + BOM, BOM[:2]]),
    st.lists(BLOCK, max_size=8).map(b"".join),
    st.lists(st.tuples(FIELD, LINE_ENDS).map(b"".join), max_size=2).map(b"".join),  # pending
    st.one_of(st.just(b""), FIELD),  # a last line that never ends
).map(b"".join)
TOKEN_SOUP = st.lists(
    st.sampled_from(
        [
            *(b"data: ", b"event: ", b"id: ", b"retry: ", b"data", b"event", b"id", b"retry"),
            *(b":", b" ", b"message", b"1", b"42", b"\x00", BOM, "\u20ac".encode(), b"\xff"),
            *(b"\n", b"\n", b"\n", b"\r", b"\r\n", b"\n\n"),
        ]
    ),
    max_size=40,
).map(b"".join)


# --------------------------------------------------------------------------------------------
# The differential tests
# --------------------------------------------------------------------------------------------


@FUZZ
@given(stream=st.binary(max_size=200), data=st.data())
def test_the_parser_agrees_with_the_reference_on_arbitrary_bytes(
    stream: bytes, data: st.DataObject
) -> None:
    assert_parser_agrees(stream, data)


@FUZZ
@given(stream=TOKEN_SOUP, data=st.data())
def test_the_parser_agrees_with_the_reference_on_a_soup_of_sse_tokens(
    stream: bytes, data: st.DataObject
) -> None:
    assert_parser_agrees(stream, data)


@FUZZ
@given(stream=STRUCTURED, data=st.data())
def test_the_parser_agrees_with_the_reference_on_structured_streams(
    stream: bytes, data: st.DataObject
) -> None:
    assert_parser_agrees(stream, data)
