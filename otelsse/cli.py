"""The ``otelsse`` command line.

otelsse inspect FILE [--route ROUTE|auto] [--json] [--events]
    Classify a captured response body (``-`` reads stdin). Prints the report, never content;
    exits 0 only when the outcome is ``complete`` (1 otherwise, 2 for usage errors).
otelsse demo [--chunk-size N]
    Run the embedded sample streams through the monitor and the enforcing reader.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from ._samples import SAMPLES
from .monitor import Outcome, StreamMonitor, StreamReport
from .reader import StreamFault, read_stream
from .routes import AUTO, route_names

__all__ = ["main"]


def _read_body(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as file:
        return file.read()


def _chunks(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)] if size > 0 else [body]


def _print_report(report: StreamReport, out: TextIO) -> None:
    rows = [(key, value) for key, value in report.to_attributes().items()]
    rows.append(("otelsse.discarded_event", report.discarded_event))
    rows.extend(
        (f"otelsse.anomaly.{name}", count) for name, count in sorted(report.anomalies.items())
    )
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        shown = ", ".join(value) if isinstance(value, tuple) else value
        out.write(f"{key:<{width}}  {shown}\n")


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    try:
        body = _read_body(args.file)
    except OSError as exc:
        sys.stderr.write(f"otelsse: cannot read {args.file}: {exc.strerror}\n")
        return 2
    monitor = StreamMonitor(args.route)
    events = []
    for chunk in _chunks(body, args.chunk_size):
        events.extend(monitor.feed(chunk))
    report = monitor.close()
    if args.json:
        document = {"attributes": report.to_attributes(), "anomalies": dict(report.anomalies)}
        if args.events:
            document["events"] = [{"event": e.event, "data_chars": len(e.data)} for e in events]
        out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        if args.events:
            out.write(f"{'#':>5}  {'event':<40} data chars\n")
            for number, event in enumerate(events):
                out.write(f"{number:>5}  {event.event[:40]:<40} {len(event.data)}\n")
            out.write("\n")
        _print_report(report, out)
    return 0 if report.outcome is Outcome.COMPLETE else 1


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    out.write(
        "otelsse demo: embedded sample streams, fed in "
        f"{args.chunk_size}-byte reads through StreamMonitor and the enforcing reader\n\n"
    )
    header = f"{'stream':<26} {'route':<24} {'outcome':<15} {'stop':<12} {'reader'}"
    out.write(header + "\n" + "-" * len(header) + "\n")
    for sample in SAMPLES:
        monitor = StreamMonitor(sample.route)
        for chunk in _chunks(sample.body, args.chunk_size):
            monitor.feed(chunk)
        report = monitor.close()
        try:
            result = read_stream(_chunks(sample.body, args.chunk_size), sample.route)
            verdict = f"accepted ({len(result.text)} chars, {len(result.tool_calls)} tool calls)"
        except StreamFault as fault:
            verdict = f"StreamFault({fault.code})"
        out.write(
            f"{sample.name:<26} {report.route:<24} {report.outcome.value:<15} "
            f"{report.stop_reason or '-':<12} {verdict}\n"
        )
    out.write("\nTry: otelsse inspect FILE.sse   (a captured body; exit 0 only when complete)\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otelsse", description="Stream-integrity checks for LLM Server-Sent Events."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="classify a captured SSE response body")
    inspect.add_argument("file", help="the body to read; - for stdin")
    inspect.add_argument(
        "--route", default=AUTO, choices=route_names(), help="provider contract (default: auto)"
    )
    inspect.add_argument("--json", action="store_true", help="print sanitized attributes as JSON")
    inspect.add_argument("--events", action="store_true", help="list event types and sizes")
    inspect.add_argument(
        "--chunk-size", type=int, default=0, help="feed the body in reads of this size (0: whole)"
    )
    demo = commands.add_parser("demo", help="run the embedded sample streams")
    demo.add_argument("--chunk-size", type=int, default=7, help="bytes per simulated read")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return _inspect(args, out) if args.command == "inspect" else _demo(args, out)
    except BrokenPipeError:
        # The reader went away (``otelsse inspect x | head``). As the Python docs advise, point
        # stdout at devnull so the flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
