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


def test_inspect_chooses_the_route_and_host_profile_from_the_url() -> None:
    """A Writer stream (no ``[DONE]``) is complete for Writer's host, truncated elsewhere."""
    path = str(FIXTURES / "edge/chat-stop-without-done.sse")
    status, text = _run("inspect", path, "--url", "https://api.writer.com/v1/chat", "--json")
    attributes = json.loads(text)["attributes"]
    assert status == 0
    assert attributes["otelsse.route.profile"] == "no_done"
    status, _ = _run("inspect", path, "--url", "https://api.openai.com/v1/chat/completions")
    assert status == 1


def test_inspect_takes_a_host_profile_of_your_own() -> None:
    path = str(FIXTURES / "edge/chat-stop-without-done.sse")
    url = "https://llm.internal.example/v1/chat/completions"
    own = "llm.internal.example=openai.chat_completions:no_done"
    assert _run("inspect", path, "--url", url, "--host-profile", own)[0] == 0
    # The entry lasts for that command only.
    assert _run("inspect", path, "--url", url)[0] == 1
    assert (
        _run("inspect", path, "--url", url, "--host-profile", "x=openai.chat_completions:nope")[0]
        == 2
    )
    with pytest.raises(SystemExit):
        _run("inspect", path, "--url", url, "--host-profile", "no-equals-sign")
