"""Invariant (DESIGN §1): the same bytes under any chunking give the same events, the same report
(except ``chunk_count``) and the same outcome. Checked over every shared fixture: whole body, one
byte at a time, every two-part split, seeded random multi-part splits, and a Hypothesis property.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._fixtures import EXPECTED, read_shared, shared_names
from tests._helpers import comparable, one_byte_at_a_time, random_split, run_monitor

# Every two-part split costs a full parse per position, i.e. quadratic time. For the one fixture
# above this size (a 250 KB Anthropic stream of server-tool results) every split position is
# still checked where framing decisions happen (within 8 bytes of every line end, and the first
# and last 4 KiB), plus a prime stride through the long lines between them.
EXHAUSTIVE_SPLIT_LIMIT = 64 * 1024
_STRIDE = 61


def _split_positions(body: bytes) -> range | list[int]:
    if len(body) <= EXHAUSTIVE_SPLIT_LIMIT:
        return range(1, len(body))
    positions = set(range(1, 4096)) | set(range(len(body) - 4096, len(body)))
    positions |= set(range(1, len(body), _STRIDE))
    start = 0
    while (end := body.find(b"\n", start)) >= 0:
        positions |= set(range(max(1, end - 8), min(len(body), end + 9)))
        start = end + 1
    return sorted(positions)


@pytest.fixture(scope="module", params=shared_names())
def fixture(request: pytest.FixtureRequest) -> tuple[str, bytes, tuple]:
    body = read_shared(request.param)
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


def test_every_two_part_split_matches_whole_body(fixture: tuple[str, bytes, tuple]) -> None:
    _, body, (events, report) = fixture
    for position in _split_positions(body):
        got_events, got_report = run_monitor([body[:position], body[position:]])
        assert got_events == events, position
        assert comparable(got_report) == report, position


def test_seeded_random_splits_match_whole_body(fixture: tuple[str, bytes, tuple]) -> None:
    name, body, (events, report) = fixture
    rng = random.Random(name)
    for max_size in (2, 3, 7, 64, 4096):
        got_events, got_report = run_monitor(random_split(body, rng, max_size))
        assert got_events == events, max_size
        assert comparable(got_report) == report, max_size


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_of_any_fixture_gives_the_same_result(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(shared_names()))
    body = read_shared(name)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=40)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    assert b"".join(chunks) == body
    expected_events, expected_report = run_monitor([body])
    got_events, got_report = run_monitor(chunks)
    assert got_events == expected_events
    assert comparable(got_report) == comparable(expected_report)
