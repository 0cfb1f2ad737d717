"""What ``otelsse.instrument()`` costs real clients: CPU, wall time and memory, instrumented vs not.

Run from the repository root::

    python benchmarks/bench_instrumentation.py            # full run, several minutes on 2 cores
    python benchmarks/bench_instrumentation.py --quick    # a short smoke run, noisier
    python benchmarks/bench_instrumentation.py --json out.json   # results elsewhere
    # fast iteration on one client: its workloads (and their A/A control), 30 rounds, no memory
    python benchmarks/bench_instrumentation.py --only anthropic --rounds 30 --no-memory

Results are also written to ``benchmarks/results-instrumentation.json`` (or ``--json PATH``).

A local HTTP/1.1 server (asyncio, in a child process so it never competes with the client for
the GIL) answers with a 2,000-delta OpenAI chat-completions stream and a 2,000-delta Anthropic
messages stream, one HTTP chunk per SSE event as real servers flush them, and small JSON bodies.
Against it, in one process:

- speed: the openai SDK, the anthropic SDK, a raw httpx + httpx-sse + ``json.loads`` consumer,
  and plain JSON GET/POST through httpx and requests. A round runs a workload once instrumented
  and once not, back to back (``otelsse.instrument()`` before and ``otelsse.uninstrument()``
  after the instrumented run, outside the timer, which then checks that the patched methods are
  the clients' own again; the order within a round flips every round). Each run records wall
  time and this process's CPU time (``time.process_time_ns``: the server is another process,
  so it is not counted). A goal is judged on the median of the per-round CPU ratios
  (instrumented / uninstrumented): pairing cancels the drift of a shared machine, and CPU time
  leaves out the time spent waiting for a core. The per-round ratios' p10, p25, p50, p75 and
  p90 are reported for CPU and wall (percentiles by linear interpolation between closest
  ranks). Two A/A controls, an anthropic SDK stream and a plain httpx GET, run the same pairing
  with nothing instrumented on either side: their p10-p90 band is the method's noise floor,
  printed beside each goal of the same kind (stream or request).
- memory: 1,000 concurrent open streams through ``httpx.AsyncClient``, held open after 100 and
  after 2,000 events, traced by ``tracemalloc``; bytes per stream instrumented minus not.

Every run is checked: the application's result equals the expected text or payload, and an
instrumented run ended exactly the expected ``otelsse.stream`` spans with the expected outcome
and event count (an uninstrumented run ended none), so neither side can look fast by doing less.

``--only SUBSTRING`` (repeatable or comma-separated, any case) runs the workloads whose name
contains one of them, plus the A/A control of each selected workload's kind, so that every goal
still has its noise floor beside it; ``--rounds N`` runs exactly N rounds per workload;
``--no-memory`` skips the memory part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure the working tree's otelsse, as PYTHONPATH=. does

# The same token distribution, seed and version/commit helpers as the parser benchmark.
from _child import serving_child  # noqa: E402
from bench_parsers import SEED, _tokens, _version, git_revision  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

import otelsse  # noqa: E402
from otelsse import Outcome, StreamMonitor, semconv  # noqa: E402
from otelsse._core import json as otelsse_json  # noqa: E402

DELTAS = 2000  # text deltas per streamed answer, for both providers
OPENAI_MODEL = "gpt-4.1-2025-04-14"
ANTHROPIC_MODEL = "claude-sonnet-4-20250514"
PROMPT: list[Any] = [{"role": "user", "content": "Write a long answer."}]
# The memory test's held streams come in 16 KiB chunks, not one per event: 2 million events
# under tracemalloc then take seconds, not many minutes. The prefix ends on an event boundary,
# so nothing is pending at the measurement whatever the chunking.
HOLD_PIECE = 16 * 1024
US = "\u00b5s"  # micro sign, spelled out so the source stays ASCII
PERCENTILES = (10, 25, 50, 75, 90)  # of the per-round paired ratios

# ---------------------------------------------------------------------------------------------
# Bodies: generated here, in the shape of the recorded OpenAI and Anthropic streams
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    route: str  # the otelsse route that observes it
    events: tuple[bytes, ...]  # each SSE event's bytes, blank line included
    text: str  # what an application assembles from the deltas


def _dumps(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def openai_body(deltas: int = DELTAS) -> Body:
    """Role chunk, one ``chat.completion.chunk`` per token, finish chunk, ``data: [DONE]``."""
    rng = random.Random(SEED)
    tokens = _tokens(rng, deltas)
    common = {
        "id": "chatcmpl-D8EA5nZ0hOZP7LH1T8J9NNIiYa8n1",
        "object": "chat.completion.chunk",
        "created": 1770853433,
        "model": OPENAI_MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_8b22347a3e",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        pad = "".join(
            rng.choice("abcdefghijkLMNOPQRS0123456789") for _ in range(rng.randint(3, 12))
        )
        return b"data: " + _dumps({**common, "choices": [choice], "obfuscation": pad}) + b"\n\n"

    events = [chunk({"role": "assistant", "content": "", "refusal": None}, None)]
    events += [chunk({"content": token}, None) for token in tokens]
    events += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return Body("openai.chat_completions", tuple(events), "".join(tokens))


def anthropic_body(deltas: int = DELTAS) -> Body:
    """message_start, content_block_start, text deltas, content_block_stop, message_delta/stop."""
    tokens = _tokens(random.Random(SEED), deltas)
    usage = {"input_tokens": 19, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message: dict[str, Any] = {
        "model": ANTHROPIC_MODEL,
        "id": "msg_01CpLvutrn5ZEYqp6J9PqxDN",
        "type": "message",
        "role": "assistant",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1, "service_tier": "standard"},
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", block),
    ]
    payloads += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}},
        )
        for t in tokens
    ]
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    payloads += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": stop, "usage": {**usage, "output_tokens": deltas}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    events = tuple(b"event: %s\ndata: %s\n\n" % (n.encode(), _dumps(p)) for n, p in payloads)
    return Body("anthropic.messages", events, "".join(tokens))


CHAT_COMPLETION = {
    "id": "chatcmpl-D8EA5nZ0hOZP7LH1T8J9NNIiYa8n1",
    "object": "chat.completion",
    "created": 1770853433,
    "model": OPENAI_MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Four plus five equals nine."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 19, "completion_tokens": 7, "total_tokens": 26},
}
MODEL_INFO = {"id": OPENAI_MODEL, "object": "model", "created": 1744316542, "owned_by": "system"}


# ---------------------------------------------------------------------------------------------
# The server: asyncio HTTP/1.1 with keep-alive, in a child process
# ---------------------------------------------------------------------------------------------


def _sse_response(
    events: tuple[bytes, ...], *, piece: int | None = None, end: bool = True
) -> bytes:
    """Chunked SSE response: one HTTP chunk per event (h11 hands each chunk to the client as its
    own read, as a live token stream arrives), or ``piece``-byte chunks; ``end=False`` leaves
    the body unterminated."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"cache-control: no-cache\r\nx-request-id: req_bench\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    if piece is not None:
        body = b"".join(events)
        events = tuple(body[i : i + piece] for i in range(0, len(body), piece))
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in events)
    return head + chunks + (b"0\r\n\r\n" if end else b"")


def _json_response(payload: object, status: bytes = b"200 OK") -> bytes:
    body = _dumps(payload)
    return (
        b"HTTP/1.1 %b\r\ncontent-type: application/json\r\nx-request-id: req_bench\r\n"
        b"content-length: %d\r\n\r\n%b" % (status, len(body), body)
    )


class _Answers:
    """Every response, encoded once."""

    def __init__(self) -> None:
        self.openai = openai_body()
        self.openai_sse = _sse_response(self.openai.events)
        self.anthropic_sse = _sse_response(anthropic_body().events)
        self.completion = _json_response(CHAT_COMPLETION)
        self.model = _json_response(MODEL_INFO)
        self.not_found = _json_response({"error": "not found"}, b"404 Not Found")
        self._prefixes: dict[int, bytes] = {}

    def answer(self, method: str, target: str, body: bytes) -> tuple[bytes, bool]:
        """The response bytes, and whether to hold the connection open after them.

        ``POST /v1/chat/completions?events=N`` with ``"stream": true`` sends the first N events
        of the OpenAI stream in ``HOLD_PIECE``-byte chunks and then neither ends the body nor
        closes: a stream held open.
        """
        path, _, query = target.partition("?")
        if method == "POST" and path == "/v1/chat/completions":
            if not json.loads(body).get("stream"):
                return self.completion, False
            if query.startswith("events="):
                n = int(query.partition("=")[2])
                if n not in self._prefixes:
                    events = self.openai.events[:n]
                    self._prefixes[n] = _sse_response(events, piece=HOLD_PIECE, end=False)
                return self._prefixes[n], True
            return self.openai_sse, False
        if method == "POST" and path == "/v1/messages":
            return self.anthropic_sse, False
        if method == "GET" and path.startswith("/v1/models/"):
            return self.model, False
        return self.not_found, False


async def _serve_connection(
    answers: _Answers, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            length = 0
            for line in header_lines:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length) if length else b""
            response, hold = answers.answer(method, target, body)
            writer.write(response)
            await writer.drain()
            if hold:
                await reader.read()  # until the client closes its end
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return  # the client closed the connection
    finally:
        writer.close()


async def serve_answers(answers: Any, backlog: int = 4096) -> None:
    """Serve ``answers`` (an ``_Answers``-like ``answer(method, target, body)``) on 127.0.0.1,
    print the port, and stop when the parent closes this process's stdin."""
    server = await asyncio.start_server(
        lambda r, w: _serve_connection(answers, r, w), "127.0.0.1", 0, backlog=backlog
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    # Serve until the parent closes our stdin (or dies): no orphan can outlive the benchmark.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    server.close()
    await server.wait_closed()


@contextlib.contextmanager
def server_process() -> Iterator[str]:
    """Start the server in a child process; yield its base URL; stop it."""
    with serving_child([sys.executable, __file__, "--serve"]) as (port, _):
        yield f"http://127.0.0.1:{port}"


# ---------------------------------------------------------------------------------------------
# Telemetry: a real SDK behind otelsse
# ---------------------------------------------------------------------------------------------


def _patch_targets() -> list[tuple[type, str]]:
    """The methods otelsse patches: httpx/httpx2 ``send``, requests ``Session.request``."""
    import httpx
    import httpx2
    import requests

    return [
        (httpx.Client, "send"), (httpx.AsyncClient, "send"), (httpx2.Client, "send"),
        (httpx2.AsyncClient, "send"), (requests.Session, "request"),
    ]  # fmt: skip


class Telemetry:
    """SDK TracerProvider (BatchSpanProcessor -> in-memory exporter) and MeterProvider
    (InMemoryMetricReader), as an application would configure them with a real exporter."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, strict: bool = False) -> None:
        otelsse.instrument(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            strict=strict,
        )

    def uninstrument(self) -> None:
        otelsse.uninstrument()
        # An "uninstrumented" run must really run the clients' own methods.
        for owner, name in _patch_targets():
            assert inspect.isfunction(owner.__dict__[name]), (
                f"{owner.__name__}.{name} still wrapped"
            )

    @contextlib.contextmanager
    def instrumented(self, on: bool, strict: bool = False) -> Iterator[None]:
        if on:
            self.instrument(strict)
        try:
            yield
        finally:
            if on:
                self.uninstrument()

    def take_spans(self) -> list[dict[str, Any]]:
        """Attributes of the ``otelsse.stream`` spans ended since the last call."""
        self.tracer_provider.force_flush()
        spans = self.exporter.get_finished_spans()
        self.exporter.clear()
        return [dict(s.attributes or {}) for s in spans if s.name == semconv.SPAN_NAME]

    def check(self, instrumented: bool, streams: int, outcome: str, events: int | None) -> None:
        """An instrumented run ended ``streams`` spans like this; an uninstrumented one none."""
        spans = self.take_spans()
        if not instrumented:
            assert not spans, f"{len(spans)} spans while uninstrumented"
            return
        assert len(spans) == streams, f"{len(spans)} spans, expected {streams}"
        for attributes in spans:
            assert attributes[semconv.OUTCOME] == outcome, attributes
            assert attributes[semconv.EVENT_COUNT] == events, attributes

    def instrumentation_errors(self) -> float:
        data = self.reader.get_metrics_data()
        total = 0.0
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == semconv.INSTRUMENTATION_ERRORS.name:
                        total += sum(
                            p.value
                            for p in metric.data.data_points
                            if isinstance(p, NumberDataPoint)
                        )
        return total

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


# ---------------------------------------------------------------------------------------------
# Speed: workloads
# ---------------------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    goal: float | None  # median per-round CPU ratio must be <= this; None: no goal
    run: Callable[[], object]
    expected: object  # what run() returns: the assembled text, or the parsed payloads
    body: Body | None = None  # the SSE body streamed once per run; None: plain requests
    per_run: int = 1  # streams or requests in one run
    control: bool = False  # A/A: the "instrumented" side is not instrumented either
    strict: bool = False  # the instrumented side runs in strict mode (same bytes, same result)

    @property
    def unit(self) -> str:
        return "request" if self.body is None else "stream"


def speed_workloads(url: str, stack: contextlib.ExitStack, requests_per_run: int) -> list[Workload]:
    import anthropic
    import httpx
    import openai
    import requests
    from httpx_sse import EventSource

    chat, messages = openai_body(), anthropic_body()
    openai_client = stack.enter_context(
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    )
    anthropic_client = stack.enter_context(
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
    )
    httpx_client = stack.enter_context(httpx.Client())
    session = stack.enter_context(requests.Session())
    chat_url, model_url = f"{url}/v1/chat/completions", f"{url}/v1/models/{OPENAI_MODEL}"
    stream_request = {"model": OPENAI_MODEL, "messages": PROMPT, "stream": True}
    plain_request = {"model": OPENAI_MODEL, "messages": PROMPT, "stream": False}

    # The SDKs' stream types are unions mypy cannot narrow here; what is read is checked anyway.
    def openai_sdk() -> str:
        stream: Iterator[Any] = openai_client.chat.completions.create(
            model=OPENAI_MODEL, messages=PROMPT, stream=True
        )
        parts = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)

    def anthropic_sdk() -> str:
        stream: Iterator[Any] = anthropic_client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=4096, messages=PROMPT, stream=True
        )
        parts = []
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                parts.append(event.delta.text)
        return "".join(parts)

    def raw_httpx_sse() -> str:
        parts = []
        with httpx_client.stream("POST", chat_url, json=stream_request) as response:
            for sse in EventSource(response).iter_sse():
                if sse.data == "[DONE]":
                    continue
                content = json.loads(sse.data)["choices"][0]["delta"].get("content")
                if content:
                    parts.append(content)
        return "".join(parts)

    def repeat(call: Callable[[], Any]) -> Callable[[], list[Any]]:
        return lambda: [call() for _ in range(requests_per_run)]

    plain = [
        ("httpx GET JSON", lambda: httpx_client.get(model_url).json(), MODEL_INFO),
        (
            "httpx POST chat, stream=false",
            lambda: httpx_client.post(chat_url, json=plain_request).json(),
            CHAT_COMPLETION,
        ),
        ("requests GET JSON", lambda: session.get(model_url).json(), MODEL_INFO),
        (
            "requests POST chat, stream=false",
            lambda: session.post(chat_url, json=plain_request).json(),
            CHAT_COMPLETION,
        ),
    ]
    return [
        Workload("openai SDK stream", 1.03, openai_sdk, chat.text, chat),
        Workload("anthropic SDK stream", 1.10, anthropic_sdk, messages.text, messages),
        Workload("httpx + httpx-sse + json.loads", 1.20, raw_httpx_sse, chat.text, chat),
        # Strict mode judges every read as it comes (observing defers them): its goal is
        # observing's, the cost of refusing a stream nothing that completes pays.
        Workload("openai SDK stream, strict", 1.03, openai_sdk, chat.text, chat, strict=True),
        Workload(
            "anthropic SDK stream, strict",
            1.10,
            anthropic_sdk,
            messages.text,
            messages,
            strict=True,
        ),
        # The method's noise floor, for streams and for requests: the same pairing and
        # statistics with nothing instrumented on either side.
        Workload(
            "anthropic SDK stream, A/A control",
            None,
            anthropic_sdk,
            messages.text,
            messages,
            control=True,
        ),
        *(
            Workload(
                name, 1.01, repeat(call), [expected] * requests_per_run, None, requests_per_run
            )
            for name, call, expected in plain
        ),
        Workload(
            f"{plain[0][0]}, A/A control",
            None,
            repeat(plain[0][1]),
            [plain[0][2]] * requests_per_run,
            None,
            requests_per_run,
            control=True,
        ),
    ]


def select_workloads(workloads: list[Workload], only: list[str]) -> list[Workload]:
    """The workloads whose name contains one of ``only`` (any case), and the A/A control of each
    selected workload's kind (stream or request), so every goal keeps its noise floor; all of
    them if ``only`` is empty."""
    if not only:
        return workloads
    wanted = {w.name for w in workloads if any(s.lower() in w.name.lower() for s in only)}
    if not wanted:
        names = "; ".join(w.name for w in workloads)
        raise SystemExit(f"--only {','.join(only)}: no workload matches. Workloads: {names}")
    kinds = {w.unit for w in workloads if w.name in wanted}
    return [w for w in workloads if w.name in wanted or (w.control and w.unit in kinds)]


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile by linear interpolation between closest ranks (numpy's default):
    within the samples, defined from one sample up; p50 is the median."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def monitor_alone_us(body: Body, repeats: int) -> float:
    """The observer's core on its own: ``StreamMonitor`` fed one read per event with a
    ``perf_counter()`` per read, as the observer feeds it; median CPU microseconds per stream
    (CPU time, so that other processes' load does not count)."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.process_time_ns()
        monitor = StreamMonitor(body.route, started_at=time.perf_counter())
        for event in body.events:
            monitor.feed(event, time.perf_counter())
        report = monitor.close(time.perf_counter())
        samples.append(time.process_time_ns() - start)
        assert report.outcome is Outcome.COMPLETE, report.outcome
    return statistics.median(samples) / 1e3


@dataclass
class SpeedResult:
    workload: Workload
    wall: dict[bool, list[int]] = field(default_factory=lambda: {False: [], True: []})
    cpu: dict[bool, list[int]] = field(default_factory=lambda: {False: [], True: []})
    monitor_us: float | None = None  # monitor_alone_us() of the workload's body

    @property
    def rounds(self) -> int:
        return len(self.wall[True])

    def median_ms(self, samples: dict[bool, list[int]], instrumented: bool) -> float:
        return statistics.median(samples[instrumented]) / 1e6

    def ratios(self, samples: dict[bool, list[int]]) -> list[float]:
        """Per-round ratios: both runs of a round are back to back, so drift cancels."""
        return [i / p for i, p in zip(samples[True], samples[False], strict=True)]

    def percentiles(self, samples: dict[bool, list[int]]) -> dict[int, float]:
        ratios = self.ratios(samples)
        return {p: percentile(ratios, p) for p in PERCENTILES}

    @property
    def cpu_ratio(self) -> float:
        """The goal's figure: median of per-round CPU ratios."""
        return percentile(self.ratios(self.cpu), 50)

    @property
    def wall_ratio(self) -> float:
        return percentile(self.ratios(self.wall), 50)

    @property
    def min_ratio(self) -> float:
        """Fastest instrumented run / fastest uninstrumented run, wall: load on the machine only
        ever adds time, so this is the least disturbed wall estimate (a cross-check)."""
        return min(self.wall[True]) / min(self.wall[False])

    def added_us(self, samples: dict[bool, list[int]]) -> float:
        """Median per-round added time, per stream or request, in microseconds."""
        added = [i - p for i, p in zip(samples[True], samples[False], strict=True)]
        return statistics.median(added) / 1e3 / self.workload.per_run

    def cpu_us_per_event(self) -> dict[str, float] | None:
        """CPU per stream divided by its events: each mode's median, and the median per-round
        added; None for plain requests."""
        body = self.workload.body
        if body is None:
            return None
        divisor = 1e3 * len(body.events) * self.workload.per_run  # ns per run -> us per event
        return {
            "uninstrumented": statistics.median(self.cpu[False]) / divisor,
            "instrumented": statistics.median(self.cpu[True]) / divisor,
            "added": self.added_us(self.cpu) / len(body.events),
        }

    @property
    def met(self) -> bool | None:
        goal = self.workload.goal
        return None if goal is None else self.cpu_ratio <= goal

    def to_json(self) -> dict[str, Any]:
        w = self.workload
        wall_p, cpu_p = self.percentiles(self.wall), self.percentiles(self.cpu)
        return {
            "workload": w.name,
            "control": w.control,
            "per_run": f"{w.per_run} {w.unit}(s)",
            "events_per_stream": len(w.body.events) if w.body else None,
            "rounds": self.rounds,
            "median_ms": {
                "uninstrumented": self.median_ms(self.wall, False),
                "instrumented": self.median_ms(self.wall, True),
            },
            "median_cpu_ms": {
                "uninstrumented": self.median_ms(self.cpu, False),
                "instrumented": self.median_ms(self.cpu, True),
            },
            "ratio_cpu": self.cpu_ratio,
            "ratio_cpu_percentiles": {f"p{p}": v for p, v in cpu_p.items()},
            "ratio_wall": self.wall_ratio,
            "ratio_wall_percentiles": {f"p{p}": v for p, v in wall_p.items()},
            "ratio_wall_p25_p75": [wall_p[25], wall_p[75]],
            "ratio_of_minimums": self.min_ratio,
            f"added_wall_us_per_{w.unit}": self.added_us(self.wall),
            f"added_cpu_us_per_{w.unit}": self.added_us(self.cpu),
            "cpu_us_per_event": self.cpu_us_per_event(),
            "monitor_alone_cpu_us_per_stream": self.monitor_us,
            "goal": w.goal,
            "judged_on": "ratio_cpu",
            "met": self.met,
            "samples_ns": {
                "uninstrumented_wall": self.wall[False],
                "instrumented_wall": self.wall[True],
                "uninstrumented_cpu": self.cpu[False],
                "instrumented_cpu": self.cpu[True],
            },
        }


def timed_run(workload: Workload, telemetry: Telemetry, instrumented: bool) -> tuple[int, int]:
    """One run, checked; (wall ns, client-process CPU ns). instrument()/uninstrument() and the
    collection before it stay outside the timer; GC stays on inside (the instrumented run's
    extra allocations may trigger collections, which is part of its cost)."""
    instrumented = instrumented and not workload.control
    with telemetry.instrumented(instrumented, workload.strict):
        gc.collect()
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        result = workload.run()
        wall, cpu = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    assert result == workload.expected, f"{workload.name}: wrong result"
    if workload.body is None:  # not SSE: no span at all
        telemetry.check(instrumented, 0, "", None)
    else:
        telemetry.check(instrumented, workload.per_run, "complete", len(workload.body.events))
    return wall, cpu


def measure_speed(
    workload: Workload, telemetry: Telemetry, budget_s: float, min_rounds: int, max_rounds: int
) -> SpeedResult:
    for instrumented in (False, True, False, True):  # warm-up (connections, caches), checked
        timed_run(workload, telemetry, instrumented)
    result = SpeedResult(workload)
    deadline = time.perf_counter() + budget_s
    rnd = 0
    while rnd < min_rounds or (rnd < max_rounds and time.perf_counter() < deadline):
        for instrumented in (True, False) if rnd % 2 == 0 else (False, True):
            wall, cpu = timed_run(workload, telemetry, instrumented)
            result.wall[instrumented].append(wall)
            result.cpu[instrumented].append(cpu)
        rnd += 1
    if workload.body is not None and not workload.control:
        result.monitor_us = monitor_alone_us(workload.body, max(5, min_rounds))
    return result


# ---------------------------------------------------------------------------------------------
# Memory: many concurrent open streams under tracemalloc
# ---------------------------------------------------------------------------------------------


@dataclass
class MemoryPoint:
    events: int
    instrumented: bool
    streams: int
    bytes_per_stream: float
    by_origin: dict[str, float]  # bytes per stream, by the file that allocated them


_ORIGINS = (("/otelsse/", "otelsse"), ("/opentelemetry/", "opentelemetry"), ("/wrapt/", "wrapt"))


def _origin(filename: str) -> str:
    return next((origin for marker, origin in _ORIGINS if marker in filename), "other")


async def _hold_streams(
    url: str, streams: int, events: int, prefix_bytes: int
) -> tuple[float, dict[str, float]]:
    """Open ``streams`` streams at once, read ``events`` events from each, and measure with all
    of them open: bytes per stream, in all and by allocating code. Tracing starts after the
    client exists and stops before the streams close, so the figure is what the open streams
    hold, allocated while they were opened and read."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(300)) as client:
        reached = 0
        all_reached, release = asyncio.Event(), asyncio.Event()
        request = {"model": OPENAI_MODEL, "messages": PROMPT, "stream": True}

        async def one() -> None:
            nonlocal reached
            target = f"{url}/v1/chat/completions?events={events}"
            async with client.stream("POST", target, json=request) as response:
                got = 0
                async for chunk in response.aiter_bytes():
                    got += len(chunk)
                    if got == prefix_bytes:  # all that was sent is read: nothing in flight
                        reached += 1
                        if reached == streams:
                            all_reached.set()
                        await release.wait()
                        break

        gc.collect()
        tracemalloc.start()
        try:
            tasks = [asyncio.create_task(one()) for _ in range(streams)]
            await all_reached.wait()
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        release.set()
        await asyncio.gather(*tasks)

    origins: dict[str, float] = {}
    for stat in snapshot.statistics("filename"):
        origin = _origin(stat.traceback[0].filename)
        origins[origin] = origins.get(origin, 0) + stat.size / streams
    return held / streams, origins


def measure_memory(
    url: str, telemetry: Telemetry, streams: int, prefixes: tuple[int, ...], repeats: int
) -> list[MemoryPoint]:
    """Every (prefix, mode) ``repeats`` times, the modes alternating, after a discarded warm-up
    round per mode (lazy imports and caches of the first async streams must count for neither
    mode)."""
    events = openai_body().events
    points = []
    plan = [(10, prefixes[0], False), (10, prefixes[0], True)]  # the warm-up, not kept
    for rnd in range(repeats):
        for n in prefixes:
            modes = (False, True) if rnd % 2 == 0 else (True, False)
            plan += [(streams, n, instrumented) for instrumented in modes]
    for i, (count, n, instrumented) in enumerate(plan):
        prefix_bytes = sum(len(e) for e in events[:n])
        with telemetry.instrumented(instrumented):
            held, origins = asyncio.run(_hold_streams(url, count, n, prefix_bytes))
        # The application closed each stream before EOF: every span must say cancelled after n.
        telemetry.check(instrumented, count, "cancelled", n)
        if i < 2:
            continue
        point = MemoryPoint(n, instrumented, count, held, origins)
        points.append(point)
        print(
            f"  memory: {count} streams held after {n} events, "
            f"{'instrumented' if instrumented else 'uninstrumented'}: "
            f"{point.bytes_per_stream:,.0f} B/stream",
            file=sys.stderr,
        )
    return points


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    dists = (
        "openai", "anthropic", "httpx", "httpx2", "httpx-sse", "requests", "urllib3",
        "opentelemetry-sdk", "wrapt", "orjson", "pydantic",
    )  # fmt: skip
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "otelsse": otelsse.__version__,
        "git": git_revision(),
        "otelsse_json_decoder": otelsse_json.JSON_DECODER,
        "versions": {d: _version(d) for d in dists},
    }


def _goal_text(goal: float | None) -> str:
    return "-" if goal is None else f"{goal:.2f}x"


def _verdict(met: bool | None) -> str:
    return "INFO" if met is None else "MET" if met else "NOT MET"


def _band(percentiles: dict[int, float], low: int, high: int) -> str:
    return f"{percentiles[low]:.3f}-{percentiles[high]:.3f}"


def _speed_goal(r: SpeedResult, controls: dict[str, SpeedResult]) -> dict[str, Any]:
    """A goal row: judged on the CPU median; wall and the A/A control's CPU band beside it."""
    w = r.workload
    sides = "uninstrumented / uninstrumented" if w.control else "instrumented / uninstrumented"
    cpu, wall = r.percentiles(r.cpu), r.percentiles(r.wall)
    control = None if w.control else controls.get(w.unit)
    noise_floor = None
    if control is not None:
        floor = control.percentiles(control.cpu)
        noise_floor = {
            "control": control.workload.name,
            "cpu_ratio_p10_p90": [floor[10], floor[90]],
        }
    return {
        "goal": f"{w.name}: {sides} CPU time, median of per-round ratios",
        "workload": w.name,
        "target": "none: reported only" if w.goal is None else f"<= {w.goal:.2f}x",
        "value": cpu[50],
        "text": f"CPU {cpu[50]:.3f}x (p10-p90 {_band(cpu, 10, 90)}), wall {wall[50]:.3f}x",
        "cpu_ratio_p10_p90": [cpu[10], cpu[90]],
        "wall_ratio": wall[50],
        "noise_floor": noise_floor,
        "met": r.met,
    }


def print_speed(results: list[SpeedResult]) -> None:
    per_unit = f"added {US}, per s or r"
    groups = (
        f"{'':<33} {'':>6} {'CPU ms, median':^17} {'CPU ratio, per round':^31} {'wall':>7} "
        f"{per_unit:^23}"
    )
    header = (
        f"{'workload':<33} {'rounds':>6} {'plain':>8} {'instr':>8} {'p50':>7} {'p25-p75':>11} "
        f"{'p10-p90':>11} {'p50':>7} {'CPU':>11} {'wall':>11} {'goal':>6}  verdict"
    )
    print(groups.rstrip())
    print(header)
    print("-" * len(header))
    for r in results:
        w = r.workload
        cpu = r.percentiles(r.cpu)
        unit = f"/{w.unit[0]}"
        verdict = "control" if w.control else _verdict(r.met)
        print(
            f"{w.name:<33} {r.rounds:>6} {r.median_ms(r.cpu, False):>8.2f} "
            f"{r.median_ms(r.cpu, True):>8.2f} {cpu[50]:>6.3f}x {_band(cpu, 25, 75):>11} "
            f"{_band(cpu, 10, 90):>11} {r.wall_ratio:>6.3f}x {r.added_us(r.cpu):>9,.1f}{unit} "
            f"{r.added_us(r.wall):>9,.1f}{unit} {_goal_text(w.goal):>6}  {verdict}"
        )


def print_per_event(results: list[SpeedResult]) -> None:
    """Stream workloads' CPU per event: what a token costs the client, with and without."""
    streams = [r for r in results if r.workload.body is not None]
    if not streams:
        return
    print(
        "CPU per event, stream workloads: median CPU per stream / its events; added = median "
        "per-round added CPU / events;\nmonitor alone = StreamMonitor fed the same events, one "
        "read each with a perf_counter(), as the observer feeds it"
    )
    header = (
        f"{'workload':<33} {'events':>6} {'plain ' + US + '/ev':>12} {'instr ' + US + '/ev':>12} "
        f"{'added ' + US + '/ev':>12} {'monitor alone ' + US + '/ev':>20}"
    )
    print(header)
    print("-" * len(header))
    for r in streams:
        assert r.workload.body is not None
        events = len(r.workload.body.events)
        per_event = r.cpu_us_per_event()
        assert per_event is not None
        monitor = "" if r.monitor_us is None else f"{r.monitor_us / events:.2f}"
        print(
            f"{r.workload.name:<33} {events:>6,} {per_event['uninstrumented']:>12.2f} "
            f"{per_event['instrumented']:>12.2f} {per_event['added']:>12.2f} {monitor:>20}"
        )


def print_goals(rows: list[dict[str, Any]]) -> None:
    print(
        "Goals: instrumented / uninstrumented client CPU time, median of per-round ratios (the "
        "verdict), its p10-p90 and the wall median\nbeside it; A/A floor = the A/A control of "
        "the same kind (stream or request): its CPU p10-p90, the method's noise"
    )
    for g in rows:
        if "workload" not in g:  # the memory goal
            print(f"  [{_verdict(g['met']):>7}] {g['goal']}: {g['text']} (goal {g['target']})")
            continue
        floor = g["noise_floor"]
        band = ""
        if floor is not None:
            low, high = floor["cpu_ratio_p10_p90"]
            band = f"A/A floor {low:.3f}-{high:.3f}"
        goal = "" if g["met"] is None else f"goal {g['target']}"
        line = f"  [{_verdict(g['met']):>7}] {g['workload']:<33} {g['text']:<48} {goal:<14} {band}"
        print(line.rstrip())


def memory_summary(points: list[MemoryPoint]) -> dict[str, Any]:
    """Per prefix: medians over the repeats, instrumented minus uninstrumented."""

    def median_of(n: int, instrumented: bool) -> tuple[float, dict[str, float], int]:
        mine = [p for p in points if (p.events, p.instrumented) == (n, instrumented)]
        origins = {o for p in mine for o in p.by_origin}
        by_origin = {o: statistics.median(p.by_origin.get(o, 0) for p in mine) for o in origins}
        return statistics.median(p.bytes_per_stream for p in mine), by_origin, mine[0].streams

    rows: list[dict[str, Any]] = []
    for n in sorted({p.events for p in points}):
        plain, plain_origins, streams = median_of(n, False)
        inst, inst_origins, _ = median_of(n, True)
        origins = sorted(
            set(plain_origins) | set(inst_origins), key=[*dict(_ORIGINS).values(), "other"].index
        )
        added_by_origin = {o: inst_origins.get(o, 0) - plain_origins.get(o, 0) for o in origins}
        rows.append(
            {
                "events": n,
                "streams": streams,
                "repeats": sum(1 for p in points if (p.events, p.instrumented) == (n, True)),
                "uninstrumented_bytes_per_stream": plain,
                "instrumented_bytes_per_stream": inst,
                "added_bytes_per_stream": inst - plain,
                "added_by_origin": added_by_origin,
                "instrumentation_code_bytes_per_stream": sum(
                    v for o, v in added_by_origin.items() if o != "other"
                ),
            }
        )
    first, last = rows[0], rows[-1]
    extra_events = last["events"] - first["events"]
    growth = last["added_bytes_per_stream"] - first["added_bytes_per_stream"]
    code_growth = (
        last["instrumentation_code_bytes_per_stream"]
        - first["instrumentation_code_bytes_per_stream"]
    )
    return {
        "rows": rows,
        "growth_bytes_per_stream": growth,
        "growth_bytes_per_extra_event": growth / extra_events,
        "instrumentation_code_growth_bytes_per_stream": code_growth,
        "instrumentation_code_growth_bytes_per_extra_event": code_growth / extra_events,
    }


def print_memory(summary: dict[str, Any]) -> None:
    print(
        f"{'events read':>11} {'streams':>7} {'repeats':>7} {'plain B/stream':>15} "
        f"{'instr B/stream':>15} {'added B/stream':>15}  added by allocating code (B/stream)"
    )
    for row in summary["rows"]:
        origins = ", ".join(f"{k} {v:,.0f}" for k, v in row["added_by_origin"].items())
        print(
            f"{row['events']:>11,} {row['streams']:>7,} {row['repeats']:>7} "
            f"{row['uninstrumented_bytes_per_stream']:>15,.0f} "
            f"{row['instrumented_bytes_per_stream']:>15,.0f} "
            f"{row['added_bytes_per_stream']:>15,.0f}  {origins}"
        )
    first, last = summary["rows"][0], summary["rows"][-1]
    print(
        f"growth from {first['events']:,} to {last['events']:,} events, per stream: added bytes "
        f"{summary['growth_bytes_per_stream']:+,.0f} B "
        f"({summary['growth_bytes_per_extra_event']:+.2f} B/event); allocated by otelsse, "
        "opentelemetry and wrapt code "
        f"{summary['instrumentation_code_growth_bytes_per_stream']:+,.0f} B "
        f"({summary['instrumentation_code_growth_bytes_per_extra_event']:+.2f} B/event)"
    )


def memory_goal(summary: dict[str, Any]) -> dict[str, Any]:
    growth = summary["growth_bytes_per_extra_event"]
    first, last = summary["rows"][0], summary["rows"][-1]
    return {
        "goal": f"memory added per open stream, {last['events']:,} vs {first['events']:,} "
        "events read",
        "target": "O(1): < 1 B per extra event",
        "value": growth,
        "text": f"{first['added_bytes_per_stream']:,.0f} B vs "
        f"{last['added_bytes_per_stream']:,.0f} B ({growth:+.2f} B/event)",
        "met": growth < 1.0,
    }


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: at least 1")
    return n


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (noisier)")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SUBSTRING",
        help="run only the workloads whose name contains SUBSTRING (any case; repeatable or "
        "comma-separated), plus the A/A control of each selected workload's kind (stream or "
        "request) for the noise floor",
    )
    ap.add_argument(
        "--rounds",
        type=_positive,
        metavar="N",
        help="exactly N interleaved rounds per workload (default: as many as fit a time budget)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the memory part")
    ap.add_argument(
        "--json",
        default=str(Path(__file__).resolve().parent / "results-instrumentation.json"),
        metavar="PATH",
        help="where to write the results (default: benchmarks/results-instrumentation.json)",
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    args.only = [part.strip() for arg in args.only for part in arg.split(",") if part.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        asyncio.run(serve_answers(_Answers()))
        return 0
    if args.quick:
        budget, min_rounds, max_rounds, requests_per_run = 1.5, 3, 7, 20
        memory_streams, memory_repeats = 100, 1
    else:
        budget, min_rounds, max_rounds, requests_per_run = 25.0, 15, 201, 50
        memory_streams, memory_repeats = 1000, 2
    if args.rounds is not None:
        min_rounds = max_rounds = args.rounds
    prefixes = (100, DELTAS)
    options = {"only": args.only, "rounds": args.rounds, "memory": not args.no_memory}

    env = environment()
    print(
        f"otelsse {env['otelsse']} @ {env['git']} (JSON: {env['otelsse_json_decoder']}) | Python "
        f"{env['python']} on {env['platform']}, {env['cpu_count']} CPUs, load average "
        + " ".join(f"{x:.2f}" for x in env["load_average_at_start"])
    )
    print(", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    print(
        f"mode: {'quick' if args.quick else 'full'}; only: {', '.join(args.only) or 'all'}; "
        f"rounds: {args.rounds or f'{min_rounds}-{max_rounds}, {budget:g} s budget'}; "
        f"memory: {'no' if args.no_memory else 'yes'}"
    )
    print(
        "server: asyncio HTTP/1.1 in a child process, one HTTP chunk per SSE event; telemetry: "
        "SDK TracerProvider + BatchSpanProcessor(InMemorySpanExporter), MeterProvider + "
        "InMemoryMetricReader\nfigures: a round = one instrumented and one uninstrumented run, "
        "back to back; CPU = this process's CPU time (the server's is not counted);\n"
        "CPU ms = median per mode per run; CPU ratio = instrumented / uninstrumented per round: "
        "p50 (the goals' figure), p25-p75, p10-p90;\nwall p50 = the same ratio on wall time; "
        f"added = median per-round added CPU / wall time per stream (s) or request (r), {US}; "
        f"request runs: {requests_per_run} requests each"
    )
    print()

    started = time.perf_counter()
    telemetry = Telemetry()
    points: list[MemoryPoint] = []
    with server_process() as url, contextlib.ExitStack() as stack:
        workloads = select_workloads(speed_workloads(url, stack, requests_per_run), args.only)
        gc.collect()
        gc.freeze()  # keep collections between and inside runs cheap, as in bench_parsers
        results = []
        for workload in workloads:
            r = measure_speed(workload, telemetry, budget, min_rounds, max_rounds)
            results.append(r)
            print(
                f"  measured {workload.name} ({time.perf_counter() - started:.0f} s): "
                f"CPU {r.cpu_ratio:.3f}x, wall {r.wall_ratio:.3f}x",
                file=sys.stderr,
            )
        gc.unfreeze()
        if not args.no_memory:
            points = measure_memory(url, telemetry, memory_streams, prefixes, memory_repeats)
    errors = telemetry.instrumentation_errors()
    telemetry.shutdown()
    elapsed = time.perf_counter() - started

    print()
    print_speed(results)
    print()
    print_per_event(results)
    summary = None
    if points:
        print()
        print(
            f"Memory: {memory_streams:,} concurrent streams (httpx.AsyncClient, POST "
            "/v1/chat/completions stream=true), held open once each has read its first N "
            "events;\ntracemalloc traced from just before opening them until all are open, "
            "after gc.collect(); median over repeats"
        )
        summary = memory_summary(points)
        print_memory(summary)
    print(f"\notelsse.instrumentation.errors over the whole run: {errors:g}")

    controls = {r.workload.unit: r for r in results if r.workload.control}
    goal_rows = [_speed_goal(r, controls) for r in results]
    if summary is not None:
        goal_rows.append(memory_goal(summary))
    print()
    print_goals(goal_rows)
    env["load_average_at_end"] = os.getloadavg()
    print(
        f"\ntotal time: {elapsed:.0f} s; load average at end "
        + " ".join(f"{x:.2f}" for x in env["load_average_at_end"])
    )

    payload = {
        "environment": env,
        "mode": "quick" if args.quick else "full",
        "options": options,
        "statistic": "per-round paired ratios, instrumented / uninstrumented, of client CPU "
        "time (the goals' figure: their median) and of wall time; percentiles p10-p90 by "
        "linear interpolation; absolute figures: median over interleaved rounds",
        "elapsed_s": elapsed,
        "speed": [r.to_json() for r in results],
        "memory": summary,
        "instrumentation_errors": errors,
        "goals": goal_rows,
    }
    Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
