"""requests reading a Gemini ``streamGenerateContent?alt=sse`` stream, observed by otelsse.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/requests_sse.py [--scenario timeout]

Gemini has no end-of-stream event: a stream is finished when a chunk carries ``finishReason``.
The loop below prints what it got; the ``otelsse.stream`` span says whether that was all.
"""

from __future__ import annotations

import json

import requests
from _common import TIMEOUT, instrument, parse_args

base_url, headers = parse_args(__doc__)
url = f"{base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
body = {"contents": [{"role": "user", "parts": [{"text": "Why do streams need an end?"}]}]}

instrument()  # requests.Session.request is patched from here on
print("== requests: post(stream=True) + iter_lines()")
try:
    text, finish_reason = [], None
    with requests.post(url, json=body, headers=headers, stream=True, timeout=TIMEOUT) as response:
        response.raise_for_status()
        for line in response.iter_lines(decode_unicode=True):
            if not line.startswith("data:"):
                continue
            for candidate in json.loads(line[len("data:") :]).get("candidates", ()):
                text += [part.get("text", "") for part in candidate["content"]["parts"]]
                finish_reason = candidate.get("finishReason", finish_reason)
    print(f"the application got {len(''.join(text))} characters, finishReason={finish_reason}")
except (requests.RequestException, json.JSONDecodeError) as error:
    # A bad status, a transport error or read timeout mid-stream, or half a JSON line at a cut.
    print(f"the application got {type(error).__name__}")
