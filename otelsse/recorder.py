"""The flight recorder: a redacted skeleton of failed (or sampled) streams, replayable offline.

    FlightRecorder.start(route, started_at) -> Tape      one per stream, fed what the app read
    FlightRecorder.keep(tape, report)       -> id | None the skeleton, written to a bounded ring
    load_recording(path).replay()           -> StreamReport with the live outcome

A skeleton has every byte of the body in place, with the same chunk boundaries and timings, but
no content: SSE framing, JSON keys, punctuation and the protocol values the routes judge by
(event names, types, stop reasons, error codes: bounded identifiers, never free text) stay;
every other string, number and tool argument is replaced by a placeholder of the same byte
length that decodes to the same number of characters (docs/users/recorder.md).

How it is built, at ``keep()`` and only for the streams kept, by the skeleton of the route's
framer (``_SKELETONS``): an SSE body is decoded once (invalid UTF-8 noted by maximal subpart, as
the parser replaces it) and framed into lines and events; an AWS event-stream body (Bedrock) is
walked frame by frame, headers kept but for free text, each frame's CRC computed again (wrong by
as much as it was), and what its parser never read replaced by filler it refuses or holds the
same way. Each event's data is redacted by the JSON walk below under the rules its route declares
(``Route.redaction``), an invoke chunk's base64 event inside its base64. Tool
arguments are JSON text sent in fragments, and whether they are one valid value decides the
outcome, so they are lexed JSON-shape-preservingly over each call's whole text. Which fragment
feeds which call is the route's own decision: the route reads the stream once more through
``_Tracer``, a ``StreamState`` that notes every ``tool_args`` call.

The tape holds the raw bytes in memory until the stream ends (as the application does), at most
``max_stream_bytes`` of them; only the skeleton is ever written.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import hashlib
import json
import logging
import math
import os
import random as _random
import re
import secrets
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, cast, get_args

from ._core.events import SSEEvent
from ._core.eventstream import (
    EVENT_STREAM_MEDIA_TYPE,
    PRELUDE_BYTES,
    PROTOCOL_HEADERS,
    FrameSpan,
    Header,
    filler,
    frame_layout,
    header_spans,
    reseal,
    unreadable_headers,
)
from ._core.framers import FRAMERS
from ._core.framing import field_span, line_spans
from ._core.http import EVENT_STREAM, StreamViolation
from ._core.json import JSONDecodeError, loads
from ._core.state import StreamState, ToolCall
from ._monitor import (
    VIOLATION_OUTCOMES,
    Limits,
    Outcome,
    StreamError,
    StreamMonitor,
    StreamReport,
)
from .routes import Redaction, Route, make_adapter, redaction_rules

__all__ = ["FlightRecorder", "Recording", "Tape", "is_recording", "load_recording"]

_LOG = logging.getLogger("otelsse")

#: The ``format`` of a recording file this module writes and reads.
FORMAT = "otelsse-recording/1"
# The format is written first in every file, so that ``is_recording`` reads a prefix only
# (spaced as it may be once a tool such as ``jq`` has pretty-printed the file).
_MAGIC = re.compile(rb'\s*\{\s*"format"\s*:\s*"otelsse-recording/')
_MAGIC_PREFIX = 256
# A recording's file name: creation time in nanoseconds (the ring's order), then its id.
_FILE_NAME = re.compile(r"otelsse-\d{20}-[0-9a-f]{16}\.json\Z")
# One chunk record (a time and a length, 16 bytes in the tape's arrays) per this many bytes of
# ``max_stream_bytes``: the index of a stream of one-byte reads costs no more than its bytes.
_BYTES_PER_CHUNK_RECORD = 16

# -- placeholders --------------------------------------------------------------------------------

#: Content characters become this text, repeated and cut to length.
PLACEHOLDER = "[REDACTED]"
# A non-ASCII character becomes one of the same UTF-8 width, so byte and character counts both
# stay exact (lone surrogates from ``\\ud800`` escapes count 3 bytes, like these BMP ones).
_WIDE = {2: "\u00a4", 3: "\u2588", 4: "\U0001f512"}
# An invalid UTF-8 sequence (a maximal subpart, replaced by one U+FFFD when decoded) becomes an
# invalid one of the same length: a lone 0xFF, or a valid prefix that no continuation follows.
# Written as ``surrogateescape`` characters, encoded back to exactly these bytes.
_INVALID_UTF8 = {1: "\udcff", 2: "\udce1\udc80", 3: "\udcf1\udc80\udc80"}
# But a lone lead byte that ends the body is a character cut off, which the parser holds back
# as truncation (not corruption): it becomes a lead byte, still a prefix at the end.
_CUT_LEAD = "\udcc2"
_LEADS = range(0xC2, 0xF5)
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# A pseudonym that collides with another id's is drawn again, up to this many times.
_PSEUDONYM_DRAWS = 32


def _width(char: str) -> int:
    code = ord(char)
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _plain(text: str, start: int = 0) -> str:
    """``text`` as content: ``[REDACTED]`` repeated from position ``start``, same widths."""
    if text.isascii():
        offset = start % len(PLACEHOLDER)
        repeats = (offset + len(text)) // len(PLACEHOLDER) + 1
        return (PLACEHOLDER * repeats)[offset : offset + len(text)]
    return "".join(
        PLACEHOLDER[(start + i) % len(PLACEHOLDER)] if char < "\x80" else _WIDE[_width(char)]
        for i, char in enumerate(text)
    )


def _garbled(text: str) -> str:
    """What follows a point where JSON text is already invalid: nothing of it matters to the
    verdict but where its whitespace is (``str.strip`` decides whether arguments are empty)."""
    return "".join(
        char if char.isspace() else "#" if char < "\x80" else _WIDE[_width(char)] for char in text
    )


def _number(token: str) -> str:
    """A JSON number of the same shape: the first non-zero digit becomes 1 and the others 0, so
    the value is no larger and a finite double stays finite; one that overflows a double (the
    JSON reading refuses it) becomes all 9s, so it still does. The exponent is kept."""
    cut = len(token)
    for index, char in enumerate(token):
        if char in "eE":
            cut = index
            break
    mantissa = token[:cut]
    if ("." in mantissa or cut < len(token)) and math.isinf(float(token)):
        return re.sub("[0-9]", "9", mantissa) + token[cut:]
    out, seen = [], False
    for char in mantissa:
        if "1" <= char <= "9" and not seen:
            out.append("1")
            seen = True
        elif "0" <= char <= "9":
            out.append("0")
        else:
            out.append(char)
    return "".join(out) + token[cut:]


# -- tool arguments: JSON text, redacted without changing whether it is one valid value ---------

_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERAL = re.compile(r"true|false|null")
_HEX = frozenset("0123456789abcdefABCDEF")
_STRUCTURE = frozenset(" \t\n\r{}[]:,")


def _argument_shape(text: str) -> str:
    """``text`` (a call's whole argument text, or any JSON-ish text) with its content redacted.

    Structure, whitespace and ``true``/``false``/``null`` stay; string contents become
    placeholders (keys too: they are the model's); numbers keep their shape (``_number``);
    escapes stay escapes. At the first character that makes the text invalid JSON the rest is
    garbled (``_garbled``): the text was invalid there and stays so. So the redacted text is
    valid JSON exactly when ``text`` is, has trailing data exactly when it does, and is blank
    exactly when it is.
    """
    out: list[str] = []
    at, end = 0, len(text)
    while at < end:
        char = text[at]
        if char in _STRUCTURE:
            out.append(char)
            at += 1
        elif char == '"':
            at = _inner_string(text, at, out)
            if at < 0:
                at = ~at
                break
        else:
            found = (_NUMBER if char == "-" or "0" <= char <= "9" else _LITERAL).match(text, at)
            if found is None:
                break
            token = found.group()
            out.append(token if char in "tfn" else _number(token))
            at = found.end()
    return "".join(out) + _garbled(text[at:])


def _inner_string(text: str, at: int, out: list[str]) -> int:
    """Redact the string starting at ``text[at]``: return where it ends, or ``~index`` of the
    character that makes it invalid (what precedes it is in ``out``)."""
    out.append('"')
    at += 1
    end, position = len(text), 0
    while True:
        run = _STRING_RUN.match(text, at)
        if run is not None:
            out.append(_plain(run.group(), position))
            position += run.end() - at
            at = run.end()
        if at >= end:
            return end
        char = text[at]
        if char == '"':
            out.append(char)
            return at + 1
        if char != "\\":
            out.append(char)  # a control character: it stays one, and the string is invalid
            return ~(at + 1)
        out.append(char)
        at += 1
        if at >= end:
            return end
        letter = text[at]
        if letter == "u":
            digits = text[at + 1 : at + 5]
            for offset, digit in enumerate(digits):
                if digit not in _HEX:
                    out.append("u" + "0" * offset)
                    return ~(at + 1 + offset)
            out.append("u" + "0" * len(digits))
            if len(digits) < 4:
                return end
            at += 5
        elif letter in '"\\/bfnrt':
            out.append("n")
            at += 1
        else:
            return ~at
        position += 1


# -- JSON string tokens: replace what a string decodes to, keeping its escapes' lengths ----------

_UNIT = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\.|[^\\]",
    re.S,
)
_ESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unit_value(source: str) -> str:
    if len(source) == 1:
        return source
    if len(source) == 2:
        return _ESCAPED[source[1]]
    if len(source) == 6:
        return chr(int(source[2:], 16))
    high, low = int(source[2:6], 16), int(source[8:], 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _string_token(token: str, desired: str) -> str:
    """The JSON string ``token`` rewritten to decode to ``desired`` (a text of the decoded
    value's length whose characters have the decoded ones' UTF-8 widths): each escape stays an
    escape of its length, so the token keeps its byte length and its decoded length.

    A two-character escape can only decode to one of eight characters: it becomes ``\\t`` for
    a control character and ``\\/`` for anything else.
    """
    body = token[1:-1]
    if "\\" not in body:
        return f'"{desired}"'
    out = ['"']
    for unit, new in zip(_UNIT.finditer(body), desired, strict=True):
        source = unit.group()
        if new == _unit_value(source):
            out.append(source)
        elif len(source) == 1:
            out.append(new)
        elif len(source) == 2:
            out.append("\\t" if new < " " else "\\/")
        elif len(source) == 6:
            out.append(f"\\u{ord(new):04x}")
        else:
            code = ord(new) - 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    out.append('"')
    return "".join(out)


def _string_value(token: str) -> str:
    body = token[1:-1]
    return body if "\\" not in body else cast(str, json.loads(token))


_ERROR_KEY = "error"
# A protocol value: an identifier of a closed character set and bounded length, such as
# ``rate_limit_exceeded``, ``response.output_text.delta``, ``models/gemini-2.5-pro`` or
# ``claude-sonnet-4@20250514``; never a sentence or a program (no space, quote or bracket).
_PROTOCOL_VALUE = re.compile(r"[A-Za-z0-9_.:/@-]{1,128}")


def _is_protocol_value(value: str) -> bool:
    return _PROTOCOL_VALUE.fullmatch(value) is not None


def _protocol_value(value: str) -> str:
    """``value`` when it is a protocol value, else redacted (``_plain``): what a kept word
    becomes. Equal values still become equal placeholders, so comparisons replay."""
    return value if _is_protocol_value(value) else _plain(value)


def _is_error_event(name: str, payload: Any) -> bool:
    """An error event: ``event: error`` (chat gateways, Anthropic, generic SSE) or data of
    ``type`` ``error`` (Responses, Anthropic)."""
    return name == _ERROR_KEY or (type(payload) is dict and payload.get("type") == _ERROR_KEY)


# -- the route's reading: which call each argument fragment feeds -------------------------------


class _Tracer(StreamState):
    """A ``StreamState`` that notes each argument fragment, its event and its call."""

    __slots__ = ("_calls", "_segments", "pieces")

    def __init__(self, limits: Limits) -> None:
        super().__init__(
            collect_text=False,
            max_tool_chars=limits.max_tool_argument_chars,
            max_tool_calls=limits.max_tool_calls,
            max_text_chars=limits.max_text_chars,
            max_parts=limits.max_parts,
        )
        #: (event, segment, fragment) in the order the route gave them.
        self.pieces: list[tuple[SSEEvent | None, int, str]] = []
        # A segment is one call's text before its close, or after it (trailing data, judged
        # apart): (id of the call, closed) -> segment number.
        self._segments: dict[tuple[int, bool], int] = {}
        self._calls: list[ToolCall] = []  # keeps every id() above taken

    def tool_args(self, call: ToolCall, fragment: Any) -> None:
        if type(fragment) is str and fragment:
            key = (id(call), call.closed)
            segment = self._segments.get(key)
            if segment is None:
                segment = self._segments[key] = len(self._segments)
                self._calls.append(call)
            self.pieces.append((self.event, segment, fragment))
        super().tool_args(call, fragment)


def _trace(body: bytes, adapter: Route, limits: Limits) -> dict[int, list[tuple[str, str]]]:
    """For each event (by its index) the argument fragments the route took from it, in order,
    with what each becomes: its slice of its call's redacted text. The body is read by the
    route's framer; a pending SSE event whose lines have all ended is read too: a stream the
    application stopped reading dispatches it."""
    parser = FRAMERS[adapter.media_type](
        max_line_bytes=limits.max_line_bytes, max_event_bytes=limits.max_event_bytes
    )
    events = parser.feed(body)
    events += parser.dispatch_pending()
    state = _Tracer(limits)
    for event in events:
        state.event = event
        try:
            adapter.on_event(event, state)
        except Exception:
            # A shape the route did not expect: the monitor judges the event invalid, and its
            # fragments are already noted.
            state.payload_invalid()
    order = {id(event): index for index, event in enumerate(events)}  # events stay alive
    texts: dict[int, list[str]] = {}
    for _, segment, fragment in state.pieces:
        texts.setdefault(segment, []).append(fragment)
    shapes = {segment: _argument_shape("".join(parts)) for segment, parts in texts.items()}
    offsets = dict.fromkeys(shapes, 0)
    found: dict[int, list[tuple[str, str]]] = {}
    for origin, segment, fragment in state.pieces:
        at = offsets[segment]
        offsets[segment] = at + len(fragment)
        found.setdefault(order[id(origin)], []).append(
            (fragment, shapes[segment][at : at + len(fragment)])
        )
    return found


# -- the skeleton ---------------------------------------------------------------------------------

_JSON_TOKEN = re.compile(
    r'[ \t\n\r]+|"(?:[^"\\]|\\.)*"|[{}\[\],:]|true|false|null'
    r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?",
    re.S,
)
_DONE = "[DONE]"
_DIGITS = re.compile("[0-9]+")
_SUBPART_ERRORS = "otelsse.recorder"
_subparts = threading.local()


def _note_subpart(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeDecodeError)
    _subparts.found.append((error.start, error.end))
    return "\ufffd", error.end


codecs.register_error(_SUBPART_ERRORS, _note_subpart)


def _decode(body: bytes) -> tuple[str, list[tuple[int, str]]]:
    """The body as the parser reads it (each invalid sequence one U+FFFD), and for each of
    those its character index and the invalid bytes (``surrogateescape``) that stand in."""
    try:
        return body.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    _subparts.found = []
    text = body.decode("utf-8", _SUBPART_ERRORS)
    invalid, characters, previous = [], 0, 0
    for start, end in _subparts.found:
        characters += len(body[previous:start].decode("utf-8"))
        cut = end == len(body) and end - start == 1 and body[start] in _LEADS
        invalid.append((characters, _CUT_LEAD if cut else _INVALID_UTF8[end - start]))
        characters += 1
        previous = end
    return text, invalid


def _encode(text: str, invalid: list[tuple[int, str]]) -> bytes:
    if not invalid:
        return text.encode("utf-8")
    parts, previous = [], 0
    for index, stand_in in invalid:
        parts.append(text[previous:index])
        parts.append(stand_in)
        previous = index + 1
    parts.append(text[previous:])
    return "".join(parts).encode("utf-8", "surrogateescape")


class _Frame:
    """Where the JSON walk is: inside an object (and at which key) or an array."""

    __slots__ = ("error", "expect_key", "is_object", "key", "opaque", "usage")

    def __init__(
        self, is_object: bool, key: str | None, opaque: bool, usage: bool, error: bool
    ) -> None:
        self.is_object = is_object
        self.expect_key = is_object
        self.key = key
        self.opaque = opaque
        self.usage = usage
        self.error = error


class _Skeleton:
    """Redacts one body: the JSON walk of its events' data, and the ids it pseudonymises. Each
    framer's subclass finds the events in the bytes (``_SKELETONS``)."""

    #: Keys whose string values are base64 of an event of their own, redacted inside.
    blobs: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self, rules: Redaction, fragments: dict[int, list[tuple[str, str]]], salt: bytes
    ) -> None:
        self._rules = rules
        # Resolved by ``redaction_rules``: never None here.
        self._opaque_keys = rules.opaque or frozenset()
        self._fragments = fragments
        self._salt = salt
        self._ids: dict[str, str] = {}
        self._pseudonyms: set[str] = set()

    def build(self, body: bytes, limits: Limits) -> bytes:
        """``body`` redacted, every byte in place."""
        raise NotImplementedError

    def _opaque(self, data: str) -> str:
        """Data that is not JSON: every character redacted (lines stay lines), but for the
        ``[DONE]`` marker the routes test for. Never valid JSON: it starts ``[R``."""
        kept = _DONE if data.startswith(_DONE) else ""
        out, position = [kept], len(kept)
        for index, line in enumerate(data[len(kept) :].split("\n")):
            if index:
                out.append("\n")
                position += 1
            out.append(_plain(line, position))
            position += len(line)
        return "".join(out)

    def _data(self, data: str, fragments: list[tuple[str, str]], name: str) -> str:
        """An event's data, its argument fragments ``fragments``; ``name``: the event's name."""
        try:
            payload = loads(data)
        except JSONDecodeError:
            return self._opaque(data)
        return self._json(data, fragments, _is_error_event(name, payload))

    def _json(self, data: str, fragments: list[tuple[str, str]], error_event: bool) -> str:
        """Valid JSON ``data`` redacted by the rules; its argument fragments by ``fragments``;
        ``error_event``: its top level is an error (whose code is kept)."""
        rules = self._rules
        out: list[str] = []
        # String values that may carry an argument fragment: (out index, token, value, key).
        candidates: list[tuple[int, str, str, str | None]] = []
        stack = [_Frame(False, None, False, False, True)]
        for match in _JSON_TOKEN.finditer(data):
            token = match.group()
            first = token[0]
            frame = stack[-1]
            if first in "{[":
                key = frame.key
                stack.append(
                    _Frame(
                        first == "{",
                        None if first == "{" else key,
                        frame.opaque or key in self._opaque_keys or key in rules.arguments,
                        frame.usage or key in rules.usage,
                        key == _ERROR_KEY or (len(stack) == 1 and error_event),
                    )
                )
                out.append(token)
            elif first in "}]":
                stack.pop()
                out.append(token)
            elif first == ",":
                frame.expect_key = frame.is_object
                out.append(token)
            elif first == '"':
                if frame.expect_key:
                    frame.expect_key = False
                    frame.key = _string_value(token)
                    out.append(_string_token(token, _plain(frame.key)) if frame.opaque else token)
                else:
                    self._string(token, frame, out, candidates, fragments)
            elif first == "-" or "0" <= first <= "9":
                key = frame.key
                kept = frame.usage or key in rules.numbers or (key in rules.errors and frame.error)
                out.append(token if kept and not frame.opaque else _number(token))
            else:  # whitespace, ':', true, false, null
                out.append(token)
        used = [False] * len(candidates)
        for fragment, shape in fragments:
            for number, (index, token, value, _) in enumerate(candidates):
                if not used[number] and value == fragment:
                    used[number] = True
                    out[index] = _string_token(token, shape)
                    break
        for number, (index, token, value, key) in enumerate(candidates):
            if not used[number]:
                whole = key in rules.arguments
                out[index] = _string_token(
                    token, _argument_shape(value) if whole else _plain(value)
                )
        return "".join(out)

    def _string(
        self,
        token: str,
        frame: _Frame,
        out: list[str],
        candidates: list[tuple[int, str, str, str | None]],
        fragments: list[tuple[str, str]],
    ) -> None:
        rules, key = self._rules, frame.key
        value = _string_value(token)
        if frame.opaque:
            out.append(_string_token(token, _plain(value)))
        elif key in self.blobs:
            out.append(_string_token(token, self._blob(value, fragments)))
        elif key in rules.words or (key in rules.errors and frame.error):
            kept = _protocol_value(value)
            out.append(token if kept == value else _string_token(token, kept))
        elif key in rules.ids:
            out.append(_string_token(token, self._pseudonym(value)))
        elif key in rules.arguments or (
            fragments and (rules.fragments is None or key in rules.fragments)
        ):
            candidates.append((len(out), token, value, key))
            out.append("")
        else:
            out.append(_string_token(token, _plain(value)))

    def _blob(self, value: str, fragments: list[tuple[str, str]]) -> str:
        """A base64 value: the event it encodes redacted (of its byte length, so the base64 is
        of the same length), its argument fragments ``fragments``; else redacted as text (then
        never base64: it starts ``[``)."""
        try:
            inner = base64.b64decode(value, validate=True)
        except ValueError:  # binascii.Error, or a non-ASCII character
            return _plain(value)
        text, invalid = _decode(inner)
        redacted = _encode(self._data(text, fragments, ""), invalid)
        return base64.b64encode(redacted).decode("ascii")

    def _pseudonym(self, value: str) -> str:
        """The same stand-in for the same id everywhere in this recording; a different one for
        a different id (drawn again on a collision). Letters and digits are drawn, other ASCII
        kept; a wider character becomes one of its width."""
        known = self._ids.get(value)
        if known is not None:
            return known
        raw = value.encode("utf-8", "surrogatepass")
        for draw in range(_PSEUDONYM_DRAWS):
            stream = hashlib.shake_256(self._salt + bytes([draw]) + raw).digest(len(value))
            candidate = "".join(
                _stand_in(char, byte) for char, byte in zip(value, stream, strict=True)
            )
            if candidate not in self._pseudonyms:
                break
        self._ids[value] = candidate
        self._pseudonyms.add(candidate)
        return candidate


def _stand_in(char: str, byte: int) -> str:
    if char < "\x80":
        return _ALNUM[byte % len(_ALNUM)] if char.isalnum() else char
    width = _width(char)
    return chr(0x100 + byte if width == 2 else 0x4E00 + byte if width == 3 else 0x20000 + byte)


class _SSESkeleton(_Skeleton):
    """An SSE body: decoded once, redacted line by line and event by event."""

    def __init__(
        self, rules: Redaction, fragments: dict[int, list[tuple[str, str]]], salt: bytes
    ) -> None:
        super().__init__(rules, fragments, salt)
        self._events = 0

    def build(self, body: bytes, limits: Limits) -> bytes:
        text, invalid = _decode(body)
        return _encode(self.redact(text), invalid)

    def redact(self, text: str) -> str:
        out: list[str] = []
        at = 0
        if text.startswith("\ufeff"):
            out.append("\ufeff")  # the byte-order mark the parser strips: framing
            at = 1
        block: list[tuple[int, int, int]] = []
        for start, content_end, end in line_spans(text, at):
            if content_end == end:  # the last line, not ended: part of the pending tail
                block.append((start, content_end, end))
            elif content_end == start:  # a blank line ends the block
                self._block(text, block, True, out)
                block = []
                out.append(text[start:end])
            else:
                block.append((start, content_end, end))
        # The pending tail: an event when its lines have all ended, as a stream the application
        # stopped reading dispatches it (StreamMonitor.close); else it can never be one.
        self._block(text, block, bool(block) and block[-1][1] != block[-1][2], out)
        return "".join(out)

    def _block(
        self, text: str, lines: list[tuple[int, int, int]], ended: bool, out: list[str]
    ) -> None:
        """One event's lines; ``ended``: they may be dispatched (a blank line followed, or they
        are a pending tail whose lines have all ended); else data that can never be an event."""
        fields = [field_span(text, start, end) for start, end, _ in lines]
        values: dict[str | None, list[str]] = {}
        for (name, value), (_, end, _) in zip(fields, lines, strict=True):
            values.setdefault(name, []).append(text[value:end])
        pieces: Iterator[str] = iter(())
        if "data" in values:
            data = "\n".join(values["data"])
            if ended:
                names = values.get("event")
                fragments = self._fragments.get(self._events, [])
                redacted = self._data(data, fragments, names[-1] if names else "")
                self._events += 1
            else:
                redacted = self._opaque(data)
            pieces = iter(redacted.split("\n"))
        for (name, value), (start, end, line_end) in zip(fields, lines, strict=True):
            if name is None:  # a comment
                out.append(":" + _plain(text[start + 1 : end]))
            elif name == "data":
                out.append(text[start:value] + next(pieces))
            elif name == "event":
                out.append(text[start:value] + _protocol_value(text[value:end]))
            elif name == "retry" and _DIGITS.fullmatch(text, value, end):
                out.append(text[start:end])
            elif name == "id":
                out.append(text[start:value] + self._pseudonym(text[value:end]))
            elif value == end and ":" not in text[start:end]:
                out.append(_plain(text[start:end]))
            else:
                colon = text.index(":", start, end)
                out.append(_plain(name) + ":" + _plain(text[colon + 1 : end], 1))
            out.append(text[end:line_end])


class _FrameSkeleton(_Skeleton):
    """An AWS event-stream body, frame by frame (``_core.eventstream``): each frame's headers and
    payload redacted in place and its message CRC computed again, wrong by as much as it was.
    What the parser never read (after a frame it refused, a frame EOF cut, one too long) is
    filler that it refuses or holds the same way, behind the prelude it judged by, if any."""

    # An InvokeModelWithResponseStream chunk is a ``PayloadPart``, whose ``bytes`` (a blob,
    # base64 in the JSON protocol) are the model's own event (AWS, Amazon Bedrock API reference,
    # "PayloadPart"; botocore's bedrock-runtime service model).
    blobs: ClassVar[frozenset[str]] = frozenset({"bytes"})

    def build(self, body: bytes, limits: Limits) -> bytes:
        layout = frame_layout(body, max_event_bytes=limits.max_event_bytes)
        out = [
            self._frame(body[span.start : span.end], span, self._fragments.get(index, []))
            for index, span in enumerate(layout.frames)
        ]
        if layout.refused is not None:
            span = layout.refused
            out.append(self._frame(body[span.start : span.end], span, []))
        rest = layout.rest
        if layout.prelude:
            out.append(body[rest : rest + PRELUDE_BYTES])
            rest += PRELUDE_BYTES
        out.append(filler(len(body) - rest))
        return b"".join(out)

    def _frame(self, frame: bytes, span: FrameSpan, fragments: list[tuple[str, str]]) -> bytes:
        """One whole frame, its payload's argument fragments ``fragments``."""
        payload_at = span.payload - span.start
        block = frame[PRELUDE_BYTES:payload_at]
        headers = header_spans(block)
        text, invalid = _decode(frame[payload_at:-4])
        redacted = (
            frame[:PRELUDE_BYTES]
            + (unreadable_headers(len(block)) if headers is None else _headers(block, headers))
            + _encode(self._data(text, fragments, span.event), invalid)
            + frame[-4:]
        )
        return reseal(redacted, frame)


def _headers(block: bytes, headers: list[Header]) -> bytes:
    """A header block with its names and the protocol headers' protocol values kept; every
    other value redacted: a string as text, any other value zeroed."""
    out = bytearray(block)
    for header in headers:
        raw = block[header.start : header.end]
        if header.string:
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = "?" * len(raw)
            kept = _protocol_value(value) if header.name in PROTOCOL_HEADERS else _plain(value)
            out[header.start : header.end] = kept.encode("utf-8")
        else:
            out[header.start : header.end] = bytes(len(raw))
    return bytes(out)


#: Media type -> the skeleton of a body of that type (``_core.framers.FRAMERS``' keys).
_SKELETONS: dict[str, type[_Skeleton]] = {
    EVENT_STREAM: _SSESkeleton,
    EVENT_STREAM_MEDIA_TYPE: _FrameSkeleton,
}


def _skeleton(body: bytes, route: str, judged_as: str, limits: Limits) -> bytes:
    """``body`` with no content left, every byte in place (see the module docstring)."""
    adapter = make_adapter(route)
    skeleton = _SKELETONS[adapter.media_type](
        redaction_rules(judged_as), _trace(body, adapter, limits), secrets.token_bytes(16)
    )
    return skeleton.build(body, limits)


# -- the public part -------------------------------------------------------------------------------


class Tape:
    """What one stream's application read, as it read it: from ``FlightRecorder.start()``.

    Holds at most ``max_stream_bytes`` bytes and one chunk record (16 bytes) per 16 of them;
    past either bound it keeps nothing more and the recording says ``capture_complete=False``.
    """

    __slots__ = ("_body", "_full", "_kept", "_max_bytes", "_max_chunks", "_sizes", "_times",
                 "route", "sampled", "started_at")  # fmt: skip

    def __init__(self, route: str, started_at: float, sampled: bool, max_bytes: int) -> None:
        self.route = route
        self.started_at = started_at
        #: Chosen by the sample rate: kept even when it ends ``complete``.
        self.sampled = sampled
        self._max_bytes = max_bytes
        self._max_chunks = max(1, max_bytes // _BYTES_PER_CHUNK_RECORD)
        self._body = bytearray()
        self._times = array("d")
        self._sizes = array("Q")
        self._full = False
        self._kept = False

    def write(self, chunk: bytes, now: float) -> None:
        """The application read ``chunk`` (decoded body bytes) at ``now`` (``perf_counter``)."""
        if not chunk or self._full or self._kept:
            return
        room = self._max_bytes - len(self._body)
        if room <= 0 or len(self._sizes) >= self._max_chunks:
            self._full = True
            return
        if len(chunk) > room:
            # Cut at the byte bound, so that what is kept does not depend on the chunking.
            chunk = chunk[:room]
            self._full = True
        self._body += chunk
        self._times.append(now - self.started_at)
        self._sizes.append(len(chunk))

    def _take(self) -> tuple[bytes, list[tuple[float, int]], bool] | None:
        """The captured body, its chunk records and whether it is whole; once, then freed."""
        if self._kept:
            return None
        self._kept = True
        taken = bytes(self._body), list(zip(self._times, self._sizes, strict=True)), not self._full
        self._body, self._times, self._sizes = bytearray(), array("d"), array("Q")
        return taken


class FlightRecorder:
    """Keeps a redacted skeleton of every stream that did not end ``complete`` (and of a
    sampled share of all streams) in ``directory``, a ring bounded in files and bytes.

    Args:
        directory: where recordings go (created if missing). Files that are not recordings
            are left alone.
        sample_rate: the share of streams kept whatever their outcome, decided at ``start()``.
        max_recordings, max_total_bytes: the ring's bounds; the oldest recordings go first.
        max_stream_bytes: the most of one body a tape holds (see ``Tape``).
        limits: the ``Limits`` the live monitors use; a replay judges with them.
        random: the sampling draw (uniform in [0, 1)).

    Attributes:
        prune_failures: how many times the ring could not remove an entry named like a
            recording (a directory, a file it may not delete). Such an entry is skipped and
            left out of the bounds, which hold over the other recordings; the first failure
            is logged at WARNING.

    Raises:
        ValueError: a bound that is not positive, or ``sample_rate`` outside [0, 1].
        OSError: ``directory`` cannot be created.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        sample_rate: float = 0.0,
        max_recordings: int = 200,
        max_total_bytes: int = 64 * 1024 * 1024,
        max_stream_bytes: int = 1024 * 1024,
        limits: Limits | None = None,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], not {sample_rate!r}")
        for name, bound in (
            ("max_recordings", max_recordings),
            ("max_total_bytes", max_total_bytes),
            ("max_stream_bytes", max_stream_bytes),
        ):
            if bound < 1:
                raise ValueError(f"{name} must be positive, not {bound!r}")
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.sample_rate = sample_rate
        self.max_recordings = max_recordings
        self.max_total_bytes = max_total_bytes
        self.max_stream_bytes = max_stream_bytes
        self.limits = limits or Limits()
        self._random = random
        self._lock = threading.Lock()
        self.prune_failures = 0

    def start(self, route: str, started_at: float) -> Tape:
        """A tape for a stream read by ``StreamMonitor(route)``, its request sent at
        ``started_at`` (``perf_counter``), whatever the route's framing: SSE, or AWS's binary
        event stream (the Bedrock routes), whose skeleton keeps every frame in place, each
        frame's headers and payload redacted (docs/users/recorder.md)."""
        sampled = self.sample_rate > 0.0 and self._random() < self.sample_rate
        return Tape(route, started_at, sampled, self.max_stream_bytes)

    def keep(
        self,
        tape: Tape,
        report: StreamReport,
        *,
        on_prune_failure: Callable[[OSError], None] | None = None,
    ) -> str | None:
        """At the stream's end: write its skeleton if ``report`` is not ``complete`` or the
        stream was sampled, and return the recording's id; else None (also for a tape already
        kept, or a recording larger than the whole ring).

        Never raises for any body, nor for an entry the ring cannot remove (it is skipped,
        counted in ``prune_failures`` and handed to ``on_prune_failure``, which the
        instrumentation counts as an error of stage ``record``); an ``OSError`` writing the
        file is the caller's.
        """
        taken = tape._take()
        if taken is None or (report.outcome == Outcome.COMPLETE and not tape.sampled):
            return None
        body, chunks, whole = taken
        skeleton = _skeleton(body, tape.route, report.route, self.limits)
        recording_id = secrets.token_hex(8)
        created = time.time_ns()
        record = {
            "format": FORMAT,
            "id": recording_id,
            "created": created / 1e9,
            "route": tape.route,
            "judged_as": report.route,
            "outcome": report.outcome.value,
            "refused": _refusal(report),
            "error": report.error,
            "ended_at": report.duration,
            "sampled": tape.sampled,
            "capture_complete": whole,
            "report": _report_counts(report),
            "limits": dataclasses.asdict(self.limits),
            "chunks": list(_encode_chunks(skeleton, chunks)),
        }
        data = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        name = f"otelsse-{created:020d}-{recording_id}.json"
        with self._lock:
            self._write(name, data)
            return recording_id if self._prune(name, on_prune_failure) else None

    def _write(self, name: str, data: bytes) -> None:
        handle, temporary = tempfile.mkstemp(prefix=".otelsse-", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, os.path.join(self.directory, name))
        except BaseException:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
            raise

    def _prune(self, newest: str, on_failure: Callable[[OSError], None] | None) -> bool:
        """Remove the oldest recordings until the ring is within its bounds; False when that
        removed ``newest`` too (it alone is larger than ``max_total_bytes``). An entry it
        cannot remove is skipped and left out of the bounds (``prune_failures``)."""
        entries: list[tuple[str, int]] = []
        with os.scandir(self.directory) as found:
            for entry in found:
                if _FILE_NAME.match(entry.name):
                    try:
                        entries.append((entry.name, entry.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:
                        continue  # another process's ring removed it
        entries.sort()
        total = sum(size for _, size in entries)
        count, kept = len(entries), True
        for name, size in entries:
            if count <= self.max_recordings and total <= self.max_total_bytes:
                break
            count, total = count - 1, total - size
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass  # another process's ring removed it
            except OSError as exc:
                self._cannot_remove(name, exc)
                if on_failure is not None:
                    on_failure(exc)
                continue
            kept = kept and name != newest
        return kept

    def _cannot_remove(self, name: str, error: OSError) -> None:
        self.prune_failures += 1
        if self.prune_failures == 1:
            _LOG.warning(
                "otelsse's flight recorder cannot remove %s from its ring (%s); it is skipped, "
                "and the ring's bounds hold over the other recordings",
                os.path.join(self.directory, name),
                error.strerror or type(error).__name__,
            )


_REPORT_FIELDS = (
    "event_count", "bytes_received", "chunk_count", "terminal_seen", "stop_reason",
    "tool_call_count", "tool_call_invalid_count", "buffer_limit_stage", "decode_error_count",
)  # fmt: skip


def _report_counts(report: StreamReport) -> dict[str, Any]:
    """The live report's counts, names and protocol vocabulary: its stop reason is the
    stream's, so it is kept only as a protocol value, as the skeleton keeps it."""
    counts = {name: getattr(report, name) for name in _REPORT_FIELDS}
    if type(report.stop_reason) is str:
        counts["stop_reason"] = _protocol_value(report.stop_reason)
    return counts | {"anomalies": dict(report.anomalies)}


def _refusal(report: StreamReport) -> StreamViolation | None:
    """The header check that decided the outcome, if one did (its body was never read)."""
    for violation, outcome in VIOLATION_OUTCOMES.items():
        if report.outcome == outcome and (
            outcome != Outcome.PROTOCOL_ERROR or violation in report.anomalies
        ):
            return violation
    return None


def _encode_chunks(skeleton: bytes, chunks: list[tuple[float, int]]) -> Iterable[tuple[float, str]]:
    at = 0
    for moment, size in chunks:
        yield moment, base64.b64encode(skeleton[at : at + size]).decode("ascii")
        at += size


@dataclass(frozen=True)
class Recording:
    """A recording loaded from disk (``load_recording``)."""

    id: str
    #: The route the live monitor was built with (``auto``, a name, ``name:profile``).
    route: str
    #: The route that judged it (a report's ``route``).
    judged_as: str
    #: The live outcome.
    outcome: str
    #: False when the tape stopped at its bound: the replay then ends where the capture did.
    capture_complete: bool
    #: (seconds since the request was sent, skeleton bytes), as the application read them.
    chunks: list[tuple[float, bytes]]
    limits: Limits
    #: How the stream ended: None (EOF), ``transport``, ``timeout`` or ``cancelled``.
    error: StreamError | None
    #: Seconds from the request to the stream's end; None when unknown.
    ended_at: float | None
    #: The header check that refused the response (its body was never read), if any.
    refused: StreamViolation | None
    #: Unix time the recording was written.
    created: float
    sampled: bool
    #: Counts of the live report (no content: names, numbers and protocol vocabulary).
    report: dict[str, Any]

    def replay(self, *, events: list[SSEEvent] | None = None) -> StreamReport:
        """Judge the skeleton as the live monitor judged the body: same outcome. The envelopes
        the replay read (SSE events, AWS event-stream frames) are added to ``events``."""
        monitor = StreamMonitor(self.route, limits=self.limits, started_at=0.0)
        if self.refused is not None:
            monitor.refuse(self.refused)
        for moment, chunk in self.chunks:
            read = monitor.feed(chunk, moment)
            if events is not None:
                events.extend(read)
        return monitor.close(self.ended_at, error=self.error)


def is_recording(data: bytes) -> bool:
    """Whether a file's bytes are a flight recording (of any format version)."""
    return _MAGIC.match(data[:_MAGIC_PREFIX]) is not None


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a recording file.

    Raises:
        ValueError: the file is not a recording, or not one of this format version.
        OSError: it cannot be read.
    """
    with open(path, "rb") as file:
        data = file.read()
    if not is_recording(data):
        raise ValueError(f"{os.fspath(path)!r} is not an otelsse recording")
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:  # nested deeper than the interpreter recurses
        raise ValueError(f"{os.fspath(path)!r} is not valid JSON: {exc}") from exc
    if record.get("format") != FORMAT:
        raise ValueError(
            f"{os.fspath(path)!r} is a recording of format {record.get('format')!r}; "
            f"this otelsse reads {FORMAT!r}"
        )
    try:
        return _recording(record)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: float(10**400)
        raise ValueError(f"{os.fspath(path)!r} is a damaged recording: {exc!r}") from exc


def _recording(record: dict[str, Any]) -> Recording:
    def field(name: str, *kinds: type) -> Any:
        value = record[name]
        if type(value) not in kinds:  # exactly: a bool is no number here
            raise TypeError(f"{name}: {type(value).__name__}")
        return value

    error, refused = record["error"], record["refused"]
    if error is not None and error not in get_args(StreamError):
        raise ValueError(f"error: {error!r}")
    if refused is not None and refused not in VIOLATION_OUTCOMES:
        raise ValueError(f"refused: {refused!r}")
    limits = field("limits", dict)
    chunks = [
        (float(moment), base64.b64decode(encoded, validate=True))
        for moment, encoded in field("chunks", list)
    ]
    return Recording(
        id=field("id", str),
        route=field("route", str),
        judged_as=field("judged_as", str),
        outcome=Outcome(field("outcome", str)).value,
        capture_complete=field("capture_complete", bool),
        chunks=chunks,
        limits=Limits(**{item.name: _limit(limits, item) for item in dataclasses.fields(Limits)}),
        error=error,
        ended_at=None if record["ended_at"] is None else float(field("ended_at", int, float)),
        refused=refused,
        created=float(field("created", int, float)),
        sampled=field("sampled", bool),
        report=field("report", dict),
    )


def _limit(limits: dict[str, Any], item: dataclasses.Field[Any]) -> Any:
    """A recorded ceiling: a count no object can exceed (``sys.maxsize``), or None where
    ``Limits`` has no ceiling by default (``max_events``)."""
    value = limits[item.name]
    if value is None and item.default is None:
        return None
    if type(value) is not int or not 0 <= value <= sys.maxsize:  # exactly: a bool is no count
        raise ValueError(f"limits.{item.name}: {value!r}")
    return value
