"""msgspec and the standard library's json give the same verdicts and the same values.

Each decoder is selected in a fresh interpreter by making msgspec unimportable; the two readings
of ``otelsse._core.json`` are also compared directly on generated and hostile texts.
"""

from __future__ import annotations

import functools
import inspect
import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsse._core import json as otelsse_json
from tests._fixtures import EXPECTED, FIXTURES
from tests._tiers import examples

_PROGRAM = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # makes ``import name`` raise ImportError
from pathlib import Path
from otelsse import StreamMonitor
from otelsse._core.json import JSON_DECODER
outcomes = {{}}
for path in sorted(Path(sys.argv[1]).glob("*/*.sse")):
    monitor = StreamMonitor("auto")
    monitor.feed(path.read_bytes())
    report = monitor.close()
    outcomes[path.parent.name + "/" + path.name] = [report.outcome.value, report.stop_reason]
print(json.dumps({{"decoder": JSON_DECODER, "outcomes": outcomes}}))
"""


def _classify_with(blocked: tuple[str, ...]) -> dict[str, object]:
    program = _PROGRAM.format(blocked=blocked)
    output = subprocess.check_output([sys.executable, "-c", program, str(FIXTURES)], text=True)
    result: dict[str, object] = json.loads(output)
    return result


@pytest.mark.parametrize(
    ("blocked", "decoder"),
    [((), "msgspec"), (("msgspec",), "json")],
)
def test_every_decoder_gives_the_same_outcomes(blocked: tuple[str, ...], decoder: str) -> None:
    reference = _classify_with(())
    result = _classify_with(blocked)
    assert result["decoder"] == decoder
    assert result["outcomes"] == reference["outcomes"]
    outcomes = result["outcomes"]
    assert isinstance(outcomes, dict)
    for name, expected in EXPECTED.items():
        assert outcomes[name] == [expected.outcome, expected.stop_reason], name
    assert outcomes["edge/chat-tool-arguments-two-values.sse"][0] == "payload_error"
    assert outcomes["edge/chat-invalid-json-event.sse"][0] == "payload_error"


def _reading(decode: object, text: str) -> tuple[str, object]:
    assert callable(decode)
    try:
        return "value", decode(text)
    except otelsse_json.JSONDecodeError:
        return "refused", None


def _assert_same_reading(text: str) -> tuple[str, object]:
    fast = _reading(otelsse_json._loads_msgspec, text)
    stdlib = _reading(otelsse_json._loads_stdlib, text)
    assert fast == stdlib
    # Same type too: 1 == 1.0 == True would hide an int released as a float.
    assert repr(fast) == repr(stdlib)
    return fast


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123456789012345678901234567890", ("value", 123456789012345678901234567890)),
        ("-9223372036854775809", ("value", -9223372036854775809)),
        ('"\\ud800"', ("value", "\ud800")),  # an escaped lone surrogate: the grammar allows it
        ('"\ud800"', ("value", "\ud800")),  # a raw one, as joined argument fragments can hold
        ("NaN", ("refused", None)),
        ("-Infinity", ("refused", None)),
        ("1e400", ("refused", None)),
        ("9" * 5000, ("refused", None)),  # past Python's integer conversion limit
        ("[" * 256 + "]" * 256, ("value", _nested(256))),
        ("[" * 257 + "]" * 257, ("refused", None)),
        ('{"a":' * 300 + "1" + "}" * 300, ("refused", None)),
        ("[" * 100_000 + "]" * 100_000, ("refused", None)),
        ('{"a": 1} {"b": 2}', ("refused", None)),
        ('{"a": 1, "a": 2}', ("value", {"a": 2})),
        ("\ufeff{}", ("refused", None)),
        ("[DONE]", ("refused", None)),
    ],
)
def test_hostile_texts_read_the_same_with_every_decoder(
    text: str, expected: tuple[str, object]
) -> None:
    assert _assert_same_reading(text) == expected


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(_VALUES, st.data())
def test_generated_and_mutated_texts_read_the_same(value: object, data: st.DataObject) -> None:
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    assert _assert_same_reading(text)[0] == "value"
    # A mutation: cut, splice or insert, so refusals are compared too.
    position = data.draw(st.integers(min_value=0, max_value=len(text)))
    insert = data.draw(
        st.sampled_from(["", "]", "}", ",", "NaN", "\\ud800", "1e999", "\x00", " ", '"'])
    )
    mutated = text[:position] + insert + text[position + data.draw(st.integers(0, 3)) :]
    _assert_same_reading(mutated)


def _from_depth(frames: int, call: Callable[[], object]) -> object:
    """``call()`` from a caller ``frames`` frames deeper than this one."""
    return call() if frames <= 0 else _from_depth(frames - 1, call)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 250 + "]" * 250,
        '{"a": ' * 200 + '"x]" ' + "}" * 200,  # a bracket inside a string is not nesting
        "[" * 256 + "]" * 256,
        "[" * 257 + "]" * 257,
        '[1, 2] ["trailing"]',
        "[" * 250 + "]" * 250 + " []",
    ],
)
def test_a_reading_does_not_depend_on_how_deep_the_caller_is(text: str) -> None:
    """Python bounds recursion by the frames in use, the caller's included: from a caller a few
    frames short of the limit, every decoder reads each text as a shallow caller does, and a
    refused text is told trailing data or not alike."""
    shallow = _assert_same_reading(text)
    trailing = otelsse_json.has_trailing_data(text) if shallow[0] == "refused" else None
    room = sys.getrecursionlimit() - len(inspect.stack()) - 30
    for decode in (otelsse_json._loads_msgspec, otelsse_json._loads_stdlib):
        assert _from_depth(room, functools.partial(_reading, decode, text)) == shallow
    if trailing is not None:
        assert _from_depth(room, lambda: otelsse_json.has_trailing_data(text)) is trailing


def test_a_msgspec_refusal_that_is_no_value_error_is_read_as_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """msgspec before 0.21 raised errors that are not ``ValueError`` (its ``MsgspecError``
    base): they must stay refusals, read again by the strict reading, never escape (a stream
    would end ``internal_error``). The same for a route's typed reading."""
    import msgspec

    class OldDecodeError(msgspec.MsgspecError):  # as msgspec < 0.21 had it: no ValueError
        pass

    def old_decode(text: str) -> object:
        raise OldDecodeError("refused")

    assert not issubclass(OldDecodeError, ValueError)
    monkeypatch.setattr(otelsse_json, "_msgspec_decode", old_decode)
    assert otelsse_json.loads('{"a": [1, "\\u00e9"]}') == {"a": [1, "é"]}
    with pytest.raises(otelsse_json.JSONDecodeError):
        otelsse_json.loads('{"a": ')

    class Shape(otelsse_json.TypedShape):
        a: int

    monkeypatch.setattr(
        msgspec.json, "Decoder", lambda shape: type("D", (), {"decode": old_decode})
    )
    read = otelsse_json.typed_decoder(Shape)
    assert read is not None
    assert read('{"a": 1}') is None
