"""The Hypothesis side of the fuzz tests: settings, strategies, a ``Chooser`` of draws."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st

from otelsse import Limits
from otelsse.routes import route_names
from tests._tiers import examples

from ._inputs import (
    BIG_INT,
    FIXTURE_NAMES,
    ROUTE_KEYS,
    ROUTE_WORDS,
    SEED_BUDGET,
    SWAPS,
    TOKENS,
    mutate,
    seed,
)

T = TypeVar("T")

#: Examples per property (``tests/_tiers.py``: ``OTELSSE_FUZZ_SCALE`` scales them).
EXAMPLES = examples(200)

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a shared, noisy machine: no timing thresholds
    print_blob=True,
    # No "explain" phase: it re-runs a failing example hundreds of times (a minute per test
    # here); the notes and the blob are enough to reproduce.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

#: The same, twice as many examples: for the properties that read each input once.
FUZZ_MORE = settings(FUZZ, max_examples=2 * EXAMPLES)

#: Every route the registry accepts, ``auto`` and ``generic`` included.
ROUTES: list[str] = route_names()
#: The routes one example is checked on: drawn, so that a run's examples check every route
#: (each about ``EXAMPLES * 4 / len(ROUTES)`` times a property) and a failure shrinks to its
#: route, while a property's cost stays flat as routes are added.
ROUTES_PER_EXAMPLE = 4


def draw_routes(data: st.DataObject) -> list[str]:
    """``ROUTES_PER_EXAMPLE`` distinct routes to check one example on."""
    return data.draw(st.permutations(ROUTES), label="routes")[:ROUTES_PER_EXAMPLE]


class DrawChooser:
    """A ``Chooser`` whose choices are Hypothesis draws (so they shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int, label: str) -> int:
        return self._data.draw(st.integers(low, high), label=label)

    def choice(self, options: Sequence[T], label: str) -> T:
        return self._data.draw(st.sampled_from(options), label=label)


# --------------------------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------------------------

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([BIG_INT, 10**30, 2**63, -(2**63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(ROUTE_WORDS)
    | st.text(max_size=4)
)
#: JSON values built from the keys and words the routes look at.
route_json = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(ROUTE_KEYS), children, max_size=5)
    ),
    max_leaves=16,
)


def _data_event(value: Any) -> bytes:
    return b"data: " + json.dumps(value, separators=(",", ":")).encode() + b"\n\n"


_piece = st.one_of(
    st.sampled_from(TOKENS),
    st.sampled_from(ROUTE_WORDS).map(lambda word: b"event: " + word.encode() + b"\n"),
    route_json.map(_data_event),
    route_json.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=8),
)

#: Bytes shaped like SSE: field lines, route event names, JSON with route keys, tokens, noise.
sse_soup = st.lists(_piece, max_size=24).map(b"".join)

_field_names = st.sampled_from(["data", "event", "id", "retry", "", "x", "Data", "data ", "\ufeff"])
_field_values = st.one_of(
    st.sampled_from(ROUTE_WORDS),
    route_json.map(lambda value: json.dumps(value, separators=(",", ":"))),
    st.sampled_from(["0", "1000", " x", "\x00", "\ufffd", ":", "\u0661", "+1", "-1", "1e3"]),
    st.sampled_from([18, 19, 20, 300, 301, 4300, 4301, 5000]).map(lambda n: "9" * n),
    st.text(max_size=6),
)
_line = st.one_of(
    st.tuples(_field_names, st.sampled_from([":", ": ", ":  ", ""]), _field_values).map("".join),
    st.sampled_from(ROUTE_WORDS).map(lambda word: "event: " + word),
    route_json.map(lambda value: "data: " + json.dumps(value, separators=(",", ":"))),
    st.sampled_from([":", ": keepalive", "data", "data:", "event", "event:", "id", "retry"]),
)
_block = st.tuples(
    st.lists(_line, max_size=4),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.integers(0, 3),  # blank lines after the block: 0 runs on into the next block
)


def _blocks_to_bytes(blocks: list[tuple[list[str], str, int]]) -> bytes:
    return "".join(
        "".join(line + end for line in lines) + end * blank for lines, end, blank in blocks
    ).encode("utf-8", "surrogatepass")


#: Text that is SSE line by line: field lines, comments, odd names, one to three blank lines.
sse_lines = st.lists(_block, max_size=8).map(_blocks_to_bytes)

#: Any bytes: raw binary, SSE-shaped soup, or SSE lines.
garbage = st.one_of(st.binary(max_size=512), sse_soup, sse_lines)


def _small(name: str) -> st.SearchStrategy[int]:
    if name.endswith("_bytes"):
        return st.integers(64, 4096)
    if name.endswith("_chars"):
        return st.integers(0, 256)
    return st.integers(0, 4)  # counts: tool calls, parts


#: Small ceilings for every field of ``Limits``: every limit is likely to be hit somewhere.
small_limits = st.builds(
    Limits, **{field.name: _small(field.name) for field in dataclasses.fields(Limits)}
)

close_errors = st.sampled_from([None, None, "transport", "timeout", "cancelled"])


def draw_cuts(data: st.DataObject, body: bytes) -> list[int]:
    """Split positions for the random chunking (shrinks towards fewer, earlier cuts)."""
    if len(body) < 2:
        return []
    return data.draw(st.lists(st.integers(1, len(body) - 1), max_size=64), label="cuts")


#: Seed budget for the properties that read each input once (the fixtures almost whole).
ONE_READ_BUDGET = 64 * 1024


def draw_mutated_fixture(data: st.DataObject, budget: int = SEED_BUDGET) -> bytes:
    """A recorded fixture (trimmed to ``budget``) with one to four mutations."""
    name = data.draw(st.sampled_from(FIXTURE_NAMES), label="fixture")
    count = data.draw(st.integers(1, 4), label="mutation count")
    body, done = mutate(seed(name, budget), DrawChooser(data), count)
    note(f"fixture {name}, mutations: {done}")
    note(f"body = {body!r}")
    return body


def draw_swapped_fixture(data: st.DataObject, budget: int = SEED_BUDGET) -> bytes:
    """A recorded fixture (trimmed to ``budget``) with one or two JSON value swaps only."""
    name = data.draw(st.sampled_from(FIXTURE_NAMES), label="fixture")
    count = data.draw(st.integers(1, 2), label="swap count")
    body, done = mutate(seed(name, budget), DrawChooser(data), count, SWAPS)
    note(f"fixture {name}, swaps: {done}")
    note(f"body = {body!r}")
    return body


def draw_any(data: st.DataObject, budget: int = SEED_BUDGET) -> bytes:
    """Garbage, a mutated fixture or a swapped fixture."""
    kind = data.draw(st.sampled_from(["garbage", "mutated", "swapped"]), label="input kind")
    if kind == "garbage":
        return draw_garbage(data)
    if kind == "mutated":
        return draw_mutated_fixture(data, budget)
    return draw_swapped_fixture(data, budget)


def draw_garbage(data: st.DataObject) -> bytes:
    body = data.draw(garbage, label="garbage")
    note(f"body = {body!r}")
    return body
