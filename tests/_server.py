"""A real HTTP/1.1 server on 127.0.0.1 for tests, on raw sockets so it can misbehave on purpose.

``SSEServer`` answers each registered path with a ``Reply``: the status line and headers, then
the body written in pieces (one ``sendall`` per piece, Nagle off, so the client sees several
network reads) framed with ``Transfer-Encoding: chunked``, ``Content-Length`` or by closing the
connection. A reply can stop after ``cut`` body bytes and then either close the connection
abruptly (no terminating zero-size chunk, a short ``Content-Length`` body, or just EOF for
``Connection: close`` framing) or stall until the server is stopped.

Use it as a context manager: ``stop()`` releases every stalled reply, shuts down every open
connection and joins every thread it started (and asserts that they all ended).
"""

from __future__ import annotations

import selectors
import socket
import threading
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from tests._helpers import waited

__all__ = ["Received", "Reply", "SSEServer"]

#: Upper bound for every wait in the server (a stalled reply, joining threads on stop).
MAX_WAIT = 30.0

Framing = Literal["chunked", "length", "close"]


@dataclass(frozen=True)
class Reply:
    """What the server sends for one request.

    Attributes:
        body: the response body (the whole intended body, even when ``cut`` sends less).
        status: HTTP status code; ``reason`` its phrase.
        content_type: the ``Content-Type`` header (None: no such header).
        framing: ``chunked`` (``Transfer-Encoding: chunked``), ``length`` (``Content-Length``
            of the whole body) or ``close`` (``Connection: close``, the body ends at EOF).
        piece: bytes per write (and per HTTP chunk with chunked framing).
        cut: send only the first ``cut`` body bytes, then do ``after_cut``.
        after_cut: ``close`` the connection at once, or ``stall`` until the server stops.
        cut_inside_chunk: with chunked framing, announce the whole last piece in its chunk-size
            line but send only the part before ``cut`` (the connection then closes inside a
            chunk rather than between chunks).
        hold_at: after this many body bytes, set ``SSEServer.held`` and wait for
            ``SSEServer.release`` before sending the rest.
    """

    body: bytes = b""
    status: int = 200
    reason: str = "OK"
    content_type: str | None = "text/event-stream"
    framing: Framing = "chunked"
    piece: int = 300
    cut: int | None = None
    after_cut: Literal["close", "stall"] = "close"
    cut_inside_chunk: bool = False
    hold_at: int | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Received:
    """One request as the server read it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class _Connection:
    sock: socket.socket
    thread: threading.Thread | None = None


@dataclass
class SSEServer:
    """A threaded raw-socket HTTP/1.1 server on an ephemeral 127.0.0.1 port."""

    routes: dict[str, Reply] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    #: Set when a reply has sent its first ``cut`` bytes and stalls.
    stalled: threading.Event = field(default_factory=threading.Event)
    #: Set when a reply was cut and its connection closed.
    cut_closed: threading.Event = field(default_factory=threading.Event)
    #: Set when a reply holds at ``hold_at``; it goes on once ``release`` is set.
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="sse-server-accept", daemon=True
        )
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> SSEServer:
        self._started = True
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.release.set()
        self._wake_w.send(b"x")
        if self._started:
            waited(self._accept_thread.join, MAX_WAIT)
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        alive = []
        for connection in connections:
            if connection.thread is not None:
                waited(connection.thread.join, MAX_WAIT)
                if connection.thread.is_alive():
                    alive.append(connection.thread.name)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        assert not self._accept_thread.is_alive(), "accept thread did not stop"
        assert not alive, f"connection threads did not stop: {alive}"

    def __enter__(self) -> SSEServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def route(self, path: str, reply: Reply) -> str:
        """Answer ``path`` (without query) with ``reply``; return the full URL of ``path``."""
        self.routes[urlsplit(path).path] = reply
        return self.url(path)

    # -- serving -----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stop.is_set():
                ready = {key.fileobj for key, _ in selector.select()}
                if self._stop.is_set() or self._listener not in ready:
                    continue
                sock, _ = self._listener.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection = _Connection(sock)
                connection.thread = threading.Thread(
                    target=self._serve_connection,
                    args=(connection,),
                    name=f"sse-server-conn-{len(self._connections)}",
                    daemon=True,
                )
                with self._lock:
                    self._connections.append(connection)
                connection.thread.start()

    def _serve_connection(self, connection: _Connection) -> None:
        sock = connection.sock
        try:
            buffer = b""
            while not self._stop.is_set():
                request, buffer = self._read_request(sock, buffer)
                if request is None:
                    return
                self.received.append(request)
                reply = self.routes.get(urlsplit(request.target).path)
                if reply is None:
                    reply = Reply(b"not found", 404, "Not Found", "text/plain", framing="length")
                if not self._send(sock, reply):
                    return
        except OSError:
            return  # the client went away (reset, broken pipe) or stop() shut the socket
        finally:
            sock.close()

    @staticmethod
    def _read_request(sock: socket.socket, buffer: bytes) -> tuple[Received | None, bytes]:
        while b"\r\n\r\n" not in buffer:
            data = sock.recv(65536)
            if not data:
                return None, b""
            buffer += data
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            data = sock.recv(65536)
            if not data:
                return None, b""
            buffer += data
        body, buffer = buffer[:length], buffer[length:]
        return Received(method, target, headers, body), buffer

    def _send(self, sock: socket.socket, reply: Reply) -> bool:
        """Send ``reply``; True when the connection can serve another request."""
        lines = [f"HTTP/1.1 {reply.status} {reply.reason}"]
        if reply.content_type is not None:
            lines.append(f"Content-Type: {reply.content_type}")
        if reply.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        elif reply.framing == "length":
            lines.append(f"Content-Length: {len(reply.body)}")
        else:
            lines.append("Connection: close")
        lines.extend(f"{name}: {value}" for name, value in reply.headers)
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

        body = reply.body
        end = len(body) if reply.cut is None else reply.cut
        holds = [reply.hold_at] if reply.hold_at is not None and reply.hold_at < end else []
        position = 0
        for stop in [*holds, end]:
            while position < stop:
                whole = body[position : position + reply.piece]  # the piece as intended
                sent = whole[: stop - position]
                if reply.framing == "chunked":
                    cut_here = reply.cut_inside_chunk and reply.cut is not None and stop == end
                    announced = len(whole) if cut_here else len(sent)
                    sock.sendall(b"%x\r\n" % announced + sent)
                    if len(sent) == announced:
                        sock.sendall(b"\r\n")
                else:
                    sock.sendall(sent)
                position += len(sent)
            if stop != end:
                self.held.set()
                self.release.wait(MAX_WAIT)

        if reply.cut is not None:
            if reply.after_cut == "stall":
                self.stalled.set()
                self._stop.wait(MAX_WAIT)
            sock.shutdown(socket.SHUT_RDWR)
            self.cut_closed.set()
            return False
        if reply.framing == "chunked":
            sock.sendall(b"0\r\n\r\n")
        return reply.framing != "close"
