"""A tool-gate process for the crash tests: run as a script, in a real subprocess.

It reads one stream over real HTTP (httpx, from the test's ``SSEServer``) through a ``ToolGate``
on an SQLite ledger file, every call approved. Its executor first reads, through a connection
of its own, what the ledger file says about the call it is running (the decision must already
be durable), appends ``call id <TAB> ledger status`` to the marker file, and then either
returns or (``--block``) writes the call id to the signal file and waits to be killed.

On stdout: ``READING`` just before the gate runs, then, if it finishes, one JSON line with the
result (each call's sanitized record and history). Every wait is bounded: a worker that is
never killed gives up after ``--max-wait`` seconds with exit status 3.

Usage: ``python _crash_worker.py --ledger PATH --url URL --route ROUTE --run-id ID
--tools NAME,NAME --marker PATH --signal PATH [--run-at response|item] [--block]``
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
from typing import Any

import httpx

from otelsse import SQLiteLedger, ToolCallView, ToolGate

#: Exit status of a blocked worker nobody killed.
NOT_KILLED = 3


def _ledger_status(path: str, view: ToolCallView) -> str:
    """The call's status in the ledger file, read through a connection of this executor's own."""
    db = sqlite3.connect(path, timeout=30)
    try:
        row = db.execute(
            "SELECT status FROM otelsse_calls WHERE run_id = ? AND response_id = ? AND call_id = ?",
            (view.run_id, view.response_id, view.call_id),
        ).fetchone()
    finally:
        db.close()
    return "missing" if row is None else str(row[0])


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--route", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--tools", required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--signal", required=True)
    parser.add_argument("--run-at", default="response")
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--max-wait", type=float, default=120.0)
    args = parser.parse_args(argv)

    current: list[ToolCallView] = []  # the call the policy approved last: the one now running

    def policy(view: ToolCallView) -> str:
        current.append(view)
        return "approve"

    def execute(arguments: Any) -> str:
        view = current[-1]
        _append(args.marker, f"{view.call_id}\t{_ledger_status(args.ledger, view)}")
        if args.block:
            _append(args.signal, view.call_id)
            threading.Event().wait(args.max_wait)  # killed here
            sys.exit(NOT_KILLED)
        return "done"

    names = args.tools.split(",")
    ledger = SQLiteLedger(args.ledger)
    gate = ToolGate({name: None for name in names}, policy, ledger, run_at=args.run_at)
    timeout = httpx.Timeout(args.max_wait)
    with (
        httpx.Client(timeout=timeout) as client,
        client.stream("POST", args.url, json={"stream": True}) as response,
    ):
        print("READING", flush=True)
        executors = {name: execute for name in names}
        result = gate.run(response, args.route, execute=executors, run_id=args.run_id)
    ledger.close()
    calls = [
        {**call.record(), "history": [s.value for s in call.history], "key": call.key.call_id}
        for call in result.calls
    ]
    summary = {"fault": result.fault, "attempt": result.attempt, "calls": calls}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
