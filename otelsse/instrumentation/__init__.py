"""``SSEInstrumentor``: observe every SSE response read through httpx, httpx2 or requests.

    import otelsse
    otelsse.instrument()        # or: opentelemetry-instrument python app.py

It wraps ``httpx.Client.send``/``AsyncClient.send`` (and httpx2's) and
``requests.Session.request``; see ``_httpx.py`` and ``_requests.py`` for how each taps the body
and ``_observer.py`` for what they share. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otelsse``
turns the zero-code path off.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap

from .. import semconv
from ..monitor import Limits
from ..routes import Route, register_route, unregister_route
from ..telemetry import Telemetry
from ._httpx import async_send_wrapper, sync_send_wrapper
from ._observer import Settings
from ._requests import request_wrapper

__all__ = ["CLIENTS", "EXCLUDED_URLS_ENV", "SSEInstrumentor"]

_LOG = logging.getLogger("otelsse")

#: The client libraries otelsse can patch, for the ``clients`` option.
CLIENTS = ("httpx", "httpx2", "requests")
#: Comma-separated regular expressions; a request whose URL matches one is not observed.
EXCLUDED_URLS_ENV = "OTEL_PYTHON_OTELSSE_EXCLUDED_URLS"
_GENERAL_EXCLUDED_URLS_ENV = "OTEL_PYTHON_EXCLUDED_URLS"

# (client, module, class, method, wrapper factory)
_TARGETS: tuple[tuple[str, str, str, str, Callable[[Settings], Callable[..., Any]]], ...] = (
    ("httpx", "httpx", "Client", "send", sync_send_wrapper),
    ("httpx", "httpx", "AsyncClient", "send", async_send_wrapper),
    ("httpx2", "httpx2", "Client", "send", sync_send_wrapper),
    ("httpx2", "httpx2", "AsyncClient", "send", async_send_wrapper),
    ("requests", "requests.sessions", "Session", "request", request_wrapper),
)


class SSEInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """The OpenTelemetry instrumentor for SSE streams (entry point ``otelsse``).

    ``instrument()`` options, all optional (``opentelemetry-instrument`` passes none):

    - ``tracer_provider``, ``meter_provider``: default the global providers.
    - ``limits``: a ``Limits`` for every observed stream.
    - ``routes``: extra ``Route`` objects to register (removed again by ``uninstrument()``).
    - ``excluded_urls``: regular expressions (a list, or one comma-separated string); defaults
      to ``$OTEL_PYTHON_OTELSSE_EXCLUDED_URLS``, then ``$OTEL_PYTHON_EXCLUDED_URLS``.
    - ``clients``: which of ``"httpx"``, ``"httpx2"``, ``"requests"`` to patch (default: every
      one that is installed).
    - ``max_model_names``: distinct model names in metrics before ``_OTHER`` (default 50).
    """

    # Class-level on purpose: BaseInstrumentor is a singleton, but Python runs __init__ again on
    # every ``SSEInstrumentor()``, which would forget what is patched. Rebound, never mutated
    # in place, so instances never share a list by accident.
    _patched: tuple[tuple[type, str], ...] = ()
    _routes: tuple[str, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        # Any one of the clients is enough, which a list of requirements cannot say; the
        # distribution's ``instruments-any`` extra says it to the auto-instrumentation loader.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        clients = set(kwargs.get("clients", CLIENTS))
        unknown = clients.difference(CLIENTS)
        if unknown:  # a programming error of the caller, not a failure of otelsse
            raise ValueError(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
        try:
            self._patch(**kwargs)
        except Exception:
            # opentelemetry-instrument re-raises whatever an instrumentor raises, which would stop
            # the application from starting: undo what was done and stay out of the way.
            _LOG.debug("otelsse could not instrument; nothing is patched", exc_info=True)
            self._uninstrument()

    def _patch(
        self,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        limits: Limits | None = None,
        routes: Iterable[Route] = (),
        excluded_urls: str | Iterable[str] | None = None,
        clients: Iterable[str] = CLIENTS,
        max_model_names: int = semconv.DEFAULT_MAX_MODEL_NAMES,
        **_ignored: Any,
    ) -> None:
        for route in routes:
            register_route(route.name, route.adapter, matches=route.matches, replace=True)
            self._routes = (*self._routes, route.name)
        settings = Settings(
            Telemetry(tracer_provider, meter_provider, max_model_names=max_model_names),
            limits or Limits(),
            _excluded_urls(excluded_urls),
        )
        for client, module_name, class_name, method, make_wrapper in _TARGETS:
            if client not in clients:
                continue
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            owner = getattr(module, class_name)
            wrapt.wrap_function_wrapper(owner, method, make_wrapper(settings))
            self._patched = (*self._patched, (owner, method))

    def _uninstrument(self, **kwargs: Any) -> None:
        patched, self._patched = self._patched, ()
        for owner, method in reversed(patched):
            unwrap(owner, method)
        routes, self._routes = self._routes, ()
        for name in routes:
            unregister_route(name)


def _excluded_urls(option: str | Iterable[str] | None) -> re.Pattern[str] | None:
    if option is None:
        option = os.environ.get(EXCLUDED_URLS_ENV) or os.environ.get(_GENERAL_EXCLUDED_URLS_ENV)
    if option is None:
        return None
    patterns = option.split(",") if isinstance(option, str) else list(option)
    patterns = [pattern.strip() for pattern in patterns if pattern.strip()]
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns)) if patterns else None
