"""Strict mode through every client: a refused stream raises in the application's own read.

Each client (httpx and httpx2, sync and async, requests, aiohttp) reads a real server on
127.0.0.1 that ends a body cleanly where it should not (before the route's terminal event), or
sends a byte the stream cannot outgrow (an invalid payload, invalid UTF-8, a line past the
ceiling). With strict mode on, the read raises an exception that is both ``StreamFault`` and
the client's own error for a body cut mid-way, at the read where the verdict became certain;
the span ends once with the outcome and ``otelsse.strict.raised``; the session goes on serving.
With strict mode off, or for an acceptable stream, the application gets exactly what it gets
without otelsse. The real SDKs on top: ``test_strict_sdks.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from pathlib import Path
from typing import Any

import pytest

import otelsse
from otelsse import StreamFault, semconv
from otelsse._monitor import Limits
from otelsse._strict import STRICT_ENV, STRICTABLE, strict_outcomes
from tests._clients import (
    UNSTREAMED,
    AsyncSession,
    Client,
    Got,
    Session,
    Style,
    aread,
    fetch,
    read,
    uninstrumented,
)
from tests._otel import Telemetry
from tests._server import Reply, SSEServer

PATH = "/v1/chat/completions"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    payload = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


ANSWER = [_chunk({"role": "assistant", "content": ""})] + [
    _chunk({"content": word}) for word in ("Strict ", "mode ", "says ", "so.")
]
COMPLETE = b"".join([*ANSWER, _chunk({}, "stop"), b"data: [DONE]\n\n"])
#: The body ends cleanly between two events, before the answer's end: nothing at the byte level
#: is wrong, and without otelsse every client reports a clean end.
CLEAN_CUT = b"".join(ANSWER)
#: Whole and finished, but ``[DONE]`` never comes: refused only when asked.
NO_DONE = b"".join([*ANSWER, _chunk({}, "stop")])
#: A chunk that is not JSON in the middle of an otherwise whole stream.
BAD_EVENT = b"data: {not json\n\n"
INVALID_PAYLOAD = b"".join([*ANSWER[:2], BAD_EVENT, *ANSWER[2:], _chunk({}, "stop")]) + (
    b"data: [DONE]\n\n"
)
INVALID_UTF8 = COMPLETE.replace(b"says", b"s\xffys")


#: Read styles that hand over the whole body in one call.
WHOLE_BODY = {
    UNSTREAMED.name, "read", "aread", "raw.read-all", "content", "text", "content.read-all",
    "response.read", "response.text",
}  # fmt: skip


def _server_reply(body: bytes, **reply: Any) -> Reply:
    # One event per piece, so that a fault arrives in a read of its own.
    return Reply(body, piece=reply.pop("piece", 64), **reply)


def _refusal(got: Got, client: Client) -> StreamFault:
    """The exception the application caught: strict mode's refusal, as the client's own."""
    error = got.error
    assert isinstance(error, StreamFault), got.caught
    assert isinstance(error, client.raises("transport").raised), type(error).__mro__
    assert "refused by otelsse strict mode" in str(error)
    return error


def _fetch_strict(client: Client, url: str, style: Style | None = None, **kw: Any) -> Got:
    with otelsse.strict():
        return fetch(client, url, style, **kw)


def _reference(
    server: SSEServer, reply: Reply, otel: Telemetry, client: Client, style: Style | None = None
) -> tuple[str, Got]:
    """``reply`` served at ``PATH``: its URL, and what ``client`` reads there (in ``style``)
    without otelsse."""
    url = server.route(PATH, reply)
    with uninstrumented(otel):
        return url, fetch(client, url, style)


# -- the policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (None, set()),
        (False, set()),
        ("", set()),
        ("off", set()),
        (True, otelsse.STRICT_DEFAULT),
        ("true", otelsse.STRICT_DEFAULT),
        ("default,terminal_missing", {*otelsse.STRICT_DEFAULT, "terminal_missing"}),
        (["truncated"], {"truncated"}),
        (" truncated , payload_error ", {"truncated", "payload_error"}),
    ],
)
def test_strict_outcomes_reads_every_form_of_the_option(option: Any, expected: set[str]) -> None:
    assert {outcome.value for outcome in strict_outcomes(option)} == set(expected)


@pytest.mark.parametrize("name", ["complete", "timeout", "cancelled", "http_error", "nonsense"])
def test_strict_mode_cannot_refuse_what_no_body_decides(name: str) -> None:
    assert name not in STRICTABLE
    with pytest.raises(ValueError, match=name):
        strict_outcomes([name])
    with pytest.raises(ValueError, match=name):
        otelsse.strict([name]).__enter__()


def test_an_unknown_outcome_given_to_instrument_raises_and_patches_nothing() -> None:
    with pytest.raises(ValueError, match="finished"):
        otelsse.instrument(strict=["finished"])
    assert not otelsse.SSEInstrumentor().is_instrumented_by_opentelemetry


def test_a_typo_in_the_environment_is_left_out_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otelsse._instrumentor import _env_strict

    monkeypatch.setenv(STRICT_ENV, "truncated,terminal_mising")
    with caplog.at_level(logging.WARNING, logger="otelsse"):
        assert {o.value for o in _env_strict()} == {"truncated"}
    assert [r.getMessage() for r in caplog.records] == [
        f"otelsse ignores the {STRICT_ENV} entry 'terminal_mising': strict mode cannot refuse "
        f"'terminal_mising'; it refuses any of: {', '.join(sorted(STRICTABLE))} (or 'default')"
    ]
    monkeypatch.setenv(STRICT_ENV, "yes please")  # nothing valid: strict mode was wanted
    with caplog.at_level(logging.WARNING, logger="otelsse"):
        assert {o.value for o in _env_strict()} == otelsse.STRICT_DEFAULT


# -- a cut body: every client, every read style -------------------------------------------------


def test_a_clean_cut_raises_at_the_end_in_every_read_style(
    client_style: tuple[Client, Style], server: SSEServer, otel: Telemetry
) -> None:
    client, style = client_style
    url, reference = _reference(server, _server_reply(CLEAN_CUT), otel, client, style)
    assert reference.error is None  # what strict mode is for: without it, a clean end
    observed = fetch(client, url, style)
    assert observed.seen == reference.seen
    assert otel.stream_span().attributes[semconv.OUTCOME] == "truncated"
    assert semconv.STRICT_RAISED not in otel.stream_span().attributes
    otel.exporter.clear()

    refused = _fetch_strict(client, url, style)
    fault = _refusal(refused, client)
    assert fault.code == "truncated"
    assert fault.report is not None
    assert fault.report.outcome == "truncated"
    # What the body held was handed over before the end raised; the read that met the end
    # raises in place of returning what it read: a read of the whole body in one call, and
    # aiohttp's read that brings the last bytes along with the end.
    if style.name in WHOLE_BODY:
        assert not refused.parts
    elif client.library == "aiohttp":
        assert reference.data[: len(refused.data)] == refused.data
    else:
        assert refused.data == reference.data
    span = otel.stream_span()
    assert span.attributes[semconv.OUTCOME] == "truncated"
    assert span.attributes[semconv.STRICT_RAISED] is True


def test_a_complete_stream_is_untouched_in_every_read_style(
    client_style: tuple[Client, Style], server: SSEServer, otel: Telemetry
) -> None:
    client, style = client_style
    url, reference = _reference(server, _server_reply(COMPLETE), otel, client, style)
    observed = _fetch_strict(client, url, style)
    assert observed.seen == reference.seen
    assert observed.error is None
    span = otel.stream_span()
    assert span.attributes[semconv.OUTCOME] == "complete"
    assert semconv.STRICT_RAISED not in span.attributes


# -- faults no later byte undoes: raised at the read that brought them ---------------------------


def _end_of(body: bytes, at: int, separator: bytes = b"\n\n") -> int:
    """Where the event (or line) holding byte ``at`` ends: its fault is certain there."""
    return body.index(separator, at) + len(separator)


LONG_LINE = COMPLETE.replace(b"says", b"s" + b"a" * 600 + b"ys")


@pytest.mark.parametrize(
    ("body", "certain_at", "outcome", "limits"),
    [
        (
            INVALID_PAYLOAD,
            _end_of(INVALID_PAYLOAD, INVALID_PAYLOAD.index(BAD_EVENT)),
            "payload_error",
            None,
        ),
        (
            INVALID_UTF8,
            _end_of(INVALID_UTF8, INVALID_UTF8.index(b"\xff"), b"\n"),
            "decode_error",
            None,
        ),
        # Past the ceiling, wherever the line ends.
        (LONG_LINE, LONG_LINE.rindex(b"data: ", 0, LONG_LINE.index(b"aaa")) + 257,
         "buffer_limit", Limits(max_line_bytes=256)),
    ],
    ids=["payload_error", "decode_error", "buffer_limit"],
)  # fmt: skip
def test_a_fault_raises_at_its_read_and_that_read_is_not_handed_over(
    client: Client,
    server: SSEServer,
    body: bytes,
    certain_at: int,
    outcome: str,
    limits: Limits | None,
) -> None:
    url = server.route(PATH, _server_reply(body))
    telemetry = Telemetry().install(limits=limits or Limits())
    try:
        got = _fetch_strict(client, url)
        fault = _refusal(got, client)
        assert fault.code == outcome
        # The read that made the fault certain raised in place of being handed on: the
        # application never got the whole faulty event (or line), nor anything after it.
        assert len(got.data) < certain_at, (len(got.data), certain_at)
        assert body.startswith(got.data)
        span = telemetry.stream_span()
        assert span.attributes[semconv.OUTCOME] == outcome
        assert span.attributes[semconv.STRICT_RAISED] is True
    finally:
        telemetry.uninstall()


# -- what strict mode refuses is configurable -----------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "raises"),
    [
        (True, False),  # the default: a whole answer without its marker is accepted
        (["default", "terminal_missing"], True),
        (["terminal_missing"], True),
        (["truncated"], False),
    ],
)
def test_terminal_missing_is_refused_only_when_asked(
    sync_client: Client, server: SSEServer, otel: Telemetry, scope: Any, raises: bool
) -> None:
    url = server.route(PATH, _server_reply(NO_DONE))
    with otelsse.strict(scope):
        got = fetch(sync_client, url)
    assert (got.error is not None) is raises
    if raises:
        assert _refusal(got, sync_client).code == "terminal_missing"
    else:
        assert got.data == NO_DONE
    assert otel.stream_span().attributes[semconv.OUTCOME] == "terminal_missing"


def test_instrument_strict_is_the_default_and_a_block_turns_it_off(
    server: SSEServer, sync_client: Client
) -> None:
    url = server.route(PATH, _server_reply(CLEAN_CUT))
    telemetry = Telemetry().install(strict=True)
    try:
        assert _refusal(fetch(sync_client, url), sync_client).code == "truncated"
        with otelsse.strict(False):
            assert fetch(sync_client, url).error is None
        assert [s.attributes.get(semconv.STRICT_RAISED) for s in telemetry.spans()] == [True, None]
    finally:
        telemetry.uninstall()


def test_the_environment_turns_strict_mode_on_for_zero_code_setups(
    server: SSEServer, monkeypatch: pytest.MonkeyPatch, sync_client: Client
) -> None:
    monkeypatch.setenv(STRICT_ENV, "true")
    telemetry = Telemetry().install()
    try:
        url = server.route(PATH, _server_reply(CLEAN_CUT))
        assert _refusal(fetch(sync_client, url), sync_client).code == "truncated"
    finally:
        telemetry.uninstall()


def test_the_block_is_read_when_the_request_is_sent_in_each_task(
    server: SSEServer, otel: Telemetry
) -> None:
    url = server.route(PATH, _server_reply(CLEAN_CUT))
    client = Client("httpx", is_async=True)

    async def strict_task(http: AsyncSession) -> Got:
        with otelsse.strict():
            return await aread(http, url)

    async def main() -> list[Got]:
        async with AsyncSession(client) as http:
            # Concurrent tasks: each has its own context, so the block covers one of them.
            return list(await asyncio.gather(strict_task(http), aread(http, url)))

    strict_got, plain_got = asyncio.run(main())
    assert _refusal(strict_got, client).code == "truncated"
    assert plain_got.error is None
    assert plain_got.data == CLEAN_CUT


# -- raising never corrupts state ----------------------------------------------------------------


def test_after_a_refusal_the_session_serves_the_next_stream(
    sync_client: Client, server: SSEServer, otel: Telemetry
) -> None:
    cut = server.route(PATH, _server_reply(INVALID_PAYLOAD))  # refused mid-body
    whole = server.route("/v1/whole/chat/completions", _server_reply(COMPLETE))
    with Session(sync_client) as http, otelsse.strict():
        first = read(http, cut)
        second = read(http, whole)
        third = read(http, cut)
    assert _refusal(first, sync_client).code == "payload_error"
    assert second.error is None
    assert second.data == COMPLETE
    assert _refusal(third, sync_client).code == "payload_error"
    outcomes = [s.attributes[semconv.OUTCOME] for s in otel.spans()]
    assert outcomes == ["payload_error", "complete", "payload_error"]
    assert otel.active_streams() == 0
    assert otel.instrumentation_errors() == 0


def test_after_a_refusal_the_async_session_serves_the_next_stream(
    async_client: Client, server: SSEServer, otel: Telemetry
) -> None:
    cut = server.route(PATH, _server_reply(CLEAN_CUT))
    whole = server.route("/v1/whole/chat/completions", _server_reply(COMPLETE))

    async def main() -> list[Got]:
        async with AsyncSession(async_client) as http:
            with otelsse.strict():
                return [await aread(http, cut), await aread(http, whole)]

    first, second = asyncio.run(main())
    assert _refusal(first, async_client).code == "truncated"
    assert second.error is None
    assert second.data == COMPLETE
    assert [s.attributes[semconv.OUTCOME] for s in otel.spans()] == ["truncated", "complete"]
    assert otel.active_streams() == 0


def test_an_error_status_is_the_applications_as_without_otelsse(
    client: Client, server: SSEServer, otel: Telemetry
) -> None:
    # Refused at its headers, the body is not a stream: the SDKs raise for the status.
    reply = Reply(b'{"error": "overloaded"}', status=503, reason="Busy", content_type="a/json")
    url, reference = _reference(server, reply, otel, client)
    assert _fetch_strict(client, url).exact == reference.exact
    assert otel.stream_span().attributes[semconv.OUTCOME] == "http_error"


@pytest.mark.parametrize(
    ("body", "outcome"), [(CLEAN_CUT, "truncated"), (INVALID_PAYLOAD, "payload_error")]
)
def test_a_gzip_body_is_judged_as_decoded(
    client: Client, server: SSEServer, otel: Telemetry, body: bytes, outcome: str
) -> None:
    # Each event flushed on its own, as a streaming server codes it.
    coder = zlib.compressobj(wbits=31)
    coded = (
        b"".join(coder.compress(event) + coder.flush(zlib.Z_SYNC_FLUSH) for event in _events(body))
        + coder.flush()
    )
    headers = (("content-encoding", "gzip"),)
    url = server.route(PATH, _server_reply(coded, headers=headers))
    got = _fetch_strict(client, url)
    assert _refusal(got, client).code == outcome
    assert body.startswith(got.data)
    assert otel.stream_span().attributes[semconv.OUTCOME] == outcome


def _events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def test_a_refused_stream_is_recorded_as_it_was_refused(
    sync_client: Client, server: SSEServer, tmp_path: Path
) -> None:
    from otelsse.recorder import FlightRecorder, load_recording
    from tests.instrumentation.test_recording import recordings

    url = server.route(PATH, _server_reply(INVALID_PAYLOAD))
    telemetry = Telemetry().install(recorder=FlightRecorder(tmp_path), strict=True)
    try:
        got = fetch(sync_client, url)
        attributes = dict(telemetry.stream_span().attributes or {})
    finally:
        telemetry.uninstall()
    assert _refusal(got, sync_client).code == "payload_error"
    recording = load_recording(recordings(tmp_path)[str(attributes[semconv.RECORDING_ID])])
    # What the monitor judged up to the refusal, and nothing the application did not read.
    assert recording.outcome == "payload_error"
    assert recording.replay().outcome.value == "payload_error"
