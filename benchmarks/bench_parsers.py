"""Throughput of otelsse's SSE framer and stream monitor against the SSE parsers people use.

Run from the repository root::

    python benchmarks/bench_parsers.py            # full run, about 2-3 minutes on 2 cores
    python benchmarks/bench_parsers.py --quick    # a short, noisier run
    python benchmarks/bench_parsers.py --json     # also write benchmarks/results.json

Every implementation gets the same bytes under the same chunking, in the same process. One
"run" is one whole stream: construct the parser, feed every read, iterate every event, close.

Method (see benchmarks/README.md):

- Timer: ``time.perf_counter_ns`` around one run. The runs are single-threaded and CPU-bound, so
  this wall time is the CPU time per stream on an idle core.
- Before timing, each implementation's events are checked against SSEParser's (same count and
  the same data strings), and every timed run asserts the event count again, so a broken peer
  pipeline cannot look fast by doing less work.
- Warm-up: one verification run and one untimed run per implementation.
- Repetitions are interleaved: each round runs every implementation once, in an order rotated
  by one each round, so slow drift of the machine hits all of them alike.
- GC is disabled during each timed run and a collection runs between rounds (as ``timeit``
  does); objects that exist before measuring are frozen (``gc.freeze``) so that is cheap.
- The figure reported is the MEDIAN over the rounds; the minimum and quartiles are in the JSON.
  Ratios between two implementations are the median of the per-round ratios (both runs of a
  round are back to back), which cancels most of the drift of a shared, noisy machine.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure the working tree's otelsse, as PYTHONPATH=. does

import otelsse  # noqa: E402
from otelsse import Outcome, SSEParser, StreamMonitor  # noqa: E402
from otelsse._core import framing  # noqa: E402
from otelsse._core import json as otelsse_json  # noqa: E402

US = "\u00b5s"  # micro sign, spelled out so the source stays ASCII

# ---------------------------------------------------------------------------------------------
# Fixtures: long synthetic streams in the exact shape of the recorded ones
# ---------------------------------------------------------------------------------------------

FULL_EVENTS = 2000
ONE_BYTE_EVENTS = 200
SEED = 20240611

# Short LLM-like tokens, mostly ASCII as in English answers. About 3% carry non-ASCII text
# (typographic punctuation and accents, rarer CJK, a very rare emoji) so random and 1-byte
# reads also cut inside 2-, 3- and 4-byte UTF-8 sequences, and the verification checks that
# every implementation decodes them alike.
_ASCII_TOKENS = (
    " the", " model", " streams", " one", " token", " at", " a", " time", ",", ".", " and",
    " answer", " is", " nine", " four", " plus", " five", " equals", " because", " we",
    " count", " from", " there", " to", " here", "\n\n", "\n", " -", " **", "Note", ":",
    ' "quoted"', " JSON", " {", "}", " 42", " Paris", " capital", " of", " France", " it",
    " would", " be", " better", " in", " this", " case", " if", " you", " use", "ing", "s",
)  # fmt: skip
_BMP_TOKENS = (" caf\u00e9", " na\u00efve", " \u2014", "\u2019s", " \u201cso\u201d", "\u2026")
_CJK_TOKENS = (" \u6771\u4eac", "\u306f", " \ud55c\uad6d\uc5b4")
_ASTRAL_TOKENS = (" \U0001f642", " \U0001f680")


def _tokens(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.0025:
            out.append(rng.choice(_ASTRAL_TOKENS))
        elif r < 0.01:
            out.append(rng.choice(_CJK_TOKENS))
        elif r < 0.03:
            out.append(rng.choice(_BMP_TOKENS))
        else:
            out.append(rng.choice(_ASCII_TOKENS))
    return out


_TEXT_FIELD = re.compile(r'("(?:text|content)"\s*:\s*)"(?:[^"\\]|\\.)*"')
_OBFUSCATION = re.compile(r'("obfuscation"\s*:\s*)"[^"]*"')
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclass(frozen=True)
class Fixture:
    name: str
    route: str
    source: str
    events: tuple[bytes, ...]  # each event's bytes, blank line included

    @property
    def body(self) -> bytes:
        return b"".join(self.events)


def fixtures_dir() -> Path:
    default = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    base = Path(os.environ.get("OTELSSE_FIXTURES", default))
    return base / "real" if (base / "real").is_dir() else base


def _split(raw: str, sep: str) -> list[str]:
    return [block for block in raw.split(sep) if block.strip()]


def _with_text(template: str, token: str) -> str:
    new, count = _TEXT_FIELD.subn(
        lambda m: m.group(1) + json.dumps(token, ensure_ascii=False), template, count=1
    )
    assert count == 1, "template has no text/content field"
    return new


def synth_openai_chat(n_events: int, directory: Path) -> Fixture:
    """Role chunk, content chunks (one token each), finish chunk, ``data: [DONE]``."""
    path = directory / "openai-chat-text.sse"
    blocks = _split(path.read_text("utf-8"), "\n\n")
    role = blocks[0]
    content = next(b for b in blocks[1:] if '"content":"' in b and '"finish_reason":null' in b)
    finish = next(b for b in blocks if '"finish_reason":"stop"' in b)
    done = blocks[-1]
    assert done == "data: [DONE]", done
    rng = random.Random(SEED)
    middle = []
    for token in _tokens(rng, n_events - 3):
        pad = "".join(rng.choice(_ALNUM) for _ in range(rng.randint(3, 12)))
        block = _OBFUSCATION.sub(lambda m, p=pad: f'{m.group(1)}"{p}"', _with_text(content, token))
        middle.append(block)
    out = [role, *middle, finish, done]
    return Fixture("openai-chat", "openai.chat_completions", path.name, tuple(_encode(out, "\n")))


def synth_anthropic(n_events: int, directory: Path) -> Fixture:
    """message_start, content_block_start, ping, text deltas, block stop, message_delta/stop."""
    path = directory / "anthropic-text.sse"
    blocks = _split(path.read_text("utf-8"), "\n\n")
    deltas = [i for i, b in enumerate(blocks) if b.startswith("event: content_block_delta")]
    head, tail = blocks[: deltas[0]], blocks[deltas[-1] + 1 :]
    template = blocks[deltas[0]]
    rng = random.Random(SEED)
    middle = [_with_text(template, t) for t in _tokens(rng, n_events - len(head) - len(tail))]
    out = [*head, *middle, *tail]
    return Fixture("anthropic", "anthropic.messages", path.name, tuple(_encode(out, "\n")))


def synth_gemini(n_events: int, directory: Path) -> Fixture:
    """CRLF line endings; text chunks, then a chunk with ``finishReason: STOP``."""
    path = directory / "gemini-text.sse"
    raw = path.read_bytes().decode("utf-8")
    assert "\r\n\r\n" in raw, "the Gemini fixture is expected to use CRLF"
    blocks = _split(raw, "\r\n\r\n")
    template, finish = blocks[0], blocks[-1]
    assert "finishReason" in finish
    assert "finishReason" not in template
    rng = random.Random(SEED)
    middle = [_with_text(template, t) for t in _tokens(rng, n_events - 1)]
    out = [*middle, finish]
    return Fixture("gemini-crlf", "gemini.generate_content", path.name, tuple(_encode(out, "\r\n")))


def _encode(blocks: list[str], eol: str) -> Iterator[bytes]:
    for block in blocks:
        yield (block + eol + eol).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Chunkings
# ---------------------------------------------------------------------------------------------


def fixed_reads(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def random_reads(body: bytes, seed: int = SEED, low: int = 1, high: int = 8192) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(body):
        n = rng.randint(low, high)
        out.append(body[i : i + n])
        i += n
    return out


@dataclass(frozen=True)
class Case:
    fixture: Fixture
    chunking: str
    chunks: list[bytes]

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.chunks))


def make_cases(full: Fixture, small: Fixture) -> list[Case]:
    body = full.body
    return [
        Case(full, "whole body", [body]),
        Case(full, "4 KiB reads", fixed_reads(body, 4096)),
        Case(full, "random 1..8192", random_reads(body)),
        Case(full, "per event", list(full.events)),
        Case(small, "1-byte reads", fixed_reads(small.body, 1)),
    ]


# ---------------------------------------------------------------------------------------------
# Implementations. Each ``run(chunks) -> number of events`` processes one whole stream.
# ---------------------------------------------------------------------------------------------

Runner = Callable[[list[bytes]], int]
Lister = Callable[[list[bytes]], list[str]]  # the data of every event, for verification


@dataclass
class Impl:
    name: str
    kind: str  # "otelsse" | "peer" | "consumer"
    run: Runner
    events: Lister
    stdlib_json: bool = False  # run with otelsse's JSON decoder patched to json.loads
    version: str = ""
    # Routes read their hot events through their typed shapes (``typed_decoding``); False runs
    # the generic reading alone (as without msgspec).
    typed: bool = True
    # The parser's compiled hot path (``_framing_speedups.c``) when built; False runs the
    # pure-Python parser alone (as a build without a C compiler).
    compiled: bool = True


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


# -- otelsse ----------------------------------------------------------------------------------


def run_sseparser(chunks: list[bytes]) -> int:
    parser = SSEParser()
    n = 0
    for chunk in chunks:
        for _event in parser.feed(chunk):
            n += 1
    for _event in parser.close():
        n += 1
    return n


def list_sseparser(chunks: list[bytes]) -> list[str]:
    parser = SSEParser()
    out = [e.data for chunk in chunks for e in parser.feed(chunk)]
    out += [e.data for e in parser.close()]
    return out


def monitor_runner(route: str) -> tuple[Runner, Lister]:
    def run(chunks: list[bytes]) -> int:
        monitor = StreamMonitor(route)
        n = 0
        for chunk in chunks:
            for _event in monitor.feed(chunk):
                n += 1
        monitor.close()
        return n

    def events(chunks: list[bytes]) -> list[str]:
        monitor = StreamMonitor(route)
        out = [e.data for chunk in chunks for e in monitor.feed(chunk)]
        report = monitor.close()
        assert report.outcome is Outcome.COMPLETE, (route, report.outcome, report.anomalies)
        assert report.event_count == len(out)
        return out

    return run, events


_JSON_ATTRS = ("loads",)


@contextlib.contextmanager
def stdlib_json(
    enabled: bool, loads: Callable[[str], Any] = otelsse_json._loads_stdlib
) -> Iterator[None]:
    """Make every otelsse module that imported ``loads`` by name use ``loads`` (the strict
    standard-library reading).

    Module globals are looked up at call time, so patching around construction and feeding
    reaches every call site. The patched modules are found by scanning for otelsse modules
    that hold the configured decoder, so a new importer cannot be missed.
    """
    if not enabled:
        yield
        return
    original = otelsse_json.loads
    saved: list[tuple[ModuleType, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "otelsse" or name.startswith("otelsse.")):
            continue
        if getattr(module, "loads", None) is original:
            for attr in _JSON_ATTRS:
                saved.append((module, attr, getattr(module, attr)))
            module.loads = loads  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


# -- httpx-sse: the pipeline of EventSource.iter_sse over httpx.Response.iter_text -----------


def _iter_text(chunks: Iterable[bytes]) -> Iterator[str]:
    """httpx ``Response.iter_text()`` without the HTTP plumbing: an incremental UTF-8 decoder
    with errors="replace" (httpx's TextDecoder); empty strings are dropped (its TextChunker)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    text = decoder.decode(b"", True)
    if text:
        yield text


def httpx_sse_events(chunks: Iterable[bytes]) -> Iterator[Any]:
    from httpx_sse._decoders import SSEDecoder, SSELineDecoder

    def iter_sse_lines() -> Iterator[str]:  # httpx_sse._api._iter_sse_lines
        decoder = SSELineDecoder()
        for text in _iter_text(chunks):
            yield from decoder.decode(text)
        yield from decoder.flush()

    decoder = SSEDecoder()  # httpx_sse.EventSource.iter_sse
    for line in iter_sse_lines():
        line = line.rstrip("\n")
        sse = decoder.decode(line)
        if sse is not None:
            yield sse


def run_httpx_sse(chunks: list[bytes]) -> int:
    n = 0
    for _sse in httpx_sse_events(chunks):
        n += 1
    return n


def raw_consumer(loads: Callable[[str], Any]) -> Runner:
    """What an application does without otelsse: httpx-sse framing, then one JSON parse per
    event (``[DONE]`` skipped)."""

    def run(chunks: list[bytes]) -> int:
        n = 0
        for sse in httpx_sse_events(chunks):
            n += 1
            data = sse.data
            if data != "[DONE]":
                loads(data)
        return n

    return run


# -- httpx2: the pipeline of httpx2.EventSource.__iter__ over Response.iter_text --------------


def httpx2_events(chunks: Iterable[bytes]) -> Iterator[Any]:
    from httpx2._config import DEFAULT_MAX_EVENT_SIZE_BYTES
    from httpx2._sse import _SSEParser

    parser = _SSEParser(DEFAULT_MAX_EVENT_SIZE_BYTES)
    for text in _iter_text(chunks):
        yield from parser.decode(text)
    yield from parser.flush()


def run_httpx2(chunks: list[bytes]) -> int:
    n = 0
    for _sse in httpx2_events(chunks):
        n += 1
    return n


# -- openai / anthropic: SSEDecoder().iter_bytes(iterator), as their Stream classes do --------


def sdk_runner(module: str) -> tuple[Runner, Lister]:
    decoder_class = __import__(f"{module}._streaming", fromlist=["SSEDecoder"]).SSEDecoder

    def run(chunks: list[bytes]) -> int:
        n = 0
        for _sse in decoder_class().iter_bytes(iter(chunks)):
            n += 1
        return n

    def events(chunks: list[bytes]) -> list[str]:
        return [sse.data for sse in decoder_class().iter_bytes(iter(chunks))]

    return run, events


# -- sseclient-py: SSEClient(iterable of byte chunks).events() --------------------------------


def run_sseclient(chunks: list[bytes]) -> int:
    from sseclient import SSEClient

    n = 0
    for _event in SSEClient(chunks).events():
        n += 1
    return n


def list_sseclient(chunks: list[bytes]) -> list[str]:
    from sseclient import SSEClient

    return [event.data for event in SSEClient(chunks).events()]


def _lister(events: Callable[[list[bytes]], Iterator[Any]]) -> Lister:
    return lambda chunks: [sse.data for sse in events(chunks)]


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


PURE_PARSER = "otelsse SSEParser [pure Python]"
TYPED_MONITOR = "otelsse StreamMonitor [typed]"
GENERIC_MONITOR = "otelsse StreamMonitor [generic]"
JSON_MONITOR = "otelsse StreamMonitor [json]"


def make_impls(route: str) -> tuple[list[Impl], list[str]]:
    """The implementations for one route, and the peers that had to be skipped (and why)."""
    skipped: list[str] = []
    have_fast_json = otelsse_json.JSON_DECODER != "json"
    otelsse_version = otelsse.__version__
    mon_run, mon_events = monitor_runner(route)
    impls = [
        Impl("otelsse SSEParser", "otelsse", run_sseparser, list_sseparser, False, otelsse_version)
    ]
    if framing.simple_event is not None:
        # The same parser without its compiled hot path: a build without a C compiler.
        impls.append(
            Impl(PURE_PARSER, "otelsse-pure", run_sseparser, list_sseparser, compiled=False)
        )
    if have_fast_json:
        # msgspec: the typed reading of the hot events, then the generic reading alone (the
        # same decoder to dicts and the routes' dict handlers), then the standard library's.
        impls += [
            Impl(TYPED_MONITOR, "monitor", mon_run, mon_events, False, otelsse_version),
            Impl(GENERIC_MONITOR, "monitor", mon_run, mon_events, False, typed=False),
            Impl(JSON_MONITOR, "monitor", mon_run, mon_events, True, typed=False),
        ]
    else:
        impls.append(Impl(JSON_MONITOR, "monitor", mon_run, mon_events, False, otelsse_version))
    if _importable("httpx_sse"):
        impls.append(
            Impl(
                "raw: httpx-sse + json.loads",
                "consumer",
                raw_consumer(json.loads),
                _lister(httpx_sse_events),
            )
        )
        if _importable("orjson"):
            import orjson

            impls.append(
                Impl(
                    "raw: httpx-sse + orjson.loads",
                    "consumer",
                    raw_consumer(orjson.loads),
                    _lister(httpx_sse_events),
                )
            )
        impls.append(
            Impl(
                "httpx-sse",
                "peer",
                run_httpx_sse,
                _lister(httpx_sse_events),
                version=_version("httpx-sse"),
            )
        )
    else:
        skipped.append("httpx-sse (not installed)")
    if _importable("httpx2._sse"):
        impls.append(
            Impl(
                "httpx2 EventSource",
                "peer",
                run_httpx2,
                _lister(httpx2_events),
                version=_version("httpx2"),
            )
        )
    elif _importable("httpx2"):
        skipped.append("httpx2 (installed, but has no httpx2._sse module / EventSource)")
    else:
        skipped.append("httpx2 (not installed)")
    for module in ("openai", "anthropic"):
        if _importable(f"{module}._streaming"):
            run, events = sdk_runner(module)
            impls.append(
                Impl(f"{module} SSEDecoder", "peer", run, events, version=_version(module))
            )
        else:
            skipped.append(f"{module} (not installed)")
    if _importable("sseclient"):
        impls.append(
            Impl(
                "sseclient-py",
                "peer",
                run_sseclient,
                list_sseclient,
                version=_version("sseclient-py"),
            )
        )
    else:
        skipped.append("sseclient-py (not installed)")
    return impls, skipped


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


@dataclass
class Result:
    fixture: str
    chunking: str
    impl: str
    kind: str
    nbytes: int
    events: int
    reads: int
    samples: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def mb_s(self) -> float:
        return self.nbytes / self.median * 1e3  # bytes/ns * 1e9 / 1e6

    @property
    def us_per_event(self) -> float:
        return self.median / self.events / 1e3

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        if len(self.samples) < 4:
            return (max(self.samples) - min(self.samples)) / self.median
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / self.median

    def to_json(self, ratio: float | None) -> dict[str, Any]:
        q = statistics.quantiles(self.samples, n=4) if len(self.samples) >= 2 else [self.median] * 3
        return {
            "fixture": self.fixture,
            "chunking": self.chunking,
            "implementation": self.impl,
            "kind": self.kind,
            "bytes": self.nbytes,
            "events": self.events,
            "reads": self.reads,
            "repetitions": len(self.samples),
            "median_ns": self.median,
            "min_ns": min(self.samples),
            "p25_ns": q[0],
            "p75_ns": q[2],
            "mb_per_s": self.mb_s,
            "us_per_event": self.us_per_event,
            "ratio_fastest_peer_over_this": ratio,  # median of per-round ratios
        }


@contextlib.contextmanager
def parser_build(compiled: bool) -> Iterator[None]:
    """The parser runs its compiled hot path (``compiled``, when built) or pure Python."""
    saved = framing.simple_event
    if not compiled:
        framing.simple_event = None
    try:
        yield
    finally:
        framing.simple_event = saved


@contextlib.contextmanager
def typed_reading(on: bool) -> Iterator[None]:
    """Routes made inside read their hot events typed (``on``) or generically."""
    saved = otelsse_json.typed_decoding
    otelsse_json.typed_decoding = on
    try:
        yield
    finally:
        otelsse_json.typed_decoding = saved


def _timed(impl: Impl, chunks: list[bytes]) -> tuple[int, int]:
    with stdlib_json(impl.stdlib_json), typed_reading(impl.typed), parser_build(impl.compiled):
        gc.disable()
        try:
            start = time.perf_counter_ns()
            n = impl.run(chunks)
            elapsed = time.perf_counter_ns() - start
        finally:
            gc.enable()
    return n, elapsed


# Events the routes answer without decoding JSON: Anthropic's keep-alive. (OpenAI's ``[DONE]``
# is tried as JSON first, so that the hot path never tests for it.)
_NOT_DECODED = frozenset({'{"type": "ping"}'})


def verify(case: Case, impls: list[Impl]) -> int:
    """All implementations must see the same events (count and data); returns the count."""
    reference = list_sseparser(case.chunks)
    assert reference, f"{case.fixture.name}/{case.chunking}: no events"
    for impl in impls:
        counted: list[int] = []

        def counting(text: str, _c: list[int] = counted) -> Any:
            _c.append(1)
            return otelsse_json._loads_stdlib(text)

        with (
            stdlib_json(impl.stdlib_json, counting),
            typed_reading(impl.typed),
            parser_build(impl.compiled),
        ):
            data = impl.events(case.chunks)
        where = f"{impl.name} on {case.fixture.name}/{case.chunking}"
        assert len(data) == len(reference), f"{where}: {len(data)} events, want {len(reference)}"
        assert data == reference, f"{where}: event data differs from SSEParser's"
        if impl.stdlib_json:  # the patch must reach every decode: one per event but these
            want = sum(1 for d in reference if d not in _NOT_DECODED)
            assert len(counted) == want, f"{where}: json.loads called {len(counted)}x, want {want}"
    return len(reference)


def measure_case(
    case: Case, impls: list[Impl], budget_s: float, min_reps: int, max_reps: int
) -> list[Result]:
    expected = verify(case, impls)
    for impl in impls:  # warm-up
        n, _ = _timed(impl, case.chunks)
        assert n == expected, (impl.name, n, expected)
    results = {
        impl.name: Result(
            case.fixture.name,
            case.chunking,
            impl.name,
            impl.kind,
            case.nbytes,
            expected,
            len(case.chunks),
        )
        for impl in impls
    }
    reps, rnd, started = min_reps, 0, time.perf_counter()
    while rnd < reps:
        shift = rnd % len(impls)
        for impl in impls[shift:] + impls[:shift]:
            n, elapsed = _timed(impl, case.chunks)
            assert n == expected, f"{impl.name}: {n} events, want {expected}"
            results[impl.name].samples.append(elapsed)
        gc.collect()
        rnd += 1
        if rnd == 1:  # calibrate the number of rounds on the first one
            per_round = time.perf_counter() - started
            reps = max(min_reps, min(max_reps, math.floor(budget_s / max(per_round, 1e-6))))
    return list(results.values())


def paired_ratio(numerator: Result, denominator: Result) -> float:
    """Median over rounds of numerator time / denominator time, both from the same round.

    Samples are aligned by round and the implementations of a round run back to back, so
    this ratio cancels most of the machine's slow drift that the raw medians keep.
    """
    pairs = zip(numerator.samples, denominator.samples, strict=True)
    return statistics.median(a / b for a, b in pairs)


def fastest_peer(results: list[Result]) -> Result | None:
    peers = [r for r in results if r.kind == "peer"]
    return min(peers, key=lambda r: r.median) if peers else None


# ---------------------------------------------------------------------------------------------
# Linearity: one event of 1 KiB vs one event of 1 MiB (one data line) in 4 KiB reads
# ---------------------------------------------------------------------------------------------

_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def one_event(size: int) -> bytes:
    """A single ``data:`` event of exactly ``size`` bytes, its payload base64-like."""
    payload = (_B64 * (size // len(_B64) + 1))[: size - len(b"data: \n\n")]
    event = b"data: " + payload + b"\n\n"
    assert len(event) == size
    return event


def linearity(
    impls: list[Impl], samples: int, budget_s: float
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """SSEParser ns/byte per size (parser construction excluded: feed + close only), and the
    same for every framer with construction included, for context. The goal compares 1 MiB with
    1 KiB; 64 KiB is there to show the per-byte cost once fixed per-call costs are amortised."""
    sizes = {"1 KiB": 1024, "64 KiB": 64 * 1024, "1 MiB": 1024 * 1024}
    chunked = {label: fixed_reads(one_event(size), 4096) for label, size in sizes.items()}

    parser_ns: dict[str, list[float]] = {label: [] for label in sizes}
    for chunks in chunked.values():  # warm-up
        run_sseparser(chunks)
    for _ in range(samples):  # the sizes interleaved, like the implementations elsewhere
        for label, chunks in chunked.items():
            size = sizes[label]
            inner = min(2048, max(1, (4 * 1024 * 1024) // size))  # 2-4 MiB of input per sample
            parsers = [SSEParser() for _ in range(inner)]
            gc.disable()
            start = time.perf_counter_ns()
            for parser in parsers:
                n = 0
                for chunk in chunks:
                    n += len(parser.feed(chunk))
                parser.close()
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            assert n == 1
            parser_ns[label].append(elapsed / inner / size)
    small = statistics.median(parser_ns["1 KiB"])
    medium = statistics.median(parser_ns["64 KiB"])
    large = statistics.median(parser_ns["1 MiB"])
    summary = {
        "ns_per_byte_1KiB": small,
        "ns_per_byte_64KiB": medium,
        "ns_per_byte_1MiB": large,
        "ratio": large / small,
        "ratio_1MiB_64KiB": large / medium,
    }

    framers = [i for i in impls if i.kind in ("otelsse", "peer")]
    rows: list[dict[str, Any]] = []
    for label, chunks in chunked.items():
        size = sizes[label]
        inner = min(256, max(1, (256 * 1024) // size))
        per: dict[str, list[float]] = {i.name: [] for i in framers}
        deadline = time.perf_counter() + budget_s / 2
        for rnd in range(samples):
            shift = rnd % len(framers)
            for impl in framers[shift:] + framers[:shift]:
                gc.disable()
                start = time.perf_counter_ns()
                for _ in range(inner):
                    n = impl.run(chunks)
                elapsed = time.perf_counter_ns() - start
                gc.enable()
                assert n == 1, (impl.name, n)
                per[impl.name].append(elapsed / inner / size)
            if rnd >= 2 and time.perf_counter() > deadline:
                break
        for name, values in per.items():
            rows.append({"size": label, "implementation": name, "ns_per_byte": min(values)})
    return summary, rows


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def ratio_text(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def print_table(results: list[Result]) -> dict[tuple[str, str, str], float | None]:
    ratios: dict[tuple[str, str, str], float | None] = {}
    header = (
        f"{'fixture':<12} {'chunking':<15} {'implementation':<32} {'MB/s':>8} "
        f"{US + '/event':>9} {'vs peer':>8} {'IQR':>5}"
    )
    print(header)
    print("-" * len(header))
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.fixture, r.chunking), []).append(r)
    for (fixture, chunking), rows in groups.items():
        best = fastest_peer(rows)
        first = rows[0]
        print(
            f"{fixture:<12} {chunking:<15} ({first.nbytes:,} B, {first.events:,} events, "
            f"{first.reads:,} reads, {len(first.samples)} rounds; fastest peer: "
            f"{best.impl if best else '-'})"
        )
        for r in rows:
            ratio = paired_ratio(best, r) if best else None
            ratios[(fixture, chunking, r.impl)] = ratio
            print(
                f"{'':<12} {'':<15} {r.impl:<32} {r.mb_s:>8.1f} {r.us_per_event:>9.2f} "
                f"{ratio_text(ratio):>8} {r.spread * 100:>4.0f}%"
            )
    return ratios


def pick(results: list[Result], fixture: str, chunking: str, impl: str) -> Result | None:
    for r in results:
        if (r.fixture, r.chunking, r.impl) == (fixture, chunking, impl):
            return r
    return None


def monitor_vs_raw(results: list[Result]) -> list[dict[str, Any]]:
    """Monitor time per event / raw consumer (httpx-sse + json.loads) time per event."""
    rows = []
    groups = dict.fromkeys((r.fixture, r.chunking) for r in results)
    for fixture, chunking in groups:
        raw = pick(results, fixture, chunking, "raw: httpx-sse + json.loads")
        raw_orjson = pick(results, fixture, chunking, "raw: httpx-sse + orjson.loads")
        if raw is None:
            continue
        for r in results:
            if (r.fixture, r.chunking) != (fixture, chunking) or r.kind != "monitor":
                continue
            rows.append(
                {
                    "fixture": fixture,
                    "chunking": chunking,
                    "monitor": r.impl,
                    "monitor_us_per_event": r.us_per_event,
                    "raw_json_us_per_event": raw.us_per_event,
                    "ratio_vs_raw_json": paired_ratio(r, raw),
                    "ratio_vs_raw_orjson": paired_ratio(r, raw_orjson) if raw_orjson else None,
                }
            )
    return rows


#: Issue 14's goal for the monitor with the ``fast`` extra, one read per event.
GOAL_PER_EVENT = 0.35


def print_monitor_vs_raw(rows: list[dict[str, Any]]) -> None:
    print()
    print(
        "StreamMonitor CPU per event / raw consumer CPU per event (goal <= 0.50x; per event 0.35x)"
    )
    print("  raw consumer = httpx-sse framing + json.loads(event.data) per event ([DONE] skipped)")
    header = (
        f"  {'fixture':<12} {'chunking':<15} {'monitor':<32} {US + '/ev':>8} "
        f"{'raw ' + US + '/ev':>11} {'/raw[json]':>10} {'/raw[orjson]':>12}"
    )
    print(header)
    for row in rows:
        orj = row["ratio_vs_raw_orjson"]
        print(
            f"  {row['fixture']:<12} {row['chunking']:<15} {row['monitor']:<32} "
            f"{row['monitor_us_per_event']:>8.2f} {row['raw_json_us_per_event']:>11.2f} "
            f"{row['ratio_vs_raw_json']:>9.2f}x {ratio_text(orj):>12}"
        )
    print()
    print(
        "One read per event: monitor / raw httpx-sse + json.loads per event "
        f"(goal <= {GOAL_PER_EVENT}x)"
    )
    for row in rows:
        if row["chunking"] == "per event" and row["monitor"] in (TYPED_MONITOR, GENERIC_MONITOR):
            print(
                f"  {row['fixture']:<12} {row['monitor']:<32} {row['ratio_vs_raw_json']:.2f}x "
                f"({row['monitor_us_per_event']:.2f} vs {row['raw_json_us_per_event']:.2f} "
                f"{US}/event)"
            )


def goals(
    results: list[Result],
    ratios: dict[tuple[str, str, str], float | None],
    mvr: list[dict[str, Any]],
    lin: dict[str, float],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    chat = "openai-chat"
    for chunking in ("4 KiB reads", "per event"):
        ratio = ratios.get((chat, chunking, "otelsse SSEParser"))
        best = fastest_peer([r for r in results if (r.fixture, r.chunking) == (chat, chunking)])
        out.append(
            {
                "goal": f"SSEParser vs fastest peer, chat body, {chunking}",
                "target": ">= 2x",
                "value": ratio,
                "text": f"{ratio_text(ratio)} (fastest peer: {best.impl if best else '-'})",
                "met": ratio is not None and ratio >= 2.0,
            }
        )
    for row in mvr:
        if row["fixture"] != chat or row["chunking"] not in ("4 KiB reads", "per event"):
            continue
        ratio = row["ratio_vs_raw_json"]
        # The goal holds with the ``fast`` extra (msgspec, typed reading); the other monitor
        # rows are only reported.
        informational = row["monitor"] != TYPED_MONITOR
        target = GOAL_PER_EVENT if row["chunking"] == "per event" else 0.5
        out.append(
            {
                "goal": f"{row['monitor']} / raw consumer CPU per event, chat, {row['chunking']}",
                "target": "none: reported only" if informational else f"<= {target:.2f}x",
                "value": ratio,
                "text": f"{ratio:.2f}x ({row['monitor_us_per_event']:.2f} vs "
                f"{row['raw_json_us_per_event']:.2f} {US}/event)",
                "met": None if informational else ratio <= target,
            }
        )
    out.append(
        {
            "goal": "SSEParser ns/byte, 1 MiB event / 1 KiB event, 4 KiB reads",
            "target": "<= 1.2",
            "value": lin["ratio"],
            "text": f"{lin['ratio']:.2f} ({lin['ns_per_byte_1MiB']:.3f} vs "
            f"{lin['ns_per_byte_1KiB']:.3f} ns/byte)",
            "met": lin["ratio"] <= 1.2,
        }
    )
    return out


def git_revision() -> str:
    """The commit measured, flagged when otelsse/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "otelsse"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + (" + uncommitted otelsse/ changes" if dirty else "")


def environment() -> dict[str, Any]:
    dists = ("orjson", "httpx", "httpx-sse", "httpx2", "openai", "anthropic", "sseclient-py")
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "otelsse": otelsse.__version__,
        "git": git_revision(),
        "otelsse_json_decoder": otelsse_json.JSON_DECODER,
        "versions": {d: _version(d) for d in dists},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="short run (noisier)")
    ap.add_argument(
        "--json",
        nargs="?",
        const=str(Path(__file__).resolve().parent / "results.json"),
        metavar="PATH",
        help="also write the results as JSON (default: benchmarks/results.json)",
    )
    args = ap.parse_args(argv)
    budget, min_reps, max_reps = (0.6, 3, 15) if args.quick else (8.0, 9, 81)
    lin_samples = 5 if args.quick else 15

    env = environment()
    print(
        f"otelsse {env['otelsse']} @ {env['git']} (JSON: {env['otelsse_json_decoder']}) | Python "
        f"{env['python']} on {env['platform']}, {env['cpu_count']} CPUs"
    )
    print("peers: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    directory = fixtures_dir()
    print(f"otelsse from {Path(otelsse.__file__).parent}; fixtures from {directory}")
    print(f"mode: {'quick' if args.quick else 'full'}")
    print(
        "figures: median of interleaved rounds (perf_counter_ns, GC off while timed); "
        "MB = 10^6 bytes;\n'vs peer' = fastest peer's time / this time (> 1 = faster), median "
        "of per-round ratios; IQR = interquartile range / median"
    )
    print()

    builders = (synth_openai_chat, synth_anthropic, synth_gemini)
    started = time.perf_counter()
    results: list[Result] = []
    skipped_all: set[str] = set()
    chat_impls: list[Impl] = []
    gc.collect()
    gc.freeze()
    for build in builders:
        full, small = build(FULL_EVENTS, directory), build(ONE_BYTE_EVENTS, directory)
        impls, skipped = make_impls(full.route)
        skipped_all.update(skipped)
        if full.name == "openai-chat":
            chat_impls = impls
        for case in make_cases(full, small):
            results += measure_case(case, impls, budget, min_reps, max_reps)
            print(
                f"  measured {case.fixture.name} / {case.chunking} "
                f"({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
    lin, lin_rows = linearity(chat_impls, lin_samples, budget * 2)

    print()
    ratios = print_table(results)
    mvr = monitor_vs_raw(results)
    print_monitor_vs_raw(mvr)

    print()
    print("Linearity: one data line in 4 KiB reads, ns per byte (min over rounds; framers incl.")
    print("construction, for context)")
    by_impl: dict[str, dict[str, float]] = {}
    for row in lin_rows:
        by_impl.setdefault(row["implementation"], {})[row["size"]] = row["ns_per_byte"]
    print(f"  {'implementation':<32} {'1 KiB':>8} {'64 KiB':>8} {'1 MiB':>8} {'1M/1K':>7}")
    for name, values in by_impl.items():
        print(
            f"  {name:<32} {values['1 KiB']:>8.3f} {values['64 KiB']:>8.3f} "
            f"{values['1 MiB']:>8.3f} {values['1 MiB'] / values['1 KiB']:>7.2f}"
        )
    print(
        f"  SSEParser feed+close only (median): 1 KiB {lin['ns_per_byte_1KiB']:.3f}, "
        f"64 KiB {lin['ns_per_byte_64KiB']:.3f}, 1 MiB {lin['ns_per_byte_1MiB']:.3f} ns/B; "
        f"1M/1K {lin['ratio']:.2f}, 1M/64K {lin['ratio_1MiB_64KiB']:.2f}"
    )
    if skipped_all:
        print()
        print("skipped: " + "; ".join(sorted(skipped_all)))

    goal_rows = goals(results, ratios, mvr, lin)
    print()
    print("Goals")
    for g in goal_rows:
        verdict = "INFO" if g["met"] is None else "MET" if g["met"] else "NOT MET"
        print(f"  [{verdict:>7}] {g['goal']}: {g['text']} (goal {g['target']})")
    elapsed = time.perf_counter() - started
    print(f"\ntotal measuring time: {elapsed:.0f} s")

    if args.json:
        payload = {
            "environment": env,
            "mode": "quick" if args.quick else "full",
            "statistic": "median of interleaved rounds; min/p25/p75 also given",
            "elapsed_s": elapsed,
            "results": [r.to_json(ratios[(r.fixture, r.chunking, r.impl)]) for r in results],
            "monitor_vs_raw_consumer": mvr,
            "linearity": {"sseparser": lin, "framers": lin_rows},
            "goals": goal_rows,
            "skipped": sorted(skipped_all),
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
