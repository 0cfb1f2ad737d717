"""Every route test runs twice: with the routes' typed reading of their hot events (msgspec
Structs, ``otelsse._core.json.typed_decoding``) and with the generic reading alone, which is the
definition the typed one must match (``test_typed_decoding.py`` compares the two directly)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otelsse._core import json as core_json


@pytest.fixture(autouse=True, scope="module", params=[True, False], ids=["typed", "generic"])
def typed_decoding(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The switch, set for a whole module (module scope: Hypothesis tests may use it)."""
    saved = core_json.typed_decoding
    core_json.typed_decoding = request.param
    try:
        yield request.param
    finally:
        core_json.typed_decoding = saved
