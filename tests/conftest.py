"""Shared fixtures.

``otel``: otelsse instrumented against a real in-memory OpenTelemetry SDK. ``server``: a running
``SSEServer``. ``client`` (each of the six clients), ``sync_client`` (one per library that has
one), ``async_client`` (the three async ones) and ``client_style`` (every client with every one
of its read styles): the client harness of ``tests/_clients.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from ._clients import ASYNC_CLIENTS, CLIENTS, SYNC_CLIENTS, Client, Style
from ._otel import Telemetry
from ._server import SSEServer

#: The tiers (markers) and the session's parser build and decoding: ``tests/_tiers.py``.
pytest_plugins = ["tests._tiers"]

# Hypothesis' pytest plugin imports its patch writer (and libcst) when a property fails; libcst
# warns on import, which filterwarnings=error turns into a pytest INTERNALERROR in place of the
# falsifying example. Importing it once here, warnings off, keeps every failure readable.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:  # libcst is optional
        pass


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    telemetry = Telemetry().install()
    try:
        yield telemetry
    finally:
        telemetry.uninstall()


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as running:
        yield running


@pytest.fixture(params=CLIENTS, ids=str)
def client(request: pytest.FixtureRequest) -> Client:
    """Each client: httpx and httpx2, sync and async, requests and aiohttp."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=SYNC_CLIENTS, ids=str)
def sync_client(request: pytest.FixtureRequest) -> Client:
    """Each library's sync client: httpx, httpx2, requests."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=ASYNC_CLIENTS, ids=str)
def async_client(request: pytest.FixtureRequest) -> Client:
    """Each async client: httpx, httpx2 and aiohttp."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(
    params=[(client, style) for client in CLIENTS for style in client.styles],
    ids=lambda pair: f"{pair[0]}-{pair[1]}",
)
def client_style(request: pytest.FixtureRequest) -> tuple[Client, Style]:
    """Each client with each of its read styles."""
    return request.param  # type: ignore[no-any-return]
