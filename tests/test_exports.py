"""The public API is small, sorted, and every name in ``__all__`` exists and says it is ours."""

from __future__ import annotations

import otelsse


def test_all_is_sorted_and_complete() -> None:
    assert list(otelsse.__all__) == sorted(otelsse.__all__)
    public = {name for name in dir(otelsse) if not name.startswith("_")}
    modules = {"monitor", "reader", "routes", "semconv", "version", "cli"}
    modules |= {
        "instrumentation",
        "telemetry",
        "demo",
        "gate",
        "ledger",
        "recorder",
        "asgi",
        "proxy",
    }
    assert public - modules == set(otelsse.__all__) - {"__version__"}


def test_public_classes_and_functions_report_the_package_as_their_module() -> None:
    for name in otelsse.__all__:
        value = getattr(otelsse, name)
        if callable(value):
            assert value.__module__ == "otelsse", name


def test_typed_marker_is_shipped() -> None:
    from importlib.resources import files

    assert files("otelsse").joinpath("py.typed").is_file()
