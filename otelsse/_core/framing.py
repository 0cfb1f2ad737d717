"""The WHATWG event-stream interpretation, sans-IO.

Spec: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

Strategy: every read is normalised so that lines end in LF only (CRLF and lone CR become LF; a CR
at the end of one read remembers to drop an LF at the start of the next). Because an event ends at
a blank line, i.e. at ``"\\n\\n"``, each read only has to be searched for the *last* ``"\\n\\n"``:
everything before it is a run of complete events, decoded in one call; everything after it is
the pending tail, kept as a list of byte fragments so that a large event costs linear time
however it is chunked. When every event of the run is one ``data:`` line (nearly all LLM
traffic), counting its LFs proves it and one split at ``"\n\ndata: "`` yields the values;
otherwise the run is split into blocks and the per-line field rules apply. Per event this is a
handful of C-level ``bytes``/``str`` operations; there is no Python loop per byte or character.

Ceilings (``max_line_bytes``, ``max_event_bytes``) give the same verdict for the same bytes
however they are chunked. The verdict is defined one byte at a time, on the stream as framed
(leading BOM stripped, line ends LF-normalised): a line breaches at the byte that makes it longer
than ``max_line_bytes`` (its LF not counted); the pending event breaches at the byte that makes
the bytes held since the last blank line (or the stream start) more than ``max_event_bytes``
(LFs of its lines counted; a blank line's LF ends it and holds nothing). If one byte breaches
both, the stage is ``"line"``. The events before that byte are dispatched, then parsing stops
with ``pending_line_chars``/``pending_event_chars`` at the two lengths, in bytes, that the
breaching byte reached. Only a read that could carry the held bytes past the smaller ceiling can
hide a breach, so only such a read is scanned, line by line, for that byte; the others are
checked with one comparison. (Up to two bytes held while a leading BOM is undecided are
measured once it is decided.)

Decisions where readers of the spec have disagreed, each with a named test:

- A blank line dispatches only when the data buffer is non-empty; a block with only ``event``,
  ``id`` or ``retry`` fields dispatches nothing (but ``id``/``retry`` still take effect).
- The last event ID persists across events until the server sets another (it is never reset).
- An ``id`` value containing U+0000 is ignored.
- A ``retry`` value of only ASCII digits is an integer in base ten whatever its size (the spec
  sets no 64-bit cap), but one longer than 300 digits is ignored: no reconnection time is that
  long, and the bound keeps ``int()`` cheap and far from Python's 4300-digit int-string limit,
  where it would raise. It takes effect when its line is processed, so a ``retry`` in an event
  still pending is in force (``SSEParser.retry``) before dispatch.
- At EOF the pending event is discarded, never dispatched; ``discarded_event`` says so. Invalid
  UTF-8 in its bytes (and in an unterminated last line) is counted all the same, except a
  multi-byte sequence cut by EOF: that is truncation, reported by ``pending_line_chars``.
- When the reader of the bytes stops before EOF, the pending event whose lines have all ended
  was read (``dispatch_pending``): line-based clients act on a line as it ends.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator

from .._exceptions import ParserClosedError
from .decode import REPLACEMENT_BYTES, Utf8Decoder
from .events import SSEEvent

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEParser",
    "WholeEvents",
    "field_span",
    "line_spans",
]

# Ceilings on what the parser holds while waiting for a line or event to end. LLM events are
# small (hundreds of bytes), but Gemini sends inline images and whole function-call arguments
# in a single data line, so the defaults leave room for multi-megabyte events while still
# bounding a peer that never ends a line (compare h11's DEFAULT_MAX_INCOMPLETE_EVENT_SIZE,
# which bounds HTTP headers the same way).
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024

# A longer ``retry`` value is ignored (see the module docstring).
_RETRY_MAX_DIGITS = 300

#: The hot path compiled (``_framing_speedups.c``): a read that is exactly one simple event, as
#: ``(event type, data, decoded characters)``, else None. None when the extension was not built;
#: the pure path below answers the same for every read it takes.
simple_event: Callable[[bytes], tuple[str, str, int] | None] | None
try:
    from ._framing_speedups import simple_event as _compiled
except ImportError:  # pragma: no cover - depends on how otelsse was installed
    simple_event = None
else:
    simple_event = _compiled

_LF = 0x0A
_CR = 0x0D
# Building the tuple directly skips NamedTuple's Python-level __new__: one frame less per event.
_new_event = tuple.__new__


class SSEParser:
    """Incremental server-sent-events parser: ``feed(bytes) -> list[SSEEvent]``, then ``close()``.

    Any chunking of the same bytes yields the same events. Bad input never raises: invalid UTF-8
    is replaced and counted (``invalid_utf8_count``), and a breached ceiling stops parsing at the
    same byte whatever the chunking (see the module docstring) and is reported in
    ``limit_exceeded`` (``"line"`` or ``"event"``); later bytes are ignored.

    Args:
        max_line_bytes: ceiling on the length of a line, its line end not counted.
        max_event_bytes: ceiling on the bytes held for an event that has not been dispatched yet.

    Raises:
        ParserClosedError: ``feed()`` or ``close()`` after ``close()``.
    """

    __slots__ = (
        "_at_start",
        "_closed",
        "_decoded_chars",
        "_decoder",
        "_ended",
        "_guarded",
        "_last_span",
        "_line_len",
        "_max_event",
        "_max_line",
        "_retry",
        "_skip_lf",
        "_smaller_ceiling",
        "_tail",
        "_tail_len",
        "comment_count",
        "discarded_event",
        "last_event_id",
        "limit_exceeded",
        "pending_event_chars",
        "pending_line_chars",
        "unknown_field_count",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._smaller_ceiling = min(max_line_bytes, max_event_bytes)
        self._decoder = Utf8Decoder()
        # True until the first bytes have settled whether the stream starts with a BOM.
        self._at_start = True
        self._decoded_chars = 0
        # The span the last read decoded, so that ``stop(..., events_used=)`` can forget its end.
        self._last_span = b""
        # Bytes after the last blank line (the pending event), as fragments; LF-normalised.
        self._tail: list[bytes] = []
        self._tail_len = 0
        # Length of the line that has not ended yet (the bytes after the tail's last LF). When
        # it is 0 a line has just ended (or none began), so an LF starting the next read is a
        # blank line.
        self._line_len = 0
        # The previous read ended in CR: an LF starting the next read belongs to that CRLF.
        self._skip_lf = False
        self._closed = False
        # ``end_after()`` ended the stream early: later reads are ignored.
        self._ended = False
        # Any of the rare states above holds: every read goes through ``_guard`` first.
        self._guarded = True
        #: The last event ID buffer; persists across events (WHATWG: "does not get reset").
        self.last_event_id = ""
        # The reconnection time set by lines already interpreted (see the ``retry`` property).
        self._retry: int | None = None
        self.comment_count = 0
        self.unknown_field_count = 0
        #: ``"line"`` or ``"event"`` once a ceiling was breached (parsing stopped), else ``None``.
        self.limit_exceeded: str | None = None
        #: After ``close()``: an event that a blank line would have dispatched was discarded.
        self.discarded_event = False
        #: After ``close()``: characters left in an unterminated line / the undispatched event.
        #: After ``stop()`` (a breached ceiling): the bytes they held at that point.
        self.pending_line_chars = 0
        self.pending_event_chars = 0

    @property
    def invalid_utf8_count(self) -> int:
        """Invalid UTF-8 sequences replaced by U+FFFD so far (after ``close()``, also those in
        the bytes no event dispatched)."""
        return self._decoder.invalid_count

    #: The ``Framer`` protocol's name for the same count: invalid UTF-8 is all that SSE
    #: decoding can fail on.
    decode_error_count = invalid_utf8_count

    @property
    def ended(self) -> bool:
        """``end_after()`` ended the stream."""
        return self._ended

    @property
    def decoded_chars(self) -> int:
        """Characters decoded from complete events so far."""
        return self._decoded_chars

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds in force, once the stream has set one.

        Includes ``retry`` lines of the event still pending: the field takes effect when its
        line is processed, not when the event is dispatched.
        """
        retry = self._retry
        if self._tail:
            tail = b"".join(self._tail)
            for line in tail[: tail.rfind(b"\n") + 1].split(b"\n"):
                if line.startswith(b"retry"):
                    text = line.decode("utf-8", "replace")
                    name, at = field_span(text, 0, len(text))
                    if name == "retry":
                        retry = _maybe_retry(text[at:], retry)
        return retry

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream; return the events they completed, in order."""
        if self._guarded:
            data = self._guard(data)
        if not data:
            return []
        if _CR in data:  # an int membership test is a plain memchr, unlike b"\r" in data
            # A CR ends a line by itself; if the next read starts with LF, that LF is its partner.
            if data[-1] == _CR:
                self._skip_lf = self._guarded = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not self._tail and data.endswith(b"\n\n") and len(data) <= self._smaller_ceiling:
            # The read ends exactly at an event boundary: the live token stream, one read per
            # event, usually one ``data:`` line. Checked first because it is the hot path.
            if simple_event is not None:
                one = simple_event(data)
                if one is not None:
                    self._last_span = data
                    name, value, chars = one
                    self._decoded_chars += chars
                    return [_new_event(SSEEvent, (name, value, self.last_event_id, self._retry))]
            text = self._decode(data)
            line_ends = text.count("\n")
            if line_ends == 2 and text[:6] == "data: ":
                event = ("message", text[6:-2], self.last_event_id, self._retry)
                return [_new_event(SSEEvent, event)]
            if line_ends == 3 and text[:7] == "event: ":  # Anthropic, Responses: name, then data
                head, found, value = text[:-2].partition("\ndata: ")
                if found:
                    event = (head[7:] or "message", value, self.last_event_id, self._retry)
                    return [_new_event(SSEEvent, event)]
            return self._interpret(text)
        if self._tail_len + len(data) > self._smaller_ceiling:
            # The held bytes and this read could pass a ceiling (the line is part of the held
            # bytes, so one sum covers both): find the byte where one-byte reads would stop.
            breach = self._find_breach(data)
            if breach is not None:
                end, stage = breach
                events = self._frame(data[:end])
                self.stop(stage)
                return events
        return self._frame(data)

    def _frame(self, data: bytes) -> list[SSEEvent]:
        """Add a read that breaches no ceiling: interpret the events it completes, hold the rest."""
        size = len(data)
        if _LF not in data:
            # No line ends here: the read only lengthens the pending line.
            self._tail.append(data)
            self._tail_len += size
            self._line_len += size
            return []
        cut = data.rfind(b"\n\n") + 2
        if cut == 1:
            # No blank line inside this read; but if a line had just ended, a leading LF is one.
            cut = 1 if data[0] == _LF and not self._line_len else 0
        if cut:
            tail = self._tail
            tail.append(data[:cut])
            span = b"".join(tail)
            rest = data[cut:]
            self._tail = [rest] if rest else []
            self._tail_len = len(rest)
            events = self._interpret(self._decode(span))
        else:
            self._tail.append(data)
            self._tail_len += size
            events = []
        self._line_len = size - data.rfind(b"\n") - 1
        return events

    def _find_breach(self, data: bytes) -> tuple[int, str] | None:
        """Where one-byte reads of ``data`` would first breach a ceiling, and which one.

        Returns the length of ``data`` up to and including the breaching byte, and the stage.
        """
        max_line, max_event = self._max_line, self._max_event
        line, held = self._line_len, self._tail_len
        start = 0
        while True:
            lf = data.find(b"\n", start)
            run = (len(data) if lf < 0 else lf) - start
            # Each byte of the line before its LF lengthens both the line and the held bytes.
            line_room, event_room = max_line - line, max_event - held
            if run > min(line_room, event_room):
                if line_room <= event_room:
                    return start + line_room + 1, "line"
                return start + event_room + 1, "event"
            if lf < 0:
                return None
            if line or run:
                held += run + 1  # the LF that ends a line is held with the event
                if held > max_event:
                    return lf + 1, "event"
            else:
                held = 0  # a blank line: the event ends, nothing is held any more
            line = 0
            start = lf + 1

    def _guard(self, data: bytes) -> bytes:
        """The rare states a read must pass first: closed, stopped, BOM undecided, CR pending."""
        if self._closed:
            raise ParserClosedError("feed() after close()")
        if self.limit_exceeded is not None or self._ended or not data:
            return b""
        if self._at_start:
            data = self._decoder.strip_bom(data)
            self._at_start = self._decoder.at_start
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == _LF:
                data = data[1:]
        self._guarded = self._at_start or self._skip_lf
        return data

    def _decode(self, span: bytes) -> str:
        self._last_span = span
        try:
            text = span.decode("utf-8")
        except UnicodeDecodeError:
            text = self._decoder.decode_invalid(span)
        self._decoded_chars += len(text)
        return text

    def close(self) -> list[SSEEvent]:
        """Declare end of stream. The pending event is discarded, never dispatched.

        Returns the events that end of stream completes, which is always none: it is a list so
        that every layer has the same ``feed``/``close`` shape.
        """
        if self._closed:
            raise ParserClosedError("close() after close()")
        self._closed = self._guarded = True
        if self.limit_exceeded is not None or self._ended:
            return []
        self._retry = self.retry
        tail = b"".join(self._tail) if self._tail else self._decoder.held
        self._tail = []
        if tail:
            measure = self._decoder.measure
            last_lf = tail.rfind(b"\n")
            self.pending_event_chars = measure(tail)
            self.pending_line_chars = measure(tail[last_lf + 1 :])
            # Would a blank line here have dispatched an event? Only if a complete data line waits.
            complete = tail[: last_lf + 1]
            self.discarded_event = _has_data_line(complete)
            self._count_invalid_pending(tail)
        return []

    def dispatch_pending(self) -> list[SSEEvent]:
        """The reader of the bytes stopped before the stream ended (not EOF): dispatch the
        pending event if all its lines have ended, as the blank line would have.

        A line-based client acts on a line as it ends (``data: [DONE]``, an error's data line)
        and may close the response before the blank line comes: the event was read. At EOF the
        pending event is still discarded (``close()``), as WHATWG says.
        """
        if self._closed or self._line_len or not self._tail:
            return []
        # A CR ends a line by itself, also when a CR of the last read awaits its LF.
        return self.feed(b"\r")

    def _count_invalid_pending(self, tail: bytes) -> None:
        """Count the invalid UTF-8 in bytes no event dispatched: still corruption of the body.

        A multi-byte sequence cut by the end of the stream is not counted: the stream was cut
        mid-character (truncation, which the pending line reports), the bytes were not wrong. A
        non-final incremental decode holds exactly that sequence back instead of replacing it.
        """
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(tail)
        cut = decoder.getstate()[0]
        if cut[:1] == b"\xed" and cut[1:2] >= b"\xa0":
            # CPython also holds back ED A0..BF, a surrogate's start: no byte could complete it.
            text += cut.decode("utf-8", "replace")
        self._decoder.invalid_count += text.count("\ufffd") - tail.count(REPLACEMENT_BYTES)

    def stop(self, stage: str, *, events_used: int | None = None) -> None:
        """Stop parsing because a ceiling named ``stage`` was breached (here or downstream).

        ``events_used``: a downstream ceiling was breached by that event of the ones the last
        ``feed()`` returned (counted from 1). Parsing then stops right after it, as it would
        have had the read ended there: what the read held after it is forgotten, counters
        included, so the report does not depend on how the bytes were chunked.
        """
        if events_used is not None:
            # That event came before any ceiling of the parser's own in the same read (which
            # dispatches nothing after its breach): the downstream one was breached first.
            self._forget_after(events_used)
        elif self.limit_exceeded is not None:
            return
        self.limit_exceeded = stage
        self._guarded = True
        self.pending_event_chars = self._tail_len
        self.pending_line_chars = self._line_len
        self._tail = []
        self._tail_len = 0

    def judged(self) -> None:
        """The consumer is done with the events the last ``feed()`` returned: it will not call
        ``stop(..., events_used=)`` or ``end_after()`` for them, so the read kept for that (up to
        a whole read's bytes, per open stream) is let go."""
        self._last_span = b""

    def end_after(self, events_used: int) -> None:
        """End the stream right after the ``events_used``-th event the last ``feed()`` returned
        (counted from 1), as if the bytes had ended there: its consumer stops at the stream's
        last event. What the read held after it is forgotten, counters included, so what is
        judged does not depend on how the bytes were chunked; later reads are ignored.
        """
        self._forget_after(events_used)
        # A ceiling of the parser's own breached in the same read came after that event (it
        # dispatches nothing past its breach): had the read ended there, it never was.
        self.limit_exceeded = None
        self.pending_event_chars = self.pending_line_chars = 0
        self._ended = self._guarded = True
        self._tail = []

    def _forget_after(self, events_used: int) -> None:
        """Take back what the last decoded span counted after its ``events_used``-th event."""
        span, end, dispatched = self._last_span, 0, 0
        while dispatched < events_used:
            start, end = end, span.index(b"\n\n", end) + 2
            if _has_data_line(span[start:end]):
                dispatched += 1
        unused = span[end:]
        if unused:
            text = unused.decode("utf-8", "replace")
            self._decoded_chars -= len(text)
            self._decoder.invalid_count -= text.count("\ufffd") - unused.count(REPLACEMENT_BYTES)
            self.comment_count -= sum(1 for line in unused.split(b"\n") if line[:1] == b":")
        self._tail_len = self._line_len = 0

    def _interpret(self, text: str) -> list[SSEEvent]:
        """Dispatch every event in ``text``, which ends with a blank line."""
        last_id, retry = self.last_event_id, self._retry
        line_ends = text.count("\n")
        # Fast paths for the shapes LLM streams have: one ``data: `` line per event, or
        # ``event: NAME`` then one ``data: `` line (Anthropic, Responses). Counting LFs tells
        # whether a block can have another shape, without looking at its lines one by one.
        if text[:6] == "data: ":
            # If every event is one ``data: `` line, splitting at "\n\ndata: " yields exactly
            # their values, and then the only LFs are the two that end each event.
            values = text.split("\n\ndata: ")
            if line_ends == 2 * len(values):
                values[0] = values[0][6:]
                values[-1] = values[-1][:-2]
                return [_new_event(SSEEvent, ("message", v, last_id, retry)) for v in values]
        elif line_ends == 3 and text[:7] == "event: ":
            head, found, data = text[:-2].partition("\ndata: ")
            if found:  # three LFs: the one before "data: " is the only one inside the event
                return [_new_event(SSEEvent, (head[7:] or "message", data, last_id, retry))]
        # Any other shape. Blocks are built here only, so each is a run of non-empty lines.
        blocks = text.split("\n\n")
        blocks.pop()  # what follows the final blank line: "" (or "\n", another blank line)
        events: list[SSEEvent] = []
        append = events.append
        for block in blocks:
            if not block:
                continue  # consecutive blank lines: dispatching an empty data buffer is a no-op
            if block[0] == "\n":
                block = block.lstrip("\n")
            if block[:6] == "data: " and "\n" not in block:
                append(_new_event(SSEEvent, ("message", block[6:], last_id, retry)))
                continue
            if block[:7] == "event: ":
                # Second fast path: ``event: NAME`` then one ``data: `` line (Anthropic, Responses).
                head, found, data = block.partition("\ndata: ")
                if found and "\n" not in data and "\n" not in head:
                    append(_new_event(SSEEvent, (head[7:] or "message", data, last_id, retry)))
                    continue
            event = self._interpret_block(block)
            last_id, retry = self.last_event_id, self._retry
            if event is not None:
                append(event)
        return events

    def _interpret_block(self, block: str) -> SSEEvent | None:
        """The full per-line field rules for one block of non-empty lines."""
        event_type = ""
        data: list[str] | None = None
        for line in block.split("\n"):
            name, at = field_span(line, 0, len(line))
            if name is None:
                self.comment_count += 1
                continue
            value = line[at:]
            if name == "data":
                if data is None:
                    data = [value]
                else:
                    data.append(value)
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\0" not in value:
                    self.last_event_id = value
            elif name == "retry":
                self._retry = _maybe_retry(value, self._retry)
            else:
                self.unknown_field_count += 1
        if data is None:
            return None
        return _new_event(
            SSEEvent,
            (
                event_type or "message",
                data[0] if len(data) == 1 else "\n".join(data),
                self.last_event_id,
                self._retry,
            ),
        )


def _maybe_retry(value: str, current: int | None) -> int | None:
    """The new reconnection time if ``value`` is 1 to 300 ASCII digits, else ``current``."""
    if len(value) <= _RETRY_MAX_DIGITS and value.isdigit() and value.isascii():
        return int(value)
    return current


def _has_data_line(lines: bytes) -> bool:
    """Whether complete lines hold a ``data`` field: a blank line after them would dispatch."""
    return any(line == b"data" or line.startswith(b"data:") for line in lines.split(b"\n"))


# -- the same rules over text in place, for whoever rewrites a body line by line (the recorder) --

#: A line and its line end: CRLF, LF or a lone CR.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")


def line_spans(text: str, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """Each line of ``text`` from ``start``, as the stream is framed into lines: ``(start, end of
    its content, end with its line end)``. A last line without its line end comes as ``(start,
    end, end)``: content and line end at the same place only there."""
    at = start
    while (line := _LINE.match(text, at)) is not None:
        end = line.end()
        yield at, end - (2 if text.startswith("\r\n", end - 2) else 1), end
        at = end
    if at < len(text):
        yield at, len(text), len(text)


def field_span(text: str, start: int, end: int) -> tuple[str | None, int]:
    """The field name of the line ``text[start:end]`` (None for a comment) and where its value
    starts: after the first colon and one space that follows it; the line's end when it has no
    colon (the whole line is the name)."""
    colon = text.find(":", start, end)
    if colon == start:
        return None, end
    if colon < 0:
        return text[start:end], end
    value = colon + 1
    if value < end and text[value] == " ":
        value += 1
    return text[start:colon], value


class WholeEvents:
    """A body in whole events (the proxy's strict mode): ``take(chunk)`` returns what may go on
    now, every event that has ended, and holds the event still under way. What was handed on is
    then always a run of whole events, which another event can follow.

    An event ends at a blank line: a line end (CRLF, LF or CR) right after another (WHATWG,
    "Event stream interpretation": https://html.spec.whatwg.org/multipage/
    server-sent-events.html#event-stream-interpretation), so a read is searched for its last
    ``LF LF``, ``CR CR`` or ``LF CR``, the last byte before it included (a CRLF is one line
    end). Holding more than ``limit`` bytes (the monitor's event ceiling: past it, parsing has
    stopped) sets ``overflowed`` and hands everything on.
    """

    __slots__ = ("_held", "_last", "_limit", "_size", "overflowed")

    def __init__(self, limit: int) -> None:
        self._held: list[bytes] = []
        self._size = 0
        self._last = b""  # the last byte received, where a blank line may start
        self._limit = limit
        self.overflowed = False

    def take(self, chunk: bytes) -> bytes:
        if not chunk:
            return b""
        seen = self._last + chunk
        self._last = chunk[-1:]
        end = max(seen.rfind(pair) for pair in (b"\n\n", b"\r\r", b"\n\r")) + 2
        if end < 2:
            self._held.append(chunk)
            self._size += len(chunk)
            if self._size > self._limit:
                self.overflowed = True
                return self.flush()
            return b""
        cut = end - (len(seen) - len(chunk))
        ready = b"".join((*self._held, chunk[:cut]))
        rest = chunk[cut:]
        self._held = [rest] if rest else []
        self._size = len(rest)
        return ready

    def flush(self) -> bytes:
        """Everything held: the stream is relayed as it came after all."""
        held, self._held, self._size = b"".join(self._held), [], 0
        return held
