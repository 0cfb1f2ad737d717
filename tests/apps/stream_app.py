"""An application that streams chat completions and knows nothing about OpenTelemetry.

    python stream_app.py URL [URL ...]

Each URL is streamed once through every client (httpx and httpx2, sync and async, requests),
reading the body as it arrives. On stderr it prints one line, ``APP-RESULT {url: {client:
sha256 of the body received}}``, so that a test can check the application was unaffected.
The tests also import ``stream`` to drive the same code in-process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

import httpx
import httpx2
import requests

CLIENTS = ("httpx", "httpx-async", "httpx2", "httpx2-async", "requests")
REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
TIMEOUT = 10.0


async def _stream_async(module: Any, url: str) -> bytes:
    received = bytearray()
    async with (
        module.AsyncClient(timeout=TIMEOUT) as client,
        client.stream("POST", url, json=REQUEST) as response,
    ):
        async for chunk in response.aiter_bytes():
            received += chunk
    return bytes(received)


def stream(client: str, url: str) -> bytes:
    """POST a streaming chat request to ``url`` with ``client``; return the body it read."""
    if client == "requests":
        with requests.post(url, json=REQUEST, stream=True, timeout=TIMEOUT) as response:
            return b"".join(response.iter_content(chunk_size=None))
    name, _, mode = client.partition("-")
    module: Any = httpx if name == "httpx" else httpx2
    if mode == "async":
        return asyncio.run(_stream_async(module, url))
    with module.Client(timeout=TIMEOUT) as session, session.stream("POST", url, json=REQUEST) as r:
        return b"".join(r.iter_bytes())


def main(urls: list[str]) -> None:
    results = {
        url: {client: hashlib.sha256(stream(client, url)).hexdigest() for client in CLIENTS}
        for url in urls
    }
    print("APP-RESULT " + json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
