"""Content-decoding for bytes tapped below the client's own decoder.

httpx/httpx2 hand the tap the body as it came off the wire, and so does urllib3 when the
application reads ``raw`` without ``decode_content``; the monitor must see what the application
would see after decoding. The tap decodes only what the application has already pulled, so no
byte is read ahead. Codecs follow the clients: gzip and deflate always, brotli and zstd when
their packages are installed (as httpx does).

A few coded bytes can stand for gigabytes, so a decoder never makes a read's output whole: it
hands it to its sink in pieces of at most about ``piece`` bytes, as the codec makes them, and the
sink stops it at once by raising. Each write's input is consumed before it returns, so nothing
is held between writes but the codec's own window (zstd's capped at 8 MiB, as HTTP allows).
"""

from __future__ import annotations

import importlib
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = [
    "ContentDecoder",
    "CorruptContent",
    "Sink",
    "UnsupportedEncoding",
    "content_decoder",
]

#: Where a decoder hands its output; whatever it raises stops the decoder and reaches its caller.
Sink = Callable[[bytes], None]


class UnsupportedEncoding(Exception):
    """A ``Content-Encoding`` otelsse cannot decode; the stream is then not parsed."""


class CorruptContent(Exception):
    """The body is not valid in its ``Content-Encoding``: the peer's fault, as the client's own
    decoder would also find."""


class ContentDecoder(ABC):
    """One content-coding of one body, undone incrementally, its output bounded per piece."""

    def __init__(self, sink: Sink, piece: int) -> None:
        self._sink = sink
        self._piece = piece

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Decode the next coded bytes, handing what they decode to the sink in pieces.

        Raises:
            CorruptContent: the bytes are not valid in this coding.
        """


class _Stepped(ContentDecoder):
    """A codec that makes at most a piece per step: stepped until its input is consumed."""

    def __init__(self, sink: Sink, piece: int, errors: tuple[type[Exception], ...]) -> None:
        super().__init__(sink, piece)
        self._errors = errors

    def write(self, data: bytes) -> None:
        while True:
            try:
                out = self._step(data)
            except self._errors as exc:
                raise CorruptContent(type(exc).__name__) from exc
            if out:
                self._sink(out)
            # A step that filled its piece may have more to give from the input it has taken.
            if len(out) < self._piece and not self._pending():
                return
            data = b""

    @abstractmethod
    def _step(self, data: bytes) -> bytes:
        """Take ``data`` (empty: go on with what is pending); return at most about a piece."""

    @abstractmethod
    def _pending(self) -> bool:
        """Input taken and not consumed yet."""


class _Zlib(_Stepped):
    def __init__(self, sink: Sink, piece: int, wbits: int) -> None:
        super().__init__(sink, piece, (zlib.error,))
        self._obj = zlib.decompressobj(wbits)

    def _step(self, data: bytes) -> bytes:
        obj = self._obj
        if obj.eof:  # what follows the end is ignored, as the clients do; it is not kept
            return b""
        return obj.decompress(data or obj.unconsumed_tail, self._piece)

    def _pending(self) -> bool:
        return not self._obj.eof and bool(self._obj.unconsumed_tail)


def _gzip(sink: Sink, piece: int) -> ContentDecoder:
    return _Zlib(sink, piece, zlib.MAX_WBITS | 16)


class _Deflate(_Zlib):
    """``deflate`` as servers really send it: zlib-wrapped (RFC 1950), or raw DEFLATE; the first
    two bytes tell which, as they tell zlib itself whether its header is valid."""

    def __init__(self, sink: Sink, piece: int) -> None:
        super().__init__(sink, piece, zlib.MAX_WBITS)
        self._head: bytes | None = b""  # what comes before the second byte, which decides

    def _step(self, data: bytes) -> bytes:
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            self._head = None
            if not _zlib_header(data[0], data[1]):
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        return super()._step(data)


def _zlib_header(cmf: int, flg: int) -> bool:
    # Method 8 (deflate), a window of at most 32 KiB, the check bits, and no preset dictionary
    # (HTTP has none to give).
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0 and not flg & 0x20


def _optional(*modules: str) -> Any:
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


class _Brotli(_Stepped):
    def __init__(self, sink: Sink, piece: int) -> None:
        module = _optional("brotli", "brotlicffi")
        if module is None:
            raise UnsupportedEncoding("br")
        super().__init__(sink, piece, (module.error,))
        self._obj = module.Decompressor()
        if not hasattr(self._obj, "can_accept_more_data"):
            # Older releases decode a whole read at once, however large it grows.
            raise UnsupportedEncoding("br (brotli >= 1.2 bounds its output)")

    def _step(self, data: bytes) -> bytes:
        return self._obj.process(data, output_buffer_limit=self._piece)  # type: ignore[no-any-return]

    def _pending(self) -> bool:
        return not self._obj.can_accept_more_data()


#: RFC 9659: zstd as an HTTP content coding uses a window of at most 8 MiB.
ZSTD_MAX_WINDOW = 8 * 1024 * 1024


class _Zstd(ContentDecoder):
    """zstandard's writer runs the codec's loop in C and hands each piece to the sink itself."""

    def __init__(self, sink: Sink, piece: int) -> None:
        super().__init__(sink, piece)
        module = _optional("zstandard")
        if module is None:
            raise UnsupportedEncoding("zstd")
        self._errors: tuple[type[Exception], ...] = (module.ZstdError,)
        decompressor = module.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._writer = decompressor.stream_writer(_Writer(sink), write_size=piece, closefd=False)

    def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
        except self._errors as exc:
            raise CorruptContent(type(exc).__name__) from exc


class _Writer:
    """A sink as the file object zstandard's writer writes to."""

    __slots__ = ("write_to",)

    def __init__(self, sink: Sink) -> None:
        self.write_to = sink

    def write(self, data: bytes) -> int:
        self.write_to(data)
        return len(data)


_CODECS: dict[str, Callable[[Sink, int], ContentDecoder]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _Deflate,
    "br": _Brotli,
    "zstd": _Zstd,
}


def content_decoder(content_encoding: str | None, sink: Sink, piece: int) -> ContentDecoder | None:
    """A decoder for a ``Content-Encoding`` header value that hands ``sink`` the decoded body in
    pieces of about ``piece`` bytes at most; None for an identity body.

    Raises:
        UnsupportedEncoding: a coding neither otelsse nor an installed package can decode.
    """
    if not content_encoding:
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    decoder: ContentDecoder | None = None
    # The first coding listed was applied first, so it is undone last: nearest the sink.
    for coding in codings:
        if not coding or coding == "identity":
            continue
        make = _CODECS.get(coding)
        if make is None:
            raise UnsupportedEncoding(coding)
        decoder = make(sink, piece)
        sink = decoder.write
    return decoder
