"""Compose files read without Docker: their YAML, and where a path in a container comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["load_yaml", "mounted", "mounts"]


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
