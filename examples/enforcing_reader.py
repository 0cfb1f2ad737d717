"""The enforcing reader: act on a tool call only once the stream has really ended.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/enforcing_reader.py [--scenario tool_call_invalid | truncated | ...]

``otelsse.StreamReader`` hands out text as it arrives, marked provisional, and releases the
result (text, tool calls with their arguments parsed and checked against the tool's JSON
Schema) only after the route's terminal event. Anything else raises ``otelsse.StreamFault``
whose ``code`` is stable: ``payload_error`` for cut tool arguments, ``truncated``, ``timeout``,
``provider_error``, ``protocol_error`` (e.g. HTTP 429), ``incomplete``, ``tool_schema_error``.
otelsse is also instrumented here, so the span shows the same verdict as telemetry.
"""

from __future__ import annotations

import json

import httpx
from _common import TIMEOUT, instrument, parse_args

import otelsse

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}

base_url, headers = parse_args(__doc__)
url = f"{base_url}/v1/chat/completions"
tools = [{"type": "function", "function": WEATHER_TOOL}]
body = {
    "model": "gpt-4o-mini",
    "stream": True,
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": tools,
}

instrument()
print("== otelsse.StreamReader(response, tools=...)")
with (
    httpx.Client(timeout=TIMEOUT) as client,
    client.stream("POST", url, json=body, headers=headers) as response,
):
    try:
        # The same tools list the request sent: the reader takes each tool's JSON Schema from it.
        reader = otelsse.StreamReader(response, tools=tools)
        provisional = sum(len(delta.text) for delta in reader)  # what a UI could show so far
        result = reader.result()
    except otelsse.StreamFault as fault:
        # A program branches on the code; str(fault) adds metadata for people, never content.
        print(f"refused: {fault.code}")
    else:
        print(f"released text: {result.text!r} ({provisional} characters shown provisionally)")
        for call in result.tool_calls:
            print(f"released tool call: {call.name} {json.dumps(call.arguments)}")
        print(f"stop reason: {result.stop_reason}")
