"""A call's identity in the ledger: a key that another call reaches is never taken for a replay.

A retry is a new attempt of the same run; when the provider gives its response no id and its
calls none either (or reuses them), the retry's calls reach the keys of the first attempt's. The
ledger keeps each claimed call's fingerprint (a digest of its tool name and arguments), so that
the gate tells the very call replayed from another call under the same key:

- no provider identity at all: the gate's position key is its own guess, so a different call
  gets a key of its own and runs, and each call still runs once;
- a provider identity another call already holds (reused ids): quarantined
  (``identity_collision``), never run, never reported as the other call's result;
- a ledger file from before fingerprints: migrated in place, its rows never taken for a replay.

Every attempt runs through a ``ToolGate`` of its own on a ``SQLiteLedger`` of its own over one
file, as a restarted process would. Bodies are written here per route, with or without each id.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otelsse import CallKey, GateCall, GateResult, SQLiteLedger, ToolCallState, ToolGate
from otelsse._core.state import ToolCall
from otelsse.gate._ledger import DECIDED, SUCCEEDED
from tests._helpers import ANTHROPIC, CHAT, GEMINI, RESPONSES, joined

S = ToolCallState
#: In every argument value: in no ledger row, no file next to it.
SECRET = "SECRET-7c1d"
READ_A = ("read_file", {"path": f"{SECRET}/a.txt"})
#: A retry's different call: another tool, or the same tool with other arguments.
OTHERS = {
    "another-tool": ("delete_file", {"path": f"{SECRET}/a.txt"}),
    "other-arguments": ("read_file", {"path": f"{SECRET}/b.txt"}),
}


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def typed(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)


def _with(mapping: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {**mapping, **{k: v for k, v in optional.items() if v is not None}}


def chat(name: str, arguments: str, response_id: str | None, call_id: str | None) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse(_with({"object": "chat.completion.chunk", "model": "m", "choices": [choice]},
                         id=response_id))  # fmt: skip

    opened = _with({"index": 0, "type": "function", "function": {"name": name, "arguments": ""}},
                   id=call_id)  # fmt: skip
    argument = {"index": 0, "function": {"arguments": arguments}}
    return [
        chunk({"role": "assistant", "tool_calls": [opened]}),
        chunk({"tool_calls": [argument]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


def anthropic(
    name: str, arguments: str, response_id: str | None, call_id: str | None
) -> list[bytes]:
    message = _with({"type": "message", "role": "assistant", "model": "claude-x", "content": [],
                     "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 1}},
                    id=response_id)  # fmt: skip
    block = _with({"type": "tool_use", "name": name, "input": {}}, id=call_id)
    delta = {"type": "input_json_delta", "partial_json": arguments}
    return [
        typed("message_start", message=message),
        typed("content_block_start", index=0, content_block=block),
        typed("content_block_delta", index=0, delta=delta),
        typed("content_block_stop", index=0),
        typed("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        typed("message_stop"),
    ]


def gemini(name: str, arguments: str, response_id: str | None, call_id: str | None) -> list[bytes]:
    def chunk(parts: list[dict[str, Any]], **candidate: Any) -> bytes:
        body = {"content": {"role": "model", "parts": parts}, "index": 0, **candidate}
        return sse(_with({"candidates": [body], "modelVersion": "gemini-x"},
                         responseId=response_id))  # fmt: skip

    function = _with({"name": name, "args": json.loads(arguments)}, id=call_id)
    return [chunk([{"functionCall": function}]), chunk([{"text": ""}], finishReason="STOP")]


def responses(
    name: str, arguments: str, response_id: str | None, call_id: str | None
) -> list[bytes]:
    """A Responses call always has its item id (``fc_1``): the call's identity when it has no
    ``call_id``."""
    item = _with({"type": "function_call", "id": "fc_1", "name": name, "arguments": "",
                  "status": "in_progress"}, call_id=call_id)  # fmt: skip
    response = _with({"model": "gpt-x", "status": "in_progress", "output": []}, id=response_id)
    done = {**item, "arguments": arguments, "status": "completed"}
    return [
        typed("response.created", response=response),
        typed("response.output_item.added", output_index=0, item=item),
        typed("response.function_call_arguments.delta", item_id="fc_1", output_index=0,
              delta=arguments),
        typed("response.function_call_arguments.done", item_id="fc_1", output_index=0,
              arguments=arguments),
        typed("response.output_item.done", output_index=0, item=done),
        typed("response.completed", response={**response, "status": "completed"}),
    ]  # fmt: skip


BODIES: dict[str, Callable[[str, str, str | None, str | None], list[bytes]]] = {
    CHAT: chat,
    ANTHROPIC: anthropic,
    GEMINI: gemini,
    RESPONSES: responses,
}


class Attempts:
    """Attempts of one run, each through a new gate on a new connection to one ledger file,
    and every executor call they made."""

    def __init__(self, path: Path, route: str, run_id: str = "run-retry") -> None:
        self.path = path
        self.route = route
        self.run_id = run_id
        self.ran: list[tuple[str, Any]] = []

    def executor(self, name: str) -> Callable[[Any], str]:
        def run(arguments: Any) -> str:
            self.ran.append((name, arguments))
            return "done"

        return run

    def body(
        self, call: tuple[str, Any], response_id: str | None = None, call_id: str | None = None
    ) -> list[bytes]:
        name, arguments = call
        return BODIES[self.route](name, json.dumps(arguments), response_id, call_id)

    def run(
        self, call: tuple[str, Any], response_id: str | None = None, call_id: str | None = None
    ) -> GateResult:
        return self.run_body(self.body(call, response_id, call_id))

    def run_body(self, body: list[bytes]) -> GateResult:
        ledger = SQLiteLedger(self.path)
        try:
            gate = ToolGate(ledger=ledger)
            execute = {tool: self.executor(tool) for tool in ("read_file", "delete_file")}
            result = gate.run(body, self.route, execute=execute, run_id=self.run_id)
        finally:
            ledger.close()
        assert result.fault is None, result
        assert len(result.calls) == 1, result
        return result


def rows(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT response_id, call_id, tool_name, status, fingerprint FROM otelsse_calls"
            " ORDER BY decided_at"
        ).fetchall()
    finally:
        db.close()


def snapshot(path: Path) -> list[tuple[Any, ...]]:
    """Every row of the calls table, whatever its columns."""
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT * FROM otelsse_calls ORDER BY decided_at").fetchall()
    finally:
        db.close()


def assert_no_content(directory: Path) -> None:
    for name in os.listdir(directory):
        assert SECRET.encode() not in (directory / name).read_bytes(), name


# --------------------------------------------------------------------------------------------
# No provider identity at all: each call its own key
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", [CHAT, ANTHROPIC, GEMINI])
@pytest.mark.parametrize("other", list(OTHERS))
def test_a_retry_without_any_ids_runs_its_own_call_and_each_call_runs_once(
    tmp_path: Path, route: str, other: str
) -> None:
    attempts = Attempts(tmp_path / "ledger.db", route)
    first = attempts.run(READ_A)
    assert first.response_id is None
    assert first.calls[0].call_id is None
    assert first.calls[0].state is S.EXECUTED
    # The retry's answer is another call at the same position: it is not the first one's replay.
    second = attempts.run(OTHERS[other])
    assert second.calls[0].state is S.EXECUTED, second.calls
    assert second.calls[0].execution_status == SUCCEEDED
    assert attempts.ran == [(READ_A[0], READ_A[1]), OTHERS[other]]
    # Either answer read again is a replay: neither runs twice.
    for again in (READ_A, OTHERS[other]):
        replayed = attempts.run(again)
        assert replayed.calls[0].state is S.REPLAYED, replayed.calls
        assert replayed.calls[0].execution_status == SUCCEEDED
    assert attempts.ran == [(READ_A[0], READ_A[1]), OTHERS[other]]
    assert [result.attempt for result in (first, second)] == [1, 2]
    found = rows(attempts.path)
    assert [(row[2], row[3]) for row in found] == [(READ_A[0], SUCCEEDED), (OTHERS[other][0],
                                                   SUCCEEDED)]  # fmt: skip
    assert all(row[4] for row in found), found  # each with its fingerprint
    assert_no_content(tmp_path)


# --------------------------------------------------------------------------------------------
# A provider identity another call already holds
# --------------------------------------------------------------------------------------------

#: (route, response id, call id) a server reuses across the run's responses.
REUSED = [
    (CHAT, None, "call_0"),  # call ids by index, no response id
    (RESPONSES, None, None),  # the item id, no response id
    (ANTHROPIC, "msg_fixed", "toolu_fixed"),  # both ids, reused as a whole
    (GEMINI, "gem_fixed", None),  # a response id and the call's position
]


@pytest.mark.parametrize(("route", "response_id", "call_id"), REUSED, ids=[r[0] for r in REUSED])
@pytest.mark.parametrize("other", list(OTHERS))
def test_another_call_under_a_reused_id_is_quarantined_never_replayed(
    tmp_path: Path, route: str, response_id: str | None, call_id: str | None, other: str
) -> None:
    attempts = Attempts(tmp_path / "ledger.db", route)
    first = attempts.run(READ_A, response_id, call_id)
    assert first.calls[0].state is S.EXECUTED
    before = snapshot(attempts.path)
    second = attempts.run(OTHERS[other], response_id, call_id)
    (collided,) = second.calls
    assert collided.key == first.calls[0].key
    assert collided.state is S.QUARANTINED, collided
    assert collided.error_class == "identity_collision"
    assert collided.execution_status is None  # the ledger's status is the other call's
    assert collided.output is None
    assert collided.history[-2:] == [S.POLICY_APPROVED, S.QUARANTINED]
    assert collided.record()["execution_state"] is None
    assert attempts.ran == [READ_A]
    assert snapshot(attempts.path) == before  # the first call's claim and result, unchanged
    # The first call itself, read again, is still its replay.
    again = attempts.run(READ_A, response_id, call_id)
    assert again.calls[0].state is S.REPLAYED
    assert attempts.ran == [READ_A]
    assert_no_content(tmp_path)


def test_a_collision_with_a_call_left_to_reconcile_is_a_collision(tmp_path: Path) -> None:
    """A claim without a result belongs to the call that made it: another call under its key is
    not that call's reconciliation."""
    path = tmp_path / "ledger.db"
    attempts = Attempts(path, CHAT)
    key = CallKey(attempts.run_id, "", "call_0")
    ledger = SQLiteLedger(path)
    assert ledger.claim(key, attempt=1, tool_name="read_file", fingerprint="f-of-a") is None
    ledger.close()
    result = attempts.run(READ_A, None, "call_0")
    assert (result.calls[0].state, result.calls[0].error_class) == (
        S.QUARANTINED, "identity_collision",
    )  # fmt: skip
    assert attempts.ran == []
    assert rows(path) == [("", "call_0", "read_file", DECIDED, "f-of-a")]


# --------------------------------------------------------------------------------------------
# A ledger file of the earlier schema
# --------------------------------------------------------------------------------------------

#: The tables as otelsse wrote them before ledgers kept fingerprints.
OLD_SCHEMA = """
CREATE TABLE otelsse_attempts (
    run_id TEXT NOT NULL, attempt INTEGER NOT NULL, started_at REAL NOT NULL,
    trace_id TEXT, span_id TEXT, PRIMARY KEY (run_id, attempt)
);
CREATE TABLE otelsse_calls (
    run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    attempt INTEGER NOT NULL, tool_name TEXT, status TEXT NOT NULL, error_class TEXT,
    decided_at REAL NOT NULL, finished_at REAL, PRIMARY KEY (run_id, response_id, call_id)
);
"""


def old_ledger(path: Path) -> None:
    """A file the earlier otelsse left: one attempt of ``run-old`` that ran two calls, one with
    provider ids and one without any (keyed by its position)."""
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO otelsse_attempts VALUES ('run-old', 1, 1.0, NULL, NULL)")
    for response_id, call_id in (("chatcmpl-old", "call_1"), ("", "#0")):
        db.execute(
            "INSERT INTO otelsse_calls VALUES ('run-old', ?, ?, 1, 'read_file', 'succeeded',"
            " NULL, 1.0, 2.0)",
            (response_id, call_id),
        )
    db.commit()
    db.close()


def opened_at_once(path: Path, openers: int) -> None:
    """``openers`` ledgers open ``path`` at once, each on its thread: every one opens it, and
    leaves it in WAL mode with one ``fingerprint`` column."""
    barrier = threading.Barrier(openers)
    opened: list[SQLiteLedger] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            opened.append(SQLiteLedger(path))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        joined(thread, 30)
    assert errors == []
    assert len(opened) == openers
    for ledger in opened:
        ledger.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    columns = [row[1] for row in db.execute("PRAGMA table_info(otelsse_calls)")]
    db.close()
    assert columns.count("fingerprint") == 1


@pytest.mark.parametrize("file", ["new", "of the earlier schema"])
def test_ledgers_opening_one_file_at_once_all_open_it(tmp_path: Path, file: str) -> None:
    """Making the tables (or migrating an old file) and switching to WAL, several openers at
    once: SQLite refuses a lock upgrade that could deadlock at once, without waiting, and the
    ledger must not pass that refusal on. Each round races four openers; before the fix about
    one round in eight lost one of them to "database is locked"."""
    for round_ in range(30):
        path = tmp_path / f"ledger-{round_}.db"
        if file != "new":
            old_ledger(path)
        opened_at_once(path, 4)


def test_a_ledger_file_of_the_earlier_schema_is_migrated_and_its_rows_never_replayed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    old_ledger(path)
    # Two processes may open the old file at once: it is migrated once, by whichever is first.
    opened_at_once(path, 2)
    assert [row[4] for row in rows(path)] == [None, None]  # the old rows keep no fingerprint

    attempts = Attempts(path, CHAT, run_id="run-old")
    # The old rows cannot tell which call they were: whatever comes under their keys (this may
    # be their very replay) is not run, and not reported as their result either.
    for response_id, call_id in (("chatcmpl-old", "call_1"), (None, None)):
        result = attempts.run(READ_A, response_id, call_id)
        assert result.attempt >= 2  # numbering goes on from the old file's attempts
        assert (result.calls[0].state, result.calls[0].error_class) == (
            S.QUARANTINED, "identity_collision",
        )  # fmt: skip
    assert attempts.ran == []
    # A new call is claimed with its fingerprint, and replayed as usual.
    assert attempts.run(READ_A, "chatcmpl-new", "call_2").calls[0].state is S.EXECUTED
    assert attempts.run(READ_A, "chatcmpl-new", "call_2").calls[0].state is S.REPLAYED
    assert attempts.ran == [READ_A]
    new_row = rows(path)[-1]
    assert new_row[:4] == ("chatcmpl-new", "call_2", "read_file", SUCCEEDED)
    assert new_row[4] is not None
    assert_no_content(tmp_path)


# --------------------------------------------------------------------------------------------
# The fingerprint of arguments at the reader's depth, from a deep caller
# --------------------------------------------------------------------------------------------


def test_the_fingerprint_is_the_same_from_any_caller_depth() -> None:
    """Arguments nest up to the reader's 256 levels: their fingerprint (canonical JSON, then a
    digest) is computed whatever stack the caller left, and is the same from every depth."""
    arguments: Any = {}
    for _ in range(255):
        arguments = {"next": arguments}
    tool_call = ToolCall("call_deep", "read_file", None)

    def decided(call: ToolCall, run_id: str) -> GateCall:
        record = GateCall(call, 0, run_id, 1)
        record.arguments = arguments  # what the gate decided on
        return record

    record = decided(tool_call, "run-deep")

    def deep(frames: int, function: Callable[[], str]) -> str:
        if len(_stack()) >= frames:
            return function()
        return deep(frames, function)

    shallow = record.fingerprint()
    assert [deep(frames, record.fingerprint) for frames in (600, 900)] == [shallow, shallow]
    # A digest of exactly the call: another tool, other arguments or another run differ.
    assert decided(ToolCall("call_deep", "write_file", None), "run-deep").fingerprint() != shallow
    assert decided(tool_call, "run-other").fingerprint() != shallow
    record.arguments = {"next": {}}
    assert record.fingerprint() != shallow


def _stack() -> list[Any]:
    frame, frames = sys._getframe(), []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return frames
