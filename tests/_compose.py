"""Container files read without Docker: Dockerfiles and their ``.dockerignore``, compose
files' YAML, and where a path in a container comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

__all__ = [
    "Instruction", "copied", "dockerfile", "dockerignore_allows", "load_yaml", "mounted", "mounts",
]  # fmt: skip


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def mounts(service: dict[str, Any], base: Path) -> dict[str, Path]:
    """A service's bind mounts (short syntax, relative to ``base``, the compose file's folder):
    path in the container -> path here."""
    found = {}
    for volume in service.get("volumes", ()):
        source, target, *_ = volume.split(":")
        assert source.startswith("."), f"not a bind mount relative to compose.yaml: {volume}"
        found[target] = (base / source).resolve()
    return found


def mounted(service: dict[str, Any], container_path: str, base: Path) -> Path | None:
    """Where ``container_path`` comes from when a bind mount holds it; None otherwise."""
    for target, source in mounts(service, base).items():
        if container_path == target or container_path.startswith(target + "/"):
            return source / Path(container_path).relative_to(target)
    return None


class Instruction(NamedTuple):
    keyword: str
    rest: str


def dockerfile(path: Path) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    logical, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, f"{path}: the last instruction ends with a line continuation"
    instructions = []
    for text in logical:
        keyword, _, rest = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip()))
    return instructions


def copied(instructions: list[Instruction]) -> set[str]:
    """The build-context paths the ``COPY`` instructions take."""
    sources: set[str] = set()
    for keyword, rest in instructions:
        if keyword == "COPY":
            *taken, _ = rest.split()
            sources |= set(taken)
    return sources


def dockerignore_allows(path: Path) -> set[str]:
    """What a deny-all ``.dockerignore`` (``*``, then ``!path`` lines) lets into the build."""
    lines = path.read_text().splitlines()
    assert "*" in lines, f"{path}: not deny-all"
    return {line[1:] for line in lines if line.startswith("!")}
