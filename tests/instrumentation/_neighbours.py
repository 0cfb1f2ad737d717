"""Other GenAI instrumentations otelsse runs beside (issue 12), and what their metrics add up to.

Each ``Neighbour`` is a real one, on as an application turns it on, sending to the test's SDK:

- ``openai-v2``: opentelemetry-instrumentation-openai-v2 2.4b0 (with opentelemetry-util-genai
  1.1b0: it does not import with a later one). Its ``chat {model}`` span is current while the SDK
  sends; it records through util-genai's handler, whose scope its span and metrics carry. It
  records usage, ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage``, and
  leaves its span UNSET whether or not the stream reached ``[DONE]``.
- ``anthropic``: the anthropic SDK's built-in tracing (anthropic >= 2, on by default), given the
  test's tracer provider through its ``open_telemetry`` client option. Its call span is current
  while the SDK sends; it records usage on it and no metric at all; a stream without
  ``message_stop`` is ERROR ``api_error``.
- ``openai`` / ``anthropic-untraced``: the same SDKs with no GenAI instrumentation (the anthropic
  one with its tracing off), where otelsse records usage and the GenAI metrics itself.

The fixtures end with their usage before the terminal event, so a stream cut just before the
terminal still carries all of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.trace import StatusCode

from otelsse import semconv
from tests._otel import Telemetry
from tests.instrumentation.test_sdks import (
    Case,
    anthropic_client,
    chat_call,
    messages_create,
    model_dump,
    openai_client,
)

__all__ = ["NEIGHBOURS", "Neighbour", "recorded_calls", "tokens_in_metrics"]

CHAT = Case(
    "openai-chat", "/v1/chat/completions", "real/openai-chat-text-usage.sse", openai_client,
    chat_call, model_dump,
)  # fmt: skip
MESSAGES = Case(
    "anthropic-messages", "/v1/messages", "real/anthropic-text.sse",
    anthropic_client(open_telemetry=False), messages_create, model_dump,
)  # fmt: skip


@contextlib.contextmanager
def _openai_v2(telemetry: Telemetry) -> Iterator[Case]:
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    try:
        yield CHAT
    finally:
        instrumentor.uninstrument()


@contextlib.contextmanager
def _anthropic_tracing(telemetry: Telemetry) -> Iterator[Case]:
    options = {"tracer_provider": telemetry.tracer_provider}
    yield replace(MESSAGES, client=anthropic_client(open_telemetry=options))


@dataclass(frozen=True)
class Neighbour:
    """A GenAI instrumentation beside otelsse (or none), and what it says of the fixture."""

    id: str
    #: Turns it on against the telemetry's providers; yields the application's case.
    on: Callable[[Telemetry], contextlib.AbstractContextManager[Case]]
    #: The instrumentation scope of its GenAI span; None: no neighbour.
    scope: str | None
    #: The fixture's final usage: input and output tokens.
    usage: tuple[int, int]
    #: Its span's status when the stream reached its terminal, and when it did not.
    status_complete: StatusCode = StatusCode.UNSET
    status_truncated: StatusCode = StatusCode.UNSET

    def __str__(self) -> str:
        return self.id


def _none(case: Case) -> Callable[[Telemetry], contextlib.AbstractContextManager[Case]]:
    @contextlib.contextmanager
    def on(telemetry: Telemetry) -> Iterator[Case]:
        yield case

    return on


NEIGHBOURS = {
    n.id: n
    for n in (
        Neighbour("openai-v2", _openai_v2, "opentelemetry.util.genai.handler", (12, 5)),
        Neighbour(
            "anthropic", _anthropic_tracing, "com.anthropic.sdk.python", (19, 9),
            StatusCode.OK, StatusCode.ERROR,
        ),
        Neighbour("openai", _none(CHAT), None, (12, 5)),
        Neighbour("anthropic-untraced", _none(MESSAGES), None, (19, 9)),
    )
}  # fmt: skip


# -- the GenAI client metrics, whoever recorded them -------------------------------------------


def recorded_calls(telemetry: Telemetry) -> dict[str, float]:
    """How many calls each GenAI histogram counted, by measure, in either name set (the usage
    one by ``gen_ai.token.type``: ``token_usage.input``, ``token_usage.output``)."""
    counted: dict[str, float] = {}
    for table in (semconv.GENAI_METRICS_LEGACY, semconv.GENAI_METRICS_LATEST):
        for measure, specs in table.items():
            for spec in specs:
                if spec.kind != "histogram":
                    continue
                for p in telemetry.points(spec.name):
                    token_type = p.attributes.get(semconv.GEN_AI_TOKEN_TYPE)
                    key = measure if token_type is None else f"{measure}.{token_type}"
                    counted[key] = counted.get(key, 0) + p.value
    return counted


def tokens_in_metrics(telemetry: Telemetry) -> dict[str, float]:
    """Tokens by type in every GenAI usage metric: the legacy histogram's sums by
    ``gen_ai.token.type`` and the latest set's counters."""
    (legacy,) = semconv.GENAI_METRICS_LEGACY[semconv.TOKEN_USAGE_METRIC]
    totals = {"input": 0.0, "output": 0.0}
    for p in telemetry.points(legacy.name):
        totals[p.attributes[semconv.GEN_AI_TOKEN_TYPE]] += p.sum or 0.0
    for spec in semconv.GENAI_METRICS_LATEST[semconv.TOKEN_USAGE_METRIC]:
        kind = spec.name.rpartition(".")[2].removesuffix("_tokens")
        totals[kind] += sum(p.value for p in telemetry.points(spec.name))
    return totals
