"""Tests of ``otelsse.instrumentation``, driving the clients through ``tests/_clients.py``."""
