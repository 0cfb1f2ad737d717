"""Tests of ``otelsse.instrumentation``: the five clients through the harness in ``tests/_clients.py``."""
