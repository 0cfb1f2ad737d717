"""The core imports nothing from the HTTP clients, OpenTelemetry or wrapt (DESIGN §1)."""

from __future__ import annotations

import json
import subprocess
import sys

CORE_MODULES = [
    "otelsse",
    "otelsse._decode",
    "otelsse._framing",
    "otelsse._state",
    "otelsse._json",
    "otelsse.events",
    "otelsse.semconv",
    "otelsse.routes",
    "otelsse.monitor",
    "otelsse.reader",
    "otelsse.cli",
]
FORBIDDEN = ["httpx", "httpx2", "requests", "opentelemetry", "wrapt", "urllib3", "anyio"]


def test_core_modules_import_no_client_telemetry_or_proxy_library() -> None:
    program = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", program], text=True)))
    assert "otelsse" in loaded
    assert loaded.isdisjoint(FORBIDDEN), loaded & set(FORBIDDEN)
