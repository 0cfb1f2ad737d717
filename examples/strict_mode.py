"""Strict mode: a cut stream raises in the openai SDK's own loop, and the application retries it.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/strict_mode.py [--scenario clean_cut]

The first attempt asks the fake provider for the scenario (``clean_cut`` unless told: the body
ends cleanly half-way through the answer, which the SDK alone reports as a finished stream).
With ``instrument(strict=True)`` the SDK's loop raises ``openai.APIConnectionError`` caused by
``otelsse.StreamFault``, the network failure it is, and the application retries as the openai
SDK's documentation says to retry a connection error; the retry gets the whole answer. Two
``otelsse.stream`` spans: the refused one (``otelsse.strict.raised``), then the complete one.
"""

from __future__ import annotations

import sys

import httpx2
import openai
from _common import TIMEOUT, instrument, parse_args

import otelsse

ATTEMPTS = 3
QUESTION = [{"role": "user", "content": "Why do streamed answers need a terminal event?"}]
base_url, headers = parse_args(__doc__)
scenario = headers or {"x-otelsse-demo-scenario": "clean_cut"}
instrument(strict=True)  # otelsse.instrument(strict=True): OTEL_PYTHON_OTELSSE_STRICT=true
client = openai.OpenAI(
    base_url=f"{base_url}/v1",
    api_key="not-needed-for-the-fake-provider",
    max_retries=0,  # the SDK's retries cover a request that failed before its answer began
    timeout=TIMEOUT,
)

for attempt in range(1, ATTEMPTS + 1):
    try:
        text = []
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "user", "content": "Why do streamed answers need a terminal event?"}
            ],
            stream=True,
            extra_headers=scenario if attempt == 1 else None,  # the fault, once
        )
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
    except (openai.APIConnectionError, httpx2.TransportError) as error:
        # openai < 3.14 lets the HTTP client's error through unwrapped: the refusal itself.
        cause = error if isinstance(error, otelsse.StreamFault) else error.__cause__
        why = cause.code if isinstance(cause, otelsse.StreamFault) else type(cause).__name__
        print(f"the application got {type(error).__name__} ({why}) on attempt {attempt}, retrying")
        continue
    print(f"the application got {len(''.join(text))} characters on attempt {attempt}")
    break
else:
    sys.exit("no attempt succeeded")
