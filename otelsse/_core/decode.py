"""UTF-8 decoding for the event stream, with the byte-order mark stripped once at stream start.

Strategy: the framer splits on bytes first and decodes only spans that end at a line end. No UTF-8
multi-byte sequence contains 0x0A or 0x0D, so such a span never cuts a character in two: a
character split across network reads simply stays in the undecoded tail until its line ends. That
gives the result of one persistent incremental decoder without paying for one per read.

Invalid bytes are replaced by U+FFFD, as the WHATWG event-stream interpretation requires
("decoded using the UTF-8 decode algorithm"), and counted so the monitor can report a
``decode_error``.
"""

from __future__ import annotations

__all__ = ["BOM", "REPLACEMENT_BYTES", "Utf8Decoder"]

BOM = b"\xef\xbb\xbf"
#: U+FFFD in UTF-8: already in the input, it is no decoding error.
REPLACEMENT_BYTES = "\ufffd".encode()


class Utf8Decoder:
    """Strips one leading BOM and decodes line-aligned spans, counting invalid sequences.

    ``strip_bom()`` is fed every read until the first three bytes of the stream are known;
    spans that end at a line end are decoded strictly by the framer, and only the ones that fail
    come to ``decode_invalid()``.
    """

    __slots__ = ("_held", "invalid_count")

    def __init__(self) -> None:
        # Bytes held back at stream start while they are still a prefix of the BOM;
        # None once the start of the stream has been decided.
        self._held: bytes | None = b""
        # Number of invalid byte sequences replaced by U+FFFD so far.
        self.invalid_count = 0

    @property
    def at_start(self) -> bool:
        """True while the leading BOM question is still open."""
        return self._held is not None

    @property
    def held(self) -> bytes:
        """Bytes held back as a possible BOM prefix (at most two)."""
        return self._held or b""

    def strip_bom(self, data: bytes) -> bytes:
        """Return ``data`` without the stream's leading BOM; ``b""`` while still undecided."""
        assert self._held is not None
        data = self._held + data
        if len(data) < len(BOM) and BOM.startswith(data):
            self._held = data
            return b""
        self._held = None
        return data[len(BOM) :] if data.startswith(BOM) else data

    def decode_invalid(self, span: bytes) -> str:
        """Decode a line-aligned span that strict decoding rejected; count what was replaced.

        Strict ``bytes.decode`` is tried first by the caller: valid UTF-8 is the fast path.
        """
        text = span.decode("utf-8", "replace")
        # Replacement characters that were already valid U+FFFD in the input are not errors.
        self.invalid_count += text.count("\ufffd") - span.count(REPLACEMENT_BYTES)
        return text

    def measure(self, span: bytes) -> int:
        """Characters that ``span`` would decode to, without counting it as decoded."""
        return len(span.decode("utf-8", "replace"))
