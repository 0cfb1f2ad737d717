"""``auto``: the contract sniffed from the first events is the one the request would have named."""

from __future__ import annotations

import pytest

from otelsse import Outcome, StreamMonitor
from tests._fixtures import EXPECTED, fixture_names, read_fixture
from tests._helpers import run_monitor


@pytest.mark.parametrize("name", fixture_names())
def test_explicit_route_and_sniffed_route_agree(name: str) -> None:
    body = read_fixture(name)
    _, sniffed = run_monitor([body], route="auto")
    _, explicit = run_monitor([body], route=EXPECTED[name].route)
    assert sniffed == explicit


def test_sniffer_gives_up_after_a_few_untelling_events() -> None:
    body = b"".join(b"data: tick %d\n\n" % i for i in range(20))
    monitor = StreamMonitor("auto")
    monitor.feed(body)
    assert monitor.route == "generic"
    report = monitor.close()
    assert (report.route, report.outcome, report.event_count) == (
        "generic",
        Outcome.EOF_UNVERIFIED,
        20,
    )
