"""An application that streams chat completions and knows nothing about OpenTelemetry.

    python -m tests.apps.stream_app URL [URL ...]     (from the repository root)

Each URL is streamed once through every client of the test harness (``tests/_clients.py``:
httpx and httpx2, sync and async, requests and aiohttp), reading the body as it arrives in the
client's default style. On stderr it prints one line, ``APP-RESULT {url: {client: sha256 of the
body received}}``, so that a test can check the application was unaffected. The tests also import
``stream`` to drive the same code in-process.

It is a module of the ``tests`` package so that it reads with the harness's clients: the
repository root must be on ``sys.path`` (``-m`` from the root puts it there, and
``opentelemetry-instrument`` adds its working directory to ``PYTHONPATH``).
"""

from __future__ import annotations

import hashlib
import json
import sys

from tests._clients import CLIENTS, Client, fetch

REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def stream(client: Client, url: str) -> bytes:
    """POST a streaming chat request to ``url`` with ``client``; return the body it read."""
    got = fetch(client, url, json=REQUEST)
    if got.error is not None:
        raise got.error
    assert isinstance(got.data, bytes)
    return got.data


def main(urls: list[str]) -> None:
    results = {
        url: {client.id: hashlib.sha256(stream(client, url)).hexdigest() for client in CLIENTS}
        for url in urls
    }
    print("APP-RESULT " + json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
