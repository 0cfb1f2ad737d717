"""``gemini.generate_content``: no end marker, so a chunk after every finishReason is extra."""

from __future__ import annotations

from otelsse import Outcome
from tests._fixtures import read_fixture
from tests._helpers import run_monitor


def test_gemini_chunk_after_finish_reason_is_an_anomaly() -> None:
    body = read_fixture("real/gemini-text.sse")
    last = body.rstrip(b"\r\n").rsplit(b"\r\n\r\n", 1)[-1]
    _, report = run_monitor([body + last + b"\r\n\r\n"], route="gemini.generate_content")
    assert report.outcome is Outcome.COMPLETE
    assert report.anomalies == {"event_after_terminal": 1}
