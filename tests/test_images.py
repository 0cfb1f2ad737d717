"""Both container images install: the proxy's (deploy/Dockerfile) and the demo's
(examples/compose/Dockerfile).

There is no Docker engine here, so the build is done as Docker would do it, from the files
themselves. The context is the repository filtered by the Dockerfile's own
``<Dockerfile>.dockerignore`` (it takes precedence over the root ``.dockerignore``:
https://docs.docker.com/build/concepts/context/#filename-and-location), matched as Docker
matches; each ``COPY`` before the install takes its sources from that context into a directory
standing for the image's file system; the Dockerfile's own ``RUN pip install`` then runs in a new
virtualenv with its image paths under that directory, and the installed ``otelsse`` must run
(the image's command's ``--help``) and import what the image's command loads.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._compose import Instruction, dockerfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: Each image's Dockerfile, and the modules its command loads (lazily imported ones included).
IMAGES = {
    "proxy": (
        ROOT / "deploy" / "Dockerfile",
        [
            "otelsse.proxy._server",
            "uvloop",
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
            "opentelemetry.exporter.prometheus",
        ],
    ),
    "demo": (
        ROOT / "examples" / "compose" / "Dockerfile",
        [
            "otelsse._demo.run",
            "otelsse._demo.provider",
            "openai",
            "anthropic",
            "cohere",
            "google.genai",
            "boto3.session",
            "botocore.config",
            "httpx",
            "httpx2",
            "requests",
            "msgspec",
            "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
            "opentelemetry.exporter.prometheus",
        ],
    ),
}


# --------------------------------------------------------------------------------------------
# .dockerignore, as Docker reads it
# --------------------------------------------------------------------------------------------


def _regex(pattern: str) -> re.Pattern[str]:
    """Docker's translation of a pattern (moby/patternmatcher, ``Pattern.compile``): ``*`` and
    ``?`` stay within a path segment, ``**`` (and ``**/``) spans any number of them, zero too."""
    assert not re.search(r"[\[\]\\]", pattern), f"{pattern}: character classes, escapes unread"
    assert not re.match(r"\*\*[^/*?]", pattern), f"{pattern}: Docker matches it by suffix"
    regex, i = "^", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            i += 2 + pattern.startswith("/", i + 2)
            regex += ".*" if i == len(pattern) else "(.*/)?"
        else:
            regex += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(regex + "$")


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """A .dockerignore's patterns in order, each (exception, regex), read as Docker reads them
    (moby/patternmatcher, ``ignorefile.ReadAll``): ``#`` lines are comments, a leading ``!``
    makes an exception, the path is cleaned and a leading ``/`` dropped."""
    patterns = []
    for line in text.splitlines():
        pattern = line.strip()
        if line.startswith("#") or not pattern:
            continue
        exception = pattern.startswith("!")
        pattern = posixpath.normpath(pattern.removeprefix("!").strip()).lstrip("/")
        patterns.append((exception, _regex(pattern)))
    return patterns


def excluded(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the context leaves ``path`` (relative, ``/``-separated) out: the last pattern
    that matches it or one of its parent directories decides (``MatchesOrParentMatches``)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    decided = False
    for exception, regex in patterns:
        if any(regex.match(candidate) for candidate in candidates):
            decided = not exception
    return decided


def test_the_dockerignore_matcher_reads_patterns_in_order() -> None:
    patterns = ignore_patterns("# a comment\n*\n!otelsse\n**/__pycache__\n!/hatch_build.py\n")
    assert excluded("README.md", patterns)
    assert excluded("deploy/proxy.toml", patterns)  # * takes the directory deploy
    assert not excluded("otelsse/_core/framing.py", patterns)  # !otelsse its whole tree
    assert excluded("otelsse/__pycache__/x.pyc", patterns)  # ** spans zero segments...
    assert excluded("otelsse/_core/__pycache__/x.pyc", patterns)  # ... or more
    assert not excluded("hatch_build.py", patterns)  # the leading / is dropped
    assert ignore_patterns("# *\n\n") == []  # a comment is no pattern
    # * stays within a segment; the last match wins, so an exception first is undone.
    assert not excluded("a/b", ignore_patterns("a/*.so"))
    assert excluded("a/b.so", ignore_patterns("a/*.so"))
    assert not excluded("a/b/c.so", ignore_patterns("a/*.so"))
    assert excluded("a/b/c.so", ignore_patterns("**/*.so"))
    assert excluded("otelsse", ignore_patterns("!otelsse\n*"))
    with pytest.raises(AssertionError):
        ignore_patterns("**.so")  # Docker's suffix match, not read here


# --------------------------------------------------------------------------------------------
# The build context and the install
# --------------------------------------------------------------------------------------------


def copies(instructions: list[Instruction]) -> list[tuple[list[str], str]]:
    """Each ``COPY`` from the build context, (sources, destination), before the first ``RUN``
    that installs with pip."""
    found = []
    for keyword, rest in instructions:
        if keyword == "RUN" and "pip install" in rest:
            return found
        if keyword == "COPY":
            words = json.loads(rest) if rest.startswith("[") else rest.split()
            assert not [w for w in words if w.startswith("--from")], "one stage, one context"
            *sources, destination = [w for w in words if not w.startswith("--")]
            assert not [s for s in sources if re.search(r"[*?\[]", s)], "no wildcards read"
            found.append((sources, destination))
    raise AssertionError("no RUN pip install")


def build_context(path: Path, image: Path) -> list[str]:
    """Copy what the Dockerfile at ``path`` copies before its install, from the repository as
    its .dockerignore filters it, into ``image`` (the image's ``/``). Returns the files copied,
    relative to the repository. A source the context leaves out fails, as ``COPY`` does."""
    patterns = ignore_patterns(path.with_name(path.name + ".dockerignore").read_text())
    taken = []
    for sources, destination in copies(dockerfile(path)):
        for source in sources:
            top = ROOT / source
            files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
            kept = [f for f in files if not excluded(f.relative_to(ROOT).as_posix(), patterns)]
            assert kept, f"{path.relative_to(ROOT)}: COPY {source}: not in the build context"
            # A directory's contents go into the destination; a file into it when it ends
            # with / (https://docs.docker.com/reference/dockerfile/#copy).
            target = image / destination.lstrip("/")
            for file in kept:
                if file == top:
                    copy = target / file.name if destination.endswith("/") else target
                else:
                    copy = target / file.relative_to(top)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, copy)
                taken.append(file.relative_to(ROOT).as_posix())
    return taken


def pip_install(path: Path) -> list[str]:
    """The Dockerfile's ``pip install ...`` command (its ``RUN`` may chain other commands)."""
    (run,) = [rest for keyword, rest in dockerfile(path) if keyword == "RUN" and "pip " in rest]
    (command,) = [c for c in re.split(r"&&|;", run) if shlex.split(c)[:2] == ["pip", "install"]]
    return shlex.split(command)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_build_context_holds_what_the_package_build_reads(name: str, tmp_path: Path) -> None:
    path, _ = IMAGES[name]
    taken = build_context(path, tmp_path)
    # What hatchling reads (pyproject.toml): the readme, the version file, the packages and the
    # custom build hook, whose file is hatch_build.py unless it says otherwise
    # (https://hatch.pypa.io/latest/plugins/build-hook/custom/).
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hatch = project["tool"]["hatch"]
    wheel = hatch["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", project["project"]["readme"], hatch["version"]["path"]}
    needed |= {f"{package}/__init__.py" for package in wheel["packages"]}
    needed.add(wheel["hooks"]["custom"].get("path", "hatch_build.py"))
    assert needed <= set(taken), needed - set(taken)
    # Nothing git ignores: no byte code, no C extension built here for this machine's Python.
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(taken),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ignored.returncode in (0, 1), ignored.stderr  # 1: none ignored
    assert ignored.stdout == "", ignored.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_image_installs_otelsse_and_its_command_runs(name: str, tmp_path: Path) -> None:
    path, modules = IMAGES[name]
    image = tmp_path / "image"
    build_context(path, image)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The image's paths under image/; pip's cache kept, so that a second run downloads nothing.
    _, _, *args = pip_install(path)
    args = [str(image) + a if a.startswith("/") else a for a in args if a != "--no-cache-dir"]
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    # A regular install: it runs without the sources (the proxy's image deletes them).
    shutil.rmtree(image)

    cmd = json.loads(next(rest for keyword, rest in dockerfile(path) if keyword == "CMD"))
    assert cmd[0] == "otelsse", cmd
    for argv in (["--help"], [cmd[1], "--help"]):
        ran = subprocess.run(
            [str(venv / "bin" / "otelsse"), *argv], capture_output=True, text=True, env=env
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith("usage: otelsse"), ran.stdout
    code = "import importlib, otelsse; print(otelsse.__file__)\n"
    code += "".join(f"importlib.import_module({module!r})\n" for module in modules)
    imported = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    assert Path(imported.stdout.strip()).is_relative_to(venv), imported.stdout
