"""What the proxy is told: its upstreams, addresses and limits, from a TOML file and flags;
where its telemetry goes, from the OpenTelemetry SDK's environment variables.

Every check is made here, before anything listens, and fails with one line naming the setting:
an upstream the proxy could be talked into misusing (a base URL with credentials, a query, or a
name that shadows the proxy's own paths) is refused at start, not at the first request; so is
an exporter, protocol or endpoint the proxy cannot export with; so is a strict-mode outcome
strict mode cannot refuse.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

from yarl import URL

from .._monitor import Outcome
from .._observe import strict_outcomes
from ..routes import get_route

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found]

__all__ = [
    "ConfigError",
    "Export",
    "Exports",
    "ProxyConfig",
    "SignalExports",
    "Upstream",
    "load_config",
    "load_exports",
    "parse_address",
]

#: Paths the proxy answers itself; no upstream may take their names.
RESERVED_NAMES = frozenset({"healthz", "readyz", "metrics"})
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


class ConfigError(ValueError):
    """A setting the proxy cannot start with; the message names it."""


@dataclasses.dataclass(frozen=True)
class Upstream:
    """One provider or gateway the proxy forwards to: ``/{name}/rest`` goes to ``url`` + ``rest``.

    ``host_profile`` (``"openai.chat_completions:no_done"``) reads this upstream's streams with a
    host profile, for a gateway that bends its provider's contract on purpose.

    ``strict``: the outcomes strict mode refuses on this upstream's streams (empty: off); None
    takes the proxy's (``ProxyConfig.strict``).
    """

    name: str
    url: str
    host_profile: str | None = None
    strict: frozenset[Outcome] | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or self.name in RESERVED_NAMES:
            reserved = ", ".join(sorted(RESERVED_NAMES))
            raise ConfigError(
                f"upstream name {self.name!r}: lower-case letters, digits, '-', '_' or '.', "
                f"at most 63, and none of {reserved}"
            )
        try:
            given, base = URL(self.url), self.base
        except ValueError:  # yarl's: a host it cannot encode (a control or bidi character)
            raise ConfigError(f"upstream {self.name}: {self.url!r} is not an http(s) URL") from None
        if given.query_string or given.fragment:
            raise ConfigError(f"upstream {self.name}: the URL takes no query or fragment")
        if base.scheme not in ("http", "https") or not base.host:
            raise ConfigError(f"upstream {self.name}: {self.url!r} is not an http(s) URL")
        if base.user is not None or base.password is not None:
            raise ConfigError(f"upstream {self.name}: credentials in the URL are refused")
        if self.host_profile is not None:
            try:
                profile = get_route(self.host_profile)
            except KeyError:
                raise ConfigError(
                    f"upstream {self.name}: no route or profile {self.host_profile!r}"
                ) from None
            if profile.profile is None:
                raise ConfigError(
                    f"upstream {self.name}: {self.host_profile!r} is a route, not a host profile"
                )

    @property
    def base(self) -> URL:
        """The base URL, without a trailing slash on its path."""
        url = URL(self.url)
        return url.with_path(url.path.rstrip("/")) if url.path != "/" else url.with_path("")


@dataclasses.dataclass(frozen=True)
class ProxyConfig:
    """The whole configuration; the defaults suit one proxy beside one application."""

    upstreams: tuple[Upstream, ...]
    listen: tuple[str, int] = ("127.0.0.1", 8787)
    #: Where ``/metrics`` is served for Prometheus; None: no scrape endpoint (OTLP only).
    metrics_listen: tuple[str, int] | None = None
    #: Requests forwarded at once; one more gets a 503 at once rather than a queue. Each holds
    #: two file descriptors (the client's connection and the upstream's): the proxy refuses to
    #: start with more than its descriptor limit carries.
    max_streams: int = 1024
    #: The largest request body forwarded; a larger one gets a 413.
    max_request_bytes: int = 32 * 1024 * 1024
    #: The largest request head (request line and header fields) read; a larger one gets a 431
    #: (a request line alone that long, a 414) and the connection is closed.
    max_header_bytes: int = 64 * 1024
    #: Seconds to connect to an upstream.
    connect_timeout: float = 10.0
    #: Seconds an upstream may stay silent, for its headers and between two body reads.
    idle_timeout: float = 300.0
    #: Seconds a client has, from its request's first byte, to send the whole head; then 408.
    header_timeout: float = 10.0
    #: Seconds a client may stay silent while it sends its request body; then 408.
    body_timeout: float = 30.0
    #: Seconds a connection with no request under way is kept open: a new one before its first
    #: byte, a kept-alive one between two requests.
    keep_alive_timeout: float = 5.0
    #: Seconds in-flight streams get to finish after SIGTERM before they are cancelled.
    drain_timeout: float = 30.0
    #: Bind ``listen`` with SO_REUSEPORT: several proxy processes share the port and the kernel
    #: spreads connections among them (one process per core).
    reuse_port: bool = False
    #: The outcomes strict mode refuses on every upstream that sets none of its own (empty:
    #: off): such a stream ends with its route's own error event (docs/operators/proxy.md).
    strict: frozenset[Outcome] = frozenset()

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ConfigError("no upstream: give --upstream NAME=URL or [upstreams] in --config")
        names = [upstream.name for upstream in self.upstreams]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigError(f"upstream {repeated[0]} is given twice")
        for setting in NUMBERS:
            number(setting, getattr(self, setting))
        if self.metrics_listen is not None and self.metrics_listen == self.listen:
            raise ConfigError("metrics_listen must differ from listen: /metrics has its own port")

    def upstream(self, name: str) -> Upstream | None:
        return next((upstream for upstream in self.upstreams if upstream.name == name), None)

    def strict_for(self, upstream: Upstream) -> frozenset[Outcome]:
        """The outcomes strict mode refuses on ``upstream``'s streams (empty: off)."""
        return self.strict if upstream.strict is None else upstream.strict


def parse_strict(value: object, setting: str) -> frozenset[Outcome]:
    """A strict setting: ``true`` (the default outcomes), ``false``, outcome names as a list or
    one comma-separated string (``"default,terminal_missing"``), as ``otelsse.strict`` takes.

    Raises ConfigError naming the setting for anything else.
    """
    if not (
        isinstance(value, (bool, str))
        or (isinstance(value, list) and all(isinstance(name, str) for name in value))
    ):
        raise ConfigError(f"{setting} must be true, false or outcome names, not {value!r}")
    try:
        return strict_outcomes(value)
    except ValueError as exc:
        raise ConfigError(f"{setting}: {exc}") from None


def parse_address(text: str, setting: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8787`` for IPv6) as a pair."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{setting} {text!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclasses.dataclass(frozen=True)
class _Range:
    """What a numeric setting takes: its kind, and the least value (or the bound it must pass)."""

    kind: type[int] | type[float]
    least: int
    exclusive: bool = False

    def admits(self, value: float) -> bool:
        # NaN compares false with everything: ask for what is valid, never test what is not.
        return math.isfinite(value) and (
            value > self.least if self.exclusive else value >= self.least
        )

    def says(self) -> str:
        unit = "a whole number" if self.kind is int else "a number of seconds"
        return f"{unit}, {'more than' if self.exclusive else 'at least'} {self.least}"


#: Every numeric setting and what it takes; ``number`` is the one place they are checked.
NUMBERS: dict[str, _Range] = {
    "max_streams": _Range(int, 1),
    "max_request_bytes": _Range(int, 1),
    "max_header_bytes": _Range(int, 1),
    "connect_timeout": _Range(float, 0, exclusive=True),
    "idle_timeout": _Range(float, 0, exclusive=True),
    "header_timeout": _Range(float, 0, exclusive=True),
    "body_timeout": _Range(float, 0, exclusive=True),
    "keep_alive_timeout": _Range(float, 0, exclusive=True),
    "drain_timeout": _Range(float, 0),
}


def number(setting: str, value: object) -> int | float:
    """``value``, a flag's text or a number from the file, as ``setting``'s number.

    Raises ConfigError naming the setting and the value for anything else: text that is not a
    number, a bool, a fraction where a whole number goes, NaN, an infinity, or a value below
    the setting's range.
    """
    rule = NUMBERS[setting]
    parsed = _parse(value, rule.kind)
    if parsed is None or not rule.admits(parsed):
        raise ConfigError(f"{setting} must be {rule.says()}, not {value!r}")
    return parsed


def _parse(value: object, kind: type[int] | type[float]) -> int | float | None:
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return None
    if isinstance(value, bool):  # TOML's true is no number, though Python's bool is an int
        return None
    if isinstance(value, int) or (kind is float and isinstance(value, float)):
        return kind(value)
    return None


def parse_upstream(text: str) -> Upstream:
    """``NAME=URL`` (the ``--upstream`` flag)."""
    name, equals, url = text.partition("=")
    if not (name and equals and url):
        raise ConfigError(f"--upstream {text!r}: expected NAME=URL")
    return Upstream(name.strip(), url.strip())


_FILE_SETTINGS = {"listen", "metrics_listen", "reuse_port", "strict", "upstreams", *NUMBERS}


def load_config(path: str | None, overrides: Mapping[str, Any]) -> ProxyConfig:
    """The configuration from the TOML file at ``path`` (if any), then ``overrides`` (the flags
    that were given: None values are ignored; ``upstreams`` are added to the file's)."""
    settings: dict[str, Any] = {}
    upstreams: list[Upstream] = []
    if path is not None:
        try:
            with open(path, "rb") as file:
                document = tomllib.load(file)
        except OSError as exc:
            raise ConfigError(f"--config {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--config {path}: not TOML ({exc})") from None
        unknown = sorted(set(document) - _FILE_SETTINGS)
        if unknown:
            raise ConfigError(f"--config {path}: unknown setting {unknown[0]!r}")
        upstreams.extend(_file_upstreams(document.pop("upstreams", {})))
        settings.update(document)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "upstreams":
            upstreams.extend(value)
        else:
            settings[key] = value
    if settings.get("metrics_listen") == "off":  # a flag turning off what the file turned on
        settings["metrics_listen"] = None
    for key in ("listen", "metrics_listen"):
        if isinstance(settings.get(key), str):
            settings[key] = parse_address(settings[key], key)
    if "reuse_port" in settings and type(settings["reuse_port"]) is not bool:
        raise ConfigError("reuse_port must be true or false")
    if "strict" in settings:
        settings["strict"] = parse_strict(settings["strict"], "strict")
    for key in NUMBERS:
        if key in settings:
            settings[key] = number(key, settings[key])
    return ProxyConfig(upstreams=tuple(upstreams), **settings)


def _file_upstreams(table: object) -> list[Upstream]:
    """``[upstreams.NAME]`` tables: ``url`` and, optionally, ``host_profile`` and ``strict``."""
    if not isinstance(table, dict):
        raise ConfigError("upstreams must be a table: [upstreams.NAME] with url = ...")
    found = []
    for name, fields in table.items():
        if not isinstance(fields, dict) or not isinstance(fields.get("url"), str):
            raise ConfigError(f'upstreams.{name}: needs url = "https://..."')
        unknown = sorted(set(fields) - {"url", "host_profile", "strict"})
        if unknown:
            raise ConfigError(f"upstreams.{name}: unknown setting {unknown[0]!r}")
        strict = fields.get("strict")
        outcomes = None if strict is None else parse_strict(strict, f"upstreams.{name}.strict")
        found.append(Upstream(name, fields["url"], fields.get("host_profile"), outcomes))
    return found


# -- where telemetry goes ----------------------------------------------------------------------
# The OpenTelemetry specification's "SDK Environment Variables" (Exporter Selection) and "OTLP
# Exporter" (Configuration Options, Endpoint URLs for OTLP/HTTP):
# https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/
# https://opentelemetry.io/docs/specs/otel/protocol/exporter/

#: The exporters ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` may name here.
EXPORTERS = ("otlp", "console", "none")
#: The OTLP protocols of the Python SDK's exporters, the specification's default first
#: (``http/json`` has no Python exporter).
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
#: Where an OTLP exporter sends when no endpoint is set (the specification's defaults).
_DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}
#: Exporters the specification names that the proxy offers another way, by signal.
_EXPORTED_OTHERWISE = {
    ("metrics", "prometheus"): "the proxy serves /metrics with --metrics-listen HOST:PORT",
}


@dataclasses.dataclass(frozen=True)
class Export:
    """One exporter of a signal: ``console`` (stdout), or ``otlp`` over ``protocol`` to
    ``endpoint``, the URL the exporter is given as it is."""

    exporter: str
    protocol: str | None = None
    endpoint: str | None = None

    def __str__(self) -> str:
        if self.endpoint is None:
            return self.exporter
        # Said without what may be secret: userinfo, query and fragment.
        shown = URL(self.endpoint).with_user(None).with_query(None).with_fragment(None)
        return f"{self.exporter} {self.protocol} → {shown}"


@dataclasses.dataclass(frozen=True)
class SignalExports:
    """Where one signal (``traces`` or ``metrics``) goes: ``exports``, none or more."""

    signal: str
    exports: tuple[Export, ...] = ()
    #: Nothing exported because nothing was configured: no exporter named and no OTLP endpoint
    #: set. The SDK's default, OTLP to localhost, is not assumed: it would fail at every export
    #: where no collector runs beside the proxy.
    unconfigured: bool = False

    def __str__(self) -> str:
        if self.exports:
            return ", ".join(map(str, self.exports))
        if self.unconfigured:
            variable = f"OTEL_{self.signal.upper()}_EXPORTER"
            return f"none (set OTEL_EXPORTER_OTLP_ENDPOINT, or {variable}=console)"
        return "none"


@dataclasses.dataclass(frozen=True)
class Exports:
    """Where the proxy's telemetry goes, each signal by its own variables."""

    traces: SignalExports
    metrics: SignalExports


def load_exports(environ: Mapping[str, str]) -> Exports:
    """Where telemetry goes by the SDK's variables in ``environ`` (an empty one is unset):

    - ``OTEL_{TRACES,METRICS}_EXPORTER``: ``otlp`` (the default), ``console``, ``none``, or a
      comma-separated list of the first two. Left unset, OTLP is used only when an endpoint is
      set (``SignalExports.unconfigured``); ``otlp`` named sends to the default endpoint too.
    - ``OTEL_EXPORTER_OTLP_{TRACES_,METRICS_,}PROTOCOL``: ``http/protobuf`` (the default) or
      ``grpc``, the signal's own first.
    - ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT``, taken as it is, else
      ``OTEL_EXPORTER_OTLP_ENDPOINT``, a base URL (``v1/traces``, ``v1/metrics`` added for
      ``http/protobuf``), else ``http://localhost:4318`` (``:4317`` for ``grpc``).

    Raises ConfigError naming the variable for an exporter, protocol or endpoint it cannot use.
    """
    return Exports(_signal_exports("traces", environ), _signal_exports("metrics", environ))


def _signal_exports(signal: str, environ: Mapping[str, str]) -> SignalExports:
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    given = environ.get(variable, "").strip()
    names = list(dict.fromkeys(name.strip().lower() for name in given.split(",") if name.strip()))
    for name in names:
        # Refused, as the Python SDK's own configuration refuses an exporter it cannot load
        # (the specification would ignore it with a warning): not a proxy exporting nowhere.
        if name not in EXPORTERS:
            why = _EXPORTED_OTHERWISE.get(
                (signal, name), "the proxy exports with otlp, console or none"
            )
            raise ConfigError(f"{variable} {given!r}: {why}")
    if names == ["none"]:
        return SignalExports(signal)
    if "none" in names:
        raise ConfigError(f"{variable} {given!r}: none goes alone")
    own_endpoint = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    if not names and not (environ.get(own_endpoint) or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return SignalExports(signal, unconfigured=True)
    exports = [
        Export("console") if name == "console" else _otlp(signal, environ)
        for name in names or ["otlp"]
    ]
    return SignalExports(signal, tuple(exports))


def _otlp(signal: str, environ: Mapping[str, str]) -> Export:
    upper = signal.upper()
    protocol_variable = next(
        (
            name
            for name in (f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            if environ.get(name, "").strip()
        ),
        None,
    )
    protocol = environ[protocol_variable].strip() if protocol_variable else OTLP_PROTOCOLS[0]
    if protocol not in OTLP_PROTOCOLS:
        raise ConfigError(
            f"{protocol_variable} {protocol!r}: the proxy's OTLP exporters speak "
            + " or ".join(OTLP_PROTOCOLS)
        )
    own = f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT"
    variable = own if environ.get(own, "").strip() else "OTEL_EXPORTER_OTLP_ENDPOINT"
    endpoint = environ.get(variable, "").strip() or _DEFAULT_ENDPOINTS[protocol]
    try:
        url = URL(endpoint)
    except ValueError:
        url = URL()
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{variable} {endpoint!r}: expected an http(s) URL, as http://HOST:PORT")
    if variable != own and protocol == "http/protobuf":  # a base URL: the signal's path added
        path = url.path if url.path.endswith("/") else url.path + "/"
        endpoint = str(url.with_path(path + f"v1/{signal}", keep_query=True))
    return Export("otlp", protocol, endpoint)
