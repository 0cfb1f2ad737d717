"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), sans-IO.

The format (AWS: "Event stream encoding" in the Amazon S3 API reference,
https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html, and the
Transcribe streaming guide; the reference decoder is ``botocore/eventstream.py``): a body is a
run of frames, each

    total length (uint32) | headers length (uint32) | prelude CRC-32 (of the 8 bytes before it)
    headers: name length (uint8), name, value type (uint8), value ...
    payload
    message CRC-32 (of every byte of the frame before it)

all integers big-endian. ``:message-type`` says what a frame is: ``event`` (named by
``:event-type``), ``exception`` (a modelled error, named by ``:exception-type``) or ``error``
(``:error-code``, ``:error-message``).

Each frame becomes the envelope every route reads, an ``SSEEvent``: an event frame's ``event``
is its ``:event-type`` and its ``data`` the payload decoded as UTF-8 (invalid sequences
replaced by U+FFFD and counted, as the SSE framer does). An exception frame is
``EXCEPTION_EVENT`` with its ``:exception-type`` as ``data``, an error frame ``ERROR_EVENT``
with its ``:error-code``: a client raises on both whatever their type (botocore's
``EventStream._parse_event``), so a route must know them apart from events without knowing
every type; their payload and message are free text, never kept.

Verdicts, each the same whatever the chunking:

- **A frame cut by EOF** (bytes held that no frame completed) is truncation: ``close()`` sets
  ``discarded_event`` and ``pending_event_chars`` (bytes held). botocore's reader stops
  silently there; the stream did not end.
- **Bytes that are not a frame** are a decode error (``corrupt`` names which check failed;
  ``decode_error_count`` counts it): a prelude or message CRC mismatch, a length the format
  forbids (a frame shorter than its prelude and CRC, headers longer than the frame, headers or
  payload beyond the format's maxima that botocore enforces), or a header block that does not
  parse. Every frame boundary after that is a guess, so parsing stops at it; later bytes are
  counted, never parsed.
- **A well-formed frame longer than** ``max_event_bytes`` stops parsing at its prelude (stage
  ``"event"``, ``pending_event_chars`` its declared length) before its bytes are held: the
  ceiling on what the framer holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from struct import Struct
from typing import NamedTuple
from zlib import crc32

from .._exceptions import ParserClosedError
from .decode import REPLACEMENT_BYTES
from .events import SSEEvent

__all__ = [
    "ERROR_EVENT",
    "EVENT_STREAM_MEDIA_TYPE",
    "EXCEPTION_EVENT",
    "PRELUDE_BYTES",
    "PROTOCOL_HEADERS",
    "EventStreamParser",
    "FrameLayout",
    "FrameSpan",
    "Header",
    "encode_frame",
    "filler",
    "frame_layout",
    "header_spans",
    "reseal",
    "unreadable_headers",
]

EVENT_STREAM_MEDIA_TYPE = "application/vnd.amazon.eventstream"
#: The envelope names of ``exception`` and ``error`` frames (a leading colon: no union member
#: is named so); their ``data`` is the frame's type or code.
EXCEPTION_EVENT = ":exception"
ERROR_EVENT = ":error"

_PRELUDE = 12
#: Prelude plus message CRC: the shortest frame there is.
_SMALLEST_FRAME = 16
# The format's maxima, as botocore enforces them (``_MAX_HEADERS_LENGTH``,
# ``_MAX_PAYLOAD_LENGTH`` in botocore/eventstream.py): a frame beyond them is no frame.
_MAX_HEADERS_BYTES = 128 * 1024
_MAX_PAYLOAD_BYTES = 24 * 1024 * 1024
_PRELUDE_STRUCT = Struct(">III")
_CRC_STRUCT = Struct(">I")
# Bytes each header value type takes after its type byte; None: a uint16 length, then that
# many bytes (6 byte array, 7 string). 0/1 are true/false, 8 a timestamp, 9 a UUID.
_VALUE_BYTES: tuple[int | None, ...] = (0, 0, 1, 2, 4, 8, None, None, 8, 16)
_VALUE_TYPES = len(_VALUE_BYTES)
# The names of the headers a frame is named by, as bytes (header names are ASCII here).
_MESSAGE_TYPE = b":message-type"
_NAMED_BY = {
    b"event": b":event-type",
    b"exception": b":exception-type",
    b"error": b":error-code",
}
# Header blocks already read -> (envelope name, data for an error frame, or None): a service
# sends the same few blocks over and over (``:event-type``, ``:content-type``,
# ``:message-type``), so each is parsed once. Bounded: short blocks only, emptied when full.
_MEMO_SIZE = 512
_MEMO_BLOCK_BYTES = 256
_memo: dict[bytes, tuple[str, str | None]] = {}
_new_event = tuple.__new__

#: The hot path compiled (``_framing_speedups.c``): a read that is exactly one whole frame whose
#: CRCs and lengths check and whose payload is strict UTF-8, as ``(header block, payload
#: text)``, else None. None when the extension was not built; ``_frames`` answers the same.
whole_frame: Callable[[bytes], tuple[bytes, str] | None] | None
try:
    from ._framing_speedups import whole_frame as _compiled
except ImportError:  # pragma: no cover - depends on how otelsse was installed
    whole_frame = None
else:
    whole_frame = _compiled


class _NotAFrame(Exception):
    """A header block that does not parse (its ``args[0]`` says why)."""


class EventStreamParser:
    """Incremental AWS event-stream parser: ``feed(bytes) -> list[SSEEvent]``, then ``close()``.

    Any chunking of the same bytes yields the same events and verdict. Bad input never raises:
    it ends up in ``corrupt``, ``decode_error_count``, ``limit_exceeded`` or the pending
    counts (see the module docstring).

    Args:
        max_line_bytes: unused (the format has no lines); taken so that every framer is made
            the same way.
        max_event_bytes: ceiling on one frame's length.

    Raises:
        ParserClosedError: ``feed()`` or ``close()`` after ``close()``.
    """

    __slots__ = (
        "_closed",
        "_ended",
        "_held",
        "_held_len",
        "_marks",
        "_max_frame",
        "_needed",
        "corrupt",
        "decode_error_count",
        "decoded_chars",
        "discarded_event",
        "limit_exceeded",
        "pending_event_chars",
    )

    #: The format has no comments and no lines: always 0.
    comment_count = 0
    pending_line_chars = 0

    def __init__(self, *, max_line_bytes: int = 0, max_event_bytes: int) -> None:
        del max_line_bytes
        self._max_frame = max_event_bytes
        # Bytes no frame has completed yet, as fragments, so that a long frame costs linear
        # time however it is chunked; joined once ``_needed`` bytes are in.
        self._held: list[bytes] = []
        self._held_len = 0
        self._needed = _PRELUDE
        # After each event the last feed() returned: (decoded_chars, decode_error_count), so
        # that stop()/end_after() can take back what came after one.
        self._marks: list[tuple[int, int]] = []
        self._closed = False
        self._ended = False
        #: Characters decoded from the payloads of the frames dispatched so far.
        self.decoded_chars = 0
        #: Invalid UTF-8 sequences replaced in payloads, plus one if the bytes stopped being
        #: frames (``corrupt``).
        self.decode_error_count = 0
        #: Why the bytes stopped being frames (``"prelude_crc"``, ``"message_crc"``,
        #: ``"length"``, ``"headers"``), or None.
        self.corrupt: str | None = None
        #: ``"event"`` once a frame was longer than the ceiling (parsing stopped), else None.
        self.limit_exceeded: str | None = None
        #: After ``close()``: EOF cut a frame.
        self.discarded_event = False
        #: After ``close()``: the bytes of the frame EOF cut. After a breached ceiling: the
        #: frame's declared length.
        self.pending_event_chars = 0

    @property
    def ended(self) -> bool:
        """``end_after()`` ended the stream."""
        return self._ended

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes; return the events of the frames they completed."""
        if self._closed:
            raise ParserClosedError("feed() after close()")
        if not data or self._ended or self.corrupt or self.limit_exceeded:
            return []
        if not self._held and whole_frame is not None and len(data) <= self._max_frame:
            # A live stream's read is one frame: taken whole when its header block was read
            # before (an event's), else by the loop below, which stays the definition.
            found = whole_frame(data)
            if found is not None:
                named = _memo.get(found[0])
                if named is not None and named[1] is None:
                    text = found[1]
                    self.decoded_chars += len(text)
                    self._marks = [(self.decoded_chars, self.decode_error_count)]
                    return [_new_event(SSEEvent, (named[0], text, "", None))]
        self._marks = []
        held_len = self._held_len + len(data)
        if held_len < self._needed:
            self._held.append(data)
            self._held_len = held_len
            return []
        if self._held:
            self._held.append(data)
            data = b"".join(self._held)
            self._held = []
        events = self._frames(data)
        return events

    def _frames(self, data: bytes) -> list[SSEEvent]:
        """Dispatch every whole frame at the start of ``data``; hold the rest."""
        events: list[SSEEvent] = []
        marks = self._marks
        view = memoryview(data)
        size = len(data)
        at = 0
        while size - at >= _PRELUDE:
            total, headers_len, prelude_crc = _PRELUDE_STRUCT.unpack_from(data, at)
            if crc32(view[at : at + 8]) != prelude_crc:
                return self._stop_corrupt(events, "prelude_crc")
            payload_len = total - headers_len - _SMALLEST_FRAME
            if payload_len < 0:
                return self._stop_corrupt(events, "length")
            if headers_len > _MAX_HEADERS_BYTES or payload_len > _MAX_PAYLOAD_BYTES:
                return self._stop_corrupt(events, "length")
            if total > self._max_frame:
                self.limit_exceeded = "event"
                self.pending_event_chars = total
                self._held_len = 0
                return events
            end = at + total
            if end > size:
                self._needed = total
                break
            (message_crc,) = _CRC_STRUCT.unpack_from(data, end - 4)
            if crc32(view[at + 8 : end - 4], prelude_crc) != message_crc:
                return self._stop_corrupt(events, "message_crc")
            headers_end = at + _PRELUDE + headers_len
            block = data[at + _PRELUDE : headers_end]
            named = _memo.get(block)
            if named is None:
                try:
                    named = _read_headers(block)
                except _NotAFrame:
                    return self._stop_corrupt(events, "headers")
                if headers_len <= _MEMO_BLOCK_BYTES:
                    if len(_memo) >= _MEMO_SIZE:
                        _memo.clear()
                    _memo[block] = named
            name, text = named
            if text is None:
                payload = data[headers_end : end - 4]
                try:
                    text = payload.decode("utf-8")
                except UnicodeDecodeError:
                    text = payload.decode("utf-8", "replace")
                    self.decode_error_count += text.count("\ufffd") - payload.count(
                        REPLACEMENT_BYTES
                    )
                self.decoded_chars += len(text)
            events.append(_new_event(SSEEvent, (name, text, "", None)))
            marks.append((self.decoded_chars, self.decode_error_count))
            at = end
        else:
            self._needed = _PRELUDE
        if at < size:
            self._held = [data[at:]]
        self._held_len = size - at
        return events

    def _stop_corrupt(self, events: list[SSEEvent], why: str) -> list[SSEEvent]:
        self.corrupt = why
        self.decode_error_count += 1
        self._held = []
        self._held_len = 0
        return events

    def close(self) -> list[SSEEvent]:
        """Declare EOF. A frame it cut is reported (``discarded_event``); never dispatched."""
        if self._closed:
            raise ParserClosedError("close() after close()")
        self._closed = True
        if self._held_len:
            self.discarded_event = True
            self.pending_event_chars = self._held_len
            self._held = []
        return []

    def dispatch_pending(self) -> list[SSEEvent]:
        """Nothing: a frame is whole or not read (the SSE framer's line rule has no twin)."""
        return []

    def stop(self, stage: str, *, events_used: int | None = None) -> None:
        """Stop parsing because a ceiling named ``stage`` was breached downstream; with
        ``events_used``, right after that event of the last ``feed()`` (as if the read had
        ended there: what came after it is taken back)."""
        if events_used is not None:
            self._forget_after(events_used)
        elif self.limit_exceeded is not None:
            return
        self.limit_exceeded = stage
        self.pending_event_chars = 0

    def judged(self) -> None:
        """The consumer is done with the last feed's events (nothing to let go here: the
        marks are small)."""

    def end_after(self, events_used: int) -> None:
        """End the stream right after the ``events_used``-th event of the last ``feed()``, as
        if the bytes had ended there; later reads are ignored."""
        self._forget_after(events_used)
        self.limit_exceeded = None
        self.pending_event_chars = 0
        self._ended = True

    def _forget_after(self, events_used: int) -> None:
        self.decoded_chars, self.decode_error_count = self._marks[events_used - 1]
        self.corrupt = None
        self._held = []
        self._held_len = 0


def _read_headers(block: bytes) -> tuple[str, str | None]:
    """The envelope name of a frame with this header block, and for an error frame its code.

    Raises:
        _NotAFrame: the block does not parse (a value that runs past its end, an unknown value
            type, a name that is not UTF-8, a name given twice).
    """
    # Every header's name -> its value if a string (type 7), else None: one dict serves the
    # duplicate check and the lookups below.
    headers: dict[bytes, bytes | None] = {}
    at, size = 0, len(block)
    while at < size:
        name_end = at + 1 + block[at]
        if name_end >= size:
            raise _NotAFrame("header name")
        name = block[at + 1 : name_end]
        if name in headers:
            raise _NotAFrame("header name")
        kind = block[name_end]
        at = name_end + 3
        if kind == 7:  # a string: every header Bedrock sends
            if at > size:
                raise _NotAFrame("value length")
            end = at + (block[at - 2] << 8 | block[at - 1])
            headers[name] = block[at:end]
        elif kind < _VALUE_TYPES:
            width = _VALUE_BYTES[kind]
            if width is None:  # a byte array
                if at > size:
                    raise _NotAFrame("value length")
                end = at + (block[at - 2] << 8 | block[at - 1])
            else:
                end = at - 2 + width
            headers[name] = None
        else:
            raise _NotAFrame("value type")
        if end > size:
            raise _NotAFrame("value")
        at = end
    try:
        for name in headers:
            if not name.isascii():
                name.decode("utf-8")
        message_type = headers.get(_MESSAGE_TYPE) or b"event"
        named_by = _NAMED_BY.get(message_type, _NAMED_BY[b"event"])
        value = (headers.get(named_by) or b"").decode("utf-8")
    except UnicodeDecodeError as error:
        raise _NotAFrame("not UTF-8") from error
    if message_type == b"error":
        return ERROR_EVENT, value
    if message_type == b"exception":
        return EXCEPTION_EVENT, value
    return value, None


def encode_frame(headers: Iterable[tuple[str, str]], payload: bytes) -> bytes:
    """One frame with these string headers (value type 7), in order, and this payload: what a
    service sends (the demo's fake provider). Names and values must fit the format's one- and
    two-byte lengths."""
    block = b"".join(
        bytes((len(name),)) + name + b"\x07" + len(value).to_bytes(2, "big") + value
        for name, value in ((n.encode(), v.encode()) for n, v in headers)
    )
    total = _SMALLEST_FRAME + len(block) + len(payload)
    prelude = total.to_bytes(4, "big") + len(block).to_bytes(4, "big")
    message = prelude + _CRC_STRUCT.pack(crc32(prelude)) + block + payload
    return message + _CRC_STRUCT.pack(crc32(message))


# -- a body's frames in place, for whoever rewrites them without changing the verdict (the recorder)

#: Bytes of a prelude: total length, headers length, prelude CRC.
PRELUDE_BYTES = _PRELUDE
#: The string headers that name a frame and its payload's type: bounded identifiers. Every
#: other header (an error frame's ``:error-message``) may be free text.
PROTOCOL_HEADERS = frozenset(
    name.decode() for name in (_MESSAGE_TYPE, *_NAMED_BY.values(), b":content-type")
)


class FrameSpan(NamedTuple):
    """Where one frame of a body is (``frame_layout``); offsets in the body."""

    start: int
    #: Where its headers end and its payload begins.
    payload: int
    #: After its message CRC.
    end: int
    #: Its envelope's name (``SSEEvent.event``); ``""`` for a frame the parser refused.
    event: str


class FrameLayout(NamedTuple):
    """A body as ``EventStreamParser`` reads it: its frames, then where and why it stopped."""

    #: Each frame it dispatched, in order: the i-th event of ``feed(body)`` is the i-th frame.
    frames: list[FrameSpan]
    #: The whole frame that failed its message CRC or whose header block does not parse (its
    #: prelude passed), else None.
    refused: FrameSpan | None
    #: Where the bytes that no span above covers begin.
    rest: int
    #: Those bytes start with a prelude that passed its CRC: of a frame EOF cut, of one longer
    #: than ``max_event_bytes``, or of lengths the format forbids.
    prelude: bool


class Header(NamedTuple):
    """One header of a header block (``header_spans``); offsets in the block."""

    name: str
    #: Where its value's bytes are (a string's or byte array's after their length).
    start: int
    end: int
    #: Of value type 7, a string.
    string: bool


def frame_layout(body: bytes, *, max_event_bytes: int) -> FrameLayout:
    """Where the frames of ``body`` are, read by ``EventStreamParser(max_event_bytes=...)``."""
    parser = EventStreamParser(max_event_bytes=max_event_bytes)
    events = parser.feed(body)
    frames, at = [], 0
    for event in events:
        total, headers_len, _ = _PRELUDE_STRUCT.unpack_from(body, at)
        frames.append(FrameSpan(at, at + _PRELUDE + headers_len, at + total, event.event))
        at += total
    refused = None
    if parser.corrupt in ("message_crc", "headers"):
        total, headers_len, _ = _PRELUDE_STRUCT.unpack_from(body, at)
        refused = FrameSpan(at, at + _PRELUDE + headers_len, at + total, "")
        at += total
    # A corrupt prelude stops the parser at its CRC; a "length" one passed it, as has any
    # prelude of a frame too long or cut (the CRC is checked as soon as twelve bytes are in).
    prelude = refused is None and parser.corrupt in (None, "length") and len(body) - at >= _PRELUDE
    return FrameLayout(frames, refused, at, prelude)


def header_spans(block: bytes) -> list[Header] | None:
    """The headers of ``block``, in order; None when the parser refuses it."""
    try:
        _read_headers(block)
    except _NotAFrame:
        return None
    headers, at = [], 0
    while at < len(block):
        name_end = at + 1 + block[at]
        name = block[at + 1 : name_end].decode()
        kind = block[name_end]
        at = name_end + 1
        width = _VALUE_BYTES[kind]
        if width is None:  # a string or byte array: a uint16 length, then its bytes
            at += 2
            width = block[at - 2] << 8 | block[at - 1]
        headers.append(Header(name, at, at + width, kind == 7))
        at += width
    return headers


def unreadable_headers(size: int) -> bytes:
    """A header block of ``size`` bytes (at least one) that does not parse: a name length of
    255 runs past a block of up to 256 bytes, and in a longer one value type 255 is none."""
    return b"\xff" * size


def filler(size: int) -> bytes:
    """``size`` bytes that are no frame, as the bytes after a frame the parser refused are: at
    least twelve are a prelude whose CRC fails (the CRC-32 of eight zero bytes is not zero),
    fewer a prelude that EOF cut."""
    return bytes(size)


def reseal(frame: bytes, original: bytes) -> bytes:
    """``frame``, a rewrite of the frame ``original`` of its length and prelude, with its
    message CRC computed again: wrong by as much as the original's was, so that a parser
    refuses the rewrite exactly where it refused the original."""
    (stored,) = _CRC_STRUCT.unpack_from(original, len(original) - 4)
    wrong = stored ^ crc32(original[:-4])
    return frame[:-4] + _CRC_STRUCT.pack(crc32(frame[:-4]) ^ wrong)
