"""Wire-exact SSE bodies with tool calls, one builder for every route that has them.

``build(route, parts, ...)`` writes the body a provider would send for ``parts`` (text pieces
and ``Call`` values, in stream order), shaped on the recorded fixtures in
``tests/fixtures/real/`` and on what the route modules (``otelsse/routes/*.py``) accept:

- ``openai.chat_completions`` (``openai-chat-parallel-tool-calls.sse``): ``chat.completion.chunk``
  objects; a call opens with ``delta.tool_calls[{index, id, type, function: {name,
  arguments: ""}}]`` and streams ``function.arguments`` fragments under its ``index``; the choice
  ends with ``finish_reason: "tool_calls"`` (``"stop"`` without calls), a usage chunk with no
  choices, then ``data: [DONE]``. LF framing.
- ``openai.responses`` (``openai-responses-function-call.sse``, with the ``sequence_number`` of
  the newer recordings): ``response.created``, ``response.in_progress``; text as a ``message``
  item (``output_item.added``, ``content_part.added``, ``output_text.delta``, ``...done``); a
  call as a ``function_call`` item (``output_item.added`` with ``id``/``call_id``/``name``,
  ``function_call_arguments.delta`` keyed by ``item_id``, ``function_call_arguments.done`` and
  ``output_item.done`` carrying the whole argument text as sent); ``response.completed``. LF.
- ``anthropic.messages`` (``anthropic-text-and-two-tool-use.sse``): ``message_start`` with the
  message id; a text block per run of text pieces; a ``tool_use`` block per call
  (``content_block_start`` with ``id``/``name``/``input: {}``, an empty ``partial_json`` first as
  recorded, then the fragments, ``content_block_stop``); ``ping`` after the first block start;
  ``message_delta`` with ``stop_reason: "tool_use"`` (``"end_turn"`` without calls);
  ``message_stop``. LF.
- ``gemini.generate_content`` (``gemini-function-call.sse``): one chunk per text piece and per
  call, each call a whole ``functionCall`` part with its ``args`` object (and its optional
  ``id``; the recording has none); a last chunk with an empty text part and
  ``finishReason: "STOP"`` (Gemini has no tool-specific stop). CRLF framing, as recorded.

Faults (each a switch of ``build``):

- ``error_before_terminal``: the provider's in-stream error where the terminal belongs, after
  every call's own end: chat ``data: {"error": {...}}`` then ``data: [DONE]`` (the shape
  ``synthetic/openai-chat-error-object-then-done.sse`` records); Responses ``event: error``
  instead of ``response.completed``; Anthropic ``event: error`` after ``message_delta``,
  instead of ``message_stop``; Gemini ``{"error": {...}}`` instead of the ``finishReason``
  chunk. Every call is complete (closed) when the error comes.
- ``omit_final``: the last event is not sent and the body ends cleanly: chat's ``[DONE]``,
  ``response.completed``, ``message_stop``, Gemini's ``finishReason`` chunk.
- ``malformed`` / ``trailing`` (indexes into the calls): that call's argument text is not JSON
  (a trailing comma before its closing brace) / is one JSON value followed by another.
  **Gemini**: arguments arrive as an ``args`` object inside the chunk's own JSON, so there is no
  argument text to corrupt on its own; the fault lands on the chunk that carries the call (a
  trailing comma in the chunk / a second JSON value after it). The route then refuses that
  event (``payload_error``): the call in it is never seen by the gate (it has no record), and
  every other call of the stream is quarantined.
- ``unknown_event``: an event the route does not know, right after the first argument fragment
  of the first call (Gemini, whose calls come whole: right after the first call's chunk):
  chat a named ``event: heartbeat`` with a chunk-less object, Responses a
  ``response.tool_progress.delta``, Anthropic a ``content_block_progress`` event for the open
  block, Gemini an object with neither candidates nor feedback.
- ``malformed_event``: the event carrying the first call's first argument fragment (Gemini:
  its chunk) is not JSON (a trailing comma): a malformed SSE message, not malformed arguments.
- ``late_fragment`` (indexes into the calls): one more argument fragment after that call has
  closed (any later argument bytes are trailing data): chat after
  the ``finish_reason`` chunk, Responses after ``function_call_arguments.done``, Anthropic after
  ``content_block_stop``. Gemini refuses: its calls come whole.
- ``multiline``: every JSON payload is written over several ``data:`` lines (pretty-printed,
  so that lines break between tokens only), with comment lines before and inside every event,
  a comment-only block between events, and the ``event:`` field after the data lines (as
  ``bedrock-mantle-responses-function-call.sse`` has it).
- ``interleave``: the calls stream in parallel: each call opens at its place in ``parts`` and
  its fragments are sent one per step, round-robin with the other open calls and between the
  text pieces that follow. Chat (keyed by ``index``) and Responses (keyed by ``item_id``)
  only; Anthropic streams one content block after another, so it refuses; for Gemini the
  whole of ``parts`` goes in one chunk, as its parallel function calls come.

``Stream.marks`` names every event with its end offset in the body, so a test can cut or
split at a known event; ``Stream.calls`` are the calls as sent (after any fault).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tests._helpers import ANTHROPIC, CHAT, GEMINI, RESPONSES, ROUTE_PATHS, ROUTES

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "GEMINI",
    "RESPONSES",
    "ROUTE_PATHS",
    "TOOL_ROUTES",
    "Call",
    "Mark",
    "Stream",
    "build",
    "call",
]

#: Every route whose contract has tool calls.
TOOL_ROUTES = ROUTES

_MODELS = {
    CHAT: "gpt-4o-mini-2024-07-18",
    RESPONSES: "gpt-4o-2024-08-06",
    ANTHROPIC: "claude-sonnet-4-20250514",
    GEMINI: "gemini-2.5-flash",
}
_RESPONSE_PREFIX = {CHAT: "chatcmpl-", RESPONSES: "resp_", ANTHROPIC: "msg_", GEMINI: ""}
_NEWLINE = {CHAT: "\n", RESPONSES: "\n", ANTHROPIC: "\n", GEMINI: "\r\n"}


@dataclass(frozen=True)
class Call:
    """One tool call as the model streams it: its provider id, tool name and argument text in
    the fragments it arrives in."""

    id: str
    name: str
    fragments: tuple[str, ...]

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)

    @property
    def byte_count(self) -> int:
        """UTF-8 bytes of the whole argument text."""
        return len(self.arguments.encode("utf-8"))

    def value(self) -> Any:
        """The arguments as the executor must see them."""
        return json.loads(self.arguments)


def call(call_id: str, name: str, arguments: Mapping[str, Any], pieces: int = 3) -> Call:
    """A call whose arguments (``json.dumps`` of ``arguments``, non-ASCII kept) arrive in
    ``pieces`` fragments of about equal length."""
    text = json.dumps(arguments, ensure_ascii=False)
    pieces = max(1, min(pieces, len(text)))
    step, extra = divmod(len(text), pieces)
    fragments, at = [], 0
    for index in range(pieces):
        size = step + (1 if index < extra else 0)
        fragments.append(text[at : at + size])
        at += size
    return Call(call_id, name, tuple(fragments))


@dataclass(frozen=True)
class Mark:
    """One event of a built body: its label and the offset just after its blank line."""

    label: str
    end: int


@dataclass(frozen=True)
class Stream:
    route: str
    body: bytes
    response_id: str
    #: The calls as sent, faults applied (what the gate must record for each).
    calls: tuple[Call, ...]
    marks: tuple[Mark, ...] = field(repr=False)

    def end_of(self, label: str) -> int:
        """The offset just after the event labelled ``label``."""
        for mark in self.marks:
            if mark.label == label:
                return mark.end
        raise KeyError(label)

    def labels(self) -> list[str]:
        return [mark.label for mark in self.marks]

    @property
    def path(self) -> str:
        return ROUTE_PATHS[self.route]


@dataclass(frozen=True)
class _Spec:
    """What ``build`` asks of a route's writer: the parts as sent (text pieces and calls, faults
    applied), the response id, and the switches a writer carries out itself."""

    parts: Sequence[str | Call]
    rid: str
    interleave: bool
    error: bool  # ``error_before_terminal``
    omit_final: bool
    unknown: bool  # ``unknown_event``
    gemini_ids: bool

    @property
    def calls(self) -> list[Call]:
        return [part for part in self.parts if isinstance(part, Call)]


@dataclass
class _Event:
    label: str
    payload: Any  # a JSON object, or raw data text (``[DONE]``)
    name: str | None = None
    raw_suffix: str = ""  # data appended after the serialized JSON (Gemini trailing data)
    corrupt: bool = False  # a trailing comma before the JSON's closing brace (Gemini)


def build(
    route: str,
    parts: Sequence[str | Call],
    *,
    response_id: str | None = None,
    interleave: bool = False,
    error_before_terminal: bool = False,
    omit_final: bool = False,
    malformed: Collection[int] = (),
    trailing: Collection[int] = (),
    unknown_event: bool = False,
    multiline: bool = False,
    malformed_event: bool = False,
    late_fragment: Collection[int] = (),
    gemini_ids: bool = True,
) -> Stream:
    """The body ``route``'s provider sends for ``parts`` (text pieces and calls in stream order),
    with the faults asked for (see the module docstring). ``gemini_ids``: whether Gemini's
    ``functionCall`` parts carry their optional ``id``."""
    if route not in TOOL_ROUTES:
        raise ValueError(f"no tool calls on route {route!r}")
    rid = response_id or _RESPONSE_PREFIX[route] + "gate0001"
    calls = [part for part in parts if isinstance(part, Call)]
    sent: list[Call] = []
    for index, one in enumerate(calls):
        if route != GEMINI:
            if index in malformed:
                one = _malformed(one)
            if index in trailing:
                one = _trailing(one)
        sent.append(one)
    sent_parts: list[str | Call] = []
    calls_iter = iter(sent)
    for part in parts:
        sent_parts.append(next(calls_iter) if isinstance(part, Call) else part)

    writer = {CHAT: _chat, RESPONSES: _responses, ANTHROPIC: _anthropic, GEMINI: _gemini}[route]
    spec = _Spec(
        sent_parts,
        rid=rid,
        interleave=interleave,
        error=error_before_terminal,
        omit_final=omit_final,
        unknown=unknown_event,
        gemini_ids=gemini_ids,
    )
    events = writer(spec)
    for index in late_fragment:
        _add_late_fragment(route, events, index)
    if route == RESPONSES:
        for number, event in enumerate(events):
            event.payload["sequence_number"] = number
    if malformed_event:
        first = "call:0" if route == GEMINI else "args:0:0"
        next(event for event in events if event.label.startswith(first)).corrupt = True
    if route == GEMINI:
        for event in events:
            carried = _call_index(event.label)
            if carried is not None and carried in malformed:
                event.corrupt = True
            if carried is not None and carried in trailing:
                event.raw_suffix = ' {"candidates": []}'
    body, marks = _serialize(events, newline=_NEWLINE[route], multiline=multiline, route=route)
    return Stream(route, body, rid, tuple(sent), tuple(marks))


# -- faults on the argument text ----------------------------------------------------------------


def _malformed(one: Call) -> Call:
    """``{"a": 1}`` -> ``{"a": 1,}``: a trailing comma, so not JSON at all."""
    last = one.fragments[-1]
    assert last.endswith("}"), "the builder corrupts a JSON object's closing brace"
    return replace(one, fragments=(*one.fragments[:-1], last[:-1] + ",", "}"))


def _trailing(one: Call) -> Call:
    """One complete JSON value, then another after it."""
    return replace(one, fragments=(*one.fragments, ' {"again": true}'))


#: What ``late_fragment`` sends after a call has closed.
LATE_FRAGMENT = ' {"path": "/etc/SECRET_late"}'


def _add_late_fragment(route: str, events: list[_Event], index: int) -> None:
    """One more argument fragment for call ``index`` after its close: chat after the choice's
    ``finish_reason`` chunk, Responses after ``function_call_arguments.done``, Anthropic after
    ``content_block_stop``."""
    if route == GEMINI:
        raise ValueError("Gemini calls come whole: no argument bytes can follow one")
    labels = [event.label for event in events]
    if route == CHAT:
        late = copy.deepcopy(events[labels.index("finish")])
        choice = late.payload["choices"][0]
        fragment = {"index": index, "function": {"arguments": LATE_FRAGMENT}}
        choice["delta"], choice["finish_reason"] = {"tool_calls": [fragment]}, None
        after = labels.index("finish")
    else:
        late = copy.deepcopy(events[labels.index(f"args:{index}:0")])
        if route == RESPONSES:
            late.payload["delta"] = LATE_FRAGMENT
            after = labels.index(f"args_done:{index}")
        else:
            late.payload["delta"]["partial_json"] = LATE_FRAGMENT
            after = labels.index(f"close:{index}")
    late.label = f"late:{index}"
    events.insert(after + 1, late)


# -- the routes --------------------------------------------------------------------------------


def _schedule(parts: Sequence[str | Call], interleave: bool) -> list[tuple[str, Any]]:
    """The order things are sent in: ``("text", piece)``, ``("open", i)``, ``("args", (i, j))``
    and ``("end", i)`` (a call's arguments are all sent)."""
    steps: list[tuple[str, Any]] = []
    index = 0
    if not interleave:
        for part in parts:
            if isinstance(part, Call):
                steps.append(("open", index))
                steps.extend(("args", (index, j)) for j in range(len(part.fragments)))
                steps.append(("end", index))
                index += 1
            else:
                steps.append(("text", part))
        return steps
    calls = [part for part in parts if isinstance(part, Call)]
    pending: dict[int, int] = {}  # open call -> next fragment

    def one_round() -> None:
        for i in list(pending):
            j = pending[i]
            if j < len(calls[i].fragments):
                steps.append(("args", (i, j)))
                pending[i] = j + 1
            if pending[i] >= len(calls[i].fragments):
                del pending[i]
                steps.append(("end", i))

    for part in parts:
        if isinstance(part, Call):
            steps.append(("open", index))
            pending[index] = 0
            index += 1
        else:
            steps.append(("text", part))
        one_round()
    while pending:
        one_round()
    return steps


def _insert_unknown(steps: list[_Event], unknown: _Event, calls: int) -> None:
    """Put ``unknown`` right after the first call's first argument fragment (its opening when it
    has none), or after the first event when there is no call."""
    if calls:
        for at, event in enumerate(steps):
            if event.label in ("args:0:0", "call:0"):
                steps.insert(at + 1, unknown)
                return
        for at, event in enumerate(steps):
            if event.label == "open:0":
                steps.insert(at + 1, unknown)
                return
    steps.insert(1, unknown)


def _chat(spec: _Spec) -> list[_Event]:
    parts, rid, calls = spec.parts, spec.rid, spec.calls

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": 1731368641,
            "model": _MODELS[CHAT],
            "system_fingerprint": "fp_9b78b61c52",
            "usage": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events = [_Event("start", chunk({"role": "assistant", "content": None}))]
    texts = 0
    for kind, value in _schedule(parts, spec.interleave):
        if kind == "text":
            events.append(_Event(f"text:{texts}", chunk({"content": value})))
            texts += 1
        elif kind == "open":
            one = calls[value]
            opening = {"name": one.name, "arguments": ""}
            fragment = {"index": value, "id": one.id, "type": "function", "function": opening}
            events.append(_Event(f"open:{value}", chunk({"tool_calls": [fragment]})))
        elif kind == "args":
            i, j = value
            fragment = {"index": i, "function": {"arguments": calls[i].fragments[j]}}
            events.append(_Event(f"args:{i}:{j}", chunk({"tool_calls": [fragment]})))
    finish = chunk({}, "tool_calls" if calls else "stop")
    events.append(_Event("finish", finish))
    usage = {"prompt_tokens": 75, "completion_tokens": 51, "total_tokens": 126}
    events.append(_Event("usage", {**chunk({}), "choices": [], "usage": usage}))
    if spec.unknown:
        heartbeat = {"object": "chat.completion.heartbeat", "created": 1731368641}
        _insert_unknown(events, _Event("unknown", heartbeat, name="heartbeat"), len(calls))
    if spec.error:
        failure = {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        events.append(_Event("error", {"error": failure}))
    if not spec.omit_final:
        events.append(_Event("terminal", "[DONE]"))
    return events


def _responses(spec: _Spec) -> list[_Event]:
    parts, rid, calls = spec.parts, spec.rid, spec.calls
    model = _MODELS[RESPONSES]

    def response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": 1743082657,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "usage": usage,
        }

    def typed(kind: str, body: dict[str, Any]) -> _Event:
        return _Event("", {"type": kind, **body}, name=kind)

    events: list[_Event] = []
    started = typed("response.created", {"response": response("in_progress", [], None)})
    started.label = "start"
    events.append(started)
    events.append(typed("response.in_progress", {"response": response("in_progress", [], None)}))
    output: list[Any] = []
    outputs: dict[int, int] = {}  # call -> output index
    message: dict[str, Any] | None = None  # the open message item, while text runs
    texts = 0
    items = 0  # output items added so far

    def close_message() -> None:
        nonlocal message
        if message is None:
            return
        where = {"item_id": message["id"], "output_index": message["index"], "content_index": 0}
        text = "".join(message["pieces"])
        part = {"type": "output_text", "annotations": [], "text": text}
        events.append(typed("response.output_text.done", {**where, "text": text}))
        events.append(typed("response.content_part.done", {**where, "part": part}))
        item = {
            "id": message["id"],
            "type": "message",
            "status": "completed",
            "content": [part],
            "role": "assistant",
        }
        events.append(
            typed("response.output_item.done", {"output_index": message["index"], "item": item})
        )
        output.append(item)
        message = None

    def function_item(i: int, status: str) -> dict[str, Any]:
        one = calls[i]
        return {
            "type": "function_call",
            "id": f"fc_{one.id}",
            "call_id": one.id,
            "name": one.name,
            "arguments": "" if status == "in_progress" else one.arguments,
            "status": status,
        }

    for kind, value in _schedule(parts, spec.interleave):
        if kind == "text":
            if message is None:
                index, items = items, items + 1
                message = {"id": f"msg_{rid}_{index}", "index": index, "pieces": []}
                added = {
                    "id": message["id"],
                    "type": "message",
                    "status": "in_progress",
                    "content": [],
                    "role": "assistant",
                }
                events.append(
                    typed("response.output_item.added", {"output_index": index, "item": added})
                )
                part = {"type": "output_text", "annotations": [], "text": ""}
                events.append(
                    typed(
                        "response.content_part.added",
                        {
                            "item_id": message["id"],
                            "output_index": index,
                            "content_index": 0,
                            "part": part,
                        },
                    )
                )
            delta = typed(
                "response.output_text.delta",
                {
                    "item_id": message["id"],
                    "output_index": message["index"],
                    "content_index": 0,
                    "delta": value,
                },
            )
            delta.label = f"text:{texts}"
            texts += 1
            message["pieces"].append(value)
            events.append(delta)
        elif kind == "open":
            close_message()
            index, items = items, items + 1
            outputs[value] = index
            opened = typed(
                "response.output_item.added",
                {"output_index": index, "item": function_item(value, "in_progress")},
            )
            opened.label = f"open:{value}"
            events.append(opened)
        elif kind == "args":
            i, j = value
            delta = typed(
                "response.function_call_arguments.delta",
                {
                    "item_id": f"fc_{calls[i].id}",
                    "output_index": outputs[i],
                    "delta": calls[i].fragments[j],
                },
            )
            delta.label = f"args:{i}:{j}"
            events.append(delta)
        elif kind == "end":
            if not spec.interleave:
                close_message()
            done = typed(
                "response.function_call_arguments.done",
                {
                    "item_id": f"fc_{calls[value].id}",
                    "output_index": outputs[value],
                    "arguments": calls[value].arguments,
                },
            )
            done.label = f"args_done:{value}"
            events.append(done)
            item = function_item(value, "completed")
            closed = typed(
                "response.output_item.done", {"output_index": outputs[value], "item": item}
            )
            closed.label = f"close:{value}"
            events.append(closed)
            output.append(item)
    close_message()
    for event in events:
        if not event.label:
            event.label = event.payload["type"]
    if spec.unknown:
        progress = typed(
            "response.tool_progress.delta",
            {"item_id": f"fc_{calls[0].id}" if calls else "", "output_index": 0, "delta": "…"},
        )
        progress.label = "unknown"
        _insert_unknown(events, progress, len(calls))
    if spec.error:
        failure = typed(
            "error",
            {"code": "server_error", "message": "Something went wrong", "param": None},
        )
        failure.label = "error"
        events.append(failure)
    elif not spec.omit_final:
        usage = {"input_tokens": 255, "output_tokens": 16, "total_tokens": 271}
        completed = typed("response.completed", {"response": response("completed", output, usage)})
        completed.label = "terminal"
        events.append(completed)
    return events  # ``build`` numbers them (``sequence_number``) once every event is in


def _anthropic(spec: _Spec) -> list[_Event]:
    parts, rid, calls = spec.parts, spec.rid, spec.calls
    if spec.interleave and len(calls) > 1:
        raise ValueError("Anthropic streams one content block after another: no interleaving")

    def typed(kind: str, body: dict[str, Any], label: str = "") -> _Event:
        return _Event(label or kind, {"type": kind, **body}, name=kind)

    message: dict[str, Any] = {
        "model": _MODELS[ANTHROPIC],
        "id": rid,
        "type": "message",
        "role": "assistant",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 506, "output_tokens": 5},
    }
    events = [typed("message_start", {"message": message}, "start")]
    block = -1
    text_open = False
    texts = 0

    def start(content: dict[str, Any], label: str = "") -> None:
        nonlocal block
        block += 1
        events.append(
            typed("content_block_start", {"index": block, "content_block": content}, label)
        )
        if block == 0:
            events.append(_Event("ping", {"type": "ping"}, name="ping"))

    def stop(label: str = "") -> None:
        events.append(typed("content_block_stop", {"index": block}, label))

    for kind, value in _schedule(parts, interleave=False):
        if kind == "text":
            if not text_open:
                start({"type": "text", "text": ""})
                text_open = True
            delta = {"index": block, "delta": {"type": "text_delta", "text": value}}
            events.append(typed("content_block_delta", delta, f"text:{texts}"))
            texts += 1
            continue
        if text_open:
            stop()
            text_open = False
        if kind == "open":
            one = calls[value]
            start(
                {"type": "tool_use", "id": one.id, "name": one.name, "input": {}}, f"open:{value}"
            )
            empty = {"index": block, "delta": {"type": "input_json_delta", "partial_json": ""}}
            events.append(typed("content_block_delta", empty))
        elif kind == "args":
            i, j = value
            piece = {"type": "input_json_delta", "partial_json": calls[i].fragments[j]}
            events.append(
                typed("content_block_delta", {"index": block, "delta": piece}, f"args:{i}:{j}")
            )
        elif kind == "end":
            stop(f"close:{value}")
    if text_open:
        stop()
    stop_reason = "tool_use" if calls else "end_turn"
    delta = {
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": 153},
    }
    events.append(typed("message_delta", delta, "finish"))
    if spec.unknown:
        progress = typed(
            "content_block_progress", {"index": 1, "progress": {"type": "tokens"}}, "unknown"
        )
        if calls:
            where = next(at for at, event in enumerate(events) if event.label == "open:0")
            progress.payload["index"] = events[where].payload["index"]
        _insert_unknown(events, progress, len(calls))
    if spec.error:
        failure = {"details": None, "type": "overloaded_error", "message": "Overloaded"}
        events.append(typed("error", {"error": failure, "request_id": "req_gate0001"}, "error"))
    elif not spec.omit_final:
        events.append(typed("message_stop", {}, "terminal"))
    return events


def _gemini(spec: _Spec) -> list[_Event]:
    parts, rid, calls = spec.parts, spec.rid, spec.calls
    usage = {"promptTokenCount": 29, "candidatesTokenCount": 10, "totalTokenCount": 39}

    def chunk(content_parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": content_parts, "role": "model"}}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": _MODELS[GEMINI],
            "responseId": rid,
        }

    def function_part(i: int) -> dict[str, Any]:
        one = calls[i]
        function: dict[str, Any] = {"name": one.name, "args": one.value()}
        if spec.gemini_ids:
            function = {"id": one.id, **function}
        part: dict[str, Any] = {"functionCall": function}
        if i == 0:
            part["thoughtSignature"] = "EpwICpkIAXLI2nxlU6gsWZaZ"  # as recorded, shortened
        return part

    events: list[_Event] = []
    index = texts = 0
    if spec.interleave:
        content: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part, Call):
                content.append(function_part(index))
                index += 1
            else:
                content.append({"text": part})
        events.append(_Event("call:" + ",".join(str(i) for i in range(index)), chunk(content)))
    else:
        for part in parts:
            if isinstance(part, Call):
                events.append(_Event(f"call:{index}", chunk([function_part(index)])))
                index += 1
            else:
                events.append(_Event(f"text:{texts}", chunk([{"text": part}])))
                texts += 1
    if spec.unknown:
        hint = {"serverHint": {"kind": "progress"}, "modelVersion": _MODELS[GEMINI]}
        if calls:
            at = next(at for at, event in enumerate(events) if event.label.startswith("call:"))
            events.insert(at + 1, _Event("unknown", hint))
        else:
            events.insert(1, _Event("unknown", hint))
    if spec.error:
        failure = {
            "code": 503,
            "message": "This model is currently experiencing high demand.",
            "status": "UNAVAILABLE",
        }
        events.append(_Event("error", {"error": failure}))
    elif not spec.omit_final:
        events.append(_Event("terminal", chunk([{"text": ""}], "STOP")))
    return events


def _call_index(label: str) -> int | None:
    """The call a Gemini chunk carries (the first, for a chunk of several)."""
    if not label.startswith("call:"):
        return None
    return int(label.split(":", 1)[1].split(",")[0])


# -- framing -----------------------------------------------------------------------------------


def _data_text(event: _Event, route: str, multiline: bool) -> str:
    if isinstance(event.payload, str):
        return event.payload
    if multiline:
        text = json.dumps(event.payload, ensure_ascii=False, indent=1)
    elif route == GEMINI:
        text = json.dumps(event.payload, ensure_ascii=False)  # ", " and ": ", as recorded
    else:
        text = json.dumps(event.payload, ensure_ascii=False, separators=(",", ":"))
    if event.corrupt:
        assert text.endswith("}"), "the builder corrupts a JSON object's closing brace"
        text = text[:-1] + ",}"
    return text + event.raw_suffix


def _lines(event: _Event, route: str, multiline: bool) -> Iterable[str]:
    data = _data_text(event, route, multiline).split("\n")
    if not multiline:
        if event.name is not None:
            yield f"event: {event.name}"
        yield from (f"data: {line}" for line in data)
        return
    yield ": keep-alive"
    middle = len(data) // 2
    for at, line in enumerate(data):
        if at == middle and at:
            yield ": a comment inside the event"
        # One space after the colon is taken off: a line's own indentation survives.
        yield f"data: {line}" if at % 2 else f"data:{line}"
    if event.name is not None:
        yield f"event:{event.name}"


def _serialize(
    events: list[_Event], *, newline: str, multiline: bool, route: str
) -> tuple[bytes, list[Mark]]:
    body = bytearray()
    marks = []
    for event in events:
        if multiline:
            body += f": OPENROUTER PROCESSING{newline}{newline}".encode()
        block = newline.join(_lines(event, route, multiline)) + newline + newline
        body += block.encode("utf-8")
        marks.append(Mark(event.label, len(body)))
    return bytes(body), marks
