"""What the tool gate costs per stream, against reading the same stream without it.

Run from the repository root::

    python benchmarks/bench_gate.py            # about 20 s
    python benchmarks/bench_gate.py --rounds 9 # a short, noisier run

One stream: the recorded ``openai-chat-parallel-tool-calls.sse`` with N tool calls instead of
two (each call's arguments split into fragments as the fixture splits them), read in one-event
reads. Three ways, interleaved round by round, the median per-round ratio printed:

- raw: what an application does without otelsse: httpx-sse framing (as in bench_parsers), one
  ``json.loads`` per event, the argument fragments joined per tool index and parsed at the end,
  then the executor called. No verdict, no state machine, no ledger.
- read_stream: otelsse's enforcing reader (``tools=`` with the JSON Schema), then the executor.
- ToolGate: the gate with the same schema, an approve-all policy and a ``MemoryLedger`` (and,
  separately, an ``SQLiteLedger`` on a temporary file: one durable commit before and one after
  each execution).

The executors do nothing, so the figures are the reading and deciding alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import otelsse  # noqa: E402
from benchmarks.bench_parsers import httpx_sse_events  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["location"],
    "additionalProperties": False,
}
TOOL = "get_current_weather"


def stream(calls: int) -> list[bytes]:
    """A chat stream with ``calls`` parallel tool calls, one read per event."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "gpt-4o"}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

    reads = [event({"role": "assistant", "content": None})]
    for index in range(calls):
        opening = {"index": index, "id": f"call_{index:04d}", "type": "function"}
        reads.append(
            event({"tool_calls": [{**opening, "function": {"name": TOOL, "arguments": ""}}]})
        )
        for piece in ('{"lo', 'cation"', ': "Paris', f' {index}"', ', "unit": "celsius"}'):
            reads.append(
                event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    reads.append(event({}, "tool_calls"))
    reads.append(b"data: [DONE]\n\n")
    return reads


def run_raw(reads: list[bytes]) -> int:
    fragments: dict[int, list[str]] = {}
    for sse in httpx_sse_events(reads):
        if sse.data == "[DONE]":
            continue
        for choice in json.loads(sse.data)["choices"]:
            for call in choice["delta"].get("tool_calls") or ():
                fragments.setdefault(call["index"], []).append(call["function"]["arguments"])
    for parts in fragments.values():
        _execute(json.loads("".join(parts)))
    return len(fragments)


def run_reader(reads: list[bytes]) -> int:
    result = otelsse.read_stream(reads, "openai.chat_completions", tools={TOOL: SCHEMA})
    for call in result.tool_calls:
        _execute(call.arguments)
    return len(result.tool_calls)


def gate_runner(ledger: Callable[[], otelsse.Ledger]) -> Callable[[list[bytes]], int]:
    gate = otelsse.ToolGate({TOOL: SCHEMA}, ledger=ledger())

    def run(reads: list[bytes]) -> int:
        result = gate.run(
            reads, "openai.chat_completions", execute={TOOL: _execute}, run_id=uuid.uuid4().hex
        )
        assert len(result.executed) == len(result.calls), result
        return len(result.calls)

    return run


def _execute(arguments: Any) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 8, 64])
    args = parser.parse_args()
    print(f"otelsse {otelsse.__version__} from {Path(otelsse.__file__).parent}")
    with tempfile.TemporaryDirectory() as directory:
        sqlite = str(Path(directory, "ledger.db"))
        impls: dict[str, Callable[[list[bytes]], int]] = {
            "raw (httpx-sse + json)": run_raw,
            "read_stream": run_reader,
            "ToolGate, MemoryLedger": gate_runner(otelsse.MemoryLedger),
            "ToolGate, SQLiteLedger": gate_runner(lambda: otelsse.SQLiteLedger(sqlite)),
        }
        print(
            f"{'calls':>5}  {'implementation':<24} {'µs/stream':>10} {'µs/call':>9} {'vs raw':>7}"
        )
        for calls in args.calls:
            reads = stream(calls)
            for run in impls.values():
                assert run(reads) == calls  # warm-up, and every way finds every call
            times: dict[str, list[float]] = {name: [] for name in impls}
            for round_number in range(args.rounds):
                names = list(impls)
                names = names[round_number % len(names) :] + names[: round_number % len(names)]
                for name in names:
                    gc.collect()
                    gc.disable()
                    started = time.perf_counter_ns()
                    impls[name](reads)
                    times[name].append((time.perf_counter_ns() - started) / 1000)
                    gc.enable()
            raw = times["raw (httpx-sse + json)"]
            for name, measured in times.items():
                ratio = statistics.median(m / r for m, r in zip(measured, raw, strict=True))
                median = statistics.median(measured)
                print(
                    f"{calls:>5}  {name:<24} {median:>10.1f} {median / calls:>9.1f} {ratio:>6.2f}x"
                )


if __name__ == "__main__":
    main()
