"""CPU per frame of otelsse's AWS event-stream framer against botocore's own decoding, and what
``otelsse.instrument()`` costs the real botocore client's ``converse_stream``.

Run from the repository root::

    python benchmarks/bench_eventstream.py                    # both parts, about 1 min on 2 cores
    python benchmarks/bench_eventstream.py --part framer      # the framers only (~35 s)
    python benchmarks/bench_eventstream.py --part client      # the botocore client only (~20 s)
    python benchmarks/bench_eventstream.py --rounds 30        # framers: exactly 30 rounds a case
    python benchmarks/bench_eventstream.py --client-rounds 40 # client: exactly 40 rounds
    python benchmarks/bench_eventstream.py --json out.json    # the figures and samples as JSON

Part 1, the framers.

Inputs: every recorded Bedrock body in ``tests/fixtures/real/bedrock-*.eventstream`` (the
exact bytes the service sent) and one long synthetic ConverseStream body built from the
recorded text stream's frames (2,000 text deltas; see ``synth_converse``). Each is read in two
chunkings: exactly one frame per read (a live stream), and fixed 4 KiB reads.

Implementations, each one whole stream per run (construct, every read, close):

- ``otelsse framer``: ``EventStreamParser(...).feed(read)`` per read, then ``close()``; every
  envelope (an ``SSEEvent``: ``event`` = ``:event-type``, ``data`` = the payload decoded as
  UTF-8) is counted. Both CRCs are checked, the header block is read (or found in the
  parser's process-wide memo of header blocks already read), the payload is decoded.
- ``otelsse framer [A/A]``: the same, a second time in the round: the method's noise floor.
- ``otelsse framer [cold memo]``: the same with the memo of header blocks emptied before each
  stream (the first stream of a process): what the memo is worth.
- ``botocore EventStreamBuffer``: ``add_data(read)`` per read, then ``for message in buffer``:
  each message is yielded with both CRCs checked, its headers parsed to a dict of str values
  and its payload sliced to bytes (botocore does all of that in ``_parse_message``).
- ``botocore buffer + to_response_dict``: the same, plus what ``EventStream`` hands its parser
  for every message: ``message.to_response_dict()`` (status code from ``:message-type``, the
  headers dict, the payload bytes), reading ``headers[":event-type"]`` and ``body`` out of it.
- ``botocore EventStream`` (context): the whole of what the botocore client does with the
  bytes: ``botocore.eventstream.EventStream`` over the same reads with the service model's
  output shape (``bedrock-runtime``) and the protocol's ``EventStreamJSONParser``, each
  event parsed to its modelled dict (``chunk.bytes`` base64-decoded).
- ``otelsse StreamMonitor`` (context): ``StreamMonitor(route).feed(read)`` per read, then
  ``close()``: the framer plus JSON decoding and the route's judgement.

Method (the house style of ``bench_parsers.py`` / ``bench_instrumentation.py``):

- Timer: this process's CPU time (``time.process_time_ns``) around one sample. A call costs
  about 1.5 us on this VM, so a sample runs the whole stream as many times as it takes to hold
  at least 400 frames (``--frames``); figures are per frame.
- Correctness first: before timing, every implementation must see the same frames as
  botocore's buffer (same count, the same ``:event-type`` and payload text in order; the
  monitor's report must count every frame and end ``complete`` or ``incomplete``: no framing
  anomaly); every timed sample asserts its frame count again.
- Warm-up: the verification run and one untimed sample per implementation.
- Interleaving: a round takes one sample of every implementation, in an order rotated by one
  each round. GC is off inside a sample, a collection runs between rounds, and everything
  built before measuring is ``gc.freeze()``-ed.
- Statistics: per implementation the median CPU per frame and its p10-p90 over rounds;
  every ratio is the median of the per-round ratios (both samples of a round are milliseconds
  apart), with the p10-p90 of those ratios. Percentiles interpolate linearly.

Part 2, the client (``bench_instrumentation.py``'s method). A child process serves
``POST /model/{id}/converse-stream`` on 127.0.0.1 (``bench_instrumentation``'s asyncio
HTTP/1.1 server, keep-alive) with the synthetic 2,004-frame body, or the recorded text body,
chunked, one HTTP chunk per frame (urllib3 hands botocore each chunk as a read of its own). The
application is a real botocore ``bedrock-runtime`` client (one attempt per call): it calls
``converse_stream`` and iterates ``response["stream"]``, joining the text deltas. A round runs
it once with ``otelsse.instrument()`` (a real SDK: ``bench_instrumentation.Telemetry``) and once
uninstrumented, back to back, the order flipping each round; instrument/uninstrument and a
collection stay outside the timer. Every run is checked: the joined text; one ``otelsse.stream``
span, ``complete``, counting every frame, when instrumented, none otherwise; botocore's
``Endpoint._send`` its own again after ``uninstrument()``. The verdict is the median of the
per-round client CPU ratios (``process_time_ns``: the server is another process), p10-p90
beside it, and an A/A control (neither side instrumented) gives the method's noise.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import statistics
import struct
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure the working tree's otelsse, as PYTHONPATH=. does

from bench_parsers import SEED, _tokens, _version, fixed_reads, git_revision  # noqa: E402
from botocore.eventstream import EventStream, EventStreamBuffer  # noqa: E402

import otelsse  # noqa: E402
from otelsse import Limits, Outcome, StreamMonitor  # noqa: E402
from otelsse._core import eventstream  # noqa: E402
from otelsse._core import json as otelsse_json  # noqa: E402
from otelsse._core.eventstream import EventStreamParser  # noqa: E402

US = "\u00b5s"  # micro sign, spelled out so the source stays ASCII
PERCENTILES = (10, 50, 90)
CONVERSE = "bedrock.converse_stream"
INVOKE = "bedrock.invoke_model_with_response_stream"
#: The issue's goal: botocore's EventStreamBuffer time / otelsse's framer time, per chunking.
GOAL = 2.0
SYNTH_DELTAS = 2000
_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_TEXT = "bedrock-converse-stream-text.eventstream"  # the synthetic body's template

# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    name: str
    route: str
    operation: str  # the bedrock-runtime operation, for botocore's EventStream
    data: bytes

    @property
    def frames(self) -> list[bytes]:
        """The body one frame per read, by the lengths in the preludes."""
        out, at = [], 0
        while at < len(self.data):
            (total,) = struct.unpack_from(">I", self.data, at)
            out.append(self.data[at : at + total])
            at += total
        assert b"".join(out) == self.data
        return out


def fixtures_dir() -> Path:
    default = ROOT / "tests" / "fixtures"
    base = Path(os.environ.get("OTELSSE_FIXTURES", default))
    return base / "real" if (base / "real").is_dir() else base


def recorded_bodies(directory: Path) -> list[Body]:
    bodies = []
    for path in sorted(directory.glob("bedrock-*.eventstream")):
        converse = "converse-stream" in path.name
        bodies.append(
            Body(
                path.stem.removeprefix("bedrock-"),
                CONVERSE if converse else INVOKE,
                "ConverseStream" if converse else "InvokeModelWithResponseStream",
                path.read_bytes(),
            )
        )
    assert bodies, f"no bedrock-*.eventstream in {directory}"
    return bodies


def _frame(header_block: bytes, payload: bytes) -> bytes:
    """One frame by the format's definition (prelude, its CRC, headers, payload, message CRC)."""
    prelude = struct.pack(">II", 16 + len(header_block) + len(payload), len(header_block))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + header_block + payload
    return message + struct.pack(">I", zlib.crc32(message))


def synth_converse(directory: Path, deltas: int = SYNTH_DELTAS) -> Body:
    """A long ConverseStream answer in the recorded text stream's exact frame shape: its
    ``messageStart``, ``deltas`` ``contentBlockDelta`` frames (the token text of
    ``bench_parsers.py``, same seed, and the random-length ``"p"`` padding Bedrock adds), then its
    ``contentBlockStop``, ``messageStop`` and ``metadata`` frames unchanged. Every delta keeps the
    recorded delta's header block byte for byte."""
    recorded = Body("", CONVERSE, "ConverseStream", (directory / _TEXT).read_bytes()).frames
    headers_len = [struct.unpack_from(">I", f, 4)[0] for f in recorded]
    names = [f[12 : 12 + n] for f, n in zip(recorded, headers_len, strict=True)]
    first_delta = next(i for i, n in enumerate(names) if b"contentBlockDelta" in n)
    last_delta = max(i for i, n in enumerate(names) if b"contentBlockDelta" in n)
    block = recorded[first_delta][12 : 12 + headers_len[first_delta]]
    rng = random.Random(SEED)
    middle = []
    for token in _tokens(rng, deltas):
        payload = {
            "contentBlockIndex": 0,
            "delta": {"text": token},
            "p": _PAD[: rng.randint(1, len(_PAD))],
        }
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        middle.append(_frame(block, text.encode("utf-8")))
    data = b"".join([*recorded[:first_delta], *middle, *recorded[last_delta + 1 :]])
    return Body(f"synthetic converse text ({deltas:,} deltas)", CONVERSE, "ConverseStream", data)


@dataclass(frozen=True)
class Case:
    body: Body
    chunking: str
    reads: list[bytes]
    frames: int


def make_cases(bodies: list[Body]) -> list[Case]:
    cases = []
    for body in bodies:
        frames = body.frames
        cases.append(Case(body, "frame per read", frames, len(frames)))
        cases.append(Case(body, "4 KiB reads", fixed_reads(body.data, 4096), len(frames)))
    return cases


# ---------------------------------------------------------------------------------------------
# Implementations: ``run(reads) -> frames seen``, one whole stream
# ---------------------------------------------------------------------------------------------

Runner = Callable[[list[bytes]], int]
Lister = Callable[[list[bytes]], list[tuple[str, str]]]  # (event type, payload text) per frame

_LIMITS = Limits()
OTELSSE = "otelsse framer"
OTELSSE_AA = "otelsse framer [A/A]"
OTELSSE_COLD = "otelsse framer [cold memo]"
BOTOCORE = "botocore EventStreamBuffer"
BOTOCORE_DICT = "botocore buffer + to_response_dict"
BOTOCORE_STREAM = "botocore EventStream (+ parser)"
MONITOR = "otelsse StreamMonitor"


def run_otelsse(reads: list[bytes]) -> int:
    parser = EventStreamParser(
        max_line_bytes=_LIMITS.max_line_bytes, max_event_bytes=_LIMITS.max_event_bytes
    )
    n = 0
    for read in reads:
        for _event in parser.feed(read):
            n += 1
    parser.close()
    assert not parser.corrupt
    return n


def run_otelsse_cold(reads: list[bytes]) -> int:
    eventstream._memo.clear()
    return run_otelsse(reads)


def list_otelsse(reads: list[bytes]) -> list[tuple[str, str]]:
    parser = EventStreamParser(
        max_line_bytes=_LIMITS.max_line_bytes, max_event_bytes=_LIMITS.max_event_bytes
    )
    out = [(e.event, e.data) for read in reads for e in parser.feed(read)]
    parser.close()
    assert not parser.corrupt
    assert not parser.discarded_event
    assert not parser.decode_error_count
    return out


def run_botocore(reads: list[bytes]) -> int:
    buffer = EventStreamBuffer()
    n = 0
    for read in reads:
        buffer.add_data(read)
        for _message in buffer:
            n += 1
    return n


def run_botocore_dict(reads: list[bytes]) -> int:
    """As ``EventStream._parse_event`` starts: the response dict its parser is given."""
    buffer = EventStreamBuffer()
    n = 0
    for read in reads:
        buffer.add_data(read)
        for message in buffer:
            response = message.to_response_dict()
            _name, _body = response["headers"][":event-type"], response["body"]
            n += 1
    return n


def list_botocore(reads: list[bytes]) -> list[tuple[str, str]]:
    buffer = EventStreamBuffer()
    out = []
    for read in reads:
        buffer.add_data(read)
        for message in buffer:
            response = message.to_response_dict()
            out.append((response["headers"][":event-type"], response["body"].decode("utf-8")))
    assert not buffer._data, "bytes left over"
    return out


class _Raw:
    """What ``EventStream`` reads from: the HTTP body's ``stream()`` of reads."""

    __slots__ = ("_reads",)

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    def stream(self) -> Any:
        return iter(self._reads)

    def close(self) -> None:
        pass


def botocore_stream_runner(operation: str) -> Runner:
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model(operation).get_event_stream_output()
    from botocore.parsers import create_parser

    parser = create_parser(model.protocol)._event_stream_parser

    def run(reads: list[bytes]) -> int:
        n = 0
        for _event in EventStream(_Raw(reads), shape, parser, operation):
            n += 1
        return n

    return run


def monitor_runner(route: str) -> tuple[Runner, Lister]:
    def run(reads: list[bytes]) -> int:
        monitor = StreamMonitor(route)
        n = 0
        for read in reads:
            for _event in monitor.feed(read):
                n += 1
        monitor.close()
        return n

    def events(reads: list[bytes]) -> list[tuple[str, str]]:
        monitor = StreamMonitor(route)
        out = [(e.event, e.data) for read in reads for e in monitor.feed(read)]
        report = monitor.close()
        assert report.outcome in (Outcome.COMPLETE, Outcome.INCOMPLETE), (route, report)
        assert report.event_count == len(out), (report.event_count, len(out))
        return out

    return run, events


@dataclass
class Impl:
    name: str
    run: Runner
    events: Lister | None  # None: only the count is checked
    kind: str  # "otelsse" | "botocore" | "context"


def make_impls(body: Body) -> list[Impl]:
    mon_run, mon_events = monitor_runner(body.route)
    return [
        Impl(OTELSSE, run_otelsse, list_otelsse, "otelsse"),
        Impl(OTELSSE_AA, run_otelsse, list_otelsse, "otelsse"),
        Impl(OTELSSE_COLD, run_otelsse_cold, list_otelsse, "otelsse"),
        Impl(BOTOCORE, run_botocore, list_botocore, "botocore"),
        Impl(BOTOCORE_DICT, run_botocore_dict, list_botocore, "botocore"),
        Impl(BOTOCORE_STREAM, botocore_stream_runner(body.operation), None, "context"),
        Impl(MONITOR, mon_run, mon_events, "context"),
    ]


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); p50 is the median."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Result:
    case: Case
    impl: Impl
    inner: int  # whole streams per sample
    samples: list[int] = field(default_factory=list)  # CPU ns per sample

    def per_frame_us(self) -> list[float]:
        frames = self.case.frames * self.inner
        return [s / frames / 1e3 for s in self.samples]

    def us(self, p: int = 50) -> float:
        return percentile(self.per_frame_us(), p)


def ratio_percentiles(numerator: Result, denominator: Result) -> dict[int, float]:
    """Per-round ratios (same round: samples milliseconds apart), their p10/p50/p90."""
    ratios = [a / b for a, b in zip(numerator.samples, denominator.samples, strict=True)]
    return {p: percentile(ratios, p) for p in PERCENTILES}


def verify(case: Case, impls: list[Impl]) -> None:
    reference = list_botocore(case.reads)
    assert len(reference) == case.frames, (case.body.name, len(reference), case.frames)
    for impl in impls:
        where = f"{impl.name} on {case.body.name} / {case.chunking}"
        if impl.events is not None:
            assert impl.events(case.reads) == reference, f"{where}: frames differ"
        assert impl.run(case.reads) == case.frames, f"{where}: frame count"


def _sample(impl: Impl, reads: list[bytes], inner: int) -> tuple[int, int]:
    gc.disable()
    try:
        start = time.process_time_ns()
        n = 0
        for _ in range(inner):
            n += impl.run(reads)
        elapsed = time.process_time_ns() - start
    finally:
        gc.enable()
    return n, elapsed


def measure_case(
    case: Case, impls: list[Impl], frames_per_sample: int, budget_s: float, rounds: int | None
) -> list[Result]:
    verify(case, impls)
    inner = max(1, math.ceil(frames_per_sample / case.frames))
    expected = case.frames * inner
    for impl in impls:  # warm-up
        _sample(impl, case.reads, inner)
    results = [Result(case, impl, inner) for impl in impls]
    min_rounds, max_rounds = (rounds, rounds) if rounds else (15, 201)
    deadline = time.perf_counter() + budget_s
    rnd = 0
    while rnd < min_rounds or (rnd < max_rounds and time.perf_counter() < deadline):
        shift = rnd % len(results)
        for result in results[shift:] + results[:shift]:
            n, elapsed = _sample(result.impl, case.reads, inner)
            assert n == expected, f"{result.impl.name}: {n} frames, want {expected}"
            result.samples.append(elapsed)
        gc.collect()
        rnd += 1
    return results


# ---------------------------------------------------------------------------------------------
# Client CPU: the real botocore client against a local server, instrumented vs not
# ---------------------------------------------------------------------------------------------

#: Model ids the local server answers (any id works on the route; botocore sends ``:`` as %3A).
LONG_MODEL = "anthropic.bench-long-v1:0"
TEXT_MODEL = "anthropic.bench-text-v1:0"
PROMPT: list[Any] = [{"role": "user", "content": [{"text": "Write a long answer."}]}]


def _eventstream_response(frames: list[bytes]) -> bytes:
    """Chunked ``application/vnd.amazon.eventstream`` response, one HTTP chunk per frame: urllib3
    hands each chunk to botocore's ``EventStream`` (and otelsse's tap) as a read of its own, as a
    live stream arrives, while the server never waits."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
        b"x-amzn-requestid: req-bench\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(frame), frame) for frame in frames)
    return head + chunks + b"0\r\n\r\n"


def client_bodies(directory: Path) -> dict[str, Body]:
    """Model id -> the body the server streams for it."""
    text = next(b for b in recorded_bodies(directory) if b.name == "converse-stream-text")
    return {LONG_MODEL: synth_converse(directory), TEXT_MODEL: text}


class _Answers:
    """``POST /model/{id}/converse-stream`` -> that model's body, encoded once (the interface
    of ``bench_instrumentation._serve_connection``)."""

    def __init__(self, directory: Path) -> None:
        from urllib.parse import quote

        self._by_path = {
            f"/model/{quote(model, safe='')}/converse-stream": _eventstream_response(body.frames)
            for model, body in client_bodies(directory).items()
        }
        self._not_found = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"

    def answer(self, method: str, target: str, body: bytes) -> tuple[bytes, bool]:
        del body
        if method == "POST" and target in self._by_path:
            return self._by_path[target], False
        return self._not_found, False


async def _serve() -> None:
    from bench_instrumentation import serve_answers

    await serve_answers(_Answers(fixtures_dir()), backlog=64)


def delta_text(body: Body) -> str:
    """What the application assembles: every ``contentBlockDelta``'s ``delta.text``."""
    parts = []
    for event, data in list_botocore(body.frames):
        if event == "contentBlockDelta":
            parts.append(json.loads(data)["delta"].get("text", ""))
    return "".join(parts)


@dataclass
class ClientWorkload:
    name: str
    goal: float | None  # median per-round CPU ratio must be <= this; None: reported only
    model: str
    body: Body
    text: str  # what the run returns
    control: bool = False  # A/A: neither side instrumented


@dataclass
class ClientResult:
    workload: ClientWorkload
    cpu: dict[bool, list[int]] = field(default_factory=lambda: {False: [], True: []})
    wall: dict[bool, list[int]] = field(default_factory=lambda: {False: [], True: []})
    monitor_us: float | None = None  # the monitor alone, CPU per stream

    def ratios(self, samples: dict[bool, list[int]]) -> dict[int, float]:
        values = [i / p for i, p in zip(samples[True], samples[False], strict=True)]
        return {p: percentile(values, p) for p in PERCENTILES}

    def added_us(self) -> float:
        added = [i - p for i, p in zip(self.cpu[True], self.cpu[False], strict=True)]
        return statistics.median(added) / 1e3


def _botocore_send_is_its_own() -> bool:
    import inspect

    import botocore.endpoint

    return inspect.isfunction(botocore.endpoint.Endpoint.__dict__["_send"])


def client_run(client: Any, workload: ClientWorkload) -> str:
    """``converse_stream`` and a ``for`` loop over ``response["stream"]``, as boto3 code does,
    joining the text deltas."""
    response = client.converse_stream(modelId=workload.model, messages=PROMPT)
    parts = []
    for event in response["stream"]:
        delta = event.get("contentBlockDelta")
        if delta is not None:
            parts.append(delta["delta"].get("text", ""))
    return "".join(parts)


def client_timed(
    client: Any, workload: ClientWorkload, telemetry: Any, instrumented: bool
) -> tuple[int, int]:
    """One checked run: (client CPU ns, wall ns). instrument()/uninstrument() and a collection
    stay outside the timer; the GC stays on inside (as in ``bench_instrumentation.py``)."""
    instrumented = instrumented and not workload.control
    with telemetry.instrumented(instrumented):
        gc.collect()
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        text = client_run(client, workload)
        wall, cpu = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    assert _botocore_send_is_its_own(), "uninstrument() left botocore's Endpoint._send wrapped"
    assert text == workload.text, f"{workload.name}: wrong text"
    telemetry.check(instrumented, 1, "complete", len(workload.body.frames))
    return cpu, wall


def monitor_alone_us(body: Body, repeats: int) -> float:
    """``StreamMonitor`` fed the body one frame per read with a ``perf_counter()`` per read, as
    the observer feeds it: median CPU microseconds per stream."""
    frames = body.frames
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.process_time_ns()
        monitor = StreamMonitor(body.route, started_at=time.perf_counter())
        for frame in frames:
            monitor.feed(frame, time.perf_counter())
        report = monitor.close(time.perf_counter())
        samples.append(time.process_time_ns() - start)
        assert report.outcome is Outcome.COMPLETE, report.outcome
    return statistics.median(samples) / 1e3


def measure_clients(directory: Path, budget_s: float, rounds: int | None) -> list[ClientResult]:
    """Every workload: lockstep rounds of one instrumented and one uninstrumented run, the order
    flipping each round; the A/A control runs the same with neither side instrumented."""
    import botocore.config
    import botocore.session
    from _child import serving_child
    from bench_instrumentation import Telemetry

    bodies = client_bodies(directory)
    long_body, text_body = bodies[LONG_MODEL], bodies[TEXT_MODEL]
    long_text = delta_text(long_body)
    workloads = [
        ClientWorkload(
            f"converse_stream, {len(long_body.frames):,} frames", 1.10, LONG_MODEL, long_body,
            long_text,
        ),
        ClientWorkload(
            f"converse_stream, recorded text ({len(text_body.frames)} frames)", None, TEXT_MODEL,
            text_body, delta_text(text_body),
        ),
        ClientWorkload(
            f"converse_stream, {len(long_body.frames):,} frames, A/A control", None, LONG_MODEL,
            long_body, long_text, control=True,
        ),
    ]  # fmt: skip
    telemetry = Telemetry()
    results = []
    command = [sys.executable, str(Path(__file__).resolve()), "--serve"]
    with serving_child(command) as (port, _pid):
        session = botocore.session.get_session()
        client = session.create_client(
            "bedrock-runtime",
            region_name="us-east-1",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=botocore.config.Config(retries={"total_max_attempts": 1}),
        )
        try:
            gc.collect()
            gc.freeze()
            for workload in workloads:
                result = ClientResult(workload)
                for instrumented in (False, True, False, True):  # warm-up, checked
                    client_timed(client, workload, telemetry, instrumented)
                deadline = time.perf_counter() + budget_s
                min_rounds, max_rounds = (rounds, rounds) if rounds else (15, 201)
                rnd = 0
                while rnd < min_rounds or (rnd < max_rounds and time.perf_counter() < deadline):
                    for instrumented in (True, False) if rnd % 2 == 0 else (False, True):
                        cpu, wall = client_timed(client, workload, telemetry, instrumented)
                        result.cpu[instrumented].append(cpu)
                        result.wall[instrumented].append(wall)
                    rnd += 1
                if not workload.control:
                    result.monitor_us = monitor_alone_us(workload.body, 15)
                results.append(result)
                print(f"  measured {workload.name} ({rnd} rounds)", file=sys.stderr, flush=True)
        finally:
            client.close()
    assert telemetry.instrumentation_errors() == 0, "otelsse.instrumentation.errors counted"
    telemetry.shutdown()
    return results


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def _band(p: dict[int, float]) -> str:
    return f"{p[10]:.2f}-{p[90]:.2f}"


def print_case(results: list[Result]) -> dict[str, Any]:
    case = results[0].case
    by = {r.impl.name: r for r in results}
    base = by[OTELSSE]
    print(
        f"{case.body.name} / {case.chunking}: {len(case.body.data):,} B, {case.frames} frames, "
        f"{len(case.reads)} reads; {len(base.samples)} rounds of {base.inner} stream(s)"
    )
    rows: dict[str, Any] = {}
    for r in results:
        ratio = ratio_percentiles(r, base)
        rows[r.impl.name] = {
            "us_per_frame": {f"p{p}": r.us(p) for p in PERCENTILES},
            "ratio_to_otelsse_framer": {f"p{p}": v for p, v in ratio.items()},
        }
        print(
            f"  {r.impl.name:<36} {r.us():>8.2f} {US}/frame (p10-p90 {r.us(10):.2f}-"
            f"{r.us(90):.2f})   / otelsse framer {ratio[50]:>6.2f}x ({_band(ratio)})"
        )
    return {
        "body": case.body.name,
        "chunking": case.chunking,
        "bytes": len(case.body.data),
        "frames": case.frames,
        "reads": len(case.reads),
        "rounds": len(base.samples),
        "streams_per_sample": base.inner,
        "implementations": rows,
        "samples_ns": {r.impl.name: r.samples for r in results},
    }


def print_summary(all_results: list[list[Result]]) -> list[dict[str, Any]]:
    print()
    print(
        "Summary: botocore / otelsse framer CPU per frame, median of per-round ratios (p10-p90); "
        "A/A = the framer against itself;\ncold = botocore's buffer / the framer with its memo of "
        "header blocks emptied before every stream (a process's first stream)"
    )
    header = (
        f"  {'body':<40} {'chunking':<15} {'otelsse':>8} {'botocore':>9} {'buffer/otelsse':>20} "
        f"{'+dict/otelsse':>20} {'A/A':>16} {'cold':>6} {'monitor':>8}"
    )
    print(header)
    print(f"  {'':<40} {'':<15} {US + '/fr':>8} {US + '/fr':>9} {'':>71} {US + '/fr':>8}")
    print("  " + "-" * (len(header) - 2))
    goals: dict[tuple[str, str], list[tuple[str, dict[int, float]]]] = {}
    for results in all_results:
        by = {r.impl.name: r for r in results}
        case = results[0].case
        base = by[OTELSSE]
        buf = ratio_percentiles(by[BOTOCORE], base)
        dct = ratio_percentiles(by[BOTOCORE_DICT], base)
        aa = ratio_percentiles(by[OTELSSE_AA], base)
        cold = ratio_percentiles(by[BOTOCORE], by[OTELSSE_COLD])
        print(
            f"  {case.body.name:<40} {case.chunking:<15} {base.us():>8.2f} "
            f"{by[BOTOCORE].us():>9.2f} {buf[50]:>6.2f}x ({_band(buf):>11}) "
            f"{dct[50]:>6.2f}x ({_band(dct):>11}) {aa[50]:>4.2f}x ({_band(aa)}) "
            f"{cold[50]:>5.2f}x {by[MONITOR].us():>8.2f}"
        )
        goals.setdefault((case.chunking, "warm"), []).append((case.body.name, buf))
        goals.setdefault((case.chunking, "cold"), []).append((case.body.name, cold))
    rows = []
    print()
    print(
        f"Goals: otelsse framer >= {GOAL:.0f}x faster than botocore's EventStreamBuffer "
        "(add_data + iterate) on every body; judged on the framer as a process runs it (its memo "
        "warm),\nthe first stream of a process (memo emptied) reported beside it"
    )
    for (chunking, memo), values in goals.items():
        worst = min(values, key=lambda v: v[1][50])
        medians = sorted(v[1][50] for v in values)
        met = worst[1][50] >= GOAL if memo == "warm" else None
        verdict = "INFO" if met is None else "MET" if met else "NOT MET"
        label = chunking if memo == "warm" else f"{chunking}, cold memo"
        text = (
            f"lowest {worst[1][50]:.2f}x ({worst[0]}, p10-p90 {_band(worst[1])}), median over "
            f"bodies {statistics.median(medians):.2f}x, highest {medians[-1]:.2f}x"
        )
        target = f"goal >= {GOAL:.0f}x" if met is not None else "reported only"
        print(f"  [{verdict:>7}] {label}: {text} ({target})")
        rows.append(
            {"chunking": chunking, "memo": memo, "lowest": worst[1][50], "met": met, "text": text}
        )
    return rows


def print_clients(results: list[ClientResult]) -> list[dict[str, Any]]:
    print()
    print(
        "Client CPU: the real botocore client (converse_stream, then for event in "
        'response["stream"], text deltas joined) against a local\nserver (one HTTP chunk per '
        "frame), otelsse instrumented vs not, in lockstep pairs; client CPU (process_time_ns), "
        "median of per-round\nratios instrumented / uninstrumented (p10-p90); monitor alone = "
        "StreamMonitor fed the same frames one read each"
    )
    header = (
        f"  {'workload':<50} {'rounds':>6} {'plain ms':>9} {'instr ms':>9} "
        f"{'CPU ratio (p10-p90)':>22} {'wall':>7} {'added ' + US + '/frame':>15} "
        f"{'monitor alone':>13}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    control = next((r for r in results if r.workload.control), None)
    rows = []
    for r in results:
        w = r.workload
        frames = len(w.body.frames)
        cpu, wall = r.ratios(r.cpu), r.ratios(r.wall)
        monitor = "" if r.monitor_us is None else f"{r.monitor_us / frames:.2f} {US}"
        print(
            f"  {w.name:<50} {len(r.cpu[True]):>6} {statistics.median(r.cpu[False]) / 1e6:>9.2f} "
            f"{statistics.median(r.cpu[True]) / 1e6:>9.2f} {cpu[50]:>7.3f}x ({cpu[10]:.3f}-"
            f"{cpu[90]:.3f}) {wall[50]:>6.3f}x {r.added_us() / frames:>15.2f} {monitor:>13}"
        )
        met = None if w.goal is None else cpu[50] <= w.goal
        rows.append(
            {
                "workload": w.name,
                "control": w.control,
                "frames": frames,
                "rounds": len(r.cpu[True]),
                "cpu_ms_median": {
                    "uninstrumented": statistics.median(r.cpu[False]) / 1e6,
                    "instrumented": statistics.median(r.cpu[True]) / 1e6,
                },
                "cpu_ratio": {f"p{p}": v for p, v in cpu.items()},
                "wall_ratio": {f"p{p}": v for p, v in wall.items()},
                "added_cpu_us_per_stream": r.added_us(),
                "monitor_alone_cpu_us_per_stream": r.monitor_us,
                "goal": w.goal,
                "met": met,
                "samples_ns": {
                    "uninstrumented_cpu": r.cpu[False],
                    "instrumented_cpu": r.cpu[True],
                    "uninstrumented_wall": r.wall[False],
                    "instrumented_wall": r.wall[True],
                },
            }
        )
    print()
    print("Goal: instrumented / uninstrumented client CPU, median of per-round ratios")
    for r, row in zip(results, rows, strict=True):
        if r.workload.control:
            continue
        cpu = r.ratios(r.cpu)
        verdict = "INFO" if row["met"] is None else "MET" if row["met"] else "NOT MET"
        floor = ""
        if control is not None:
            aa = control.ratios(control.cpu)
            floor = f", A/A control p10-p90 {aa[10]:.3f}-{aa[90]:.3f}"
        target = "reported only" if r.workload.goal is None else f"goal <= {r.workload.goal:.2f}x"
        print(
            f"  [{verdict:>7}] {r.workload.name}: {cpu[50]:.3f}x (p10-p90 {cpu[10]:.3f}-"
            f"{cpu[90]:.3f}{floor}) ({target})"
        )
    return rows


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "otelsse": otelsse.__version__,
        "git": git_revision(),
        "botocore": _version("botocore"),
        "otelsse_json_decoder": otelsse_json.JSON_DECODER,
        "versions": {d: _version(d) for d in ("urllib3", "opentelemetry-sdk", "msgspec")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--part",
        choices=("all", "framer", "client"),
        default="all",
        help="the framers, the botocore client instrumented vs not, or both (default)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="framers: exactly N rounds per case")
    ap.add_argument(
        "--budget",
        type=float,
        default=1.5,
        help="framers: seconds of rounds per case (15 to 201 rounds); default 1.5",
    )
    ap.add_argument("--frames", type=int, default=400, help="framers: frames per sample (400)")
    ap.add_argument(
        "--client-rounds", type=int, default=None, help="client: exactly N rounds per workload"
    )
    ap.add_argument(
        "--client-budget",
        type=float,
        default=3.0,
        help="client: seconds of rounds per workload (15 to 201 rounds); default 3",
    )
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child server
    args = ap.parse_args(argv)
    if args.serve:
        import asyncio

        asyncio.run(_serve())
        return 0

    env = environment()
    load = ", ".join(f"{x:.2f}" for x in env["load_average_at_start"])
    others = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    print(
        f"otelsse {env['otelsse']} @ {env['git']} (JSON: {env['otelsse_json_decoder']}) | "
        f"botocore {env['botocore']} | Python {env['python']} on {env['platform']}\n"
        f"client part: {others}"
    )
    print(
        f"machine: {env['cpu_count']} CPUs, shared and noisy (load average {load}): read the "
        "paired ratios, not the absolute figures"
    )
    directory = fixtures_dir()
    print(f"otelsse from {Path(otelsse.__file__).parent}; fixtures from {directory}")
    started = time.perf_counter()
    payload: dict[str, Any] = {"environment": env}
    if args.part in ("all", "framer"):
        print(
            f"framers: CPU time (process_time_ns) per frame, median and p10-p90 over interleaved "
            f"rounds; each sample >= {args.frames} frames;\nratios = this / otelsse framer, "
            "median of per-round ratios (p10-p90); GC off inside a sample"
        )
        print()
        bodies = [*recorded_bodies(directory), synth_converse(directory)]
        cases = make_cases(bodies)
        impls = {body.name: make_impls(body) for body in bodies}
        gc.collect()
        gc.freeze()
        all_results = []
        cases_json = []
        for case in cases:
            results = measure_case(
                case, impls[case.body.name], args.frames, args.budget, args.rounds
            )
            all_results.append(results)
            cases_json.append(print_case(results))
        payload["cases"] = cases_json
        payload["goals"] = print_summary(all_results)
    if args.part in ("all", "client"):
        clients = measure_clients(directory, args.client_budget, args.client_rounds)
        payload["client"] = print_clients(clients)
    elapsed = time.perf_counter() - started
    print(f"\ntotal measuring time: {elapsed:.0f} s")
    if args.json:
        payload["elapsed_s"] = elapsed
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
