"""Clients of other languages and plain ones, run as subprocesses against a URL, for
``test_foreign_clients.py`` and ``test_strict.py``: the official OpenAI Node SDK
(``node/client.mjs``) and ``curl -N``, and what each saw.

Both fail (never skip) when node, the npm modules (``npm ci --prefix tests/proxy/node``) or curl
are missing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from otelsse._demo.provider import DEFAULT_MODELS, JOB_HEADER, SCENARIO_HEADER, request_for

from .conftest import CLIENT_TIMEOUT, MAX_WAIT

NODE_DIR = Path(__file__).parent / "node"
CHAT = "openai.chat_completions"


@dataclasses.dataclass(frozen=True)
class Seen:
    """What an SDK gave the application. ``message`` is shown on failure, never compared (it may
    name the URL it was sent to)."""

    events: tuple[str, ...]  # chunk objects or event types, in order
    text: str
    tool_arguments: str
    finish: str | None  # the finish or stop reason, or the Responses API's final status
    error: tuple[str, int | None] | None  # the exception's class and HTTP status
    message: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class CurlSeen:
    """What curl wrote: the body's exact bytes (shown by size and digest: they may be 9 MiB),
    the status and curl's exit code; ``stderr`` is shown on failure, never compared."""

    status: int
    body: bytes = dataclasses.field(repr=False)
    exit_code: int
    stderr: str = dataclasses.field(default="", compare=False)
    body_size: int = dataclasses.field(init=False, compare=False)
    body_sha256: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "body_size", len(self.body))
        object.__setattr__(self, "body_sha256", hashlib.sha256(self.body).hexdigest()[:16])

    def digest(self) -> tuple[int, int, int, str]:
        """The status, the exit code and the body by size and digest: compared before the
        bodies themselves, since pytest's diff of two 9 MiB bodies would bury the report."""
        return self.status, self.exit_code, self.body_size, self.body_sha256


def headers(scenario: str, job: int) -> dict[str, str]:
    """The fake provider's request headers for ``scenario``, answered as job ``job``."""
    return {SCENARIO_HEADER: scenario, JOB_HEADER: str(job)}


def run_node(
    base: str, route: str, scenario: str, job: int, *, tools: bool = False
) -> tuple[Seen, dict[str, Any] | None]:
    """What the Node SDK saw streaming ``scenario`` from ``base`` (offering the tool with
    ``tools``, or for a tool_call scenario), and the error it threw as it reported it (code,
    type, message), if any."""
    node = shutil.which("node")
    assert node is not None, "node is not installed (the Node OpenAI SDK client needs it)"
    assert (NODE_DIR / "node_modules" / "openai").is_dir(), (
        f"the npm modules are missing: npm ci --prefix {NODE_DIR}"
    )
    done = subprocess.run(
        [
            node,
            str(NODE_DIR / "client.mjs"),
            f"--base-url={base}/v1",
            f"--route={'chat' if route == CHAT else 'responses'}",
            f"--scenario={scenario}",
            f"--job={job}",
            f"--timeout={CLIENT_TIMEOUT}",
            *(["--tools"] if tools else []),
        ],
        capture_output=True,
        text=True,
        timeout=MAX_WAIT,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.count("\n") == 1, (done.stdout, done.stderr)
    seen = json.loads(done.stdout)
    error = seen["error"]
    return Seen(
        tuple(seen["events"]),
        "".join(seen["text"]),
        seen["tool_arguments"],
        seen["finish_reason"],
        None if error is None else (error["name"], error["status"]),
        "" if error is None else f"{error['message']} (cause: {error['cause']})",
    ), error


def run_curl(
    base: str,
    route: str,
    scenario: str,
    job: int,
    head: Path,
    *,
    tools: bool,
    max_time: float | None = None,
) -> CurlSeen:
    """What ``curl -N`` got posting ``route``'s request for ``scenario`` to ``base`` (its head
    dumped to ``head``); ``max_time``: a deadline for the whole transfer (``--max-time``)."""
    curl = shutil.which("curl")
    assert curl is not None, "curl is not installed"
    path, body = request_for(route, DEFAULT_MODELS[route], tools=tools)
    sent = [f"{name}: {value}" for name, value in headers(scenario, job).items()]
    deadline = [] if max_time is None else ["--max-time", str(max_time)]
    done = subprocess.run(
        [
            curl,
            "-sS",
            "-N",
            "--noproxy",
            "*",
            *deadline,
            "--dump-header",
            str(head),
            "-H",
            "content-type: application/json",
            *(option for header in sent for option in ("-H", header)),
            "--data-binary",
            json.dumps(body),
            base + path,
        ],
        capture_output=True,
        timeout=MAX_WAIT,
        check=False,
    )
    status_line = head.read_text("latin-1").partition("\r\n")[0]
    return CurlSeen(
        int(status_line.split(" ")[1]), done.stdout, done.returncode, done.stderr.decode()
    )


@functools.cache
def job_for(port: int, route: str, framing: str) -> int:
    """A job number the provider on ``port`` cuts with ``framing`` when truncated (a job's draws
    follow from the provider's seed and the number alone)."""
    path, body = request_for(route, DEFAULT_MODELS[route], tools=False)
    data = json.dumps(body).encode()
    for job in range(100, 164):
        lines = [
            f"POST {path} HTTP/1.1",
            "host: 127.0.0.1",
            "content-type: application/json",
            f"content-length: {len(data)}",
            *(f"{name}: {value}" for name, value in headers("truncated", job).items()),
        ]
        with socket.create_connection(("127.0.0.1", port), timeout=MAX_WAIT) as connection:
            connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
            head = b""
            while b"\r\n\r\n" not in head and (piece := connection.recv(4096)):
                head += piece
        chunked = b"transfer-encoding: chunked" in head.lower()
        if chunked is (framing == "chunked"):
            return job
    raise AssertionError(f"no job in 100..163 truncates {route} with {framing} framing")
