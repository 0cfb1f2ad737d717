"""The openai SDK streaming a chat completion and a Response, observed by otelsse.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/openai_sdk.py [--scenario truncated]

Each stream prints its ``otelsse.stream`` span (look for ``otelsse.outcome``), then what the
application itself saw. Some failures never reach the application: with ``--scenario
tool_call_invalid`` the SDK reports a finished tool call (``finish_reason=tool_calls``,
``status=completed``) whose arguments were cut in half; only the span says ``payload_error``.
"""

from __future__ import annotations

import httpx2
import openai
from _common import TIMEOUT, instrument, parse_args

base_url, headers = parse_args(__doc__)
instrument()  # before the first request; the SDK's client (httpx2) is patched from now on
client = openai.OpenAI(
    base_url=f"{base_url}/v1",
    api_key="not-needed-for-the-fake-provider",
    default_headers=headers,
    max_retries=0,  # a retry would be a second stream; keep one per call here
    timeout=TIMEOUT,
)

print("== openai: chat.completions.create(stream=True)")
try:
    text, finish_reason = [], None
    with client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Why do streamed answers need a terminal event?"}],
        stream=True,
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                finish_reason = choice.finish_reason or finish_reason
    print(f"the application got {len(''.join(text))} characters, finish_reason={finish_reason}")
except (openai.OpenAIError, httpx2.HTTPError) as error:
    print(f"the application got {type(error).__name__}")

print("== openai: responses.stream()")
try:
    with client.responses.stream(model="gpt-4.1", input="And for the Responses API?") as events:
        for _ in events:
            pass  # a UI would render response.output_text.delta events here
        response = events.get_final_response()
    print(f"the application got {len(response.output_text)} characters, status={response.status}")
except (openai.OpenAIError, httpx2.HTTPError, RuntimeError) as error:
    # The helper raises RuntimeError when no response.completed event arrived.
    print(f"the application got {type(error).__name__}")
