"""``otelsse demo``: real clients against the fake provider, otelsse instrumented, a summary.

The openai, anthropic, cohere and google-genai SDKs, boto3, httpx, httpx2 and requests each
stream from ``FakeProvider`` through ``otelsse.instrument()`` with a real OpenTelemetry SDK.
Everything the summary says about streams is read back from the metrics otelsse exported (the
same numbers a Prometheus scrape or an OTLP receiver gets); only "what the application saw"
comes from the demo's own clients.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import itertools
import json
import logging
import os
import random
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import FrameType
from typing import Any, TextIO

import pydantic
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricExporter,
    MetricReader,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from .. import semconv
from .._monitor import Outcome
from .agents import agent_request_headers
from .provider import (
    DEFAULT_MODELS,
    JOB_HEADER,
    SCENARIO_HEADER,
    UNSUPPORTED,
    FakeProvider,
    request_for,
)

__all__ = [
    "DemoOptions",
    "ListenError",
    "Stop",
    "Summary",
    "histogram_quantile",
    "missing_library",
    "prepare_clients",
    "run_demo",
]

#: The clients' read timeout; the fake provider's ``timeout`` streams stall for longer.
READ_TIMEOUT = 2.0

#: How often each route is called, and by which clients (as applications really use them).
ROUTES: dict[str, tuple[int, tuple[str, ...]]] = {
    "openai.chat_completions": (35, ("openai", "openai-async", "httpx", "requests")),
    "openai.responses": (20, ("openai", "openai-async", "httpx2")),
    "anthropic.messages": (30, ("anthropic", "anthropic-async", "requests")),
    "gemini.generate_content": (15, ("httpx", "httpx-async", "requests")),
    "bedrock.converse_stream": (10, ("boto3", "requests")),
    "cohere.chat": (5, ("cohere", "requests")),
    "gemini.interactions": (5, ("genai", "httpx")),
    # AG-UI's reference client reads the lines of a plain POST; so do these.
    "agui.run": (5, ("httpx", "requests")),
    # JSON-RPC over plain HTTP: the mcp and a2a SDKs would need a session or an agent card
    "mcp.streamable_http": (5, ("httpx", "requests")),
    "a2a.stream": (5, ("httpx", "requests")),
}
#: The mix of endings in every 50 streams: mostly complete, as a healthy-but-imperfect provider.
SCENARIO_DECK: dict[str, int] = {
    "complete": 21,
    "tool_call": 6,
    "tool_call_invalid": 2,
    "incomplete": 3,
    "truncated": 5,
    "provider_error": 4,
    "timeout": 2,
    "rate_limited": 2,
    "overloaded": 1,
    "unauthorized": 1,
    "bad_gateway": 1,
    "gzip": 1,
    "endless_line": 1,
}


@dataclasses.dataclass(frozen=True)
class Job:
    number: int
    route: str
    client: str
    scenario: str

    @property
    def model(self) -> str:
        return DEFAULT_MODELS[self.route]

    @property
    def request_id(self) -> str:
        return f"req_demo_{self.number}"


def plan(seed: int | None) -> Iterator[Job]:
    """An endless, seeded sequence of jobs: each 50 deal the deck above in a shuffled order (so
    even a short run has every ending), on routes and clients drawn by their weights."""
    rng = random.Random(seed)
    routes = list(ROUTES)
    route_weights = [ROUTES[route][0] for route in routes]
    deck = [scenario for scenario, count in SCENARIO_DECK.items() for _ in range(count)]
    number = itertools.count(1)
    while True:
        rng.shuffle(deck)
        for scenario in deck:
            route = rng.choices(routes, route_weights)[0]
            while (route, scenario) in UNSUPPORTED:
                route = rng.choices(routes, route_weights)[0]
            yield Job(next(number), route, rng.choice(ROUTES[route][1]), scenario)


# -- the clients: each streams one job to the end, as an application would -----------------


def _headers(job: Job) -> dict[str, str]:
    # MCP and A2A ask for SSE and name their version (agents.py); the model APIs need none
    return {
        **agent_request_headers(job.route),
        SCENARIO_HEADER: job.scenario,
        JOB_HEADER: str(job.number),
    }


def _openai(job: Job, base_url: str) -> None:
    import openai

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    with openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="demo", max_retries=0, timeout=READ_TIMEOUT
    ) as client:
        api: Any = (
            client.chat.completions if job.route.endswith("completions") else client.responses
        )
        with api.create(**body, extra_headers=_headers(job)) as stream:
            for _ in stream:
                pass


async def _openai_async(job: Job, base_url: str) -> None:
    import openai

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    async with openai.AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="demo", max_retries=0, timeout=READ_TIMEOUT
    ) as client:
        api: Any = (
            client.chat.completions if job.route.endswith("completions") else client.responses
        )
        async with await api.create(**body, extra_headers=_headers(job)) as stream:
            async for _ in stream:
                pass


def _anthropic(job: Job, base_url: str) -> None:
    import anthropic

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    del body["stream"]  # the streaming helper, which accumulates the message as it goes
    with anthropic.Anthropic(
        base_url=base_url, api_key="demo", max_retries=0, timeout=READ_TIMEOUT
    ) as client:
        messages: Any = client.messages
        with messages.stream(**body, extra_headers=_headers(job)) as stream:
            for _ in stream:
                pass


async def _anthropic_async(job: Job, base_url: str) -> None:
    import anthropic

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    async with anthropic.AsyncAnthropic(
        base_url=base_url, api_key="demo", max_retries=0, timeout=READ_TIMEOUT
    ) as client:
        messages: Any = client.messages
        async with await messages.create(**body, extra_headers=_headers(job)) as stream:
            async for _ in stream:
                pass


def _httpx_like(module_name: str) -> Callable[[Job, str], None]:
    """A plain httpx or httpx2 application: POST, check the status, read the lines."""

    def call(job: Job, base_url: str) -> None:
        module: Any = __import__(module_name)
        path, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
        with module.Client(timeout=READ_TIMEOUT) as client:
            request = client.stream("POST", base_url + path, json=body, headers=_headers(job))
            with request as response:
                response.raise_for_status()
                for _ in response.iter_lines():
                    pass

    return call


async def _httpx_async(job: Job, base_url: str) -> None:
    import httpx

    path, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    async with httpx.AsyncClient(timeout=READ_TIMEOUT) as client:
        request = client.stream("POST", base_url + path, json=body, headers=_headers(job))
        async with request as response:
            response.raise_for_status()
            async for _ in response.aiter_lines():
                pass


def _requests(job: Job, base_url: str) -> None:
    import requests

    path, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    with requests.post(
        base_url + path, json=body, headers=_headers(job), stream=True, timeout=READ_TIMEOUT
    ) as response:
        response.raise_for_status()
        # Chunks as they arrive: requests' iter_lines() rescans its pending text on every chunk,
        # quadratic in a line's length (the endless_line scenario's line is megabytes long).
        for _ in response.iter_content(chunk_size=None):
            pass


#: The region the Bedrock client signs for: any will do, the fake provider checks no signature.
AWS_REGION = "us-east-1"
_AWS_LOCK = threading.Lock()


@functools.cache
def _aws_session() -> Any:
    """One boto3 session for every job, its service model loaded (its first client costs about
    0.1 s, the next ones a few ms); boto3 sessions are not thread-safe, so clients are made
    from it under ``_AWS_LOCK``."""
    # Imported by name: boto3 and botocore ship no type information.
    session = importlib.import_module("boto3.session").Session()
    _bedrock_client(session, "http://127.0.0.1").close()
    return session


def _bedrock_client(session: Any, base_url: str) -> Any:
    """A ``bedrock-runtime`` client of ``session`` at ``base_url``: credentials given (none is
    looked for), one attempt per call (the demo counts each stream once), the demo's timeout."""
    config = importlib.import_module("botocore.config").Config(
        retries={"total_max_attempts": 1}, connect_timeout=READ_TIMEOUT, read_timeout=READ_TIMEOUT
    )
    return session.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=base_url,
        aws_access_key_id="demo",
        aws_secret_access_key="demo",
        config=config,
    )


def _boto3(job: Job, base_url: str) -> None:
    """boto3's ``bedrock-runtime`` client, ``converse_stream``: its event stream, event by
    event, as an application reads it."""
    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    with _AWS_LOCK:
        client = _bedrock_client(_aws_session(), base_url)

    def add_headers(request: Any, **_: Any) -> None:
        for name, value in _headers(job).items():
            request.headers[name] = value

    # botocore's operations take no extra headers: the demo's go in through its event hooks.
    client.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_headers)
    try:
        stream = client.converse_stream(modelId=job.model, **body)["stream"]
        # botocore raises at an exception frame with the body still open: closed here, the
        # stream ends (and otelsse's span with it) now, not when the garbage collector runs.
        with contextlib.closing(stream):
            for _ in stream:
                pass
    finally:
        client.close()


def _cohere(job: Job, base_url: str) -> None:
    """The cohere SDK's v2 ``chat_stream``, on an httpx client of the demo's read timeout."""
    import cohere
    import httpx

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    del body["stream"]  # chat_stream asks for the stream itself
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        client = cohere.ClientV2(base_url=base_url, api_key="demo", httpx_client=http)
        # A generator (typed as an Iterator): closed here, the response is too.
        stream: Any = client.chat_stream(
            **body, request_options={"additional_headers": _headers(job)}
        )
        with contextlib.closing(stream):
            for _ in stream:
                pass


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every google-genai client (the provider is plain HTTP): without it,
    each client loads the CA bundle for each of its transports, a third of a second."""
    return ssl.create_default_context()


def _google_genai(job: Job, base_url: str) -> None:
    """google-genai's ``interactions.create(..., stream=True)``: one attempt per call (the SDK
    retries 408, 409, 429 and 5xx by default), the demo's read timeout."""
    from google import genai
    from google.genai import types

    _, body = request_for(job.route, job.model, tools=job.scenario.startswith("tool"))
    options = types.HttpOptions(
        base_url=base_url,
        timeout=round(READ_TIMEOUT * 1000),  # milliseconds
        retry_options=types.HttpRetryOptions(attempts=1),
        client_args={"verify": _tls()},
        async_client_args={"verify": _tls(), "ssl": _tls()},
    )
    with (
        genai.Client(api_key="demo", http_options=options) as client,
        client.interactions.create(**body, extra_headers=_headers(job)) as stream,
    ):
        for _ in stream:
            pass


def _in_new_loop(call: Callable[[Job, str], Any]) -> Callable[[Job, str], None]:
    def run(job: Job, base_url: str) -> None:
        asyncio.run(call(job, base_url))

    return run


CLIENTS: dict[str, Callable[[Job, str], None]] = {
    "openai": _openai,
    "openai-async": _in_new_loop(_openai_async),
    "anthropic": _anthropic,
    "anthropic-async": _in_new_loop(_anthropic_async),
    "httpx": _httpx_like("httpx"),
    "httpx2": _httpx_like("httpx2"),
    "httpx-async": _in_new_loop(_httpx_async),
    "requests": _requests,
    "boto3": _boto3,
    "cohere": _cohere,
    "genai": _google_genai,
}
#: The libraries the clients are (the demo extra installs them); imported when a run needs them.
CLIENT_LIBRARIES = (
    "openai",
    "anthropic",
    "cohere",
    "google.genai",
    "boto3",
    "httpx",
    "httpx2",
    "requests",
)


def missing_library() -> str | None:
    """The first client library the demo runs that is not installed, else None: said before
    the run starts, not as a traceback once its first stream needs it."""
    return next((name for name in CLIENT_LIBRARIES if not _installed(name)), None)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a submodule's package is missing (``google`` of google.genai)
        return False


#: What each SDK's clients need imported and built before their jobs run (``prepare_clients``):
#: the resources and streaming helpers, then the modules whose pydantic models are built.
_SDK_PREPARATION: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "openai": (
        (
            "openai.resources.chat.completions",
            "openai.resources.responses",
            "openai.lib.streaming.responses",
        ),
        ("openai.types.responses", "openai.types.chat"),
    ),
    "anthropic": (
        ("anthropic.resources.messages", "anthropic.lib.streaming"),
        ("anthropic.types",),
    ),
    # Their stream events' models are built as they are imported: imports only.
    "cohere": (("cohere.v2.raw_client", "cohere.v2.types.v2chat_stream_response"), ()),
    "genai": (
        (
            "google.genai._gaos.google_genai",
            "google.genai._gaos.interactions",
            "google.genai._gaos.types.interactions",
        ),
        (),
    ),
}


def prepare_clients(clients: Iterable[str] = CLIENTS) -> None:
    """Import and build what the SDK clients among ``clients`` use, once, on the calling thread.

    The SDKs import their resources on first use (``client.responses`` imports them), and the
    jobs run on threads: imported here, before any job starts. Their pydantic models defer their
    build to first use, and on Python < 3.13 that build resolves names through the calling
    frames' locals: run under a tracer (coverage), a ``Response`` there became the field's type
    and the SDK's Responses events parsed as dicts (seen in CI). Built here instead, where no
    caller's names can leak in. boto3's session, its service model loaded, is made here too
    (``_aws_session``). Not at import, and only for the SDKs a run uses: it costs seconds.
    """
    sdks = {client.partition("-")[0] for client in clients}
    for sdk in sorted(sdks & _SDK_PREPARATION.keys()):
        _prepare_sdk(sdk)
    if "boto3" in sdks:
        _aws_session()


@functools.cache
def _prepare_sdk(sdk: str) -> None:
    resources, typed = _SDK_PREPARATION[sdk]
    for module in resources:
        importlib.import_module(module)
    for module in typed:
        for model in vars(importlib.import_module(module)).values():
            if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
                model.model_rebuild(raise_errors=False)


# -- telemetry -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    streams: int = 60
    duration: float | None = None  # seconds; overrides ``streams``; inf = until Ctrl-C
    concurrency: int = 4
    seed: int | None = 7
    speed: float = 1.0  # the fake provider's delays are divided by this
    prometheus_port: int | None = None
    prometheus_host: str = "127.0.0.1"
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"  # or "http/protobuf"
    service_name: str = "otelsse-demo"
    summary_json: str | None = None  # a file to write the summary to, as JSON


class ListenError(Exception):
    """A server of the demo could not listen where it was asked. ``args``: the host, the port
    and the ``OSError``."""


class _OutcomeByRequestId(SpanExporter):
    """A span exporter that keeps only each stream's outcome, keyed by its request id, until
    the demo asks for it (so memory stays flat in an endless run)."""

    def __init__(self) -> None:
        self._outcomes: dict[str, str] = {}
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for span in spans:
                attributes = span.attributes or {}
                request_id = attributes.get(semconv.REQUEST_ID)
                if request_id is not None:
                    self._outcomes[str(request_id)] = str(attributes.get(semconv.OUTCOME))
        return SpanExportResult.SUCCESS

    def pop(self, request_id: str) -> str | None:
        with self._lock:
            return self._outcomes.pop(request_id, None)


#: Seconds one OTLP export may take, its retries included, unless the environment sets the
#: exporters' own ``OTEL_EXPORTER_OTLP_TIMEOUT`` (or a per-signal one). The SDK's default, 10 s
#: of retries with backoff, is what the end of a run waits for each of its final exports (the
#: spans', then the metrics') when the endpoint is down; a collector on the same network answers
#: in milliseconds.
OTLP_TIMEOUT = 2.0
_OTLP_TIMEOUT_VARIABLES = (
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
)
#: The logger above every OTLP exporter's (gRPC and HTTP, spans and metrics).
_OTLP_LOGGER = "opentelemetry.exporter.otlp"


class _ExportFailures(logging.Handler):
    """Takes the OTLP exporters' log records while the demo runs: with the endpoint down they
    warn on every retry of every export, every few seconds. The first says so in one line of
    the demo's; the rest are dropped."""

    def __init__(self, protocol: str, endpoint: str, out: TextIO) -> None:
        super().__init__(logging.WARNING)
        self._line = (
            f"OTLP ({protocol}): {endpoint} is unreachable (an export failed); the run goes on,"
            " and further export errors are not shown\n"
        )
        self._out = out
        self._said = False

    def emit(self, record: logging.LogRecord) -> None:
        # Exporters log from their own threads; the handler's lock makes this once.
        if not self._said:
            self._said = True
            self._out.write(self._line)
            self._out.flush()


class _Telemetry:
    """The SDK providers the demo exports through; the in-memory reader feeds the summary.

    OTLP exports run on the SDK's own threads (a batch span processor, a periodic metric
    reader), so an endpoint that is down never holds up a stream; only ``shutdown`` waits, for
    the final exports, each at most ``OTLP_TIMEOUT``.
    """

    def __init__(self, options: DemoOptions, progress: TextIO) -> None:
        resource = Resource.create({"service.name": options.service_name})
        self.reader = InMemoryMetricReader()
        readers: list[MetricReader] = [self.reader]
        self.outcomes = _OutcomeByRequestId()
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.outcomes))
        self.metrics_server: Any = None
        self._export_failures: _ExportFailures | None = None
        self._propagated = True
        if options.prometheus_port is not None:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            readers.append(PrometheusMetricReader())
            host, port = options.prometheus_host, options.prometheus_port
            try:
                self.metrics_server, _ = start_http_server(port, addr=host)
            except OSError as exc:
                raise ListenError(host, port, exc) from exc
        if options.otlp_endpoint is not None:
            readers.append(self._otlp(options, progress))
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource)

    def _otlp(self, options: DemoOptions, progress: TextIO) -> MetricReader:
        endpoint = options.otlp_endpoint
        assert endpoint is not None
        # None: the exporters read the environment's timeout themselves.
        timeout = None if any(map(os.environ.get, _OTLP_TIMEOUT_VARIABLES)) else OTLP_TIMEOUT
        spans: SpanExporter
        metrics: MetricExporter
        if options.otlp_protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            insecure = not endpoint.startswith("https://")
            spans = OTLPSpanExporter(endpoint=endpoint, insecure=insecure, timeout=timeout)
            metrics = OTLPMetricExporter(endpoint=endpoint, insecure=insecure, timeout=timeout)
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter as HTTPMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HTTPSpanExporter,
            )

            base = endpoint.rstrip("/")
            spans = HTTPSpanExporter(endpoint=f"{base}/v1/traces", timeout=timeout)
            metrics = HTTPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=timeout)
        self._export_failures = _ExportFailures(options.otlp_protocol, endpoint, progress)
        logger = logging.getLogger(_OTLP_LOGGER)
        logger.addHandler(self._export_failures)
        self._propagated = logger.propagate
        logger.propagate = False  # to the root logger, which would print every record
        self.tracer_provider.add_span_processor(BatchSpanProcessor(spans))
        return PeriodicExportingMetricReader(metrics, export_interval_millis=5000)

    def shutdown(self) -> None:
        """The final exports, then the servers down."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        if self._export_failures is not None:
            logger = logging.getLogger(_OTLP_LOGGER)
            logger.removeHandler(self._export_failures)
            logger.propagate = self._propagated
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()


# -- the summary -----------------------------------------------------------------------------


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """The ``q`` quantile of a histogram, estimated exactly as Prometheus' ``histogram_quantile``
    does: linear interpolation inside the bucket the rank falls in, 0 as the first bucket's lower
    bound, and the highest finite bound when the rank falls in the +Inf bucket.

    ``counts`` are per-bucket (OpenTelemetry's), one more than ``bounds``. None where
    Prometheus has no number: no observations, no finite bound, or an empty bucket at the rank.
    """
    cumulative = list(itertools.accumulate(counts))
    if not bounds or cumulative[-1] == 0:
        return None
    rank = q * cumulative[-1]
    bucket = bisect.bisect_left(cumulative[:-1], rank)
    if bucket == len(bounds):
        return bounds[-1]
    upper = bounds[bucket]
    lower = bounds[bucket - 1] if bucket else 0.0
    below = cumulative[bucket - 1] if bucket else 0
    if cumulative[bucket] == below:  # q = 0 in an empty first bucket: 0/0, NaN in Prometheus
        return None
    return lower + (upper - lower) * (rank - below) / (cumulative[bucket] - below)


@dataclasses.dataclass
class Summary:
    """What the run produced: stream counts and latency from the exported metrics."""

    streams: dict[str, dict[str, int]]  # route -> outcome -> count (from otelsse.streams)
    time_to_first_output_p50: float | None
    time_to_first_output_p95: float | None
    tool_calls_valid: int
    tool_calls_invalid: int
    app_errors: int  # streams where the application's client raised
    silent_failures: int  # the application saw no error, otelsse a server-side failure
    elapsed: float
    concurrency: int
    speed: float

    @property
    def total(self) -> int:
        return sum(sum(outcomes.values()) for outcomes in self.streams.values())

    def count(self, outcome: str) -> int:
        return sum(outcomes.get(outcome, 0) for outcomes in self.streams.values())

    @property
    def truncation_rate(self) -> float:
        return self.count("truncated") / self.total if self.total else 0.0

    @property
    def failed(self) -> int:
        return sum(self.count(outcome) for outcome in semconv.ERROR_OUTCOMES)

    @property
    def failure_rate(self) -> float:
        return self.failed / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "total": self.total,
            "truncation_rate": self.truncation_rate,
            "failure_rate": self.failure_rate,
        }


def summarize(
    reader: InMemoryMetricReader, driver: _Driver, elapsed: float, options: DemoOptions
) -> Summary:
    streams: dict[str, dict[str, int]] = {}
    bounds: tuple[float, ...] = semconv.STREAM_TIME_TO_FIRST_OUTPUT.buckets or ()
    buckets = [0] * (len(bounds) + 1)
    tool_calls = Counter[bool]()
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    attributes = point.attributes or {}
                    if isinstance(point, HistogramDataPoint):
                        if metric.name == semconv.STREAM_TIME_TO_FIRST_OUTPUT.name:
                            assert tuple(point.explicit_bounds) == bounds
                            counts = zip(buckets, point.bucket_counts, strict=True)
                            buckets = [a + b for a, b in counts]
                    elif not isinstance(point, NumberDataPoint):
                        continue
                    elif metric.name == semconv.STREAMS.name:
                        route = streams.setdefault(str(attributes[semconv.ROUTE]), {})
                        outcome = str(attributes[semconv.OUTCOME])
                        route[outcome] = route.get(outcome, 0) + int(point.value)
                    elif metric.name == semconv.TOOL_CALLS.name:
                        # Calls the provider ran itself carry no validity: not the app's calls.
                        valid = attributes.get(semconv.TOOL_CALL_VALID)
                        if valid is not None:
                            tool_calls[bool(valid)] += int(point.value)
    return Summary(
        streams={route: outcomes for route, outcomes in sorted(streams.items())},
        time_to_first_output_p50=histogram_quantile(0.5, bounds, buckets),
        time_to_first_output_p95=histogram_quantile(0.95, bounds, buckets),
        tool_calls_valid=tool_calls[True],
        tool_calls_invalid=tool_calls[False],
        app_errors=driver.app_errors,
        silent_failures=driver.silent_failures,
        elapsed=elapsed,
        concurrency=options.concurrency,
        speed=options.speed,
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def print_summary(summary: Summary, out: TextIO) -> None:
    outcomes = [o for o in _OUTCOME_ORDER if summary.count(o)]
    width = max([len("route"), *map(len, summary.streams)])
    header = f"{'route':<{width}}  {'streams':>7}" + "".join(f"  {o:>{len(o)}}" for o in outcomes)
    out.write(f"\n{header}\n{'-' * len(header)}\n")
    rows = [(route, counts) for route, counts in summary.streams.items() if sum(counts.values())]
    totals = {o: summary.count(o) for o in outcomes}
    for name, counts in [*rows, ("total", totals)]:
        line = f"{name:<{width}}  {sum(counts.values()):>7}"
        out.write(line + "".join(f"  {counts.get(o, 0):>{len(o)}}" for o in outcomes) + "\n")
    truncated = summary.count("truncated")
    out.write(
        f"\ntruncation rate        {summary.truncation_rate:.1%} "
        f"({truncated} of {summary.total} streams)\n"
        f"failed streams         {summary.failure_rate:.1%} "
        "(the outcomes that set the span status to ERROR)\n"
        f"time to first output   p50 {_seconds(summary.time_to_first_output_p50)}, "
        f"p95 {_seconds(summary.time_to_first_output_p95)} "
        "(from the histogram, as Prometheus' histogram_quantile estimates it)\n"
        f"tool calls             {summary.tool_calls_valid} valid, "
        f"{summary.tool_calls_invalid} invalid\n"
        f"pace                   {summary.total} streams in {summary.elapsed:.1f} s, "
        f"{summary.concurrency} at a time; {_pace(summary.speed)}\n"
        f"in short               {_in_short(summary)}\n"
    )


def _pace(speed: float) -> str:
    if speed == 1:
        return "--speed 1: the fake provider's own pace"
    return f"--speed {speed:g}: the fake provider's waits divided by {speed:g}"


def _in_short(summary: Summary) -> str:
    """The run in one sentence, for anyone: the same for the same ``--seed`` and ``--streams``
    (every number in it follows from the seeded plan, none from timing)."""
    failed, total = summary.failed, summary.total
    if not failed:
        return f"none of the {total} streams went wrong"
    said = f"{failed} of {total} streams went wrong (cut off, stalled, refused or broken)"
    app, silent = summary.app_errors, summary.silent_failures
    if not silent:
        return f"{said}; the application got an error for each of them"
    if not app:
        return f"{said}; the application noticed none of them: only otelsse did"
    return (
        f"{said}; the application got an error for {app} of them and noticed nothing wrong"
        f" with the other {silent}: only otelsse did"
    )


#: The table's columns, in the order outcomes are defined.
_OUTCOME_ORDER = tuple(outcome.value for outcome in Outcome)


# -- the run ---------------------------------------------------------------------------------


class _Progress:
    def __init__(self, out: TextIO, planned: int | None) -> None:
        self._out = out
        self._planned = planned
        self._tty = out.isatty()
        self._last = 0.0

    def update(self, done: int, outcomes: Counter[str], final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.2 if self._tty else 2.0):
            return
        self._last = now
        of = f"/{self._planned}" if self._planned else ""
        mix = ", ".join(f"{name} {count}" for name, count in outcomes.most_common())
        line = f"  {done}{of} streams  {mix}"
        self._out.write(f"\r{line:<100}" if self._tty else line + "\n")
        if final and self._tty:
            self._out.write("\n")
        self._out.flush()


class Stop:
    """The demo asked to stop, by Ctrl-C (SIGINT) or SIGTERM (``docker stop``, service managers):
    the command line installs ``request`` as their handler. No stream starts after it; those
    running finish; the summary is printed; the metrics are not held up for scraping.

    A request only records itself, except inside ``interruptible``: Python runs a handler
    between any two bytecodes of the main thread, so one that raised (SIGINT's default raises
    KeyboardInterrupt) could land outside every ``try`` meant for it, or halfway through
    uninstrumenting or an exporter's shutdown (the Python docs, ``signal``, "Note on Signal
    Handlers and Exceptions").
    """

    #: Seconds between looks at ``requested`` in ``wait``.
    POLL = 0.1

    def __init__(self) -> None:
        self.requested = False
        self._interruptible = False

    def request(self, signum: int = 0, frame: FrameType | None = None) -> None:
        """Ask the demo to stop (a signal handler); asking again changes nothing."""
        if self.requested:
            return
        self.requested = True
        if self._interruptible:
            raise KeyboardInterrupt

    def interruptible(self, call: Callable[[], object]) -> None:
        """``call()`` unless a stop was requested; a request while it runs raises inside it, to
        cut it short. Only for work that leaves nothing to undo (imports)."""
        try:
            self._interruptible = True  # inside the try: a request from here on is caught
            if not self.requested:
                call()
        except KeyboardInterrupt:
            if not self.requested:  # not ours: a SIGINT with Python's own handler
                raise
        finally:
            self._interruptible = False

    def wait(self) -> None:
        """Until a stop is requested. Polled: the request comes from a handler on this same
        thread, and a handler that set an Event this thread waits on could run while the thread
        holds that Event's lock, and wait for it forever."""
        while not self.requested:
            time.sleep(self.POLL)


class _Driver:
    """Keeps ``concurrency`` jobs streaming until the plan or the time is used up, or a stop is
    requested, and tallies what the application saw next to what otelsse said about each
    stream."""

    def __init__(
        self, options: DemoOptions, telemetry: _Telemetry, progress: TextIO, stop: Stop
    ) -> None:
        self.options = options
        self.telemetry = telemetry
        self.stop = stop
        self.progress = _Progress(progress, None if options.duration else options.streams)
        self.outcomes = Counter[str]()
        self.done = self.app_errors = self.silent_failures = self.submitted = 0
        self._deadline: float | None = None

    def _more(self) -> bool:
        if self.stop.requested:
            return False
        if self._deadline is not None:
            return time.monotonic() < self._deadline
        return self.submitted < self.options.streams

    def drive(self, jobs: Iterator[Job], base_url: str) -> None:
        if self.options.duration is not None:
            self._deadline = time.monotonic() + self.options.duration
        running: dict[Future[None], Job] = {}
        concurrency = self.options.concurrency
        # After a stop, the loop goes on only while streams it started are running.
        with ThreadPoolExecutor(concurrency, "otelsse-demo") as pool:
            while running or self._more():
                while self._more() and len(running) < concurrency:
                    job = next(jobs)
                    running[pool.submit(CLIENTS[job.client], job, base_url)] = job
                    self.submitted += 1
                finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in finished:
                    self._tally(running.pop(future), future)
                self.progress.update(self.done, self.outcomes)
        self.progress.update(self.done, self.outcomes, final=True)

    def _tally(self, job: Job, future: Future[None]) -> None:
        self.done += 1
        outcome = self.telemetry.outcomes.pop(job.request_id)
        self.outcomes[outcome or "unknown"] += 1
        if future.exception() is not None:
            self.app_errors += 1
        elif outcome in semconv.ERROR_OUTCOMES:
            self.silent_failures += 1


def _jobs(options: DemoOptions) -> tuple[Iterator[Job], set[str]]:
    """The jobs the run may start, and the clients among them: for a number of streams, those
    its jobs use (read ahead until every client has come up), for a duration every client."""
    jobs = plan(options.seed)
    if options.duration is not None:
        return jobs, set(CLIENTS)
    jobs, ahead = itertools.tee(itertools.islice(jobs, options.streams))
    clients: set[str] = set()
    for job in ahead:
        clients.add(job.client)
        if len(clients) == len(CLIENTS):
            break
    return jobs, clients


def _banner(options: DemoOptions, base_url: str) -> str:
    """The first line: what is starting, printed before the slow set-up."""
    if options.duration is None:
        amount = f"{options.streams} stream{'s' if options.streams != 1 else ''}"
    elif options.duration == float("inf"):
        amount = "streams until Ctrl-C or SIGTERM"
    else:
        amount = f"streams for {options.duration:g} s"
    return (
        f"otelsse demo: {amount}, {options.concurrency} at a time, from a fake provider at"
        f" {base_url} with the openai, anthropic, cohere and google-genai SDKs, boto3, httpx,"
        " httpx2 and requests,"
        f" instrumented by otelsse ({_pace(options.speed)})\n"
    )


def run_demo(
    options: DemoOptions,
    out: TextIO = sys.stdout,
    progress: TextIO = sys.stderr,
    stop: Stop | None = None,
) -> Summary:
    """Run the demo to the end, or until ``stop`` is requested, and return its summary."""
    from .._instrumentor import instrument, uninstrument

    stop = stop or Stop()
    jobs, clients = _jobs(options)
    # First, before any output: a metrics port taken since the command line checked it.
    telemetry = _Telemetry(options, progress)
    try:
        with FakeProvider(seed=options.seed, speed=options.speed) as provider:
            out.write(_banner(options, provider.base_url))
            if telemetry.metrics_server is not None:
                port = telemetry.metrics_server.server_port
                out.write(f"metrics: http://{options.prometheus_host}:{port}/metrics\n")
            if options.otlp_endpoint:
                out.write(f"OTLP ({options.otlp_protocol}): {options.otlp_endpoint}\n")
            out.flush()
            stop.interruptible(lambda: prepare_clients(clients))
            driver = _Driver(options, telemetry, progress, stop)
            instrument(
                tracer_provider=telemetry.tracer_provider,
                meter_provider=telemetry.meter_provider,
            )
            try:
                started = time.monotonic()
                driver.drive(jobs, provider.base_url)
                elapsed = time.monotonic() - started  # the streams only: the pace
            finally:
                uninstrument()
        summary = summarize(telemetry.reader, driver, elapsed, options)
        print_summary(summary, out)
        out.flush()
        if options.summary_json:
            # Written before the metrics are held up for scraping, so tools can read it
            # meanwhile; renamed into place, so a reader never sees half of it.
            with open(f"{options.summary_json}.part", "w") as file:
                file.write(summary_json(summary))
            os.replace(f"{options.summary_json}.part", options.summary_json)
        _serve_until_stopped(telemetry, options, out, stop)
    finally:
        telemetry.shutdown()
    return summary


def _serve_until_stopped(
    telemetry: _Telemetry, options: DemoOptions, out: TextIO, stop: Stop
) -> None:
    """With ``--prometheus-port``, keep the final numbers up for scraping until a stop is
    requested; a run that was stopped was asked to end, not to linger."""
    if telemetry.metrics_server is None or stop.requested:
        return
    port = telemetry.metrics_server.server_port
    out.write(
        f"\nmetrics stay up at http://{options.prometheus_host}:{port}/metrics; Ctrl-C to stop\n"
    )
    out.flush()
    stop.wait()


def summary_json(summary: Summary) -> str:
    return json.dumps(summary.to_json(), indent=2, sort_keys=True, allow_nan=False) + "\n"
