"""Every core test runs twice: with the parser's compiled hot path (``_framing_speedups.c``, as
a wheel built with a C compiler runs) and with the pure-Python parser alone (as a build without
one runs), which is the definition the compiled path must match (``test_framing_speedups.py``
compares the two directly)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otelsse._core import framing


@pytest.fixture(autouse=True, scope="module", params=["compiled", "pure"])
def parser_build(request: pytest.FixtureRequest) -> Iterator[str]:
    """The build the parser runs as, for a whole module (module scope: Hypothesis tests too)."""
    saved = framing.simple_event
    if request.param == "pure":
        framing.simple_event = None
    else:
        assert saved is not None, "the C speedup is not built (see hatch_build.py)"
    try:
        yield request.param
    finally:
        framing.simple_event = saved
