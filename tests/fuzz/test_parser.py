"""``SSEParser`` on garbage: never raises, never shows the chunking, follows the WHATWG rules."""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from tests._whatwg import reference

from ._checks import check_parser, run_parser
from ._strategies import FUZZ_MORE, ONE_READ_BUDGET, draw_any, draw_cuts


@FUZZ_MORE
@given(data=st.data())
def test_parser_never_raises_and_every_chunking_gives_the_events_of_one_read(
    data: st.DataObject,
) -> None:
    body = draw_any(data)
    check_parser(body, draw_cuts(data, body))


@FUZZ_MORE
@given(data=st.data())
def test_parser_with_small_ceilings_never_raises_and_ignores_the_chunking(
    data: st.DataObject,
) -> None:
    body = draw_any(data)
    limits = {
        "max_line_bytes": data.draw(st.integers(1, 4096), label="max_line_bytes"),
        "max_event_bytes": data.draw(st.integers(1, 4096), label="max_event_bytes"),
    }
    note(f"limits = {limits}")
    check_parser(body, draw_cuts(data, body), **limits)


@FUZZ_MORE
@given(data=st.data())
def test_parser_events_are_those_of_a_line_by_line_reading_of_the_whatwg_rules(
    data: st.DataObject,
) -> None:
    body = draw_any(data, ONE_READ_BUDGET)
    events, _ = run_parser([body])
    assert events == [tuple(event) for event in reference(body)[0]]
