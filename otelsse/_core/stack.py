"""Running a function on a stack of its own, so that a verdict never depends on the caller's.

Python bounds recursion by frames in use, the caller's included: decoding JSON or validating a
schema deep in an application's stack can raise ``RecursionError`` on input that a shallow
caller reads. Where that would change a verdict, the work runs again on a fresh thread's stack.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["on_fresh_stack"]

_T = TypeVar("_T")


def on_fresh_stack(function: Callable[[], _T]) -> _T:
    """``function()`` in a thread of its own, whose stack starts empty, so that how deep it may
    recurse does not depend on how deep its caller already was; what it raises is raised here."""
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as error:  # handed to the caller, which decides
            outcome.append((False, error))

    thread = threading.Thread(target=target, name="otelsse-fresh-stack", daemon=True)
    thread.start()
    thread.join()
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value  # type: ignore[no-any-return]
