"""A tool's JSON Schema validation never crashes its caller: whatever the validator does (recurse
too deep, hit a bug, raise from a user's own keyword), the call gets the tool's schema fault, at
both entry points: ``ToolGate.run`` (the call quarantined, ``tool_schema_error``) and
``read_stream(tools=...)`` (``StreamFault`` ``tool_schema_error``). And the verdict is the same
however deep the caller's own stack already is.

Bodies are wire-exact (``tests/gate/_streams.py``) and built before a test recurses, on the
routes whose arguments arrive as text (Gemini's come as an object inside the event, whose own
nesting the reader bounds first). The "deep caller" is real Python recursion down to a given
stack depth, then the call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import jsonschema
import pytest

from otelsse import GateCall, StreamFault, ToolCallState, ToolGate, read_stream
from otelsse._tools import MAX_SCHEMA_DEPTH
from tests.gate._streams import ANTHROPIC, CHAT, RESPONSES, Stream, build, call

S = ToolCallState
T = TypeVar("T")

#: Routes whose tool arguments arrive as text.
TEXT_ROUTES = (CHAT, RESPONSES, ANTHROPIC)
#: A plain recursive schema: each level may hold the next.
WALK = {"type": "object", "properties": {"next": {"$ref": "#"}}}
#: The same recursion through ``anyOf`` and ``$defs``: more of the validator's frames per level.
BRANCHING = {
    "$ref": "#/$defs/node",
    "$defs": {
        "node": {
            "anyOf": [
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/node"}},
                {"type": "array", "items": {"$ref": "#/$defs/node"}},
                {"type": "string"},
            ]
        }
    },
}
SCHEMAS = {"walk": WALK, "branching": BRANCHING}


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep: ``{"next": {"next": ... {}}}``."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"next": value}
    return value


def stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    return depth


def from_depth(frames: int, function: Callable[[], T]) -> T:
    """``function()``, called with at least ``frames`` Python frames on the stack below it."""
    if stack_depth() >= frames:
        return function()
    return from_depth(frames, function)


def stream_of(route: str, name: str, arguments: dict[str, Any]) -> Stream:
    return build(route, ["Walking. ", call("call_deep", name, arguments, 4)])


def gate_call(
    tools: dict[str, Any], stream: Stream, *, caller_depth: int = 0
) -> tuple[GateCall, list[Any]]:
    """The one call of ``stream`` through ``ToolGate.run``, from a caller ``caller_depth``
    frames deep; and what its executor was given (nothing, unless it ran)."""
    ran: list[Any] = []
    (name,) = tools
    gate = ToolGate(tools)

    def run() -> Any:
        return gate.run([stream.body], stream.route, execute={name: ran.append}, run_id="r")

    result = from_depth(caller_depth, run)
    assert result.fault is None
    (record,) = result.calls
    return record, ran


def reader_verdict(tools: dict[str, Any], stream: Stream, *, caller_depth: int = 0) -> str:
    """``read_stream``'s verdict on ``stream``: ``accepted`` or the fault's code."""

    def read() -> str:
        try:
            read_stream([stream.body], stream.route, tools=tools)
        except StreamFault as fault:
            return fault.code
        return "accepted"

    return from_depth(caller_depth, read)


def assert_schema_fault(record: GateCall, ran: list[Any], keyword: str) -> None:
    assert record.state is S.QUARANTINED, record
    assert record.error_class == "tool_schema_error"
    assert record.schema_status == "invalid"
    assert record.schema_keyword == keyword
    assert record.json_status == "valid"  # the arguments were one JSON object: the schema failed
    assert ran == []


# --------------------------------------------------------------------------------------------
# Deep arguments against a recursive schema, from a shallow and from a deep caller
# --------------------------------------------------------------------------------------------

#: (argument depth, caller stack depth): the findings' own examples and the bound's edge.
DEEP = [(250, 0), (MAX_SCHEMA_DEPTH + 1, 0), (120, 600), (MAX_SCHEMA_DEPTH + 1, 900)]


@pytest.mark.parametrize("route", TEXT_ROUTES)
@pytest.mark.parametrize("schema", list(SCHEMAS))
@pytest.mark.parametrize(("depth", "caller"), DEEP, ids=[f"{d}deep-caller{c}" for d, c in DEEP])
def test_arguments_too_deep_to_validate_fail_the_schema_at_the_gate(
    route: str, schema: str, depth: int, caller: int
) -> None:
    record, ran = gate_call({"walk": SCHEMAS[schema]}, stream_of(route, "walk", nested(depth)),
                            caller_depth=caller)  # fmt: skip
    assert_schema_fault(record, ran, "depth")


@pytest.mark.parametrize("route", TEXT_ROUTES)
@pytest.mark.parametrize("schema", list(SCHEMAS))
@pytest.mark.parametrize(("depth", "caller"), DEEP, ids=[f"{d}deep-caller{c}" for d, c in DEEP])
def test_arguments_too_deep_to_validate_fail_the_schema_at_the_reader(
    route: str, schema: str, depth: int, caller: int
) -> None:
    stream = stream_of(route, "walk", nested(depth))
    assert reader_verdict({"walk": SCHEMAS[schema]}, stream, caller_depth=caller) == (
        "tool_schema_error"
    )


#: Caller stack depths, from a test's own to one that leaves the validator too little room for
#: arguments at the bound (validating them takes several frames per level).
CALLERS = [0, 600, 900]


@pytest.mark.parametrize("route", TEXT_ROUTES)
@pytest.mark.parametrize("schema", list(SCHEMAS))
def test_the_verdict_on_deep_valid_arguments_does_not_depend_on_the_callers_stack(
    route: str, schema: str
) -> None:
    tools = {"walk": SCHEMAS[schema]}
    arguments = nested(MAX_SCHEMA_DEPTH)
    stream = stream_of(route, "walk", arguments)
    for caller in CALLERS:
        record, ran = gate_call(tools, stream, caller_depth=caller)
        assert (record.state, record.schema_status) == (S.EXECUTED, "valid"), (caller, record)
        assert ran == [arguments]
        assert reader_verdict(tools, stream, caller_depth=caller) == "accepted", caller
    # And arguments that break the schema deep down fail it from every depth, by its keyword.
    broken = nested(MAX_SCHEMA_DEPTH - 1)
    leaf = broken
    while leaf:
        leaf = leaf["next"]
    leaf["next"] = 7
    stream = stream_of(route, "walk", broken)
    keyword = "type" if schema == "walk" else "anyOf"
    for caller in CALLERS:
        record, ran = gate_call(tools, stream, caller_depth=caller)
        assert_schema_fault(record, ran, keyword)
        assert reader_verdict(tools, stream, caller_depth=caller) == "tool_schema_error"


# --------------------------------------------------------------------------------------------
# A validator that raises
# --------------------------------------------------------------------------------------------


class KeywordFailed(Exception):
    pass


def _explode(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
    raise KeywordFailed("a user's keyword failed")


#: A validator of the user's own, found by ``$schema`` as jsonschema finds any draft: its
#: ``explode`` keyword raises.
_USERS_OWN = jsonschema.validators.create(
    meta_schema={"$id": "urn:otelsse-test:exploding-keyword"},
    validators={
        "explode": _explode,
        "properties": jsonschema.Draft7Validator.VALIDATORS["properties"],
    },
    version="otelsse-test-exploding-keyword",
)

#: (tool schema, arguments): the validator raises on these arguments.
RAISING = {
    # jsonschema's own multipleOf divides the instance by a float first: an integer too large
    # for a float (JSON has no limit; otelsse reads up to 4,300 digits) raises OverflowError.
    "jsonschema-overflow": (
        {"type": "object", "properties": {"count": {"multipleOf": 0.5}}},
        {"count": 10**400},
    ),
    "users-own-keyword": (
        {"$schema": "urn:otelsse-test:exploding-keyword", "properties": {"path": {"explode": 1}}},
        {"path": "a.txt"},
    ),
}


@pytest.mark.parametrize("route", TEXT_ROUTES)
@pytest.mark.parametrize("case", list(RAISING))
@pytest.mark.parametrize("caller", [0, 600])
def test_a_validator_that_raises_fails_the_schema_at_both_entry_points(
    route: str, case: str, caller: int
) -> None:
    schema, arguments = RAISING[case]
    stream = stream_of(route, "tool", arguments)
    record, ran = gate_call({"tool": schema}, stream, caller_depth=caller)
    assert_schema_fault(record, ran, "validator_error")
    assert reader_verdict({"tool": schema}, stream, caller_depth=caller) == "tool_schema_error"


def test_an_interrupt_in_a_validator_is_not_turned_into_a_verdict() -> None:
    """Only an ``Exception`` is the validator's failure; a ``BaseException`` (an interrupt, a
    cancellation) propagates as from anywhere else."""
    interrupt = jsonschema.validators.create(
        meta_schema={"$id": "urn:otelsse-test:interrupting-keyword"},
        validators={"stop": lambda *_: (_ for _ in ()).throw(KeyboardInterrupt)},
        version="otelsse-test-interrupting-keyword",
    )
    assert interrupt is not None
    schema = {"$schema": "urn:otelsse-test:interrupting-keyword", "stop": True}
    stream = stream_of(CHAT, "tool", {"path": "a.txt"})
    with pytest.raises(KeyboardInterrupt):
        gate_call({"tool": schema}, stream)
    with pytest.raises(KeyboardInterrupt):
        reader_verdict({"tool": schema}, stream)
