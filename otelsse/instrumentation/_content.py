"""Content-decoding for bytes tapped below the client's own decoder.

httpx/httpx2 hand the tap the body as it came off the wire, and so does urllib3 when the
application reads ``raw`` without ``decode_content``; the monitor must see what the application
would see after decoding. The tap decodes only what the application has already pulled, so no
byte is read ahead. Codecs follow the clients: gzip and deflate always, brotli and zstd when
their packages are installed (as httpx does).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["ContentDecoder", "UnsupportedEncoding", "content_decoder"]

ContentDecoder = Callable[[bytes], bytes]


class UnsupportedEncoding(Exception):
    """A ``Content-Encoding`` otelsse cannot decode; the stream is then not parsed."""


class _Deflate:
    """``deflate`` as servers really send it: zlib-wrapped, or raw DEFLATE (like httpx)."""

    def __init__(self) -> None:
        self._first = True
        self._decompressor = zlib.decompressobj()

    def __call__(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            try:
                return self._decompressor.decompress(data)
            except zlib.error:
                self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._decompressor.decompress(data)


def _gzip() -> ContentDecoder:
    return zlib.decompressobj(zlib.MAX_WBITS | 16).decompress


def _optional(*modules: str) -> Any:
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _brotli() -> ContentDecoder:
    module = _optional("brotli", "brotlicffi")
    if module is None:
        raise UnsupportedEncoding("br")
    decompressor = module.Decompressor()
    # brotli names it process(); brotlicffi decompress()
    step = getattr(decompressor, "process", None) or decompressor.decompress
    return step  # type: ignore[no-any-return]


def _zstd() -> ContentDecoder:
    module = _optional("zstandard")
    if module is None:
        raise UnsupportedEncoding("zstd")
    return module.ZstdDecompressor().decompressobj().decompress  # type: ignore[no-any-return]


_CODECS: dict[str, Callable[[], ContentDecoder]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _Deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def content_decoder(content_encoding: str | None) -> ContentDecoder | None:
    """A decoder for a ``Content-Encoding`` header value; None for an identity body.

    Raises:
        UnsupportedEncoding: a coding neither otelsse nor an installed package can decode.
    """
    if not content_encoding:
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    steps: list[ContentDecoder] = []
    for coding in reversed(codings):  # the last coding applied is undone first
        make = _CODECS.get(coding)
        if make is None:
            raise UnsupportedEncoding(coding)
        steps.append(make())
    if len(steps) == 1:
        return steps[0]

    def decode_all(data: bytes) -> bytes:
        for step in steps:
            data = step(data)
        return data

    return decode_all
