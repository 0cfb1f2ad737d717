"""Real OTLP receivers in the test process: gRPC (grpcio with the collector services) and HTTP
(``http.server`` taking protobuf POSTs on ``/v1/traces`` and ``/v1/metrics``)."""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = ["RECEIVERS", "Received", "grpc_receiver", "http_receiver"]


class Received:
    """Every export request a receiver got, in arrival order."""

    def __init__(self) -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.lock = threading.Lock()

    def add(self, request: Message) -> None:
        with self.lock:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.traces.append(request)
            else:
                self.metrics.append(request)  # type: ignore[arg-type]


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:
        self.received.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:
        self.received.add(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@contextlib.contextmanager
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(received), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsService(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(grace=None).wait()


@contextlib.contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()
    kinds = {
        "/v1/traces": (
            trace_service_pb2.ExportTraceServiceRequest,
            trace_service_pb2.ExportTraceServiceResponse,
        ),
        "/v1/metrics": (
            metrics_service_pb2.ExportMetricsServiceRequest,
            metrics_service_pb2.ExportMetricsServiceResponse,
        ),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path not in kinds or self.headers["Content-Type"] != "application/x-protobuf":
                self.send_error(404)
                return
            request_type, response_type = kinds[self.path]
            request = request_type()
            request.ParseFromString(body)
            received.add(request)
            payload = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


RECEIVERS = {"grpc": grpc_receiver, "http/protobuf": http_receiver}
