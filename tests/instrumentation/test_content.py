"""Content-decoding of tapped bytes: every coding undone in pieces, as the tap sees them, its
output handed on in bounded pieces however well the body compresses, stopped by its sink at
once, and a corrupt body told apart from otelsse's own failures."""

from __future__ import annotations

import functools
import gzip
import tracemalloc
import zlib
from collections.abc import Callable

import brotli
import pytest
import zstandard

from otelsse._observe._content import (
    ZSTD_MAX_WINDOW,
    ContentDecoder,
    CorruptContent,
    UnsupportedEncoding,
    content_decoder,
)

BODY = b"data: " + b"x" * 5000 + b"\n\n"


def _deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


#: Each codec, as a server would code a body with it.
CODECS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate-raw": _deflate_raw,
    "br": brotli.compress,
    "zstd": _zstd,
}


def encoding(codec: str) -> str:
    return codec.removesuffix("-raw")


def write_in_pieces(decoder: ContentDecoder, coded: bytes, piece: int) -> None:
    for i in range(0, len(coded), piece):
        decoder.write(coded[i : i + piece])


def decode_in_pieces(encoding: str, coded: bytes, piece: int = 7, out: int = 64) -> list[bytes]:
    """What a decoder with pieces of ``out`` bytes makes of ``coded`` written ``piece`` bytes at
    a time."""
    pieces: list[bytes] = []
    decoder = content_decoder(encoding, pieces.append, out)
    assert decoder is not None
    write_in_pieces(decoder, coded, piece)
    return pieces


@pytest.mark.parametrize(
    ("encoding", "coded"),
    [
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", _deflate_raw(BODY)),  # as some servers send it
        ("br", brotli.compress(BODY)),
        ("zstd", _zstd(BODY)),
        ("zstd", _zstd(BODY[:100]) + _zstd(BODY[100:])),  # two frames
        ("GZIP, identity", gzip.compress(BODY)),
        ("deflate, gzip", gzip.compress(zlib.compress(BODY))),
        ("zstd, br", brotli.compress(_zstd(BODY))),
    ],
    ids=[
        "gzip", "x-gzip", "deflate-zlib", "deflate-raw", "br", "zstd", "zstd-frames",
        "with-identity", "two-codings", "zstd-then-br",
    ],
)  # fmt: skip
@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_content_decoder_undoes_each_coding_in_pieces(
    encoding: str, coded: bytes, piece: int
) -> None:
    assert b"".join(decode_in_pieces(encoding, coded, piece)) == BODY


@pytest.mark.parametrize("encoding", [None, "", "identity"])
def test_identity_needs_no_decoder(encoding: str | None) -> None:
    assert content_decoder(encoding, print, 64) is None


def test_an_unknown_coding_is_refused() -> None:
    with pytest.raises(UnsupportedEncoding, match="compress"):
        content_decoder("compress", print, 64)


#: 64 MiB of one byte: a few KiB coded (a few hundred bytes in brotli).
BOMB = b"\0" * (64 * 1024 * 1024)
#: brotli's binding fills whole blocks of its output buffer (32 KiB, then 64 KiB...) before it
#: looks at the limit: its pieces end up to one block past it.
PIECE = 64 * 1024
MAX_PIECE = 2 * PIECE


@functools.cache
def bomb(codec: str) -> bytes:
    # brotli's best quality takes seconds over 64 MiB; a quick one is as much of a bomb.
    return brotli.compress(BOMB, quality=1) if codec == "br" else CODECS[codec](BOMB)


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_decoder_hands_a_bomb_on_in_bounded_pieces(codec: str) -> None:
    coded = bomb(codec)
    sizes: list[int] = []
    decoder = content_decoder(encoding(codec), lambda piece: sizes.append(len(piece)), PIECE)
    assert decoder is not None
    tracemalloc.start()
    try:
        write_in_pieces(decoder, coded, 8192)  # reads as a client makes them
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(sizes) == len(BOMB)
    assert max(sizes) <= MAX_PIECE
    assert peak < 4 * MAX_PIECE


class Enough(Exception):
    """What a test's sink raises after its first piece."""


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_sink_that_raises_stops_the_decoder_at_once(codec: str) -> None:
    coded = bomb(codec)
    got: list[int] = []

    def sink(piece: bytes) -> None:
        got.append(len(piece))
        raise Enough

    decoder = content_decoder(encoding(codec), sink, PIECE)
    assert decoder is not None
    with pytest.raises(Enough):
        decoder.write(coded)  # the whole bomb in one write
    assert len(got) == 1


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_corrupt_body_is_corrupt_content(codec: str) -> None:
    coded = CODECS[codec](BODY)
    corrupt = coded[:8] + bytes(b ^ 0x5A for b in coded[8:40]) + coded[40:]
    decoder = content_decoder(encoding(codec), lambda piece: None, PIECE)
    assert decoder is not None
    with pytest.raises(CorruptContent):
        write_in_pieces(decoder, corrupt, 7)


def test_a_zstd_window_larger_than_http_allows_is_corrupt_content() -> None:
    window_log = ZSTD_MAX_WINDOW.bit_length()  # twice the largest window allowed
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log)
    coded = zstandard.ZstdCompressor(compression_params=params).compress(
        bytes(range(256)) * (2 * ZSTD_MAX_WINDOW // 256)
    )
    decoder = content_decoder("zstd", lambda piece: None, PIECE)
    assert decoder is not None
    with pytest.raises(CorruptContent):
        decoder.write(coded)


@pytest.mark.parametrize("codec", ["gzip", "deflate", "deflate-raw"])
def test_what_follows_the_end_of_a_body_is_not_kept(codec: str) -> None:
    got: list[bytes] = []
    decoder = content_decoder(encoding(codec), got.append, PIECE)
    assert decoder is not None
    decoder.write(CODECS[codec](BODY))
    junk = b"\1" * (1024 * 1024)
    tracemalloc.start()
    try:
        for _ in range(64):
            decoder.write(junk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert b"".join(got) == BODY
    assert peak < 1024 * 1024
