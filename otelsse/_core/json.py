"""One reading of JSON for every event and every tool call, whichever decoder is installed.

The same bytes must give the same verdict and the same released values everywhere, so the
semantics are fixed here rather than left to a decoder: RFC 8259 as Python's ``json`` reads it,
strictly.

- Numbers are exact: an integer of any length is an ``int`` (up to Python's 4,300-digit
  conversion limit, beyond which it is refused); ``NaN``, ``Infinity`` and numbers that overflow
  a double are refused (RFC 8259 §6 has no such values).
- An escaped lone surrogate (``"\\ud800"``) is accepted, as the grammar allows (§8.2).
- Nesting deeper than ``MAX_DEPTH`` is refused, and a text within it that the caller's stack is
  too deep for is read again on a fresh stack: the verdict never depends on how much of the
  interpreter's stack the caller had already used.
- Exactly one value: trailing data is refused.

msgspec (the ``fast`` extra) decodes first when installed: on every text it accepts it gives
the values ``json`` gives, and what it refuses is read again by the strict standard decoder
(escaped lone surrogates are the only texts it refuses that the grammar allows). orjson is never
used: it turns integers beyond 64 bits into floats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .stack import on_fresh_stack

__all__ = [
    "JSON_DECODER", "MAX_DEPTH", "JSONDecodeError", "TypedShape", "has_trailing_data", "loads",
    "nests_deeper", "typed_decoder", "typed_decoding",
]  # fmt: skip

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


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def _nesting(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, counted without recursion (brackets inside
    strings do not count). Only for texts a recursive decoder could not finish."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _on_any_stack(read: Callable[[], Any], text: str) -> Any:
    """``read()`` of ``text``, which raised ``RecursionError`` on the caller's stack: refused if
    ``text`` nests deeper than ``MAX_DEPTH``, else read again on a fresh stack."""
    if _nesting(text) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return on_fresh_stack(read)


def _strict_decode_any_stack(text: str) -> Any:
    try:
        return _strict_decode(text)
    except RecursionError:
        return _on_any_stack(lambda: _strict_decode(text), text)


def has_trailing_data(text: str) -> bool:
    """Whether a text ``loads`` refused starts with one complete JSON value and holds more after
    it (trailing data), rather than not being one value at all. Only called on a
    refused text, so it never runs on the hot path."""
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        try:
            _, end = _strict_decoder.raw_decode(text, start)
        except RecursionError:
            _, end = _on_any_stack(lambda: _strict_decoder.raw_decode(text, start), text)
    except JSONDecodeError:
        return False
    return bool(text[end:].strip(" \t\n\r"))


# A value ``d`` levels deep takes at least ``2 * d`` characters: shorter texts are never walked.
_SHALLOW_TEXT = 2 * MAX_DEPTH


def _check_depth(text: str, value: Any) -> Any:
    """``value``, unless it nests deeper than ``MAX_DEPTH`` (``text`` is longer than
    ``_SHALLOW_TEXT``; it also takes ``d`` brackets, so most texts are not walked either)."""
    if text.count("[") + text.count("{") > MAX_DEPTH and nests_deeper(value, MAX_DEPTH):
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def nests_deeper(value: Any, depth: int) -> bool:
    """Whether ``value`` has objects or arrays nested more than ``depth`` levels (walked level
    by level, without recursion)."""
    level: list[Any] = [value]
    for _ in range(depth):
        level = [
            child
            for node in level
            if isinstance(node, (list, dict))
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, (list, dict)) for node in level)


def _loads_stdlib(text: str) -> Any:
    value = _strict_decode_any_stack(text)
    return value if len(text) <= _SHALLOW_TEXT else _check_depth(text, value)


loads: Callable[[str], Any]
try:
    import msgspec

    _msgspec_decode = msgspec.json.Decoder().decode
    #: What msgspec raises for a text it does not take: its own errors (a ``ValueError`` only
    #: from msgspec 0.21 on), a ``UnicodeEncodeError`` for a raw lone surrogate.
    _MSGSPEC_REFUSALS = (ValueError, msgspec.MsgspecError)

    def _loads_msgspec(text: str) -> Any:
        try:
            value = _msgspec_decode(text)
        except (*_MSGSPEC_REFUSALS, RecursionError):
            # msgspec also refuses a raw lone surrogate in a string (UnicodeEncodeError), which
            # a tool call's joined argument fragments can hold after their own JSON decoding.
            value = _strict_decode_any_stack(text)  # raises unless the grammar allows it
        return value if len(text) <= _SHALLOW_TEXT else _check_depth(text, value)

    loads = _loads_msgspec
    JSON_DECODER = "msgspec"
except ImportError:  # pragma: no cover - depends on what is installed
    loads = _loads_stdlib
    JSON_DECODER = "json"


# -- typed reading of a route's hot events ---------------------------------------------------

#: Whether a route starting a stream reads its hot events through its ``typed_decoder`` (when
#: msgspec is installed). Tests and benchmarks turn it off to run the generic reading alone.
typed_decoding = True

_Shape = TypeVar("_Shape")

if TYPE_CHECKING:
    from msgspec import Struct as TypedShape
else:
    try:
        from msgspec import Struct
    except ImportError:  # pragma: no cover - depends on what is installed

        class TypedShape:
            """Without msgspec a shape is a plain class: no decoder is made for it."""

            def __init_subclass__(cls, **options: Any) -> None:
                super().__init_subclass__()

    else:

        class TypedShape(Struct, forbid_unknown_fields=True, gc=False):
            """Base of the shapes ``typed_decoder`` reads: an unknown key is not that shape.
            (Decoded values hold no cycles, so the garbage collector need not track them.)"""


def typed_decoder(shape: type[_Shape]) -> Callable[[str], _Shape | None] | None:
    """A reader of the texts that are exactly ``shape`` (a ``TypedShape``); None without msgspec.

    The reader answers None for every text it does not take (not JSON, an unknown key, a value
    of another type, a lone surrogate): the caller then reads the text with ``loads``, which
    stays the definition. What it takes, ``loads`` takes too, with the same values, because
    ``shape`` is checked here to hold no float and no value of any type: msgspec then reads
    every value in full, so a float that overflows or an integer past 4,300 digits is refused
    anywhere in the text as ``loads`` refuses it, and nothing nests deeper than the shape.
    (A repeated key: the last one wins in both.)
    """
    try:
        import msgspec
        from msgspec import inspect
    except ImportError:  # pragma: no cover - depends on what is installed
        return None
    if not _read_in_full(inspect.type_info(shape), set()):
        raise TypeError(f"{shape.__name__} allows a value msgspec would not read in full")
    decode = msgspec.json.Decoder(shape).decode

    def read(text: str) -> _Shape | None:
        try:
            return decode(text)
        except (ValueError, msgspec.MsgspecError):  # as _MSGSPEC_REFUSALS says
            return None

    return read


def _read_in_full(info: Any, seen: set[type]) -> bool:
    """Whether msgspec validates every value of this type (``msgspec.inspect``) in full."""
    from msgspec import inspect

    if isinstance(info, inspect.StructType):
        if info.cls in seen:
            return True
        seen.add(info.cls)
        return info.forbid_unknown_fields and all(
            _read_in_full(field.type, seen) for field in info.fields
        )
    if isinstance(info, inspect.UnionType):
        return all(_read_in_full(member, seen) for member in info.types)
    if isinstance(info, inspect.ListType):
        return _read_in_full(info.item_type, seen)
    if isinstance(info, inspect.DictType):
        return isinstance(info.key_type, inspect.StrType) and _read_in_full(info.value_type, seen)
    return isinstance(info, (inspect.NoneType, inspect.BoolType, inspect.IntType, inspect.StrType))
