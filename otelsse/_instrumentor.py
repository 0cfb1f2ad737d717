"""``SSEInstrumentor``, the OpenTelemetry instrumentor (entry point ``otelsse``): options, and
patching every client library's targets.

    import otelsse
    otelsse.instrument()        # or: opentelemetry-instrument python app.py

Each client library's shape, wrappers and taps are its module of ``otelsse._clients``; what a
wrapper decides and observes is ``otelsse._observe``'s. ``instrument()`` and ``uninstrument()``
are the idempotent, silent entry points the package exports.
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otelsse`` turns the zero-code path off.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, get_args

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap

from . import semconv
from ._clients import CLIENT_MODULES, get_client
from ._monitor import Limits, Outcome
from ._observe import GenAISpan, Settings
from ._strict import STRICT_ENV, StrictOption, strict_outcomes
from ._telemetry import Telemetry
from .routes import (
    Route,
    get_route,
    register_host,
    register_route,
    unregister_host,
    unregister_route,
)

if TYPE_CHECKING:
    from .recorder import FlightRecorder

__all__ = [
    "EXCLUDED_URLS_ENV",
    "HOST_PROFILES_ENV",
    "OPTIONS",
    "RECORDER_DIR_ENV",
    "SSEInstrumentor",
    "instrument",
    "uninstrument",
]

_LOG = logging.getLogger("otelsse")

#: Comma-separated regular expressions; a request whose URL matches one is not observed.
EXCLUDED_URLS_ENV = "OTEL_PYTHON_OTELSSE_EXCLUDED_URLS"
_GENERAL_EXCLUDED_URLS_ENV = "OTEL_PYTHON_EXCLUDED_URLS"
#: ``host=route:profile`` pairs, comma-separated: ``host_profiles`` for zero-code setups.
HOST_PROFILES_ENV = "OTEL_PYTHON_OTELSSE_HOST_PROFILES"
#: A directory: the flight recorder (``recorder``) for zero-code setups, with its defaults.
RECORDER_DIR_ENV = "OTEL_PYTHON_OTELSSE_RECORDER_DIR"
#: Every option ``instrument()`` takes; any other name is a ``TypeError``.
OPTIONS = (
    "clients",
    "excluded_urls",
    "genai_span",
    "host_profiles",
    "limits",
    "max_model_names",
    "max_server_addresses",
    "meter_provider",
    "recorder",
    "routes",
    "strict",
    "tracer_provider",
)


class SSEInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """The OpenTelemetry instrumentor for SSE streams (entry point ``otelsse``).

    ``instrument()`` options, all optional (``opentelemetry-instrument`` passes none):

    - ``tracer_provider``, ``meter_provider``: default the global providers.
    - ``limits``: a ``Limits`` for every observed stream.
    - ``routes``: extra ``Route`` classes to register, host profiles too (removed again by
      ``uninstrument()``).
    - ``host_profiles``: host -> host profile (its ``route:profile`` name or class), for
      gateways of your own that bend a contract, e.g.
      ``{"llm.internal.example": "openai.chat_completions:no_done"}`` (``".example.com"`` for
      every subdomain); defaults to ``$OTEL_PYTHON_OTELSSE_HOST_PROFILES``
      (``host=route:profile,...``), where an unknown profile is left out with one warning.
    - ``excluded_urls``: regular expressions (a list, or one comma-separated string); defaults
      to ``$OTEL_PYTHON_OTELSSE_EXCLUDED_URLS``, then ``$OTEL_PYTHON_EXCLUDED_URLS``. A pattern
      that is not a valid regular expression is left out, with one warning.
    - ``clients``: which of ``"httpx"``, ``"httpx2"``, ``"requests"``, ``"aiohttp"``,
      ``"botocore"`` to patch (default: every one that is installed). A client sending for
      another (httpx on an aiohttp transport) is left to the outermost one: each request is
      observed once.
    - ``max_model_names``: distinct model names in metrics before ``_OTHER`` (default 50).
    - ``max_server_addresses``: distinct ``server.address`` values in metrics before ``_OTHER``
      (default 20).
    - ``genai_span``: beside another instrumentation's GenAI span for the same call
      (opentelemetry-instrumentation-openai-v2, anthropic's built-in tracing), ``"beside"``
      (default) leaves it what it owns (usage, its GenAI metrics); ``"attach"`` also copies
      otelsse's ``otelsse.*`` stream-integrity attributes onto it while it is open.
    - ``recorder``: a ``FlightRecorder`` that keeps a redacted skeleton of failed (or sampled)
      streams; defaults to one in ``$OTEL_PYTHON_OTELSSE_RECORDER_DIR`` when that is set (a
      directory that cannot be created leaves the recorder out, with one warning).
    - ``strict``: strict mode (docs/users/strict.md): ``True`` makes a stream whose verdict is
      one of ``STRICT_DEFAULT`` raise ``StreamFault`` in the application's own read, also as
      the client library's error for a cut body; or the outcome names to refuse; ``False``
      (default) observes only. Defaults to ``$OTEL_PYTHON_OTELSSE_STRICT`` (``true``, or
      names, comma-separated; an unknown name is left out with one warning).
      ``with otelsse.strict(...)`` overrides it for the requests sent in a block.

    The GenAI client metric names follow ``$OTEL_SEMCONV_STABILITY_OPT_IN``
    (``gen_ai_latest_experimental`` selects the latest experimental ones).

    Any other option raises ``TypeError``; an unknown client or host profile, ``ValueError``.
    """

    # Class-level on purpose: BaseInstrumentor is a singleton, but Python runs __init__ again on
    # every ``SSEInstrumentor()``, which would forget what is patched. Rebound, never mutated
    # in place, so instances never share a list by accident.
    _patched: tuple[tuple[type, str], ...] = ()
    _routes: tuple[str, ...] = ()
    _hosts: tuple[str, ...] = ()

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
        strict_outcomes(kwargs.get("strict"))  # an unknown outcome raises ValueError here
        host_profiles = _host_profiles(kwargs.pop("host_profiles", None))
        try:
            for route in kwargs.pop("routes", ()):
                register_route(route, replace=True)
                self._routes = (*self._routes, route.full_name())
            for host, profile in host_profiles:
                register_host(host, profile)
                self._hosts = (*self._hosts, host)
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
        excluded_urls: str | Iterable[str] | None = None,
        clients: Iterable[str] = tuple(CLIENT_MODULES),
        max_model_names: int = semconv.DEFAULT_MAX_MODEL_NAMES,
        max_server_addresses: int = semconv.DEFAULT_MAX_SERVER_ADDRESSES,
        genai_span: GenAISpan = "beside",
        recorder: FlightRecorder | None = None,
        strict: StrictOption = None,
    ) -> None:
        if recorder is not None and recorder.limits != (limits or Limits()):
            # A replay judges with the recorder's limits: a buffer_limit would not replay.
            _LOG.warning("otelsse: the recorder's limits differ from instrument()'s limits")
        if genai_span not in get_args(GenAISpan):
            raise ValueError(f"genai_span must be one of {get_args(GenAISpan)}, not {genai_span!r}")
        telemetry = Telemetry(
            tracer_provider,
            meter_provider,
            max_model_names=max_model_names,
            max_server_addresses=max_server_addresses,
            semconv_opt_in=os.environ.get(semconv.SEMCONV_OPT_IN_ENV),
        )
        settings = Settings(
            telemetry,
            limits or Limits(),
            _excluded_urls(excluded_urls),
            genai_span,
            recorder if recorder is not None else _env_recorder(limits, telemetry),
            strict=strict_outcomes(strict) if strict is not None else _env_strict(),
        )
        for library in CLIENT_MODULES:
            if library not in clients:
                continue
            patched: list[tuple[Any, str]] = []
            try:
                for owner, method, make_wrapper in get_client(library).targets():
                    wrapt.wrap_function_wrapper(owner, method, make_wrapper(settings))
                    patched.append((owner, method))
            except ImportError:  # the library is not installed
                continue
            except Exception as exc:
                # One library of a shape otelsse does not know costs that library only: it is
                # left as it was, and the others are instrumented.
                for owner, method in reversed(patched):
                    unwrap(owner, method)
                telemetry.count_error(exc, "patch")
                _LOG.warning("otelsse leaves %s unpatched (%s)", library, type(exc).__name__)
                continue
            self._patched = (*self._patched, *patched)

    def _uninstrument(self, **kwargs: Any) -> None:
        patched, self._patched = self._patched, ()
        for owner, method in reversed(patched):
            unwrap(owner, method)
        hosts, self._hosts = self._hosts, ()
        for host in hosts:
            unregister_host(host)
        routes, self._routes = self._routes, ()
        for name in routes:
            unregister_route(name)


def instrument(**options: Any) -> None:
    """Observe the streams read through httpx, httpx2, requests, aiohttp and botocore from now
    on (SSE; Bedrock's event streams).

    Idempotent and silent: a second call changes nothing (``uninstrument()`` first to change
    options). Options: see ``SSEInstrumentor``; ``opentelemetry-instrument`` does the same with
    none.
    """
    instrumentor = SSEInstrumentor()
    # BaseInstrumentor would log a warning on the second call; "idempotent" means no noise.
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(**options)


def uninstrument() -> None:
    """Undo ``instrument()``: every patched method is restored."""
    SSEInstrumentor().uninstrument()


def _host_profiles(
    option: Mapping[str, str | type[Route]] | None,
) -> list[tuple[str, str | type[Route]]]:
    """The ``host_profiles`` option, or the environment's pairs when it is not given.

    A wrong option is the caller's programming error (``ValueError``); a wrong environment entry
    is left out with a warning, so that a typo cannot stop the application from starting.
    """
    if option is not None:
        for host, profile in option.items():
            try:
                chosen = get_route(profile) if isinstance(profile, str) else profile
            except KeyError as exc:
                raise ValueError(f"host_profiles[{host!r}]: {exc.args[0]}") from None
            if chosen.profile is None:
                raise ValueError(f"host_profiles[{host!r}]: {chosen.full_name()!r} is a route")
        return list(option.items())
    pairs: list[tuple[str, str | type[Route]]] = []
    for item in os.environ.get(HOST_PROFILES_ENV, "").split(","):
        host, _, profile = (part.strip() for part in item.partition("="))
        if not item.strip():
            continue
        try:
            if not host or get_route(profile).profile is None:
                raise KeyError(profile)
        except KeyError:
            _LOG.warning("otelsse ignores the %s entry %r", HOST_PROFILES_ENV, item.strip())
            continue
        pairs.append((host, profile))
    return pairs


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


def _env_strict() -> frozenset[Outcome]:
    """The outcomes ``$OTEL_PYTHON_OTELSSE_STRICT`` asks strict mode to refuse.

    An unknown name is left out with one warning: a typo neither stops the application nor
    turns strict mode off (with no valid name left, the default outcomes are refused).
    """
    value = os.environ.get(STRICT_ENV, "")
    try:
        return strict_outcomes(value)
    except ValueError:
        pass
    chosen: set[Outcome] = set()
    for name in value.split(","):
        try:
            chosen |= strict_outcomes([name])
        except ValueError as exc:
            _LOG.warning("otelsse ignores the %s entry %r: %s", STRICT_ENV, name.strip(), exc)
    return frozenset(chosen) or strict_outcomes(True)


def _env_recorder(limits: Limits | None, telemetry: Telemetry) -> FlightRecorder | None:
    """The recorder ``$OTEL_PYTHON_OTELSSE_RECORDER_DIR`` asks for, if it can be set up.

    It is an optional part: a directory that cannot be created costs the recordings only. The
    instrumentation goes on without it, the failure counted (stage ``record``) and warned about.
    """
    directory = os.environ.get(RECORDER_DIR_ENV)
    if not directory:
        return None
    from .recorder import FlightRecorder

    try:
        # A replay must judge with the live monitors' ceilings.
        return FlightRecorder(directory, limits=limits)
    except Exception as exc:
        telemetry.count_error(exc, "record")
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        _LOG.warning(
            "otelsse records no streams: the %s directory %r cannot be used (%s)",
            RECORDER_DIR_ENV,
            directory,
            why,
        )
        return None
