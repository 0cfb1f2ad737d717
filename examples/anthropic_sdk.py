"""The anthropic SDK streaming messages (the helper and the raw events), observed by otelsse.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/anthropic_sdk.py [--scenario truncated]

Each stream prints its ``otelsse.stream`` span (look for ``otelsse.outcome``), then what the
application itself saw. A connection cut between two events of a body without chunked encoding
ends quietly for the SDK (``stop_reason=None``); the span says ``truncated``.
"""

from __future__ import annotations

import anthropic
import httpx2
from _common import TIMEOUT, instrument, parse_args

base_url, headers = parse_args(__doc__)
instrument()  # before the first request; the SDK's client (httpx2) is patched from now on
client = anthropic.Anthropic(
    base_url=base_url,
    api_key="not-needed-for-the-fake-provider",
    default_headers=headers,
    max_retries=0,  # a retry would be a second stream; keep one per call here
    timeout=TIMEOUT,
)
model, max_tokens = "claude-sonnet-4-6", 256
messages: list[anthropic.types.MessageParam] = [
    {"role": "user", "content": "Why do streamed answers need a terminal event?"}
]
# Errors the SDK raises, and transport errors it lets through while the body is being read.
FAILURES = (anthropic.AnthropicError, httpx2.HTTPError)

print("== anthropic: messages.stream()")
try:
    with client.messages.stream(model=model, max_tokens=max_tokens, messages=messages) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    print(f"the application got {len(text)} characters, stop_reason={message.stop_reason}")
except FAILURES as error:
    print(f"the application got {type(error).__name__}")

print("== anthropic: messages.create(stream=True)")
try:
    with client.messages.create(
        model=model, max_tokens=max_tokens, messages=messages, stream=True
    ) as events:
        types = [event.type for event in events]
    print(f"the application got {len(types)} events, the last {types[-1] if types else None}")
except FAILURES as error:
    print(f"the application got {type(error).__name__}")
