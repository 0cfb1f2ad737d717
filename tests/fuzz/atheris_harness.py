"""Coverage-guided long runs with atheris (libFuzzer for Python); not collected by pytest.

Each input is checked twice: its bytes as a stream (for every route), and as the recipe for a
mutated recorded fixture, limits (default or small), a chunking and a route (the same mutations
as the Hypothesis tests, choices taken from the input). Every property of ``tests/fuzz`` is
checked on both: the parser, the monitor, ``read_stream``, and the reader's agreement with the
monitor. A violation is an uncaught exception, which atheris reports with the input saved as
``crash-<sha1>``.

From the repository root (``pip install atheris`` first)::

    python -m tests.fuzz.atheris_harness -max_total_time=3600 -print_final_stats=1
    python -m tests.fuzz.atheris_harness corpus/ tests/fixtures/real   # grow corpus/ from seeds
    python -m tests.fuzz.atheris_harness crash-<sha1>                   # replay one input

``OTELSSE_FUZZ_SMALL_LIMITS=0`` leaves out the small ``Limits`` (default limits only).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import TypeVar

import atheris

with atheris.instrument_imports():
    import otelsse  # noqa: F401 - instrumented for coverage feedback

from otelsse import Limits
from otelsse.routes import route_names

from ._checks import check_agreement, check_monitor, check_parser, check_reader
from ._inputs import FIXTURE_NAMES, mutate, seed

T = TypeVar("T")
ROUTES = route_names()
#: ``OTELSSE_FUZZ_SMALL_LIMITS=0`` keeps default limits (to look past a known limit bug).
SMALL_LIMITS = os.environ.get("OTELSSE_FUZZ_SMALL_LIMITS", "1") != "0"


class ProviderChooser:
    """A ``Chooser`` whose choices come from the fuzzer's input."""

    def __init__(self, provider: atheris.FuzzedDataProvider) -> None:
        self._provider = provider

    def integer(self, low: int, high: int, label: str) -> int:
        return int(self._provider.ConsumeIntInRange(low, high))

    def choice(self, options: Sequence[T], label: str) -> T:
        return options[self.integer(0, len(options) - 1, label)]


def _cuts(provider: atheris.FuzzedDataProvider, body: bytes) -> list[int]:
    if len(body) < 2:
        return []
    count = provider.ConsumeIntInRange(0, 16)
    return [provider.ConsumeIntInRange(1, len(body) - 1) for _ in range(count)]


def _limits(provider: atheris.FuzzedDataProvider) -> Limits | None:
    if provider.ConsumeBool() or not SMALL_LIMITS:
        return None
    small = {}
    for field in dataclasses.fields(Limits):
        if field.name.endswith("_bytes"):
            small[field.name] = provider.ConsumeIntInRange(64, 4096)
        elif field.name.endswith("_chars"):
            small[field.name] = provider.ConsumeIntInRange(0, 256)
        else:
            small[field.name] = provider.ConsumeIntInRange(0, 4)
    return Limits(**small)


def check_everything(
    body: bytes, limits: Limits | None, cuts: list[int], routes: Sequence[str] = ROUTES
) -> None:
    check_parser(body, cuts)
    for route in routes:
        check_monitor(body, route, limits, cuts)
        check_reader(body, route, limits, cuts)
        check_agreement(body, route, None)


def test_one_input(data: bytes) -> None:
    # The input as a stream, one read / one byte per read / one read per event, default limits.
    check_everything(data, None, [])
    # The input as a recipe: a mutated fixture, limits, a chunking and one route (for speed).
    provider = atheris.FuzzedDataProvider(data)
    chooser = ProviderChooser(provider)
    name = chooser.choice(FIXTURE_NAMES, "fixture")
    body, _ = mutate(seed(name), chooser, chooser.integer(1, 4, "mutation count"))
    limits = _limits(provider)
    cuts = _cuts(provider, body)
    check_everything(body, limits, cuts, [chooser.choice(ROUTES, "route")])


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
