"""Safety properties of the tool gate over random streams, faults, chunkings and
policies.

Each example builds a wire-correct stream for one route (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages, Gemini) from a plan of tool calls (ids sometimes shared, sometimes
missing where the provider allows it; names registered or not; argument texts valid, malformed,
followed by trailing data, not an object or breaking the tool's schema) with text interleaved,
then applies one fault (none, a cut at a random byte, an error event before the terminal, the
terminal left out, an unknown event, random mutations), chunks it at random and runs a
``ToolGate`` on it under a random policy, three times on one ledger and one run id: the body,
the same body again, and the clean body as a fresh attempt.

What must hold, whatever the input:

(a) the executor is called only for calls whose record reached ``POLICY_APPROVED`` and ended
    ``EXECUTED`` or ``EXECUTION_FAILED``, exactly once each, right after the policy approved;
(b) a refused response (``result.fault``) runs nothing: every call not already decided at its own
    terminal event (``run_at="item"``) is ``QUARANTINED``;
(c) no executor ever sees arguments that are not exactly one JSON object passing the tool's
    schema (checked here with ``jsonschema`` and a strict reading of the argument text);
(d) every history is a legal path of the gate's state machine;
(e) the same body again (a second gate, chunked otherwise, sometimes through ``arun``), or the
    clean body as a fresh attempt, never runs a call twice: at most one execution per
    ``CallKey`` across the runs, the others ``REPLAYED``;
(f) records, spans, metrics and the ledger never hold argument or text content (a canary);
(g) the gate never raises: every stream ends in a ``GateResult``.

For bodies left unmutated the test also predicts each call's final state and error class from
the plan alone (an oracle independent of otelsse: strict JSON, jsonschema, the policy's answer),
its byte count and the disconnect reason. Calls sharing a provider id: at most one of them ever
reaches the policy. The property runs on a ``MemoryLedger`` and, with fewer examples, on an
``SQLiteLedger`` file; ``OTELSSE_FUZZ_SCALE`` scales both for long runs (``tests/_tiers.py``).

The crash tests run a gate in a real subprocess (``_crash_worker.py``) on an SQLite ledger,
reading from a real HTTP server, and SIGKILL it: between the ledger's decision and the
executor's result (the restart finds the call ``NEEDS_RECONCILIATION`` and never runs it again),
or while it reads (nothing was decided; the restart runs every call exactly once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsse import (
    CallKey,
    Decision,
    GateCall,
    GateResult,
    Ledger,
    MemoryLedger,
    SQLiteLedger,
    ToolCallState,
    ToolCallView,
    ToolGate,
    read_stream,
    semconv,
)
from otelsse._monitor import Outcome
from otelsse._reader import FAULT_CODES
from otelsse.gate import ERROR_CLASSES
from otelsse.gate._states import TRANSITIONS as _TRANSITIONS
from tests._fixtures import read_fixture
from tests._helpers import ANTHROPIC, CHAT, GEMINI, RESPONSES, ROUTE_PATHS, ROUTES, waited
from tests._otel import attribute_values
from tests._server import Reply, SSEServer
from tests.fuzz._inputs import mutate, split_events
from tests.fuzz._strategies import EXAMPLES, FUZZ, FUZZ_MORE, DrawChooser

S = ToolCallState

#: Routes whose calls close at an event of their own (``run_at="item"`` decides them there).
ITEM_ROUTES = frozenset({RESPONSES, ANTHROPIC})
#: Routes whose error event ends the stream (nothing after it is read).
ERROR_ENDS = frozenset({RESPONSES, ANTHROPIC, GEMINI})

# --------------------------------------------------------------------------------------------
# Tools, and the gate's checks made independently of otelsse
# --------------------------------------------------------------------------------------------

TOOLS: dict[str, dict[str, Any] | None] = {
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string", "maxLength": 80}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "write_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "mode": {"type": "integer", "minimum": 0, "maximum": 7},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    "ping": None,  # registered, no schema: any object passes
}
#: Names the model may call that were never registered (one has an executor all the same).
UNREGISTERED = ("rm_rf", "read_File")
NAMES = (*TOOLS, *UNREGISTERED)


def _tools_as(form: str) -> Any:
    """``TOOLS`` as a mapping, an OpenAI chat ``tools`` list or an Anthropic one."""
    if form == "mapping":
        return dict(TOOLS)
    if form == "openai":
        return [
            {"type": "function", "function": {"name": name, "parameters": schema}}
            if schema is not None
            else {"type": "function", "function": {"name": name}}
            for name, schema in TOOLS.items()
        ]
    return [
        {"name": name, "input_schema": schema} if schema is not None else {"name": name}
        for name, schema in TOOLS.items()
    ]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise ValueError("out of range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)
_WS = " \t\n\r"


def _trailing(text: str) -> bool:
    """A text refused as JSON that starts with one whole value and holds more after it."""
    try:
        _, end = _STRICT.raw_decode(text, len(text) - len(text.lstrip(_WS)))
    except ValueError:
        return False
    return bool(text[end:].strip(_WS))


def _schema_ok(name: str, value: Any) -> bool:
    schema = TOOLS[name]
    if schema is None:
        return True
    validator = jsonschema.validators.validator_for(schema)(schema)
    return bool(validator.is_valid(value))


_ABSENT: Any = object()  # a Gemini functionCall without ``args``


@dataclass
class Planned:
    """One tool call of a stream, as built: what the gate must make of it is known from this."""

    index: int
    name: str
    call_id: str | None
    kind: str
    text: str = ""  # the argument text (every route but Gemini)
    args: Any = _ABSENT  # Gemini's ``args`` value
    position: int = -1  # among the stream's calls, in the order they opened

    @property
    def key_id(self) -> str:
        """The call id the gate keys the call by (its position when the provider sent none)."""
        return self.call_id if self.call_id is not None else f"#{self.position}"

    def check(self, route: str) -> tuple[str | None, Any]:
        """The gate's checks in pipeline order: (error class or None, parsed arguments)."""
        if route == GEMINI:
            value = {} if self.args is _ABSENT or self.args is None else self.args
        elif not self.text.strip():
            value = {}  # no argument text: no arguments (Anthropic: its block's ``input``)
        else:
            try:
                value = _STRICT.decode(self.text)
            except (ValueError, RecursionError):
                return ("trailing_data" if _trailing(self.text) else "invalid_json"), None
        if not isinstance(value, dict):
            return "arguments_not_object", None
        if self.name not in TOOLS:
            return "unregistered_tool", None
        if not _schema_ok(self.name, value):
            return "tool_schema_error", None
        return None, value

    def text_bytes(self) -> int:
        return len(self.text.encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Drawing a plan
# --------------------------------------------------------------------------------------------

ARGUMENT_KINDS = (
    "valid",
    "valid",
    "valid",
    "malformed",
    "trailing",
    "schema",
    "not_object",
    "empty",
)
GEMINI_KINDS = ("valid", "valid", "valid", "schema", "not_object", "empty")


def _valid_object(data: st.DataObject, name: str, index: int, canary: str, fails: bool) -> Any:
    tag = "boom" if fails else "ok"
    path = f"{canary}/{index}/{tag}"
    if name == "write_file":
        value: dict[str, Any] = {"path": path, "content": f"{canary} \u00e9\u2713\U0001f600"}
        if data.draw(st.booleans(), label="mode"):
            value["mode"] = data.draw(st.integers(0, 7), label="mode value")
        return value
    if name == "ping":
        return {"n": index, "tag": tag, "data": [canary, {"deep": None}]}
    return {"path": path}


def _schema_breaking(data: st.DataObject, name: str, canary: str) -> Any:
    if name == "write_file":
        options: list[Any] = [
            {"path": canary},
            {"path": canary, "content": "x", "mode": 8},
            {"path": canary, "content": "x", "mode": -1},
            {"path": canary, "content": "x", "mode": "7"},
            {"path": canary, "content": "x", "mode": 1.5},
            {"path": canary, "content": "x", "extra": canary},
        ]
    else:  # read_file (and the names without a schema, where nothing breaks it)
        options = [{}, {"path": 7}, {"path": canary, "extra": canary}, {"path": canary * 10}]
    return data.draw(st.sampled_from(options), label="schema-breaking value")


def _dump(data: st.DataObject, value: Any) -> str:
    style = data.draw(st.sampled_from(["compact", "spaced", "indented"]), label="json style")
    ascii_only = data.draw(st.booleans(), label="ensure_ascii")
    if style == "compact":
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    elif style == "spaced":
        text = json.dumps(value, ensure_ascii=ascii_only)
    else:
        text = json.dumps(value, indent=2, ensure_ascii=ascii_only)
    pad = data.draw(st.sampled_from(["", "", " ", "\n", " \n "]), label="padding")
    return pad + text + pad[::-1]


def _argument_text(data: st.DataObject, kind: str, valid: Any, name: str, canary: str) -> str:
    if kind == "valid":
        return _dump(data, valid)
    if kind == "malformed":
        whole = json.dumps(valid)
        how = data.draw(st.sampled_from(["prefix", "replace", "fixed"]), label="malformed how")
        if how == "prefix":
            return whole[: data.draw(st.integers(1, len(whole) - 1), label="prefix length")]
        if how == "replace":
            at = data.draw(st.integers(0, len(whole) - 1), label="replace at")
            junk = data.draw(st.sampled_from([",", ":", "}", '"', "x", "{"]), label="junk")
            return whole[:at] + junk + whole[at + 1 :]
        fixed = [
            "{'path': 'x'}",
            '{"n": NaN}',
            '{"n": 1e999}',
            '{"a": 1,}',
            '{"a" 1}',
            "{",
            f'{{"path": "{canary}"',
        ]
        return data.draw(st.sampled_from(fixed), label="malformed text")
    if kind == "trailing":
        junk = data.draw(
            st.sampled_from([" {}", "x", "}", ',{"a":1}', "\n[]", "0", " " + json.dumps(valid)]),
            label="trailing junk",
        )
        return _dump(data, valid) + junk
    if kind == "schema":
        return _dump(data, _schema_breaking(data, name, canary))
    if kind == "not_object":
        options = ["[1, 2]", json.dumps(canary), "3", "null", "true", "[]"]
        return data.draw(st.sampled_from(options), label="not an object")
    return data.draw(st.sampled_from(["", "  ", "\n"]), label="empty text")


def _gemini_args(data: st.DataObject, kind: str, valid: Any, name: str, canary: str) -> Any:
    if kind == "valid":
        return valid
    if kind == "schema":
        return _schema_breaking(data, name, canary)
    if kind == "not_object":
        options: list[Any] = [[1, 2], canary, 3, True, []]
        return data.draw(st.sampled_from(options), label="not an object")
    return _ABSENT if data.draw(st.booleans(), label="args absent") else None


#: Provider id prefixes, and whether the provider may leave the id out.
ID_PREFIX = {CHAT: "call_", RESPONSES: "call_", ANTHROPIC: "toolu_", GEMINI: "fc-"}
ID_OPTIONAL = frozenset({CHAT, GEMINI})


def draw_plan(data: st.DataObject, route: str, canary: str) -> list[Planned]:
    count = data.draw(st.integers(0, 4), label="tool calls")
    calls = []
    for index in range(count):
        name = data.draw(st.sampled_from(NAMES), label="tool name")
        # A small pool of ids: shared ids happen, as do missing ones where allowed.
        slot = data.draw(st.integers(-1 if route in ID_OPTIONAL else 0, 5), label="id slot")
        call_id = None if slot < 0 else f"{ID_PREFIX[route]}{'ABCDEF'[slot]}x{slot}"
        kinds = GEMINI_KINDS if route == GEMINI else ARGUMENT_KINDS
        kind = data.draw(st.sampled_from(kinds), label="argument kind")
        fails = data.draw(st.integers(0, 4), label="executor fails") == 0
        valid = _valid_object(data, name, index, canary, fails)
        call = Planned(index, name, call_id, kind)
        if route == GEMINI:
            call.args = _gemini_args(data, kind, valid, name, canary)
        else:
            call.text = _argument_text(data, kind, valid, name, canary)
        calls.append(call)
    return calls


# --------------------------------------------------------------------------------------------
# Building a wire-correct stream per route
# --------------------------------------------------------------------------------------------


@dataclass
class Ev:
    """One SSE event to write: its JSON payload (or raw data) and what it does to the calls."""

    payload: dict[str, Any] | str
    name: str | None = None
    opens: tuple[int, ...] = ()  # plan indexes of the calls it opens
    closes: tuple[int, ...] = ()  # ... and closes (their item's terminal event)
    terminal: bool = False
    identifies: tuple[int, ...] = ()  # ... names and ids, when not the one that opens them
    stops: bool = False  # it carries the response's stop reason (or is the terminal that does)


def _fragments(data: st.DataObject, text: str) -> list[str]:
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=4), label="frags")
    points = sorted({0, len(text), *(c for c in cuts if 0 < c < len(text))})
    return [text[a:b] for a, b in itertools.pairwise(points)]


def _texts(data: st.DataObject, canary: str) -> list[str]:
    words = st.sampled_from(["Sure, ", "let me ", "check. ", f"{canary} ", "\u00e9\u2713 ", "\n"])
    return data.draw(st.lists(words, max_size=3), label="text pieces")


def _interleave(data: st.DataObject, sequences: list[list[Ev]]) -> list[Ev]:
    """The sequences merged in a random order, each one's own order kept."""
    slots = [number for number, sequence in enumerate(sequences) for _ in sequence]
    order = data.draw(st.permutations(slots), label="interleaving")
    iterators = [iter(sequence) for sequence in sequences]
    return [next(iterators[number]) for number in order]


def build_chat(data: st.DataObject, calls: list[Planned], canary: str) -> list[Ev]:
    base = {"id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    sequences = [[Ev(chunk({"content": piece})) for piece in _texts(data, canary)]]
    for tool_index, call in enumerate(calls):
        identity: dict[str, Any] = {
            "index": tool_index,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        if call.call_id is not None:
            identity["id"] = call.call_id
        fragments = [
            {"index": tool_index, "function": {"arguments": piece}}
            for piece in _fragments(data, call.text)
        ]
        # Some servers send the first arguments before the call's name and id (the route
        # reads them by the tool index): the name and id then come with a later fragment.
        late = bool(fragments) and data.draw(st.integers(0, 3), label="late identity") == 0
        parts = [fragments[0], identity, *fragments[1:]] if late else [identity, *fragments]
        sequence = [Ev(chunk({"tool_calls": [part]})) for part in parts]
        sequence[0].opens = (call.index,)
        sequence[1 if late else 0].identifies = (call.index,)
        sequences.append(sequence)
    events = [Ev(chunk({"role": "assistant", "content": ""}))]
    events += _interleave(data, sequences)
    closes = tuple(call.index for call in calls)
    events.append(Ev(chunk({}, "tool_calls" if calls else "stop"), closes=closes, stops=True))
    if data.draw(st.booleans(), label="usage chunk"):
        usage = {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}
        events.append(Ev({**base, "choices": [], "usage": usage}))
    events.append(Ev("[DONE]", terminal=True))
    return events


def build_responses(data: st.DataObject, calls: list[Planned], canary: str) -> list[Ev]:
    response = {"id": "resp_7f", "object": "response", "model": "gpt-x", "output": []}

    def ev(payload: dict[str, Any], **kw: Any) -> Ev:
        return Ev(payload, name=payload["type"], **kw)

    pieces = _texts(data, canary)
    outputs: list[Any] = [None] * bool(pieces) + list(calls)  # None: the message item
    outputs = data.draw(st.permutations(outputs), label="output order")
    sequences = []
    for out, call in enumerate(outputs):
        if call is None:
            item = {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant"}
            text = "".join(pieces)
            part = {"type": "output_text", "text": text, "annotations": []}
            at = {"item_id": "msg_1", "output_index": out, "content_index": 0}
            sequence = [
                ev({"type": "response.output_item.added", "output_index": out, "item": item}),
                ev({"type": "response.content_part.added", **at, "part": {**part, "text": ""}}),
            ]
            sequence += [
                ev({"type": "response.output_text.delta", **at, "delta": piece}) for piece in pieces
            ]
            done = {**item, "status": "completed", "content": [part]}
            sequence += [
                ev({"type": "response.output_text.done", **at, "text": text}),
                ev({"type": "response.content_part.done", **at, "part": part}),
                ev({"type": "response.output_item.done", "output_index": out, "item": done}),
            ]
        else:
            item_id = f"fc_{call.index}"
            assert call.call_id is not None
            item = {
                "type": "function_call",
                "id": item_id,
                "call_id": call.call_id,
                "name": call.name,
                "arguments": "",
                "status": "in_progress",
            }
            added = {"type": "response.output_item.added", "output_index": out, "item": item}
            sequence = [ev(added, opens=(call.index,))]
            at = {"item_id": item_id, "output_index": out}
            sequence += [
                ev({"type": "response.function_call_arguments.delta", **at, "delta": piece})
                for piece in _fragments(data, call.text)
            ]
            arguments_done = data.draw(st.booleans(), label="arguments.done sent")
            if arguments_done:
                done_event = {
                    "type": "response.function_call_arguments.done",
                    **at,
                    "arguments": call.text,
                }
                sequence.append(ev(done_event, closes=(call.index,)))
            done = {**item, "arguments": call.text, "status": "completed"}
            item_done = {"type": "response.output_item.done", "output_index": out, "item": done}
            closes = () if arguments_done else (call.index,)
            sequence.append(ev(item_done, closes=closes))
        sequences.append(sequence)
    events = [
        ev({"type": "response.created", "response": {**response, "status": "in_progress"}}),
        ev({"type": "response.in_progress", "response": {**response, "status": "in_progress"}}),
    ]
    events += _interleave(data, sequences)
    usage = {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14}
    final = {**response, "status": "completed", "usage": usage}
    events.append(ev({"type": "response.completed", "response": final}, terminal=True, stops=True))
    return events


def build_anthropic(data: st.DataObject, calls: list[Planned], canary: str) -> list[Ev]:
    def ev(payload: dict[str, Any], **kw: Any) -> Ev:
        return Ev(payload, name=payload["type"], **kw)

    message: dict[str, Any] = {
        "id": "msg_01A",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }
    pieces = _texts(data, canary)
    blocks: list[Any] = [None] * bool(pieces) + list(calls)  # None: a text block
    blocks = data.draw(st.permutations(blocks), label="block order")
    events = [ev({"type": "message_start", "message": message})]
    for index, call in enumerate(blocks):
        if call is None:
            block: dict[str, Any] = {"type": "text", "text": ""}
            events.append(
                ev({"type": "content_block_start", "index": index, "content_block": block})
            )
            for piece in pieces:
                delta = {"type": "text_delta", "text": piece}
                events.append(ev({"type": "content_block_delta", "index": index, "delta": delta}))
            events.append(ev({"type": "content_block_stop", "index": index}))
            continue
        block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
        start = {"type": "content_block_start", "index": index, "content_block": block}
        events.append(ev(start, opens=(call.index,)))
        fragments = _fragments(data, call.text)
        if data.draw(st.booleans(), label="empty first partial_json"):
            fragments.insert(0, "")
        for piece in fragments:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(ev({"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(ev({"type": "content_block_stop", "index": index}, closes=(call.index,)))
        if data.draw(st.integers(0, 3), label="ping") == 0:
            events.append(ev({"type": "ping"}))
    stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
    events.append(
        ev({"type": "message_delta", "delta": stop, "usage": {"output_tokens": 12}}, stops=True)
    )
    events.append(ev({"type": "message_stop"}, terminal=True))
    return events


def build_gemini(data: st.DataObject, calls: list[Planned], canary: str) -> list[Ev]:
    parts: list[tuple[dict[str, Any], int | None]] = [
        ({"text": piece}, None) for piece in _texts(data, canary)
    ]
    for call in calls:
        function: dict[str, Any] = {"name": call.name}
        if call.args is not _ABSENT:
            function["args"] = call.args
        if call.call_id is not None:
            function["id"] = call.call_id
        parts.append(({"functionCall": function}, call.index))
    parts = data.draw(st.permutations(parts), label="part order")
    base = {"modelVersion": "gemini-x", "responseId": "gem-resp-1"}
    events = []
    at = 0
    while at < len(parts):
        size = data.draw(st.integers(1, 2), label="parts per chunk")
        group = parts[at : at + size]
        at += size
        content = {"role": "model", "parts": [part for part, _ in group]}
        opened = tuple(index for _, index in group if index is not None)
        payload = {"candidates": [{"content": content, "index": 0}], **base}
        events.append(Ev(payload, opens=opened, closes=opened))
    final_content = {"role": "model", "parts": [{"text": ""}]}
    usage = {"promptTokenCount": 9, "candidatesTokenCount": 5, "totalTokenCount": 14}
    final_candidate = {"content": final_content, "finishReason": "STOP", "index": 0}
    final = {"candidates": [final_candidate], "usageMetadata": usage, **base}
    events.append(Ev(final, terminal=True, stops=True))
    return events


BUILDERS: dict[str, Callable[[st.DataObject, list[Planned], str], list[Ev]]] = {
    CHAT: build_chat,
    RESPONSES: build_responses,
    ANTHROPIC: build_anthropic,
    GEMINI: build_gemini,
}


def error_event(route: str) -> Ev:
    """The provider's own in-stream error event."""
    if route == CHAT:
        return Ev({"error": {"message": "overloaded", "type": "server_error", "code": None}})
    if route == RESPONSES:
        return Ev({"type": "error", "code": "server_error", "message": "boom"}, name="error")
    if route == ANTHROPIC:
        error = {"type": "overloaded_error", "message": "Overloaded"}
        return Ev({"type": "error", "error": error}, name="error")
    return Ev({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})


def unknown_event(route: str) -> Ev:
    """An event of a kind the route does not know (a newer protocol's)."""
    if route == CHAT:
        return Ev({"object": "chat.completion.chunk", "choices": [], "x_new": {"a": 1}}, "x.new")
    if route == RESPONSES:
        payload = {"type": "response.new_feature.delta", "item_id": "nf_1", "delta": "zz"}
        return Ev(payload, name=payload["type"])
    if route == ANTHROPIC:
        return Ev({"type": "content_block_hint", "index": 99}, name="content_block_hint")
    return Ev({"newField": {"a": 1}, "modelVersion": "gemini-x", "responseId": "gem-resp-1"})


# --------------------------------------------------------------------------------------------
# Writing the events: framing variants, with the offset at which each event is dispatched
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Framing:
    newline: str
    names: bool  # write ``event:`` lines where the route has them
    multiline: bool  # JSON spread over several ``data:`` lines
    space: bool  # ``data: x`` rather than ``data:x``
    comments: tuple[int, ...]  # events preceded by a comment line
    ascii_only: bool


framings = st.builds(
    Framing,
    newline=st.sampled_from(["\n", "\n", "\r\n", "\r"]),
    names=st.booleans(),
    multiline=st.booleans(),
    space=st.booleans(),
    comments=st.lists(st.integers(0, 40), max_size=3).map(tuple),
    ascii_only=st.booleans(),
)


def serialize(events: list[Ev], framing: Framing) -> tuple[bytes, list[int]]:
    """The body, and for each event the offset just after its dispatching blank line."""
    nl = framing.newline
    prefix = "data: " if framing.space else "data:"
    out = bytearray()
    ends = []
    for number, event in enumerate(events):
        lines = []
        if number in framing.comments:
            lines.append(": keepalive")
        if event.name is not None and framing.names:
            lines.append(f"event: {event.name}")
        if isinstance(event.payload, str):
            text = event.payload
        elif framing.multiline:
            text = json.dumps(event.payload, indent=1, ensure_ascii=framing.ascii_only)
        else:
            text = json.dumps(event.payload, ensure_ascii=framing.ascii_only)
        lines += [prefix + line for line in text.split("\n")]
        out += ("".join(line + nl for line in lines) + nl).encode("utf-8")
        ends.append(len(out))
    return bytes(out), ends


# --------------------------------------------------------------------------------------------
# One case: a plan, its stream, its fault, its chunkings, its policy
# --------------------------------------------------------------------------------------------

FAULTS = ("none", "none", "cut", "error", "omit_terminal", "unknown", "mutate")
POLICY_ANSWERS = (
    "approve",
    "approve",
    "approve_enum",
    "deny",
    "needs_approval",
    "raise",
    "garbage",
)


@dataclass
class Case:
    route: str
    run_at: str
    tools_form: str
    calls: list[Planned]  # by plan index
    opened: list[Planned]  # in the order they open in the stream (the gate's positions)
    clean_events: list[Ev]
    events: list[Ev]  # after the fault's structural change
    framing: Framing
    body: bytes  # what the gate reads (after a cut or mutations)
    clean_body: bytes
    ends: list[int]
    fault: str
    cut: int | None
    ending: str  # how the source ends: eof, reset (ConnectionResetError) or timeout
    error_at: int | None  # index in ``events`` of the inserted error event
    chunkings: list[list[int]]  # cut positions of the body, one chunking per run
    clean_chunking: list[int]
    decisions: dict[str, str]  # key call id -> policy answer
    default_answer: str  # for ids the plan does not have (mutations)
    ping_executor: bool
    async_replay: bool  # the second attempt through ``arun``
    canary: str
    run_id: str

    @property
    def item_mode(self) -> bool:
        return self.run_at == "item" and self.route in ITEM_ROUTES

    @property
    def mutated(self) -> bool:
        return self.fault == "mutate"


def _positions(data: st.DataObject, body: bytes, label: str) -> list[int]:
    if len(body) < 2:
        return []
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=48), label=label)
    return sorted(set(cuts))


def draw_case(data: st.DataObject) -> Case:
    route = data.draw(st.sampled_from(ROUTES), label="route")
    canary = "SECRET" + data.draw(st.text("0123456789abcdef", min_size=8, max_size=8), label="c")
    calls = draw_plan(data, route, canary)
    events = BUILDERS[route](data, calls, canary)
    clean_events = list(events)
    opened = [calls[i] for event in events for i in event.opens]
    for position, call in enumerate(opened):
        call.position = position
    fault = data.draw(st.sampled_from(FAULTS), label="fault")
    terminal = next(n for n, event in enumerate(events) if event.terminal)
    error_at = None
    if fault == "error":
        error_at = data.draw(st.integers(0, terminal), label="error at")
        events.insert(error_at, error_event(route))
    elif fault == "unknown":
        events.insert(data.draw(st.integers(0, terminal), label="unknown at"), unknown_event(route))
    elif fault == "omit_terminal":
        del events[terminal]
    if route == RESPONSES:
        for stream in (events, clean_events):
            for number, event in enumerate(stream):
                assert isinstance(event.payload, dict)
                event.payload = {**event.payload, "sequence_number": number}
    framing = data.draw(framings, label="framing")
    body, ends = serialize(events, framing)
    clean_body, _ = serialize(clean_events, framing)
    cut = None
    ending = "eof"
    if fault == "cut":
        cut = data.draw(st.integers(0, len(body) - 1), label="cut at")
        body = body[:cut]
        ending = data.draw(st.sampled_from(["eof", "reset", "timeout"]), label="ending")
    elif fault == "mutate":
        count = data.draw(st.integers(1, 3), label="mutations")
        body, done = mutate(body, DrawChooser(data), count)
        note(f"mutations: {done}")
    decisions: dict[str, str] = {}
    for call in opened:
        answer = data.draw(st.sampled_from(POLICY_ANSWERS), label=f"policy for {call.key_id}")
        decisions.setdefault(call.key_id, answer)
    case = Case(
        route=route,
        run_at=data.draw(st.sampled_from(["response", "item"]), label="run_at"),
        tools_form=data.draw(st.sampled_from(["mapping", "openai", "anthropic"]), label="tools"),
        calls=calls,
        opened=opened,
        clean_events=clean_events,
        events=events,
        framing=framing,
        body=body,
        clean_body=clean_body,
        ends=ends,
        fault=fault,
        cut=cut,
        ending=ending,
        error_at=error_at,
        chunkings=[_positions(data, body, "chunking 1"), _positions(data, body, "chunking 2")],
        clean_chunking=_positions(data, clean_body, "clean chunking"),
        decisions=decisions,
        default_answer=data.draw(st.sampled_from(POLICY_ANSWERS), label="default answer"),
        ping_executor=data.draw(st.booleans(), label="ping has an executor"),
        async_replay=data.draw(st.booleans(), label="replay through arun"),
        canary=canary,
        run_id="run-" + canary[-8:],
    )
    note(f"route={route} run_at={case.run_at} fault={fault} cut={cut} ending={ending}")
    note(f"calls={[(c.position, c.name, c.call_id, c.kind) for c in opened]}")
    note(f"decisions={decisions} default={case.default_answer}")
    note(f"body={body!r}")
    return case


# --------------------------------------------------------------------------------------------
# Running the gate: a policy and executors that log what they were given
# --------------------------------------------------------------------------------------------

_SPANS = InMemorySpanExporter()
_TRACER_PROVIDER = TracerProvider()
_TRACER_PROVIDER.add_span_processor(SimpleSpanProcessor(_SPANS))
_METRICS = InMemoryMetricReader()
_METER_PROVIDER = MeterProvider(metric_readers=[_METRICS])

_ANSWERS: dict[str, Any] = {
    "approve": "approve",
    "approve_enum": Decision.APPROVE,
    "deny": Decision.DENY,
    "needs_approval": "needs_approval",
    "garbage": "APPROVE",  # not a Decision value: the policy failed, which denies
}


@dataclass
class Harness:
    """One run's policy and executors, and the log of what each was called with, in order."""

    case: Case
    log: list[tuple[Any, ...]] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)

    def answer_for(self, key_id: str) -> str:
        return self.case.decisions.get(key_id, self.case.default_answer)

    def policy(self, view: ToolCallView) -> Any:
        answer = self.answer_for(view.call_id)
        self.log.append(("policy", view, answer))
        if answer == "raise":
            raise RuntimeError("the policy failed")
        return _ANSWERS[answer]

    def executor(self, name: str) -> Callable[[Any], Any]:
        def run(arguments: Any) -> Any:
            self.log.append(("exec", name, arguments))
            if "boom" in repr(arguments):
                raise RuntimeError("the tool failed")
            output = ("output", len(self.log))
            self.outputs.append(output)
            return output

        return run

    def executors(self) -> dict[str, Callable[[Any], Any]]:
        names = ["read_file", "write_file", "rm_rf"] + ["ping"] * self.case.ping_executor
        return {name: self.executor(name) for name in names}


def _source(body: bytes, positions: Sequence[int], ending: str) -> Iterator[bytes]:
    points = [0, *positions, len(body)]
    for start, end in itertools.pairwise(points):
        if end > start:
            yield body[start:end]
    if ending == "reset":
        raise ConnectionResetError("connection reset by peer")
    if ending == "timeout":
        raise TimeoutError("read timed out")


async def _asource(body: bytes, positions: Sequence[int], ending: str) -> AsyncIterator[bytes]:
    for chunk in _source(body, positions, ending):
        yield chunk


def run_gate(
    case: Case,
    ledger: Ledger,
    body: bytes,
    positions: Sequence[int],
    ending: str,
    *,
    asynchronous: bool = False,
) -> tuple[GateResult, Harness]:
    """One attempt of the case's run on ``ledger`` (``arun`` on an async iterable when
    ``asynchronous``); (g): it returns, whatever the stream."""
    harness = Harness(case)
    gate = ToolGate(
        _tools_as(case.tools_form),
        harness.policy,
        ledger,
        run_at=case.run_at,
        tracer_provider=_TRACER_PROVIDER,
        meter_provider=_METER_PROVIDER,
    )
    _SPANS.clear()
    execute = harness.executors()
    if asynchronous:
        chunks = _asource(body, positions, ending)
        running = gate.arun(chunks, case.route, execute=execute, run_id=case.run_id)
        result = asyncio.run(running)
    else:
        source = _source(body, positions, ending)
        result = gate.run(source, case.route, execute=execute, run_id=case.run_id)
    check_spans(case, result)
    return result, harness


# --------------------------------------------------------------------------------------------
# Checks that hold for every stream
# --------------------------------------------------------------------------------------------

#: The gate's main line; QUARANTINED may end it anywhere before POLICY_APPROVED.
SEED_LINE = (S.RECEIVING, S.ITEM_OPEN, S.ITEM_TERMINAL, S.PARSED, S.SCHEMA_VALID, S.POLICY_APPROVED)
AFTER_SCHEMA_VALID = frozenset({S.POLICY_DENIED, S.NEEDS_APPROVAL})
AFTER_APPROVED = frozenset({S.EXECUTED, S.EXECUTION_FAILED, S.NEEDS_RECONCILIATION, S.REPLAYED})
RAN = frozenset({S.EXECUTED, S.EXECUTION_FAILED})
#: Every error class a record may carry: the gate's own, the reader's fault codes, outcomes.
KNOWN_ERROR_CLASSES = frozenset(ERROR_CLASSES) | set(FAULT_CODES) | {o.value for o in Outcome}


def check_history(call: GateCall) -> None:
    """(d) a legal path of the gate's machine, by a table written here from its requirements,
    and one the gate's own ``_TRANSITIONS`` allows step by step; it ends where the record says."""
    history = list(call.history)
    assert history[-1] is call.state, call
    for before, after in itertools.pairwise(history):
        assert after in _TRANSITIONS.get(before, frozenset()), (call, history)
    line = 0
    while line < len(history) and line < len(SEED_LINE) and history[line] is SEED_LINE[line]:
        line += 1
    assert line >= 2, history  # every record saw its call open
    rest = history[line:]
    assert len(rest) <= 1, history
    if rest:
        final = rest[0]
        last = SEED_LINE[line - 1]
        if final is S.QUARANTINED:
            # Once approved, only the ledger's answer quarantines: another call holds the key.
            if last is S.POLICY_APPROVED:
                assert call.error_class == "identity_collision", history
        elif last is S.SCHEMA_VALID:
            assert final in AFTER_SCHEMA_VALID, history
        else:
            assert last is S.POLICY_APPROVED, history
            assert final in AFTER_APPROVED, history
    else:
        # Only an approved call with no executor may stop short of a final state.
        assert call.state is S.POLICY_APPROVED, history
        assert call.error_class == "no_executor", history
    assert call.error_class is None or call.error_class in KNOWN_ERROR_CLASSES, call
    # What bounds the gate counter's series (docs/operators/reference.md, Cardinality): these
    # states always come with an error class.
    if call.state in (S.QUARANTINED, S.POLICY_DENIED, S.EXECUTION_FAILED):
        assert call.error_class is not None, call


def _content_free(case: Case, value: str, what: str) -> None:
    assert case.canary not in value, f"{what} holds content: {value!r}"


def check_records(case: Case, result: GateResult) -> None:
    """(f) records hold ids, names, sizes and statuses: JSON scalars, never the content."""
    for call in result.calls:
        record = call.record()
        for key, value in record.items():
            assert value is None or isinstance(value, (str, int, bool)), (key, value)
            ids = key in ("item_id", "tool_name", "response_id")
            if isinstance(value, str) and not (case.mutated and ids):
                _content_free(case, value, f"record field {key}")
        if not case.mutated:
            _content_free(case, repr(call), "GateCall repr")
    if not case.mutated:
        _content_free(case, repr(result), "GateResult repr")


def check_spans(case: Case, result: GateResult) -> None:
    """One ``otelsse.tool_call`` span per record with its state, under the attempt's span; no
    content in any span or metric point."""
    spans = _SPANS.get_finished_spans()
    gates = [span for span in spans if span.name == semconv.GATE_SPAN_NAME]
    calls = [span for span in spans if span.name == semconv.TOOL_CALL_SPAN_NAME]
    assert len(gates) == 1, [span.name for span in spans]
    assert len(calls) == len(result.calls)
    states = sorted(str((span.attributes or {})[semconv.TOOL_CALL_STATE]) for span in calls)
    assert states == sorted(call.state.value for call in result.calls)
    gate_id = gates[0].context.span_id
    assert all(span.parent is not None and span.parent.span_id == gate_id for span in calls)
    if not case.mutated:
        for text in attribute_values(spans):
            _content_free(case, text, "span")
        data = _METRICS.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        _content_free(case, repr(dict(point.attributes or {})), "metric point")


def check_executions(case: Case, result: GateResult, harness: Harness, ledger: Ledger) -> None:
    """(a) and (c): each executor call came right after the policy approved that very call,
    with that call's arguments, which are one JSON object its tool's schema accepts; each
    maps to exactly one record that went through POLICY_APPROVED and ended EXECUTED or
    EXECUTION_FAILED, and each such record to exactly one executor call."""
    log = harness.log
    ran = [call for call in result.calls if call.state in RAN]
    executed_keys = []
    for number, entry in enumerate(log):
        if entry[0] != "exec":
            continue
        _, name, arguments = entry
        assert number > 0, log
        assert log[number - 1][0] == "policy", log
        _, view, answer = log[number - 1]
        assert answer in ("approve", "approve_enum"), (view, answer)
        assert view.name == name
        assert view.arguments is arguments
        assert name in TOOLS, f"executor of the unregistered tool {name!r} ran"
        assert isinstance(arguments, dict), arguments
        schema = TOOLS[name]
        if schema is not None:
            jsonschema.validate(arguments, schema)
        key = CallKey(view.run_id, view.response_id, view.call_id)
        matching = [call for call in ran if call.key == key]
        assert len(matching) == 1, (key, ran)
        executed_keys.append(key)
        call = matching[0]
        assert call.tool_name == name
        if not case.mutated:
            planned = case.opened[call.position]
            error, value = planned.check(case.route)
            assert error is None, f"ran {planned} although its check gives {error}"
            assert arguments == value
    assert len(executed_keys) == len(ran) == len(set(executed_keys)), (executed_keys, ran)
    outputs = [call.output for call in ran if call.state is S.EXECUTED]
    assert sorted(outputs) == sorted(harness.outputs)
    for call in ran:
        assert S.POLICY_APPROVED in call.history
        found = ledger.get(call.key)
        assert found is not None
        if call.state is S.EXECUTED:
            assert found.status == call.execution_status == "succeeded"
        else:
            assert found.status == call.execution_status == "failed"
            assert call.exception_type == "RuntimeError"
            assert call.error_class == "execution_error"
    for call in result.calls:
        if call.policy_decision is None:
            assert S.POLICY_APPROVED not in call.history
            assert call.state is not S.POLICY_DENIED
        if S.POLICY_APPROVED in call.history and call.state not in RAN:
            found = ledger.get(call.key)
            if call.state in (S.REPLAYED, S.NEEDS_RECONCILIATION):
                # (e) a replay is the very call the ledger holds, never another one under its key
                assert found is not None, call
                assert found.fingerprint == call.fingerprint(), call
            elif call.state is S.QUARANTINED:
                assert call.error_class == "identity_collision", call
                assert found is not None, call
                assert found.fingerprint != call.fingerprint(), call
            else:
                assert call.error_class == "no_executor", call
                assert call.tool_name not in harness.executors(), call


def check_shared_ids(result: GateResult) -> None:
    """Calls that share a provider id in one response: at most one reaches the policy (the
    others are quarantined, whatever the order their items closed in)."""
    by_id: dict[str, list[GateCall]] = {}
    for call in result.calls:
        if call.call_id is not None:
            by_id.setdefault(call.call_id, []).append(call)
    for call_id, group in by_id.items():
        decided = [call for call in group if call.policy_decision is not None]
        assert len(decided) <= 1, (call_id, group)
        for call in group:
            if call not in decided:
                assert call.state is S.QUARANTINED, (call_id, group)


def check_refusal(case: Case, result: GateResult, harness: Harness) -> None:
    """(b) a refused response runs nothing that was not decided at its own item's end."""
    if result.fault is None:
        return
    if not case.item_mode:
        assert all(call.state is S.QUARANTINED for call in result.calls), result.calls
        assert not [entry for entry in harness.log if entry[0] in ("exec", "policy")]
    for call in result.calls:
        if call.state is not S.QUARANTINED:
            assert case.item_mode, call
            assert S.ITEM_TERMINAL in call.history, call


def check_run(case: Case, result: GateResult, harness: Harness, ledger: Ledger) -> None:
    for call in result.calls:
        check_history(call)
        assert call.run_id == case.run_id
        assert call.attempt == result.attempt
    check_records(case, result)
    check_executions(case, result, harness, ledger)
    check_shared_ids(result)
    check_refusal(case, result, harness)


# --------------------------------------------------------------------------------------------
# The oracle: what each call of an unmutated stream must end as
# --------------------------------------------------------------------------------------------

Outcomes = set[tuple[ToolCallState, str | None]]
#: What the accumulator itself finds wrong with a closed call's arguments.
ARGUMENT_PROBLEMS = frozenset({"invalid_json", "trailing_data"})


def _processed(case: Case, event_number: int) -> bool | None:
    """Whether the route read this event of ``case.events``: True, False, or None when the
    cut leaves its blank line one byte short (a CR seen, its LF not: either reading holds)."""
    if case.error_at is not None and case.route in ERROR_ENDS and event_number > case.error_at:
        return False
    if case.cut is None:
        return True
    end = case.ends[event_number]
    if end <= case.cut:
        return True
    if case.framing.newline == "\r\n" and end - 1 == case.cut:
        return None
    return False


def _event_of(case: Case, index: int, attribute: str) -> int:
    return next(n for n, event in enumerate(case.events) if index in getattr(event, attribute))


def _identity_event(case: Case, index: int) -> int:
    """The event that names a call: the one that opens it unless a later one does."""
    for number, event in enumerate(case.events):
        if index in event.identifies:
            return number
    return _event_of(case, index, "opens")


def _decided(case: Case, call: Planned, value: Any) -> tuple[ToolCallState, str | None]:
    answer = case.decisions.get(call.key_id, case.default_answer)
    if answer in ("approve", "approve_enum"):
        if call.name == "ping" and not case.ping_executor:
            return S.POLICY_APPROVED, "no_executor"
        if "boom" in repr(value):
            return S.EXECUTION_FAILED, "execution_error"
        return S.EXECUTED, None
    if answer == "deny":
        return S.POLICY_DENIED, "policy_denied"
    if answer == "needs_approval":
        return S.NEEDS_APPROVAL, None
    return S.POLICY_DENIED, "policy_error"


def _shared(calls: list[Planned]) -> set[str]:
    ids = [call.call_id for call in calls if call.call_id is not None]
    return {call_id for call_id in ids if ids.count(call_id) > 1}


def expected_faults(case: Case, calls: list[Planned], terminal_read: bool | None) -> set[Any]:
    """The fault codes the gate may report for an unmutated stream.

    A whole stream whose calls' arguments are not all exactly one JSON value under a success
    stop is a payload error (docs/users/outcomes.md), refused as a whole; duplicate ids refuse
    an otherwise accepted stream.
    """
    if any(call.check(case.route)[0] in ("invalid_json", "trailing_data") for call in calls):
        whole: Any = "payload_error"
    else:
        whole = "duplicate_tool_call_id" if _shared(calls) else None
    if case.fault == "error":
        return {"provider_error"}
    if case.fault == "omit_terminal":
        # Chat's [DONE] and Anthropic's message_stop come after the whole answer: without them
        # it is terminal_missing (still refused), unless its calls already make it a payload
        # error. Responses and Gemini end the answer in their terminal event.
        if case.route in (CHAT, ANTHROPIC):
            return {"payload_error" if whole == "payload_error" else "terminal_missing"}
        return {"truncated"}
    if case.fault == "cut":
        refused = {"timeout"} if case.ending == "timeout" else {"truncated"}
        if whole == "payload_error":
            # Judged once the stop that closes the calls was read, however the source ends.
            stop_read = _processed(case, next(n for n, e in enumerate(case.events) if e.stops))
            if stop_read is not False:
                return {whole} if stop_read else refused | {whole}
        at_marker = _cut_at_end_marker(case)
        if at_marker is not False:
            # The whole answer came and the source ended cleanly before its end marker: as
            # omit_terminal; one CR short of that, either reading holds.
            return {"terminal_missing"} if at_marker else refused | {"terminal_missing"}
        return refused | {whole} if terminal_read is None else refused
    return {whole}


def _cut_at_end_marker(case: Case) -> bool | None:
    """Whether a clean cut ends the body exactly where the end marker of a route that sends it
    after the whole answer (chat's [DONE], Anthropic's message_stop) begins: True, False, or
    None when it leaves the event before it one CR short of its end."""
    if case.cut is None or case.ending != "eof" or case.route not in (CHAT, ANTHROPIC):
        return False
    terminal = next((n for n, e in enumerate(case.events) if e.terminal), None)
    if not terminal:
        return False
    before = case.ends[terminal - 1]
    if case.cut == before:
        return True
    if case.framing.newline == "\r\n" and case.cut == before - 1:
        return None
    return False


def expected_disconnect(case: Case, fault: str | None) -> str | None:
    """Why the stream ended early: the source's exception type, ``eof`` for a clean close
    before the terminal event; None for a stream that ended at its last event (an in-stream
    error is not a disconnect)."""
    if case.fault == "omit_terminal":
        return "eof"
    if case.fault != "cut" or fault is None:
        return None
    terminal = next((n for n, e in enumerate(case.events) if e.terminal), None)
    terminal_read = terminal is not None and _processed(case, terminal) is not False
    if fault in ("payload_error", "duplicate_tool_call_id") and terminal_read:
        return None  # refused at its last event: the stream did end there
    return {"reset": "ConnectionResetError", "timeout": "TimeoutError"}.get(case.ending, "eof")


def check_oracle(case: Case, result: GateResult, claimed: dict[CallKey, str]) -> None:
    """Every call of an unmutated stream ends as the plan says, given the fault, the run_at
    mode and the keys earlier attempts already claimed, with their fingerprints: those come
    back ``REPLAYED`` when they are the same call, else quarantined as an identity collision
    (a mutated attempt may have run another call under the key)."""
    terminal = next((n for n, e in enumerate(case.events) if e.terminal), None)
    terminal_read = False if terminal is None else _processed(case, terminal)
    opened = [_processed(case, _event_of(case, call.index, "opens")) for call in case.opened]
    sure = opened.count(True)
    assert sure <= len(result.calls) <= sure + opened.count(None), (opened, result.calls)
    assert result.fault in expected_faults(case, case.opened, terminal_read), result.fault
    fault = result.fault
    shared = _shared(case.opened)
    assert result.disconnect_reason == expected_disconnect(case, fault), result
    for record in result.calls:
        call = case.opened[record.position]
        # A chat call's name and id may come after its first arguments: a cut between the two
        # leaves the call without them.
        identified = _processed(case, _identity_event(case, call.index))
        identity = {(call.name, call.call_id)} if identified else {(None, None)}
        if identified is None:
            identity.add((call.name, call.call_id))
        assert (record.tool_name, record.call_id) in identity, (record, call)
        closed = _processed(case, _event_of(case, call.index, "closes"))
        error, value = call.check(case.route)
        own: Outcomes = set()
        if fault is not None and not case.item_mode:
            # A refused response's calls are never parsed as complete calls: each keeps only
            # an argument problem its accumulator found, else takes the fault's code.
            own.add((S.QUARANTINED, error if error in ARGUMENT_PROBLEMS else fault))
        elif error is not None:
            own.add((S.QUARANTINED, error))
        else:
            state, error_class = _decided(case, call, value)
            if state in RAN and record.key in claimed:
                if claimed[record.key] == record.fingerprint():
                    state, error_class = S.REPLAYED, None
                else:
                    state, error_class = S.QUARANTINED, "identity_collision"
            own.add((state, error_class))
            if call.call_id in shared:
                own.add((S.QUARANTINED, "duplicate_tool_call_id"))  # another with its id went first
        allowed: Outcomes = set()
        if closed is not False:
            allowed |= own
        if closed is not True:
            allowed.add((S.QUARANTINED, fault))  # never closed: stopped by the fault
        assert (record.state, record.error_class) in allowed, (record, call, allowed)
        if case.route != GEMINI:
            if closed is True:
                assert record.buffer_bytes == call.text_bytes(), (record, call.text)
            elif record.state is S.QUARANTINED:
                assert record.buffer_bytes is not None
                assert record.buffer_bytes <= call.text_bytes(), (record, call.text)
    if case.fault in ("none", "unknown", "omit_terminal"):
        # Every call of the stream was named; of calls sharing an id that all pass their
        # checks, exactly one is decided at its item's end (none when waiting for the
        # response, which the shared id refuses).
        assert len(result.calls) == len(case.opened)
        for call_id in shared:
            group = [r for r in result.calls if r.call_id == call_id]
            passing = [r for r in group if case.opened[r.position].check(case.route)[0] is None]
            decided = [r for r in group if r.policy_decision is not None]
            if len(passing) == len(group) or not passing:
                assert len(decided) == (1 if passing and case.item_mode else 0), group


# --------------------------------------------------------------------------------------------
# The property: three attempts of one run on one ledger
# --------------------------------------------------------------------------------------------


def _claimed(results: Sequence[GateResult]) -> dict[CallKey, str]:
    """The keys attempts had the ledger claim (approved, with an executor), with the
    fingerprint of the call that claimed each first."""
    claimed: dict[CallKey, str] = {}
    for result in results:
        for call in result.calls:
            if S.POLICY_APPROVED in call.history and call.error_class != "no_executor":
                claimed.setdefault(call.key, call.fingerprint())
    return claimed


def check_case(case: Case, open_ledger: Callable[[], Ledger]) -> list[GateResult]:
    ledger = open_ledger()
    first, harness = run_gate(case, ledger, case.body, case.chunkings[0], case.ending)
    assert first.attempt == 1
    check_run(case, first, harness, ledger)
    if not case.mutated:
        check_oracle(case, first, {})

    # (e) The same body again, chunked otherwise, on the same ledger (a second gate; for
    # SQLite a second connection): nothing runs, what ran comes back REPLAYED.
    ledger = open_ledger()
    second, harness = run_gate(
        case, ledger, case.body, case.chunkings[1], case.ending, asynchronous=case.async_replay
    )
    assert second.attempt == 2
    check_run(case, second, harness, ledger)
    assert not [entry for entry in harness.log if entry[0] == "exec"], "ran again"
    assert second.fault == first.fault
    assert len(second.calls) == len(first.calls)
    shared = any(
        sum(other.call_id == call.call_id for other in first.calls) > 1
        for call in first.calls
        if call.call_id is not None
    )
    if not (case.item_mode and shared):
        for before, again in zip(first.calls, second.calls, strict=True):
            assert again.key == before.key
            if before.state in RAN:
                assert again.state is S.REPLAYED, (before, again)
                assert again.execution_status == before.execution_status
            else:
                assert (again.state, again.error_class) == (before.state, before.error_class)
    if not case.mutated:
        check_oracle(case, second, _claimed([first]))

    # A fresh attempt with the whole, clean stream: fresh accumulators (nothing of the faulted
    # attempt's buffers), and still nothing runs twice.
    clean = dataclasses.replace(
        case,
        events=case.clean_events,
        body=case.clean_body,
        ends=serialize(case.clean_events, case.framing)[1],
        fault="none",
        cut=None,
        ending="eof",
        error_at=None,
    )
    ledger = open_ledger()
    third, harness = run_gate(clean, ledger, clean.body, case.clean_chunking, "eof")
    assert third.attempt == 3
    check_run(clean, third, harness, ledger)
    check_oracle(clean, third, _claimed([first, second]))
    ran = [
        call.key for result in (first, second, third) for call in result.calls if call.state in RAN
    ]
    assert len(ran) == len(set(ran)), f"a call ran twice: {ran}"
    return [first, second, third]


@FUZZ_MORE
@given(data=st.data())
def test_gate_safety_properties_over_random_streams_faults_and_policies(
    data: st.DataObject,
) -> None:
    case = draw_case(data)
    ledger = MemoryLedger()
    check_case(case, lambda: ledger)


@settings(FUZZ, max_examples=max(10, EXAMPLES // 4))
@given(data=st.data())
def test_gate_safety_properties_on_the_sqlite_ledger(data: st.DataObject) -> None:
    """The same property on one SQLite file, each attempt through a connection of its own; the
    file then holds one row per claimed key, every one with its result, and no content."""
    case = draw_case(data)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "ledger.db")
        ledgers: list[SQLiteLedger] = []

        def open_ledger() -> Ledger:
            ledgers.append(SQLiteLedger(path))
            return ledgers[-1]

        try:
            results = check_case(case, open_ledger)
        finally:
            for ledger in ledgers:
                ledger.close()
        with sqlite3.connect(path) as db:
            rows = db.execute(
                "SELECT run_id, response_id, call_id, status FROM otelsse_calls"
            ).fetchall()
            attempts = db.execute("SELECT attempt FROM otelsse_attempts").fetchall()
        db.close()
        assert sorted(attempts) == [(1,), (2,), (3,)]
        assert {CallKey(*row[:3]) for row in rows} == set(_claimed(results))
        ran = {
            call.key: call.execution_status
            for r in results
            for call in r.calls
            if call.state in RAN
        }
        assert {CallKey(*row[:3]): row[3] for row in rows} == ran
        if not case.mutated:
            for name in os.listdir(directory):
                with open(os.path.join(directory, name), "rb") as file:
                    assert case.canary.encode() not in file.read(), f"content in {name}"


# --------------------------------------------------------------------------------------------
# Calls sharing an id, their items closing in the other order (found by the property)
# --------------------------------------------------------------------------------------------


def _shared_id_stream(route: str) -> list[Ev]:
    """Two calls with one provider id, the second opened closing first (both routes key their
    calls by item, so their events may interleave), then a clean end."""
    if route == RESPONSES:

        def item(out: int, arguments: str) -> dict[str, Any]:
            return {
                "type": "function_call",
                "id": f"fc_{out}",
                "call_id": "call_same",
                "name": "ping",
                "arguments": arguments,
            }

        response = {"id": "resp_1", "object": "response", "model": "gpt-x", "output": []}
        payloads: list[dict[str, Any]] = [
            {"type": "response.created", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": item(0, "")},
            {"type": "response.output_item.added", "output_index": 1, "item": item(1, "")},
            {"type": "response.output_item.done", "output_index": 1, "item": item(1, '{"n":1}')},
            {"type": "response.output_item.done", "output_index": 0, "item": item(0, '{"n":0}')},
            {"type": "response.completed", "response": {**response, "status": "completed"}},
        ]
    else:
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x"}

        def start(index: int) -> dict[str, Any]:
            block = {"type": "tool_use", "id": "toolu_same", "name": "ping", "input": {}}
            return {"type": "content_block_start", "index": index, "content_block": block}

        def delta(index: int, text: str) -> dict[str, Any]:
            partial = {"type": "input_json_delta", "partial_json": text}
            return {"type": "content_block_delta", "index": index, "delta": partial}

        payloads = [
            {"type": "message_start", "message": message},
            start(0),
            start(1),
            delta(1, '{"n":1}'),
            {"type": "content_block_stop", "index": 1},
            delta(0, '{"n":0}'),
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            {"type": "message_stop"},
        ]
    for number, payload in enumerate(payloads):
        if route == RESPONSES:
            payload["sequence_number"] = number
    return [Ev(payload, name=payload["type"]) for payload in payloads]


@pytest.mark.parametrize("route", sorted(ITEM_ROUTES))
@pytest.mark.parametrize("chunking", ["whole body", "event by event", "byte by byte"])
def test_calls_sharing_an_id_reach_the_policy_once_whichever_item_closes_first(
    route: str, chunking: str
) -> None:
    """Deciding each call at its item's end, the first of two calls sharing an id to close may
    run; the other is quarantined as a duplicate, never shown to the policy, whatever order
    the items closed in and however the bytes were read."""
    framing = Framing("\n", True, False, True, (), True)
    body, ends = serialize(_shared_id_stream(route), framing)
    if chunking == "whole body":
        chunks = [body]
    elif chunking == "event by event":
        chunks = [body[start:end] for start, end in itertools.pairwise([0, *ends])]
    else:
        chunks = [body[at : at + 1] for at in range(len(body))]
    seen: list[ToolCallView] = []
    ran: list[Any] = []

    def policy(view: ToolCallView) -> str:
        seen.append(view)
        return "approve"

    gate = ToolGate({"ping": None}, policy, MemoryLedger(), run_at="item")
    result = gate.run(chunks, route, execute={"ping": ran.append})
    assert result.fault == "duplicate_tool_call_id"
    assert len(seen) == 1, [(view.call_id, view.arguments) for view in seen]
    assert len(ran) == 1
    states = sorted((call.state.value, call.error_class) for call in result.calls)
    assert states == [("executed", None), ("quarantined", "duplicate_tool_call_id")], result.calls


# --------------------------------------------------------------------------------------------
# A chat call whose name and id come after its first arguments (found by the property)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("late", ["id", "name and id"])
def test_a_call_named_after_its_first_arguments_is_keyed_and_run_once_however_read(
    late: str,
) -> None:
    """Some OpenAI-compatible servers send a call's first argument bytes before its name and id
    (the route reads fragments by tool index). The call is the same call whichever way the
    bytes were chunked: same name, same id, so same ``CallKey``, and a replay of the stream
    on the same ledger finds it already run."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-x"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Ev:
        return Ev({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    early: dict[str, Any] = {"arguments": '{"path": '}
    if late == "id":
        early["name"] = "read_file"
    identity = {"name": "read_file", "arguments": '"a.txt"}'}
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "function": early}]}),
        chunk({"tool_calls": [{"index": 0, "id": "call_late", "function": identity}]}),
        chunk({}, "tool_calls"),
        Ev("[DONE]"),
    ]
    body, ends = serialize(events, Framing("\n", True, False, True, (), True))
    by_event = [body[start:end] for start, end in itertools.pairwise([0, *ends])]
    ledger = MemoryLedger()
    ran: list[Any] = []
    records: list[GateCall] = []
    for chunks in (by_event, [body]):
        gate = ToolGate({"read_file": TOOLS["read_file"]}, None, ledger)
        result = gate.run(chunks, CHAT, execute={"read_file": ran.append}, run_id="run-late")
        assert result.fault is None
        records.extend(result.calls)
    assert ran == [{"path": "a.txt"}], "the replay ran the call again"
    assert [(r.tool_name, r.call_id, r.state.value) for r in records] == [
        ("read_file", "call_late", "executed"),
        ("read_file", "call_late", "replayed"),
    ]


# --------------------------------------------------------------------------------------------
# A resumed Responses stream (found by the property: a call decided before its response id)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_at", ["response", "item"])
def test_a_resumed_responses_stream_never_runs_again_a_call_the_first_attempt_ran(
    run_at: str,
) -> None:
    """The first attempt reads a background response from its start and loses the connection
    after the call's item ended (``run_at="item"`` ran the call there). The retry resumes the
    same response after ``response.created`` (``GET /v1/responses/{id}?stream=true&
    starting_after=0``): the same call of the same response must not run again, and every
    record is keyed as its ledger entry is."""
    response = {"id": "resp_bg1", "object": "response", "model": "gpt-x", "output": []}
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file"}
    payloads: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**response, "status": "queued"}},
        {"type": "response.in_progress", "response": {**response, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0,
         "delta": '{"path": "a.txt"}'},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {**item, "arguments": '{"path": "a.txt"}', "status": "completed"}},
        {"type": "response.completed", "response": {**response, "status": "completed"}},
    ]  # fmt: skip
    events = [
        Ev({**payload, "sequence_number": number}, name=payload["type"])
        for number, payload in enumerate(payloads)
    ]
    framing = Framing("\n", True, False, True, (), True)
    first = serialize(events[:5], framing)  # the connection lost before the end
    resumed = serialize(events[1:], framing)  # starting_after=0
    ledger = MemoryLedger()
    ran: list[Any] = []
    results = []
    for body, ends in (first, resumed):
        chunks = [body[start:end] for start, end in itertools.pairwise([0, *ends])]
        gate = ToolGate({"read_file": TOOLS["read_file"]}, None, ledger, run_at=run_at)
        results.append(
            gate.run(chunks, RESPONSES, execute={"read_file": ran.append}, run_id="run-bg")
        )
    assert [result.fault for result in results] == ["truncated", None]
    assert ran == [{"path": "a.txt"}], "the resumed stream ran the call again"
    for result in results:
        for call in result.calls:
            assert call.response_id == "resp_bg1"
            if S.POLICY_APPROVED in call.history:
                assert ledger.get(call.key) is not None, call


def test_a_call_decided_at_its_item_end_sees_only_what_came_before_it_in_the_read() -> None:
    """Found by the property: the response's id arrives only after the call's item ended (its
    ``response.created`` unreadable: a payload error), in the same read or a later one. At the
    item's end the call has no id yet, so it waits for the response's end, where the stream's
    fault quarantines it: whole or event by event, the same decision, and nothing runs."""
    response = {"id": "resp_late", "object": "response", "model": "gpt-x", "output": []}
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file"}
    payloads: list[dict[str, Any]] = [
        {"type": None, "response": {**response, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0,
         "delta": '{"path": "a.txt"}'},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {**item, "arguments": '{"path": "a.txt"}', "status": "completed"}},
        {"type": "response.completed", "response": {**response, "status": "completed"}},
    ]  # fmt: skip
    events = [Ev({**payload, "sequence_number": n}) for n, payload in enumerate(payloads)]
    body, ends = serialize(events, Framing("\n", False, False, True, (), True))
    decisions = []
    for chunks in ([body], [body[a:b] for a, b in itertools.pairwise([0, *ends])]):
        ran: list[Any] = []
        gate = ToolGate({"read_file": TOOLS["read_file"]}, None, MemoryLedger(), run_at="item")
        result = gate.run(chunks, RESPONSES, execute={"read_file": ran.append})
        assert result.fault == "payload_error"
        assert ran == []
        decisions.append([(call.state, call.error_class) for call in result.calls])
    assert decisions[0] == decisions[1] == [(S.QUARANTINED, "payload_error")]


# --------------------------------------------------------------------------------------------
# Crashes: a real gate process killed (SIGKILL), then a fresh one on the same SQLite file
# --------------------------------------------------------------------------------------------

WORKER = Path(__file__).with_name("_crash_worker.py")
#: Upper bound of every wait of the crash tests (a process start, a signal, a run).
WAIT = 60.0
FIXTURES = {
    CHAT: "real/openai-chat-parallel-tool-calls.sse",
    RESPONSES: "real/openai-responses-function-call.sse",
    ANTHROPIC: "real/anthropic-text-and-two-tool-use.sse",
    GEMINI: "real/gemini-function-call.sse",
}


@dataclass
class Files:
    """One crash test's files: the ledger, the executor's marker and signal, the outputs."""

    root: Path

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.db"

    @property
    def marker(self) -> Path:
        return self.root / "marker.txt"

    @property
    def signal(self) -> Path:
        return self.root / "signal.txt"

    def markers(self) -> list[tuple[str, str]]:
        """(call id, the call's ledger status when its executor started), one per execution."""
        if not self.marker.exists():
            return []
        lines = self.marker.read_text(encoding="utf-8").splitlines()
        return [(line.split("\t")[0], line.split("\t")[1]) for line in lines]

    def rows(self) -> dict[str, str]:
        """The ledger file's calls: call id -> status (read by a connection of the test's)."""
        if not self.ledger.exists():
            return {}
        db = sqlite3.connect(self.ledger, timeout=WAIT)
        try:
            tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            if ("otelsse_calls",) not in tables:
                return {}
            return dict(db.execute("SELECT call_id, status FROM otelsse_calls").fetchall())
        finally:
            db.close()

    def attempts(self, run_id: str) -> int:
        if not self.ledger.exists():
            return 0
        db = sqlite3.connect(self.ledger, timeout=WAIT)
        try:
            query = "SELECT COUNT(*) FROM otelsse_attempts WHERE run_id = ?"
            return int(db.execute(query, (run_id,)).fetchone()[0])
        except sqlite3.OperationalError:
            return 0  # the tables are not there yet
        finally:
            db.close()


def spawn(
    files: Files, name: str, url: str, route: str, run_at: str, tools: list[str], *, block: bool
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, str(WORKER), "--ledger", str(files.ledger), "--url", url,
        "--route", route, "--run-id", "run-crash", "--tools", ",".join(tools),
        "--marker", str(files.marker), "--signal", str(files.signal), "--run-at", run_at,
        "--max-wait", str(2 * WAIT),
    ] + ["--block"] * block  # fmt: skip
    out_path, err_path = files.root / f"{name}.out", files.root / f"{name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, cwd=files.root)


def output(files: Files, name: str) -> str:
    return (files.root / f"{name}.out").read_text() + (files.root / f"{name}.err").read_text()


def wait_until(
    predicate: Callable[[], bool],
    process: subprocess.Popen[bytes],
    what: str,
    files: Files,
    name: str,
) -> None:
    """Poll ``predicate`` until it holds; fail if the process ended first or after ``WAIT``."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert process.poll() is None, f"the worker ended before {what}: {output(files, name)}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT} s: {output(files, name)}"
        time.sleep(0.01)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL: no handler, no cleanup, no flush of anything the process had not written."""
    os.kill(process.pid, signal.SIGKILL)
    assert waited(process.wait, WAIT) == -signal.SIGKILL


def reap(process: subprocess.Popen[bytes]) -> None:
    """Never leave a worker behind, whatever failed."""
    if process.poll() is None:
        process.kill()
        process.wait(WAIT)


def finish(files: Files, name: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait for a worker that runs to its end; its result line."""
    assert waited(process.wait, WAIT) == 0, output(files, name)
    lines = (files.root / f"{name}.out").read_text().splitlines()
    assert lines[0] == "READING", lines
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def restart(files: Files, url: str, route: str, run_at: str, tools: list[str]) -> dict[str, Any]:
    """A fresh gate process ("second") on the same ledger file and run id, reading ``url`` to
    its end: its result line."""
    second = spawn(files, "second", url, route, run_at, tools, block=False)
    try:
        return finish(files, "second", second)
    finally:
        reap(second)


def _expected_calls(route: str) -> tuple[bytes, list[str], list[str]]:
    """The fixture's body, its calls' ledger ids (the position when the provider sent none)
    and the names of its tools."""
    body = read_fixture(FIXTURES[route])
    calls = read_stream([body], route).tool_calls
    keys = [call.id if call.id is not None else f"#{n}" for n, call in enumerate(calls)]
    return body, keys, sorted({str(call.name) for call in calls})


@pytest.mark.e2e  # a gate process killed
@pytest.mark.parametrize(
    ("route", "run_at"),
    [(route, "response") for route in ROUTES] + [(route, "item") for route in sorted(ITEM_ROUTES)],
)
def test_a_gate_killed_between_decision_and_result_leaves_the_call_to_reconciliation(
    tmp_path: Path, route: str, run_at: str
) -> None:
    """The executor of the first call starts (the decision already on disk) and the process is
    killed there. A fresh gate process on the same file, same run id, same stream: that call
    comes back NEEDS_RECONCILIATION and is not run again; the others run once."""
    body, keys, tools = _expected_calls(route)
    files = Files(tmp_path)
    with SSEServer() as server:
        url = server.route(ROUTE_PATHS[route], Reply(body))
        first = spawn(files, "first", url, route, run_at, tools, block=True)
        try:
            wait_until(files.signal.exists, first, "executor start", files, "first")
            kill(first)
        finally:
            reap(first)
        # Durable before the tool ran; still decided, with no result, after the crash.
        assert files.markers() == [(keys[0], "decided")]
        assert files.rows() == {keys[0]: "decided"}
        result = restart(files, url, route, run_at, tools)
    assert result["fault"] is None
    assert result["attempt"] == 2
    records = result["calls"]
    assert [record["key"] for record in records] == keys
    crashed, *others = records
    assert crashed["state"] == "needs_reconciliation", crashed
    assert crashed["history"][-2:] == ["policy_approved", "needs_reconciliation"]
    assert crashed["execution_state"] == "decided"
    assert all(record["state"] == "executed" for record in others), others
    # Each call ran once: the crashed one never again, the others now.
    assert files.markers() == [(key, "decided") for key in keys]
    assert files.rows() == {keys[0]: "decided", **{key: "succeeded" for key in keys[1:]}}


@pytest.mark.e2e  # a gate process killed
@pytest.mark.parametrize("route", ROUTES)
def test_a_gate_killed_while_reading_decided_nothing_and_its_restart_runs_each_call_once(
    tmp_path: Path, route: str
) -> None:
    """The server stalls before the stream's terminal event; the gate process, reading, is
    killed. Nothing was decided: no ledger row, no execution. A fresh gate process on the same
    file, same run id, reading the whole stream, runs every call exactly once."""
    body, keys, tools = _expected_calls(route)
    stall_at = len(body) - len(split_events(body)[-1])  # just before the terminal event
    files = Files(tmp_path)
    with SSEServer() as server:
        stalled_url = server.route(ROUTE_PATHS[route], Reply(body, cut=stall_at, after_cut="stall"))
        whole_url = server.route("/whole" + ROUTE_PATHS[route], Reply(body))
        first = spawn(files, "first", stalled_url, route, "response", tools, block=False)
        try:
            # Reading: the server has sent all but the terminal event and the gate's attempt is
            # on record (the ledger is written before the first read).
            wait_until(server.stalled.is_set, first, "stall", files, "first")
            wait_until(lambda: files.attempts("run-crash") == 1, first, "attempt", files, "first")
            kill(first)
        finally:
            reap(first)
        assert files.markers() == []
        assert files.rows() == {}
        result = restart(files, whole_url, route, "response", tools)
    assert result["fault"] is None
    assert result["attempt"] == 2
    assert [record["key"] for record in result["calls"]] == keys
    assert all(record["state"] == "executed" for record in result["calls"]), result
    assert files.markers() == [(key, "decided") for key in keys]
    assert files.rows() == {key: "succeeded" for key in keys}
