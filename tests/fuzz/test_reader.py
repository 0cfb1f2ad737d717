"""``read_stream`` for every route (``ROUTES_PER_EXAMPLE`` of them drawn per example) on garbage
and mutated fixtures: only a ``StreamResult`` or a ``StreamFault``, the same for every chunking,
and the monitor's verdict."""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from ._checks import check_agreement, check_reader
from ._strategies import (
    FUZZ,
    FUZZ_MORE,
    ONE_READ_BUDGET,
    draw_any,
    draw_cuts,
    draw_garbage,
    draw_mutated_fixture,
    draw_routes,
    draw_swapped_fixture,
    small_limits,
)


@FUZZ
@given(data=st.data())
def test_reader_on_garbage_gives_a_result_or_a_fault_whatever_the_chunking(
    data: st.DataObject,
) -> None:
    body = draw_garbage(data)
    cuts = draw_cuts(data, body)
    for route in draw_routes(data):
        check_reader(body, route, None, cuts)


@FUZZ
@given(data=st.data())
def test_reader_on_mutated_fixtures_gives_a_result_or_a_fault_whatever_the_chunking(
    data: st.DataObject,
) -> None:
    swaps_only = data.draw(st.booleans(), label="swaps only")
    body = draw_swapped_fixture(data) if swaps_only else draw_mutated_fixture(data)
    cuts = draw_cuts(data, body)
    for route in draw_routes(data):
        check_reader(body, route, None, cuts)


@FUZZ
@given(data=st.data())
def test_reader_with_small_limits_gives_a_result_or_a_fault_whatever_the_chunking(
    data: st.DataObject,
) -> None:
    body = draw_any(data)
    limits = data.draw(small_limits, label="limits")
    cuts = draw_cuts(data, body)
    note(f"limits = {limits!r}")
    for route in draw_routes(data):
        check_reader(body, route, limits, cuts)


@FUZZ_MORE
@given(data=st.data())
def test_reader_verdict_is_the_monitor_outcome(data: st.DataObject) -> None:
    body = draw_any(data, ONE_READ_BUDGET)
    for route in draw_routes(data):
        check_agreement(body, route, None)
