"""The tool gate's ledger: each call's decision persisted before it runs, its result after.

A call is keyed by ``CallKey`` (run id, response id, provider call id). ``claim()`` records the
decision to execute atomically and answers whether the call was ever claimed before, so a
replayed stream or a second gate on the same store never runs a call twice. A call claimed but
never given a result (the process died while it ran) is never run again automatically: the
absence of a success record does not prove the absence of a side effect. The ledger
holds ids, tool names, each call's fingerprint (a digest of its tool name and arguments, so that
the gate can tell a replay from another call under the same key), statuses and short error
classes, never arguments or results.

``MemoryLedger`` lives as long as the process; ``SQLiteLedger`` is the embedded durable default
(standard library ``sqlite3``; safe across threads and processes sharing one file).
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "DECIDED",
    "FAILED",
    "SUCCEEDED",
    "CallKey",
    "Ledger",
    "LedgerEntry",
    "MemoryLedger",
    "SQLiteLedger",
    "SpanIds",
]

#: A call's ledger status: claimed for execution, no result yet (or never, after a crash).
DECIDED = "decided"
#: The executor returned.
SUCCEEDED = "succeeded"
#: The executor raised.
FAILED = "failed"

#: An attempt's span as ``(trace_id, span_id)``, so that later attempts can link to it.
SpanIds = tuple[int, int]


@dataclass(frozen=True, slots=True)
class CallKey:
    """A call's identity: never its tool name, never its position across responses."""

    run_id: str
    response_id: str
    call_id: str


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """What the ledger holds for one claimed call."""

    key: CallKey
    attempt: int
    tool_name: str | None
    status: str
    error_class: str | None
    decided_at: float
    finished_at: float | None
    #: The claimed call's fingerprint; None for a row written before ledgers kept one.
    fingerprint: str | None = None


class Ledger(ABC):
    """Where a gate records attempts and decisions. Implementations must make ``claim``
    atomic: of two claims of one key, exactly one returns None."""

    @abstractmethod
    def start_attempt(self, run_id: str) -> tuple[int, list[SpanIds]]:
        """Number the next attempt of ``run_id`` (from 1); return it and the spans of the
        earlier attempts that recorded one."""

    @abstractmethod
    def set_attempt_span(self, run_id: str, attempt: int, span: SpanIds) -> None:
        """Remember an attempt's span for the attempts after it."""

    @abstractmethod
    def claim(
        self, key: CallKey, *, attempt: int, tool_name: str | None, fingerprint: str | None
    ) -> LedgerEntry | None:
        """Persist the decision to execute ``key`` (with the call's fingerprint) and return
        None, or, when the key was claimed before, change nothing and return that entry."""

    @abstractmethod
    def finish(self, key: CallKey, status: str, error_class: str | None = None) -> None:
        """Record a claimed call's result: ``SUCCEEDED`` or ``FAILED``."""

    @abstractmethod
    def get(self, key: CallKey) -> LedgerEntry | None:
        """The entry for ``key``, if it was ever claimed."""


class MemoryLedger(Ledger):
    """A ledger in this process's memory: for tests, and for one gate's lifetime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[str, list[SpanIds | None]] = {}
        self._entries: dict[CallKey, LedgerEntry] = {}

    def start_attempt(self, run_id: str) -> tuple[int, list[SpanIds]]:
        with self._lock:
            spans = self._attempts.setdefault(run_id, [])
            spans.append(None)
            return len(spans), [span for span in spans[:-1] if span is not None]

    def set_attempt_span(self, run_id: str, attempt: int, span: SpanIds) -> None:
        with self._lock:
            self._attempts[run_id][attempt - 1] = span

    def claim(
        self, key: CallKey, *, attempt: int, tool_name: str | None, fingerprint: str | None
    ) -> LedgerEntry | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                return found
            self._entries[key] = LedgerEntry(
                key, attempt, tool_name, DECIDED, None, time.time(), None, fingerprint
            )
            return None

    def finish(self, key: CallKey, status: str, error_class: str | None = None) -> None:
        with self._lock:
            entry = self._entries[key]
            self._entries[key] = dataclasses.replace(
                entry, status=status, error_class=error_class, finished_at=time.time()
            )

    def get(self, key: CallKey) -> LedgerEntry | None:
        with self._lock:
            return self._entries.get(key)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS otelsse_attempts (
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_at REAL NOT NULL,
    trace_id TEXT,
    span_id TEXT,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS otelsse_calls (
    run_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    tool_name TEXT,
    status TEXT NOT NULL,
    error_class TEXT,
    decided_at REAL NOT NULL,
    finished_at REAL,
    fingerprint TEXT,
    PRIMARY KEY (run_id, response_id, call_id)
);
"""


class SQLiteLedger(Ledger):
    """A ledger in an SQLite file, durable before each executor call.

    Every write commits before it returns, with ``synchronous=FULL``: a claim is on disk
    before the gate calls the executor. Processes may share the file (``BEGIN IMMEDIATE``
    serialises claims); one instance may be used from several threads.

    Args:
        path: the database file (created with its tables when missing), or ``":memory:"``.
        timeout: seconds to wait for another process's write lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        # Autocommit mode: every transaction below is explicit.
        self._db = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        self._set_up(time.monotonic() + timeout)

    def _set_up(self, deadline: float) -> None:
        """Make the file this schema's, in WAL mode, however many processes open it at once.

        The tables are made, and a file of an earlier otelsse migrated, in one immediate
        transaction: it waits for the write lock (SQLite's busy timeout) and never upgrades a
        lock, so processes opening the file at once do it once each in turn. Rows a migrated
        file already holds keep a NULL fingerprint: the gate never takes one of them for a
        replay. Switching to WAL needs the file to itself; SQLite answers "database is locked"
        at once, without waiting, where waiting could deadlock (https://sqlite.org/c3ref/
        busy_handler.html): that one is tried again until ``deadline``.
        """
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(otelsse_calls)")}
            if "fingerprint" not in columns:
                db.execute("ALTER TABLE otelsse_calls ADD COLUMN fingerprint TEXT")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One immediate transaction, committed on leaving (rolled back on any exception)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def start_attempt(self, run_id: str) -> tuple[int, list[SpanIds]]:
        with self._transaction() as db:
            earlier = db.execute(
                "SELECT attempt, trace_id, span_id FROM otelsse_attempts WHERE run_id = ?"
                " ORDER BY attempt",
                (run_id,),
            ).fetchall()
            attempt = (earlier[-1][0] if earlier else 0) + 1
            db.execute(
                "INSERT INTO otelsse_attempts (run_id, attempt, started_at) VALUES (?, ?, ?)",
                (run_id, attempt, time.time()),
            )
        spans = [(int(trace, 16), int(span, 16)) for _, trace, span in earlier if trace and span]
        return attempt, spans

    def set_attempt_span(self, run_id: str, attempt: int, span: SpanIds) -> None:
        trace_id, span_id = span
        with self._transaction() as db:
            db.execute(
                "UPDATE otelsse_attempts SET trace_id = ?, span_id = ?"
                " WHERE run_id = ? AND attempt = ?",
                (f"{trace_id:032x}", f"{span_id:016x}", run_id, attempt),
            )

    def claim(
        self, key: CallKey, *, attempt: int, tool_name: str | None, fingerprint: str | None
    ) -> LedgerEntry | None:
        with self._transaction() as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO otelsse_calls (run_id, response_id, call_id, attempt,"
                " tool_name, status, decided_at, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*_key_args(key), attempt, tool_name, DECIDED, time.time(), fingerprint),
            ).rowcount
        return None if inserted == 1 else self.get(key)

    def finish(self, key: CallKey, status: str, error_class: str | None = None) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE otelsse_calls SET status = ?, error_class = ?, finished_at = ?"
                " WHERE run_id = ? AND response_id = ? AND call_id = ?",
                (status, error_class, time.time(), *_key_args(key)),
            )

    def get(self, key: CallKey) -> LedgerEntry | None:
        with self._lock:
            row = self._db.execute(
                "SELECT attempt, tool_name, status, error_class, decided_at, finished_at,"
                " fingerprint FROM otelsse_calls"
                " WHERE run_id = ? AND response_id = ? AND call_id = ?",
                _key_args(key),
            ).fetchone()
        return None if row is None else LedgerEntry(key, *row)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()


def _key_args(key: CallKey) -> tuple[str, str, str]:
    return key.run_id, key.response_id, key.call_id
