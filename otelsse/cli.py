"""The ``otelsse`` command line.

otelsse inspect FILE [--route ROUTE|auto | --url URL [--host-profile HOST=PROFILE ...]]
                     [--json] [--events]
    Classify a captured response body (``-`` reads stdin). Prints the report, never content;
    exits 0 only when the outcome is ``complete`` (1 otherwise, 2 for usage errors). ``--url``
    chooses the route (and the host profile) as the instrumentation does for that request;
    ``--host-profile`` adds a host of your own, e.g.
    ``llm.internal.example=openai.chat_completions:no_done``.
otelsse demo [--streams N | --duration S] [--prometheus-port P] [--otlp-endpoint URL] ...
    Stream from a local fake provider with the real openai and anthropic SDKs, httpx, httpx2 and
    requests, instrumented by otelsse; print a summary read from the exported metrics.
otelsse demo --provider-only [--port 8400]
    Only serve the fake provider (for the examples), until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .monitor import Outcome, StreamMonitor, StreamReport
from .routes import AUTO, detect_route, register_host, route_names, unregister_host

__all__ = ["main"]


def _read_body(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as file:
        return file.read()


def _chunks(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)] if size > 0 else [body]


def _print_report(report: StreamReport, out: TextIO) -> None:
    from .telemetry import span_attributes

    rows = [(key, value) for key, value in span_attributes(report).items()]
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
    route = args.route
    if args.url is not None:
        try:
            for host, profile in args.host_profile:
                register_host(host, profile)
        except (KeyError, ValueError) as exc:
            sys.stderr.write(f"otelsse: --host-profile: {exc.args[0]}\n")
            return 2
        finally:
            route = detect_route("POST", args.url) or AUTO
            for host, _ in args.host_profile:
                unregister_host(host)
    monitor = StreamMonitor(route)
    events = []
    for chunk in _chunks(body, args.chunk_size):
        events.extend(monitor.feed(chunk))
    report = monitor.close()
    if args.json:
        from .telemetry import span_attributes

        document = {"attributes": span_attributes(report), "anomalies": dict(report.anomalies)}
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
    from .demo.provider import FakeProvider

    if args.provider_only:
        provider = FakeProvider(args.host, 8400 if args.port is None else args.port)
        with provider:
            out.write(f"fake provider at {provider.base_url} (Ctrl-C to stop)\n")
            out.flush()
            try:
                provider.wait()
            except KeyboardInterrupt:
                pass
        return 0
    try:
        from .demo.run import DemoOptions, run_demo
    except ImportError as exc:
        sys.stderr.write(f"otelsse demo needs {exc.name}: pip install 'otelsse[demo]'\n")
        return 2
    options = DemoOptions(
        streams=args.streams,
        duration=args.duration,
        concurrency=args.concurrency,
        seed=args.seed,
        speed=args.speed,
        prometheus_port=args.prometheus_port,
        prometheus_host=args.prometheus_host,
        otlp_endpoint=args.otlp_endpoint,
        otlp_protocol=args.otlp_protocol,
        summary_json=args.summary_json,
    )
    # `docker stop` and service managers send SIGTERM: end like Ctrl-C, with the summary and
    # the exporters flushed.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        run_demo(options, out)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text}")
        return value

    return parse


def _host_profile(text: str) -> tuple[str, str]:
    host, equals, profile = text.partition("=")
    if not (host and equals and profile):
        raise argparse.ArgumentTypeError(f"expected HOST=ROUTE:PROFILE, got {text!r}")
    return host, profile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otelsse", description="Stream-integrity checks for LLM Server-Sent Events."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="classify a captured SSE response body")
    inspect.add_argument("file", help="the body to read; - for stdin")
    chosen = inspect.add_mutually_exclusive_group()
    chosen.add_argument(
        "--route", default=AUTO, choices=route_names(), help="provider contract (default: auto)"
    )
    chosen.add_argument(
        "--url", help="the request's URL (POST): choose the route and host profile from it"
    )
    inspect.add_argument(
        "--host-profile",
        metavar="HOST=PROFILE",
        type=_host_profile,
        action="append",
        default=[],
        help="read HOST's streams with PROFILE (route:profile; with --url; repeatable)",
    )
    inspect.add_argument("--json", action="store_true", help="print sanitized attributes as JSON")
    inspect.add_argument("--events", action="store_true", help="list event types and sizes")
    inspect.add_argument(
        "--chunk-size", type=int, default=0, help="feed the body in reads of this size (0: whole)"
    )
    demo = commands.add_parser(
        "demo", help="stream from a local fake provider with otelsse instrumented"
    )
    amount = demo.add_mutually_exclusive_group()
    amount.add_argument("--streams", type=_positive(int), default=60, help="streams to run (60)")
    amount.add_argument(
        "--duration",
        type=_positive(float),
        help="run for this many seconds instead; inf: until Ctrl-C",
    )
    demo.add_argument("--concurrency", type=_positive(int), default=4, help="streams at once (4)")
    demo.add_argument("--seed", type=int, default=7, help="the mix of streams is seeded (7)")
    demo.add_argument(
        "--speed", type=_positive(float), default=1.0, help="divide the provider's delays by this"
    )
    demo.add_argument(
        "--prometheus-port", type=int, help="expose the metrics for scraping on this port"
    )
    demo.add_argument("--prometheus-host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    demo.add_argument("--otlp-endpoint", help="also export spans and metrics over OTLP to this URL")
    demo.add_argument("--otlp-protocol", choices=("grpc", "http/protobuf"), default="grpc")
    demo.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON")
    demo.add_argument(
        "--provider-only", action="store_true", help="only serve the fake provider (examples)"
    )
    demo.add_argument("--host", default="127.0.0.1", help="fake provider address (--provider-only)")
    demo.add_argument("--port", type=int, help="fake provider port (--provider-only; 8400)")
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
