"""``openai.responses``: sequence numbers, and the ``[DONE]`` some gateways add."""

from __future__ import annotations

from otelsse import Outcome
from tests._fixtures import read_fixture
from tests._helpers import run_monitor


def test_responses_sequence_gap_is_an_anomaly_not_a_failure() -> None:
    body = read_fixture("real/openai-responses-text.sse")
    blocks = body.split(b"\n\n")
    gapped = b"\n\n".join(blocks[:3] + blocks[4:])  # drop one mid-stream event
    _, report = run_monitor([gapped], route="openai.responses")
    assert report.anomalies.get("sequence_gap") == 1


def test_responses_terminal_may_be_followed_by_one_done_marker() -> None:
    body = read_fixture("real/openai-responses-text.sse") + b"data: [DONE]\n\n"
    _, once = run_monitor([body], route="openai.responses")
    _, twice = run_monitor([body + b"data: [DONE]\n\n"], route="openai.responses")
    assert once.outcome is Outcome.COMPLETE
    assert once.anomalies == {}
    assert twice.anomalies == {"unexpected_done": 1}
