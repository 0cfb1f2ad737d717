"""The ``otelsse inspect`` command line: it prints reports (never content) and exits 0 only when
complete. ``otelsse demo`` has its own module, ``test_demo.py``."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from otelsse.cli import main
from tests._fixtures import FIXTURES, read_fixture


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_inspect_complete_file_exits_zero_with_a_table() -> None:
    status, text = _run("inspect", str(FIXTURES / "real/openai-chat-text.sse"))
    assert status == 0
    assert "otelsse.outcome" in text
    assert "complete" in text
    assert "Four plus five" not in text


def test_inspect_truncated_file_exits_one() -> None:
    path = FIXTURES / "synthetic/openai-chat-truncated-mid-tool-call.sse"
    status, text = _run("inspect", str(path))
    assert status == 1
    assert "truncated" in text


def test_inspect_json_with_events_lists_types_and_sizes_not_data() -> None:
    path = FIXTURES / "real/anthropic-text.sse"
    status, text = _run("inspect", str(path), "--json", "--events", "--chunk-size", "5")
    document = json.loads(text)
    assert status == 0
    assert document["attributes"]["otelsse.route"] == "anthropic.messages"
    assert document["attributes"]["otelsse.chunk_count"] > 1
    assert document["events"][0] == {
        "event": "message_start",
        "data_chars": document["events"][0]["data_chars"],
    }
    assert all(set(event) == {"event", "data_chars"} for event in document["events"])
    assert "Four plus five" not in text


def test_inspect_reads_stdin_with_an_explicit_route() -> None:
    body = read_fixture("real/gemini-text.sse")
    result = subprocess.run(
        [sys.executable, "-m", "otelsse", "inspect", "-", "--route", "gemini.generate_content"],
        input=body,
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert b"gemini.generate_content" in result.stdout
    assert b"Paris" not in result.stdout


def test_inspect_missing_file_is_a_usage_error() -> None:
    status, _ = _run("inspect", "/nonexistent/body.sse")
    assert status == 2


def test_unknown_route_is_rejected_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        _run("inspect", "-", "--route", "nope")
