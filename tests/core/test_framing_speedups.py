"""The compiled hot path of the parser answers exactly what the pure-Python parser answers.

``simple_event`` takes a read that is one whole simple event (``data: V`` or ``event: N`` then
``data: V``, strict UTF-8) and declines everything else; a declined read goes the pure way. So
the property is: for any read, and any stream of reads, a parser with the compiled path and one
without give the same events, counters and verdicts.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsse._core import framing
from otelsse._core.framing import SSEParser
from tests._fixtures import fixture_names, read_fixture
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
