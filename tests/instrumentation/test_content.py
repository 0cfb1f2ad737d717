"""Content-decoding of tapped bytes: every coding undone in pieces, as the tap sees them."""

from __future__ import annotations

import gzip
import zlib

import pytest

from otelsse.instrumentation._content import UnsupportedEncoding, content_decoder

BODY = b"data: " + b"x" * 5000 + b"\n\n"


def decode_in_pieces(encoding: str, coded: bytes, piece: int = 7) -> bytes:
    decode = content_decoder(encoding)
    assert decode is not None
    return b"".join(decode(coded[i : i + piece]) for i in range(0, len(coded), piece))


@pytest.mark.parametrize(
    ("encoding", "coded"),
    [
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", zlib.compress(BODY)[2:-4]),  # raw DEFLATE, as some servers send it
        ("GZIP, identity", gzip.compress(BODY)),
        ("deflate, gzip", gzip.compress(zlib.compress(BODY))),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "with-identity", "two-codings"],
)
def test_content_decoder_undoes_each_coding_in_pieces(encoding: str, coded: bytes) -> None:
    assert decode_in_pieces(encoding, coded) == BODY


@pytest.mark.parametrize("encoding", [None, "", "identity"])
def test_identity_needs_no_decoder(encoding: str | None) -> None:
    assert content_decoder(encoding) is None


def test_an_unknown_coding_is_refused() -> None:
    with pytest.raises(UnsupportedEncoding, match="compress"):
        content_decoder("compress")
