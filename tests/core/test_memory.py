"""A peer that never ends a line or an event hits the ceiling, and memory stays bounded."""

from __future__ import annotations

import tracemalloc

import pytest

from otelsse import Limits, Outcome, StreamMonitor

MiB = 1024 * 1024
LIMITS = Limits(max_line_bytes=1 * MiB, max_event_bytes=2 * MiB)
CHUNK = 64 * 1024
TOTAL = 64 * MiB


@pytest.mark.parametrize(
    ("chunk", "stage"),
    [
        (b"data: " + b"x" * (CHUNK - 6), "line"),  # one line that never ends
        ((b"data: " + b"y" * 58 + b"\n") * (CHUNK // 65), "event"),  # lines, no blank line
    ],
)
def test_unending_peer_is_cut_at_the_ceiling_with_bounded_memory(chunk: bytes, stage: str) -> None:
    monitor = StreamMonitor("openai.chat_completions", limits=LIMITS)
    tracemalloc.start()
    try:
        sent = 0
        while sent < TOTAL:
            monitor.feed(chunk)
            sent += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    report = monitor.close()
    assert report.outcome is Outcome.BUFFER_LIMIT
    assert report.buffer_limit_stage == stage
    assert report.bytes_received == sent
    # Everything held is the pending buffer below its ceiling, plus one chunk being fed.
    assert peak < LIMITS.max_event_bytes + 4 * CHUNK, peak


@pytest.mark.parametrize("events_per_read", [1, 200])
def test_a_monitor_keeps_none_of_a_read_once_its_events_are_judged(events_per_read: int) -> None:
    # Thousands of streams stay open between reads: what each holds then is fixed state, not
    # the last read (the parser keeps a read only until its consumer has judged its events).
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"t" * 200 + b'"}}]}\n\n'
    read = event * events_per_read
    monitor = StreamMonitor("openai.chat_completions")
    monitor.feed(read)  # the first read builds the state that stays
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        data = read[:1] + read[1:]  # a new object, which the caller lets go after the feed
        monitor.feed(data)
        del data
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * len(event), held
