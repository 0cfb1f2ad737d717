"""A real ASGI server for tests: uvicorn on 127.0.0.1, in a thread, serving a swappable app.

One server serves a whole module: each test mounts the app it needs on it (the bare app, or the
same app inside ``OtelSSEMiddleware``) and ``bare()`` puts the bare one back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from otelsse.asgi import ASGIApp
from tests._helpers import joined, soon

__all__ = ["MAX_WAIT", "Mount", "Served", "serving"]

#: Upper bound for the server to start and to stop (never a measured duration).
MAX_WAIT = 30.0


@dataclass
class Mount:
    """The app the server runs: whatever a test mounted, and the exceptions it raised."""

    bare: ASGIApp
    app: ASGIApp = field(init=False)
    raised: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.app = self.bare

    def reset(self) -> None:
        """The bare app again, and nothing raised yet."""
        self.app = self.bare
        self.raised.clear()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except BaseException as exc:
            self.raised.append(exc)
            raise


@dataclass
class Served:
    mount: Mount
    #: ``http://127.0.0.1:port``
    base: str


@contextlib.contextmanager
def serving(make: Callable[[str], ASGIApp]) -> Iterator[Served]:
    """Serve ``make(base)`` (it may need its own URL, as an A2A agent card does) until exit."""
    config = uvicorn.Config(None, host="127.0.0.1", port=0, lifespan="off", log_level="critical")
    sockets = [config.bind_socket()]
    base = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
    mount = Mount(make(base))
    config.app = mount
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": sockets}, name="uvicorn")
    thread.start()
    try:
        soon(lambda: running.started, MAX_WAIT, "the server to start")
        yield Served(mount, base)
    finally:
        running.should_exit = True
        joined(thread, MAX_WAIT)
