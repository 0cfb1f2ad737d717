"""Processes for the end-to-end tests: the demo as a user runs it, polled and always stopped."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tests._helpers import WELL_BEFORE

__all__ = ["demo_process", "free_port", "poll", "stop", "wait_for_summary"]

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def poll(check: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.1) -> T:
    """``check()`` until it returns something other than None, well before ``timeout`` seconds
    (``tests/_helpers.WELL_BEFORE``)."""
    began = time.monotonic()
    while True:
        result = check()
        if result is not None:
            return result
        took = time.monotonic() - began
        assert took < timeout * WELL_BEFORE, f"waited {took:.1f} s of {timeout} s for {what}"
        time.sleep(every)


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> int:
    """Signal ``process``, wait for it, kill it if it does not stop; returns its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@contextlib.contextmanager
def demo_process(tmp: Path, *arguments: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``python -m otelsse demo ARGUMENTS --summary-json FILE``; yields the process and FILE.

    Its output goes to files in ``tmp`` (shown when a test fails); it is stopped with SIGINT,
    which is how a user ends a demo that keeps its metrics up.
    """
    summary = tmp / "summary.json"
    command = [sys.executable, "-m", "otelsse", "demo", *arguments, "--summary-json", str(summary)]
    with open(tmp / "demo.out", "w") as out, open(tmp / "demo.err", "w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        try:
            yield process, summary
        finally:
            stop(process, signal.SIGINT)


def wait_for_summary(process: subprocess.Popen[str], summary: Path, tmp: Path) -> dict[str, Any]:
    """The demo's JSON summary, once it has finished its streams."""

    def written() -> dict[str, Any] | None:
        if process.poll() not in (None, 0):
            raise AssertionError(
                f"demo exited {process.returncode}: {(tmp / 'demo.err').read_text()}"
            )
        if not summary.exists():
            return None
        try:
            return dict(json.loads(summary.read_text()))
        except ValueError:
            return None  # still being written

    return poll(written, timeout=180, what="the demo's summary", every=0.2)
