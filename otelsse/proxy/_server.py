"""Running the proxy: uvicorn (httptools and uvloop when installed) serving ``ProxyApp``, the
OpenTelemetry SDK it exports through, ``/metrics`` on its own port, and the drain at SIGTERM.

The engine was chosen by measurement (``benchmarks/bench_proxy.py``, figures in
``benchmarks/README.md``). Telemetry follows the SDK's environment variables: OTLP for spans and
metrics when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal endpoint) is set, over
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` unless it says ``grpc``); the resource from
``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` (service name ``otelsse-proxy`` by default).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

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
        if _otlp_configured():
            spans, metrics = _otlp_exporters()
            self.tracer_provider.add_span_processor(BatchSpanProcessor(spans))
            readers.append(PeriodicExportingMetricReader(metrics))
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource)

    def shutdown(self) -> None:
        """Flush and stop: spans and metric points still buffered are exported now."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _otlp_configured() -> bool:
    return any(
        os.environ.get(name)
        for name in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        )
    )


def _otlp_exporters() -> tuple[Any, Any]:
    """The OTLP span and metric exporters; each reads its endpoint and headers from the
    environment itself."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    return OTLPSpanExporter(), OTLPMetricExporter()


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
