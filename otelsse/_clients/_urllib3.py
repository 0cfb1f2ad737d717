"""urllib3's ``HTTPResponse`` as requests and botocore hand it out: the tap of its reads, and a
URL given as text as the watch needs it. Both client modules install the same tap in the
response's ``raw``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ._base import Observer
from ._tee import Tapped, proxy, tee

__all__ = ["RawTap", "TextURL", "tap_raw"]


class RawTap(Tapped):
    """``response.raw`` as before, but every body read also goes to the observer.

    Each way urllib3's ``HTTPResponse`` hands out body bytes hands the observer exactly what it
    returned, and no byte twice: the reads (``read``, ``read1``, ``stream``, ``read_chunked``)
    call the wrapped response; urllib3's methods built on them (``readinto``, ``data``,
    ``json``, iteration) run urllib3's own code with the tap as ``self``, so that they read
    through it; ``io``'s line methods (``readline``, ``readlines``, ``next()``), C code that
    would read the wrapped response directly, call it and pass on what it returned.
    """

    def __init__(self, raw: Any, observer: Observer, content_encoding: str | None) -> None:
        super().__init__(raw, observer)
        # Until the application first reads the coded bytes themselves.
        self._self_coded: str | None = content_encoding

    def _self_feed(self, data: bytes, decode_content: bool | None) -> None:
        coded = self._self_coded
        if coded:  # else nothing to decide: every read of an uncoded body is the same
            if decode_content is None:
                decode_content = self.__wrapped__.decode_content
            if not decode_content:
                # The application reads the coded bytes; the monitor needs them decoded.
                self._self_observer.decode_as(coded)
                self._self_coded = None
        self._self_observer.feed(data)

    def _self_call(self, read: Callable[..., Any], *args: Any) -> Any:
        """One read of the wrapped response; the observer hears how it failed."""
        try:
            return read(*args)
        except BaseException as exc:
            self._self_observer.fail(exc)
            raise

    def _self_took(self, data: bytes, decode_content: bool | None, at_end: bool) -> None:
        self._self_feed(data, decode_content)
        if at_end:
            self._self_observer.finish()

    def read(
        self,
        amt: int | None = None,
        decode_content: bool | None = None,
        cache_content: bool = False,
    ) -> bytes:
        data: bytes = self._self_call(self.__wrapped__.read, amt, decode_content, cache_content)
        # Without a size (or with a negative one) it reads to the end; a zero-size read returns
        # nothing and is not the end.
        self._self_took(data, decode_content, amt is None or amt < 0 or (amt > 0 and not data))
        return data

    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        # read1() returns what has arrived, never more than one read's worth.
        data: bytes = self._self_call(self.__wrapped__.read1, amt, decode_content)
        self._self_took(data, decode_content, not data and amt != 0)
        return data

    def readinto(self, b: Any) -> int:
        return type(self.__wrapped__).readinto(self, b)  # type: ignore[no-any-return]

    @property
    def data(self) -> bytes | None:
        return type(self.__wrapped__).data.fget(self)  # type: ignore[no-any-return]

    def json(self) -> Any:
        return type(self.__wrapped__).json(self)

    def readline(self, size: int | None = -1) -> bytes:
        line: bytes = self._self_call(self.__wrapped__.readline, size)
        # io's readline stops at a line end, at ``size``, or at the end of the body.
        at_end = not line.endswith(b"\n") and (size is None or size < 0 or len(line) < size)
        self._self_took(line, None, at_end)
        return line

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        # io's readlines gathers the lines urllib3's iteration yields: decoded.
        lines: list[bytes] = self._self_call(self.__wrapped__.readlines, hint)
        for line in lines:
            self._self_feed(line, True)
        if hint is None or hint <= 0 or not lines:
            self._self_observer.finish()
        return lines

    def __next__(self) -> bytes:
        # io's: the next readline(), until it returns nothing.
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __iter__(self) -> Iterator[bytes]:
        return type(self.__wrapped__).__iter__(self)  # type: ignore[no-any-return]

    def _self_iterate(
        self, chunks: Iterator[bytes], decode_content: bool | None
    ) -> Iterator[bytes]:
        feed = partial(self._self_feed, decode_content=decode_content)
        return tee(chunks, self._self_observer, feed)

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        return self._self_iterate(self.__wrapped__.stream(amt, decode_content), decode_content)

    def read_chunked(
        self, amt: int | None = None, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        return self._self_iterate(
            self.__wrapped__.read_chunked(amt, decode_content), decode_content
        )

    def __enter__(self) -> RawTap:
        # The proxy's own __enter__ would hand out the unwrapped response, bypassing the tap.
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_observer.finish("cancelled")

    def release_conn(self) -> None:
        try:
            self.__wrapped__.release_conn()
        finally:
            self._self_observer.finish("cancelled")


class TextURL:
    """A URL given as text, as the watch needs it (like httpx's ``URL``: host, port, scheme)."""

    __slots__ = ("_text", "parts")

    def __init__(self, text: str) -> None:
        self._text = text
        self.parts = urlsplit(text)

    @property
    def host(self) -> str:
        return self.parts.hostname or ""

    @property
    def port(self) -> int | None:
        return self.parts.port

    @property
    def scheme(self) -> str:
        return self.parts.scheme

    def __str__(self) -> str:
        return self._text


def tap_raw(response: Any, observer: Observer) -> RawTap:
    """Install the tap in ``response.raw`` (a requests ``Response``, a botocore ``AWSResponse``)
    and return it."""
    coding = response.headers.get("content-encoding")
    response.raw = tapped = proxy(RawTap)(response.raw, observer, coding)
    return tapped
