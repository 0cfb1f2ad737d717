#!/bin/sh
# Run app.py with zero code changes: opentelemetry-instrument (from opentelemetry-distro) sets
# up the SDK from OTEL_* variables and loads every installed instrumentor, otelsse's included.
# Spans go to the console; export OTEL_TRACES_EXPORTER=otlp OTEL_METRICS_EXPORTER=otlp (and
# OTEL_EXPORTER_OTLP_ENDPOINT) to send them to a collector instead.
#   sh examples/zero_code/run.sh [--scenario truncated]
set -eu
export OTEL_SERVICE_NAME="${OTEL_SERVICE_NAME:-otelsse-zero-code}"
export OTEL_TRACES_EXPORTER="${OTEL_TRACES_EXPORTER:-console}"
export OTEL_METRICS_EXPORTER="${OTEL_METRICS_EXPORTER:-none}"
export OTEL_LOGS_EXPORTER="${OTEL_LOGS_EXPORTER:-none}"
exec opentelemetry-instrument python "$(dirname "$0")/app.py" "$@"
