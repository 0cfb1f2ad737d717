"""A server in a child process for the benchmarks: it prints its port, and serves until its
stdin closes (so none outlives the benchmark, even one killed)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def serving_child(
    command: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """Start ``command``; yield (the port it printed, its pid); stop it."""
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        yield int(child.stdout.readline()), child.pid
    finally:
        child.stdin.close()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()
