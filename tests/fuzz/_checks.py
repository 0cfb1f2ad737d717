"""The properties themselves, engine-neutral: each ``check_*`` raises on a violation.

An exception from otelsse propagates as it is (so that Hypothesis tells distinct bugs apart by
where they are raised), with a note naming the route and the chunking; a disagreement is an
``AssertionError`` whose message says what differed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from otelsse import (
    Limits,
    Outcome,
    ParserClosedError,
    SSEParser,
    StreamFault,
    StreamMonitor,
    StreamReport,
    read_stream,
)
from otelsse._core.state import SERVER
from otelsse._monitor import StreamError
from otelsse._tools import DUPLICATE_TOOL_CALL_ID
from tests._helpers import parser_state

#: Report fields that depend on the clock, and ``chunk_count`` (on the chunking, by definition).
UNCOMPARED = frozenset(
    {
        "time_to_first_byte",
        "time_to_first_event",
        "time_to_first_output",
        "time_per_output_chunk",
        "max_inter_event_gap",
        "duration",
        "chunk_count",
    }
)

Chunking = tuple[str, list[bytes]]


@contextmanager
def context(what: str) -> Iterator[None]:
    """Add ``what`` (route, chunking) to any exception that leaves the block."""
    try:
        yield
    except BaseException as exc:
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"fuzz context: {what}")
        raise


def pieces(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``body`` cut at ``cuts`` (any order, duplicates and out-of-range positions ignored)."""
    points = sorted({cut for cut in cuts if 0 < cut < len(body)})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


_BLANK_LINES = re.compile(rb"(?:\r\n|\r|\n){2,}")


def event_reads(body: bytes) -> list[bytes]:
    """``body`` as a live server sends it: one read per event, each with its blank lines."""
    return pieces(body, [match.end() for match in _BLANK_LINES.finditer(body)])


def chunkings(body: bytes, cuts: Sequence[int]) -> list[Chunking]:
    """One read, one byte per read, one read per event, and a split at ``cuts``."""
    return [
        ("one read", [body]),
        ("one byte per read", [body[i : i + 1] for i in range(len(body))]),
        ("one read per event", event_reads(body)),
        (f"split at {sorted({c for c in cuts if 0 < c < len(body)})}", pieces(body, cuts)),
    ]


def untimed(report: StreamReport) -> dict[str, Any]:
    """Every report field but the clock-dependent ones and ``chunk_count``."""
    fields = dataclasses.fields(report)
    found = {f.name: getattr(report, f.name) for f in fields if f.name not in UNCOMPARED}
    found["anomalies"] = dict(found["anomalies"])
    return found


def read_until_end(report: StreamReport) -> dict[str, Any]:
    """``untimed``, for a reader that stops reading at the route's last event: how many bytes
    it read then depends on where the chunk holding that event ended."""
    found = untimed(report)
    del found["bytes_received"]
    return found


def differences(expected: dict[str, Any], got: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        key: (expected.get(key), got.get(key))
        for key in sorted(expected.keys() | got.keys())
        if expected.get(key) != got.get(key)
    }


# --------------------------------------------------------------------------------------------
# SSEParser
# --------------------------------------------------------------------------------------------


def run_parser(chunks: list[bytes], **limits: int) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    parser = SSEParser(**limits)
    events = []
    for chunk in chunks:
        events.extend(tuple(event) for event in parser.feed(chunk))
    events.extend(tuple(event) for event in parser.close())
    state = parser_state(parser)
    for late in (lambda: parser.feed(b"data: x\n\n"), parser.close):
        try:
            late()
        except ParserClosedError:
            pass
        else:
            raise AssertionError("feed()/close() after close() did not raise ParserClosedError")
    return events, state


def check_parser(body: bytes, cuts: Sequence[int], **limits: int) -> list[tuple[Any, ...]]:
    """Never raises; every chunking gives the events and parser state of one read."""
    expected: tuple[list[tuple[Any, ...]], dict[str, Any]] | None = None
    for name, chunks in chunkings(body, cuts):
        with context(f"SSEParser({limits}), chunking {name}"):
            events, state = run_parser(chunks, **limits)
        if expected is None:
            expected = events, state
            continue
        assert events == expected[0], f"events differ from one read under chunking {name}"
        assert state == expected[1], (
            f"parser state differs from one read under chunking {name}: "
            f"{differences(expected[1], state)} (field: (one read, this chunking))"
        )
    assert expected is not None
    return expected[0]


# --------------------------------------------------------------------------------------------
# StreamMonitor
# --------------------------------------------------------------------------------------------


def run_monitor(
    chunks: list[bytes],
    route: str,
    limits: Limits | None,
    error: StreamError | None,
    *,
    stop_at_end: bool = False,
) -> tuple[list[tuple[Any, ...]], StreamReport]:
    monitor = StreamMonitor(route, limits=limits, stop_at_end=stop_at_end)
    events = []
    for at, chunk in enumerate(chunks):
        events.extend(tuple(event) for event in monitor.feed(chunk, now=float(at)))
    report = monitor.close(float(len(chunks)), error=error)
    assert isinstance(report, StreamReport), type(report)
    assert isinstance(report.outcome, Outcome), f"outcome {report.outcome!r} is not an Outcome"
    return events, report


def check_monitor(
    body: bytes,
    route: str,
    limits: Limits | None,
    cuts: Sequence[int],
    error: StreamError | None = None,
    *,
    stop_at_end: bool = False,
) -> StreamReport:
    """feed/close never raise; every chunking gives the events and report of one read (also
    when the monitor stops at the route's end, as the enforcing reader's does)."""
    expected: tuple[list[tuple[Any, ...]], StreamReport] | None = None
    for name, chunks in chunkings(body, cuts):
        where = f"StreamMonitor({route!r}, limits={limits}, stop_at_end={stop_at_end})"
        with context(f"{where}, chunking {name}"):
            events, report = run_monitor(chunks, route, limits, error, stop_at_end=stop_at_end)
        if expected is None:
            expected = events, report
            continue
        one_read = untimed(expected[1])
        assert untimed(report) == one_read, (
            f"route {route!r}: report differs from one read under chunking {name}: "
            f"{differences(one_read, untimed(report))} (field: (one read, this chunking))"
        )
        assert events == expected[0], (
            f"route {route!r}: events differ from one read under chunking {name}"
        )
    assert expected is not None
    return expected[1]


# --------------------------------------------------------------------------------------------
# read_stream
# --------------------------------------------------------------------------------------------


def summary(result: Any) -> dict[str, Any]:
    """Every field of a ``StreamResult`` as plain comparable values (the report untimed)."""
    found: dict[str, Any] = {}
    for field in dataclasses.fields(result):
        value = getattr(result, field.name)
        if isinstance(value, StreamReport):
            value = read_until_end(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        elif isinstance(value, tuple):
            value = [
                tuple(getattr(item, f.name) for f in dataclasses.fields(item))
                if dataclasses.is_dataclass(item)
                else item
                for item in value
            ]
        found[field.name] = value
    return found


def _client_call_ids(body: bytes, route: str, limits: Limits | None) -> list[str]:
    """The ids of the tool calls the stream asks the application to run."""
    monitor = StreamMonitor(route, limits=limits, stop_at_end=True)
    monitor.feed(body, 0.0)
    calls = monitor.state.tool_calls
    return [call.call_id for call in calls if call.kind != SERVER and call.call_id is not None]


def run_reader(chunks: list[bytes], route: str, limits: Limits | None) -> dict[str, Any]:
    """``read_stream`` as a plain value: ``{"result": ...}`` or ``{"fault": code, ...}``.

    Anything but a ``StreamResult`` or a ``StreamFault`` propagates.
    """
    try:
        result = read_stream(iter(chunks), route, limits=limits)
    except StreamFault as fault:
        report = None if fault.report is None else read_until_end(fault.report)
        return {"fault": fault.code, "report": report}
    text = result.text  # the documented property must work on any accepted result
    assert isinstance(text, str), type(text)
    return {"result": summary(result)}


def check_reader(
    body: bytes, route: str, limits: Limits | None, cuts: Sequence[int]
) -> dict[str, Any]:
    """Only a result or a StreamFault, and the same one for every chunking."""
    expected: dict[str, Any] | None = None
    for name, chunks in chunkings(body, cuts):
        with context(f"read_stream(route={route!r}, limits={limits}), chunking {name}"):
            verdict = run_reader(chunks, route, limits)
        if expected is None:
            expected = verdict
            continue
        assert verdict == expected, (
            f"route {route!r}: read_stream differs from one read under chunking {name}: "
            f"{differences(_flat(expected), _flat(verdict))} (key: (one read, this chunking))"
        )
    assert expected is not None
    return expected


def _flat(verdict: dict[str, Any]) -> dict[str, Any]:
    flat = {key: value for key, value in verdict.items() if key not in ("report", "result")}
    inner = verdict.get("result") or {}
    flat.update({key: value for key, value in inner.items() if key != "report"})
    report = verdict.get("report") or inner.get("report") or {}
    flat.update({f"report.{key}": value for key, value in report.items()})
    return flat


def check_agreement(body: bytes, route: str, limits: Limits | None) -> None:
    """The reader's verdict is the outcome of a monitor in the reader's mode (``stop_at_end``:
    the stream ends at the route's last event).

    ``complete`` -> a result; ``incomplete`` -> fault ``incomplete``; any other outcome -> a
    fault with that outcome as code; and the reader's report is the monitor's. The documented
    exceptions: the reader keeps text, so ``Limits.max_text_chars`` can stop it (``buffer_limit``
    at stage ``text``) where the observing monitor keeps none; and it refuses a complete stream
    whose client tool calls share an id (``duplicate_tool_call_id``), which observing counts.
    """
    with context(f"StreamMonitor({route!r}, limits={limits}), one read"):
        _, report = run_monitor([body], route, limits, None, stop_at_end=True)
    with context(f"read_stream(route={route!r}, limits={limits}), one read"):
        verdict = run_reader([body], route, limits)
    got_report = verdict["report"] if "fault" in verdict else verdict["result"]["report"]
    if got_report is not None and got_report["buffer_limit_stage"] == "text":
        return
    outcome = report.outcome
    if outcome is Outcome.COMPLETE and verdict.get("fault") == DUPLICATE_TOOL_CALL_ID:
        ids = _client_call_ids(body, route, limits)
        assert len(ids) != len(set(ids)), f"route {route!r}: refused as duplicate, ids {ids}"
    elif outcome is Outcome.COMPLETE:
        assert "result" in verdict, (
            f"route {route!r}: the monitor says complete (stop_reason={report.stop_reason!r}) "
            f"but read_stream refused it with code {verdict.get('fault')!r}; reader report "
            f"differs by {differences(read_until_end(report), got_report or {})} (monitor, reader)"
        )
    else:
        code = outcome.value
        assert verdict.get("fault") == code, (
            f"route {route!r}: the monitor says {code} but read_stream gave "
            f"{'a result' if 'result' in verdict else 'fault ' + repr(verdict['fault'])}"
        )
    assert got_report == read_until_end(report), (
        f"route {route!r}: the reader's report differs from the monitor's: "
        f"{differences(read_until_end(report), got_report or {})} (monitor, reader)"
    )
