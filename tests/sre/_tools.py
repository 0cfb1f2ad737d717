"""What the dashboard, rule and example tests share: promtool, and loading a repository script."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

__all__ = ["load_script", "promtool"]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``promtool ARGS``; its absence fails the test (these checks must never be skipped)."""
    executable = shutil.which("promtool")
    assert executable is not None, (
        "promtool is not on PATH: install Debian's prometheus package (apt-get install "
        "prometheus); the rule tests need it and must not be skipped"
    )
    return subprocess.run(
        [executable, *args], capture_output=True, text=True, timeout=120, check=False
    )


def load_script(path: Path) -> ModuleType:
    """Import a file that is not in a package (a generator, an example's helper) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
