"""A stream cut at any byte is never ``complete`` unless the cut falls after its terminal event.

For every shared fixture and every cut position ``c``, the monitor sees ``body[:c]`` and a clean
EOF. Let ``p`` be the shortest prefix after which the route's terminal event has been dispatched
(for a route that knows its terminal only at the stream's end, the prefixes whose end finds it).
Then: a cut before ``p`` is never ``complete`` (and is exactly ``truncated`` for a stream that
would otherwise have ended well), and the full body gives the expected outcome.

Re-parsing every prefix from the start would be quadratic, so the monitor is snapshotted (pickled)
after each event while feeding one byte at a time, and each cut resumes from the latest snapshot
and feeds the rest of its prefix: what is fed is still exactly ``body[:c]``. Fixtures larger than
``FULL_SWEEP_LIMIT`` are cut around every line end, inside multi-byte characters and at a stride in
the fast loop, and at every byte in the ``slow`` sweep (past ``SLOW_SWEEP_LIMIT``, every byte of
the fixture's ``sweep_excerpt``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable

import pytest

from otelsse import StreamMonitor
from tests._fixtures import EXPECTED, fixture_names, read_fixture
from tests._helpers import FULL_SWEEP_LIMIT, sweep_excerpt, windowed_positions

_WELL_FORMED = ("complete", "incomplete")
_LARGE = {name for name in fixture_names() if len(read_fixture(name)) > FULL_SWEEP_LIMIT}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.slow] if name in _LARGE else [])
        for name in fixture_names()
    ],
)
def test_every_cut_before_the_terminal_event_is_not_complete(name: str) -> None:
    body = sweep_excerpt(read_fixture(name))
    assert_no_cut_before_the_terminal_is_complete(name, body, range(len(body) + 1))


@pytest.mark.parametrize("name", sorted(_LARGE))
def test_windowed_cuts_of_a_large_fixture_before_the_terminal_are_not_complete(name: str) -> None:
    body = read_fixture(name)
    cuts = [0, *windowed_positions(body), len(body)]
    assert_no_cut_before_the_terminal_is_complete(name, body, cuts)


def assert_no_cut_before_the_terminal_is_complete(
    name: str, body: bytes, cuts: Iterable[int]
) -> None:
    """Cut ``body`` (fixture ``name`` or its excerpt) at each of ``cuts`` (ascending) and judge
    each prefix as a clean EOF.

    A cut before the terminal event is never ``complete``; in a well-formed fixture it is
    ``truncated``, or ``terminal_missing`` once every finish reason of the whole stream has
    arrived (the answer whole, only its end marker missing).
    """
    expected = EXPECTED[name]
    whole = StreamMonitor(expected.route)
    whole.feed(body)
    finish_reasons = whole.close().finish_reasons
    monitor = StreamMonitor(expected.route)
    snapshots = [(0, pickle.dumps(monitor))]
    terminal_at: int | None = None
    for position in range(1, len(body) + 1):
        if monitor.feed(body[position - 1 : position]):
            snapshots.append((position, pickle.dumps(monitor)))
        if terminal_at is None and monitor.terminal_seen:
            terminal_at = position

    index = 0
    for cut in cuts:
        while index + 1 < len(snapshots) and snapshots[index + 1][0] <= cut:
            index += 1
        start, snapshot = snapshots[index]
        resumed: StreamMonitor = pickle.loads(snapshot)
        resumed.feed(body[start:cut])
        report = resumed.close()
        outcome = report.outcome.value
        # A route that knows its terminal only at the stream's end (the last of an AG-UI
        # response's runs, a host profile's clean EOF) says at each cut whether that end found it.
        before_terminal = not report.terminal_seen if terminal_at is None else cut < terminal_at
        if before_terminal:
            assert outcome != "complete", cut
            if expected.outcome in _WELL_FORMED:
                if outcome == "terminal_missing":
                    assert report.finish_reasons == finish_reasons, cut
                    assert not report.pending_line_chars, cut
                    assert not report.discarded_event, cut
                else:
                    assert outcome == "truncated", cut
    assert outcome == expected.outcome
    if expected.outcome in _WELL_FORMED:
        assert report.terminal_seen, "a well-formed fixture has a terminal event"
