"""The ``otelsse`` command line.

otelsse inspect FILE [--route ROUTE|auto | --url URL [--host-profile HOST=PROFILE ...]]
                     [--json] [--events] [--chunk-size N]
    Classify a captured response body (``-`` reads stdin). The first line is the verdict and
    why (``truncated: EOF after 812 events, no terminal event; last event ...``), then the
    report, never content. Exits 0 only when the outcome is ``complete``: 1 for any other, 2 for
    usage errors, 3 for a body that is not SSE at all (a JSON error, an HTML page). ``--url``
    chooses the route (and the host profile) as the instrumentation does for that request;
    ``--host-profile`` adds a host of your own, e.g.
    ``llm.internal.example=openai.chat_completions:no_done``.
otelsse demo [--streams N | --duration S] [--prometheus-port P] [--otlp-endpoint URL] ...
    Stream from a local fake provider with the real openai, anthropic, cohere and google-genai
    SDKs, boto3, httpx, httpx2 and requests, instrumented by otelsse; print a summary read from
    the exported metrics.
otelsse demo --provider-only [--host H] [--port 8400]
    Only serve the fake provider (for the examples), until Ctrl-C.

Every usage error, of every sub-command (an argument argparse refuses, a file that cannot be
read or is a damaged recording, a port the demo cannot listen on, a summary file it cannot
write), is one line on stderr and status 2, before anything starts. Every line this module
prints passes one function, ``_say``, so no character of a file or an argument that could drive
a terminal (controls, bidi overrides) reaches it unescaped; the demo's own report
(``demo/run.py``) prints its own words and the arguments checked here to be printable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TextIO
from urllib.parse import urlsplit

from ._core.decode import BOM
from ._core.events import SSEEvent
from ._exceptions import missing_extra
from ._monitor import Outcome, StreamMonitor, StreamReport
from ._version import __version__
from .routes import (
    AUTO,
    GenericRoute,
    detect_route,
    register_host,
    route_names,
    unregister_host,
)

__all__ = ["main"]


#: Exit statuses of ``otelsse inspect`` (its ``--help`` lists them).
EXIT_COMPLETE = 0
EXIT_NOT_COMPLETE = 1
EXIT_USAGE = 2
EXIT_NOT_SSE = 3

#: Streams the demo runs at once, at most: each holds two sockets of the process (its client's
#: and the fake provider's), and a process commonly may open 1024 files.
_MAX_CONCURRENCY = 256

#: ``otelsse demo --provider-only`` listens here unless ``--port`` says otherwise (the examples'
#: default base URL).
_PROVIDER_HOST, _PROVIDER_PORT = "127.0.0.1", 8400

_INSPECT_EPILOG = f"""\
The first line is the verdict and its reason, e.g.
  truncated: EOF after 812 events, no terminal event; last event content_block_delta
then the report's fields (never content); --json prints the same fields.
A flight recording (otelsse.recorder), of SSE or of an AWS event stream, is replayed with its
own route, limits and reads; a second line says whether the replayed outcome matches the live
one, and --events lists what the replay read (an event or a frame each).

exit status:
  {EXIT_COMPLETE}  complete
  {EXIT_NOT_COMPLETE}  any other outcome (the first line says which, and why)
  {EXIT_USAGE}  usage error, or the file cannot be read
  {EXIT_NOT_SSE}  not SSE: no data:, event:, id: or retry: line (a JSON error, an HTML page, empty)
"""


# -- the output boundary: every line the command line prints -----------------------------------


def _escaped(text: str) -> str:
    """``text`` safe for a terminal: each character that is not printable (C0 and C1 controls,
    DEL, bidi overrides and other format characters, lone surrogates, line separators) becomes
    its Python escape (``\\x1b``, ``\\u202e``), so no file or argument can move the cursor,
    retitle the window, reorder what is shown or end a line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def _say(stream: TextIO, line: str) -> None:
    """Print one line, escaped (``_escaped``): every print of the command line goes here."""
    stream.write(_escaped(line) + "\n")


def _fail(line: str) -> int:
    """A usage error: ``line`` on stderr; its exit status."""
    _say(sys.stderr, line)
    return EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (its usage lines left to ``--help``)."""

    #: The subcommands' parsers by name (the top parser's only).
    commands: Mapping[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        _fail(f"{self.prog}: error: {message} (see --help)")
        self.exit(EXIT_USAGE)


def _read_body(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as file:
        return file.read()


def _chunks(body: bytes, size: int | None) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)] if size else [body]


# -- the verdict ------------------------------------------------------------------------------


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _pending(report: StreamReport) -> str:
    """What the end of the stream left unfinished, if anything."""
    left = []
    if report.pending_line_chars:
        left.append(f"a partial line of {report.pending_line_chars} chars")
    if report.discarded_event:
        left.append(f"an event of {report.pending_event_chars} chars never ended by a blank line")
    return " and ".join(left)


def _end(report: StreamReport) -> str:
    """How a stream with a proper end ended: its terminal event, or the application closing
    it after the answer finished (the terminal event unread)."""
    if report.terminal_seen:
        return "terminal event"
    return "the application closed the stream once the answer had ended"


def _cut(report: StreamReport, last_event: str | None) -> str:
    """How the stream ended before its terminal (truncated, cancelled, timeout)."""
    how = {
        None: "EOF",
        "transport": "connection lost",
        "timeout": "the client's read deadline fired",
        "cancelled": "the application stopped reading",
    }[report.error]
    reason = f"{how} after {_plural(report.event_count, 'event')}"
    reason += ", terminal event seen" if report.terminal_seen else ", no terminal event"
    pending = _pending(report)
    if pending:
        reason += f", with {pending} pending"
    if last_event is not None:
        reason += f"; last event {last_event}"
    return reason


def _stop(report: StreamReport) -> str:
    return f"stop reason {report.stop_reason}" if report.stop_reason else "no stop reason"


def _payload(report: StreamReport, last_event: str | None) -> str:
    tools = []
    if report.tool_call_invalid_count:
        count = _plural(report.tool_call_invalid_count, "tool call")
        tools.append(f"{count} closed with arguments that are not exactly one JSON value")
    if report.open_accumulator_count:
        tools.append(f"{_plural(report.open_accumulator_count, 'tool call')} still open")
    if tools and report.terminal_seen:
        return f"{' and '.join(tools)} at the end of the answer; {_stop(report)}"
    return f"an event's data is not valid JSON or not the shape {report.route} sends"


def _anomalies(report: StreamReport) -> str:
    names = ", ".join(f"{name} {count}" for name, count in sorted(report.anomalies.items()))
    return f" ({names})" if names else ""


#: Why a report has its outcome, worded from the report's own fields (``monitor._classify``
#: decides; this only explains). Every member of ``Outcome`` has a line: tests/test_cli.py
#: iterates the enum, so an outcome added without one fails there, not in a user's terminal.
_REASONS: dict[Outcome, Callable[[StreamReport, str | None], str]] = {
    Outcome.COMPLETE: lambda r, _: (
        f"{_end(r)} after {_plural(r.event_count, 'event')}, {_stop(r)}, nothing pending"
    ),
    Outcome.INCOMPLETE: lambda r, _: (
        f"{_end(r)} after {_plural(r.event_count, 'event')}, but {_stop(r)} is not a success:"
        " the answer stopped early"
    ),
    Outcome.TRUNCATED: _cut,
    Outcome.CANCELLED: _cut,
    Outcome.TIMEOUT: _cut,
    Outcome.PROVIDER_ERROR: lambda r, _: (
        f"the provider reported an error in the stream after {_plural(r.event_count, 'event')}"
        f" (code {r.provider_error_code or 'not given'})"
    ),
    Outcome.PROTOCOL_ERROR: lambda r, _: (
        f"the response or its event order broke the {r.route} contract{_anomalies(r)}"
    ),
    Outcome.DECODE_ERROR: lambda r, _: (
        f"{_plural(r.decode_error_count, 'invalid UTF-8 sequence')} in the body"
        " (replaced by U+FFFD; the events kept coming)"
    ),
    Outcome.PAYLOAD_ERROR: _payload,
    Outcome.BUFFER_LIMIT: lambda r, _: (
        f"the {r.buffer_limit_stage} ceiling was breached after {_plural(r.event_count, 'event')};"
        " nothing after it was judged"
    ),
    Outcome.TERMINAL_MISSING: lambda r, _: (
        f"clean EOF after {_plural(r.event_count, 'event')}, every part finished ({_stop(r)}),"
        f" nothing pending, but no terminal event: the {r.route} end marker is missing"
    ),
    Outcome.EOF_UNVERIFIED: lambda r, _: (
        f"clean EOF after {_plural(r.event_count, 'event')}, nothing pending, but the"
        f" {r.route} route has no terminal event to prove the stream whole"
    ),
    Outcome.INTERNAL_ERROR: lambda r, _: (
        "otelsse itself failed on this stream; that says nothing about the provider"
    ),
    Outcome.RATE_LIMITED: lambda r, _: (
        "the provider refused the request with HTTP 429 (rate limited): no stream"
    ),
    Outcome.HTTP_ERROR: lambda r, _: (
        "the provider answered with an error HTTP status instead of a stream"
    ),
}


def verdict(report: StreamReport, last_event: str | None = None) -> str:
    """The one-line verdict: the outcome, then why, from the report's fields.

    ``last_event``: the type of the last event read, where the caller kept it.
    """
    return f"{report.outcome.value}: {_REASONS[report.outcome](report, last_event)}"


def _not_sse(body: bytes) -> str | None:
    """Why ``body`` is not an event stream; None when it has an SSE field line.

    An event stream has a ``data``, ``event``, ``id`` or ``retry`` line, or starts with a
    comment (a stream cut after its keep-alives). A comment later on is no evidence: an HTML
    page's style sheet has lines like ``:root {``.
    """
    lines = body.removeprefix(BOM).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if _FIELD_LINE.search(lines) or lines.lstrip(b"\n").startswith(b":"):
        return None
    why = "this is not SSE (no data:, event:, id: or retry: line)"
    start = lines.lstrip()[:1]
    if not start:
        return f"{why}; the body is {'empty' if not body else 'only white space'}"
    if start in (b"{", b"["):
        return (
            f"{why}; the body looks like JSON (it starts with {start.decode()!r}): an API error,"
            " or a stream without SSE framing (NDJSON, Gemini without ?alt=sse)"
        )
    if start == b"<":
        return f"{why}; the body looks like HTML (it starts with '<'): a proxy's error page?"
    return f"{why}; the body ({len(body)} bytes) is neither JSON nor HTML"


_FIELD_LINE = re.compile(rb"^(?:data|event|id|retry)(?::|$)", re.MULTILINE)


# -- otelsse inspect --------------------------------------------------------------------------


def _fields(report: StreamReport, last_event: str | None) -> dict[str, Any]:
    """Everything ``inspect`` prints about a report, in order; text and JSON modes alike."""
    from ._telemetry import span_attributes

    outcome, _, reason = verdict(report, last_event).partition(": ")
    fields: dict[str, Any] = {"verdict": outcome, "reason": reason}
    fields.update(span_attributes(report))
    fields["otelsse.discarded_event"] = report.discarded_event
    fields.update(
        (f"otelsse.anomaly.{name}", count) for name, count in sorted(report.anomalies.items())
    )
    return fields


def _write(
    fields: dict[str, Any], events: list[SSEEvent] | None, as_json: bool, out: TextIO
) -> None:
    """Print ``fields`` (and the events' types and sizes, never their data)."""
    lines: list[str] = []
    if as_json:
        document = dict(fields)
        if events is not None:
            document["events"] = [{"event": e.event, "data_chars": len(e.data)} for e in events]
        # ASCII JSON: its escapes keep every value exact, and ``_say`` has nothing left to do.
        lines = json.dumps(document, indent=2, ensure_ascii=True).split("\n")
    else:
        rows = dict(fields)
        lines.append(f"{rows.pop('verdict')}: {rows.pop('reason')}")
        for head in ("hint", "replay"):
            if head in rows:
                lines.append(f"{head}: {rows.pop(head)}")
        if events is not None:
            lines += ["", f"{'#':>5}  {'event':<40} data chars"]
            lines += (
                f"{number:>5}  {event.event[:40]:<40} {len(event.data)}"
                for number, event in enumerate(events)
            )
        if rows:
            lines.append("")
            width = max(map(len, rows))
            for key, value in rows.items():
                shown = ", ".join(value) if isinstance(value, tuple) else value
                lines.append(f"{key:<{width}}  {shown}")
    for line in lines:
        _say(out, line)


def _route(args: argparse.Namespace) -> str | None:
    """The route to judge with; None (after a message) for a bad ``--host-profile``."""
    if args.url is None:
        return str(args.route)
    try:
        for host, profile in args.host_profile:
            register_host(host, profile)
        return detect_route("POST", args.url) or AUTO
    except (KeyError, ValueError) as exc:
        _fail(f"otelsse: --host-profile: {exc.args[0]}")
        return None
    finally:
        for host, _ in args.host_profile:
            unregister_host(host)


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    try:
        body = _read_body(args.file)
    except OSError as exc:
        return _fail(f"otelsse: cannot read {args.file}: {exc.strerror}")
    from .recorder import is_recording

    if is_recording(body):
        return _replay(args.file, body, args, out)
    route = _route(args)
    if route is None:
        return EXIT_USAGE
    not_sse = _not_sse(body)
    if not_sse is not None:
        _write({"verdict": "not_sse", "reason": not_sse}, None, args.json, out)
        return EXIT_NOT_SSE
    monitor = StreamMonitor(route)
    events: list[SSEEvent] = []
    for chunk in _chunks(body, args.chunk_size):
        events.extend(monitor.feed(chunk))
    report = monitor.close()
    last_event = events[-1].event if events else None
    fields = _fields(report, last_event)
    if args.url is None and route != AUTO and report.outcome is not Outcome.COMPLETE:
        hint = _route_hint(body, route, report)
        if hint is not None:  # right after the verdict, which it qualifies
            fields = {
                "verdict": fields["verdict"],
                "reason": fields["reason"],
                "hint": hint,
            } | fields
    _write(fields, events if args.events else None, args.json, out)
    return EXIT_COMPLETE if report.outcome is Outcome.COMPLETE else EXIT_NOT_COMPLETE


def _route_hint(body: bytes, route: str, report: StreamReport) -> str | None:
    """For a body the named route does not find complete: the contract sniffing recognises in
    it instead, when that reads it otherwise (a body of another provider mostly reads as a
    payload error or a cut under the wrong route, which says nothing of the route)."""
    sniffing = StreamMonitor(AUTO)
    sniffing.feed(body)
    sniffed = sniffing.close()
    if sniffed.route in (report.route, GenericRoute.name) or sniffed.outcome is report.outcome:
        return None
    return (
        f"read as {sniffed.route} (--route auto) it is {sniffed.outcome.value}:"
        f" is --route {route} right for it?"
    )


def _replay(path: str, body: bytes, args: argparse.Namespace, out: TextIO) -> int:
    """``inspect`` on a flight recording: judge its skeleton again, as the live monitor did, and
    say whether the outcome is the live one; ``--events``: the envelopes the replay read (an
    SSE event or an AWS event-stream frame each), by type and size."""
    from .recorder import load_recording

    try:
        if path == "-":
            # The recorder loads files: stdin's bytes get one for the moment.
            with tempfile.TemporaryDirectory() as directory:
                copy = os.path.join(directory, "recording.json")
                with open(copy, "wb") as file:
                    file.write(body)
                recording = load_recording(copy)
        else:
            recording = load_recording(path)
    except (OSError, ValueError) as exc:
        return _fail(f"otelsse: cannot replay {path}: {exc}")
    if recording.route not in route_names():
        return _fail(
            f"otelsse: cannot replay {path}: its route {recording.route!r} is not registered here"
            " (a route of your own must be registered in the process that replays)"
        )
    events: list[SSEEvent] = []
    report = recording.replay(events=events)
    fields = _fields(report, None)
    live = recording.outcome
    same = "matches" if report.outcome.value == live else "differs from"
    head = {key: fields.pop(key) for key in ("verdict", "reason")}
    head["replay"] = f"{same} the live outcome ({live}) of recording {recording.id}"
    head["recording.id"] = recording.id
    head["recording.live_outcome"] = live
    _write(head | fields, events if args.events else None, args.json, out)
    return EXIT_COMPLETE if report.outcome is Outcome.COMPLETE else EXIT_NOT_COMPLETE


def _cannot_listen(flag: str, host: str, port: int, error: OSError) -> str:
    # The errno's own words: asyncio's bind error repeats the address in its strerror.
    why = os.strerror(error.errno) if error.errno else str(error)
    return f"{flag} {port}: cannot listen on {host}:{port} ({why})"


def _demo_error(problem: str) -> int:
    return _fail(f"otelsse demo: error: {problem}")


def _port_problem(flag: str, host: str, port: int) -> str | None:
    """Why a server of the demo could not listen on ``host:port``; None if it can (it binds a
    socket there and lets it go, before anything starts)."""
    if not 0 <= port <= 65535:
        return f"{flag} {port}: not a port number (0 to 65535)"
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            with socket.socket(family, kind, proto) as probe:
                # As the servers do, so a port whose last connection lingers in TIME_WAIT is free.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
    except OSError as exc:
        return _cannot_listen(flag, host, port, exc)
    except UnicodeError as exc:  # the IDNA encoding of the name: a label empty or too long
        return f"{flag} {port}: cannot listen on {host}:{port} (not a host name: {exc})"
    return None


def _file_problem(path: str) -> str | None:
    """Why the summary could not be written to ``path`` at the end; None if it can."""
    if os.path.isdir(path):
        return f"--summary-json {path}: is a directory"
    directory = os.path.dirname(os.path.abspath(path))
    try:
        # The summary is written beside the file first and renamed into place.
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return f"--summary-json {path}: cannot write in {directory} ({exc.strerror})"
    return None


def _provider_address(args: argparse.Namespace) -> tuple[str, int]:
    """Where ``--provider-only`` serves: ``--host`` and ``--port``, or their defaults."""
    return args.host or _PROVIDER_HOST, _PROVIDER_PORT if args.port is None else args.port


def _demo_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the demo's arguments beyond their syntax, checked before it starts."""
    if args.provider_only:
        return _port_problem("--port", *_provider_address(args))
    if args.host is not None or args.port is not None:
        return (
            "--host and --port only apply with --provider-only: the demo's own fake provider"
            " listens on a free port of 127.0.0.1, for the demo's clients only"
        )
    if args.prometheus_port is not None:
        problem = _port_problem("--prometheus-port", args.prometheus_host, args.prometheus_port)
        if problem:
            return problem
    return _file_problem(args.summary_json) if args.summary_json else None


def _serve_provider(host: str, port: int, out: TextIO) -> int:
    """``otelsse demo --provider-only``: serve the fake provider until Ctrl-C or SIGTERM."""
    from ._demo.provider import FakeProvider

    previous = signal.getsignal(signal.SIGTERM)
    try:
        # `docker stop` and service managers send SIGTERM: it stops the server as Ctrl-C does.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.ExitStack() as stack:
            try:
                provider = stack.enter_context(FakeProvider(host, port))
            except OSError as exc:  # taken since the check, or refused by the system
                return _demo_error(_cannot_listen("--port", host, port, exc))
            _say(out, f"fake provider at {provider.base_url} (Ctrl-C to stop)")
            out.flush()
            provider.wait()
    except KeyboardInterrupt:  # whenever it lands, even before the wait: the server has stopped
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    problem = _demo_problem(args)
    if problem:
        return _demo_error(problem)
    if args.provider_only:
        return _serve_provider(*_provider_address(args), out)
    try:
        from ._demo.run import DemoOptions, ListenError, Stop, missing_library, run_demo
    except ImportError as exc:
        return _fail(missing_extra("otelsse demo", exc.name, "demo"))
    missing = missing_library()
    if missing is not None:
        return _fail(missing_extra("otelsse demo", missing, "demo"))
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
    # Ctrl-C, and SIGTERM from `docker stop` and service managers, ask the demo to stop (Stop
    # says how). Kept until the process ends: a signal while it exits then changes nothing,
    # where Python's own handler would raise KeyboardInterrupt there.
    stop = Stop()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, stop.request)
    try:
        run_demo(options, out, stop=stop)
    except ListenError as exc:  # the metrics port, taken since the check
        host, port, error = exc.args
        return _demo_error(_cannot_listen("--prometheus-port", host, port, error))
    return 0


def _speed(text: str) -> float:
    value = _positive(float)(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be >= 1: {text} (the provider's slowest answers would outlast the clients' "
            "read timeout and end as timeouts the demo did not deal)"
        )
    return float(value)


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text}")
        return value

    return parse


def _concurrency(text: str) -> int:
    value = int(_positive(int)(text))
    if value > _MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"at most {_MAX_CONCURRENCY}: {text} (each stream at once holds two of the process's"
            " open files)"
        )
    return value


def _text(text: str) -> str:
    """A host, URL or file name the demo prints back (``demo/run.py``): all printable."""
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"has a character that is not printable: {text}")
    return text


def _url(text: str) -> str:
    try:
        _ = urlsplit(_text(text)).port  # raises for an unclosed "[" of an IPv6 host, a bad port
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a URL: {text} ({exc})") from None
    return text


def _host_profile(text: str) -> tuple[str, str]:
    host, equals, profile = text.partition("=")
    if not (host and equals and profile):
        raise argparse.ArgumentTypeError(f"expected HOST=ROUTE:PROFILE, got {text!r}")
    return host, profile


_PROXY_EPILOG = """\
example:
  otelsse proxy --upstream openai=https://api.openai.com \\
                --upstream anthropic=https://api.anthropic.com
  # then point the client at http://127.0.0.1:8787/openai/v1 (or .../anthropic)
"""


def _parser() -> _Parser:
    parser = _Parser(
        prog="otelsse", description="Stream-integrity checks for LLM Server-Sent Events."
    )
    parser.add_argument("--version", action="version", version=f"otelsse {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser(
        "inspect",
        help="classify a captured SSE response body",
        description="Classify a captured SSE response body: its outcome, why, and its report.",
        epilog=_INSPECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("file", help="the body to read; - for stdin")
    chosen = inspect.add_mutually_exclusive_group()
    chosen.add_argument(
        "--route", default=AUTO, choices=route_names(), help="provider contract (default: auto)"
    )
    chosen.add_argument(
        "--url",
        type=_url,
        help="the request's URL (POST): choose the route and host profile from it",
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
        "--chunk-size",
        type=_positive(int),
        help="feed the body in reads of this many bytes (default: one read)",
    )
    demo = commands.add_parser(
        "demo", help="stream from a local fake provider with otelsse instrumented"
    )
    amount = demo.add_mutually_exclusive_group()
    amount.add_argument("--streams", type=_positive(int), default=60, help="streams to run (60)")
    amount.add_argument(
        "--duration",
        type=_positive(float),
        help="run for this many seconds instead; inf: until Ctrl-C or SIGTERM",
    )
    demo.add_argument(
        "--concurrency",
        type=_concurrency,
        default=4,
        help=f"streams at once (4; at most {_MAX_CONCURRENCY})",
    )
    demo.add_argument("--seed", type=int, default=7, help="the mix of streams is seeded (7)")
    demo.add_argument(
        "--speed",
        type=_speed,
        default=1.0,
        help="divide the provider's delays by this (>= 1: slower answers would outlast the "
        "clients' read timeout and be counted as timeouts)",
    )
    demo.add_argument(
        "--prometheus-port", type=int, help="expose the metrics for scraping on this port (0: any)"
    )
    demo.add_argument(
        "--prometheus-host", type=_text, default="127.0.0.1", help="address to bind (127.0.0.1)"
    )
    demo.add_argument(
        "--otlp-endpoint", type=_url, help="also export spans and metrics over OTLP to this URL"
    )
    demo.add_argument("--otlp-protocol", choices=("grpc", "http/protobuf"), default="grpc")
    demo.add_argument(
        "--summary-json", metavar="FILE", type=_text, help="also write the summary as JSON"
    )
    demo.add_argument(
        "--provider-only", action="store_true", help="only serve the fake provider (examples)"
    )
    demo.add_argument(
        "--host",
        type=_text,
        help=f"the fake provider's address (--provider-only only; {_PROVIDER_HOST})",
    )
    demo.add_argument(
        "--port",
        type=int,
        help=f"the fake provider's port (--provider-only only; {_PROVIDER_PORT}; 0: any free)",
    )
    proxy = commands.add_parser(
        "proxy",
        help="run the reverse proxy that observes streams for clients in any language",
        description=(
            "Forward /NAME/... to the upstream NAME and record each stream's otelsse span and "
            "metrics. Flags override the --config file. Spans and metrics go where "
            "OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER say (otlp, console, none; otlp "
            "once OTEL_EXPORTER_OTLP_ENDPOINT is set); /metrics is served with --metrics-listen."
        ),
        epilog=_PROXY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument("--config", metavar="FILE", help="a TOML file (docs/operators/proxy.md)")
    proxy.add_argument(
        "--upstream",
        metavar="NAME=URL",
        action="append",
        help="forward /NAME/... to URL (repeatable)",
    )
    proxy.add_argument(
        "--listen", metavar="HOST:PORT", help="where clients connect (127.0.0.1:8787)"
    )
    proxy.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve /metrics for Prometheus here; off: not at all (off)",
    )
    # Numbers are taken as text and checked with the file's (otelsse.proxy._config.number):
    # one rule for both, and a refusal is one line, where argparse would add its usage.
    proxy.add_argument(
        "--max-streams", metavar="N", help="requests forwarded at once; more get 503 (1024)"
    )
    proxy.add_argument(
        "--max-request-bytes", metavar="N", help="largest request body; larger: 413 (32 MiB)"
    )
    proxy.add_argument(
        "--max-header-bytes",
        metavar="N",
        help="largest request head (request line and headers); larger: 431 (64 KiB)",
    )
    proxy.add_argument(
        "--connect-timeout", metavar="SECONDS", help="seconds to connect upstream (10)"
    )
    proxy.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        help="seconds an upstream may be silent, for headers and between reads (300)",
    )
    proxy.add_argument(
        "--header-timeout",
        metavar="SECONDS",
        help="seconds a client has to send a request's head, from its first byte; then 408 (10)",
    )
    proxy.add_argument(
        "--body-timeout",
        metavar="SECONDS",
        help="seconds a client may be silent while sending a request body; then 408 (30)",
    )
    proxy.add_argument(
        "--keep-alive-timeout",
        metavar="SECONDS",
        help="seconds a connection with no request under way stays open (5)",
    )
    proxy.add_argument(
        "--reuse-port",
        action="store_true",
        default=None,
        help="share --listen with other proxy processes (SO_REUSEPORT): one process per core",
    )
    proxy.add_argument(
        "--drain-timeout",
        metavar="SECONDS",
        help="seconds streams get to finish after SIGTERM before they are cancelled (30)",
    )
    proxy.add_argument(
        "--strict",
        metavar="OUTCOMES",
        nargs="?",
        const="true",
        help="end a stream that was cut or is faulty with its route's own error event, which "
        "the client's SDK raises, never as a success. OUTCOMES, comma-separated: those to "
        "refuse (default: truncated, buffer_limit, decode_error, payload_error, protocol_error; "
        "'default,terminal_missing' adds one). An upstream's strict in --config wins (off)",
    )
    parser.commands = commands.choices
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's arguments; a usage error exits (one line on stderr, status 2)."""
    parser = _parser()
    args, stray = parser.parse_known_args(argv)
    if stray:
        # argparse leaves what a command did not take to the top parser, which would name
        # "otelsse" and not the command whose usage is wrong.
        command = parser.commands[args.command]
        if args.command == "inspect" and not any(arg.startswith("-") for arg in stray):
            command.error(f"one file at a time; also given: {' '.join(stray)}")
        command.error(f"unrecognized arguments: {' '.join(stray)}")
    return args


def _proxy(args: argparse.Namespace) -> int:
    try:
        from .proxy import ConfigError, load_config, parse_upstream, serve
    except ImportError as exc:
        return _fail(missing_extra("otelsse proxy", exc.name, "proxy"))
    # Every other flag is a setting of the same name (None: not given).
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config", "upstream")}
    try:
        upstreams = [parse_upstream(text) for text in args.upstream or ()]
        config = load_config(args.config, {**flags, "upstreams": upstreams})
        checked = [("--metrics-listen", config.metrics_listen)]
        if not config.reuse_port:  # a shared port is taken by its other processes, on purpose
            checked.append(("--listen", config.listen))
        for flag, address in checked:
            problem = address and _port_problem(flag, *address)
            if problem:
                raise ConfigError(problem)
        # serve refuses, before it listens, telemetry it cannot export with (the OTEL_*
        # variables) and a max_streams its file descriptors cannot carry; once it listens,
        # it says where, and where it forwards and exports to, in one line
        return serve(config, lambda line: _say(sys.stderr, f"otelsse proxy: {line}"))
    except ConfigError as exc:
        return _fail(f"otelsse proxy: error: {exc}")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parse(argv)
    out = out or sys.stdout
    try:
        if args.command == "proxy":
            return _proxy(args)
        return _inspect(args, out) if args.command == "inspect" else _demo(args, out)
    except BrokenPipeError:
        # The reader went away (``otelsse inspect x | head``). As the Python docs advise, point
        # stdout at devnull so the flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
