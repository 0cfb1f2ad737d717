"""The JSON decoder used once per complete event: orjson or msgspec when installed (``fast``).

orjson is preferred, then msgspec; both reject trailing data as ``json.loads`` does, so "exactly
one JSON value" means the same whichever is used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["JSON_DECODER", "JSONDecodeError", "loads"]

loads: Callable[[str], Any]
JSONDecodeError: tuple[type[Exception], ...]
try:
    import orjson

    loads = orjson.loads
    JSONDecodeError = (orjson.JSONDecodeError, RecursionError)
    JSON_DECODER = "orjson"
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        import msgspec

        loads = msgspec.json.Decoder().decode
        JSONDecodeError = (msgspec.DecodeError, RecursionError)
        JSON_DECODER = "msgspec"
    except ImportError:
        loads = json.loads
        JSONDecodeError = (json.JSONDecodeError, RecursionError)
        JSON_DECODER = "json"
