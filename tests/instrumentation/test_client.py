"""The client registry and what every client module answers: which client made a response, how
an exception ended a stream, whether a request body asks for a stream.

Units: exceptions are built the way each library raises them (a requests ``ConnectionError``
around urllib3's ``ReadTimeoutError``, a ``MaxRetryError`` raised from a refused connection);
responses are the libraries' own classes.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import subprocess
import sys
import types

import httpx
import httpx2
import pytest
import requests
import urllib3

from otelsse._clients import CLIENT_MODULES, client_of, get_client, request_fields, stream_error
from otelsse._monitor import StreamError


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    try:
        raise error from cause
    except BaseException as raised:
        return raised


class FrameworkCancelled(asyncio.CancelledError):
    """A framework's own cancellation: asyncio's, under another name."""


class Cancelled(Exception):
    """An error that only shares trio's cancellation's name (google-api-core has one, for a
    gRPC call the server cancelled)."""


_READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]
_REFUSED = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
_REQUEST = httpx.Request("POST", "http://h/v1/chat/completions")
_REQUEST2 = httpx2.Request("POST", "http://h/v1/chat/completions")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (GeneratorExit(), "cancelled"),
        (KeyboardInterrupt(), "cancelled"),
        (asyncio.CancelledError(), "cancelled"),
        (FrameworkCancelled(), "cancelled"),
        (Cancelled(), "transport"),
        (TimeoutError(), "timeout"),
        (_raised_from(OSError("reset"), TimeoutError()), "timeout"),
        (OSError("reset"), "transport"),
        (httpx.ReadTimeout("t", request=_REQUEST), "timeout"),
        (httpx.ConnectTimeout("t", request=_REQUEST), "timeout"),
        (httpx.RemoteProtocolError("peer closed"), "transport"),
        (httpx.ConnectError("refused"), "transport"),
        (httpx2.ReadTimeout("t", request=_REQUEST2), "timeout"),
        (httpx2.RemoteProtocolError("peer closed"), "transport"),
        (requests.exceptions.ReadTimeout(), "timeout"),
        (requests.exceptions.ConnectionError(_READ_TIMEOUT), "timeout"),
        (requests.exceptions.ChunkedEncodingError("cut"), "transport"),
        (
            _raised_from(
                requests.exceptions.ConnectionError("refused"),
                _raised_from(urllib3.exceptions.MaxRetryError(None, "/"), _REFUSED),  # type: ignore[arg-type]
            ),
            "transport",
        ),
    ],
    ids=repr,
)
def test_every_client_maps_its_own_exceptions(error: BaseException, kind: StreamError) -> None:
    assert stream_error(error) == kind


def test_classifying_an_error_imports_no_event_loop_library() -> None:
    """trio's and anyio's cancellation are recognised only when their library is loaded: an
    application that never imported one cannot have been cancelled by it."""
    code = (
        "import sys; from otelsse._clients import stream_error; "
        "assert stream_error(KeyboardInterrupt()) == 'cancelled'; "
        "assert stream_error(OSError()) == 'transport'; "
        "print(sorted({'trio', 'anyio'} & set(sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


@pytest.mark.parametrize("library", ["trio", "asyncio", "httpx", "requests", "aiohttp"])
def test_a_library_another_thread_is_still_importing_never_breaks_classifying(
    monkeypatch: pytest.MonkeyPatch, library: str
) -> None:
    """While another thread imports a library, ``sys.modules`` holds it without the names it
    has not defined yet (found in the demo: trio half imported by one client's thread while
    another's read failed, and the AttributeError reached the application in place of its
    ChunkedEncodingError). Such a library cannot have raised: it is left out."""
    half = types.ModuleType(library)
    half.__spec__ = importlib.machinery.ModuleSpec(library, None)
    half.__spec__._initializing = True  # type: ignore[attr-defined]  # CPython's import mark
    monkeypatch.setitem(sys.modules, library, half)
    cut = urllib3.exceptions.ProtocolError("Response ended prematurely")
    assert stream_error(cut) == "transport"
    assert stream_error(KeyboardInterrupt()) == "cancelled"
    assert stream_error(TimeoutError()) == "timeout"


def test_a_cause_cycle_does_not_loop() -> None:
    first, second = OSError("a"), OSError("b")
    first.__context__, second.__context__ = second, first
    assert stream_error(first) == "transport"


@pytest.mark.parametrize(
    ("response", "library"),
    [
        (httpx.Response(200, request=_REQUEST), "httpx"),
        (httpx2.Response(200, request=_REQUEST2), "httpx2"),
        (requests.Response(), "requests"),
        ([b"data: x\n\n"], None),
        (iter([b"data: x\n\n"]), None),
    ],
    ids=["httpx", "httpx2", "requests", "list", "iterator"],
)
def test_a_response_is_read_by_the_client_of_its_library(response: object, library: str) -> None:
    client = client_of(response)
    assert (client and client.library) == library


def test_a_subclass_of_a_client_response_is_that_client_s() -> None:
    class AppResponse(httpx.Response):
        pass

    client = client_of(AppResponse(200, request=_REQUEST))
    assert client is not None
    assert client.library == "httpx"


def test_every_registered_client_names_its_library_and_targets() -> None:
    for library in CLIENT_MODULES:
        client = get_client(library)
        assert client.library == library
        assert all(callable(make) for _, _, make in client.targets())
    with pytest.raises(KeyError):
        get_client("pycurl")


def test_a_requests_response_cannot_be_read_asynchronously() -> None:
    client = get_client("requests")
    with pytest.raises(TypeError, match="asynchronously"):
        client.achunks(requests.Response())


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
def test_request_fields_read_the_stream_flag(body: object, asks: bool) -> None:
    assert request_fields(body).stream is asks


@pytest.mark.parametrize(
    ("body", "model"),
    [
        ({"model": "gpt-4o"}, "gpt-4o"),
        ({"model": 4}, None),
        ({"model": "x" * 257}, None),  # an identifier, not a document
        (b'{"model":"gpt-4o-mini","stream":true}', "gpt-4o-mini"),
        ('{"stream": true, "model" : "claude-sonnet-4-5"}', "claude-sonnet-4-5"),
        (b'{"model": "caf\\u00e9"}', "caf\u00e9"),  # a JSON escape is decoded
        # a "model" key quoted inside message text is content: its quotes are escaped
        (b'{"messages": [{"content": "say \\"model\\": \\"leak\\""}], "model": "m1"}', "m1"),
        (b'{"messages": [{"content": "\\"model\\": \\"leak\\""}]}', None),
        (b'{"model": null}', None),
        (b'{"model": "' + b"y" * 300 + b'"}', None),
        (b"\xff\xfe not json", None),
        (None, None),
    ],
)
def test_request_fields_read_the_model_and_never_content(body: object, model: str | None) -> None:
    assert request_fields(body).model == model
