"""Strict mode under clients nobody here wrote: the real openai, anthropic and LiteLLM SDKs.

Each SDK surface (``tests/_strict_sdks.py``: openai ``chat.completions.create(stream=True)`` and
``chat.completions.stream()``, ``responses.create(stream=True)`` and ``responses.stream()``;
anthropic ``messages.create(stream=True)`` and ``messages.stream()``; LiteLLM ``completion`` /
``acompletion`` with ``openai/`` and ``anthropic/`` models; each sync and async) streams from one
``FakeProvider`` (real sockets on 127.0.0.1, module-scoped, its delays shortened) every scenario
an application may meet, through one SDK client per test as an application keeps one, with
otelsse instrumented ``strict=True`` against a real in-memory OpenTelemetry SDK:

- not instrumented at all (the reference: what the SDK does alone);
- strict mode off (``with otelsse.strict(False):``): exactly what the reference saw: every item
  the SDK yielded (``model_dump()``), what its helper's ``get_final_*()`` returned, the
  exception's class and message and the step it surfaced at;
- strict mode on: a stream strict mode accepts (complete, a tool call, ``incomplete``,
  ``provider_error``, for which the SDKs raise themselves, and ``no_terminal`` unless asked) is
  exactly the reference; a refused one (a cut at an event boundary or mid-event at a clean EOF,
  a cut inside a tool call's arguments, invalid arguments; ``no_terminal`` under
  ``otelsse.strict(["default", "terminal_missing"])``) raises in the application's own loop,
  as the SDK's usual error for a dropped connection with the ``StreamFault`` in its chain, after
  handing over exactly what the reference handed over up to there, and never the helper's
  final message. A cut the client library raises for itself (a chunked body cut mid-way) is
  the reference's own error, untouched.

Each stream is one ``otelsse.stream`` span with its outcome, ``otelsse.strict.raised`` only
where strict mode raised. An application retry loop written as each SDK's documentation says
(catch the SDK's connection error; LiteLLM: its errors are openai's, retry when
``litellm._should_retry(e.status_code)``) retries a cut stream and gets the whole answer on the
next attempt: two spans, the refused one and the complete one. The SDKs' own retries
(``max_retries``, LiteLLM's ``num_retries``) are on and never fire: a stream fails after its
response began.

What the SDKs do alone is measured here (``reference_error``); strict mode's exception:

- openai: the exception is ``openai.APIConnectionError`` (``__cause__``: the ``StreamFault``,
  also an ``httpx2.RemoteProtocolError``), raised by the loop over the stream (``for chunk in
  stream`` or over the helper's events), so ``get_final_completion()`` /
  ``get_final_response()`` are never reached.
- anthropic: likewise, ``anthropic.APIConnectionError``.
- LiteLLM: ``litellm.exceptions.MidStreamFallbackError`` (a ``litellm.ServiceUnavailableError``, an
  ``openai.APIStatusError``, status 503) whose ``original_exception`` is a
  ``litellm.APIConnectionError``; the ``StreamFault`` (an ``httpx.RemoteProtocolError``: LiteLLM
  sends through ``httpx``, async over its aiohttp transport) is in its context chain. LiteLLM
  already raises this for a clean EOF without a finish reason on its own; strict mode adds the
  invalid arguments. Its ``anthropic/`` streams stop reading at ``message_delta`` (the stop
  reason) and close the response before ``message_stop`` or the end of the body arrive
  (``CustomStreamWrapper``: a content-less chunk after the finish reason raises
  ``StopIteration``, then ``close()``): otelsse judges such a stream by its stop, ``complete``,
  so a missing ``message_stop`` is never seen there, strict or not.
- Invalid tool-call arguments are judged once the answer is whole, so the application may
  still see the per-call "done" events before (Chat Completions' finish chunk and the openai
  helper's ``tool_calls.function.arguments.done``, Responses'
  ``response.function_call_arguments.done`` and ``response.output_item.done``, Anthropic's
  ``content_block_stop``), unless they came in the same read as what settles it; its loop
  raises before the stop (Anthropic's ``message_delta``, Responses' ``response.completed``) or
  at ``[DONE]`` (Chat Completions).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan

import otelsse
from otelsse import semconv
from otelsse._demo.provider import FakeProvider
from tests._clients import CLIENTS, wrapping_depths
from tests._otel import Telemetry
from tests._strict_sdks import (
    CHAT,
    RESPONSES,
    SURFACES,
    Seen,
    Step,
    Surface,
    Variant,
    drain_litellm_logging,
    framing_of,
    litellm,
    retrying,
    session,
)

#: The provider's seed (answers, pacing and framing follow from it and each request's job) and
#: how much faster than a real provider it answers: the tests need the endings, not the pacing.
SEED = 7
SPEED = 50.0
#: The job every request names but the truncated ones (which need a job per framing).
JOB = "answer"
TOOL_ARGUMENTS = {"city": "Paris", "unit": "celsius"}

VARIANTS = [
    Variant("complete", None, False, JOB, "complete"),
    Variant("tool_call", None, True, JOB, "complete"),
    Variant("incomplete", "incomplete", False, JOB, "incomplete"),
    Variant("provider_error", "provider_error", False, JOB, "provider_error"),
    Variant("truncated-chunked", "truncated", False, "", "truncated", framing="chunked"),
    Variant("truncated-close", "truncated", False, "", "truncated", framing="close"),
    Variant("clean_cut", "clean_cut", False, JOB, "truncated"),
    Variant("clean_cut-tools", "clean_cut", True, JOB, "truncated"),
    Variant("tool_call_invalid", "tool_call_invalid", True, JOB, "payload_error"),
    Variant("no_terminal", "no_terminal", False, JOB, "terminal_missing"),
]
BY_ID = {variant.id: variant for variant in VARIANTS}
#: Refused by strict mode's default outcomes. A chunked body cut mid-way is refused too, but the
#: client library raises for it first: the application gets that error, untouched.
REFUSED_BY_DEFAULT = frozenset(
    {"truncated-close", "clean_cut", "clean_cut-tools", "tool_call_invalid"}
)
#: The strict option that refuses a missing end marker as well.
WITH_TERMINAL = ["default", "terminal_missing"]
#: Variants whose tool call strict mode keeps from the application.
BAD_CALLS = frozenset({"clean_cut-tools", "tool_call_invalid"})
#: Scenarios the provider does not serve on a route (a Responses terminal carries its status).
UNSERVED = frozenset({(RESPONSES, "no_terminal")})
#: The combinations in the fast tier: the rest of the matrix is ``matrix``.
FAST = frozenset(
    {
        ("openai-chat-create-sync", "clean_cut"),
        ("openai-chat-create-sync", "complete"),
        ("anthropic-stream-async", "clean_cut-tools"),
    }
)
FAST_RETRIES = frozenset({"openai-chat-create-sync", "anthropic-stream-async"})


def _kind(surface: Surface) -> str:
    return surface.id.rsplit("-", 1)[0]


def reference_error(surface: Surface, variant: Variant) -> tuple[type[BaseException], str] | None:
    """What the SDK alone raises for ``variant`` (its class, the step), None if nothing: the
    problem strict mode answers, measured (an SDK release that changes it changes the docs)."""
    kind, scenario = _kind(surface), variant.id
    if surface.sdk == "litellm":
        # LiteLLM raises on any stream error, and on a clean EOF before a finish reason.
        if scenario in ("provider_error", "truncated-chunked", "truncated-close", "clean_cut",
                        "clean_cut-tools"):  # fmt: skip
            return litellm().exceptions.MidStreamFallbackError, "iterate"
        return None
    sdk = openai if surface.sdk == "openai" else anthropic
    if scenario == "truncated-chunked":
        return sdk.APIConnectionError, "iterate"
    if scenario == "provider_error" and surface.route != RESPONSES:
        # The chat and Anthropic SDKs raise on an error event; Responses yields it as an event.
        return (openai.APIError if sdk is openai else anthropic.APIStatusError), "iterate"
    if kind == "openai-chat-stream" and scenario == "incomplete":
        return openai.LengthFinishReasonError, "final"
    if kind == "openai-responses-stream" and scenario in (
        "incomplete", "provider_error", "truncated-close", "clean_cut", "clean_cut-tools",
    ):  # fmt: skip
        # The helper's final response needs response.completed.
        return RuntimeError, "final"
    return None


def seen_outcome(surface: Surface, variant: Variant) -> str:
    """The outcome otelsse reports for ``variant`` through ``surface``: the scenario's, but
    where LiteLLM's ``anthropic/`` stream closes the response at the stop reason, before the end
    marker would (or would not) come: judged by its stop, complete."""
    if _kind(surface) == "litellm-anthropic" and variant.id == "no_terminal":
        return "complete"
    return variant.outcome


def _matrix() -> Iterator[Any]:
    for surface in SURFACES:
        for variant in VARIANTS:
            if (surface.route, variant.scenario) in UNSERVED:
                continue
            fast = (surface.id, variant.id) in FAST
            yield pytest.param(
                surface, variant, id=f"{surface}-{variant.id}",
                marks=() if fast else pytest.mark.matrix,
            )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider(seed=SEED, speed=SPEED) as running:
        yield running


@pytest.fixture(scope="module")
def cut_jobs(provider: FakeProvider) -> dict[str, str]:
    """A job whose ``truncated`` answer the provider frames chunked, and one close-delimited."""
    found: dict[str, str] = {}
    for number in range(64):
        job = f"cut-{number}"
        found.setdefault(framing_of(provider.port, job), job)
        if len(found) == 2:
            return found
    raise AssertionError(f"no job in cut-0..63 gets both framings: {found}")


@pytest.fixture(scope="module", autouse=True)
def _drain_litellm_logging() -> Iterator[None]:
    """What LiteLLM gave its logging pool has run once this module is done (the pool stays
    open for any later LiteLLM call in the process)."""
    yield
    drain_litellm_logging()


@pytest.fixture
def strict_otel() -> Iterator[Telemetry]:
    """otelsse instrumented with ``strict=True`` against a real in-memory SDK."""
    telemetry = Telemetry().install(strict=True)
    try:
        yield telemetry
    finally:
        telemetry.uninstall()


@contextlib.contextmanager
def reference(otel: Telemetry) -> Iterator[None]:
    """The block runs with otelsse really uninstrumented; then it is instrumented again as
    before (``strict=True``). The block must leave no span."""
    spans = len(otel.spans())
    otelsse.uninstrument()
    assert wrapping_depths() == [0] * len(CLIENTS), "uninstrument() left the clients wrapped"
    try:
        yield
    finally:
        otel.install(strict=True)
    assert len(otel.spans()) == spans, "the reference run was observed: otelsse was still on"


def resolved(variant: Variant, cut_jobs: dict[str, str]) -> Variant:
    if variant.framing is None:
        return variant
    return dataclasses.replace(variant, job=cut_jobs[variant.framing])


# --------------------------------------------------------------------------------------------
# What the application saw, and what otelsse recorded
# --------------------------------------------------------------------------------------------


def _stop_item(surface: Surface, item: Any) -> bool:
    """Whether ``item`` (as dumped) tells the application the answer stopped (not the chat
    route's: there only ``[DONE]`` settles a stop, and it yields no item)."""
    if surface.sdk == "litellm":
        return any(finish for _, _, finish in item)
    if surface.route == RESPONSES:
        return item["type"] in ("response.completed", "response.incomplete")
    return item["type"] in ("message_delta", "message_stop")


def assert_refused(surface: Surface, variant: Variant, seen: Seen, ref: Seen, code: str) -> None:
    """``seen`` is strict mode's refusal: raised in the loop (``assert_strict_error``), after
    exactly what the reference handed over up to there, and no final message."""
    assert seen.where == "iterate", seen
    assert seen.final is None
    assert seen.exception is not None
    assert_strict_error(surface, seen.exception, code)
    # What the application got before the exception is what it got without strict mode.
    assert seen.items == ref.items[: len(seen.items)]
    if code != "payload_error":
        # Refused at the end of the body: everything the body held was handed over.
        assert seen.items == ref.items
    elif surface.route != CHAT:
        # Refused at the read that brought the stop which made the arguments' verdict certain
        # (with whatever came in the same read): the stop is never handed over. On the chat
        # route ``[DONE]`` settles it, and the finish chunk before may come in the same read.
        assert any(_stop_item(surface, item) for item in ref.items)
        assert not any(_stop_item(surface, item) for item in seen.items)


def assert_strict_error(surface: Surface, error: BaseException, code: str) -> None:
    """``error`` is strict mode's refusal as the SDK's usual error for a dropped connection,
    with the ``StreamFault`` (also the HTTP client's cut-body error) in its chain."""
    faults = [e for e in Seen(exception=error).chain() if isinstance(e, otelsse.StreamFault)]
    assert len(faults) == 1, Seen(exception=error).chain()
    fault = faults[0]
    assert fault.code == code
    assert fault.report is not None
    assert fault.report.outcome.value == code
    if surface.sdk == "litellm":
        module = litellm()
        assert isinstance(error, module.exceptions.MidStreamFallbackError)
        assert isinstance(error, module.ServiceUnavailableError)
        assert isinstance(error.original_exception, module.APIConnectionError)
        assert isinstance(fault, httpx.RemoteProtocolError)  # LiteLLM sends through httpx
    else:
        sdk = openai if surface.sdk == "openai" else anthropic
        assert isinstance(error, sdk.APIConnectionError)
        assert error.__cause__ is fault
        assert isinstance(fault, httpx2.RemoteProtocolError)  # openai 3 and anthropic 2: httpx2


def assert_one_span(
    spans: list[ReadableSpan], surface: Surface, outcome: str, *, raised: bool
) -> None:
    assert len(spans) == 1, [dict(s.attributes or {}) for s in spans]
    attributes = dict(spans[0].attributes or {})
    assert attributes[semconv.ROUTE] == surface.route
    assert attributes[semconv.OUTCOME] == outcome
    assert attributes.get(semconv.STRICT_RAISED) is (True if raised else None)


def final_call_arguments(surface: Surface, final: Any) -> Any:
    """The tool call's arguments in a helper's final message."""
    if surface.route == CHAT:
        return final["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    if surface.route == RESPONSES:
        (call,) = [item for item in final["output"] if item["type"] == "function_call"]
        return call["arguments"]
    (block,) = [block for block in final["content"] if block["type"] == "tool_use"]
    return block["input"]


def assert_bad_call_handed_over(surface: Surface, ref: Seen) -> None:
    """Without strict mode the helper's final message holds a call whose arguments are not
    what the provider meant to send: half of them, or invalid JSON."""
    arguments = final_call_arguments(surface, ref.final)
    if isinstance(arguments, str):
        with pytest.raises(json.JSONDecodeError):
            json.loads(arguments)
    else:  # Anthropic parses the partial JSON it got
        assert arguments != TOOL_ARGUMENTS


# --------------------------------------------------------------------------------------------
# The matrix: SDK surface x scenario x (reference, strict off, strict on)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("surface", "variant"), list(_matrix()))
def test_what_the_application_sees(
    strict_otel: Telemetry,
    provider: FakeProvider,
    cut_jobs: dict[str, str],
    surface: Surface,
    variant: Variant,
) -> None:
    variant = resolved(variant, cut_jobs)
    steps = [
        Step(variant, lambda: reference(strict_otel)),
        Step(variant, lambda: otelsse.strict(False)),
        Step(variant),  # instrument(strict=True)
    ]
    if variant.id == "no_terminal":
        steps.append(Step(variant, lambda: otelsse.strict(WITH_TERMINAL)))
    done = session(surface, provider.base_url, steps, strict_otel.spans)
    (ref, ref_spans), (off, off_spans), (on, on_spans), *asked = done
    outcome = seen_outcome(surface, variant)

    # The reference: what the SDK does alone.
    assert ref.items
    expected = reference_error(surface, variant)
    if expected is None:
        assert ref.error is None, ref
    else:
        cls, where = expected
        assert isinstance(ref.exception, cls), ref
        assert ref.where == where, ref
    if variant.id in BAD_CALLS and ref.final is not None:
        assert_bad_call_handed_over(surface, ref)

    # Strict mode off: exactly the reference, one span.
    assert off == ref
    assert_one_span(off_spans[len(ref_spans) :], surface, outcome, raised=False)

    # Strict mode on.
    if variant.id in REFUSED_BY_DEFAULT:
        assert_refused(surface, variant, on, ref, variant.outcome)
    else:
        assert on == ref
    refused = variant.id in REFUSED_BY_DEFAULT
    assert_one_span(on_spans[len(off_spans) :], surface, outcome, raised=refused)

    # A missing end marker, refused when asked for (where the SDK reads as far as it).
    if asked:
        ((terminal, terminal_spans),) = asked
        asked_refused = outcome == "terminal_missing"
        if asked_refused:
            assert_refused(surface, variant, terminal, ref, "terminal_missing")
        else:
            assert terminal == ref
        assert_one_span(terminal_spans[len(on_spans) :], surface, outcome, raised=asked_refused)


# --------------------------------------------------------------------------------------------
# Retrying the way each SDK's documentation says
# --------------------------------------------------------------------------------------------

CUT = BY_ID["clean_cut"]
WHOLE = BY_ID["complete"]


#: Every surface, the fast tier's few in ``FAST_RETRIES``.
RETRY_SURFACES = [
    pytest.param(s, id=str(s), marks=() if s.id in FAST_RETRIES else pytest.mark.matrix)
    for s in SURFACES
]


def cut_then_whole(attempt: int) -> Variant:
    """The provider cuts the first attempt (the scenario header), answers the next in full."""
    return CUT if attempt == 1 else WHOLE


def whole_answer(strict_otel: Telemetry, provider: FakeProvider, surface: Surface) -> str:
    """The text of the whole answer, as the application assembles it without otelsse."""
    ((whole, _),) = session(
        surface, provider.base_url, [Step(WHOLE, lambda: reference(strict_otel))], lambda: None
    )
    return surface.text(whole)


@pytest.mark.parametrize("surface", RETRY_SURFACES)
def test_retry_loop_retries_the_cut_stream(
    strict_otel: Telemetry, provider: FakeProvider, surface: Surface
) -> None:
    answer = whole_answer(strict_otel, provider, surface)
    assert answer

    retried = retrying(surface, provider.base_url, cut_then_whole)

    assert retried.text == answer
    (error,) = retried.errors
    assert_strict_error(surface, error, "truncated")
    first, second = strict_otel.spans()
    assert_one_span([first], surface, "truncated", raised=True)
    assert_one_span([second], surface, "complete", raised=False)
    assert first.context.span_id != second.context.span_id


def _off_retry(
    surface: Surface, base_url: str
) -> tuple[str | None, int, type[BaseException] | None]:
    """The same retry loop with strict mode off: its text, the errors it retried, what it
    raised."""
    try:
        with otelsse.strict(False):
            retried = retrying(surface, base_url, cut_then_whole)
    except Exception as error:
        return None, 0, type(error)
    return retried.text, len(retried.errors), None


@pytest.mark.parametrize("surface", RETRY_SURFACES)
def test_retry_loop_without_strict_mode(
    strict_otel: Telemetry, provider: FakeProvider, surface: Surface
) -> None:
    """What the same loop does without strict mode: most SDKs hand over half the answer and the
    loop never retries; the Responses helper raises ``RuntimeError`` (no
    ``response.completed``), which no documented retry catches; LiteLLM raises on a clean EOF
    before a finish reason itself, so the loop retries."""
    answer = whole_answer(strict_otel, provider, surface)
    text, retries, raised = _off_retry(surface, provider.base_url)
    spans = strict_otel.spans()
    if surface.sdk == "litellm":
        assert (text, retries, raised) == (answer, 1, None)
        assert [s.attributes[semconv.OUTCOME] for s in spans] == ["truncated", "complete"]
    elif _kind(surface) == "openai-responses-stream":
        assert (text, retries, raised) == (None, 0, RuntimeError)
        assert [s.attributes[semconv.OUTCOME] for s in spans] == ["truncated"]
    else:
        assert (retries, raised) == (0, None)
        assert text is not None
        assert answer.startswith(text)  # half the answer, accepted
        assert len(text) < len(answer)
        assert [s.attributes[semconv.OUTCOME] for s in spans] == ["truncated"]
    assert all(semconv.STRICT_RAISED not in (s.attributes or {}) for s in spans)
