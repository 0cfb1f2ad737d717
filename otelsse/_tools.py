"""The tools an application registered: which names may be called, and each one's JSON Schema;
and the one vocabulary of what can be wrong with a tool call.

Shared by the enforcing reader (which refuses a whole stream, the code as its ``StreamFault``
code) and the tool gate (which judges each call, the code as the call's error class): one fact,
one code, whichever found it. JSON Schema validation needs the ``schema`` extra (``jsonschema``).

Validation gives a verdict, never an exception, and the same verdict from any caller: arguments
nested deeper than ``MAX_SCHEMA_DEPTH`` fail without being walked (keyword ``depth``); a
validator that raises (jsonschema recurses once per level and has bugs of its own; a schema's
``$schema`` may name the application's own validator) fails them too (``validator_error``); and
a validation the caller's stack is too deep for runs again on a fresh stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._core.json import nests_deeper
from ._core.stack import on_fresh_stack
from ._core.state import INVALID_JSON, TRAILING_DATA
from ._exceptions import OtelSSEError, missing_extra

__all__ = [
    "ARGUMENTS_NOT_OBJECT",
    "DUPLICATE_TOOL_CALL_ID",
    "INVALID_JSON",
    "MAX_SCHEMA_DEPTH",
    "SCHEMA_TOO_DEEP",
    "TOOL_CALL_FAULTS",
    "TOOL_SCHEMA_ERROR",
    "TRAILING_DATA",
    "UNREGISTERED_TOOL",
    "VALIDATOR_ERROR",
    "ToolRegistry",
    "ToolSchemas",
]

# -- what can be wrong with a tool call ----------------------------------------------------------
# ``INVALID_JSON`` and ``TRAILING_DATA``: the accumulator's verdict on the argument text.
#: The arguments are one JSON value, but a tool takes an object.
ARGUMENTS_NOT_OBJECT = "arguments_not_object"
#: The call names a tool that was not registered.
UNREGISTERED_TOOL = "unregistered_tool"
#: Another call of the same response has the same id.
DUPLICATE_TOOL_CALL_ID = "duplicate_tool_call_id"
#: The arguments fail the tool's JSON Schema (or nest deeper than it is checked, or the
#: validator raised).
TOOL_SCHEMA_ERROR = "tool_schema_error"
#: Every code for a fault of one tool call.
TOOL_CALL_FAULTS: tuple[str, ...] = (
    INVALID_JSON, TRAILING_DATA, ARGUMENTS_NOT_OBJECT, UNREGISTERED_TOOL, DUPLICATE_TOOL_CALL_ID,
    TOOL_SCHEMA_ERROR,
)  # fmt: skip

#: Deepest nesting of objects and arrays in arguments checked against a tool's schema (the JSON
#: reader accepts up to 256). Validating takes the validator several stack frames per level.
MAX_SCHEMA_DEPTH = 64
#: ``schema_error``'s answer for arguments nested deeper than ``MAX_SCHEMA_DEPTH``.
SCHEMA_TOO_DEEP = "depth"
#: ``schema_error``'s answer when the validator raised instead of answering.
VALIDATOR_ERROR = "validator_error"

#: Tool name -> JSON Schema (or None for a tool without one), or an OpenAI or Anthropic
#: ``tools`` list.
ToolSchemas = Mapping[str, Mapping[str, Any] | None] | Iterable[Mapping[str, Any]]


class ToolRegistry:
    """Registered tool names and their schemas, from a mapping or an OpenAI/Anthropic list.

    A list entry's name registers it, with ``parameters`` (OpenAI, nested under ``function``
    in chat) or ``input_schema`` (Anthropic) as its schema when present: OpenAI custom tools
    and Anthropic server tools have none.
    """

    __slots__ = ("_validators", "names")

    def __init__(self, tools: ToolSchemas) -> None:
        schemas: dict[str, Mapping[str, Any] | None] = {}
        if isinstance(tools, Mapping):
            schemas.update(tools)
        else:
            for tool in tools:
                spec = tool.get("function", tool)  # OpenAI chat nests the function
                name = spec.get("name")
                if isinstance(name, str) and name:
                    schemas[name] = spec.get("parameters") or spec.get("input_schema")
        self.names = frozenset(schemas)
        self._validators: dict[str, Any] = {}
        if any(schema is not None for schema in schemas.values()):
            try:
                import jsonschema
            except ImportError as exc:  # pragma: no cover - jsonschema is a test dependency
                raise OtelSSEError(missing_extra("tool schemas", exc.name, "schema")) from exc
            for name, schema in schemas.items():
                if schema is not None:
                    self._validators[name] = _validator(jsonschema, schema)

    def has_schema(self, name: str | None) -> bool:
        return (name or "") in self._validators

    def schema_error(self, name: str | None, arguments: Any) -> str | None:
        """The JSON Schema keyword the arguments fail (``required``, ``additionalProperties``,
        ``maximum``...), ``SCHEMA_TOO_DEEP`` or ``VALIDATOR_ERROR``; None when they pass or the
        tool has no schema. Only the keyword: jsonschema's own messages quote the arguments.
        Never raises an ``Exception``."""
        validator = self._validators.get(name or "")
        if validator is None:
            return None
        if nests_deeper(arguments, MAX_SCHEMA_DEPTH):
            return SCHEMA_TOO_DEEP
        try:
            try:
                return _failed_keyword(validator, arguments)
            except RecursionError:  # the caller's stack was deep already
                return on_fresh_stack(lambda: _failed_keyword(validator, arguments))
        except Exception:
            return VALIDATOR_ERROR


#: Checked validators by schema text: ``read_stream(tools=...)`` builds a registry per stream,
#: and checking a schema costs far more than reading a stream with one tool call.
_VALIDATORS: dict[str, Any] = {}
_MAX_VALIDATORS = 256


def _validator(jsonschema: Any, schema: Mapping[str, Any]) -> Any:
    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):  # not JSON (a schema with Python objects): never cached
        key = None
    found = _VALIDATORS.get(key) if key is not None else None
    if found is not None:
        return found
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    if key is not None:
        if len(_VALIDATORS) >= _MAX_VALIDATORS:
            _VALIDATORS.clear()
        _VALIDATORS[key] = validator
    return validator


def _failed_keyword(validator: Any, arguments: Any) -> str | None:
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    return None if error is None else str(error.validator)
