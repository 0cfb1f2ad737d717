"""An ordinary application: it streams a chat completion with the openai SDK and knows nothing
about OpenTelemetry or otelsse. ``run.sh`` runs it under ``opentelemetry-instrument``, which
finds otelsse's ``opentelemetry_instrumentor`` entry point and instruments it, no code changed.
"""

from __future__ import annotations

import argparse
import os

import httpx2
import openai

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--scenario", help="how the fake provider ends the stream (default: complete)")
scenario = parser.parse_args().scenario
client = openai.OpenAI(
    base_url=os.environ.get("OTELSSE_DEMO_URL", "http://127.0.0.1:8400").rstrip("/") + "/v1",
    api_key="not-needed-for-the-fake-provider",
    default_headers={"x-otelsse-demo-scenario": scenario} if scenario else {},
    max_retries=0,
    timeout=2.0,  # shorter than the fake provider's stall on --scenario timeout
)
try:
    with client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Why do streamed answers need a terminal event?"}],
        stream=True,
    ) as stream:
        text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    print(f"the application got {len(text)} characters")
# openai >= 3.14 wraps a connection lost mid-stream in APIConnectionError; earlier 3.x releases
# let httpx2's own transport error through.
except (openai.OpenAIError, httpx2.HTTPError) as error:
    print(f"the application got {type(error).__name__}")
