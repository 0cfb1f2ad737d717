"""Shared fixtures. ``otel``: otelsse instrumented against a real in-memory OpenTelemetry SDK."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._otel import Telemetry


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    telemetry = Telemetry().install()
    try:
        yield telemetry
    finally:
        telemetry.uninstall()
