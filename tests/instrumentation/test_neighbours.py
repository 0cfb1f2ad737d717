"""otelsse beside another GenAI instrumentation of the same call (issue 12): nothing counted twice.

The real openai SDK under opentelemetry-instrumentation-openai-v2 and the real anthropic SDK with
its built-in tracing stream from ``SSEServer`` on 127.0.0.1 (tests/instrumentation/_neighbours.py
says what each records), with otelsse instrumented against the same in-memory SDK. Each test
makes ``CALLS`` calls, so that a value recorded twice, or once per chunk, shows. It proves:

1. The span tree: the neighbour's GenAI span > ``otelsse.stream`` (> the contrib ``POST`` span
   when opentelemetry-instrumentation-httpx is on too), one of each per call;
   ``otelsse.genai_neighbour`` names the neighbour's scope.
2. Usage once: ``gen_ai.usage.input_tokens``/``output_tokens`` summed over every span of the run
   equal the streams' usage; the neighbour has them, ``otelsse.stream`` not. Without a neighbour
   ``otelsse.stream`` has them.
3. otelsse's integrity facts stay on ``otelsse.stream`` and ``otelsse.streams`` whoever else
   traces: a stream cut inside its terminal event is ``truncated`` with ``terminal_seen``
   false, where openai-v2 calls it a success (UNSET) and anthropic an ``api_error``.
4. Each GenAI client metric once per call: for every measure (duration, time to first chunk,
   time per output chunk, token usage) the histograms of both name sets, whoever recorded them,
   counted ``CALLS`` calls, and the usage metrics add up to the streams' tokens. otelsse records
   what the neighbour does not (anthropic's tracing records no metric: otelsse all of them), and
   all of them without a neighbour. The same under ``gen_ai_latest_experimental``.
5. ``instrument(genai_span="attach")``: otelsse's ``otelsse.*`` facts are copied onto the
   neighbour's span when it is still open as the stream ends (at the terminal or at EOF: both
   neighbours), and nothing is written to it once it ended (anthropic ends its span before
   closing the body of a stream the application closes early). Its ``gen_ai.*`` attributes and
   status stay its own. openai-v2's ``with`` exit does not close the SDK stream (the response is
   left to the garbage collector), so its early close is not a case here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otelsse import semconv
from tests._fixtures import read_fixture
from tests._helpers import event_ends
from tests._otel import Telemetry
from tests.instrumentation._neighbours import (
    NEIGHBOURS,
    Neighbour,
    recorded_calls,
    tokens_in_metrics,
)
from tests.instrumentation.test_sdks import (
    SYNC_ASYNC,
    Case,
    contrib_and_otelsse,
    run,
    served,
    stop_first,
    stop_never,
)

CALLS = 2
USAGE_KEYS = (semconv.GEN_AI_USAGE_INPUT_TOKENS, semconv.GEN_AI_USAGE_OUTPUT_TOKENS)
TRACED = [n for n in NEIGHBOURS.values() if n.scope is not None]
ENDINGS = ["complete", "truncated"]
#: What ``recorded_calls`` finds for a call: every timing, and one usage point per token type.
TIMINGS = [m for m in semconv.GENAI_MEASURES if m != semconv.TOKEN_USAGE_METRIC]
HISTOGRAMS_LEGACY = [*TIMINGS, *(f"{semconv.TOKEN_USAGE_METRIC}.{t}" for t in ("input", "output"))]


def body_for(case: Case, ending: str) -> bytes:
    """The fixture, or (``truncated``) all of it but the end of its terminal event's last line:
    a clean EOF with the terminal pending (cut before the terminal, the whole answer would be
    ``terminal_missing``)."""
    body = read_fixture(case.fixture)
    return body if ending == "complete" else body[: event_ends(body)[-1] - 2]


@contextmanager
def beside(
    neighbour: Neighbour, telemetry: Telemetry, **options: Any
) -> Iterator[tuple[Case, Telemetry]]:
    """otelsse and ``neighbour`` both on against ``telemetry``; both undone at exit."""
    telemetry.install(**options)
    try:
        with neighbour.on(telemetry) as case:
            yield case, telemetry
    finally:
        telemetry.uninstall()


def stream_calls(
    case: Case, telemetry: Telemetry, ending: str, is_async: bool, **reply: Any
) -> None:
    with served(case, body_for(case, ending), **reply) as server:
        for _ in range(CALLS):
            assert run(case, server.url(""), is_async).error is None
    assert telemetry.instrumentation_errors() == 0


def neighbour_spans(telemetry: Telemetry, neighbour: Neighbour) -> list[ReadableSpan]:
    return [s for s in telemetry.spans(None) if s.instrumentation_scope.name == neighbour.scope]


def parent_of(span: ReadableSpan, candidates: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None
    (parent,) = [c for c in candidates if c.context.span_id == span.parent.span_id]
    assert parent.context.trace_id == span.context.trace_id
    return parent


def integrity_facts(span: ReadableSpan) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith("otelsse.")}


# --------------------------------------------------------------------------------------------
# 1-4. The span tree, usage once, integrity facts, each GenAI metric once per call
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("neighbour", NEIGHBOURS.values(), ids=str)
@pytest.mark.parametrize("ending", ENDINGS)
@SYNC_ASYNC
def test_nothing_counted_twice(neighbour: Neighbour, ending: str, is_async: bool) -> None:
    with beside(neighbour, Telemetry()) as (case, telemetry):
        stream_calls(case, telemetry, ending, is_async)
        streams = telemetry.spans()
        everything = telemetry.spans(None)
        outcomes = telemetry.nonzero_outcomes()
        calls = recorded_calls(telemetry)
        tokens = tokens_in_metrics(telemetry)
    complete = ending == "complete"
    input_tokens, output_tokens = neighbour.usage

    # 3. otelsse's own facts, whoever else traces.
    assert len(streams) == CALLS
    assert outcomes == {"complete" if complete else "truncated": CALLS}
    for stream in streams:
        assert stream.attributes[semconv.TERMINAL_SEEN] is complete
        assert (stream.status.status_code is StatusCode.ERROR) is not complete

    # 1. The tree, and 2. usage on exactly one span per call.
    assert sum(s.attributes.get(USAGE_KEYS[0], 0) for s in everything) == CALLS * input_tokens
    assert sum(s.attributes.get(USAGE_KEYS[1], 0) for s in everything) == CALLS * output_tokens
    if neighbour.scope is None:
        assert everything == streams
        for stream in streams:
            assert stream.parent is None
            assert semconv.GENAI_NEIGHBOUR not in stream.attributes
            assert (stream.attributes[USAGE_KEYS[0]], stream.attributes[USAGE_KEYS[1]]) == (
                neighbour.usage
            )
    else:
        genai = neighbour_spans(telemetry, neighbour)
        assert len(genai) == CALLS
        assert len(everything) == 2 * CALLS
        parents = [parent_of(stream, genai) for stream in streams]
        assert len({p.context.span_id for p in parents}) == CALLS
        expected_status = neighbour.status_complete if complete else neighbour.status_truncated
        for stream, parent in zip(streams, parents, strict=True):
            assert stream.attributes[semconv.GENAI_NEIGHBOUR] == neighbour.scope
            assert not set(USAGE_KEYS) & set(stream.attributes)
            assert parent.attributes[USAGE_KEYS[0]] == input_tokens
            assert parent.status.status_code is expected_status
            assert integrity_facts(parent) == {}  # "beside" writes nothing on it

    # 4. Each GenAI client metric once per call, and its tokens once.
    assert calls == dict.fromkeys(HISTOGRAMS_LEGACY, CALLS)
    assert tokens == {"input": CALLS * input_tokens, "output": CALLS * output_tokens}


@pytest.mark.parametrize("neighbour", NEIGHBOURS.values(), ids=str)
def test_latest_genai_names_count_nothing_twice(
    neighbour: Neighbour, monkeypatch: pytest.MonkeyPatch
) -> None:
    """otelsse's ``gen_ai.client.inference.*`` names beside a neighbour's legacy ones."""
    monkeypatch.setenv(semconv.SEMCONV_OPT_IN_ENV, semconv.GENAI_LATEST)
    with beside(neighbour, Telemetry()) as (case, telemetry):
        stream_calls(case, telemetry, "complete", False)
        calls = recorded_calls(telemetry)
        tokens = tokens_in_metrics(telemetry)
    # The latest set counts tokens in counters; a neighbour's legacy usage histogram may stay.
    timings = {m: n for m, n in calls.items() if not m.startswith(semconv.TOKEN_USAGE_METRIC)}
    assert timings == dict.fromkeys(TIMINGS, CALLS)
    input_tokens, output_tokens = neighbour.usage
    assert tokens == {"input": CALLS * input_tokens, "output": CALLS * output_tokens}


@pytest.mark.parametrize("neighbour", TRACED, ids=str)
@SYNC_ASYNC
def test_neighbour_span_then_stream_span_then_http_span(
    neighbour: Neighbour, is_async: bool
) -> None:
    with contrib_and_otelsse(HTTPX2ClientInstrumentor, False) as (telemetry, _):
        with neighbour.on(telemetry) as case:
            stream_calls(case, telemetry, "complete", is_async)
        streams = telemetry.spans()
        genai = neighbour_spans(telemetry, neighbour)
        http = telemetry.spans("POST")
    assert len(streams) == len(genai) == len(http) == CALLS
    for stream in streams:
        parent = parent_of(stream, genai)
        assert parent.parent is None
        assert stream.attributes[semconv.GENAI_NEIGHBOUR] == neighbour.scope
    for request in http:
        parent_of(request, streams)


# --------------------------------------------------------------------------------------------
# 5. genai_span="attach"
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("neighbour", TRACED, ids=str)
@pytest.mark.parametrize("ending", ENDINGS)
@SYNC_ASYNC
def test_attach_copies_integrity_facts_onto_the_open_neighbour_span(
    neighbour: Neighbour, ending: str, is_async: bool
) -> None:
    with beside(neighbour, Telemetry()) as (case, plain):
        stream_calls(case, plain, ending, is_async)
        (alone, _) = neighbour_spans(plain, neighbour)
    with beside(neighbour, Telemetry(), genai_span="attach") as (case, telemetry):
        stream_calls(case, telemetry, ending, is_async)
        streams = telemetry.spans()
        genai = neighbour_spans(telemetry, neighbour)
    for stream in streams:
        parent = parent_of(stream, genai)
        facts = integrity_facts(parent)
        assert facts[semconv.OUTCOME] == stream.attributes[semconv.OUTCOME]
        assert facts[semconv.TERMINAL_SEEN] is (ending == "complete")
        assert facts.items() <= integrity_facts(stream).items()
        # Its own attributes and status are untouched.
        assert parent.status.status_code is alone.status.status_code
        own = {k: v for k, v in parent.attributes.items() if not k.startswith("otelsse.")}
        assert set(own) == set(alone.attributes)
        assert {k: own[k] for k in USAGE_KEYS} == {k: alone.attributes[k] for k in USAGE_KEYS}


@SYNC_ASYNC
def test_attach_leaves_an_ended_neighbour_span_alone(is_async: bool) -> None:
    """anthropic ends its span before closing the body of a stream closed early."""
    neighbour = NEIGHBOURS["anthropic"]
    with beside(neighbour, Telemetry(), genai_span="attach") as (case, telemetry):
        hold_at = event_ends(read_fixture(case.fixture))[3]
        with served(case, hold_at=hold_at) as server:
            assert run(case, server.url(""), is_async, stop_first).error is None
            server.release.set()  # the next call is read to its end
            assert run(case, server.url(""), is_async, stop_never).error is None
        assert telemetry.instrumentation_errors() == 0
        streams = telemetry.spans()
        genai = neighbour_spans(telemetry, neighbour)
    outcomes = [stream.attributes[semconv.OUTCOME] for stream in streams]
    assert sorted(outcomes) == ["cancelled", "complete"]
    for stream in streams:
        parent = parent_of(stream, genai)
        cancelled = stream.attributes[semconv.OUTCOME] == "cancelled"
        assert (integrity_facts(parent) == {}) is cancelled
