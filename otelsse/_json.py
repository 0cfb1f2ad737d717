"""The JSON decoder used once per complete event: orjson when installed (the ``fast`` extra)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["JSON_DECODER", "JSONDecodeError", "loads"]

loads: Callable[[str], Any]
try:
    import orjson

    loads = orjson.loads
    JSONDecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, RecursionError)
    JSON_DECODER = "orjson"
except ImportError:  # pragma: no cover - exercised only where orjson is absent
    loads = json.loads
    JSONDecodeError = (json.JSONDecodeError, RecursionError)
    JSON_DECODER = "json"
