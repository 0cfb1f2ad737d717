"""An application that leaves its streams open and exits, never collecting them.

    python -m tests.apps.abandoning_app URL SPANS_FILE       (from the repository root)

It makes a scratch directory first (``tempfile.TemporaryDirectory``, as an application that
keeps an index in one does): its weakref finalizer registers weakref's exit handler before the
SDK registers its own, so weakref's runs after the SDK's shutdown. Then it sets the SDK up (a
``BatchSpanProcessor`` writing each ended span as a JSON line to SPANS_FILE, shut down by the
SDK's own exit handler), instruments otelsse, and opens one stream of URL with each client of
the harness (``tests/_clients.py``), each under an application span. It leaves each in a
reference cycle, with collection off (a process that exits before its next collection): the
sync ones after their first chunk; the async ones past their closed event loop, after their
first chunk where the body iterator is no async generator (aiohttp's, also held by its session,
never closed), else unread (the closing loop would close an async generator, and its stream).
It prints ``{client: application span id}`` on stdout and exits.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import sys
import tempfile
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

import otelsse
from tests._clients import CLIENTS, AsyncSession, Client, Session

#: Whatever the application leaves: it never frees them.
LEFT: list[Any] = []


def _line(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    parent = None if span.parent is None else span.parent.span_id
    return (
        json.dumps(
            {"name": span.name, "parent": parent, "outcome": attributes.get("otelsse.outcome")}
        )
        + "\n"
    )


def leave(*objects: Any) -> None:
    """Put ``objects`` in a reference cycle nothing else reaches."""
    cycle: list[Any] = [*objects]
    cycle.append(cycle)


def main(url: str, spans_file: str) -> None:
    gc.disable()
    LEFT.append(tempfile.TemporaryDirectory())
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=open(spans_file, "w"), formatter=_line)  # noqa: SIM115
    provider.add_span_processor(BatchSpanProcessor(exporter))
    otelsse.instrument(tracer_provider=provider, meter_provider=MeterProvider())
    tracer = provider.get_tracer("app")
    opened: dict[str, int] = {}

    def parent(client: Client) -> Any:
        span = tracer.start_as_current_span(client.id)
        return span

    for client in (c for c in CLIENTS if not c.is_async):
        http = Session(client).__enter__()
        with parent(client) as span:
            response = http.send(url)
        chunks = iter(http.chunks(response))
        next(chunks)
        opened[client.id] = span.get_span_context().span_id
        leave(http, response, chunks)

    async def astreams() -> None:
        for client in (c for c in CLIENTS if c.is_async):
            http = await AsyncSession(client).__aenter__()
            with parent(client) as span:
                response = await http.send(url)
            left = [http, response]
            chunks = aiter(http.chunks(response))
            if not inspect.isasyncgen(chunks):  # the closing loop leaves it: read a first chunk
                await anext(chunks)
                left.append(chunks)
            opened[client.id] = span.get_span_context().span_id
            leave(*left)

    asyncio.run(astreams())
    print(json.dumps(opened))


if __name__ == "__main__":
    main(*sys.argv[1:])
