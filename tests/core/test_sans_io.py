"""The core imports nothing from the HTTP clients, OpenTelemetry or wrapt (DESIGN §1).

Every module of ``otelsse/_core`` is checked, found on disk so a new one cannot be forgotten, with
the modules built on it alone: the routes, the monitor, the reader (which finds a response's
client module only when it reads one) and the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import otelsse

CORE = Path(otelsse.__file__).parent / "_core"
CORE_MODULES = [
    "otelsse",
    *(f"otelsse._core.{path.stem}" for path in sorted(CORE.glob("*.py"))),
    "otelsse.semconv",
    "otelsse.routes",
    "otelsse._monitor",
    "otelsse._reader",
    "otelsse._clients",
    "otelsse.gate",
    "otelsse._cli",
]
FORBIDDEN = ["httpx", "httpx2", "requests", "opentelemetry", "wrapt", "urllib3", "anyio"]


def test_core_modules_import_no_client_telemetry_or_proxy_library() -> None:
    program = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", program], text=True)))
    assert len(CORE_MODULES) > 10
    assert "otelsse" in loaded
    assert loaded.isdisjoint(FORBIDDEN), loaded & set(FORBIDDEN)
