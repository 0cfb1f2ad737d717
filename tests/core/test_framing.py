"""Conformance of ``SSEParser`` to the WHATWG event-stream interpretation.

Spec: https://html.spec.whatwg.org/multipage/server-sent-events.html (9.2.5 "Parsing an event
stream" and 9.2.6 "Interpreting an event stream"). One test per rule; each docstring quotes or
paraphrases the rule it checks.

Most tests go through ``events_of()``, which parses the stream whole, in every two-part split and
one byte at a time, and asserts that every chunking gives the same events and the same parser
state: the framing of the network reads must never show through. The ceiling property test
draws random streams, ceilings and chunkings with Hypothesis (300 examples, scaled by the tier:
``tests/_tiers.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsse import ParserClosedError, SSEEvent, SSEParser
from otelsse._core.framing import DEFAULT_MAX_LINE_BYTES, field_span, line_spans
from tests._helpers import parser_state
from tests._tiers import examples

BOM = b"\xef\xbb\xbf"
#: Examples per property test.
FUZZ_EXAMPLES = examples(300)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def parse(chunks: Sequence[bytes], **limits: int) -> tuple[list[SSEEvent], SSEParser]:
    """Feed ``chunks`` to a new parser, then close it; return the events and the closed parser."""
    parser = SSEParser(**limits)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return events, parser


def chunkings(stream: bytes) -> Iterator[list[bytes]]:
    """The stream whole, in every two-part split, and one byte at a time."""
    yield [stream]
    for cut in range(len(stream) + 1):
        yield [stream[:cut], stream[cut:]]
    yield [stream[i : i + 1] for i in range(len(stream))]


def assert_split_invariant(stream: bytes, **limits: int) -> tuple[list[SSEEvent], SSEParser]:
    """Assert that every chunking of ``stream`` gives the same events and state as the whole."""
    events, parser = parse([stream], **limits)
    expected_state = parser_state(parser)
    for chunks in chunkings(stream):
        got_events, got_parser = parse(chunks, **limits)
        assert got_events == events, f"events differ for chunking {chunks!r}"
        assert parser_state(got_parser) == expected_state, f"state differs for chunking {chunks!r}"
    return events, parser


def events_of(stream: bytes) -> list[SSEEvent]:
    """The events of ``stream``, after checking that chunking does not change them."""
    return assert_split_invariant(stream)[0]


def parser_after(stream: bytes) -> SSEParser:
    """The closed parser for ``stream``, after checking that chunking does not change its state."""
    return assert_split_invariant(stream)[1]


def data_of(stream: bytes) -> list[str]:
    """The ``data`` of each event of ``stream`` (split-invariant)."""
    return [event.data for event in events_of(stream)]


def msg(data: str, *, event: str = "message", id: str = "", retry: int | None = None) -> SSEEvent:
    return SSEEvent(event, data, id, retry)


# --------------------------------------------------------------------------------------------
# The helpers themselves
# --------------------------------------------------------------------------------------------


def test_the_split_invariance_helper_detects_a_chunking_dependent_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chunking helper must be able to fail, or the invariance it checks means nothing."""

    class ChunkSensitive(SSEParser):
        __slots__ = ()

        def feed(self, data: bytes) -> list[SSEEvent]:
            return [msg("chunk")] if data == b"x" else super().feed(data)

    monkeypatch.setattr(f"{__name__}.SSEParser", ChunkSensitive)
    with pytest.raises(AssertionError, match="events differ"):
        assert_split_invariant(b"xy")


# --------------------------------------------------------------------------------------------
# Decoding (9.2.5 / 9.2.6: "Streams must be decoded using the UTF-8 decode algorithm")
# --------------------------------------------------------------------------------------------


def test_the_stream_is_decoded_as_utf8() -> None:
    """Event streams are always decoded as UTF-8 ("UTF-8 decode"), whatever else is claimed."""
    text = "h\u00e9llo \u20ac \U0001f600 \u4e2d\u6587"
    assert events_of(b"data: " + text.encode() + b"\n\n") == [msg(text)]


def test_one_leading_bom_is_stripped_at_stream_start() -> None:
    """UTF-8 decode: a leading U+FEFF BYTE ORDER MARK (EF BB BF) is removed from the stream."""
    events, parser = assert_split_invariant(BOM + b"data: x\n\n")
    assert events == [msg("x")]
    assert parser.unknown_field_count == 0


def test_a_bom_split_across_feeds_is_still_stripped() -> None:
    """The leading BOM is stripped however its three bytes are spread over the first reads."""
    for chunks in (
        [b"\xef", b"\xbb", b"\xbf", b"data: x\n\n"],
        [b"\xef", b"\xbb\xbfdata: x\n\n"],
        [b"\xef\xbb", b"\xbfdata: x\n\n"],
        [b"", b"\xef", b"", b"\xbb", b"", b"\xbf", b"", b"data: x\n\n"],
    ):
        events, parser = parse(chunks)
        assert events == [msg("x")], chunks
        assert parser.unknown_field_count == 0, chunks


def test_a_partial_bom_at_stream_start_is_not_stripped() -> None:
    """Only a whole three-byte BOM is removed; EF BB without BF is invalid and becomes U+FFFD."""
    events, parser = assert_split_invariant(b"\xef\xbbdata: x\n\n")
    assert events == []
    assert parser.unknown_field_count == 1  # the field name is "\ufffddata"
    assert parser.invalid_utf8_count == 1


def test_a_second_leading_bom_is_kept_in_the_field_name() -> None:
    """Only one BOM is stripped: a second one is U+FEFF, so "\\ufeffdata" is an unknown field."""
    stream = BOM + BOM + b"data: x\n\ndata: y\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("y")]
    assert parser.unknown_field_count == 1


def test_a_bom_later_in_the_stream_is_kept_as_u_feff() -> None:
    """A BOM that is not at the very start of the stream is an ordinary U+FEFF character."""
    assert data_of(b"data: " + BOM + b"x\n\n") == ["\ufeffx"]
    stream = b"data: a\n\n" + BOM + b"data: b\n\ndata: c\n\n"
    events, parser = assert_split_invariant(stream)
    assert [event.data for event in events] == ["a", "c"]
    assert parser.unknown_field_count == 1


def test_a_bom_at_the_start_of_a_later_feed_is_not_stripped() -> None:
    """BOM stripping belongs to the stream, not to each read: a BOM opening read two is kept."""
    events, parser = parse([b"data: a\n\n", BOM + b"data: b\n\n"])
    assert events == [msg("a")]
    assert parser.unknown_field_count == 1


def test_invalid_utf8_becomes_u_fffd_and_is_counted_while_events_keep_flowing() -> None:
    """UTF-8 decode replaces each invalid sequence with U+FFFD; parsing goes on; errors counted."""
    stream = b"data: a\xffb\n\ndata: \xc3\n\nevent: t\xfe\ndata: ok\n\ndata: after\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [
        msg("a\ufffdb"),
        msg("\ufffd"),
        msg("ok", event="t\ufffd"),
        msg("after"),
    ]
    assert parser.invalid_utf8_count == 3


def test_a_valid_replacement_character_is_not_counted_as_invalid_utf8() -> None:
    """U+FFFD sent as valid UTF-8 (EF BF BD) is data, not a decoding error."""
    events, parser = assert_split_invariant("data: \ufffd\n\n".encode())
    assert events == [msg("\ufffd")]
    assert parser.invalid_utf8_count == 0
    # Next to a real error, only the real error is counted.
    events, parser = assert_split_invariant("data: \ufffd\ufffd\n\n".encode() + b"data: \xff\n\n")
    assert events == [msg("\ufffd\ufffd"), msg("\ufffd")]
    assert parser.invalid_utf8_count == 1


@pytest.mark.parametrize(
    ("stream", "invalid"),
    [
        # An unterminated last line: never decoded as an event, still corrupt bytes in the body.
        (b"data: a\n\ndata: b\xffc", 1),
        (b"data: \xfe\xff", 2),
        # A complete line of the event still pending at EOF.
        (b"data: a\n\ndata: \xff\nid: 1\n", 1),
        # Only the invalid bytes count: a valid U+FFFD in the pending line is data.
        (b"data: \xef\xbf\xbd\xff", 1),
        # Invalid bytes before a sequence cut by EOF: the bytes count, the cut does not.
        (b"data: \xff\xe2\x82", 1),
        # Corrupt bytes in a dispatched event and in the pending line add up.
        (b"data: \xff\n\ndata: \xff", 2),
        # A surrogate (ED A0..) or an overlong form (E0 80..) is invalid before it ends: the
        # decoder knows at its second byte, so EOF there does not make it a cut character.
        (b"data: \xed\xa0", 2),
        (b"data: \xe0\x80", 2),
    ],
)
def test_invalid_utf8_still_pending_at_eof_is_counted(stream: bytes, invalid: int) -> None:
    """The body is decoded whole ("UTF-8 decode"), so invalid bytes count whether or not a line
    end or a blank line followed them; the count does not depend on the chunking."""
    _, parser = assert_split_invariant(stream)
    assert parser.invalid_utf8_count == invalid
    assert parser.pending_event_chars > 0


@pytest.mark.parametrize(
    "char", ["\u00e9", "\u20ac", "\U0001f600", "\ufffd"], ids=["2-byte", "3-byte", "4-byte", "fffd"]
)
def test_a_character_cut_by_eof_is_truncation_not_invalid_utf8(char: str) -> None:
    """A stream cut mid-character is truncated (the pending line says so), not corrupt: the
    bytes that arrived are a valid start of a character the end of the stream cut off."""
    encoded = char.encode()
    for kept in range(1, len(encoded)):
        stream = b"data: ok\n\ndata: <" + encoded[:kept]
        _, parser = assert_split_invariant(stream)
        assert parser.invalid_utf8_count == 0, (char, kept)
        assert parser.pending_line_chars > 0, (char, kept)


def test_a_partial_bom_alone_at_eof_is_a_cut_character() -> None:
    """EF or EF BB and then EOF: the start of a BOM (or of any character) cut by the end."""
    for stream in (b"\xef", b"\xef\xbb"):
        _, parser = assert_split_invariant(stream)
        assert parser.invalid_utf8_count == 0, stream


def test_a_multibyte_character_split_across_feeds_decodes_at_every_offset() -> None:
    """Decoding is of the stream, not of each read: a character cut by a read boundary survives."""
    for char in ("\u00e9", "\u20ac", "\U0001f600", "\u2028"):
        encoded = char.encode()
        stream = b"data: <" + encoded + b">\n\n"
        start = stream.index(encoded)
        for cut in range(start, start + len(encoded) + 1):
            events, parser = parse([stream[:cut], stream[cut:]])
            assert events == [msg(f"<{char}>")], (char, cut)
            assert parser.invalid_utf8_count == 0
        # Every byte of the character in its own read.
        chunks = [stream[:start], *(bytes([b]) for b in encoded), stream[start + len(encoded) :]]
        assert parse(chunks)[0] == [msg(f"<{char}>")]
        assert events_of(stream) == [msg(f"<{char}>")]


# --------------------------------------------------------------------------------------------
# Lines (9.2.6: "a U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF) character pair, a single
# U+000A LINE FEED (LF) character not preceded by a U+000D CARRIAGE RETURN (CR) character, and a
# single U+000D CARRIAGE RETURN (CR) character not followed by a U+000A LINE FEED (LF) character
# being the ways in which a line can end")
# --------------------------------------------------------------------------------------------


def test_lines_end_at_crlf_lf_or_cr() -> None:
    """A line ends at CRLF, at LF, or at CR; all three give the same events."""
    expected = [msg("a\nb", event="t"), msg("c")]
    for eol in (b"\r\n", b"\n", b"\r"):
        stream = eol.join([b"event: t", b"data: a", b"data: b", b"", b"data: c", b"", b""])
        assert events_of(stream) == expected, eol
    mixed = b"event: t\r\ndata: a\rdata: b\n\r\ndata: c\r\r"
    assert events_of(mixed) == expected


def test_cr_at_the_end_of_one_feed_and_lf_at_the_start_of_the_next_is_one_line_end() -> None:
    """CR followed by LF is a single CRLF line end even when a read boundary falls between them."""
    events, _ = parse([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert events == [msg("a\nb")]
    assert events_of(b"data: a\r\ndata: b\r\n\r\n") == [msg("a\nb")]


def test_cr_cr_is_two_line_ends() -> None:
    """A CR not followed by LF ends a line by itself, so CR CR is a line end and a blank line."""
    assert events_of(b"data: a\r\rdata: b\r\r") == [msg("a"), msg("b")]
    events, _ = parse([b"data: a\r", b"\r", b"data: b\r", b"\r"])
    assert events == [msg("a"), msg("b")]


def test_lf_cr_is_two_line_ends() -> None:
    """LF then CR is not one line end: the LF ends the line and the CR ends a blank line."""
    assert events_of(b"data: a\n\rdata: b\n\r") == [msg("a"), msg("b")]


def test_cr_crlf_is_a_line_end_then_a_blank_line() -> None:
    """CR CR LF: the first CR ends the line, CRLF then ends a blank line."""
    assert events_of(b"data: a\r\r\ndata: b\r\r\n") == [msg("a"), msg("b")]


@pytest.mark.parametrize(
    "separator",
    ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"],
    ids=["LINE-SEPARATOR", "PARAGRAPH-SEPARATOR", "NEL", "VT", "FF", "FS", "GS", "RS"],
)
def test_other_unicode_line_breaks_do_not_end_lines(separator: str) -> None:
    """Only CR and LF end lines: U+2028, U+2029, NEL, VT, FF and FS/GS/RS are data ("any-char")."""
    stream = f"data: a{separator}b\nevent: x{separator}y\n\n".encode()
    events, parser = assert_split_invariant(stream)
    assert events == [msg(f"a{separator}b", event=f"x{separator}y")]
    assert parser.unknown_field_count == 0


def test_a_null_character_in_data_is_kept() -> None:
    """U+0000 is an ordinary character in data ("any-char" includes %x0000)."""
    assert data_of(b"data: a\x00b\n\n") == ["a\x00b"]


# --------------------------------------------------------------------------------------------
# Blank lines and dispatch (9.2.6: "If the line is empty (a blank line): Dispatch the event")
# --------------------------------------------------------------------------------------------


def test_a_blank_line_dispatches_the_event() -> None:
    """A blank line dispatches the event built from the lines since the previous blank line."""
    assert events_of(b"data: one\n\ndata: two\n\n") == [msg("one"), msg("two")]
    assert events_of(b"data: one\n") == []


def test_a_blank_line_with_an_empty_data_buffer_dispatches_nothing() -> None:
    """Dispatch: "If the data buffer is an empty string, ... return" (no event is fired)."""
    assert events_of(b"\n\n\n\r\n\r") == []
    assert events_of(b"event: x\n\n") == []
    assert events_of(b": only a comment\n\n") == []
    assert events_of(b"\n\n\ndata: a\n\n\n\n") == [msg("a")]


@pytest.mark.parametrize(
    "stream",
    [
        b"event: ping\n\n\n",
        b"event: ping\r\n\r\n\r\n",
        b"event: ping\r\r\r",
        b"event: ping\n\n\n\n\n",
        b"id: 1\n\n\n",
        b": c\n\n\n",
        b"event: ping\n\n\ndata: a\n\n",
        b"data: a\n\nevent: ping\n\n\n",
    ],
)
def test_extra_blank_lines_after_a_block_without_data_dispatch_nothing(stream: bytes) -> None:
    """Each extra blank line is one more dispatch of an empty data buffer: nothing, never a crash.

    ``event: ping`` then three LFs once crashed the framing fast path for ``event:`` blocks.
    """
    events = events_of(stream)
    assert events == ([msg("a")] if b"data" in stream else [])


def test_a_blank_line_with_an_empty_data_buffer_resets_the_event_type() -> None:
    """Dispatch with an empty data buffer sets "the data buffer and the event type buffer" to ""."""
    assert events_of(b"event: x\n\ndata: y\n\n") == [msg("y")]


def test_the_event_type_is_reset_after_each_dispatch() -> None:
    """After dispatch: "Set the data buffer and the event type buffer to the empty string"."""
    stream = b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\ndata: 3\n\n"
    assert events_of(stream) == [msg("1", event="a"), msg("2"), msg("3", event="b")]


# --------------------------------------------------------------------------------------------
# Comments and fields (9.2.6)
# --------------------------------------------------------------------------------------------


def test_comment_lines_are_ignored_and_counted() -> None:
    """'If the line starts with a U+003A COLON character (:)': ignore the line."""
    stream = b": hello\n:\ndata: a\n:data: not data\ndata: b\n: bye\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a\nb")]
    assert parser.comment_count == 4
    assert parser.unknown_field_count == 0


def test_the_field_and_value_split_at_the_first_colon_only() -> None:
    """Field is the text before the first colon; value is everything after it, colons included."""
    stream = b"event:a:b\ndata: x: y :z\ndata::\n\n"
    assert events_of(stream) == [msg("x: y :z\n:", event="a:b")]


def test_exactly_one_leading_space_is_stripped_from_the_value() -> None:
    """ "If value starts with a U+0020 SPACE character, remove it from value" (one space only)."""
    assert data_of(b"data:x\n\ndata: x\n\ndata:  x\n\ndata:   x \n\n") == ["x", "x", " x", "  x "]
    assert events_of(b"event:  t\ndata: x\n\n") == [msg("x", event=" t")]
    assert data_of(b"data:\tx\n\n") == ["\tx"]  # only U+0020 SPACE is stripped


def test_a_line_without_a_colon_is_a_field_name_with_an_empty_value() -> None:
    """No colon: "the whole line as the field name, and the empty string as the field value"."""
    assert events_of(b"data\n\n") == [msg("")]
    assert events_of(b"event\ndata: x\n\n") == [msg("x")]
    assert events_of(b"id: 1\ndata: a\n\nid\ndata: b\n\n") == [msg("a", id="1"), msg("b")]


def test_a_data_field_with_an_empty_value_dispatches_an_event_with_empty_data() -> None:
    """ "data:" appends "" and LF, so the data buffer is not empty: an event with data "" fires."""
    assert events_of(b"data:\n\n") == [msg("")]
    assert events_of(b"data: \n\n") == [msg("")]


def test_multiple_data_lines_are_joined_with_lf() -> None:
    """Each data line appends its value and then a single U+000A LINE FEED to the data buffer."""
    assert data_of(b"data: a\ndata: b\ndata: c\n\n") == ["a\nb\nc"]
    assert data_of(b"data: a\nevent: t\nid: 1\n: c\ndata: b\n\n") == ["a\nb"]


def test_only_the_final_lf_of_the_data_buffer_is_removed() -> None:
    """ "If the data buffer's last character is a U+000A LINE FEED (LF)", remove it (once)."""
    assert data_of(b"data\ndata\n\n") == ["\n"]
    assert data_of(b"data: a\ndata:\n\n") == ["a\n"]
    assert data_of(b"data:\ndata: a\n\n") == ["\na"]


def test_the_spec_example_of_empty_data_lines() -> None:
    """Spec example: "data", then "data" twice, then "data:" give "" and LF; the last is lost."""
    stream = b"data\n\ndata\ndata\n\ndata:\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg(""), msg("\n")]
    assert parser.discarded_event is True


def test_the_spec_example_with_and_without_a_space_after_the_colon() -> None:
    """Spec example: "data:test" and "data: test" fire two identical events."""
    assert events_of(b"data:test\n\ndata: test\n\n") == [msg("test"), msg("test")]


def test_the_spec_example_stream_with_comments_and_ids() -> None:
    """Spec example: ids "1" then "" (bare "id"); the final unterminated block is not dispatched."""
    stream = (
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
        b"data:  third event\n"
    )
    events, parser = assert_split_invariant(stream)
    assert events == [msg("first event", id="1"), msg("second event")]
    assert parser.discarded_event is True


def test_the_event_field_sets_the_event_type() -> None:
    """ "event": "Set the event type buffer to field value"; it becomes the event's type."""
    assert events_of(b"event: add\ndata: 1\n\n") == [msg("1", event="add")]
    assert events_of(b"event: a\nevent: b\ndata: 1\n\n") == [msg("1", event="b")]
    assert events_of(b"data: 1\nevent: late\n\n") == [msg("1", event="late")]


def test_an_empty_event_value_gives_the_message_type() -> None:
    """The type is "message" unless the event type buffer holds something other than ""."""
    for stream in (
        b"event:\ndata: x\n\n",
        b"event: \ndata: x\n\n",
        b"event\ndata: x\n\n",
        b"event: a\nevent:\ndata: x\n\n",
    ):
        assert events_of(stream) == [msg("x")], stream


# --------------------------------------------------------------------------------------------
# id (9.2.6: "If the field value does not contain U+0000 NULL, then set the last event ID buffer
# to the field value. Otherwise, ignore the field.")
# --------------------------------------------------------------------------------------------


def test_the_id_field_sets_the_last_event_id_of_the_event() -> None:
    """ "id" sets the last event ID buffer; the dispatched event's lastEventId is that value."""
    assert events_of(b"id: 1\ndata: a\n\n") == [msg("a", id="1")]
    assert events_of(b"data: a\nid: 2\n\n") == [msg("a", id="2")]
    assert events_of(b"id:  spaced \ndata: a\n\n") == [msg("a", id=" spaced ")]


def test_the_last_event_id_persists_across_events_until_changed() -> None:
    """ "The buffer does not get reset", so later events keep the last ID the server sent."""
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\ndata: d\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [
        msg("a", id="1"),
        msg("b", id="1"),
        msg("c", id="2"),
        msg("d", id="2"),
    ]
    assert parser.last_event_id == "2"


def test_an_empty_id_resets_the_last_event_id() -> None:
    """ "id:" with an empty value sets the last event ID buffer to the empty string."""
    stream = b"id: 1\ndata: a\n\nid:\ndata: b\n\ndata: c\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a", id="1"), msg("b"), msg("c")]
    assert parser.last_event_id == ""


def test_an_id_containing_null_is_ignored() -> None:
    """An "id" whose value contains U+0000 NULL is ignored; the previous ID stays in force."""
    stream = b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\nid: \x00\ndata: c\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a", id="1"), msg("b", id="1"), msg("c", id="1")]
    assert parser.last_event_id == "1"


def test_an_id_only_block_sets_the_last_event_id_without_dispatching() -> None:
    """Dispatch step 1 sets the last event ID string before the empty-data check returns."""
    stream = b"id: 7\n\ndata: a\n\n"
    assert events_of(stream) == [msg("a", id="7")]
    events, parser = assert_split_invariant(b"id: 7\n\n")
    assert events == []
    assert parser.last_event_id == "7"


def test_an_id_in_an_event_discarded_at_eof_does_not_change_the_last_event_id() -> None:
    """The last event ID string is set only at dispatch; a discarded event is never dispatched."""
    parser = parser_after(b"id: 1\ndata: a\n\nid: 2\ndata: b\n")
    assert parser.last_event_id == "1"
    assert parser.discarded_event is True


# --------------------------------------------------------------------------------------------
# retry (9.2.6: "If the field value consists of only ASCII digits, then interpret the field value
# as an integer in base ten, and set the event stream's reconnection time to that integer.
# Otherwise, ignore the field.")
# --------------------------------------------------------------------------------------------


def test_retry_with_ascii_digits_sets_the_reconnection_time() -> None:
    """ "retry" with only ASCII digits is read in base ten and becomes the reconnection time."""
    assert events_of(b"retry: 3000\ndata: a\n\n") == [msg("a", retry=3000)]
    assert events_of(b"retry:0\ndata: a\n\n") == [msg("a", retry=0)]
    assert events_of(b"retry: 0050\ndata: a\n\n") == [msg("a", retry=50)]
    assert events_of(b"data: a\nretry: 9\n\n") == [msg("a", retry=9)]


def test_retry_persists_across_events_until_changed() -> None:
    """The reconnection time stays in force for later events until another valid retry arrives."""
    stream = b"retry: 100\ndata: a\n\ndata: b\n\nretry: 200\ndata: c\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a", retry=100), msg("b", retry=100), msg("c", retry=200)]
    assert parser.retry == 200


def test_a_retry_only_block_sets_the_reconnection_time_without_dispatching() -> None:
    """A block with only "retry" dispatches nothing but the reconnection time still changes."""
    assert events_of(b"retry: 10\n\ndata: a\n\n") == [msg("a", retry=10)]
    events, parser = assert_split_invariant(b"retry: 10\n\n")
    assert events == []
    assert parser.retry == 10


def test_retry_takes_effect_when_its_line_is_processed_not_at_dispatch() -> None:
    """ "retry" sets the reconnection time as the line is processed, even if no event follows."""
    parser = SSEParser()
    assert parser.feed(b"data: a\n\nretry: 5000\n") == [msg("a")]
    assert parser.retry == 5000
    parser = parser_after(b"data: a\n\nretry: 5000\ndata: b\n")
    assert parser.retry == 5000
    assert parser.discarded_event is True


@pytest.mark.parametrize(
    "line",
    [
        b"retry:",
        b"retry: ",
        b"retry",
        b"retry: abc",
        b"retry: -1",
        b"retry: +1",
        b"retry: 1.5",
        b"retry: 1e3",
        b"retry: 0x10",
        b"retry: 1_000",
        b"retry: 10ms",
        b"retry:  5",
        b"retry: 5 ",
        b"retry: 5\t",
        "retry: \u0663".encode(),  # ARABIC-INDIC DIGIT THREE
        "retry: \u00b2".encode(),  # SUPERSCRIPT TWO
        "retry: \uff11".encode(),  # FULLWIDTH DIGIT ONE
        "retry: \u0967".encode(),  # DEVANAGARI DIGIT ONE
    ],
    ids=lambda line: repr(line.decode()),
)
def test_a_retry_value_that_is_not_only_ascii_digits_is_ignored(line: bytes) -> None:
    """A "retry" value that is empty or has anything but ASCII digits is ignored ("Otherwise")."""
    stream = b"retry: 100\n\n" + line + b"\ndata: a\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a", retry=100)]
    assert parser.retry == 100


def test_a_retry_value_of_any_size_is_an_integer_in_base_ten() -> None:
    """ "Interpret the field value as an integer in base ten", whatever its size: no 64-bit cap."""
    past_64_bits = b"18446744073709551617"  # 2**64 + 1
    assert events_of(b"retry: " + past_64_bits + b"\ndata: a\n\n") == [
        msg("a", retry=18446744073709551617)
    ]


def test_retry_values_up_to_300_digits_are_honoured_and_longer_ones_ignored() -> None:
    """The documented bound: at most 300 digits, far below Python's 4300-digit int-string limit.

    No real reconnection time is that long; the bound keeps int() cheap and unable to raise.
    """
    events, parser = parse([b"retry: " + b"9" * 300 + b"\ndata: a\n\n"])
    assert events == [msg("a", retry=int("9" * 300))]
    for digits in (301, 4301, 10_000):
        stream = b"retry: 7\n\nretry: " + b"1" * digits + b"\ndata: a\n\n"
        events, parser = parse([stream])
        assert events == [msg("a", retry=7)], digits
        assert parser.retry == 7, digits


# --------------------------------------------------------------------------------------------
# Unknown fields (9.2.6: "Otherwise: The field is ignored.")
# --------------------------------------------------------------------------------------------


def test_unknown_field_names_are_ignored_and_counted() -> None:
    """A field name other than event, data, id and retry is ignored."""
    stream = b"foo: bar\ndata: a\nx\ncomment without colon\ndata: b\n\nfoo: only\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a\nb")]
    assert parser.unknown_field_count == 4


def test_field_names_are_case_sensitive() -> None:
    """ "The field names must be compared literally, with no case folding performed."""
    stream = b"Data: a\nEVENT: x\nID: 3\nRetry: 5\n\nevent: t\nDATA: no\ndata: yes\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("yes", event="t")]
    assert parser.unknown_field_count == 5
    assert parser.last_event_id == ""
    assert parser.retry is None


def test_field_names_are_not_trimmed() -> None:
    """Field names are literal: "data " (space before colon) and " data" are unknown fields."""
    stream = b"data : a\n data: b\n :c\n\tdata: d\n\n"
    events, parser = assert_split_invariant(stream)
    assert events == []
    assert parser.unknown_field_count == 4
    assert parser.comment_count == 0


# --------------------------------------------------------------------------------------------
# End of stream (9.2.6: "Once the end of the file is reached, any pending data must be discarded.
# (If the file ends in the middle of an event, before the final empty line, the incomplete event
# is not dispatched.)")
# --------------------------------------------------------------------------------------------


def test_at_eof_an_unterminated_event_is_discarded() -> None:
    """An event whose blank line never came is not dispatched; discarded_event says so."""
    stream = b"data: a\n\ndata: b\n"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a")]
    assert parser.discarded_event is True
    assert parser.pending_line_chars == 0
    assert parser.pending_event_chars == len("data: b\n")


def test_at_eof_a_partial_line_without_a_newline_is_not_dispatched() -> None:
    """A final line with no line end is never processed, so its data is not dispatched."""
    stream = b"data: a\n\ndata: b"
    events, parser = assert_split_invariant(stream)
    assert events == [msg("a")]
    assert parser.pending_line_chars == len("data: b")
    assert parser.pending_event_chars == len("data: b")
    assert parser.discarded_event is False  # no complete data line was waiting


def test_at_eof_pending_chars_are_counted_in_characters_not_bytes() -> None:
    """Pending counts are of decoded characters: "data: \u20ac" is 7 characters but 9 bytes."""
    parser = parser_after("data: a\n\ndata: x\ndata: \u20ac".encode())
    assert parser.pending_line_chars == 7
    assert parser.pending_event_chars == len("data: x\n") + 7
    assert parser.discarded_event is True


def test_a_stream_ending_in_a_final_cr_dispatches() -> None:
    """A final CR is a complete line end, so "data: x" CR CR ends with a blank line and fires."""
    events, parser = assert_split_invariant(b"data: x\r\r")
    assert events == [msg("x")]
    assert parser.discarded_event is False
    assert parser.pending_event_chars == 0
    # One CR ends the data line but leaves the event unterminated.
    events, parser = assert_split_invariant(b"data: x\r")
    assert events == []
    assert parser.discarded_event is True
    assert parser.pending_line_chars == 0


def test_a_stream_ending_after_a_complete_event_discards_nothing() -> None:
    """When the stream ends right after a blank line, nothing is pending and nothing is lost."""
    for stream in (b"data: a\n\n", b"data: a\r\n\r\n", b"data: a\n\n\n", b"data: a\n\n: bye\n"):
        events, parser = assert_split_invariant(stream)
        assert events == [msg("a")], stream
        assert parser.discarded_event is False, stream
        assert parser.pending_line_chars == 0, stream
    assert parser_after(b"data: a\n\n").pending_event_chars == 0


def test_at_eof_a_block_without_data_lines_is_not_a_discarded_event() -> None:
    """A blank line after only event/id/retry lines would fire nothing, so nothing is discarded."""
    for tail in (
        b"event: x\nid: 4\n: c\n",
        b"datum: x\n",
        b"data-x: y\n",
        b"Data: x\n",
        b": data\n",
    ):
        parser = parser_after(b"data: a\n\n" + tail)
        assert parser.discarded_event is False, tail
        assert parser.pending_event_chars == len(tail), tail


def test_close_returns_no_events() -> None:
    """close() declares EOF; the pending event is discarded, so close() returns []."""
    parser = SSEParser()
    assert parser.feed(b"data: a\n") == []
    assert parser.close() == []
    assert parser.discarded_event is True


def test_an_empty_stream_has_no_events_and_nothing_pending() -> None:
    """A stream with no bytes at all dispatches nothing and discards nothing."""
    events, parser = parse([])
    assert events == []
    assert parser_state(parser) == parser_state(SSEParser())


# --------------------------------------------------------------------------------------------
# API behaviour around the rules
# --------------------------------------------------------------------------------------------


def test_feeding_empty_bytes_is_a_no_op() -> None:
    """feed(b"") returns [] and changes nothing, even between the bytes of a BOM or of a CRLF."""
    stream = BOM + b"data: a\r\n\r\ndata: b\r\r"
    expected_events, expected_parser = parse([stream])
    parser = SSEParser()
    events: list[SSEEvent] = []
    for i in range(len(stream)):
        assert parser.feed(b"") == []
        events.extend(parser.feed(stream[i : i + 1]))
    assert parser.feed(b"") == []
    events.extend(parser.close())
    assert events == expected_events == [msg("a"), msg("b")]
    assert parser_state(parser) == parser_state(expected_parser)


def test_feed_after_close_raises() -> None:
    """feed() after close() raises ParserClosedError, even for b""."""
    parser = SSEParser()
    parser.close()
    with pytest.raises(ParserClosedError):
        parser.feed(b"data: a\n\n")
    with pytest.raises(ParserClosedError):
        parser.feed(b"")


def test_close_after_close_raises() -> None:
    """close() is called once: a second close() raises ParserClosedError."""
    parser = SSEParser()
    parser.close()
    with pytest.raises(ParserClosedError):
        parser.close()


def test_sse_event_repr_hides_the_data() -> None:
    """An event's repr (and str) must not contain its data, so logs cannot leak it."""
    secret = "sk-secret-prompt-text"
    event = SSEEvent("message", secret, "id-1", 5)
    for text in (repr(event), str(event), f"{event}", repr([event]), repr((event,))):
        assert secret not in text
    assert "id-1" in repr(event)
    assert f"{len(secret)} chars" in repr(event)


def test_sse_event_defaults_match_an_event_with_no_id_or_retry() -> None:
    """SSEEvent(type, data) has id "" (no last event ID) and retry None (never set)."""
    event = SSEEvent("message", "x")
    assert (event.event, event.data, event.id, event.retry) == ("message", "x", "", None)
    assert events_of(b"data: x\n\n") == [event]


def test_a_mixed_stream_gives_the_same_events_under_any_chunking() -> None:
    """Read boundaries are invisible: every chunking of a stream gives the same events and state."""
    stream = (
        BOM
        + b": comment\r\n"
        + b"retry: 1500\r"
        + b"id: 1\n"
        + b"event: start\r\n"
        + "data: \u20ac\U0001f600\r".encode()
        + b"data:x:y\n"
        + b"\r\n"
        + b"data\r\r"
        + b"id:\nunknown: 1\ndata:  z\xff\n\n"
        + b"event: tail\ndata: gone\r"
    )
    events, parser = assert_split_invariant(stream)
    assert events == [
        msg("\u20ac\U0001f600\nx:y", event="start", id="1", retry=1500),
        msg("", id="1", retry=1500),
        msg(" z\ufffd", retry=1500),
    ]
    assert parser_state(parser) == {
        "last_event_id": "",
        "retry": 1500,
        "comment_count": 1,
        "unknown_field_count": 1,
        "invalid_utf8_count": 1,
        # The complete events, LF-normalised and decoded (the pending "event: tail" block is not).
        "decoded_chars": 92,
        "limit_exceeded": None,
        "discarded_event": True,
        "pending_line_chars": 0,
        "pending_event_chars": len("event: tail\ndata: gone\n"),
    }


# --------------------------------------------------------------------------------------------
# Ceilings
# --------------------------------------------------------------------------------------------


def test_a_line_longer_than_max_line_bytes_stops_parsing() -> None:
    """A line that has not ended and exceeds max_line_bytes sets limit_exceeded to "line"."""
    long_line = b"data: " + b"x" * 100
    byte_at_a_time = [long_line[i : i + 1] for i in range(len(long_line))]
    for chunks in ([long_line], byte_at_a_time):
        parser = SSEParser(max_line_bytes=64)
        events = parser.feed(b"data: a\n\n")
        for chunk in chunks:
            events.extend(parser.feed(chunk))
        assert events == [msg("a")]
        assert parser.limit_exceeded == "line"
        assert parser.feed(b"\n\ndata: later\n\n") == []
        assert parser.close() == []
        assert parser.limit_exceeded == "line"


def test_a_pending_line_of_exactly_max_line_bytes_is_allowed() -> None:
    """The line ceiling is exceeded only by a line longer than max_line_bytes."""
    line = b"data: " + b"x" * 58  # 64 bytes
    parser = SSEParser(max_line_bytes=64)
    assert parser.feed(line) == []
    assert parser.limit_exceeded is None
    assert parser.feed(b"\n\n") == [msg("x" * 58)]
    assert parser.feed(b"data: " + b"y" * 59) == []
    assert parser.limit_exceeded == "line"


def test_an_event_larger_than_max_event_bytes_stops_parsing() -> None:
    """Many short data lines with no blank line exceeding max_event_bytes set "event"."""
    parser = SSEParser(max_event_bytes=100, max_line_bytes=64)
    assert parser.feed(b"data: a\n\n") == [msg("a")]
    for _ in range(20):
        parser.feed(b"data: x\n")
    assert parser.limit_exceeded == "event"
    assert parser.feed(b"\ndata: later\n\n") == []
    assert parser.close() == []
    assert parser.limit_exceeded == "event"
    # The same bytes in one read breach the same ceiling.
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: a\n\n" + b"data: x\n" * 20) == [msg("a")]
    assert parser.limit_exceeded == "event"


def test_events_within_the_ceilings_are_unaffected() -> None:
    """Events that fit the ceilings dispatch normally, however many of them there are."""
    parser = SSEParser(max_event_bytes=100, max_line_bytes=64)
    events: list[SSEEvent] = []
    for _ in range(50):
        events.extend(parser.feed(b"data: x\ndata: y\n\n"))
    assert events == [msg("x\ny")] * 50
    assert parser.limit_exceeded is None


def test_an_event_over_max_event_bytes_is_cut_at_the_same_byte_however_it_is_chunked() -> None:
    """A 108-byte event against a 64-byte ceiling breaches at its 65th byte, in any chunking.

    It was dispatched when its reads also completed it, and cut only when fed byte by byte.
    """
    event = b"event: big\n" + b"data: " + b"x" * 48 + b"\n" + b"data: " + b"y" * 34 + b"\n\n"
    assert len(event) == 108
    events, parser = assert_split_invariant(b"data: a\n\n" + event, max_event_bytes=64)
    assert events == [msg("a")]
    assert parser.limit_exceeded == "event"
    # The 65th byte is the last "x": 11 bytes of "event: big" and LF, then 54 of the data line.
    assert parser.pending_event_chars == 65
    assert parser.pending_line_chars == 54


def test_a_read_that_ends_at_an_event_boundary_is_held_to_the_ceilings() -> None:
    """The one-read-per-event fast path checks the ceilings too: a huge event cannot slip by."""
    huge = b"data: " + b"x" * 100 + b"\n\n"
    for limits, stage in (
        ({"max_line_bytes": 64}, "line"),
        ({"max_event_bytes": 64}, "event"),
        # Both are breached by the same byte: the line is named.
        ({"max_line_bytes": 64, "max_event_bytes": 64}, "line"),
    ):
        parser = SSEParser(**limits)
        assert parser.feed(b"data: a\n\n") == [msg("a")]
        assert parser.feed(huge) == [], limits
        assert parser.limit_exceeded == stage, limits
        assert (parser.pending_line_chars, parser.pending_event_chars) == (65, 65), limits


def test_an_event_breaches_at_the_lf_that_takes_it_past_the_ceiling() -> None:
    """The LF ending a line is held with the event: an 8-byte line fits 8 bytes, its LF breaches."""
    events, parser = assert_split_invariant(b"data: a\n\ndata: ab\ndata: x\n\n", max_event_bytes=8)
    assert events == [msg("a")]
    assert parser.limit_exceeded == "event"
    assert (parser.pending_line_chars, parser.pending_event_chars) == (0, 9)
    # A blank line's LF is not held: an event of exactly 8 bytes and its blank line fit.
    events, parser = assert_split_invariant(b"data: a\n\ndata: a\n\n", max_event_bytes=8)
    assert events == [msg("a"), msg("a")]
    assert parser.limit_exceeded is None


def test_a_blank_line_at_stream_start_ends_a_pending_event_like_any_other() -> None:
    """A leading LF is a blank line (an empty event), so it is not held against the next event."""
    events, parser = assert_split_invariant(b"\ndata: a\n\n", max_event_bytes=8)
    assert events == [msg("a")]
    assert parser.limit_exceeded is None


def breach_of(stream: bytes, max_line: int, max_event: int) -> tuple[bytes, str, int, int] | None:
    """The ceiling rule of the framing module docstring, byte by byte, from its words alone.

    Returns the stream up to and including the byte that breaches a ceiling (BOM stripped and
    LF-normalised), the stage, and the pending line and event lengths at that byte.
    """
    if len(stream) < len(BOM) and BOM.startswith(stream):
        return None  # held while the BOM is undecided: measured only once more bytes come
    body = stream[len(BOM) :] if stream.startswith(BOM) else stream
    body = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    line = event = 0
    for offset, byte in enumerate(body):
        if byte == LF and line == 0:
            event = 0  # a blank line: nothing is held any more
            continue
        line = 0 if byte == LF else line + 1
        event += 1
        if line > max_line:
            return body[: offset + 1], "line", line, event
        if event > max_event:
            return body[: offset + 1], "event", line, event
    return None


LF = 0x0A
# Lines of SSE-like pieces with every kind of line end (or none, to run on into the next line),
# so that small ceilings are breached anywhere: in a line, at an LF, after events.
SSE_LINE = st.tuples(
    st.lists(
        st.sampled_from(
            [
                b"data: ",
                b"data:",
                b"event: e",
                b"id: 1",
                b"retry: 5",
                b":",
                b"x",
                b"yyyy",
                b"zzzzzzzzzzzz",
                "\u20ac".encode(),
                b"\xff",
                BOM,
            ]
        ),
        max_size=4,
    ).map(b"".join),
    st.sampled_from([b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r\r", b""]),
).map(b"".join)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(
    stream=st.lists(SSE_LINE, max_size=16).map(b"".join) | st.binary(max_size=60),
    max_line=st.integers(0, 30) | st.just(DEFAULT_MAX_LINE_BYTES),
    max_event=st.integers(0, 80),
    data=st.data(),
)
def test_a_ceiling_gives_the_same_verdict_under_every_chunking(
    stream: bytes, max_line: int, max_event: int, data: st.DataObject
) -> None:
    """Same bytes, same verdict: the events before the breach, the stage, the pending counts.

    One byte per read is the definition; the whole stream, and random splits, must match it,
    and it must match the rule as the module docstring words it (``breach_of``).
    """
    limits = {"max_line_bytes": max_line, "max_event_bytes": max_event}
    byte_at_a_time = [stream[i : i + 1] for i in range(len(stream))]
    expected_events, parser = parse(byte_at_a_time, **limits)
    expected_state = parser_state(parser)

    breach = breach_of(stream, max_line, max_event)
    if breach is None:
        unlimited_events, unlimited = parse([stream])
        assert expected_events == unlimited_events
        assert expected_state == parser_state(unlimited)
    else:
        prefix, stage, line, event = breach
        assert expected_events == parse([BOM + prefix])[0]
        assert (parser.limit_exceeded, parser.pending_line_chars, parser.pending_event_chars) == (
            stage,
            line,
            event,
        )

    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=8)))
    split = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    for chunks in ([stream], split):
        events, parser = parse(chunks, **limits)
        assert events == expected_events, chunks
        assert parser_state(parser) == expected_state, chunks


def test_line_spans_and_field_spans_frame_text_as_the_parser_frames_bytes() -> None:
    """The recorder rewrites a body in place through these: every line end (CRLF, LF, a lone
    CR), a last line without one, and the field rules (a comment, no colon, one space)."""
    text = "data: a\r\n:note\revent:x\ndata\n\nid: 7\r\n\r\nretry"
    spans = list(line_spans(text))
    assert [text[start:end] for start, end, _ in spans] == [
        "data: a", ":note", "event:x", "data", "", "id: 7", "", "retry",
    ]  # fmt: skip
    assert "".join(text[start:end] for start, _, end in spans) == text
    assert spans[-1][1] == spans[-1][2] == len(text)
    fields = []
    for start, end, _ in spans[:4]:
        name, at = field_span(text, start, end)
        fields.append((name, text[at:end]))
    assert fields == [("data", "a"), (None, ""), ("event", "x"), ("data", "")]
    # What the parser makes of the same lines.
    events = SSEParser().feed(text.encode() + b"\n\n")
    assert [(e.event, e.data, e.id) for e in events] == [("x", "a\n", "")]
