"""Invariant (docs/maintainers/architecture.md): the same bytes under any chunking give the same
events, the same report (except ``chunk_count``) and the same outcome. Checked over every recorded
and synthetic fixture: whole body, one byte at a time, two-part splits, seeded random multi-part
splits, and a Hypothesis property.

Every two-part split costs a full parse per position, so the sweep is quadratic. Fixtures up to
``FULL_SWEEP_LIMIT`` bytes are split at every position (the matrix tier); larger ones are split
in a window around every line end, inside multi-byte characters and at a stride there, and at
every position in the ``slow`` sweep (worker processes on all cores); a fixture longer than
``SLOW_SWEEP_LIMIT`` is swept as its excerpt (``sweep_excerpt``: its first and last events).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import re
from concurrent.futures import ProcessPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otelsse._core import framing
from tests._fixtures import EXPECTED, fixture_names, read_fixture
from tests._helpers import (
    FULL_SWEEP_LIMIT,
    STRIDE,
    comparable,
    one_byte_at_a_time,
    random_split,
    run_monitor,
    sweep_excerpt,
    windowed_positions,
)
from tests._tiers import examples


def _mismatched_splits(body: bytes, positions: list[int], expected: tuple) -> list[int]:
    """Split positions whose two-part feed differs from the whole body (run in a worker)."""
    events, report = expected
    bad = []
    for position in positions:
        got_events, got_report = run_monitor([body[:position], body[position:]])
        if got_events != events or comparable(got_report) != report:
            bad.append(position)
    return bad


def _run_as(build: str) -> None:
    """A spawned worker imports the parser afresh: make it the build the test runs as."""
    if build == "pure":
        framing.simple_event = None


@pytest.fixture(scope="module", params=fixture_names())
def fixture(request: pytest.FixtureRequest) -> tuple[str, bytes, tuple]:
    body = read_fixture(request.param)
    events, report = run_monitor([body])
    return request.param, body, (events, comparable(report))


def test_whole_body_classifies_as_expected(fixture: tuple[str, bytes, tuple]) -> None:
    name, _, (events, report) = fixture
    expected = EXPECTED[name]
    assert events, "every fixture has events"
    assert (report.route, report.outcome.value, report.stop_reason) == expected


def test_one_byte_at_a_time_matches_whole_body(fixture: tuple[str, bytes, tuple]) -> None:
    _, body, (events, report) = fixture
    got_events, got_report = run_monitor(one_byte_at_a_time(body))
    assert got_events == events
    assert comparable(got_report) == report
    assert got_report.chunk_count == len(body)


@pytest.mark.matrix  # every split of every small fixture
def test_two_part_splits_match_whole_body(fixture: tuple[str, bytes, tuple]) -> None:
    _, body, expected = fixture
    if len(body) <= FULL_SWEEP_LIMIT:
        positions = list(range(1, len(body)))
    else:
        positions = windowed_positions(body)
        assert len(positions) > len(body) // STRIDE
    assert _mismatched_splits(body, positions, expected) == []


def _event_reads(body: bytes) -> list[bytes]:
    """``body`` as a live stream arrives: one read per event, each ending at its blank line."""
    ends = [m.end() for m in re.finditer(rb"\r\n\r\n|\n\n|\r\r|\n\r\n|\r\n\n", body)]
    cuts = [0, *ends, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts) if b > a]


@pytest.mark.parametrize("by_name", [False, True], ids=["auto", "named"])
def test_one_read_per_event_matches_whole_body(
    fixture: tuple[str, bytes, tuple], by_name: bool
) -> None:
    # The shape the fast paths are for (a read that is exactly one simple event); a stream read
    # by its own route as well as sniffed.
    _, body, (events, report) = fixture
    route = report.route if by_name and report.route != "generic" else "auto"
    reads = _event_reads(body)
    assert b"".join(reads) == body
    got_events, got_report = run_monitor(reads, route)
    assert got_events == events
    if route == "auto":
        assert comparable(got_report) == report
    else:
        assert comparable(got_report) == comparable(run_monitor([body], route)[1])


LARGE = [name for name in fixture_names() if len(read_fixture(name)) > FULL_SWEEP_LIMIT]


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_every_two_part_split_of_a_large_fixture_matches_whole_body(
    name: str, parser_build: str
) -> None:
    body = sweep_excerpt(read_fixture(name))
    events, report = run_monitor([body])
    expected = (events, comparable(report))
    workers = os.cpu_count() or 1
    shares = [list(range(1 + k, len(body), workers)) for k in range(workers)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_run_as, initargs=(parser_build,)
    ) as pool:
        results = list(pool.map(_mismatched_splits, [body] * workers, shares, [expected] * workers))
    assert sum(len(share) for share in shares) == len(body) - 1
    assert [position for bad in results for position in bad] == []


def test_seeded_random_splits_match_whole_body(fixture: tuple[str, bytes, tuple]) -> None:
    name, body, (events, report) = fixture
    rng = random.Random(name)
    for max_size in (2, 3, 7, 64, 4096):
        got_events, got_report = run_monitor(random_split(body, rng, max_size))
        assert got_events == events, max_size
        assert comparable(got_report) == report, max_size


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_of_any_fixture_gives_the_same_result(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(fixture_names()))
    body = read_fixture(name)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=40)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    assert b"".join(chunks) == body
    expected_events, expected_report = run_monitor([body])
    got_events, got_report = run_monitor(chunks)
    assert got_events == expected_events
    assert comparable(got_report) == comparable(expected_report)
