"""The test tiers, and the one parser build and route decoding every test runs with.

Tiers are markers, every distinct check kept in some tier:

- ``fast``: put on every test outside the tiers below by this plugin. The loop a developer runs
  (``python -m pytest -q -n auto -m fast``): one parser build, one decoding, and one client per tap
  implementation (httpx, httpx async, requests, aiohttp; httpx2 shares httpx's taps).
- ``matrix``: the same checks again across the matrix: httpx2 (this plugin marks every variant
  that runs a client of it) and every read style but each client's default one (marked here
  too), and tests that sweep every fixture or every client themselves (marked where defined).
- ``e2e``: end-to-end runs: subprocesses, real servers (Prometheus, the proxy), other languages'
  clients, the demo.
- ``slow``: exhaustive sweeps.

CI runs every tier (``python -m pytest -q -n auto``). The nightly tier is a command, not a
marker: the sweeps and every Hypothesis property under the pure-Python parser, the generic
decoding and a hundred times the examples (CONTRIBUTING.md):

    OTELSSE_TEST_PARSER=pure OTELSSE_TEST_DECODING=generic OTELSSE_FUZZ_SCALE=100 \\
        python -m pytest -q -n auto -m "slow or hypothesis"

A property draws ``examples(n)`` examples: its ``n`` times ``OTELSSE_FUZZ_SCALE`` (1 by default),
a tenth of that in the fast loop (``-m fast``), which every other run then checks in full.

The framers' build (``OTELSSE_TEST_PARSER``: ``compiled``, the default, as a wheel built with a
C compiler runs, or ``pure``) and the routes' decoding (``OTELSSE_TEST_DECODING``: ``typed``, the
default, as with msgspec installed, or ``generic``) hold for the whole session. The tests that
compare the two builds or the two decodings (``tests/core/test_framing_speedups.py``,
``tests/routes/test_typed_decoding.py``) run both themselves, whatever these say.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from otelsse._core import eventstream, framing
from otelsse._core import json as core_json

# pytest caches each test module's rewritten asserts as bytecode unless writing bytecode is off
# (PYTHONDONTWRITEBYTECODE, set on some machines): then every run rewrites every test module
# again, seconds of each fast loop. The test session writes it (under __pycache__, ignored).
sys.dont_write_bytecode = False

#: The tier markers besides ``fast``.
TIERS = ("matrix", "e2e", "slow")
#: Client libraries whose every test is a matrix variant: they share another's taps.
MATRIX_LIBRARIES = frozenset({"httpx2"})

PARSER = os.environ.get("OTELSSE_TEST_PARSER", "compiled")
DECODING = os.environ.get("OTELSSE_TEST_DECODING", "typed")
#: The share of each property's examples this run draws (set once the options are known).
_scale = float(os.environ.get("OTELSSE_FUZZ_SCALE", "1"))
#: The fast loop draws this share of what the other runs draw.
FAST_SHARE = 0.1


def pytest_configure(config: pytest.Config) -> None:
    global _scale
    if PARSER not in ("compiled", "pure"):
        raise pytest.UsageError(f"OTELSSE_TEST_PARSER={PARSER!r}: compiled or pure")
    if DECODING not in ("typed", "generic"):
        raise pytest.UsageError(f"OTELSSE_TEST_DECODING={DECODING!r}: typed or generic")
    if config.getoption("markexpr", "") == "fast":
        _scale *= FAST_SHARE


def examples(count: int) -> int:
    """How many examples a property of ``count`` draws in this run (at least 5)."""
    return max(5, round(count * _scale))


def _is_matrix_value(value: Any) -> bool:
    """A parameter value that makes a test a matrix variant: a client of a library that shares
    another's taps, or a client read in a style other than its default one."""
    from tests._clients import Client, Style

    if isinstance(value, Client):
        return value.library in MATRIX_LIBRARIES
    if isinstance(value, str):
        return value.partition("-")[0] in MATRIX_LIBRARIES
    if isinstance(value, tuple) and len(value) == 2:
        client, style = value
        if isinstance(client, Client) and isinstance(style, Style):
            return _is_matrix_value(client) or style != client.default_style
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(_is_matrix_value(v) for v in callspec.params.values()):
            item.add_marker(pytest.mark.matrix)
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True, scope="session")
def parser_build() -> Iterator[str]:
    """The parser build for the session (see the module docstring)."""
    saved = framing.simple_event, eventstream.whole_frame
    if PARSER == "pure":
        framing.simple_event = eventstream.whole_frame = None
    else:
        assert None not in saved, "the C speedup is not built (see hatch_build.py)"
    try:
        yield PARSER
    finally:
        framing.simple_event, eventstream.whole_frame = saved


@pytest.fixture(autouse=True, scope="session")
def typed_decoding() -> Iterator[bool]:
    """The routes' decoding for the session (see the module docstring)."""
    saved = core_json.typed_decoding
    core_json.typed_decoding = DECODING == "typed"
    try:
        yield core_json.typed_decoding
    finally:
        core_json.typed_decoding = saved


#: The test module whose first test froze the heap last.
_frozen_for: list[object] = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Many tests collect garbage (an abandoned stream ends when collected), and a collection
    # walks every object the session holds: the collected tests, the fixtures, the imported
    # SDKs. Frozen objects are not walked (gc.freeze), so each module starts from a collected,
    # frozen heap: only garbage made since is collectable, and there is none older (collected
    # first). A third of the fast loop's time, without changing what any test sees.
    module = item.module if isinstance(item, pytest.Function) else None
    if module is not _frozen_for[0]:
        _frozen_for[0] = module
        gc.collect()
        gc.freeze()
