"""Behavioural tests of the tool gate's parts: its state machine, the policy hook, executors,
the ledgers, ``run_at="item"``, its telemetry and the sources it reads.

Bodies are built here, per route, from a list of ``(call id, tool name, argument text)``; their
arguments and text carry sentinel strings that must never appear in a record, a span, a metric
point or a ledger row. HTTP tests use the real misbehaving server of ``tests/_server.py``;
telemetry tests a real OpenTelemetry SDK (``tests/_otel.py``); ledger tests real SQLite files,
threads and subprocesses. Every ``GateResult`` a test gets goes through ``lawful()``: each call's
history is a path of legal moves ending in a final state (or approved with no executor).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import trio
from opentelemetry.sdk.trace import ReadableSpan

from otelsse import (
    CallKey,
    Decision,
    GateCall,
    GateResult,
    IllegalTransition,
    Ledger,
    MemoryLedger,
    SQLiteLedger,
    ToolCallState,
    ToolCallView,
    ToolGate,
    semconv,
)
from otelsse._core.state import ToolCall
from otelsse._telemetry import FirstSeen
from otelsse.gate import FINAL_STATES
from otelsse.gate import _telemetry as gate_telemetry
from otelsse.gate._ledger import DECIDED, FAILED, SUCCEEDED
from otelsse.gate._states import TRANSITIONS as _TRANSITIONS
from tests._helpers import ANTHROPIC, CHAT, GEMINI, RESPONSES, ROUTE_PATHS, ROUTES, joined
from tests._otel import Telemetry, attribute_values
from tests._server import Reply, SSEServer

S = ToolCallState

#: Routes that prove a call complete before the response ends (``run_at="item"`` applies).
ITEM_ROUTES = (ANTHROPIC, RESPONSES)
#: Routes whose calls close only at the response's end (``run_at="item"`` falls back).
RESPONSE_ROUTES = (CHAT, GEMINI)
#: The response id each body below carries.
RESPONSE_IDS = {ANTHROPIC: "msg_g1", RESPONSES: "resp_g1", CHAT: "chatcmpl-g1", GEMINI: "gem_g1"}
REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
#: Generous bound for a client read where nothing is meant to stall.
READ_TIMEOUT = 10.0

#: Sentinels: in argument values, in the model's text, in executor outputs and exceptions.
ARG = "ARG-SENTINEL-5f1e"
TEXT = "TEXT-SENTINEL-c07a"
OUT = "OUT-SENTINEL-77d2"
SENTINELS = (ARG, TEXT, OUT)

# --------------------------------------------------------------------------------------------
# Bodies, per route
# --------------------------------------------------------------------------------------------

#: One call: (provider call id, tool name, argument text as streamed).
Call = tuple[str, str, str]


def args(path: str = ARG, **extra: Any) -> str:
    return json.dumps({"path": path, **extra})


#: Text, then two parallel calls (to two tools), each argument carrying the sentinel.
TWO_CALLS: list[Call] = [
    ("call_1", "read_file", args(ARG)),
    ("call_2", "write_file", args("notes.txt", content=ARG)),
]


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [text[:middle], text[middle:]]


def typed(kind: str, **fields: Any) -> bytes:
    """An event named by its ``type`` (Anthropic Messages, OpenAI Responses)."""
    return sse({"type": kind, **fields}, kind)


def anthropic_events(calls: list[Call], text: str = TEXT) -> list[bytes]:
    message: dict[str, Any] = {
        "id": "msg_g1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 1},
    }  # fmt: skip
    events = [
        typed("message_start", message=message),
        typed("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        typed("content_block_delta", index=0, delta={"type": "text_delta", "text": text}),
        typed("content_block_stop", index=0),
    ]
    for index, (call_id, name, arguments) in enumerate(calls, 1):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(typed("content_block_start", index=index, content_block=block))
        for part in halves(arguments):
            delta = {"type": "input_json_delta", "partial_json": part}
            events.append(typed("content_block_delta", index=index, delta=delta))
        events.append(typed("content_block_stop", index=index))
    stop = {"stop_reason": "tool_use", "stop_sequence": None}
    events.append(typed("message_delta", delta=stop, usage={"output_tokens": 9}))
    events.append(typed("message_stop"))
    return events


def responses_events(calls: list[Call], text: str = TEXT) -> list[bytes]:
    created = {"id": "resp_g1", "model": "gpt-x", "status": "in_progress", "output": []}
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = [
        typed("response.created", response=created),
        typed("response.output_item.added", output_index=0, item=message),
        typed("response.output_text.delta", output_index=0, item_id="msg_1", content_index=0,
              delta=text),
        typed("response.output_item.done", output_index=0, item=message),
    ]  # fmt: skip
    for index, (call_id, name, arguments) in enumerate(calls, 1):
        item_id = f"fc_{index}"
        item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
                "arguments": "", "status": "in_progress"}  # fmt: skip
        events.append(typed("response.output_item.added", output_index=index, item=item))
        for part in halves(arguments):
            events.append(
                typed("response.function_call_arguments.delta", item_id=item_id,
                      output_index=index, delta=part)
            )  # fmt: skip
        events.append(
            typed("response.function_call_arguments.done", item_id=item_id, output_index=index,
                  arguments=arguments)
        )  # fmt: skip
        done = {**item, "arguments": arguments, "status": "completed"}
        events.append(typed("response.output_item.done", output_index=index, item=done))
    completed = {"id": "resp_g1", "model": "gpt-x", "status": "completed", "output": [],
                 "usage": {"input_tokens": 3, "output_tokens": 9}}  # fmt: skip
    events.append(typed("response.completed", response=completed))
    return events


def chat_events(calls: list[Call], text: str = TEXT) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse({"id": "chatcmpl-g1", "object": "chat.completion.chunk", "model": "gpt-x",
                    "choices": [choice]})  # fmt: skip

    events = [chunk({"role": "assistant", "content": text})]
    for index, (call_id, name, arguments) in enumerate(calls):
        opened = {"index": index, "id": call_id, "type": "function",
                  "function": {"name": name, "arguments": ""}}  # fmt: skip
        events.append(chunk({"tool_calls": [opened]}))
        for part in halves(arguments):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            )
    events.append(chunk({}, "tool_calls"))
    events.append(sse("[DONE]"))
    return events


def gemini_events(calls: list[Call], text: str = TEXT) -> list[bytes]:
    def chunk(parts: list[dict[str, Any]], **candidate: Any) -> bytes:
        body = {"content": {"role": "model", "parts": parts}, "index": 0, **candidate}
        return sse({"candidates": [body], "responseId": "gem_g1", "modelVersion": "gemini-x"})

    events = [chunk([{"text": text}])]
    for call_id, name, arguments in calls:
        # Gemini sends a call whole, its arguments as an object.
        events.append(chunk([{"functionCall": {"id": call_id, "name": name,
                                               "args": json.loads(arguments)}}]))  # fmt: skip
    events.append(chunk([{"text": ""}], finishReason="STOP"))
    return events


EVENTS: dict[str, Callable[[list[Call]], list[bytes]]] = {
    ANTHROPIC: anthropic_events,
    RESPONSES: responses_events,
    CHAT: chat_events,
    GEMINI: gemini_events,
}


def body(route: str, calls: list[Call] = TWO_CALLS) -> bytes:
    return b"".join(EVENTS[route](calls))


def call_terminal(route: str, events: list[bytes], number: int) -> int:
    """The index in ``events`` of call ``number``'s (1-based) own terminal event."""
    marker = {
        ANTHROPIC: f'"type": "content_block_stop", "index": {number}}}',
        RESPONSES: f'"type": "response.function_call_arguments.done", "item_id": "fc_{number}"',
    }[route].encode()
    (found,) = [i for i, event in enumerate(events) if marker in event]
    return found


def offset_after(events: list[bytes], index: int) -> int:
    """The byte offset just after event ``index``."""
    return sum(len(event) for event in events[: index + 1])


# --------------------------------------------------------------------------------------------
# Sources, executors and checks
# --------------------------------------------------------------------------------------------


class Source:
    """A plain iterator of chunks: counts what it handed out, notes whether it was closed."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = list(chunks)
        self.sent = 0
        self.closed = False

    def __iter__(self) -> Source:
        return self

    def __next__(self) -> bytes:
        if self.sent == len(self._chunks):
            raise StopIteration
        self.sent += 1
        return self._chunks[self.sent - 1]

    def close(self) -> None:
        self.closed = True


class AsyncSource:
    """The async twin of ``Source``."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = list(chunks)
        self.sent = 0
        self.closed = False

    def __aiter__(self) -> AsyncSource:
        return self

    async def __anext__(self) -> bytes:
        if self.sent == len(self._chunks):
            raise StopAsyncIteration
        self.sent += 1
        return self._chunks[self.sent - 1]

    async def aclose(self) -> None:
        self.closed = True


class Recorder:
    """An executor that keeps the arguments it was called with and returns ``output``."""

    def __init__(self, output: Any = None) -> None:
        self.seen: list[Any] = []
        self.output = output

    def __call__(self, arguments: Any) -> Any:
        self.seen.append(arguments)
        return self.output


def assert_lawful(call: GateCall) -> None:
    """The call's history is a path of legal moves from RECEIVING to where it is now, and where
    it is now is a final state, or POLICY_APPROVED with no executor."""
    history = call.history
    assert history[0] is S.RECEIVING, history
    for before, after in itertools.pairwise(history):
        assert after in _TRANSITIONS.get(before, ()), (before, after, history)
    assert history[-1] is call.state
    if call.state is S.POLICY_APPROVED:
        assert call.error_class == "no_executor", call
        assert call.finished_at is not None
    else:
        assert call.state in FINAL_STATES, call
        assert call.final
        assert call.finished_at is not None


def lawful(result: GateResult) -> GateResult:
    for call in result.calls:
        assert_lawful(call)
    return result


def states(result: GateResult) -> list[ToolCallState]:
    return [call.state for call in result.calls]


def parsed(calls: list[Call]) -> list[Any]:
    return [json.loads(arguments) for _, _, arguments in calls]


def run(gate: ToolGate, route: str, calls: list[Call] = TWO_CALLS, **options: Any) -> GateResult:
    """Run ``gate`` on ``route``'s body of ``calls`` from a plain iterator (one event a chunk)."""
    return lawful(gate.run(Source(EVENTS[route](calls)), route, **options))


def arun(gate: ToolGate, route: str, calls: list[Call] = TWO_CALLS, **options: Any) -> GateResult:
    async def main() -> GateResult:
        return await gate.arun(AsyncSource(EVENTS[route](calls)), route, **options)

    return lawful(asyncio.run(main()))


@contextlib.contextmanager
def httpx_response(url: str) -> Iterator[httpx.Response]:
    """A streaming POST response of a fresh httpx client, closed on exit."""
    with (
        httpx.Client(timeout=READ_TIMEOUT) as client,
        client.stream("POST", url, json=REQUEST) as response,
    ):
        yield response


@contextlib.asynccontextmanager
async def httpx_async_response(url: str) -> AsyncIterator[httpx.Response]:
    """The async twin of ``httpx_response`` (asyncio or trio)."""
    async with (
        httpx.AsyncClient(timeout=READ_TIMEOUT) as client,
        client.stream("POST", url, json=REQUEST) as response,
    ):
        yield response


def no_sentinel(*texts: str) -> None:
    joined = "\n".join(texts)
    for sentinel in SENTINELS:
        assert sentinel not in joined


# --------------------------------------------------------------------------------------------
# 1. The state machine
# --------------------------------------------------------------------------------------------

#: The gate's machine as docs/users/gate.md draws it, written out independently of ``_TRANSITIONS``.
DOCUMENTED_MOVES = {
    (S.RECEIVING, S.ITEM_OPEN),
    (S.ITEM_OPEN, S.ITEM_TERMINAL),
    (S.ITEM_TERMINAL, S.PARSED),
    (S.PARSED, S.SCHEMA_VALID),
    (S.SCHEMA_VALID, S.POLICY_APPROVED),
    (S.SCHEMA_VALID, S.POLICY_DENIED),
    (S.SCHEMA_VALID, S.NEEDS_APPROVAL),
    (S.POLICY_APPROVED, S.EXECUTED),
    (S.POLICY_APPROVED, S.EXECUTION_FAILED),
    (S.POLICY_APPROVED, S.NEEDS_RECONCILIATION),
    (S.POLICY_APPROVED, S.REPLAYED),
    *((before, S.QUARANTINED) for before in
      (S.RECEIVING, S.ITEM_OPEN, S.ITEM_TERMINAL, S.PARSED, S.SCHEMA_VALID)),
    (S.POLICY_APPROVED, S.QUARANTINED),  # identity_collision: another call holds its key
}  # fmt: skip
DOCUMENTED_FINAL = {
    S.EXECUTED, S.QUARANTINED, S.POLICY_DENIED, S.NEEDS_APPROVAL, S.EXECUTION_FAILED,
    S.NEEDS_RECONCILIATION, S.REPLAYED,
}  # fmt: skip


def path_to(target: ToolCallState) -> list[ToolCallState]:
    """The moves from RECEIVING to ``target`` (breadth first over the table)."""
    paths: dict[ToolCallState, list[ToolCallState]] = {S.RECEIVING: []}
    queue = collections.deque([S.RECEIVING])
    while queue:
        state = queue.popleft()
        for after in sorted(_TRANSITIONS.get(state, ()), key=lambda s: s.value):
            if after not in paths:
                paths[after] = [*paths[state], after]
                queue.append(after)
    return paths[target]


def record_at(state: ToolCallState) -> GateCall:
    record = GateCall(ToolCall("call_x", "read_file", None), 0, "run-sm", 1)
    for move in path_to(state):
        record.advance(move)
    assert record.state is state
    return record


def test_the_table_is_the_documented_machine() -> None:
    table = {(before, after) for before, afters in _TRANSITIONS.items() for after in afters}
    assert table == DOCUMENTED_MOVES


def test_final_states_are_exactly_those_without_a_row() -> None:
    assert set(FINAL_STATES) == DOCUMENTED_FINAL
    assert set(_TRANSITIONS) | set(FINAL_STATES) == set(ToolCallState)
    assert not set(_TRANSITIONS) & set(FINAL_STATES)


def test_every_state_is_reachable_from_receiving() -> None:
    for state in ToolCallState:
        assert path_to(state) or state is S.RECEIVING


def machine(moves: set[tuple[ToolCallState, ToolCallState]]) -> list[str]:
    """``moves`` as one line per state, ``before -> after, after``: a failure shows the diff."""
    return [
        f"{before.value} -> {', '.join(sorted(a.value for b, a in moves if b is before))}"
        for before in ToolCallState
    ]


def test_a_move_is_legal_exactly_when_the_table_has_it() -> None:
    """Every pair of states tried on a record: a legal move changes its state and history (and
    its finality), an illegal one raises ``IllegalTransition`` and changes nothing."""
    moved = set()
    for before in ToolCallState:
        for after in ToolCallState:
            record = record_at(before)
            history = list(record.history)
            try:
                record.advance(after)
            except IllegalTransition:
                assert (record.state, record.history) == (before, history), (before, after)
                continue
            assert (record.state, record.history) == (after, [*history, after])
            assert record.final is (after in FINAL_STATES)
            moved.add((before, after))
    assert machine(moved) == machine(DOCUMENTED_MOVES)


@pytest.mark.parametrize("final", sorted(DOCUMENTED_FINAL, key=str), ids=str)
def test_a_final_state_has_no_way_out(final: ToolCallState) -> None:
    record = record_at(final)
    assert record.final
    assert record.finished_at is not None
    for after in ToolCallState:
        with pytest.raises(IllegalTransition):
            record.advance(after)
    with pytest.raises(IllegalTransition):
        record.quarantine("truncated")
    assert record.state is final


# --------------------------------------------------------------------------------------------
# 2. The policy hook
# --------------------------------------------------------------------------------------------

ANSWERS: list[Any] = ["approve", "deny", "needs_approval", *Decision]
#: Final state and error class for each decision.
DECIDES = {
    "approve": (S.EXECUTED, None),
    "deny": (S.POLICY_DENIED, "policy_denied"),
    "needs_approval": (S.NEEDS_APPROVAL, None),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("answer", ANSWERS, ids=repr)
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_a_policy_answer_decides_every_call(route: str, answer: Any, dialect: str) -> None:
    executor = Recorder(OUT)
    if dialect == "sync":
        gate = ToolGate(policy=lambda view: answer)
        result = run(gate, route, execute={"read_file": executor, "write_file": executor})
    else:

        async def policy(view: ToolCallView) -> Any:
            await asyncio.sleep(0)
            return answer

        gate = ToolGate(policy=policy)
        result = arun(gate, route, execute={"read_file": executor, "write_file": executor})
    value = Decision(answer).value
    state, error_class = DECIDES[value]
    assert states(result) == [state, state]
    assert [call.policy_decision for call in result.calls] == [value, value]
    assert [call.error_class for call in result.calls] == [error_class, error_class]
    assert executor.seen == (parsed(TWO_CALLS) if value == "approve" else [])
    assert [call.output for call in result.calls] == [OUT if value == "approve" else None] * 2


def test_an_async_policy_under_trio_decides() -> None:
    seen: list[str] = []

    async def policy(view: ToolCallView) -> str:
        await trio.sleep(0)
        seen.append(view.call_id)
        return "deny" if view.name == "write_file" else "approve"

    executor = Recorder()
    gate = ToolGate(policy=policy)

    async def main() -> GateResult:
        return await gate.arun(AsyncSource(EVENTS[ANTHROPIC](TWO_CALLS)), ANTHROPIC,
                               execute={"read_file": executor, "write_file": executor})  # fmt: skip

    result = lawful(trio.run(main))
    assert seen == ["call_1", "call_2"]
    assert states(result) == [S.EXECUTED, S.POLICY_DENIED]
    assert executor.seen == parsed(TWO_CALLS)[:1]


def _raises(view: ToolCallView) -> Any:
    raise ValueError(f"policy broke on {view.arguments}")


BROKEN_POLICIES: dict[str, Callable[[ToolCallView], Any]] = {
    "raises": _raises,
    "returns-None": lambda view: None,
    "returns-True": lambda view: True,
    "returns-1": lambda view: 1,
    "returns-APPROVE": lambda view: "APPROVE",
    "returns-yes": lambda view: "yes",
    "returns-object": lambda view: object(),
    "returns-a-list": lambda view: ["approve"],
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("broken", list(BROKEN_POLICIES))
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_a_policy_that_fails_denies(route: str, broken: str, dialect: str) -> None:
    executor = Recorder()
    gate = ToolGate(policy=BROKEN_POLICIES[broken])
    execute = {"read_file": executor, "write_file": executor}
    result = (run if dialect == "sync" else arun)(gate, route, execute=execute)
    assert states(result) == [S.POLICY_DENIED, S.POLICY_DENIED]
    assert [call.error_class for call in result.calls] == ["policy_error"] * 2
    assert [call.policy_decision for call in result.calls] == ["deny"] * 2
    assert executor.seen == []
    no_sentinel(*(json.dumps(call.record()) for call in result.calls))


def test_an_async_policy_that_raises_denies_under_arun() -> None:
    async def policy(view: ToolCallView) -> str:
        raise RuntimeError("no")

    executor = Recorder()
    result = arun(ToolGate(policy=policy), RESPONSES, execute={"read_file": executor})
    assert [(c.state, c.error_class) for c in result.calls] == [
        (S.POLICY_DENIED, "policy_error"), (S.QUARANTINED, "unregistered_tool"),
    ]  # fmt: skip
    assert executor.seen == []


@pytest.mark.parametrize("route", ROUTES)
def test_an_async_policy_given_to_run_denies_and_never_runs(route: str) -> None:
    body_ran: list[str] = []

    async def policy(view: ToolCallView) -> str:
        body_ran.append(view.call_id)
        return "approve"

    executor = Recorder()
    gate = ToolGate(policy=policy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(gate, route, execute={"read_file": executor, "write_file": executor})
        gc.collect()  # a coroutine never awaited warns when it is collected
    assert [str(w.message) for w in caught] == []
    assert body_ran == []
    assert executor.seen == []
    assert [(c.state, c.error_class) for c in result.calls] == [
        (S.POLICY_DENIED, "policy_error")
    ] * 2


@pytest.mark.parametrize("route", ROUTES)
def test_the_policy_sees_name_arguments_and_ids_and_its_repr_hides_arguments(route: str) -> None:
    views: list[ToolCallView] = []

    def policy(view: ToolCallView) -> Decision:
        views.append(view)
        return Decision.APPROVE

    ledger = MemoryLedger()
    executor = Recorder()
    gate = ToolGate(policy=policy, ledger=ledger)
    execute = {"read_file": executor, "write_file": executor}
    first = run(gate, route, execute=execute, run_id="run-view")
    second = run(gate, route, execute=execute, run_id="run-view")
    assert states(first) == [S.EXECUTED, S.EXECUTED]
    assert states(second) == [S.REPLAYED, S.REPLAYED]  # asked again, never run again
    expected = [
        (name, json.loads(arguments), call_id, RESPONSE_IDS[route], "run-view", attempt)
        for attempt in (1, 2)
        for call_id, name, arguments in TWO_CALLS
    ]
    got = [(v.name, v.arguments, v.call_id, v.response_id, v.run_id, v.attempt) for v in views]
    assert got == expected
    assert {view.kind for view in views} == {"function"}
    for view in views:
        assert ARG not in repr(view)
        assert ARG not in str(view)
        assert "call_" in repr(view)  # the ids are shown
        with pytest.raises(AttributeError):
            view.name = "other"  # type: ignore[misc]


def inside(root: Path, path: str) -> bool:
    return (root / path).resolve().is_relative_to(root.resolve())


@pytest.mark.parametrize("route", ROUTES)
def test_a_path_policy_refuses_paths_outside_the_workdir(route: str, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("hello")
    escaped = tmp_path / "escaped.txt"
    absolute = tmp_path / "absolute.txt"

    def policy(view: ToolCallView) -> str:
        return "approve" if inside(workdir, view.arguments["path"]) else "deny"

    def read_file(arguments: dict[str, str]) -> str:
        return (workdir / arguments["path"]).read_text()

    def write_file(arguments: dict[str, str]) -> int:
        return (workdir / arguments["path"]).write_text(arguments["content"])

    calls: list[Call] = [
        ("call_r", "read_file", args("notes.txt")),
        ("call_w", "write_file", args("out.txt", content=ARG)),
        ("call_up", "write_file", args("../escaped.txt", content=ARG)),
        ("call_abs", "write_file", args(str(absolute), content=ARG)),
        ("call_sneak", "read_file", args("sub/../../escaped.txt")),
    ]
    gate = ToolGate(policy=policy, ledger=SQLiteLedger(tmp_path / "ledger.db"))
    result = run(gate, route, calls, execute={"read_file": read_file, "write_file": write_file})
    assert states(result) == [
        S.EXECUTED, S.EXECUTED, S.POLICY_DENIED, S.POLICY_DENIED, S.POLICY_DENIED,
    ]  # fmt: skip
    assert result.calls[0].output == "hello"
    assert (workdir / "out.txt").read_text() == ARG
    assert not escaped.exists()
    assert not absolute.exists()


# --------------------------------------------------------------------------------------------
# 3. Executors
# --------------------------------------------------------------------------------------------


class CustomBoom(RuntimeError):
    pass


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_the_executor_output_is_kept_in_memory_only(route: str, dialect: str) -> None:
    output = {"content": OUT}

    async def write_file(arguments: Any) -> str:
        await asyncio.sleep(0)
        return OUT

    read_file = Recorder(output)
    if dialect == "sync":
        result = run(
            ToolGate(), route, execute={"read_file": read_file, "write_file": Recorder(OUT)}
        )
    else:
        result = arun(ToolGate(), route, execute={"read_file": read_file, "write_file": write_file})
    assert states(result) == [S.EXECUTED, S.EXECUTED]
    assert result.calls[0].output is output
    assert result.calls[1].output == OUT
    assert result.executed == result.calls
    for call in result.calls:
        assert call.execution_status == "succeeded"
        no_sentinel(json.dumps(call.record()), repr(call))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_an_executor_that_raises_fails_its_call_only(
    route: str, store: str, tmp_path: Path
) -> None:
    def read_file(arguments: Any) -> str:
        raise CustomBoom(f"could not read {arguments['path']}")

    ledger: Ledger = MemoryLedger() if store == "memory" else SQLiteLedger(tmp_path / "l.db")
    write_file = Recorder(OUT)
    gate = ToolGate(ledger=ledger)
    result = run(gate, route, execute={"read_file": read_file, "write_file": write_file})
    failed, executed = result.calls
    assert (failed.state, executed.state) == (S.EXECUTION_FAILED, S.EXECUTED)
    assert failed.exception_type == "CustomBoom"
    assert failed.error_class == "execution_error"
    assert failed.execution_status == "failed"
    assert failed.output is None
    entry = ledger.get(failed.key)
    assert entry is not None
    assert entry.status == FAILED
    assert entry.finished_at is not None
    assert entry.error_class == "CustomBoom"
    assert write_file.seen == parsed(TWO_CALLS)[1:]
    no_sentinel(json.dumps(failed.record()), repr(entry))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("run_at", ["response", "item"])
def test_an_interrupted_executor_leaves_its_call_to_reconcile(
    route: str, store: str, run_at: str, tmp_path: Path
) -> None:
    def interrupted(arguments: Any) -> None:
        raise KeyboardInterrupt

    path = tmp_path / "ledger.db"
    ledger: Ledger = MemoryLedger() if store == "memory" else SQLiteLedger(path)
    gate = ToolGate(ledger=ledger, run_at=run_at)
    write_file = Recorder()
    with pytest.raises(KeyboardInterrupt):
        gate.run(Source(EVENTS[route](TWO_CALLS)), route, run_id="run-ki",
                 execute={"read_file": interrupted, "write_file": write_file})  # fmt: skip
    assert write_file.seen == []
    key = CallKey("run-ki", RESPONSE_IDS[route], "call_1")
    entry = ledger.get(key)
    assert entry is not None
    assert entry.status == DECIDED
    assert entry.finished_at is None
    assert ledger.get(CallKey("run-ki", RESPONSE_IDS[route], "call_2")) is None

    # The restart: a new gate (and, for SQLite, a new process's view of the file).
    again: Ledger = ledger if store == "memory" else SQLiteLedger(path)
    read_file = Recorder()
    result = run(ToolGate(ledger=again), route, run_id="run-ki",
                 execute={"read_file": read_file, "write_file": write_file})  # fmt: skip
    assert result.attempt == 2
    assert states(result) == [S.NEEDS_RECONCILIATION, S.EXECUTED]
    assert result.calls[0].execution_status == DECIDED
    assert read_file.seen == []
    assert write_file.seen == parsed(TWO_CALLS)[1:]
    entry = again.get(key)
    assert entry is not None
    assert entry.status == DECIDED


@pytest.mark.parametrize("route", ROUTES)
def test_an_approved_call_without_executor_stays_approved(route: str) -> None:
    ledger = MemoryLedger()
    executor = Recorder()
    gate = ToolGate(tools={"read_file": None, "write_file": None}, ledger=ledger)
    result = run(gate, route, execute={"read_file": executor})
    executed, waiting = result.calls
    assert executed.state is S.EXECUTED
    assert waiting.state is S.POLICY_APPROVED
    assert not waiting.final
    assert waiting.error_class == "no_executor"
    assert waiting.policy_decision == "approve"
    assert waiting.execution_status is None
    assert ledger.get(waiting.key) is None  # never claimed: nothing ran
    assert executor.seen == parsed(TWO_CALLS)[:1]


def test_an_async_executor_given_to_run_is_refused_before_reading() -> None:
    async def write_file(arguments: Any) -> None:
        raise AssertionError("never called")

    source = Source(EVENTS[ANTHROPIC](TWO_CALLS))
    ledger = MemoryLedger()
    gate = ToolGate(ledger=ledger)
    with pytest.raises(TypeError, match="write_file"):
        gate.run(source, ANTHROPIC, run_id="run-te",
                 execute={"read_file": Recorder(), "write_file": write_file})  # fmt: skip
    assert source.sent == 0
    assert run(gate, ANTHROPIC, execute={"read_file": Recorder()}, run_id="run-te").attempt == 1


# --------------------------------------------------------------------------------------------
# 4. Ledgers
# --------------------------------------------------------------------------------------------


class Store:
    """One ledger store, opened as many times as a test needs: the same ``MemoryLedger``, or a
    new ``SQLiteLedger`` on the same file (another process's view of it)."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self._memory = MemoryLedger()
        self._opened: list[SQLiteLedger] = []

    def open(self) -> Ledger:
        if self.kind == "memory":
            return self._memory
        ledger = SQLiteLedger(self.path)
        self._opened.append(ledger)
        return ledger

    def close(self) -> None:
        for ledger in self._opened:
            ledger.close()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = Store(request.param, tmp_path / "ledger.db")
    yield opened
    opened.close()


KEY = CallKey("run-1", "resp-1", "call-1")


def test_claim_returns_none_once_then_the_entry(store: Store) -> None:
    ledger = store.open()
    assert ledger.get(KEY) is None
    assert ledger.claim(KEY, attempt=1, tool_name="write_file", fingerprint="f1") is None
    found = ledger.claim(KEY, attempt=5, tool_name="other", fingerprint="f2")
    assert found is not None
    assert (found.key, found.attempt, found.tool_name, found.status, found.error_class,
            found.fingerprint) == (KEY, 1, "write_file", DECIDED, None, "f1")  # fmt: skip
    assert found.finished_at is None
    assert found.decided_at > 0
    ledger.finish(KEY, SUCCEEDED)
    for view in (ledger, store.open()):
        entry = view.claim(KEY, attempt=2, tool_name="write_file", fingerprint="f1")
        assert entry is not None
        assert entry.status == SUCCEEDED
        assert entry.fingerprint == "f1"
        assert entry.attempt == 1
        assert entry.finished_at is not None
        assert entry.finished_at >= entry.decided_at
    # Each part of the key is part of the identity.
    for other in (CallKey("run-2", "resp-1", "call-1"), CallKey("run-1", "resp-2", "call-1"),
                  CallKey("run-1", "resp-1", "call-2")):  # fmt: skip
        assert ledger.claim(other, attempt=1, tool_name="write_file", fingerprint="f1") is None


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("second_gate", [False, True], ids=["same-gate", "second-gate"])
def test_a_replayed_stream_never_executes_twice(
    store: Store, route: str, second_gate: bool
) -> None:
    executor = Recorder(OUT)
    execute = {"read_file": executor, "write_file": executor}
    gate = ToolGate(ledger=store.open())
    first = run(gate, route, execute=execute, run_id="run-replay")
    assert states(first) == [S.EXECUTED, S.EXECUTED]
    again = ToolGate(ledger=store.open()) if second_gate else gate
    replayed = run(again, route, execute=execute, run_id="run-replay")
    assert states(replayed) == [S.REPLAYED, S.REPLAYED]
    assert [call.execution_status for call in replayed.calls] == [SUCCEEDED, SUCCEEDED]
    assert [call.output for call in replayed.calls] == [None, None]
    assert replayed.attempt == 2
    assert executor.seen == parsed(TWO_CALLS)  # once each, from the first run only
    # Another run id is another run: it executes.
    assert states(run(again, route, execute=execute, run_id="run-other")) == [S.EXECUTED] * 2


def test_a_replayed_failure_is_replayed_not_retried(store: Store) -> None:
    attempts: list[Any] = []

    def read_file(arguments: Any) -> None:
        attempts.append(arguments)
        raise CustomBoom

    execute = {"read_file": read_file, "write_file": Recorder()}
    first = run(ToolGate(ledger=store.open()), RESPONSES, execute=execute, run_id="run-f")
    second = run(ToolGate(ledger=store.open()), RESPONSES, execute=execute, run_id="run-f")
    assert states(first) == [S.EXECUTION_FAILED, S.EXECUTED]
    assert states(second) == [S.REPLAYED, S.REPLAYED]
    assert second.calls[0].execution_status == FAILED
    assert len(attempts) == 1


def test_attempts_are_numbered_per_run_and_persist(store: Store) -> None:
    gate = ToolGate(ledger=store.open())
    execute = {"read_file": Recorder(), "write_file": Recorder()}
    numbers = [run(gate, CHAT, execute=execute, run_id="run-a").attempt for _ in range(3)]
    assert numbers == [1, 2, 3]
    assert run(gate, CHAT, execute=execute, run_id="run-b").attempt == 1
    reopened = ToolGate(ledger=store.open())
    assert run(reopened, CHAT, execute=execute, run_id="run-a").attempt == 4
    assert run(reopened, CHAT, execute=execute, run_id="run-b").attempt == 2
    generated = run(reopened, CHAT, execute=execute)
    assert generated.attempt == 1
    assert generated.run_id not in ("run-a", "run-b")


def test_attempt_numbers_reach_the_records_and_the_policy(store: Store) -> None:
    seen: list[int] = []

    def policy(view: ToolCallView) -> str:
        seen.append(view.attempt)
        return "needs_approval"

    gate = ToolGate(policy=policy, ledger=store.open())
    results = [run(gate, GEMINI, execute={"read_file": Recorder()}, run_id="r") for _ in range(3)]
    assert [[call.attempt for call in result.calls] for result in results] == [
        [1, 1],
        [2, 2],
        [3, 3],
    ]
    assert seen == [1, 2, 3]  # write_file is unregistered: quarantined before the policy


@pytest.mark.parametrize("sharing", ["sqlite-own-connections", "sqlite-one-instance", "memory"])
def test_claims_from_eight_threads_have_one_winner(sharing: str, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    threads_count = 8
    shared: Ledger = MemoryLedger() if sharing == "memory" else SQLiteLedger(path)
    ledgers = [
        SQLiteLedger(path) if sharing == "sqlite-own-connections" else shared
        for _ in range(threads_count)
    ]
    barrier = threading.Barrier(threads_count)
    outcomes: dict[int, Any] = {}

    def claim(me: int) -> None:
        barrier.wait()
        outcomes[me] = ledgers[me].claim(KEY, attempt=me, tool_name="write_file", fingerprint="f")

    threads = [threading.Thread(target=claim, args=(me,)) for me in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        joined(thread, 30)
    assert len(outcomes) == threads_count
    winners = [me for me, found in outcomes.items() if found is None]
    assert len(winners) == 1
    (winner,) = winners
    for me, found in outcomes.items():
        if me != winner:
            assert found.status == DECIDED
            assert found.attempt == winner
    entry = shared.get(KEY)
    assert entry is not None
    assert entry.attempt == winner
    for ledger in {id(x): x for x in [shared, *ledgers]}.values():
        if isinstance(ledger, SQLiteLedger):
            ledger.close()


CLAIMER = textwrap.dedent(
    """
    import sys
    from otelsse import CallKey, SQLiteLedger

    ledger = SQLiteLedger(sys.argv[1])
    me = int(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.readline()
    found = ledger.claim(
        CallKey("run-1", "resp-1", "call-1"), attempt=me, tool_name="write_file", fingerprint="f"
    )
    print("won" if found is None else f"lost {found.status} {found.attempt}", flush=True)
    ledger.close()
    """
)


def test_claims_from_four_processes_have_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SQLiteLedger(path).close()  # the tables exist before the race
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(path), str(me)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(1, 5)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        for process in processes:  # all four are waiting: let them go together
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        answers = []
        for process in processes:
            out, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
            answers.append(out.strip())
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    winners = [me for me, answer in enumerate(answers, 1) if answer == "won"]
    assert len(winners) == 1, answers
    (winner,) = winners
    assert sorted(answers) == sorted(["won", *[f"lost decided {winner}"] * 3])
    ledger = SQLiteLedger(path)
    entry = ledger.get(KEY)
    ledger.close()
    assert entry is not None
    assert entry.attempt == winner
    assert entry.status == DECIDED


def test_the_sqlite_file_holds_no_content(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    def read_file(arguments: Any) -> None:
        raise CustomBoom(f"{OUT}: {arguments}")

    def interrupted(arguments: Any) -> None:
        raise KeyboardInterrupt

    ledger = SQLiteLedger(path)
    for route in ROUTES:
        run(ToolGate(ledger=ledger), route, run_id=f"run-{route}",
            execute={"read_file": read_file, "write_file": Recorder(OUT)})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        ToolGate(ledger=ledger).run(Source(EVENTS[CHAT](TWO_CALLS)), CHAT, run_id="run-ki",
                                    execute={"read_file": interrupted})  # fmt: skip
    rows: list[str] = []
    db = sqlite3.connect(path)
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        rows.extend(repr(row) for row in db.execute(f"SELECT * FROM {table}"))
    db.close()
    ledger.close()
    assert len(rows) >= 2 * len(ROUTES) + 1
    assert any("CustomBoom" in row for row in rows)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("ledger.db"))
    no_sentinel(*rows, raw.decode("latin-1"))


# --------------------------------------------------------------------------------------------
# 5. run_at="item"
# --------------------------------------------------------------------------------------------


def run_counting(
    gate: ToolGate, route: str, dialect: str
) -> tuple[list[bytes], GateResult, list[int]]:
    """Run ``gate`` (``run``, or ``arun`` for the async dialect) on ``route``'s two calls, one
    event a chunk; every executor notes how many chunks had been read when it ran. The events,
    the result and those counts."""
    events = EVENTS[route](TWO_CALLS)
    source: Source | AsyncSource = Source(events) if dialect == "sync" else AsyncSource(events)
    at: list[int] = []

    def executor(arguments: Any) -> None:
        at.append(source.sent)

    execute = {"read_file": executor, "write_file": executor}
    if dialect == "sync":
        result = gate.run(source, route, execute=execute)
    else:
        result = asyncio.run(gate.arun(source, route, execute=execute))
    return events, result, at


@pytest.mark.parametrize("route", ITEM_ROUTES)
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_item_mode_runs_each_call_at_its_own_terminal(route: str, dialect: str) -> None:
    events, result, at = run_counting(ToolGate(run_at="item"), route, dialect)
    lawful(result)
    assert states(result) == [S.EXECUTED, S.EXECUTED]
    # Each ran once the chunk holding its own terminal event was read, and not one chunk later.
    assert at == [call_terminal(route, events, 1) + 1, call_terminal(route, events, 2) + 1]
    assert at[-1] < len(events)


#: What marks call 1's argument fragments in each item route's body.
FIRST_CALL_FRAGMENT = {
    ANTHROPIC: b'"index": 1, "delta": {"type": "input_json_delta"',
    RESPONSES: b'"type": "response.function_call_arguments.delta", "item_id": "fc_1"',
}


@pytest.mark.parametrize("route", ITEM_ROUTES)
@pytest.mark.parametrize(
    ("late", "decided"),
    [("repeated", (S.EXECUTED, None)), ("moved", (S.QUARANTINED, "invalid_json"))],
)
def test_item_mode_decides_a_call_as_it_closed_however_the_stream_is_read(
    route: str, late: str, decided: tuple[ToolCallState, str | None]
) -> None:
    """An argument fragment after its call's item ended (repeated, or moved there) makes the
    call trailing data from then on; decided at its item's end, the call is decided as it
    closed. Read in two parts split at any event, the stream gives that one decision: the
    gate's property found a split that ran a call the whole read refused."""
    events = EVENTS[route](TWO_CALLS)
    fragments = [i for i, event in enumerate(events) if FIRST_CALL_FRAGMENT[route] in event]
    terminal = call_terminal(route, events, 1)
    fragment = events[fragments[-1]] if late == "repeated" else events.pop(fragments[0])
    events.insert(terminal + (late == "repeated"), fragment)  # just after the terminal
    body = b"".join(events)
    splits = [offset_after(events, index) for index in range(len(events) - 1)]
    for split in [len(body), *splits]:
        ran: list[Any] = []
        execute = {"read_file": ran.append, "write_file": lambda arguments: None}
        result = ToolGate(run_at="item").run(
            Source([body[:split], body[split:]]), route, execute=execute
        )
        first = lawful(result).calls[0]
        assert (first.state, first.error_class) == decided, split
        assert ran == ([parsed(TWO_CALLS)[0]] if decided[0] is S.EXECUTED else []), split
        assert result.calls[1].state is S.EXECUTED, split


@pytest.mark.parametrize("route", ROUTES)
def test_response_mode_runs_nothing_before_the_terminal(route: str) -> None:
    events, result, at = run_counting(ToolGate(), route, "sync")
    assert states(lawful(result)) == [S.EXECUTED, S.EXECUTED]
    assert at == [len(events), len(events)]


@pytest.mark.parametrize("route", RESPONSE_ROUTES)
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_item_mode_falls_back_to_the_response_terminal(route: str, dialect: str) -> None:
    events, result, at = run_counting(ToolGate(run_at="item"), route, dialect)
    assert states(lawful(result)) == [S.EXECUTED, S.EXECUTED]
    assert at == [len(events), len(events)]


@pytest.mark.parametrize("route", ITEM_ROUTES)
@pytest.mark.parametrize("dialect", ["sync", "async"])
def test_item_mode_runs_while_the_server_holds_the_rest(
    server: SSEServer, route: str, dialect: str
) -> None:
    """The server sends up to call 1's terminal event and holds the rest until the executor
    releases it: only a gate that runs the call at its own terminal can finish."""
    events = EVENTS[route](TWO_CALLS)
    hold_at = offset_after(events, call_terminal(route, events, 1))
    url = server.route(ROUTE_PATHS[route], Reply(b"".join(events), piece=64, hold_at=hold_at))
    held_when_run: list[bool] = []

    def read_file(arguments: Any) -> None:
        held_when_run.append(not server.release.is_set())
        server.release.set()

    write_file = Recorder()
    execute: dict[str, Callable[[Any], Any]] = {"read_file": read_file, "write_file": write_file}
    # Without the early run, the read waits on the held server and times out instead.
    gate = ToolGate(run_at="item", idle_timeout=5.0)
    if dialect == "sync":
        with httpx_response(url) as response:
            result = gate.run(response, execute=execute)
    else:

        async def main() -> GateResult:
            async with httpx_async_response(url) as response:
                return await gate.arun(response, execute=execute)

        result = asyncio.run(main())
    assert states(lawful(result)) == [S.EXECUTED, S.EXECUTED]
    assert result.fault is None
    assert held_when_run == [True]
    assert write_file.seen == parsed(TWO_CALLS)[1:]


@pytest.mark.parametrize("route", ITEM_ROUTES)
@pytest.mark.parametrize("run_at", ["item", "response"])
def test_a_cut_after_a_call_ran_keeps_it_executed_and_quarantines_the_rest(
    server: SSEServer, route: str, run_at: str
) -> None:
    calls: list[Call] = [*TWO_CALLS, ("call_3", "read_file", args("third.txt"))]
    events = EVENTS[route](calls)
    # Cut inside call 2's second argument delta: its first one arrived whole.
    cut = offset_after(events, call_terminal(route, events, 2) - 2) + 5
    url = server.route(ROUTE_PATHS[route], Reply(b"".join(events), piece=64, cut=cut))
    executor = Recorder()
    gate = ToolGate(run_at=run_at)
    with httpx_response(url) as response:
        result = lawful(gate.run(response, execute={"read_file": executor, "write_file": executor}))
    assert result.fault == "truncated"
    assert result.disconnect_reason is not None
    assert result.last_item_id == "call_2"
    if run_at == "item":
        assert states(result) == [S.EXECUTED, S.QUARANTINED]
        assert executor.seen == parsed(calls)[:1]
    else:
        assert states(result) == [S.QUARANTINED, S.QUARANTINED]
        assert executor.seen == []
    quarantined = result.calls[-1]
    assert quarantined.error_class == "truncated"
    assert quarantined.json_status == "unchecked"
    assert quarantined.buffer_bytes == len(halves(calls[1][2])[0].encode())
    assert quarantined.call_id == "call_2"
    assert quarantined.response_id == RESPONSE_IDS[route]


@pytest.mark.parametrize("route", ITEM_ROUTES)
def test_item_mode_quarantines_a_duplicate_call_id(route: str) -> None:
    calls: list[Call] = [("dup", "read_file", args("a.txt")), ("dup", "read_file", args("b.txt"))]
    executor = Recorder()
    result = run(ToolGate(run_at="item"), route, calls, execute={"read_file": executor})
    assert states(result) == [S.EXECUTED, S.QUARANTINED]
    assert result.calls[1].error_class == "duplicate_tool_call_id"
    assert executor.seen == parsed(calls)[:1]
    assert result.fault == "duplicate_tool_call_id"


@pytest.mark.parametrize("route", ROUTES)
def test_response_mode_quarantines_every_call_of_a_duplicate_id(route: str) -> None:
    calls: list[Call] = [("dup", "read_file", args("a.txt")), ("dup", "read_file", args("b.txt"))]
    executor = Recorder()
    result = run(ToolGate(), route, calls, execute={"read_file": executor})
    assert states(result) == [S.QUARANTINED, S.QUARANTINED]
    assert {call.error_class for call in result.calls} == {"duplicate_tool_call_id"}
    assert executor.seen == []


# --------------------------------------------------------------------------------------------
# 6. Telemetry
# --------------------------------------------------------------------------------------------


@pytest.fixture
def sdk() -> Iterator[Telemetry]:
    """A real OpenTelemetry SDK with in-memory export, handed to the gate (not installed)."""
    telemetry = Telemetry()
    yield telemetry
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()


def traced(sdk: Telemetry, **options: Any) -> ToolGate:
    return ToolGate(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider,
                    **options)  # fmt: skip


def everything(sdk: Telemetry) -> list[str]:
    """Every text of every span (attributes, events, links, status) and metric point."""
    spans = sdk.spans(None)
    texts = attribute_values(spans)
    for span in spans:
        for link in span.links:
            texts.extend(f"{k}={v!r}" for k, v in (link.attributes or {}).items())
        texts.append(span.status.description or "")
    for point in sdk.points():
        texts.append(point.metric)
        texts.extend(f"{k}={v}" for k, v in point.attributes.items())
    return texts


#: One of each way a call can end in one stream.
MIXED: list[Call] = [
    ("call_ok", "read_file", args("notes.txt")),
    ("call_deny", "write_file", args("/etc/" + ARG, content=ARG)),
    ("call_ask", "deploy", json.dumps({"target": ARG})),
    ("call_boom", "explode", json.dumps({"why": ARG})),
    ("call_unreg", "rm_rf", args("/")),
    ("call_noexec", "lookup", json.dumps({"q": ARG})),
]
MIXED_TOOLS = {name: None for name in ("read_file", "write_file", "deploy", "explode", "lookup")}


def mixed_policy(view: ToolCallView) -> str:
    if view.name == "deploy":
        return "needs_approval"
    if view.name == "write_file" and view.arguments["path"].startswith("/"):
        return "deny"
    return "approve"


def explode(arguments: Any) -> None:
    raise CustomBoom(f"{OUT} {arguments}")


#: What each MIXED call's span says: state, error.type, schema status, policy, execution, and
#: whether its status is ERROR. An unregistered tool's arguments are never checked against a
#: schema; the registered tools have none.
MIXED_SPANS = {
    "call_ok": ("executed", None, "none", "approve", "succeeded", False),
    "call_deny": ("policy_denied", "policy_denied", "none", "deny", None, False),
    "call_ask": ("needs_approval", None, "none", "needs_approval", None, False),
    "call_boom": ("execution_failed", "CustomBoom", "none", "approve", "failed", True),
    "call_unreg": ("quarantined", "unregistered_tool", "unchecked", None, None, True),
    "call_noexec": ("policy_approved", "no_executor", "none", "approve", None, False),
}


@pytest.mark.parametrize("route", ITEM_ROUTES)
def test_one_gate_span_and_one_call_span_per_call(sdk: Telemetry, route: str) -> None:
    gate = traced(sdk, tools=MIXED_TOOLS, policy=mixed_policy)
    execute = {"read_file": Recorder(OUT), "write_file": Recorder(), "explode": explode,
               "deploy": Recorder()}  # fmt: skip
    result = run(gate, route, MIXED, execute=execute, run_id="run-otel")
    (gate_span,) = sdk.spans(semconv.GATE_SPAN_NAME)
    call_spans = sdk.spans(semconv.TOOL_CALL_SPAN_NAME)
    assert len(call_spans) == len(MIXED) == len(result.calls)
    assert gate_span.attributes is not None
    assert dict(gate_span.attributes) == {
        semconv.GATE_RUN_ID: "run-otel",
        semconv.GATE_ATTEMPT: 1,
        semconv.ROUTE: route,
        semconv.OUTCOME: "complete",
        semconv.GEN_AI_RESPONSE_ID: RESPONSE_IDS[route],
    }
    assert gate_span.status.status_code.name == "UNSET"
    by_id = {}
    for span in call_spans:
        assert span.parent is not None
        assert span.parent.span_id == gate_span.context.span_id
        assert span.context.trace_id == gate_span.context.trace_id
        attributes = dict(span.attributes or {})
        assert set(attributes) <= set(semconv.GATE_ATTRIBUTES)
        by_id[attributes[semconv.GEN_AI_TOOL_CALL_ID]] = (span, attributes)
    assert set(by_id) == {call_id for call_id, _, _ in MIXED}
    for call_id, name, arguments in MIXED:
        span, attributes = by_id[call_id]
        state, error_type, schema, policy, execution, error = MIXED_SPANS[call_id]
        expected = {
            semconv.GATE_RUN_ID: "run-otel",
            semconv.GATE_ATTEMPT: 1,
            semconv.TOOL_CALL_STATE: state,
            semconv.GEN_AI_TOOL_NAME: name,
            semconv.GEN_AI_TOOL_CALL_ID: call_id,
            semconv.GEN_AI_RESPONSE_ID: RESPONSE_IDS[route],
            semconv.TOOL_CALL_BYTES: len(arguments.encode()),
            semconv.TOOL_CALL_JSON_STATUS: "valid",
            semconv.TOOL_CALL_TRAILING_DATA: False,
            semconv.TOOL_CALL_SCHEMA_STATUS: schema,
            semconv.TOOL_CALL_POLICY: policy,
            semconv.TOOL_CALL_EXECUTION: execution,
            semconv.ERROR_TYPE: error_type,
        }
        assert attributes == {k: v for k, v in expected.items() if v is not None}, call_id
        assert span.status.status_code.name == ("ERROR" if error else "UNSET"), call_id
        assert span.start_time is not None
        assert span.end_time is not None
        assert gate_span.start_time <= span.start_time <= span.end_time  # type: ignore[operator]
    no_sentinel(*everything(sdk))


@pytest.mark.parametrize("route", ITEM_ROUTES)
def test_the_counter_counts_calls_by_state_tool_and_error(sdk: Telemetry, route: str) -> None:
    gate = traced(sdk, tools=MIXED_TOOLS, policy=mixed_policy)
    execute = {"read_file": Recorder(), "write_file": Recorder(), "explode": explode}
    for _ in range(2):
        run(gate, route, MIXED, execute=execute)  # two runs: nothing replayed
    counted = {
        (p.attributes[semconv.TOOL_CALL_STATE], p.attributes[semconv.GEN_AI_TOOL_NAME],
         p.attributes.get(semconv.ERROR_TYPE)): p.value
        for p in sdk.points(semconv.GATE_CALLS.name)
    }  # fmt: skip
    for point in sdk.points(semconv.GATE_CALLS.name):
        assert set(point.attributes) <= {semconv.TOOL_CALL_STATE, semconv.GEN_AI_TOOL_NAME,
                                         semconv.ERROR_TYPE}  # fmt: skip
        assert point.unit == "{call}"
    assert counted == {
        ("executed", "read_file", None): 2,
        ("policy_denied", "write_file", "policy_denied"): 2,
        ("needs_approval", "deploy", None): 2,
        ("execution_failed", "explode", "execution_error"): 2,
        ("quarantined", "rm_rf", "unregistered_tool"): 2,
        ("policy_approved", "lookup", "no_executor"): 2,
    }
    no_sentinel(*everything(sdk))


@pytest.mark.parametrize("route", ROUTES)
def test_a_refused_stream_marks_the_gate_span_and_quarantines(sdk: Telemetry, route: str) -> None:
    events = EVENTS[route](TWO_CALLS)[:-1]  # the terminal event never comes
    executor = Recorder()
    gate = traced(sdk)
    result = lawful(gate.run(Source(events), route, execute={"read_file": executor,
                                                             "write_file": executor}))  # fmt: skip
    assert result.fault is not None
    assert states(result) == [S.QUARANTINED, S.QUARANTINED]
    assert executor.seen == []
    (gate_span,) = sdk.spans(semconv.GATE_SPAN_NAME)
    assert gate_span.status.status_code.name == "ERROR"
    assert dict(gate_span.attributes or {})[semconv.GATE_FAULT] == result.fault
    call_spans = sdk.spans(semconv.TOOL_CALL_SPAN_NAME)
    assert [s.status.status_code.name for s in call_spans] == ["ERROR", "ERROR"]
    assert {dict(s.attributes or {})[semconv.ERROR_TYPE] for s in call_spans} == {result.fault}
    counted: dict[tuple[Any, Any, Any], float] = {}
    for p in sdk.points(semconv.GATE_CALLS.name):
        attributes = p.attributes
        state, tool = attributes[semconv.TOOL_CALL_STATE], attributes[semconv.GEN_AI_TOOL_NAME]
        series = (state, tool, attributes.get(semconv.ERROR_TYPE))
        counted[series] = counted.get(series, 0) + p.value
    assert counted == {
        ("quarantined", "read_file", result.fault): 1,
        ("quarantined", "write_file", result.fault): 1,
    }
    no_sentinel(*everything(sdk))


def attempt_of(span: ReadableSpan) -> int:
    attempt = dict(span.attributes or {})[semconv.GATE_ATTEMPT]
    assert isinstance(attempt, int)
    return attempt


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_a_call_to_reconcile_is_an_error_span_and_attempts_are_linked(
    sdk: Telemetry, store_kind: str, tmp_path: Path
) -> None:
    store = Store(store_kind, tmp_path / "ledger.db")

    def interrupted(arguments: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        traced(sdk, ledger=store.open()).run(
            Source(EVENTS[ANTHROPIC](TWO_CALLS)), ANTHROPIC, run_id="run-link",
            execute={"read_file": interrupted, "write_file": Recorder()},
        )  # fmt: skip
    execute = {"read_file": Recorder(), "write_file": Recorder()}
    second = run(traced(sdk, ledger=store.open()), ANTHROPIC, execute=execute, run_id="run-link")
    third = run(traced(sdk, ledger=store.open()), ANTHROPIC, execute=execute, run_id="run-link")
    store.close()
    assert states(second) == [S.NEEDS_RECONCILIATION, S.EXECUTED]
    assert states(third) == [S.NEEDS_RECONCILIATION, S.REPLAYED]
    gates = sorted(sdk.spans(semconv.GATE_SPAN_NAME), key=attempt_of)
    assert [dict(s.attributes or {})[semconv.GATE_ATTEMPT] for s in gates] == [1, 2, 3]
    first_span, second_span, third_span = gates
    assert first_span.status.status_code.name == "ERROR"  # interrupted: no result
    assert dict(first_span.attributes or {})[semconv.ERROR_TYPE] == "cancelled"
    assert list(first_span.links) == []
    assert [(link.context.trace_id, link.context.span_id) for link in second_span.links] == [
        (first_span.context.trace_id, first_span.context.span_id)
    ]
    assert [(link.context.trace_id, link.context.span_id) for link in third_span.links] == [
        (first_span.context.trace_id, first_span.context.span_id),
        (second_span.context.trace_id, second_span.context.span_id),
    ]
    for link in [*second_span.links, *third_span.links]:
        assert dict(link.attributes or {}) == {semconv.GATE_RUN_ID: "run-link"}
    reconcile = [
        s for s in sdk.spans(semconv.TOOL_CALL_SPAN_NAME)
        if dict(s.attributes or {})[semconv.TOOL_CALL_STATE] == "needs_reconciliation"
    ]  # fmt: skip
    assert len(reconcile) == 2
    for span in reconcile:
        assert span.status.status_code.name == "ERROR"
        assert dict(span.attributes or {})[semconv.TOOL_CALL_EXECUTION] == DECIDED
    no_sentinel(*everything(sdk))


def test_tool_names_on_the_counter_are_capped(
    sdk: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cap is one per process: start this test from a fresh one.
    monkeypatch.setattr(
        gate_telemetry, "_GATE_TOOL_NAMES", FirstSeen(semconv.DEFAULT_MAX_TOOL_NAMES)
    )
    cap = semconv.DEFAULT_MAX_TOOL_NAMES
    names = [f"tool_{n:03d}" for n in range(cap + 10)]
    calls = [(f"call_{n}", name, json.dumps({"n": ARG})) for n, name in enumerate(names)]
    half = len(calls) // 2
    execute = {name: Recorder() for name in names}
    # Two gates share the cap: it bounds the counter's series, not one gate's.
    run(traced(sdk), RESPONSES, calls[:half], execute=execute)
    run(traced(sdk), ANTHROPIC, calls[half:], execute=execute)
    counted: dict[str, float] = {}
    for point in sdk.points(semconv.GATE_CALLS.name):
        tool = point.attributes[semconv.GEN_AI_TOOL_NAME]
        counted[tool] = counted.get(tool, 0) + point.value
    assert counted == {**{name: 1 for name in names[:cap]}, semconv.OVERFLOW_VALUE: 10}
    # Spans keep each call's own name.
    span_names = {dict(s.attributes or {})[semconv.GEN_AI_TOOL_NAME]
                  for s in sdk.spans(semconv.TOOL_CALL_SPAN_NAME)}  # fmt: skip
    assert span_names == set(names)


# --------------------------------------------------------------------------------------------
# 7. Sources
# --------------------------------------------------------------------------------------------

#: How the server ends the body: all of it, then it keeps the connection open (the gate must
#: stop at the terminal event); or cut in the middle (the gate must refuse and still close).
ENDINGS = ["complete-then-stall", "cut"]


def served(server: SSEServer, route: str, ending: str) -> str:
    data = body(route)
    reply = (
        Reply(data, piece=128, cut=len(data), after_cut="stall")
        if ending == "complete-then-stall"
        else Reply(data, piece=128, cut=len(data) // 2)
    )
    return server.route(ROUTE_PATHS[route], reply)


def check_ending(result: GateResult, ending: str, executor: Recorder) -> None:
    lawful(result)
    if ending == "complete-then-stall":
        assert result.fault is None
        assert states(result) == [S.EXECUTED, S.EXECUTED]
        assert executor.seen == parsed(TWO_CALLS)
    else:
        assert result.fault == "truncated"
        assert all(call.state is S.QUARANTINED for call in result.calls)
        assert executor.seen == []


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("ending", ENDINGS)
def test_an_httpx_response(server: SSEServer, route: str, ending: str) -> None:
    url = served(server, route, ending)
    executor = Recorder()
    with httpx_response(url) as response:
        result = ToolGate().run(response, execute={"read_file": executor, "write_file": executor})
        assert response.is_closed
    check_ending(result, ending, executor)
    assert result.report is not None
    assert result.report.route == route


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_requests_response(server: SSEServer, route: str, ending: str) -> None:
    url = served(server, route, ending)
    executor = Recorder()
    with (
        requests.Session() as session,
        session.post(url, json=REQUEST, stream=True, timeout=READ_TIMEOUT) as response,
    ):
        result = ToolGate().run(response, execute={"read_file": executor, "write_file": executor})
        assert response.raw.closed
    check_ending(result, ending, executor)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("backend", ["asyncio", pytest.param("trio", marks=pytest.mark.matrix)])
def test_an_httpx_async_response(server: SSEServer, route: str, ending: str, backend: str) -> None:
    url = served(server, route, ending)
    executor = Recorder()
    checkpoints: list[str] = []

    async def write_file(arguments: Any) -> None:
        await (trio.sleep(0) if backend == "trio" else asyncio.sleep(0))
        checkpoints.append("awaited")
        executor(arguments)

    async def policy(view: ToolCallView) -> str:
        await (trio.sleep(0) if backend == "trio" else asyncio.sleep(0))
        return "approve"

    async def main() -> tuple[GateResult, bool]:
        async with httpx_async_response(url) as response:
            result = await ToolGate(policy=policy).arun(
                response, execute={"read_file": executor, "write_file": write_file}
            )
            return result, response.is_closed

    # Stopping early must finish the response's body iterators too: trio warns about an async
    # generator collected before it was exhausted or closed.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, closed = trio.run(main) if backend == "trio" else asyncio.run(main())
        gc.collect()
    assert closed
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    check_ending(result, ending, executor)
    assert checkpoints == (["awaited"] if ending == "complete-then-stall" else [])


@pytest.mark.parametrize("route", ROUTES)
def test_plain_iterables_are_read_and_closed(route: str) -> None:
    events = EVENTS[route](TWO_CALLS)
    finished: list[str] = []

    def generator() -> Iterator[bytes]:
        try:
            yield from events
            yield from [b": more after the terminal\n\n"] * 1000  # never read
        finally:
            finished.append("closed")

    executor = Recorder()
    execute = {"read_file": executor, "write_file": executor}
    source = Source([*events, b"data: after the terminal\n\n"])
    for given in (list(events), b"".join(events).splitlines(keepends=True), generator(), source):
        result = lawful(ToolGate().run(given, route, execute=execute))
        assert states(result) == [S.EXECUTED, S.EXECUTED]
    assert finished == ["closed"]
    assert source.closed
    assert source.sent == len(events)
    assert executor.seen == parsed(TWO_CALLS) * 4


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_plain_async_iterables_are_read_and_closed(route: str, backend: str) -> None:
    events = EVENTS[route](TWO_CALLS)
    finished: list[str] = []

    async def generator() -> AsyncIterator[bytes]:
        try:
            for event in events:
                yield event
            for _ in range(1000):
                yield b": more after the terminal\n\n"  # never read
        finally:
            finished.append("closed")

    executor = Recorder()
    execute = {"read_file": executor, "write_file": executor}
    source = AsyncSource([*events, b"data: after the terminal\n\n"])

    async def main() -> list[GateResult]:
        return [await ToolGate().arun(given, route, execute=execute)
                for given in (generator(), source)]  # fmt: skip

    results = trio.run(main) if backend == "trio" else asyncio.run(main())
    for result in results:
        assert states(lawful(result)) == [S.EXECUTED, S.EXECUTED]
    assert finished == ["closed"]
    assert source.closed
    assert source.sent == len(events)
    assert executor.seen == parsed(TWO_CALLS) * 2
