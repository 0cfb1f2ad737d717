"""Build hook: compile otelsse's optional C speedup (``otelsse/_core/_framing_speedups.c``).

The extension only speeds up the framers' hot paths; ``otelsse/_core/framing.py`` and
``otelsse/_core/eventstream.py`` answer the same without it. So a machine without a C compiler still gets a working (pure-Python) otelsse: the
failure is reported and the build goes on. ``OTELSSE_PURE_PYTHON=1`` skips the extension.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

EXTENSION = "otelsse._core._framing_speedups"
SOURCE = "otelsse/_core/_framing_speedups.c"


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("OTELSSE_PURE_PYTHON") == "1":
            return
        try:
            built = _compile(Path(self.root))
        except Exception as exc:  # no compiler, no headers: the pure-Python path serves
            print(f"otelsse: C speedup not built ({exc}); using pure Python", file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        # Built next to its source, so an editable install imports it from the tree as well.
        build_data["force_include"][str(built)] = str(built.relative_to(self.root))


def _compile(root: Path) -> Path:
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    os.chdir(root)  # setuptools resolves the source and the in-place output from here
    dist = Distribution({"ext_modules": [Extension(EXTENSION, [SOURCE])]})
    command = build_ext(dist)
    command.inplace = True
    with tempfile.TemporaryDirectory() as scratch:
        command.build_temp = scratch
        command.ensure_finalized()
        command.run()
    return root / command.get_ext_filename(EXTENSION)
