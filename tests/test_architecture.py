"""The house rules, read off the source: floors, doors, the sans-IO core, and what loads what.

- **Floors** (``FLOORS``, lowest first): a module imports only modules of a lower floor, or of
  its own package; also under ``TYPE_CHECKING`` and inside functions. A lower floor names what it
  needs of a higher one as a ``Protocol``. Every module of the package is on a floor, and no
  imports run in a circle.
- **Doors**: a package's face is its only door. A module imports another package's underscore
  module only if that package is its own or one it lives in (``otelsse._observe._stream`` may
  import ``otelsse._clients``, never ``otelsse._clients._base``).
- **Sans-IO core**: the core and what is built on it alone import no HTTP client, OpenTelemetry
  or wrapt; ``read_stream`` on an httpx response loads no wrapt and no OpenTelemetry either.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import otelsse

PACKAGE = Path(otelsse.__file__).parent

#: Lowest first. A module belongs to the first entry that is its name or a package it is in.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("otelsse._exceptions", "otelsse._version", "otelsse.semconv"),
    ("otelsse._core",),
    ("otelsse.routes",),
    ("otelsse._monitor",),
    ("otelsse._tools", "otelsse.recorder", "otelsse._clients"),
    ("otelsse._reader", "otelsse._telemetry"),
    ("otelsse._strict",),
    ("otelsse._observe",),
    ("otelsse._instrumentor", "otelsse.asgi", "otelsse.proxy", "otelsse.gate"),
    ("otelsse._demo",),
    ("otelsse._cli",),
    ("otelsse", "otelsse.__main__"),
)

#: What the sans-IO core and the modules built on it alone never load.
FORBIDDEN = [
    "httpx",
    "httpx2",
    "requests",
    "opentelemetry",
    "wrapt",
    "urllib3",
    "anyio",
    "botocore",
    "aiobotocore",
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _package_of(module: str) -> str:
    """The package a module lives in (a package's ``__init__`` lives in the package itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str) -> list[tuple[int, str]]:
    """Every otelsse module ``module`` imports, anywhere in it, with the line."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = _package_of(module)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # ``from package import module`` imports that module.
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                for alias in node.names
            ]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] == "otelsse"]
    return found


def _floor(module: str) -> tuple[int, str]:
    """The floor of ``module`` and the entry that holds it."""
    for number, floor in enumerate(FLOORS):
        for entry in floor:
            if module == entry or module.startswith(entry + "."):
                return number, entry
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def test_every_module_is_on_a_floor() -> None:
    assert len(MODULES) > 40
    for module in MODULES:
        _floor(module)


def test_imports_run_only_downward() -> None:
    upward = []
    for module in MODULES:
        floor, entry = _floor(module)
        for line, imported in _imports(module):
            target, target_entry = _floor(imported)
            if target > floor or (target == floor and target_entry != entry):
                upward.append(f"{module}:{line} imports {imported}")
    assert upward == []


def test_no_module_imports_itself_back() -> None:
    """No circle of imports, whatever the floors say (a package's modules share a floor)."""
    graph = {module: {name for _, name in _imports(module)} - {module} for module in MODULES}
    circles = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*path, module])
        done.add(module)

    for module in MODULES:
        visit(module, [])
    assert circles == []


def test_a_packages_face_is_its_only_door() -> None:
    trespass = []
    for module in MODULES:
        home = _package_of(module)
        for line, imported in _imports(module):
            parts = imported.split(".")
            for depth in range(1, len(parts)):
                private = parts[depth].startswith("_") and not parts[depth].startswith("__")
                owner = ".".join(parts[:depth])
                if private and not (home == owner or home.startswith(owner + ".")):
                    trespass.append(f"{module}:{line} imports {imported}")
                    break
    assert trespass == []


def _loaded_after(code: str) -> set[str]:
    report = "import json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    program = f"{code}\n{report}\n"
    output = subprocess.check_output([sys.executable, "-c", program], text=True)
    return set(json.loads(output.splitlines()[-1]))


def test_the_core_and_what_is_built_on_it_alone_load_no_client_telemetry_or_wrapt() -> None:
    alone = [
        "otelsse",
        *(name for name in MODULES if name.startswith("otelsse._core")),
        "otelsse.semconv",
        "otelsse.routes",
        "otelsse._monitor",
        "otelsse._reader",
        "otelsse._clients",
        "otelsse.gate",
        "otelsse.recorder",
        "otelsse._cli",
    ]
    loaded = _loaded_after(
        f"import importlib\nfor name in {alone!r}: importlib.import_module(name)"
    )
    assert "otelsse" in loaded
    assert loaded.isdisjoint(FORBIDDEN), loaded & set(FORBIDDEN)


def test_read_stream_on_an_httpx_response_loads_no_wrapt_or_opentelemetry() -> None:
    loaded = _loaded_after(
        "import httpx, otelsse\n"
        'body = b\'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
        "\\n\\ndata: [DONE]\\n\\n'\n"
        "def answer(request):\n"
        "    return httpx.Response(200, headers={'content-type': 'text/event-stream'}, "
        "content=body)\n"
        "client = httpx.Client(transport=httpx.MockTransport(answer))\n"
        "request = client.build_request('POST', 'https://api.openai.com/v1/chat/completions')\n"
        "result = otelsse.read_stream(client.send(request, stream=True))\n"
        "assert result.stop_reason == 'stop', result\n"
    )
    assert "httpx" in loaded  # the response was read through its client module
    assert loaded.isdisjoint({"wrapt", "opentelemetry"}), loaded & {"wrapt", "opentelemetry"}


@pytest.mark.parametrize("rule", ["floors", "doors"])
def test_the_checks_catch_what_they_forbid(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rule fails on a planted import, so a test above that passes is not vacuous."""
    planted = {
        "floors": ("otelsse._core.events", "from ..gate import ToolGate\n"),
        "doors": ("otelsse.asgi", "from ._observe._stream import StreamObserver\n"),
    }[rule]
    module, line = planted
    real = MODULES[module].read_text(encoding="utf-8")
    monkeypatch.setattr(Path, "read_text", _planted(MODULES[module], real + line))
    check = (
        test_imports_run_only_downward
        if rule == "floors"
        else test_a_packages_face_is_its_only_door
    )
    with pytest.raises(AssertionError, match=module):
        check()


def _planted(target: Path, text: str):  # type: ignore[no-untyped-def]
    original = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return text if self == target else original(self, *args, **kwargs)  # type: ignore[arg-type]

    return read_text
