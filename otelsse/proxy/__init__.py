"""``otelsse proxy``: a reverse proxy giving clients in any language otelsse's stream telemetry.

A client sets its base URL to ``http://127.0.0.1:8787/{upstream}/...``; the proxy forwards to
the configured upstream only, passes bytes and errors through unchanged, and records for each
stream the ``otelsse.stream`` span and metrics the in-process instrumentation records, under a
SERVER span that continues the client's trace. ``docs/operators/proxy.md`` is the guide.
"""

from ._app import ProxyApp, UpstreamCut
from ._config import ConfigError, ProxyConfig, Upstream, load_config, parse_upstream
from ._server import serve

__all__ = [
    "ConfigError",
    "ProxyApp",
    "ProxyConfig",
    "Upstream",
    "UpstreamCut",
    "load_config",
    "parse_upstream",
    "serve",
]
