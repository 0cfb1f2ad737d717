"""Units of the instrumentation: telemetry from reports, content decoding, the request watch.

``Telemetry`` is driven with real ``StreamReport``s (from ``StreamMonitor`` over small bodies) and
read back through a real OpenTelemetry SDK (in-memory exporter and metric reader); nothing is
mocked. The names, units and buckets are compared with ``semconv``, the one module that owns them.
"""

from __future__ import annotations

import gzip
import logging
import re
import zlib

import httpx
import pytest
from opentelemetry.trace import StatusCode

from otelsse import semconv
from otelsse.instrumentation._content import UnsupportedEncoding, content_decoder
from otelsse.instrumentation._observer import Settings, Watch, body_asks_for_stream
from otelsse.monitor import Outcome, StreamMonitor, StreamReport
from otelsse.telemetry import OTHER, Telemetry

from ._otel import Telemetry as SDK


def chat_body(model: str = "m-1", reason: str = "stop") -> bytes:
    return (
        b'data: {"id":"c1","model":"%s","choices":[{"index":0,"delta":{"content":"hi"},'
        b'"finish_reason":null}]}\n\n'
        b'data: {"id":"c1","model":"%s","choices":[{"index":0,"delta":{},'
        b'"finish_reason":"%s"}]}\n\n'
        b"data: [DONE]\n\n" % (model.encode(), model.encode(), reason.encode())
    )


def report_of(body: bytes, route: str = "openai.chat_completions", **close: object) -> StreamReport:
    monitor = StreamMonitor(route, started_at=0.0)
    monitor.feed(body, 0.25)
    return monitor.close(0.5, **close)  # type: ignore[arg-type]


@pytest.fixture
def sdk() -> SDK:
    return SDK()


def record(sdk: SDK, report: StreamReport, **options: int) -> Telemetry:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider, **options)
    span = telemetry.start_span({})
    telemetry.end_span(span, report, {semconv.SERVER_ADDRESS: "127.0.0.1"})
    telemetry.record_metrics(report, "127.0.0.1")
    return telemetry


def test_every_metric_has_the_name_unit_and_buckets_of_semconv(sdk: SDK) -> None:
    body = (
        b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},'
        b'"finish_reason":null}]}\n\n'
        b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{},'
        b'"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n'
    )
    telemetry = record(sdk, report_of(body))
    telemetry.stream_started({semconv.ROUTE: "generic"})
    telemetry.count_error(ValueError(), "feed")
    points = sdk.points()
    exported = {p.metric: p for p in points}
    assert set(exported) == {spec.name for spec in semconv.METRICS}
    for spec in semconv.METRICS:
        assert exported[spec.name].unit == spec.unit, spec.name
        if spec.kind == "histogram":
            assert exported[spec.name].bucket_bounds == spec.buckets, spec.name
    # The dashboards and alerts select on these keys: semconv must list every one a point carries.
    carried: dict[str, set[str]] = {spec.name: set() for spec in semconv.METRICS}
    for point in points:
        carried[point.metric] |= set(point.attributes)
    for spec in semconv.METRICS:
        assert carried[spec.name] <= set(spec.attributes), spec.name
    assert carried[semconv.STREAMS.name] == set(semconv.STREAMS.attributes)
    assert carried[semconv.TOOL_CALLS.name] == set(semconv.TOOL_CALLS.attributes)


def test_span_carries_the_report_attributes_and_ends_once(sdk: SDK) -> None:
    report = report_of(chat_body())
    record(sdk, report)
    span = sdk.stream_span()
    assert span.end_time is not None
    attributes = dict(span.attributes or {})
    assert attributes == {**report.to_attributes(), semconv.SERVER_ADDRESS: "127.0.0.1"}
    assert attributes[semconv.OUTCOME] == "complete"
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize(
    ("close", "outcome", "status"),
    [
        ({"error": "transport"}, "truncated", StatusCode.ERROR),
        ({"error": "timeout"}, "timeout", StatusCode.ERROR),
        ({"error": "cancelled"}, "cancelled", StatusCode.UNSET),
    ],
)
def test_status_is_error_only_for_server_side_outcomes(
    sdk: SDK, close: dict[str, str], outcome: str, status: StatusCode
) -> None:
    record(sdk, report_of(chat_body()[:40], **close))
    span = sdk.stream_span()
    assert span.attributes is not None
    assert span.attributes[semconv.OUTCOME] == outcome
    assert span.status.status_code is status
    if status is StatusCode.ERROR:
        assert span.status.description == outcome  # the outcome name, never a message
        assert span.attributes[semconv.ERROR_TYPE] == outcome
    else:
        assert semconv.ERROR_TYPE not in span.attributes


def test_internal_error_is_not_a_server_error() -> None:
    assert Outcome.INTERNAL_ERROR.value not in semconv.ERROR_OUTCOMES
    assert {"complete", "incomplete", "cancelled", "eof_unverified"}.isdisjoint(
        semconv.ERROR_OUTCOMES
    )


def test_every_outcome_series_exists_at_zero_after_the_first_stream(sdk: SDK) -> None:
    record(sdk, report_of(chat_body()))
    totals = sdk.streams_by_outcome()
    assert set(totals) == {outcome.value for outcome in Outcome}
    assert totals == {
        outcome.value: (1 if outcome is Outcome.COMPLETE else 0) for outcome in Outcome
    }
    zero = [p for p in sdk.points(semconv.STREAMS.name) if p.value == 0]
    # The zero series carry the stream's series labels and no stop reason.
    assert {p.attributes[semconv.GEN_AI_RESPONSE_MODEL] for p in zero} == {"m-1"}
    assert all(semconv.STOP_REASON not in p.attributes for p in zero)


def test_model_names_and_stop_reasons_are_capped(sdk: SDK) -> None:
    telemetry = Telemetry(
        sdk.tracer_provider, sdk.meter_provider, max_model_names=2, max_stop_reasons=1
    )
    for model, reason in (("a", "stop"), ("b", "other"), ("c", "stop"), ("a", "x" * 100)):
        report = report_of(chat_body(model, reason))
        telemetry.record_metrics(report, None)
    points = [p for p in sdk.points(semconv.STREAMS.name) if p.value]
    assert {p.attributes[semconv.GEN_AI_RESPONSE_MODEL] for p in points} == {"a", "b", OTHER}
    assert {p.attributes[semconv.STOP_REASON] for p in points} == {"stop", OTHER}


def test_long_provider_values_are_cut_before_they_become_labels(sdk: SDK) -> None:
    record(sdk, report_of(chat_body("m" * 500)))
    models = {p.attributes[semconv.GEN_AI_RESPONSE_MODEL] for p in sdk.points("otelsse.streams")}
    assert models == {"m" * 64}


def test_active_streams_go_up_and_down_with_the_same_attributes(sdk: SDK) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    active = {semconv.ROUTE: "openai.chat_completions", semconv.SERVER_ADDRESS: "h"}
    telemetry.stream_started(active)
    assert sdk.active_streams() == 1
    telemetry.stream_finished(active)
    assert sdk.active_streams() == 0


def test_a_contained_error_is_counted_each_time_and_logged_once_without_its_message(
    sdk: SDK, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = Telemetry(sdk.tracer_provider, sdk.meter_provider)
    caplog.set_level(logging.DEBUG, logger="otelsse")
    for _ in range(3):
        telemetry.count_error(ValueError("secret content"), "feed")
    assert sdk.instrumentation_errors() == 3
    counted = {
        p.attributes[semconv.INSTRUMENTATION_STAGE]: p.value
        for p in sdk.points(semconv.INSTRUMENTATION_ERRORS.name)
    }
    # Every stage's series exists from the start (at 0), so the first failure is an increase.
    stages = semconv.INSTRUMENTATION_STAGES
    assert counted == {stage: 3 if stage == "feed" else 0 for stage in stages}
    records = [r for r in caplog.records if r.name == "otelsse"]
    assert len(records) == 1
    assert "ValueError" in records[0].getMessage()
    assert "secret" not in caplog.text


# -- content decoding ---------------------------------------------------------------------------

BODY = b"data: " + b"x" * 5000 + b"\n\n"


def decode_in_pieces(encoding: str, coded: bytes, piece: int = 7) -> bytes:
    decode = content_decoder(encoding)
    assert decode is not None
    return b"".join(decode(coded[i : i + piece]) for i in range(0, len(coded), piece))


@pytest.mark.parametrize(
    ("encoding", "coded"),
    [
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", zlib.compress(BODY)[2:-4]),  # raw DEFLATE, as some servers send it
        ("GZIP, identity", gzip.compress(BODY)),
        ("deflate, gzip", gzip.compress(zlib.compress(BODY))),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "with-identity", "two-codings"],
)
def test_content_decoder_undoes_each_coding_in_pieces(encoding: str, coded: bytes) -> None:
    assert decode_in_pieces(encoding, coded) == BODY


@pytest.mark.parametrize("encoding", [None, "", "identity"])
def test_identity_needs_no_decoder(encoding: str | None) -> None:
    assert content_decoder(encoding) is None


def test_an_unknown_coding_is_refused() -> None:
    with pytest.raises(UnsupportedEncoding, match="compress"):
        content_decoder("compress")


# -- which requests are watched -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "asks"),
    [
        ({"stream": True}, True),
        ({"stream": "true"}, False),
        ({"stream": False}, False),
        (b'{"model": "m", "stream" : true}', True),
        ('{"stream":true}', True),
        (b'{"stream": false, "text": "\\"stream\\": true"}', False),  # quoted text is not a key
        (b'{"options": {"stream": true}}', True),  # conservative: at worst one more span
        (b'{"model": "m"}', False),
        (None, False),
    ],
)
def test_body_asks_for_stream(body: object, asks: bool) -> None:
    assert body_asks_for_stream(body) is asks


@pytest.mark.parametrize(
    ("method", "url", "stream_asked", "accept", "route", "expects"),
    [
        ("POST", "http://h/v1/chat/completions", True, None, "openai.chat_completions", True),
        ("POST", "http://h/v1/chat/completions", False, None, "openai.chat_completions", False),
        ("POST", "http://h/v1/messages", False, "text/event-stream", "anthropic.messages", True),
        ("POST", "http://h/v1/models/g:streamGenerateContent?alt=sse", False, None,
         "gemini.generate_content", True),
        ("POST", "http://h/v1/models/g:streamGenerateContent", False, None,
         "gemini.generate_content", False),
        ("GET", "http://h/v1/responses/r1?stream=true", False, None, "openai.responses", True),
        ("POST", "http://h/v2/chat", True, "text/event-stream", None, False),
    ],
)  # fmt: skip
def test_watch_expects_sse_only_on_streaming_routes(
    sdk: SDK,
    method: str,
    url: str,
    stream_asked: bool,
    accept: str | None,
    route: str | None,
    expects: bool,
) -> None:
    settings = Settings(Telemetry(sdk.tracer_provider, sdk.meter_provider))
    watch = watch_url(settings, method, url, stream_asked, accept)
    assert watch is not None
    assert (watch.route, watch.expects_sse) == (route, expects)
    assert (watch.span is not None) is expects
    if watch.span is not None:
        watch.span.end()
        assert dict(sdk.stream_span().attributes or {}) == {
            semconv.ROUTE: route,
            semconv.SERVER_ADDRESS: "h",
            semconv.SERVER_PORT: 80,
        }


def watch_url(
    settings: Settings, method: str, url: str, stream_asked: bool = True, accept: str | None = None
) -> Watch | None:
    target = httpx.URL(url)
    return settings.watch(
        method,
        target,
        target.path,
        target.query.decode(),
        stream_asked=lambda: stream_asked,
        accept=lambda: accept,
    )


def test_excluded_urls_are_not_watched(sdk: SDK) -> None:
    settings = Settings(Telemetry(sdk.tracer_provider), excluded_urls=re.compile("internal"))
    assert watch_url(settings, "POST", "http://internal/v1/chat/completions") is None
    assert watch_url(settings, "POST", "http://public/v1/chat/completions") is not None
