"""Running the proxy: uvicorn (httptools and uvloop when installed) serving ``ProxyApp``, the
OpenTelemetry SDK it exports through, ``/metrics`` on its own port, and the drain at SIGTERM.

The engine was measured (``benchmarks/bench_proxy.py``, figures in ``benchmarks/README.md``):
uvicorn and aiohttp's server cost the same per event and per stream, and uvicorn speaks plain
ASGI, as the middleware does; aiohttp's client costs 2.5 to 5 times less CPU per event than
httpx's, so it reads the upstream.

Telemetry follows the SDK's environment variables: each signal goes over OTLP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or its own ``..._TRACES_``/``..._METRICS_ENDPOINT`` is set and
``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` is not ``none``, over its ``..._PROTOCOL``
(``http/protobuf`` unless it says ``grpc``); the resource from ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (service name ``otelsse-proxy`` by default).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
from types import FrameType

import uvicorn
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from ._app import ProxyApp, UpstreamCut
from ._config import ProxyConfig

__all__ = ["Providers", "ProxyServer", "serve"]

_LOG = logging.getLogger("otelsse.proxy")


class Providers:
    """The SDK providers the proxy exports through, from the standard environment variables."""

    def __init__(self, config: ProxyConfig) -> None:
        resource = Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "otelsse-proxy"}
        )
        self.tracer_provider = TracerProvider(resource=resource)
        readers: list[MetricReader] = []
        if config.metrics_listen is not None:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            host, port = config.metrics_listen
            start_http_server(port, host)
            readers.append(PrometheusMetricReader())
        if _exports("TRACES"):
            self.tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter()))
        if _exports("METRICS"):
            readers.append(PeriodicExportingMetricReader(_metric_exporter()))
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource)

    def shutdown(self) -> None:
        """Flush and stop: spans and metric points still buffered are exported now."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _exports(signal: str) -> bool:
    """Whether ``signal`` (``TRACES``/``METRICS``) goes over OTLP: an endpoint is set for it,
    and ``OTEL_{signal}_EXPORTER`` does not say ``none``."""
    if os.environ.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() == "none":
        return False
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    return any(os.environ.get(name) for name in endpoints)


def _grpc(signal: str) -> bool:
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    return protocol.strip() == "grpc"


# Each exporter reads its endpoint, headers and timeout from the environment itself.
def _span_exporter() -> SpanExporter:
    if _grpc("TRACES"):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    return HTTPSpanExporter()


def _metric_exporter() -> MetricExporter:
    if _grpc("METRICS"):
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HTTPMetricExporter,
    )

    return HTTPMetricExporter()


class _QuietCuts(logging.Filter):
    """uvicorn logs an app's exception with its traceback; an upstream that broke off is the
    proxy's normal business (it logged one line and the span says it), not a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, UpstreamCut)


class ProxyServer(uvicorn.Server):
    """uvicorn serving ``app`` on its ``listen`` address. SIGTERM/SIGINT start the drain:
    ``/readyz`` fails, no new connection is taken, streams in flight get ``drain_timeout``
    seconds, then are cancelled (their span says ``otelsse.cancel_reason=shutdown``)."""

    def __init__(self, app: ProxyApp) -> None:
        super().__init__(_uvicorn_config(app))
        self.proxy = app
        error_log = logging.getLogger("uvicorn.error")
        if not any(isinstance(known, _QuietCuts) for known in error_log.filters):
            error_log.addFilter(_QuietCuts())

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it re-raises the signal once drained, which would kill the process
        # before the exporters flush. A second Ctrl-C still forces the exit.
        self.proxy.draining = True
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def _uvicorn_config(app: ProxyApp) -> uvicorn.Config:
    """uvicorn's settings for the proxy: the fast parser and loop when installed, no header of
    its own (the upstream's ``date`` and ``server`` pass through), no access log (its lines
    carry query strings)."""
    config = app.config
    host, port = config.listen
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        lifespan="on",
        access_log=False,
        server_header=False,
        date_header=False,
        # typed int, but uvicorn hands it to asyncio.timeout(), which takes seconds as a float
        timeout_graceful_shutdown=config.drain_timeout,  # type: ignore[arg-type]
        log_level="warning",
    )


def _shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket other processes may bind too (SO_REUSEPORT): the kernel spreads the
    connections among them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def serve(config: ProxyConfig) -> int:
    """Run the proxy until SIGTERM or Ctrl-C has drained it; returns the exit status."""
    providers = Providers(config)
    app = ProxyApp(
        config,
        tracer_provider=providers.tracer_provider,
        meter_provider=providers.meter_provider,
    )
    server = ProxyServer(app)
    try:
        server.run(sockets=[_shared_socket(*config.listen)] if config.reuse_port else None)
    finally:
        providers.shutdown()
    return 0 if server.started else 1
