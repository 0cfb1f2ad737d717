"""One reading of JSON for every event and every tool call, whichever decoder is installed.

The same bytes must give the same verdict and the same released values everywhere, so the
semantics are fixed here rather than left to a decoder: RFC 8259 as Python's ``json`` reads it,
strictly.

- Numbers are exact: an integer of any length is an ``int`` (up to Python's 4,300-digit
  conversion limit, beyond which it is refused); ``NaN``, ``Infinity`` and numbers that overflow
  a double are refused (RFC 8259 §6 has no such values).
- An escaped lone surrogate (``"\\ud800"``) is accepted, as the grammar allows (§8.2).
- Nesting deeper than ``MAX_DEPTH`` is refused, so that the verdict does not depend on how much
  of the interpreter's stack the caller had already used.
- Exactly one value: trailing data is refused.

msgspec (the ``fast`` extra) decodes first when installed: on every text it accepts it gives
the values ``json`` gives, and what it refuses is read again by the strict standard decoder
(escaped lone surrogates are the only texts it refuses that the grammar allows). orjson is never
used: it turns integers beyond 64 bits into floats.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["JSON_DECODER", "MAX_DEPTH", "JSONDecodeError", "has_trailing_data", "loads"]

#: Deepest nesting of arrays and objects accepted.
MAX_DEPTH = 256
#: What ``loads`` raises on a text it refuses.
JSONDecodeError: tuple[type[Exception], ...] = (ValueError, RecursionError)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


_strict_decoder = json.JSONDecoder(parse_float=_finite_float, parse_constant=_refuse_constant)
_strict_decode: Callable[[str], Any] = _strict_decoder.decode


def has_trailing_data(text: str) -> bool:
    """Whether a text ``loads`` refused starts with one complete JSON value and holds more after
    it (seed 001's trailing data), rather than not being one value at all. Only called on a
    refused text, so it never runs on the hot path."""
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        _, end = _strict_decoder.raw_decode(text, start)
    except JSONDecodeError:
        return False
    return bool(text[end:].strip(" \t\n\r"))


# A value ``d`` levels deep takes at least ``2 * d`` characters: shorter texts are never walked.
_SHALLOW_TEXT = 2 * MAX_DEPTH


def _check_depth(text: str, value: Any) -> Any:
    """``value``, unless it nests deeper than ``MAX_DEPTH`` (``text`` is longer than
    ``_SHALLOW_TEXT``; it also takes ``d`` brackets, so most texts are not walked either)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return value
    level: list[Any] = [value]
    for _ in range(MAX_DEPTH):
        level = [
            child
            for node in level
            if isinstance(node, (list, dict))
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return value
    if any(isinstance(node, (list, dict)) for node in level):
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _loads_stdlib(text: str) -> Any:
    value = _strict_decode(text)
    return value if len(text) <= _SHALLOW_TEXT else _check_depth(text, value)


loads: Callable[[str], Any]
try:
    import msgspec

    _msgspec_decode = msgspec.json.Decoder().decode

    def _loads_msgspec(text: str) -> Any:
        try:
            value = _msgspec_decode(text)
        except (ValueError, RecursionError):  # msgspec's DecodeError is a ValueError
            # msgspec also refuses a raw lone surrogate in a string (UnicodeEncodeError), which
            # a tool call's joined argument fragments can hold after their own JSON decoding.
            value = _strict_decode(text)  # raises unless the grammar allows it after all
        return value if len(text) <= _SHALLOW_TEXT else _check_depth(text, value)

    loads = _loads_msgspec
    JSON_DECODER = "msgspec"
except ImportError:  # pragma: no cover - depends on what is installed
    loads = _loads_stdlib
    JSON_DECODER = "json"
