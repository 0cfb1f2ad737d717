"""Feeding helpers shared by the invariance, truncation and outcome tests."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

from otelsse import SSEEvent, StreamMonitor, StreamReport
from otelsse.monitor import StreamError


def run_monitor(
    chunks: Iterable[bytes], route: str = "auto", error: StreamError | None = None
) -> tuple[list[SSEEvent], StreamReport]:
    """Feed ``chunks`` to a fresh monitor; return every event and the report."""
    monitor = StreamMonitor(route)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(monitor.feed(chunk))
    return events, monitor.close(error=error)


def comparable(report: StreamReport) -> StreamReport:
    """The report without the one field that depends on chunking by definition."""
    return dataclasses.replace(report, chunk_count=0)


def random_split(body: bytes, rng: random.Random, max_size: int = 64) -> list[bytes]:
    """Cut ``body`` into random pieces of 1..max_size bytes."""
    chunks, position = [], 0
    while position < len(body):
        size = rng.randint(1, max_size)
        chunks.append(body[position : position + size])
        position += size
    return chunks


def one_byte_at_a_time(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]
