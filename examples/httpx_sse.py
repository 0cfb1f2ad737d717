"""An application that reads SSE by hand with httpx and httpx2, sync and async, observed by otelsse.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/httpx_sse.py [--scenario rate_limited]

Reading ``data:`` lines off ``iter_lines()`` until ``[DONE]`` is how many applications and
gateways consume an OpenAI-compatible stream. Such a loop cannot tell a finished answer from a
cut one: with ``--scenario truncated`` it may print a short answer and no error, or choke on
half a JSON line; with ``provider_error`` it prints a short answer. The ``otelsse.stream`` span
says which.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
from _common import TIMEOUT, instrument, parse_args

base_url, headers = parse_args(__doc__)
url = f"{base_url}/v1/chat/completions"
body = {
    "model": "gpt-4o-mini",
    "stream": True,
    "messages": [{"role": "user", "content": "Why do streamed answers need a terminal event?"}],
}


def content(line: str) -> str | None:
    """The text of one ``data:`` line of a chat completion stream; None at ``[DONE]``."""
    if not line.startswith("data:"):
        return ""  # blank separators, comments, other fields
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return None
    # Like many hand-written loops, this one skips a chunk without choices, such as the
    # provider's {"error": ...}: the answer just looks short. The span says provider_error.
    choices = json.loads(data).get("choices", ())
    return "".join(choice["delta"].get("content") or "" for choice in choices)


def read_sync(module: Any) -> str:
    with (
        module.Client(timeout=TIMEOUT) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        response.raise_for_status()
        text = []
        for line in response.iter_lines():
            if (piece := content(line)) is None:
                break
            text.append(piece)
        return "".join(text)


async def read_async(module: Any) -> str:
    async with (
        module.AsyncClient(timeout=TIMEOUT) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        response.raise_for_status()
        text = []
        async for line in response.aiter_lines():
            if (piece := content(line)) is None:
                break
            text.append(piece)
        return "".join(text)


instrument()
for module in (httpx, httpx2):  # the same API: httpx2 is what the openai and anthropic SDKs use
    for mode in ("sync", "async"):
        print(f"== {module.__name__} {mode}: client.stream() + iter_lines()")
        try:
            text = read_sync(module) if mode == "sync" else asyncio.run(read_async(module))
            print(f"the application got {len(text)} characters")
        except (module.HTTPError, json.JSONDecodeError) as error:
            # A bad status, a transport error mid-stream, or half a JSON line left at a cut.
            print(f"the application got {type(error).__name__}")
