"""Which requests are watched: the routes' declarations, the stream flag, exclusions."""

from __future__ import annotations

import re

import httpx
import pytest

from otelsse import semconv
from otelsse._clients import RequestFields, RpcFields, get_client
from otelsse._observe import Settings, Watch
from otelsse._telemetry import Telemetry
from otelsse.routes import get_route
from tests._otel import Telemetry as SDK


@pytest.fixture
def sdk() -> SDK:
    return SDK()


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
        ("POST", "http://h/v1/internal/generate", True, "text/event-stream", None, False),
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
    assert (watch.route and watch.route.name, watch.expects_sse) == (route, expects)
    assert (watch.span is not None) is expects
    if watch.span is not None:
        watch.span.end()
        # What samplers see at the start: the route, its provider and operation, the server,
        # and the request model where the URL names it (Gemini; others name it in the body).
        declared = get_route(route)
        started = {
            semconv.ROUTE: route,
            semconv.GEN_AI_PROVIDER_NAME: declared.provider,
            semconv.GEN_AI_OPERATION_NAME: declared.operation,
            semconv.SERVER_ADDRESS: "h",
            semconv.SERVER_PORT: 80,
        }
        if route == "gemini.generate_content":
            started[semconv.GEN_AI_REQUEST_MODEL] = "g"
        assert dict(sdk.stream_span().attributes or {}) == started


def watch_url(
    settings: Settings, method: str, url: str, stream_asked: bool = True, accept: str | None = None
) -> Watch | None:
    target = httpx.URL(url)
    return settings.watch(
        get_client("httpx"),
        method,
        target,
        target.path,
        target.query.decode(),
        body=lambda: RequestFields(stream_asked, None),
        rpc=RpcFields,
        header=lambda name: accept if name == "accept" else None,
    )


def test_a_head_request_is_not_watched(sdk: SDK) -> None:
    """Its answer has no body, whatever its headers say (RFC 9110 §9.3.2)."""
    settings = Settings(Telemetry(sdk.tracer_provider))
    for url in ("http://h/v1/chat/completions", "http://h/v1/responses/r1?stream=true"):
        assert watch_url(settings, "HEAD", url, True, "text/event-stream") is None
        assert watch_url(settings, "GET", url, True, "text/event-stream") is not None


def test_excluded_urls_are_not_watched(sdk: SDK) -> None:
    settings = Settings(Telemetry(sdk.tracer_provider), excluded_urls=re.compile("internal"))
    assert watch_url(settings, "POST", "http://internal/v1/chat/completions") is None
    assert watch_url(settings, "POST", "http://public/v1/chat/completions") is not None


def test_a_client_sending_for_a_watched_one_is_left_alone(sdk: SDK) -> None:
    """httpx on LiteLLM's aiohttp transport is one request: only the outer client observes it."""
    settings = Settings(Telemetry(sdk.tracer_provider, sdk.meter_provider))
    url = "http://h/v1/chat/completions"
    outer = settings.begin(watch_url, "POST", url)
    assert outer is not None
    assert outer.span is not None
    with outer:
        assert settings.begin(watch_url, "POST", url) is None
    after = settings.begin(watch_url, "POST", url)  # the send is over: the next request counts
    assert after is not None
    assert after.span is not None
    outer.span.end()
    after.span.end()
    assert len(sdk.spans()) == 2


def test_a_request_not_expected_to_stream_is_still_watched_once(sdk: SDK) -> None:
    # No span at send (an unknown route, no stream flag), yet the request is being watched: a
    # client it is sent through must not observe it a second time.
    settings = Settings(Telemetry(sdk.tracer_provider, sdk.meter_provider))
    outer = settings.begin(watch_url, "POST", "http://h/v1/internal/generate", False)
    assert outer is not None
    assert outer.span is None
    with outer:
        assert settings.begin(watch_url, "POST", "http://h/v1/internal/generate", False) is None
    assert settings.begin(watch_url, "POST", "http://h/v1/internal/generate", False) is not None


@pytest.mark.parametrize("expected", [True, False])
def test_a_genai_neighbour_is_named_whether_the_stream_was_expected_or_found(
    sdk: SDK, expected: bool
) -> None:
    # Looked for at send for an expected stream, at the headers for an SSE answer nobody
    # announced: the neighbour's span is the same one either way.
    settings = Settings(Telemetry(sdk.tracer_provider, sdk.meter_provider))
    tracer = sdk.tracer_provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    attributes = {semconv.GEN_AI_OPERATION_NAME: "chat"}
    url = "http://h/v1/chat/completions" if expected else "http://h/v1/internal/generate"
    with tracer.start_as_current_span("chat m", attributes=attributes):
        watch = watch_url(settings, "POST", url, expected)
        assert watch is not None
        assert (watch.span is not None) is expected
        observer = watch.response(200, {"content-type": "text/event-stream"}, body_decoded=True)
        assert observer is not None
        observer.feed(b'data: {"x": 1}\n\n')
        observer.finish()
    span = sdk.stream_span()
    assert (span.attributes or {})[semconv.GENAI_NEIGHBOUR] == (
        "opentelemetry.instrumentation.openai_v2"
    )
