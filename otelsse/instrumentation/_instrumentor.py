"""``SSEInstrumentor``, the OpenTelemetry instrumentor (entry point ``otelsse``): options, and
patching every client library's targets."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Iterable
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap

from .. import semconv
from ..monitor import Limits
from ..routes import Route, register_route, unregister_route
from ..telemetry import Telemetry
from ._client import CLIENT_MODULES, get_client
from ._observer import Settings

__all__ = ["EXCLUDED_URLS_ENV", "OPTIONS", "SSEInstrumentor"]

_LOG = logging.getLogger("otelsse")

#: Comma-separated regular expressions; a request whose URL matches one is not observed.
EXCLUDED_URLS_ENV = "OTEL_PYTHON_OTELSSE_EXCLUDED_URLS"
_GENERAL_EXCLUDED_URLS_ENV = "OTEL_PYTHON_EXCLUDED_URLS"
#: Every option ``instrument()`` takes; any other name is a ``TypeError``.
OPTIONS = (
    "clients",
    "excluded_urls",
    "limits",
    "max_model_names",
    "meter_provider",
    "routes",
    "tracer_provider",
)


class SSEInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """The OpenTelemetry instrumentor for SSE streams (entry point ``otelsse``).

    ``instrument()`` options, all optional (``opentelemetry-instrument`` passes none):

    - ``tracer_provider``, ``meter_provider``: default the global providers.
    - ``limits``: a ``Limits`` for every observed stream.
    - ``routes``: extra ``Route`` classes to register (removed again by ``uninstrument()``).
    - ``excluded_urls``: regular expressions (a list, or one comma-separated string); defaults
      to ``$OTEL_PYTHON_OTELSSE_EXCLUDED_URLS``, then ``$OTEL_PYTHON_EXCLUDED_URLS``. A pattern
      that is not a valid regular expression is left out, with one warning.
    - ``clients``: which of ``"httpx"``, ``"httpx2"``, ``"requests"`` to patch (default: every
      one that is installed).
    - ``max_model_names``: distinct model names in metrics before ``_OTHER`` (default 50).

    Any other option raises ``TypeError``; an unknown client, ``ValueError``.
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
        # Programming errors of the caller, not failures of otelsse: raised, nothing patched.
        unknown = kwargs.keys() - set(OPTIONS)
        if unknown:
            raise TypeError(
                f"instrument() got unknown options {sorted(unknown)}; valid: {', '.join(OPTIONS)}"
            )
        known = list(CLIENT_MODULES)
        clients = set(kwargs.get("clients", known))
        if not clients <= set(known):
            unknown = clients.difference(known)
            raise ValueError(f"unknown clients {sorted(unknown)}; known: {', '.join(known)}")
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
        routes: Iterable[type[Route]] = (),
        excluded_urls: str | Iterable[str] | None = None,
        clients: Iterable[str] = tuple(CLIENT_MODULES),
        max_model_names: int = semconv.DEFAULT_MAX_MODEL_NAMES,
    ) -> None:
        for route in routes:
            register_route(route, replace=True)
            self._routes = (*self._routes, route.name)
        settings = Settings(
            Telemetry(tracer_provider, meter_provider, max_model_names=max_model_names),
            limits or Limits(),
            _excluded_urls(excluded_urls),
        )
        for library in CLIENT_MODULES:
            if library not in clients:
                continue
            try:
                targets = get_client(library).targets()
            except ImportError:  # the library is not installed
                continue
            for owner, method, make_wrapper in targets:
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
    """One regular expression of every valid pattern; each invalid one is warned about."""
    if option is None:
        option = os.environ.get(EXCLUDED_URLS_ENV) or os.environ.get(_GENERAL_EXCLUDED_URLS_ENV)
    if option is None:
        return None
    patterns = option.split(",") if isinstance(option, str) else list(option)
    valid = []
    for pattern in (pattern.strip() for pattern in patterns):
        if not pattern:
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            # A typo must not switch off everything else: this pattern alone is left out.
            _LOG.warning("otelsse ignores the excluded_urls pattern %r: %s", pattern, exc)
            continue
        valid.append(pattern)
    return re.compile("|".join(f"(?:{pattern})" for pattern in valid)) if valid else None
