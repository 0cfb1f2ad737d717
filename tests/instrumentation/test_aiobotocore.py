"""aiobotocore streaming from Amazon Bedrock: observed once, through aiohttp, over real HTTP.

aiobotocore adds no hook of its own to otelsse. Its ``AioEndpoint`` overrides botocore's
``Endpoint._send`` (which the botocore client module wraps) with a coroutine that sends through
aiohttp's ``ClientSession.request`` (aiobotocore ``httpsession.py``), where the aiohttp client
module starts the span; its ``AioEventStream`` reads ``response.content.iter_chunks()``, which
runs through the aiohttp module's tap. Here the real aiobotocore client (against
``SSEServer``, as in ``test_botocore.py``) gets exactly one ``otelsse.stream`` span per stream,
with the Bedrock route's outcome, model and provider, while botocore's ``Endpoint._send`` is
wrapped too; and the application iterating ``response["stream"]`` with ``async for`` gets the
same events and exception as with otelsse really uninstrumented. The enforcing reader reads an
``AioEventStream`` too (``client_of`` gives botocore's client, which reads its aiohttp response
through aiohttp's).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import aiobotocore.session
import aiohttp
import botocore.config
import botocore.exceptions
import pytest

import otelsse
from tests import _eventstream as es
from tests._clients import READ_TIMEOUT
from tests._fixtures import read_fixture
from tests._helpers import soon
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.instrumentation.test_botocore import (
    CANARY,
    CONVERSE_PATH,
    INVOKE,
    INVOKE_BODY,
    INVOKE_PATH,
    MESSAGES,
    MODEL,
    TEXT,
    TEXT_ENDS,
    Seen,
    collect,
    expected_text,
    observed,
    reference,
    served,
    wrappers,
)

#: One aiobotocore session for the module, its service models loaded now (see
#: ``test_botocore.SESSION``).
SESSION = aiobotocore.session.get_session()


def bedrock(server_url: str) -> Any:
    """An aiobotocore bedrock-runtime client (an async context manager), one attempt per call."""
    return SESSION.create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=botocore.config.Config(
            retries={"total_max_attempts": 1},
            read_timeout=READ_TIMEOUT,
            connect_timeout=READ_TIMEOUT,
        ),
    )


async def _loaded() -> None:
    async with bedrock("http://127.0.0.1"):
        pass


asyncio.run(_loaded())


async def converse(server: SSEServer) -> Seen:
    """``converse_stream`` and an ``async for`` over ``response["stream"]``."""
    seen = Seen()
    async with bedrock(server.url("")) as client:
        try:
            response = await client.converse_stream(modelId=MODEL, messages=MESSAGES)
            async for event in response["stream"]:
                seen.events.append(event)
        except Exception as exc:
            seen.caught = (type(exc), str(exc))
    return seen


async def invoke(server: SSEServer) -> Seen:
    """``invoke_model_with_response_stream`` and an ``async for`` over ``response["body"]``."""
    seen = Seen()
    async with bedrock(server.url("")) as client:
        try:
            response = await client.invoke_model_with_response_stream(
                modelId=MODEL, body=INVOKE_BODY
            )
            async for event in response["body"]:
                seen.events.append(event)
        except Exception as exc:
            seen.caught = (type(exc), str(exc))
    return seen


@pytest.fixture(autouse=True)
def both_wrapped(otel: Telemetry) -> None:
    """botocore's ``Endpoint._send`` is wrapped as well as aiohttp: aiobotocore must not reach
    it (a second span)."""
    assert wrappers() == 1


#: How long a stream the application left open may take to be collected and ended.
COLLECTED_BOUND = 10.0


def compared(
    otel: Telemetry,
    server: SSEServer,
    path: str,
    reply: Reply,
    call: Callable[[SSEServer], Coroutine[Any, Any, Seen]] = converse,
) -> Seen:
    """What the application saw of ``reply``, the same with otelsse as in the reference run;
    the span ended by the time the client closed (aiohttp lets go of a response there)."""
    server.route(path, reply)
    with reference(otel):
        expected = asyncio.run(call(server))
        collect()
    seen = asyncio.run(call(server))
    seen.ended_uncollected = len(otel.spans())

    def ended() -> bool:
        # What holds a body the application left open may outlive its call a little (the
        # closed event loop's last callbacks): collected until the stream's span ended.
        collect()
        return bool(otel.spans())

    soon(ended, COLLECTED_BOUND, "the stream's span, once its body was collected")
    assert seen == expected
    return seen


def test_a_converse_stream_is_one_span_complete(otel: Telemetry, server: SSEServer) -> None:
    seen = compared(otel, server, CONVERSE_PATH, served(TEXT))
    assert seen.caught is None
    assert len(seen.events) == len(TEXT_ENDS)
    observed(otel, "complete", seen)


def test_a_cut_body_raises_aiohttps_error_and_is_one_span_truncated(
    otel: Telemetry, server: SSEServer
) -> None:
    seen = compared(otel, server, CONVERSE_PATH, served(TEXT, cut=TEXT_ENDS[3] + 10))
    assert seen.caught is not None
    assert seen.caught[0] is aiohttp.ClientPayloadError
    assert len(seen.events) == 4
    observed(otel, "truncated", seen)


def test_a_throttling_frame_raises_botocores_error_and_is_one_span_rate_limited(
    otel: Telemetry, server: SSEServer
) -> None:
    body = TEXT[: TEXT_ENDS[3]] + es.exception("throttlingException", f"{CANARY} slow down")
    seen = compared(otel, server, CONVERSE_PATH, served(body))
    assert seen.caught is not None
    assert seen.caught[0] is botocore.exceptions.EventStreamError
    assert len(seen.events) == 4
    # botocore raised with the body open: aiohttp lets go of it when the session closes, or the
    # collector does when the event loop closed first (asyncio.run's order, not otelsse's).
    observed(otel, "rate_limited", seen, collected=None)


@pytest.mark.matrix
def test_a_429_at_the_headers_is_one_span_rate_limited(otel: Telemetry, server: SSEServer) -> None:
    reply = Reply(
        json.dumps({"message": f"{CANARY} no"}).encode(),
        status=429,
        content_type="application/json",
        framing="length",
        headers=(("x-amzn-ErrorType", "ThrottlingException:http://internal.amazon.com/coral/"),),
    )
    seen = compared(otel, server, CONVERSE_PATH, reply)
    assert seen.caught is not None
    assert seen.caught[0].__name__ == "ThrottlingException"
    observed(otel, "rate_limited", seen)


@pytest.mark.matrix
def test_an_invoke_stream_is_one_span_complete(otel: Telemetry, server: SSEServer) -> None:
    body = read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream")
    seen = compared(otel, server, INVOKE_PATH, served(body), invoke)
    assert seen.caught is None
    observed(otel, "complete", seen, route=INVOKE)


@pytest.mark.matrix
def test_the_enforcing_reader_reads_an_aioeventstream(otel: Telemetry, server: SSEServer) -> None:
    server.route(CONVERSE_PATH, served(TEXT))

    async def main() -> Any:
        async with bedrock(server.url("")) as client:
            response = await client.converse_stream(modelId=MODEL, messages=MESSAGES)
            return await otelsse.aread_stream(response["stream"], idle_timeout=READ_TIMEOUT)

    result = asyncio.run(main())
    assert result.text == expected_text(TEXT)
    assert result.stop_reason == "end_turn"
    observed(otel, "complete")
