"""The public API: which modules are public, and each one's ``__all__``.

Public modules are the package and ``PUBLIC``; every other module is private (its name, or a
package it is in, starts with an underscore) and may change without notice. ``otelsse.routes``
is the kit for routes of your own; its route modules are public with it.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import otelsse

#: The public modules besides ``otelsse`` itself.
PUBLIC = {
    "otelsse.asgi",
    "otelsse.gate",
    "otelsse.proxy",
    "otelsse.recorder",
    "otelsse.routes",
    "otelsse.semconv",
}


def test_every_module_is_public_by_the_list_or_private_by_its_name() -> None:
    top = {
        f"otelsse.{module.name}"
        for module in pkgutil.iter_modules(otelsse.__path__)
        if not module.name.startswith("_")
    }
    assert top == PUBLIC


@pytest.mark.parametrize("name", ["otelsse", *sorted(PUBLIC)])
def test_every_name_in_all_exists(name: str) -> None:
    # (ruff's RUF022 keeps each __all__ sorted.)
    module = importlib.import_module(name)
    for attribute in module.__all__:
        assert hasattr(module, attribute), f"{name}.{attribute}"


def test_the_package_exports_exactly_its_all() -> None:
    public = {name for name in dir(otelsse) if not name.startswith("_")}
    assert public - PUBLIC_SUBMODULES == set(otelsse.__all__) - {"__version__"}


#: Submodules that ``import otelsse`` (or a test) may have bound as attributes of the package.
PUBLIC_SUBMODULES = {name.rpartition(".")[2] for name in PUBLIC}


def test_public_classes_and_functions_report_the_package_as_their_module() -> None:
    for name in otelsse.__all__:
        value = getattr(otelsse, name)
        if callable(value):
            assert value.__module__ == "otelsse", name


def test_typed_marker_is_shipped() -> None:
    from importlib.resources import files

    assert files("otelsse").joinpath("py.typed").is_file()
