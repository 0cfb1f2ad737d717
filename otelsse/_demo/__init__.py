"""``otelsse demo``: a local fake provider that misbehaves on purpose, and real clients streaming
from it with otelsse instrumented (the ``demo`` extra).

``otelsse._demo.provider`` is the fake provider (standard library only: ``otelsse demo
--provider-only`` and the examples need nothing else); ``otelsse._demo.run`` drives the openai and
anthropic SDKs, httpx, httpx2 and requests against it with a real OpenTelemetry SDK and prints a
summary read back from the exported metrics. Only the command line imports this package.
"""
