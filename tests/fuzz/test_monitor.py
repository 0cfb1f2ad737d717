"""``StreamMonitor`` for every route (``ROUTES_PER_EXAMPLE`` of them drawn per example) on garbage
and mutated fixtures: never raises, and the report is the same for every chunking (timing fields
and ``chunk_count`` aside)."""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from ._checks import check_monitor
from ._strategies import (
    FUZZ,
    close_errors,
    draw_cuts,
    draw_garbage,
    draw_mutated_fixture,
    draw_routes,
    draw_swapped_fixture,
    small_limits,
)


def draw_fixture(data: st.DataObject) -> bytes:
    if data.draw(st.booleans(), label="swaps only"):
        return draw_swapped_fixture(data)
    return draw_mutated_fixture(data)


def _check_every_route(data: st.DataObject, body: bytes, small: bool) -> None:
    limits = data.draw(small_limits, label="limits") if small else None
    error = data.draw(close_errors, label="close error")
    stop_at_end = data.draw(st.booleans(), label="stop_at_end")
    cuts = draw_cuts(data, body)
    note(f"limits = {limits!r}, close(error={error!r}), cuts = {sorted(set(cuts))}")
    for route in draw_routes(data):
        check_monitor(body, route, limits, cuts, error, stop_at_end=stop_at_end)


@FUZZ
@given(data=st.data())
def test_monitor_on_garbage_never_raises_and_ignores_the_chunking(data: st.DataObject) -> None:
    _check_every_route(data, draw_garbage(data), small=False)


@FUZZ
@given(data=st.data())
def test_monitor_on_mutated_fixtures_never_raises_and_ignores_the_chunking(
    data: st.DataObject,
) -> None:
    _check_every_route(data, draw_fixture(data), small=False)


@FUZZ
@given(data=st.data())
def test_monitor_with_small_limits_on_garbage_ignores_the_chunking(data: st.DataObject) -> None:
    _check_every_route(data, draw_garbage(data), small=True)


@FUZZ
@given(data=st.data())
def test_monitor_with_small_limits_on_mutated_fixtures_ignores_the_chunking(
    data: st.DataObject,
) -> None:
    _check_every_route(data, draw_fixture(data), small=True)
