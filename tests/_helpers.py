"""Helpers shared by the tests: feeding a monitor, splitting bodies, reading SSE without otelsse,
the route names with the URL path each is served on, and bounded waits."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from otelsse import SSEEvent, SSEParser, StreamMonitor, StreamReport
from otelsse._monitor import StreamError

T = TypeVar("T")

CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"
GEMINI = "gemini.generate_content"
#: The provider routes (every route but ``generic``), each with tool calls in its contract.
ROUTES = (CHAT, RESPONSES, ANTHROPIC, GEMINI)

#: The URL path each route is served on, so that a reader (or gate) detects the route from the
#: request.
ROUTE_PATHS = {
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    ANTHROPIC: "/v1/messages",
    GEMINI: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
}


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


def event_ends(body: bytes) -> list[int]:
    """Offsets just after each blank line that ends an event (CRLF or LF framing)."""
    separator = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    offsets, start = [], 0
    while (found := body.find(separator, start)) != -1:
        start = found + len(separator)
        offsets.append(start)
    return offsets


def sse_events(body: bytes) -> list[tuple[str, str]]:
    """(event type, data) of every dispatched event, read without otelsse; an unterminated last
    block is dropped."""
    text = body.decode("utf-8").replace("\r\n", "\n")
    events = []
    for block in text.split("\n\n")[:-1]:  # what follows the last blank line is never dispatched
        kind, data = "message", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
        if data:
            events.append((kind, "\n".join(data)))
    return events


def one_byte_at_a_time(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


#: Fixtures up to this size are split (and cut) at every byte in the fast loop; larger ones
#: at ``windowed_positions``, and at every byte only in the ``slow`` sweeps.
FULL_SWEEP_LIMIT = 4 * 1024
#: Positions either side of a line end that the windowed sweep splits at.
WINDOW = 3
#: The windowed sweep also splits at every ``STRIDE``-th byte.
STRIDE = 251
#: Multi-byte characters (from the start) whose every inner position the windowed sweep splits at.
MULTIBYTE_CHARACTERS = 64


#: The ``slow`` sweeps cost a parse of up to the whole body per position: a fixture longer than
#: this is swept as its ``sweep_excerpt`` (one of 256 KiB took six minutes on two cores; its
#: excerpt, 24 KiB, has every kind of event and line it has, its longest lines aside). Every
#: other recorded fixture is shorter, and swept whole.
SLOW_SWEEP_LIMIT = 32 * 1024


def sweep_excerpt(body: bytes) -> bytes:
    """``body``, or past ``SLOW_SWEEP_LIMIT`` its events up to that size followed by the fewest
    last events with which the excerpt is judged as the whole body is (outcome and finish
    reasons): the start, the middle's kinds of event and the end of the stream, in one stream."""
    if len(body) <= SLOW_SWEEP_LIMIT:
        return body
    ends = [0, *event_ends(body)]
    head = max(end for end in ends if end <= SLOW_SWEEP_LIMIT)
    whole = run_monitor([body])[1]
    for start in sorted((end for end in ends if end > head), reverse=True):
        excerpt = body[:head] + body[start:]
        report = run_monitor([excerpt])[1]
        if (report.outcome, report.finish_reasons) == (whole.outcome, whole.finish_reasons):
            return excerpt
    raise AssertionError("no run of last events gives the excerpt the whole body's verdict")


def windowed_positions(body: bytes) -> list[int]:
    """Split positions around every line end, inside multi-byte characters, and at a stride."""
    positions = set(range(STRIDE, len(body), STRIDE))
    for at, byte in enumerate(body):
        if byte in b"\r\n":
            positions.update(range(at - WINDOW + 1, at + WINDOW + 1))
    leads = [at for at, byte in enumerate(body) if byte >= 0xC0][:MULTIBYTE_CHARACTERS]
    for lead in leads:
        positions.update(range(lead, lead + 4))
    return sorted(p for p in positions if 0 < p < len(body))


def parser_state(parser: SSEParser) -> dict[str, object]:
    """Everything a (closed) parser reports about the stream."""
    return {
        "last_event_id": parser.last_event_id,
        "retry": parser.retry,
        "comment_count": parser.comment_count,
        "unknown_field_count": parser.unknown_field_count,
        "invalid_utf8_count": parser.invalid_utf8_count,
        "decoded_chars": parser.decoded_chars,
        "limit_exceeded": parser.limit_exceeded,
        "discarded_event": parser.discarded_event,
        "pending_line_chars": parser.pending_line_chars,
        "pending_event_chars": parser.pending_event_chars,
    }


#: A bounded wait must end within this share of its bound. One that needs more was ended by the
#: bound, or by another timeout as long as it, not by what it waits for: a bound equal to a
#: client's own timeout once hid a stream that only that timeout ended.
WELL_BEFORE = 0.5


def waited(wait: Callable[[float], T], bound: float) -> T:
    """``wait(bound)`` (an ``Event.wait``, a ``Thread.join``, a ``Popen.wait``...), asserted to
    have returned well before ``bound``; what it returned."""
    began = time.monotonic()
    result = wait(bound)
    took = time.monotonic() - began
    assert took < bound * WELL_BEFORE, f"the wait took {took:.2f} s of its {bound} s bound"
    return result


def joined(thread: threading.Thread, bound: float) -> None:
    """``thread`` ended, well before ``bound``."""
    waited(thread.join, bound)
    assert not thread.is_alive(), f"{thread.name} did not end within {bound} s"


def soon(condition: Callable[[], T], bound: float, what: str) -> T:
    """``condition()``, polled until it holds, asserted to hold well before ``bound``; its
    value."""
    began = time.monotonic()
    while not (value := condition()):
        took = time.monotonic() - began
        assert took < bound * WELL_BEFORE, f"{what}: not within {took:.2f} s of its {bound} s bound"
        time.sleep(0.001)
    return value
