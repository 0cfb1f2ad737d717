"""How the enforcing reader ends a stream: at the route's last event, at a ceiling, at a deadline.

``read_stream`` stops reading at the route's last event (its terminal, or a fatal error) and
closes the response; ``drain=True`` reads on to EOF. A breached ceiling (``Limits``) or a refused
status closes it too, ``idle_timeout``/``deadline`` give the ``timeout`` fault, calls to tools
that were never registered and duplicate call ids are refused.

Every source is covered: httpx and httpx2 (sync and async), requests, and plain (async)
iterables of bytes. Two real peers on 127.0.0.1: ``SSEServer`` (tests/_server.py), which can
stall after a cut until it is stopped, and ``Peer`` below, which never ends its body on its own
(it holds the connection open, trickles keep-alives or sends without end) and watches for the
client closing the connection. An iterable source plays the same script as a generator that
records whether it was closed and whether it was read past the point the reader should stop at.

No test measures a duration: each wait has a generous outer bound (``OUTER``) only so that a
reader that hangs fails instead of blocking the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import json
import select
import socket
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from otelsse import Limits, StreamReport
from otelsse._reader import (
    AsyncStreamReader,
    StreamFault,
    StreamReader,
    StreamResult,
    aread_stream,
    read_stream,
)
from tests._clients import CLIENTS, SYNC_CLIENTS, Client, astreaming, streaming
from tests._fixtures import read_fixture
from tests._helpers import (
    ANTHROPIC,
    CHAT,
    GEMINI,
    RESPONSES,
    ROUTE_PATHS,
    ROUTES,
    event_ends,
    joined,
    waited,
)
from tests._server import Reply, SSEServer

#: A recorded body per route, each ending exactly at the route's terminal event: ``[DONE]``,
#: ``response.completed``, ``message_stop``, and Gemini's chunk with the last finishReason.
TERMINATED = {
    CHAT: "real/openai-chat-parallel-tool-calls.sse",
    RESPONSES: "real/openai-responses-function-call.sse",
    ANTHROPIC: "real/anthropic-text-and-two-tool-use.sse",
    GEMINI: "real/gemini-function-call.sse",
}
#: The same, small ones: swept at every two-piece split.
SMALL = {
    CHAT: "real/openai-chat-text.sse",
    RESPONSES: "real/openai-responses-function-call.sse",
    ANTHROPIC: "real/anthropic-text.sse",
    GEMINI: "real/gemini-function-call.sse",
}
#: Bodies that end at a fatal error (no terminal), or at the [DONE] after a chat error object.
FATAL = {
    CHAT: "synthetic/openai-chat-error-object-then-done.sse",
    RESPONSES: "synthetic/openai-responses-error-event.sse",
    ANTHROPIC: "synthetic/anthropic-error-overloaded-midstream.sse",
    GEMINI: "synthetic/gemini-midstream-error.sse",
}

#: Every source the reader takes: the six HTTP clients, and plain (async) iterables of bytes.
HTTP_SOURCES = {str(client): client for client in CLIENTS}
SOURCES = [*HTTP_SOURCES, "iterable", "async-iterable"]
#: The same, for a test that waits on a peer's stall or trickle: in real time over HTTP (the
#: client's own read timeout at work, end to end), in no time from a generator on its clock.
TIMED_SOURCES = [
    pytest.param(source, marks=pytest.mark.e2e) if source in HTTP_SOURCES else source
    for source in SOURCES
]
#: The async clients that run under trio (aiohttp runs on asyncio only).
ASYNC_HTTP = [str(client) for client in CLIENTS if client.runs_under_trio]

#: Outer bound on any wait: a reader that hangs fails the test instead of blocking the run.
OUTER = 20.0
#: How long a peer goes on before it gives up (and the test fails): well past ``OUTER``.
PATIENCE = 25.0
#: The client's own read timeout where the reader's ``idle_timeout`` is under test: longer than
#: any bound here, so that only the reader's own budget can end the read.
LONG_READ_TIMEOUT = 60.0
#: The reader's idle timeout where a peer goes silent on purpose.
IDLE = 0.3
#: How long a generator peer's "silent" read takes before it returns (on its ``Clock``): longer
#: than ``IDLE``, so the late read is judged a timeout.
LATE = 0.5

KEEP_ALIVE = b": keep-alive\n\n"


def body_of(name: str) -> bytes:
    return read_fixture(name)


def crlf(body: bytes, piece: bytes) -> bytes:
    """``piece`` with the body's line ends (Gemini's recordings use CRLF)."""
    return piece.replace(b"\n", b"\r\n") if b"\r\n" in body else piece


def first_event(body: bytes) -> bytes:
    """The body's first event, blank line included: a non-terminal event of the route."""
    return body[: event_ends(body)[0]]


def count_events(body: bytes) -> int:
    """Events a blank line dispatches (blocks with a ``data`` field), read without otelsse."""
    text = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").decode("utf-8", "replace")
    blocks = text.split("\n\n")[:-1]  # what follows the last blank line is never dispatched
    return sum(
        1
        for block in blocks
        if any(line == "data" or line.startswith("data:") for line in block.split("\n"))
    )


def pieces_of(body: bytes, size: int = 300) -> tuple[bytes, ...]:
    return tuple(body[i : i + size] for i in range(0, len(body), size))


def at_events(body: bytes, parts: int) -> tuple[bytes, ...]:
    """``body`` in about ``parts`` pieces, each ending at an event boundary."""
    ends = event_ends(body)
    step = max(1, len(ends) // parts)
    cuts = [0, *ends[step - 1 :: step]]
    if cuts[-1] != len(body):
        cuts.append(len(body))
    return tuple(body[a:b] for a, b in itertools.pairwise(cuts))


def stable(report: StreamReport) -> StreamReport:
    """The report without what depends on time or on how the bytes were read."""
    return dataclasses.replace(
        report,
        chunk_count=0,
        bytes_received=0,
        time_to_first_byte=None,
        time_to_first_event=None,
        time_to_first_output=None,
        time_per_output_chunk=None,
        max_inter_event_gap=None,
        duration=None,
    )


def calls_of(result: StreamResult) -> list[tuple[str | None, str | None, Any]]:
    return [(call.id, call.name, call.arguments) for call in result.tool_calls]


def accepted(result: StreamResult) -> tuple[Any, ...]:
    """Everything an accepted stream gives the application, the stable report included."""
    return (
        dict(result.texts),
        dict(result.reasoning),
        calls_of(result),
        [(call.id, call.name) for call in result.server_tool_calls],
        result.stop_reason,
        stable(result.report),
    )


def verdict(read: Callable[[], StreamResult]) -> tuple[Any, ...]:
    """What a read ends in: the accepted result, or the fault's code and stable report."""
    try:
        result = read()
    except StreamFault as fault:
        return ("fault", fault.code, fault.report and stable(fault.report))
    return ("accepted", *accepted(result))


def reference(name: str, route: str) -> StreamResult:
    """The fixture read whole, in one piece, nothing after it."""
    return read_stream([body_of(name)], route)


# --------------------------------------------------------------------------------------------
# Peers: a real one that never ends its body, and its twin as a (async) generator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """What a peer sends: ``pieces``, one write each, ``gap`` seconds apart; then ``then`` again
    and again (``gap`` apart) without end, or, when ``then`` is None, nothing: it goes silent
    with the connection held open. ``status`` is the HTTP status of the response; ``ends``
    makes it a well-behaved peer that ends the body after the pieces."""

    pieces: tuple[bytes, ...]
    then: bytes | None = None
    gap: float = 0.0
    status: int = 200
    #: End the body cleanly after the pieces instead (EOF; ``then`` unused).
    ends: bool = False


@dataclass
class Witness:
    """What the peer saw: the client closed the connection (the iterator was closed), writes
    after the scripted pieces, and whether the peer gave up waiting for the client."""

    closed: threading.Event = field(default_factory=threading.Event)
    gave_up: threading.Event = field(default_factory=threading.Event)
    after_pieces: int = 0
    #: For an iterable: it was closed when the read returned, the reader still holding it (a
    #: generator dropped later would be closed by the garbage collector instead).
    closed_on_return: bool | None = None


class Peer:
    """A raw-socket HTTP/1.1 server on 127.0.0.1 for one request: it answers with a chunked
    body played from a ``Script`` and never ends it on its own. ``witness.closed`` is set when
    the client closes the connection (end of file or reset seen by the server); after
    ``PATIENCE`` seconds it gives up (``witness.gave_up``) and closes the connection itself.
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self.witness = Witness()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._connection: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="endless-peer", daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> Peer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        connection = self._connection
        if connection is not None:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(OUTER)
        self._listener.close()
        assert not self._thread.is_alive(), "the peer did not stop"

    def _serve(self) -> None:
        deadline = time.monotonic() + PATIENCE
        while not self._stop.is_set():
            if select.select([self._listener], [], [], 0.05)[0]:
                break
            if time.monotonic() > deadline:
                return
        else:
            return
        sock, _ = self._listener.accept()
        self._connection = sock
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._play(sock, deadline)
            except OSError:
                # A write failed: the client reset or closed the connection (or stop() shut it).
                if not self._stop.is_set():
                    self.witness.closed.set()

    def _play(self, sock: socket.socket, deadline: float) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(65536)
            if not data:
                return
            head += data
        header, _, rest = head.partition(b"\r\n\r\n")
        length = 0
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            data = sock.recv(65536)
            if not data:
                return
            rest += data
        script = self.script
        sock.sendall(
            b"HTTP/1.1 %d Whatever\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % script.status
        )
        for index, piece in enumerate(script.pieces):
            if index and self._closed_within(sock, script.gap):
                return
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        if script.ends:
            sock.sendall(b"0\r\n\r\n")
            script = dataclasses.replace(script, then=None)
        while not self._closed_within(sock, script.gap if script.then is not None else 0.05):
            if time.monotonic() > deadline:
                self.witness.gave_up.set()
                return
            if script.then is not None:
                sock.sendall(b"%x\r\n%s\r\n" % (len(script.then), script.then))
                self.witness.after_pieces += 1

    def _closed_within(self, sock: socket.socket, seconds: float) -> bool:
        """Wait up to ``seconds`` for the client to close the connection; True when it did (or
        the peer is stopping)."""
        if self._stop.is_set():
            return True
        if not select.select([sock], [], [], seconds)[0]:
            return False
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data and not self._stop.is_set():
            self.witness.closed.set()
        return not data or self._stop.is_set()


class Clock:
    """The reader's clock for a generator peer: time passes only when the peer says so, so a
    stall or a trickle takes no real time at all."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


def script_iter(script: Script, witness: Witness, clock: Clock) -> Iterator[bytes]:
    """``script`` as a generator on ``clock``: a silent read takes ``LATE`` seconds and returns
    nothing."""
    try:
        for index, piece in enumerate(script.pieces):
            if index:
                clock.wait(script.gap)
            yield piece
        if script.ends:
            return
        deadline = clock() + PATIENCE
        while clock() < deadline:
            witness.after_pieces += 1
            if script.then is None:
                clock.wait(LATE)
                yield b""
            else:
                clock.wait(script.gap)
                yield script.then
        witness.gave_up.set()
    finally:
        witness.closed.set()


async def script_aiter(script: Script, witness: Witness, clock: Clock) -> AsyncIterator[bytes]:
    """The async twin of ``script_iter``: a silent read takes ``LATE`` seconds and returns
    nothing (a source that waits for real is cancelled by the reader's own budget: the HTTP
    peers' tests show it)."""
    pieces = script_iter(script, witness, clock)
    try:
        for piece in pieces:
            await asyncio.sleep(0)  # a read gives the event loop its turn, as a socket's does
            yield piece
    finally:
        pieces.close()


@dataclass
class Ran:
    """How one read ended, and what the peer saw."""

    result: StreamResult | None
    fault: StreamFault | None
    witness: Witness
    #: The client's response reports itself closed once the reader returned (HTTP only).
    response_closed: bool | None = None

    @property
    def closed(self) -> bool:
        """The reader closed the connection (the peer saw it) or the iterator."""
        if self.witness.closed_on_return is not None:
            return self.witness.closed_on_return
        return self.witness.closed.is_set()

    @property
    def code(self) -> str | None:
        return None if self.fault is None else self.fault.code

    @property
    def report(self) -> StreamReport:
        report = self.result.report if self.result is not None else self.fault.report  # type: ignore[union-attr]
        assert report is not None
        return report

    def accepted(self) -> StreamResult:
        assert self.fault is None, f"refused: {self.fault}"
        assert self.result is not None
        return self.result


def response_closed(client: Client, response: Any) -> bool:
    return client.closed(response)


def read_http(
    client: Client,
    url: str,
    witness: Witness,
    *,
    read_timeout: float = LONG_READ_TIMEOUT,
    wait_closed: bool = False,
    **options: Any,
) -> Ran:
    """Read ``url`` with ``client`` through the enforcing reader. With ``wait_closed``, the
    peer must see the connection closed while the client's session is still open (so that it
    is the reader that closed it, not the session's exit)."""

    def outcome(read: Callable[[], StreamResult]) -> tuple[StreamResult | None, StreamFault | None]:
        try:
            return read(), None
        except StreamFault as fault:
            return None, fault

    if client.is_async:

        async def main() -> Ran:
            async with astreaming(client, url, read_timeout=read_timeout) as response:
                try:
                    ran = Ran(await aread_stream(response, **options), None, witness)
                except StreamFault as fault:
                    ran = Ran(None, fault, witness)
                ran.response_closed = response_closed(client, response)
                if wait_closed:
                    # The event loop must run for the transport to really close its socket.
                    await asyncio.to_thread(witness.closed.wait, OUTER)
                return ran

        return asyncio.run(main())
    with streaming(client, url, read_timeout=read_timeout) as response:
        result, fault = outcome(lambda: read_stream(response, **options))
        ran = Ran(result, fault, witness, response_closed(client, response))
        if wait_closed:
            waited(witness.closed.wait, OUTER)
        return ran


def run(source: str, script: Script, route: str, **options: Any) -> Ran:
    """Play ``script`` to the reader through ``source``: an HTTP client against a ``Peer``, or
    a (async) generator; the connection (iterator) must be closed by the time it returns."""
    if source in HTTP_SOURCES:
        with Peer(script) as peer:
            return read_http(
                HTTP_SOURCES[source],
                peer.url(ROUTE_PATHS[route]),
                peer.witness,
                wait_closed=True,
                **options,
            )
    witness = Witness()
    clock = Clock()
    if source == "iterable":
        reader = StreamReader(script_iter(script, witness, clock), route, clock=clock, **options)
        ran = outcome_of(reader.result, witness)
    else:

        async def main() -> Ran:
            chunks = script_aiter(script, witness, clock)
            reader = AsyncStreamReader(chunks, route, clock=clock, **options)
            try:
                return Ran(await reader.result(), None, witness)
            except StreamFault as fault:
                return Ran(None, fault, witness)
            finally:
                # While the reader still holds the generator: the reader closed it, not the GC.
                witness.closed_on_return = witness.closed.is_set()

        ran = asyncio.run(main())
    return ran


def outcome_of(read: Callable[[], StreamResult], witness: Witness) -> Ran:
    """``read()`` as a ``Ran``; whether the iterator was closed is noted as it returns (its
    caller still holds the reader, and with it the iterator: only the reader can close it)."""
    try:
        return Ran(read(), None, witness)
    except StreamFault as fault:
        return Ran(None, fault, witness)
    finally:
        witness.closed_on_return = witness.closed.is_set()


def bounded(call: Callable[[], Ran]) -> Ran:
    """``call()`` in a thread, joined with the outer bound: a hang fails here."""
    box: list[Ran | BaseException] = []

    def target() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    joined(thread, OUTER)  # the reader returned
    (got,) = box
    if isinstance(got, BaseException):
        raise got
    return got


# --------------------------------------------------------------------------------------------
# 1. A gateway that keeps the connection open after the terminal is not waited for
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", list(HTTP_SOURCES))
def test_a_gateway_that_stalls_after_the_terminal_is_not_waited_for(
    server: SSEServer, source: str, route: str
) -> None:
    """The body up to its terminal, then the server stalls until it is stopped: the reader
    returns the accepted stream while the server still stalls, and the response is closed."""
    name = TERMINATED[route]
    body = body_of(name)
    more = crlf(body, KEEP_ALIVE + first_event(body))  # what the gateway would send later
    url = server.route(
        ROUTE_PATHS[route], Reply(body + more, piece=300, cut=len(body), after_cut="stall")
    )
    ran = bounded(lambda: read_http(HTTP_SOURCES[source], url, Witness()))

    assert accepted(ran.accepted()) == accepted(reference(name, route))
    assert ran.response_closed is True
    assert waited(server.stalled.wait, OUTER)  # the server sent the whole body and stalls...
    assert not server.cut_closed.is_set()  # ...still: only server.stop() releases it


@pytest.mark.parametrize("then", ["keep-alive", "event"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_a_peer_that_sends_on_after_the_terminal_is_closed_there(
    source: str, route: str, then: str
) -> None:
    """After the terminal the peer sends keep-alive comments (or another event) without end:
    the reader returns the stream as it was at the terminal, and closes the connection."""
    name = TERMINATED[route]
    body = body_of(name)
    extra = crlf(body, KEEP_ALIVE) if then == "keep-alive" else first_event(body)
    script = Script(pieces_of(body), then=extra, gap=0.002)
    ran = bounded(lambda: run(source, script, route))

    result = ran.accepted()
    assert accepted(result) == accepted(reference(name, route))
    assert "event_after_terminal" not in result.report.anomalies
    assert ran.closed  # the peer saw the connection closed by the reader
    assert not ran.witness.gave_up.is_set()
    if source not in HTTP_SOURCES:
        assert ran.witness.after_pieces == 0  # not one read past the terminal


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_a_fatal_error_event_ends_the_read_like_a_terminal(source: str, route: str) -> None:
    """The route's last event may be a fatal error: the reader refuses the stream there,
    without waiting for a peer that holds the connection open, and closes it."""
    name = FATAL[route]
    script = Script(pieces_of(body_of(name)), then=None)
    ran = bounded(lambda: run(source, script, route, idle_timeout=OUTER))

    assert ran.code == "provider_error"
    assert ran.report.error is None  # it ended at the event, not at a timeout
    assert ran.closed
    if source not in HTTP_SOURCES:
        assert ran.witness.after_pieces == 0


@pytest.mark.parametrize("ending", ["terminal", "fatal"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_ceiling_past_the_last_event_is_never_reached_however_the_bytes_are_read(
    route: str, ending: str
) -> None:
    """Bytes after the route's last event that would breach a ceiling of the parser (a line
    too long): the reader ends at that event, whether they came in its read or a later one."""
    body = body_of((TERMINATED if ending == "terminal" else FATAL)[route])
    longest = max(len(line) for line in body.splitlines())
    limits = Limits(max_line_bytes=longest + 8, max_event_bytes=len(body))
    sent = body + crlf(body, b"data: " + b"x" * (2 * longest) + b"\n\n")
    seen = set()
    for chunks in ([sent], [sent[i : i + 1] for i in range(len(sent))]):
        try:
            seen.add(read_stream(iter(chunks), route=route, limits=limits).report.outcome.value)
        except StreamFault as fault:
            seen.add(fault.code)
    assert seen == {"complete" if ending == "terminal" else "provider_error"}


# --------------------------------------------------------------------------------------------
# 2. drain=True reads on to EOF
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("drain", [True, False], ids=["drain", "stop-at-terminal"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_drain_reads_on_to_eof_and_counts_the_events_after_the_terminal(
    server: SSEServer, source: str, route: str, drain: bool
) -> None:
    name = TERMINATED[route]
    body = body_of(name)
    extra = first_event(body) + crlf(body, KEEP_ALIVE) + first_event(body)
    whole = body + extra
    if source in HTTP_SOURCES:
        url = server.route(ROUTE_PATHS[route], Reply(whole, piece=300))
        ran = bounded(lambda: read_http(HTTP_SOURCES[source], url, Witness(), drain=drain))
    else:
        ran = bounded(lambda: run(source, Script(pieces_of(whole), ends=True), route, drain=drain))
        assert ran.closed

    result = ran.accepted()
    want = reference(name, route)
    assert accepted(result)[:5] == accepted(want)[:5]  # text, calls, stop: as at the terminal
    anomalies = result.report.anomalies
    if drain:
        assert result.report.bytes_received == len(whole)  # every byte up to EOF
        assert anomalies.get("event_after_terminal") == 2
        assert result.report.event_count == count_events(whole)
        assert result.report.comment_count == want.report.comment_count + 1
    else:
        assert "event_after_terminal" not in anomalies
        assert result.report.event_count == count_events(body)
        assert stable(result.report) == stable(want.report)


@pytest.mark.parametrize("route", [CHAT, GEMINI])
@pytest.mark.parametrize("source", TIMED_SOURCES)
def test_drain_waits_on_a_stall_after_the_terminal_until_the_idle_timeout(
    server: SSEServer, source: str, route: str
) -> None:
    """Draining, a peer that stalls after the terminal is waited for, up to ``idle_timeout``;
    the stream is still accepted (the terminal came), its report saying how reading ended."""
    name = TERMINATED[route]
    body = body_of(name)
    if source in HTTP_SOURCES:
        url = server.route(
            ROUTE_PATHS[route], Reply(body + KEEP_ALIVE, cut=len(body), after_cut="stall")
        )
        ran = bounded(
            lambda: read_http(HTTP_SOURCES[source], url, Witness(), drain=True, idle_timeout=IDLE)
        )
        assert ran.response_closed is True
        assert not server.cut_closed.is_set()  # the server still stalls
    else:
        script = Script(pieces_of(body), then=None)
        ran = bounded(lambda: run(source, script, route, drain=True, idle_timeout=IDLE))
        assert ran.witness.after_pieces == 1  # it did wait for the read after the terminal
        assert ran.closed

    result = ran.accepted()
    assert result.report.error == "timeout"  # it read on after the terminal, until the budget
    assert accepted(result)[:5] == accepted(reference(name, route))[:5]


# --------------------------------------------------------------------------------------------
# 3. A refusal closes the response
# --------------------------------------------------------------------------------------------


def endless_line(body: bytes) -> Script:
    """Two events of ``body``, then one ``data`` line that never ends."""
    return Script((body[: event_ends(body)[1]], b"data: "), then=b"x" * 4096, gap=0.001)


def endless_events(body: bytes) -> Script:
    """The body's first event again and again, never a terminal."""
    return Script((first_event(body),), then=first_event(body), gap=0.001)


CEILINGS = {
    "event-bytes": (endless_line, Limits(max_event_bytes=64 * 1024), "event"),
    "line-bytes": (endless_line, Limits(max_line_bytes=32 * 1024), "line"),
    "events": (endless_events, Limits(max_events=40), "events"),
}


@pytest.mark.parametrize("ceiling", list(CEILINGS))
@pytest.mark.parametrize("route", [CHAT, ANTHROPIC])
@pytest.mark.parametrize("source", SOURCES)
def test_a_ceiling_breached_by_an_endless_peer_refuses_and_closes(
    source: str, route: str, ceiling: str
) -> None:
    make, limits, stage = CEILINGS[ceiling]
    ran = bounded(lambda: run(source, make(body_of(TERMINATED[route])), route, limits=limits))

    assert ran.code == "buffer_limit"
    assert ran.report.buffer_limit_stage == stage
    assert ran.report.error is None  # refused at the ceiling, not at a timeout or EOF
    assert ran.closed
    assert not ran.witness.gave_up.is_set()
    if stage == "events":
        assert ran.report.event_count == limits.max_events


@pytest.mark.parametrize("entry", ["read_stream", "StreamReader"])
@pytest.mark.parametrize("source", [str(client) for client in SYNC_CLIENTS])
def test_a_refused_status_closes_a_sync_response(source: str, entry: str) -> None:
    """HTTP 500 with an event-stream body that never ends: refused before the body, and the
    response closed (an async one is closed by its caller's ``async with``)."""
    body = body_of(TERMINATED[CHAT])
    client = HTTP_SOURCES[source]
    with Peer(Script(pieces_of(body), then=KEEP_ALIVE, gap=0.01, status=500)) as peer:
        url = peer.url(ROUTE_PATHS[CHAT])
        with streaming(client, url) as response:
            refuse: Callable[[Any], object] = (
                read_stream if entry == "read_stream" else StreamReader
            )
            with pytest.raises(StreamFault) as caught:
                refuse(response)
            assert response_closed(client, response)
            assert waited(peer.witness.closed.wait, OUTER)  # before the session closed its pool
    assert caught.value.code == "http_error"
    assert caught.value.report is None
    assert "500" in str(caught.value)


# --------------------------------------------------------------------------------------------
# 4. idle_timeout and deadline
# --------------------------------------------------------------------------------------------


def stall_mid_stream(body: bytes) -> int:
    """An event boundary in the middle of ``body``."""
    ends = event_ends(body)
    return ends[(len(ends) - 1) // 2]


@pytest.mark.parametrize("route", [ANTHROPIC, GEMINI])
@pytest.mark.parametrize("source", TIMED_SOURCES)
def test_a_silent_peer_times_out_at_the_idle_timeout(
    server: SSEServer, source: str, route: str
) -> None:
    """The peer goes silent mid-stream (the client's own read timeout far longer): the reader
    refuses it with ``timeout`` on its own budget, and closes the response."""
    body = body_of(TERMINATED[route])
    cut = stall_mid_stream(body)
    if source in HTTP_SOURCES:
        url = server.route(ROUTE_PATHS[route], Reply(body, cut=cut, after_cut="stall"))
        ran = bounded(lambda: read_http(HTTP_SOURCES[source], url, Witness(), idle_timeout=IDLE))
        assert ran.response_closed is True
        assert waited(server.stalled.wait, OUTER)
        assert not server.cut_closed.is_set()  # the server still stalls: it was not EOF
    else:
        script = Script((body[:cut],), then=None)
        ran = bounded(lambda: run(source, script, route, idle_timeout=IDLE))
        assert ran.closed

    assert ran.code == "timeout"
    assert ran.report.outcome.value == "timeout"
    assert ran.report.error == "timeout"
    assert ran.report.terminal_seen is False
    assert ran.report.event_count == count_events(body[:cut])


def test_an_async_source_that_waits_for_real_is_cancelled_at_the_idle_timeout() -> None:
    """The generator peers above take no real time; an async source that really waits (for
    ever) is cancelled by the reader's own budget, on the real clock, soon after it."""
    body = body_of(TERMINATED[ANTHROPIC])
    witness = Witness()

    async def silent() -> AsyncIterator[bytes]:
        try:
            yield first_event(body)
            await asyncio.Event().wait()
            yield b""  # pragma: no cover - never reached
        finally:
            witness.closed.set()

    async def main() -> tuple[str | None, float]:
        began = time.monotonic()
        try:
            await aread_stream(silent(), ANTHROPIC, idle_timeout=IDLE)
        except StreamFault as fault:
            return fault.code, time.monotonic() - began
        return None, time.monotonic() - began

    code, took = asyncio.run(asyncio.wait_for(main(), OUTER))
    assert code == "timeout"
    assert IDLE <= took < IDLE + 2.0, took  # cancelled at its budget, not at the outer bound
    assert witness.closed.is_set()


@pytest.mark.parametrize("source", TIMED_SOURCES)
def test_a_trickling_peer_is_cut_at_the_deadline(source: str) -> None:
    """Keep-alive comments every 50 ms for ever: no read is ever idle long, so only the
    deadline ends it."""
    body = body_of(TERMINATED[RESPONSES])
    script = Script((body[: stall_mid_stream(body)],), then=KEEP_ALIVE, gap=0.05)
    ran = bounded(lambda: run(source, script, RESPONSES, idle_timeout=OUTER, deadline=0.5))

    assert ran.code == "timeout"
    assert ran.report.error == "timeout"
    assert ran.report.comment_count >= 1  # the keep-alives were read, and did not help
    assert ran.closed
    assert not ran.witness.gave_up.is_set()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", TIMED_SOURCES)
def test_an_idle_timeout_longer_than_the_gaps_accepts_a_healthy_stream(
    source: str, route: str
) -> None:
    name = TERMINATED[route]
    script = Script(at_events(body_of(name), 4), then=KEEP_ALIVE, gap=0.02)
    ran = bounded(lambda: run(source, script, route, idle_timeout=OUTER / 2, deadline=OUTER))

    assert accepted(ran.accepted()) == accepted(reference(name, route))
    assert ran.report.error is None
    assert ran.closed


def without_frames(fault: StreamFault) -> StreamFault:
    """``fault`` without the tracebacks of its chain, which would keep the reader's frames (and
    what they hold) alive past the point where the test looks for leftovers."""
    exc: BaseException | None = fault
    while exc is not None:
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__
    return fault


@pytest.mark.e2e  # real stalls and trickles, over HTTP, under trio
@pytest.mark.parametrize("case", ["silent", "trickle", "healthy", "ceiling", "flooded"])
@pytest.mark.parametrize("source", ASYNC_HTTP)
def test_idle_timeout_deadline_and_early_ends_under_trio(source: str, case: str) -> None:
    """Under trio as under asyncio: the reader's budgets cancel a read in time, and a read that
    ends early (at the terminal, at a ceiling) closes the response and leaves no async
    generator of the body (the reader's ``aiter_bytes()`` nor httpx's inner ones) unfinished
    to the garbage collector, of which trio warns (``ResourceWarning``). "flooded" ends at a
    ceiling with hundreds of chunks already received: a closed httpx response still serves
    what its connection had buffered, so its generators end only after all of them."""
    body = body_of(TERMINATED[ANTHROPIC])
    cut = stall_mid_stream(body)
    scripts: dict[str, tuple[Script, dict[str, Any]]] = {
        "silent": (Script((body[:cut],), then=None), {"idle_timeout": IDLE}),
        "trickle": (
            Script((body[:cut],), then=KEEP_ALIVE, gap=0.05),
            {"idle_timeout": OUTER, "deadline": 0.5},
        ),
        "healthy": (Script(at_events(body, 6), then=KEEP_ALIVE, gap=0.03), {"idle_timeout": OUTER}),
        "ceiling": (endless_events(body), {"limits": Limits(max_events=40)}),
        "flooded": (Script((first_event(body),) * 400), {"limits": Limits(max_events=40)}),
    }
    script, options = scripts[case]
    client = HTTP_SOURCES[source]
    unfinished: list[str] = []

    def call() -> Ran:
        with Peer(script) as peer:
            url = peer.url(ROUTE_PATHS[ANTHROPIC])

            async def main() -> Ran:
                async with astreaming(client, url, read_timeout=LONG_READ_TIMEOUT) as response:
                    try:
                        ran = Ran(await aread_stream(response, **options), None, peer.witness)
                    except StreamFault as fault:
                        ran = Ran(None, without_frames(fault), peer.witness)
                    gc.collect()  # whatever the reader left behind is finalized now, under trio
                    ran.response_closed = response_closed(client, response)
                    await trio.to_thread.run_sync(peer.witness.closed.wait, OUTER)
                    return ran

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ran: Ran = trio.run(main)
                gc.collect()
            unfinished.extend(
                str(w.message) for w in caught if issubclass(w.category, ResourceWarning)
            )
            return ran

    ran = bounded(call)
    assert ran.response_closed is True
    assert ran.closed
    if case == "healthy":
        want = reference(TERMINATED[ANTHROPIC], ANTHROPIC)
        assert accepted(ran.accepted()) == accepted(want)
    elif case in ("ceiling", "flooded"):
        assert (ran.code, ran.report.buffer_limit_stage) == ("buffer_limit", "events")
    else:
        assert ran.code == "timeout"
        assert ran.report.error == "timeout"
    assert unfinished == []


# --------------------------------------------------------------------------------------------
# 5. Limits(max_events=N)
# --------------------------------------------------------------------------------------------


@pytest.mark.matrix  # every chunking
@pytest.mark.parametrize("route", ROUTES)
def test_max_events_is_exact_whatever_the_chunking(route: str) -> None:
    """A body of N events (then one more after the terminal, which is not read): N accepted,
    N - 1 refused at stage ``events``, at every two-piece split alike."""
    name = SMALL[route]
    body = body_of(name)
    events = count_events(body)
    whole = body + first_event(body)
    want = accepted(reference(name, route))
    refused: list[StreamReport] = []
    for at in range(len(whole) + 1):
        pieces = [whole[:at], whole[at:]]
        result = read_stream(pieces, route, limits=Limits(max_events=events))
        assert accepted(result) == want, at
        with pytest.raises(StreamFault) as caught:
            read_stream(pieces, route, limits=Limits(max_events=events - 1))
        report = caught.value.report
        assert report is not None
        assert (caught.value.code, report.buffer_limit_stage) == ("buffer_limit", "events"), at
        assert report.event_count == events - 1
        refused.append(stable(report))
    assert all(report == refused[0] for report in refused)  # the same report at every split


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_max_events_over_each_source(source: str, route: str) -> None:
    name = TERMINATED[route]
    body = body_of(name)
    events = count_events(body)
    script = Script(pieces_of(body), then=KEEP_ALIVE, gap=0.002)

    exact = bounded(lambda: run(source, script, route, limits=Limits(max_events=events)))
    assert accepted(exact.accepted()) == accepted(reference(name, route))
    assert exact.report.event_count == events

    short = bounded(lambda: run(source, script, route, limits=Limits(max_events=events - 1)))
    assert (short.code, short.report.buffer_limit_stage) == ("buffer_limit", "events")
    assert short.closed


# --------------------------------------------------------------------------------------------
# 6. Unregistered tools and duplicate call ids
# --------------------------------------------------------------------------------------------

#: Fixtures with calls the application is asked to run, and the names called, read by eye.
TOOL_FIXTURES = {
    "real/openai-chat-parallel-tool-calls.sse": (CHAT, {"get_current_weather"}),
    "real/openai-chat-tool-call-obfuscation.sse": (CHAT, None),
    "real/openai-responses-function-call.sse": (RESPONSES, {"get_capital"}),
    "real/openai-responses-reasoning-function-call-text.sse": (RESPONSES, {"get_capital"}),
    "real/bedrock-mantle-responses-function-call.sse": (RESPONSES, None),
    "real/anthropic-text-and-two-tool-use.sse": (ANTHROPIC, {"get_weather", "get_time"}),
    "real/anthropic-server-tool-then-tool-use.sse": (ANTHROPIC, {"get_exchange_rate"}),
    "real/gemini-function-call.sse": (GEMINI, {"get_country"}),
}


def called_names(name: str) -> set[str]:
    route, names = TOOL_FIXTURES[name]
    found = {call.name for call in reference(name, route).tool_calls if call.name is not None}
    assert found
    if names is not None:
        assert found == names
    return found


def tools_as(form: str, names: set[str]) -> Any:
    """``names`` registered without a schema, in one of the forms ``tools=`` takes."""
    if form == "mapping":
        return dict.fromkeys(names)
    if form == "openai":
        return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]
    if form == "responses":
        return [{"type": "function", "name": n} for n in names]
    return [{"name": n, "input_schema": {"type": "object"}} for n in names]


FORMS = ["mapping", "openai", "responses", "anthropic"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(TOOL_FIXTURES))
def test_a_call_to_an_unregistered_tool_is_refused(name: str, form: str) -> None:
    route = TOOL_FIXTURES[name][0]
    body = body_of(name)
    names = called_names(name)
    every = read_stream(pieces_of(body), route, tools=tools_as(form, names))
    assert {call.name for call in every.tool_calls} == names
    for registered in (set(), {"some_other_tool"}, *({n} ^ names for n in names)):
        if registered >= names:
            continue
        with pytest.raises(StreamFault) as caught:
            read_stream(pieces_of(body), route, tools=tools_as(form, registered))
        assert caught.value.code == "unregistered_tool"
        for called in names:  # a name the model chose is its output, never in the message
            assert called not in str(caught.value)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_an_unregistered_tool_is_refused_over_each_source(source: str, route: str) -> None:
    name = TERMINATED[route]
    script = Script(pieces_of(body_of(name)), then=KEEP_ALIVE, gap=0.002)
    ran = bounded(lambda: run(source, script, route, tools={"some_other_tool": None}))
    assert ran.code == "unregistered_tool"
    assert ran.closed
    ran = bounded(lambda: run(source, script, route, tools=dict.fromkeys(called_names(name))))
    assert calls_of(ran.accepted()) == calls_of(reference(name, route))


#: Fixtures with calls the provider ran itself: (route, client tool names, server call count).
SERVER_TOOLS = {
    "real/anthropic-server-tool-then-tool-use.sse": (ANTHROPIC, {"get_exchange_rate"}, 1),
    "real/anthropic-server-tool-empty-input.sse": (ANTHROPIC, set(), None),
    "real/openai-responses-web-search.sse": (RESPONSES, set(), 1),
}


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", list(SERVER_TOOLS))
def test_server_tools_are_not_unregistered_tools(source: str, name: str) -> None:
    """A call the provider ran itself was never the application's to register."""
    route, names, server_calls = SERVER_TOOLS[name]
    script = Script(pieces_of(body_of(name)), then=KEEP_ALIVE, gap=0.002)
    ran = bounded(lambda: run(source, script, route, tools=dict.fromkeys(names)))
    result = ran.accepted()
    assert {call.name for call in result.tool_calls} == names
    assert result.server_tool_calls
    if server_calls is not None:
        assert len(result.server_tool_calls) == server_calls
    assert not {call.name for call in result.server_tool_calls} & names


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sse(*events: tuple[str | None, Any]) -> bytes:
    """Events as bytes: (event name or None, JSON payload or a raw string)."""
    out = []
    for name, payload in events:
        data = payload if isinstance(payload, str) else _json(payload)
        out.append((f"event: {name}\n" if name else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def two_calls(route: str, first: str, second: str) -> bytes:
    """A complete stream with two calls to ``lookup`` whose ids are ``first`` and ``second``."""
    args = [{"q": "a"}, {"q": "b"}]
    if route == CHAT:
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return None, {**base, "choices": [choice]}

        calls = [
            chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                   "function": {"name": "lookup", "arguments": _json(a)}}]})
            for i, (cid, a) in enumerate(zip((first, second), args, strict=True))
        ]  # fmt: skip
        return sse(chunk({"role": "assistant"}), *calls, chunk({}, "tool_calls"), (None, "[DONE]"))
    if route == RESPONSES:
        events: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created", "response": {"id": "resp_1"}})
        ]
        for i, (cid, a) in enumerate(zip((first, second), args, strict=True)):
            item = {"type": "function_call", "id": f"fc_{i}", "call_id": cid, "name": "lookup"}
            events += [
                ("response.output_item.added", {"type": "response.output_item.added",
                 "output_index": i, "item": {**item, "arguments": ""}}),
                ("response.function_call_arguments.delta", {
                 "type": "response.function_call_arguments.delta", "output_index": i,
                 "item_id": f"fc_{i}", "delta": _json(a)}),
                ("response.function_call_arguments.done", {
                 "type": "response.function_call_arguments.done", "output_index": i,
                 "item_id": f"fc_{i}", "arguments": _json(a)}),
                ("response.output_item.done", {"type": "response.output_item.done",
                 "output_index": i, "item": {**item, "arguments": _json(a)}}),
            ]  # fmt: skip
        done = {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}
        return sse(*events, ("response.completed", done))
    if route == ANTHROPIC:
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                   "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
        events = [("message_start", {"type": "message_start", "message": message})]
        for i, (cid, a) in enumerate(zip((first, second), args, strict=True)):
            block = {"type": "tool_use", "id": cid, "name": "lookup", "input": {}}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": i,
                 "content_block": block}),
                ("content_block_delta", {"type": "content_block_delta", "index": i,
                 "delta": {"type": "input_json_delta", "partial_json": _json(a)}}),
                ("content_block_stop", {"type": "content_block_stop", "index": i}),
            ]  # fmt: skip
        stop = {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}
        return sse(*events, ("message_delta", stop), ("message_stop", {"type": "message_stop"}))
    parts = [
        {"functionCall": {"id": cid, "name": "lookup", "args": a}}
        for cid, a in zip((first, second), args, strict=True)
    ]
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    return sse((None, {"candidates": [candidate], "modelVersion": "m", "responseId": "r1"}))


@pytest.mark.parametrize("tools", [None, {"lookup": None}], ids=["no-tools", "registered"])
@pytest.mark.parametrize("route", ROUTES)
def test_duplicate_call_ids_in_one_response_are_refused(route: str, tools: Any) -> None:
    distinct = two_calls(route, "call_1", "call_2")
    result = read_stream(pieces_of(distinct, 97), route, tools=tools)
    assert [(call.id, call.name) for call in result.tool_calls] == [
        ("call_1", "lookup"),
        ("call_2", "lookup"),
    ]
    with pytest.raises(StreamFault) as caught:
        read_stream(pieces_of(two_calls(route, "call_1", "call_1"), 97), route, tools=tools)
    assert caught.value.code == "duplicate_tool_call_id"
    assert "call_1" not in str(caught.value)


#: Recorded bodies with two calls: the second call's id replaced by the first's.
DUPLICATED = {
    CHAT: ("real/openai-chat-parallel-tool-calls.sse", b"call_3J9foSw3CUb48lrqIXoTky6U",
           b"call_fHCjJqt9Pysde6vcJcvbXGBx"),
    ANTHROPIC: ("real/anthropic-text-and-two-tool-use.sse", b"toolu_0121kXsENLvoDZ72LCuAnCCz",
                b"toolu_014x5X91kx3fvdhpLvwXZWE2"),
}  # fmt: skip


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_duplicate_call_ids_are_refused_over_each_source(source: str, route: str) -> None:
    if route in DUPLICATED:
        name, second, first = DUPLICATED[route]
        original = body_of(name)
        assert original.count(second) == 1
        body = original.replace(second, first)
    else:
        body = two_calls(route, "call_1", "call_1")
    script = Script(pieces_of(body), then=KEEP_ALIVE, gap=0.002)
    ran = bounded(lambda: run(source, script, route))
    assert ran.code == "duplicate_tool_call_id"
    assert ran.closed


# --------------------------------------------------------------------------------------------
# 7. Bytes after the terminal never change the verdict, however they are chunked
# --------------------------------------------------------------------------------------------


def error_event(route: str) -> bytes:
    """The route's fatal error event: judged, it would refuse the stream."""
    if route == CHAT:
        return sse((None, {"error": {"message": "late", "type": "server_error"}}))
    if route == RESPONSES:
        return sse(("error", {"type": "error", "code": "server_error", "message": "late"}))
    if route == ANTHROPIC:
        return sse(("error", {"type": "error", "error": {"type": "overloaded_error"}}))
    return sse((None, {"error": {"code": 503, "status": "UNAVAILABLE"}}))


TRAILERS: dict[str, Callable[[str, bytes], bytes]] = {
    "comment": lambda route, body: crlf(body, b": keep-alive\n\n: more\n"),
    # an ordinary event, then the route's fatal error: either, judged, would change the report
    "events": lambda route, body: first_event(body) + error_event(route),
    "partial-line": lambda route, body: b'data: {"choices": [{"ind',
    "invalid-utf8": lambda route, body: b"data: \xff\xfe\xc3(\n\n: \xe2\x82\n",
}


@pytest.mark.matrix  # every split
@pytest.mark.parametrize("trailer", list(TRAILERS))
@pytest.mark.parametrize("route", ROUTES)
def test_bytes_after_the_terminal_never_change_the_verdict_at_any_split(
    route: str, trailer: str
) -> None:
    name = SMALL[route]
    body = body_of(name)
    whole = body + TRAILERS[trailer](route, body)
    want = verdict(lambda: reference(name, route))
    assert want[0] == "accepted"
    for at in range(len(whole) + 1):
        got = verdict(lambda at=at: read_stream([whole[:at], whole[at:]], route))  # type: ignore[misc]
        assert got == want, f"split at {at}"
