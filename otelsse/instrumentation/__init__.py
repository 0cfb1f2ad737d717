"""``SSEInstrumentor``: observe every SSE response read through httpx, httpx2 or requests.

    import otelsse
    otelsse.instrument()        # or: opentelemetry-instrument python app.py

It wraps ``httpx.Client.send``/``AsyncClient.send`` (and httpx2's) and
``requests.Session.request``. Each client library is one module here (``_httpx.py`` for httpx
and httpx2, ``_requests.py``) that owns its shape for both the instrumentation and the enforcing
reader, registered in ``_client.CLIENT_MODULES``; ``_observer.py`` is what they share, ``_tee.py``
the tee, ``_content.py`` content-decoding. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otelsse``
turns the zero-code path off.

Importing this package loads no OpenTelemetry: the enforcing reader uses the client modules
without it, and ``SSEInstrumentor`` is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._client import CLIENT_MODULES, Client, client_of, get_client

if TYPE_CHECKING:
    from ._instrumentor import (
        EXCLUDED_URLS_ENV,
        HOST_PROFILES_ENV,
        OPTIONS,
        RECORDER_DIR_ENV,
        SSEInstrumentor,
    )

__all__ = [
    "CLIENT_MODULES",
    "EXCLUDED_URLS_ENV",
    "HOST_PROFILES_ENV",
    "OPTIONS",
    "RECORDER_DIR_ENV",
    "Client",
    "SSEInstrumentor",
    "client_of",
    "get_client",
]


def __getattr__(name: str) -> Any:
    if name in (
        "SSEInstrumentor", "EXCLUDED_URLS_ENV", "HOST_PROFILES_ENV", "OPTIONS", "RECORDER_DIR_ENV",
    ):  # fmt: skip
        from . import _instrumentor

        return getattr(_instrumentor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
