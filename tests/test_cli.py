"""The ``otelsse inspect`` command line: a verdict line with its reason, then the report (never
content); exit 0 only when complete, 1 for any other outcome, 2 for usage errors, 3 for a body
that is not SSE. ``otelsse demo`` has its own module, ``tests/demo/test_demo.py``.

Every bad input of every sub-command (arguments, files, damaged recordings) is one line on
stderr and status 2, never a traceback; nothing printed from a file or an argument carries a
character that could drive a terminal."""

from __future__ import annotations

import base64
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra installs tomli there
    import tomli as tomllib

from otelsse._cli import EXIT_COMPLETE, EXIT_NOT_COMPLETE, EXIT_NOT_SSE, EXIT_USAGE, main, verdict
from otelsse._monitor import Outcome, StreamReport
from otelsse.routes import route_names
from tests._fixtures import FIXTURES, read_fixture

DOCS = Path(__file__).resolve().parents[1] / "docs"


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
    assert document["otelsse.route"] == "anthropic.messages"
    assert document["otelsse.chunk_count"] > 1
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


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main_status(["--version"]) == 0
    assert capsys.readouterr().out == f"otelsse {importlib.metadata.version('otelsse')}\n"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["inspect", "a.sse", "b.sse"],
            "otelsse inspect: error: one file at a time; also given: b.sse",
        ),
        (
            ["inspect", "a.sse", "--bogus"],
            "otelsse inspect: error: unrecognized arguments: --bogus",
        ),
        (["demo", "--bogus"], "otelsse demo: error: unrecognized arguments: --bogus"),
        (["proxy", "x"], "otelsse proxy: error: unrecognized arguments: x"),
    ],
)
def test_a_stray_argument_is_the_commands_own_error(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main_status(argv) == EXIT_USAGE
    assert capsys.readouterr().err == f"{said} (see --help)\n"


def _route_hints() -> list[tuple[str, str, str]]:
    """(fixture, route it is read by, its own route) for every recorded provider stream that
    sniffing reads as complete, and every other contract."""
    cases = []
    for path in sorted((FIXTURES / "real").glob("*.sse")):
        own = json.loads(_run("inspect", str(path), "--json")[1])
        if own["otelsse.outcome"] != "complete" or own["otelsse.route"] == "generic":
            continue
        for route in route_names():
            if route.partition(":")[0] not in (own["otelsse.route"], "generic", "auto"):
                cases.append((str(path), route, own["otelsse.route"]))
    return cases


def test_a_body_read_by_another_contract_says_which_reads_it_complete() -> None:
    """Under the wrong ``--route`` a complete stream mostly reads as a payload error or a cut,
    which says nothing of the route: then a hint names the contract sniffing recognises."""
    cases = _route_hints()
    assert len({own for _, _, own in cases}) >= 4
    hinted = 0
    for path, route, own in cases:
        status, text = _run("inspect", path, "--route", route)
        if status == EXIT_COMPLETE:  # another contract may read a body complete: no problem
            continue
        second = text.splitlines()[1]
        assert second == (
            f"hint: read as {own} (--route auto) it is complete: is --route {route} right for it?"
        ), (path, route)
        assert json.loads(_run("inspect", path, "--route", route, "--json")[1])["hint"] == (
            second.removeprefix("hint: ")
        )
        hinted += 1
    assert hinted >= 0.9 * len(cases)
    # No hint where the route is the body's own, or sniffed, or chosen by --url.
    path = str(FIXTURES / "synthetic/openai-chat-truncated-mid-tool-call.sse")
    for argv in (
        ["--route", "openai.chat_completions"],
        [],
        ["--url", "https://api.openai.com/v1/chat/completions"],
    ):
        status, text = _run("inspect", path, *argv)
        assert status == EXIT_NOT_COMPLETE
        assert "hint" not in text


def test_the_hint_quoted_in_the_docs_is_what_inspect_prints() -> None:
    path = str(FIXTURES / "real/anthropic-text.sse")
    _, text = _run("inspect", path, "--route", "openai.chat_completions")
    head = "\n".join(text.splitlines()[:2])
    assert f"```text\n{head}\n```" in (DOCS / "users" / "inspect.md").read_text()


def test_every_field_inspect_prints_is_documented() -> None:
    """Span attributes in the attribute reference, ``inspect``'s own fields in its page."""
    reference = (DOCS / "operators" / "reference.md").read_text()
    page = (DOCS / "users" / "inspect.md").read_text()
    printed: set[str] = set()
    for path in sorted(FIXTURES.glob("*/*.sse")):
        printed |= set(json.loads(_run("inspect", str(path), "--json")[1]))
    assert {"otelsse.discarded_event", "otelsse.anomaly_count"} <= printed
    assert any(key.startswith("otelsse.anomaly.") for key in printed)
    for key in printed - {"verdict", "reason"}:
        documented = re.sub(r"^otelsse\.anomaly\.\w+$", "otelsse.anomaly.<name>", key)
        assert f"`{documented}`" in reference + page, key


def _extras() -> set[str]:
    pyproject = (DOCS.parent / "pyproject.toml").read_text()
    return set(tomllib.loads(pyproject)["project"]["optional-dependencies"])


def _without(monkeypatch: pytest.MonkeyPatch, dependency: str, *importers: str) -> None:
    """As if ``dependency`` were not installed, for ``importers`` imported from now on."""
    monkeypatch.setitem(sys.modules, dependency, None)
    for name in list(sys.modules):
        if name.startswith(importers):
            monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(
    ("argv", "dependency", "importers", "extra"),
    [
        (["demo", "--streams", "1"], "anthropic", ("otelsse._demo",), "demo"),
        (["demo", "--streams", "1"], "httpx2", ("otelsse._demo",), "demo"),
        (["proxy"], "uvicorn", ("otelsse.proxy",), "proxy"),
    ],
)
def test_a_missing_extra_names_the_install_that_works_from_a_clone(
    argv: list[str],
    dependency: str,
    importers: tuple[str, ...],
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """otelsse is not on PyPI: ``pip install 'otelsse[x]'`` would fail; the editable install
    of the clone's extra is what works."""
    _without(monkeypatch, dependency, *importers)
    assert _main_status(argv) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f"otelsse {argv[0]} needs {dependency}: install otelsse's {extra!r} extra"
        f" (in a clone of otelsse: python -m pip install -e '.[{extra}]')\n"
    )
    assert extra in _extras()


def test_a_tool_schema_without_jsonschema_names_the_schema_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from otelsse import OtelSSEError
    from otelsse._tools import ToolRegistry

    monkeypatch.setitem(sys.modules, "jsonschema", None)
    with pytest.raises(OtelSSEError, match=re.escape("python -m pip install -e '.[schema]'")):
        ToolRegistry({"get_weather": {"type": "object"}})
    assert "schema" in _extras()


def test_inspect_chooses_the_route_and_host_profile_from_the_url() -> None:
    """A Writer stream (no ``[DONE]``) is complete for Writer's host, truncated elsewhere."""
    path = str(FIXTURES / "edge/chat-stop-without-done.sse")
    status, text = _run("inspect", path, "--url", "https://api.writer.com/v1/chat", "--json")
    assert status == 0
    assert json.loads(text)["otelsse.route.profile"] == "no_done"
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


# -- the verdict line ----------------------------------------------------------------------------


def _inspect_body(tmp_path: Path, body: bytes, *argv: str) -> tuple[int, str]:
    path = tmp_path / "body.sse"
    path.write_bytes(body)
    return _run("inspect", str(path), *argv)


@pytest.mark.parametrize(
    ("fixture", "status", "line"),
    [
        (
            "real/anthropic-text.sse",
            EXIT_COMPLETE,
            "complete: terminal event after 10 events, stop reason end_turn, nothing pending",
        ),
        (
            "synthetic/openai-responses-function-call-truncated.sse",
            EXIT_NOT_COMPLETE,
            "truncated: EOF after 4 events, no terminal event;"
            " last event response.function_call_arguments.delta",
        ),
        (
            "synthetic/openai-chat-truncated-mid-tool-call.sse",
            EXIT_NOT_COMPLETE,
            "truncated: EOF after 10 events, no terminal event, with a partial line of 60 chars"
            " pending; last event message",
        ),
        (
            "real/vllm-chat-finish-length.sse",
            EXIT_NOT_COMPLETE,
            "incomplete: terminal event after 22 events, but stop reason length is not a"
            " success: the answer stopped early",
        ),
        (
            "synthetic/anthropic-error-overloaded-midstream.sse",
            EXIT_NOT_COMPLETE,
            "provider_error: the provider reported an error in the stream after 5 events"
            " (code overloaded_error)",
        ),
        (
            "edge/anthropic-stop-without-stop-reason.sse",
            EXIT_NOT_COMPLETE,
            "protocol_error: the response or its event order broke the anthropic.messages"
            " contract (message_stop_without_stop_reason 1)",
        ),
        (
            "edge/chat-invalid-utf8.sse",
            EXIT_NOT_COMPLETE,
            "decode_error: 1 invalid UTF-8 sequence in the body (replaced by U+FFFD; the events"
            " kept coming)",
        ),
        (
            "edge/chat-tool-arguments-two-values.sse",
            EXIT_NOT_COMPLETE,
            "payload_error: 1 tool call closed with arguments that are not exactly one JSON"
            " value at the end of the answer; stop reason tool_calls",
        ),
        (
            "edge/chat-invalid-json-event.sse",
            EXIT_NOT_COMPLETE,
            "payload_error: an event's data is not valid JSON or not the shape"
            " openai.chat_completions sends",
        ),
        (
            "edge/generic-clean-eof.sse",
            EXIT_NOT_COMPLETE,
            "eof_unverified: clean EOF after 2 events, nothing pending, but the generic route has"
            " no terminal event to prove the stream whole",
        ),
    ],
)
def test_inspect_leads_with_the_verdict_and_its_reason(
    fixture: str, status: int, line: str
) -> None:
    got_status, text = _run("inspect", str(FIXTURES / fixture))
    assert (got_status, text.splitlines()[0]) == (status, line)


def test_inspect_counts_invalid_utf8_in_an_unterminated_last_line(tmp_path: Path) -> None:
    """The last line has no line end, so no event ever decoded it: its bytes still count."""
    body = b'data: {"choices":[]}\n\ndata: {"choices":[{"delta":{"content":"\xff'
    status, text = _inspect_body(tmp_path, body, "--json")
    assert status == EXIT_NOT_COMPLETE
    document = json.loads(text)
    assert (document["verdict"], document["otelsse.decode_error_count"]) == ("decode_error", 1)


def test_inspect_a_stream_cut_mid_character_is_truncated_not_corrupt() -> None:
    status, text = _run("inspect", str(FIXTURES / "edge/chat-cut-mid-utf8.sse"), "--json")
    document = json.loads(text)
    assert status == EXIT_NOT_COMPLETE
    assert (document["verdict"], document["otelsse.decode_error_count"]) == ("truncated", 0)
    assert document["otelsse.pending_line_chars"] > 0


def test_inspect_names_the_ceiling_a_huge_line_breached(tmp_path: Path) -> None:
    status, text = _inspect_body(tmp_path, b"data: " + b"x" * (9 * 1024 * 1024))
    assert status == EXIT_NOT_COMPLETE
    assert text.splitlines()[0] == (
        "buffer_limit: the line ceiling was breached after 0 events; nothing after it was judged"
    )


@pytest.mark.parametrize(
    ("report", "line"),
    [
        (
            StreamReport("openai.chat_completions", Outcome.TRUNCATED, event_count=3,
                         error="transport"),
            "truncated: connection lost after 3 events, no terminal event",
        ),
        (
            StreamReport("anthropic.messages", Outcome.TRUNCATED, event_count=1,
                         terminal_seen=True, pending_line_chars=4, pending_event_chars=9,
                         discarded_event=True),
            "truncated: EOF after 1 event, terminal event seen, with a partial line of 4 chars"
            " and an event of 9 chars never ended by a blank line pending",
        ),
        (
            StreamReport("anthropic.messages", Outcome.CANCELLED, event_count=2,
                         error="cancelled"),
            "cancelled: the application stopped reading after 2 events, no terminal event",
        ),
        (
            StreamReport("gemini.generate_content", Outcome.TIMEOUT, event_count=0,
                         error="timeout"),
            "timeout: the client's read deadline fired after 0 events, no terminal event",
        ),
        (
            StreamReport("openai.responses", Outcome.PROVIDER_ERROR, event_count=1),
            "provider_error: the provider reported an error in the stream after 1 event"
            " (code not given)",
        ),
        (
            StreamReport("openai.responses", Outcome.BUFFER_LIMIT, event_count=7,
                         buffer_limit_stage="accumulator"),
            "buffer_limit: the accumulator ceiling was breached after 7 events; nothing after it"
            " was judged",
        ),
        (
            StreamReport("openai.chat_completions", Outcome.INTERNAL_ERROR),
            "internal_error: otelsse itself failed on this stream; that says nothing about the"
            " provider",
        ),
        (
            StreamReport("openai.chat_completions", Outcome.RATE_LIMITED),
            "rate_limited: the provider refused the request with HTTP 429 (rate limited):"
            " no stream",
        ),
        (
            StreamReport("anthropic.messages", Outcome.HTTP_ERROR),
            "http_error: the provider answered with an error HTTP status instead of a stream",
        ),
    ],
)  # fmt: skip
def test_the_verdict_words_what_a_file_cannot_show(report: StreamReport, line: str) -> None:
    """Outcomes of live streams only (a lost connection, the application's own ending, an HTTP
    refusal): ``verdict`` serves any report, a replayed recording's too."""
    assert verdict(report) == line


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_has_a_verdict(outcome: Outcome) -> None:
    """The verdict is total over ``Outcome``: an outcome added without its reason fails here."""
    line = verdict(StreamReport("openai.chat_completions", outcome), "message")
    name, separator, reason = line.partition(": ")
    assert (name, separator) == (outcome.value, ": ")
    assert reason
    assert "\n" not in line


# -- not SSE -------------------------------------------------------------------------------------

_HTML_502 = b"""<!DOCTYPE html>
<html>
<head><title>502 Bad Gateway</title>
<style>
:root { color-scheme: light dark; }
</style>
</head>
<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body>
</html>
"""


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            b'{"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}',
            "the body looks like JSON (it starts with '{')",
        ),
        (b'[{"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]}\n]', "looks like JSON"),
        (b'{"model":"llama3","done":false}\n{"model":"llama3","done":true}\n', "looks like JSON"),
        (_HTML_502, "the body looks like HTML (it starts with '<')"),
        (b"", "the body is empty"),
        (b"\r\n \n", "the body is only white space"),
        (b"upstream connect error or disconnect/reset before headers", "(57 bytes)"),
    ],
    ids=["json-error", "gemini-json-array", "ndjson", "html-502", "empty", "blank", "envoy-text"],
)
def test_inspect_says_a_body_is_not_sse(tmp_path: Path, body: bytes, why: str) -> None:
    status, text = _inspect_body(tmp_path, body)
    assert status == EXIT_NOT_SSE
    [line] = text.splitlines()
    assert line.startswith("not_sse: this is not SSE (no data:, event:, id: or retry: line); ")
    assert why in line
    status, text = _inspect_body(tmp_path, body, "--json")
    assert status == EXIT_NOT_SSE
    assert json.loads(text) == {"verdict": "not_sse", "reason": line.partition(": ")[2]}


@pytest.mark.parametrize(
    "body",
    [
        b": keep-alive\n\n: keep-alive\n\n",  # cut after its keep-alives
        b"\xef\xbb\xbfdata: x",  # a BOM, and no line end
        b"event: ping\rdata: {}\r",  # CR line ends
        b"garbage\ndata",  # a bare field name is a field
        b"retry: 100\n\n",
    ],
)
def test_inspect_judges_any_body_with_an_sse_line(tmp_path: Path, body: bytes) -> None:
    status, text = _inspect_body(tmp_path, body, "--json")
    assert status == EXIT_NOT_COMPLETE
    assert json.loads(text)["verdict"] != "not_sse"


# -- arguments and output ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [("0", "must be > 0: 0"), ("-5", "must be > 0: -5"), ("ten", "not a number: ten")],
)
def test_inspect_rejects_a_chunk_size_that_is_not_positive(
    value: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(FIXTURES / "real/anthropic-text.sse")
    with pytest.raises(SystemExit) as exited:
        _run("inspect", path, "--chunk-size", value)
    assert exited.value.code == EXIT_USAGE
    assert f"error: argument --chunk-size: {error}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "error"),
    [("0.5", "must be >= 1: 0.5"), ("0", "must be > 0: 0"), ("x", "not a number")],
)
def test_demo_rejects_a_speed_below_one_before_it_starts(
    value: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Slower answers would outlast the clients' read timeout: timeouts the demo never dealt."""
    with pytest.raises(SystemExit) as exited:
        _run("demo", "--speed", value)
    assert exited.value.code == EXIT_USAGE
    assert f"error: argument --speed: {error}" in capsys.readouterr().err


def test_inspect_help_lists_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["inspect", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for status, meaning in [
        (EXIT_COMPLETE, "complete"),
        (EXIT_NOT_COMPLETE, "any other outcome"),
        (EXIT_USAGE, "usage error, or the file cannot be read"),
        (EXIT_NOT_SSE, "not SSE"),
    ]:
        assert f"\n  {status}  {meaning}" in text


def _text_fields(text: str) -> dict[str, str]:
    """The text mode's fields: the verdict line, then one row per field."""
    head, *rows = text.splitlines()
    outcome, _, reason = head.partition(": ")
    fields = {"verdict": outcome, "reason": reason}
    for row in filter(None, rows):
        key, _, value = row.partition(" ")
        fields[key.removesuffix(":")] = value.strip()  # "replay: ...", a recording's second line
    return fields


def _shown(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)


@pytest.mark.parametrize(
    "fixture",
    [
        "real/anthropic-text.sse",
        "real/openai-responses-function-call.sse",
        "real/openrouter-chat-comments-length-error.sse",  # an anomaly
        "edge/chat-ollama-reused-tool-index.sse",  # an anomaly on a complete stream
        "synthetic/openai-chat-truncated-mid-tool-call.sse",
        "edge/generic-clean-eof.sse",
    ],
)
def test_inspect_json_and_text_carry_the_same_fields(fixture: str) -> None:
    path = str(FIXTURES / fixture)
    text_status, text = _run("inspect", path)
    json_status, document = _run("inspect", path, "--json")
    fields = json.loads(document)
    assert text_status == json_status
    assert "otelsse.discarded_event" in fields
    assert _text_fields(text) == {key: _shown(value) for key, value in fields.items()}


def test_inspect_not_sse_carries_the_same_fields_in_both_modes(tmp_path: Path) -> None:
    _, text = _inspect_body(tmp_path, _HTML_502)
    _, document = _inspect_body(tmp_path, _HTML_502, "--json")
    assert _text_fields(text) == json.loads(document)


# -- flight recordings ---------------------------------------------------------------------------


def _record(directory: Path, fixture: str) -> Path:
    """Record ``fixture`` read in 64-byte chunks, as the instrumentation does; its file."""
    from otelsse._monitor import StreamMonitor
    from otelsse.recorder import FlightRecorder

    recorder = FlightRecorder(directory)
    tape = recorder.start("auto", 0.0)
    monitor = StreamMonitor("auto", started_at=0.0)
    body = read_fixture(fixture)
    for at in range(0, len(body), 64):
        tape.write(body[at : at + 64], at / 1000)
        monitor.feed(body[at : at + 64], at / 1000)
    recording_id = recorder.keep(tape, monitor.close(len(body) / 1000))
    [path] = directory.glob(f"otelsse-*-{recording_id}.json")
    return path


def test_inspect_replays_a_recording_and_says_it_matches_live(tmp_path: Path) -> None:
    path = _record(tmp_path, "synthetic/openai-responses-function-call-truncated.sse")
    recording_id = path.stem.rpartition("-")[2]
    status, text = _run("inspect", str(path))
    first, second, *_ = text.splitlines()
    assert status == EXIT_NOT_COMPLETE
    assert first == "truncated: EOF after 4 events, no terminal event"
    assert second == f"replay: matches the live outcome (truncated) of recording {recording_id}"
    _, document = _run("inspect", str(path), "--json")
    assert _text_fields(text) == {key: _shown(value) for key, value in json.loads(document).items()}
    piped = subprocess.run(
        [sys.executable, "-m", "otelsse", "inspect", "-"],
        input=path.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert (piped.returncode, piped.stdout.decode()) == (status, text), piped.stderr
    # A recording edited to claim another live outcome: the replay says it differs.
    path.write_text(path.read_text().replace('"outcome":"truncated"', '"outcome":"complete"'))
    status, document = _run("inspect", str(path), "--json")
    fields = json.loads(document)
    assert (status, fields["verdict"], fields["recording.live_outcome"]) == (
        1,
        "truncated",
        "complete",
    )
    assert (
        fields["replay"] == f"differs from the live outcome (complete) of recording {recording_id}"
    )


def test_inspect_a_damaged_recording_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(b'{"format":"otelsse-recording/1", "id": ')
    status, text = _run("inspect", str(path))
    assert (status, text) == (EXIT_USAGE, "")
    assert capsys.readouterr().err.startswith(f"otelsse: cannot replay {path}: ")


# -- bad input: one line on stderr, status 2; nothing from a file drives the terminal -----------


def _unprintable(text: str) -> list[str]:
    """The characters of ``text`` that could drive a terminal: controls (C0, DEL, C1), bidi
    overrides and other format characters, lone surrogates, line separators; not the LF that
    ends a line."""
    return [char for char in text if char != "\n" and not char.isprintable()]


def _assert_one_clean_line(status: object, out: str, err: str) -> None:
    assert (status, out) == (EXIT_USAGE, ""), err
    assert "Traceback" not in err
    assert err.endswith("\n")
    [line] = err.splitlines()  # also splits at the Unicode line separators
    assert line.startswith("otelsse"), line
    assert _unprintable(err) == []


def _main_status(argv: list[str]) -> object:
    """``main``'s status, also where argparse exits (as ``python -m otelsse`` would)."""
    try:
        return main(argv)
    except SystemExit as exited:
        return exited.code


#: Characters of every kind a terminal acts on: ESC (an SGR colour, an OSC title), BEL, DEL, C1
#: CSI, a bidi override, a line separator, and a lone surrogate (a byte that is not UTF-8, in an
#: argument or a file name, reaches Python as one; a JSON escape can make any).
_HOSTILE = "\x1b[31m\x1b]0;owned\x07\x7f\x9b2J\u202e\u2028\udcff"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recording file's document, as the flight recorder wrote it."""
    directory = tmp_path_factory.mktemp("recorded")
    path = _record(directory, "synthetic/openai-responses-function-call-truncated.sse")
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _file(directory: Path, content: bytes | str | dict[str, Any]) -> str:
    path = directory / "input.json"
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(
        content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
    )
    return str(path)


_HEAD = '{"format":"otelsse-recording/1",'
_DEEP = 200_000  # far past the interpreter's recursion limit
_BODY = str(FIXTURES / "real/anthropic-text.sse")
_CHAT_URL = "https://a.example/v1/chat/completions"

#: Command lines (given a directory to write in) that are usage errors.
_BAD_ARGUMENTS: dict[str, Callable[[Path], list[str]]] = {
    "no-command": lambda d: [],
    "unknown-command": lambda d: [f"nope{_HOSTILE}"],
    "unknown-option": lambda d: ["inspect", "-", f"--bogus{_HOSTILE}"],
    "inspect-no-file": lambda d: ["inspect"],
    "route-unregistered": lambda d: ["inspect", "-", "--route", f"nope{_HOSTILE}"],
    "chunk-size-not-int": lambda d: ["inspect", "-", "--chunk-size", "1.5"],
    "chunk-size-negative": lambda d: ["inspect", "-", "--chunk-size", "-1"],
    "chunk-size-control": lambda d: ["inspect", "-", "--chunk-size", _HOSTILE],
    "chunk-size-5000-digits": lambda d: ["inspect", "-", "--chunk-size", "9" * 5000],
    "url-unclosed-bracket": lambda d: ["inspect", _BODY, "--url", "http://[::1"],
    "url-port-too-big": lambda d: ["inspect", _BODY, "--url", "http://a:99999"],
    "url-control": lambda d: ["inspect", _BODY, "--url", f"http://a{_HOSTILE}"],
    "host-profile-unregistered": lambda d: [
        "inspect", _BODY, "--url", _CHAT_URL, "--host-profile", f"a.example=nope{_HOSTILE}"
    ],
    "host-profile-no-equals": lambda d: ["inspect", "-", "--host-profile", _HOSTILE],
    "file-missing": lambda d: ["inspect", str(d / f"missing{_HOSTILE}.sse")],
    "file-is-a-directory": lambda d: ["inspect", str(d)],
    # the demo's, refused before anything starts
    "demo-streams-not-int": lambda d: ["demo", "--streams", "ten"],
    "demo-streams-negative": lambda d: ["demo", "--streams", "-3"],
    "demo-concurrency-huge": lambda d: ["demo", "--concurrency", str(10**30)],
    "demo-duration-nan": lambda d: ["demo", "--duration", "nan"],
    "demo-seed-control": lambda d: ["demo", "--seed", _HOSTILE],
    "demo-speed-below-one": lambda d: ["demo", "--speed", "0.5"],
    "demo-port-huge": lambda d: ["demo", "--provider-only", "--port", str(10**30)],
    "demo-port-negative": lambda d: ["demo", "--provider-only", "--port", "-1"],
    "demo-prometheus-port-huge": lambda d: ["demo", "--prometheus-port", str(10**30)],
    "demo-prometheus-host-control": lambda d: [
        "demo", "--prometheus-port", "0", "--prometheus-host", _HOSTILE
    ],
    "demo-prometheus-host-label-too-long": lambda d: [
        "demo", "--prometheus-port", "0", "--prometheus-host", "a" * 64
    ],
    "demo-host-control": lambda d: ["demo", "--provider-only", "--host", _HOSTILE],
    "demo-host-label-empty": lambda d: ["demo", "--provider-only", "--host", "a..b"],
    "demo-otlp-unclosed-bracket": lambda d: ["demo", "--otlp-endpoint", "http://[::1"],
    "demo-otlp-control": lambda d: ["demo", "--otlp-endpoint", f"http://127.0.0.1/{_HOSTILE}"],
    "demo-summary-directory": lambda d: ["demo", "--summary-json", str(d)],
    "demo-summary-no-directory": lambda d: ["demo", "--summary-json", str(d / "no" / "s.json")],
    "demo-summary-control": lambda d: ["demo", "--summary-json", str(d / f"s{_HOSTILE}.json")],
    # the proxy's settings are its own; what it prints of them passes the same door
    "proxy-config-missing": lambda d: ["proxy", "--config", str(d / f"no{_HOSTILE}.toml")],
    "proxy-upstream-name": lambda d: ["proxy", "--upstream", f"x{_HOSTILE}=http://127.0.0.1:1"],
}  # fmt: skip

#: Files (given the document of a good recording) that start like a recording and are none.
_BAD_RECORDINGS: dict[str, Callable[[dict[str, Any]], bytes | str | dict[str, Any]]] = {
    "not-utf8": lambda r: _HEAD.encode() + b'"id":"\xff"}',
    "not-json": lambda r: _HEAD + "nope}",
    "truncated": lambda r: json.dumps(r)[:300],
    "trailing-data": lambda r: json.dumps(r) + "{}",
    "too-deep": lambda r: _HEAD + '"id":' + "[" * _DEEP + "]" * _DEEP + "}",
    "other-version": lambda r: r | {"format": f"otelsse-recording/9{_HOSTILE}"},
    "only-format": lambda r: _HEAD[:-1] + "}",
    "no-chunks": lambda r: {key: value for key, value in r.items() if key != "chunks"},
    "chunks-object": lambda r: r | {"chunks": {"a": 1}},
    "chunk-short": lambda r: r | {"chunks": [[0.0]]},
    "chunk-not-base64": lambda r: r | {"chunks": [[0.0, _HOSTILE]]},
    "chunk-time-text": lambda r: r | {"chunks": [[_HOSTILE, "AA=="]]},
    "chunk-time-huge": lambda r: r | {"chunks": [[10**400, "AA=="]]},
    "id-number": lambda r: r | {"id": 7},
    "created-text": lambda r: r | {"created": _HOSTILE},
    "created-huge": lambda r: r | {"created": 10**400},
    "ended-at-huge": lambda r: r | {"ended_at": 10**400},
    "outcome-unknown": lambda r: r | {"outcome": _HOSTILE},
    "error-unknown": lambda r: r | {"error": _HOSTILE},
    "refused-unknown": lambda r: r | {"refused": _HOSTILE},
    "report-list": lambda r: r | {"report": []},
    "sampled-number": lambda r: r | {"sampled": 1},
    "route-unregistered": lambda r: r | {"route": f"nope{_HOSTILE}"},
    "route-number": lambda r: r | {"route": 1},
    "limits-list": lambda r: r | {"limits": []},
    "limits-empty": lambda r: r | {"limits": {}},
    "limit-text": lambda r: r | {"limits": r["limits"] | {"max_line_bytes": _HOSTILE}},
    "limit-float": lambda r: r | {"limits": r["limits"] | {"max_event_bytes": 1.5}},
    "limit-bool": lambda r: r | {"limits": r["limits"] | {"max_parts": True}},
    "limit-negative": lambda r: r | {"limits": r["limits"] | {"max_tool_calls": -1}},
    "limit-huge": lambda r: r | {"limits": r["limits"] | {"max_text_chars": 10**400}},
    "limit-null": lambda r: r | {"limits": r["limits"] | {"max_line_bytes": None}},
}


def _argv(case: str, directory: Path, recorded: dict[str, Any]) -> list[str]:
    if case in _BAD_ARGUMENTS:
        return _BAD_ARGUMENTS[case](directory)
    content = _BAD_RECORDINGS[case.removeprefix("recording-")](recorded)
    return ["inspect", _file(directory, content)]


@pytest.mark.parametrize(
    "case", [*_BAD_ARGUMENTS, *(f"recording-{name}" for name in _BAD_RECORDINGS)]
)
def test_every_bad_input_is_one_escaped_line_and_status_2(
    case: str,
    tmp_path: Path,
    recorded: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"data: {}\n\n")))
    status = _main_status(_argv(case, tmp_path, recorded))
    captured = capsys.readouterr()
    _assert_one_clean_line(status, captured.out, captured.err)


@pytest.mark.parametrize(
    "case",
    [
        "recording-too-deep",
        "recording-route-unregistered",
        "recording-limit-text",
        "route-unregistered",
        "demo-otlp-unclosed-bracket",
        "file-name-not-utf8",
    ],
)
def test_the_command_prints_one_escaped_line_and_exits_2(
    case: str, tmp_path: Path, recorded: dict[str, Any]
) -> None:
    """The real command, as a terminal runs it: the bytes it writes, not text in-process."""
    if case == "file-name-not-utf8":  # reaches Python as lone surrogates
        argv = [b"inspect", bytes(tmp_path) + b"/\xff\x1b[2J.sse"]
    else:
        argv = [os.fsencode(argument) for argument in _argv(case, tmp_path, recorded)]
    result = subprocess.run(
        [sys.executable, "-m", "otelsse", *argv],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    # Strict UTF-8: a lone surrogate written out (or any stray byte) fails here.
    _assert_one_clean_line(result.returncode, result.stdout.decode(), result.stderr.decode())


def _hostile_recording(directory: Path, recorded: dict[str, Any]) -> str:
    """A recording whose every printed string carries ``_HOSTILE``: its id, and the response's
    id, model, finish reason and error code in its skeleton (which a crafted file may hold)."""
    word = json.dumps(_HOSTILE)
    body = (
        f'data: {{"id":{word},"object":"chat.completion.chunk","model":{word},'
        f'"choices":[{{"index":0,"delta":{{"role":"assistant"}}}}]}}\n\n'
        f'data: {{"id":{word},"object":"chat.completion.chunk","model":{word},'
        f'"choices":[{{"index":0,"delta":{{}},"finish_reason":{word}}}]}}\n\n'
        f'data: {{"error":{{"code":{word},"message":"x"}}}}\n\n'
    ).encode()
    return _file(
        directory,
        recorded
        | {
            "id": _HOSTILE,
            "route": "openai.chat_completions",
            "judged_as": "openai.chat_completions",
            "refused": None,
            "error": None,
            "chunks": [[0.0, base64.b64encode(body).decode()]],
        },
    )


def test_a_recording_prints_every_string_of_its_own_escaped(
    tmp_path: Path, recorded: dict[str, Any]
) -> None:
    path = _hostile_recording(tmp_path, recorded)
    status, text = _run("inspect", path)
    assert status == EXIT_NOT_COMPLETE
    assert _unprintable(text) == []
    escaped = r"\x1b[31m\x1b]0;owned\x07\x7f\x9b2J\u202e\u2028\udcff"
    fields = _text_fields(text)
    assert fields["replay"].endswith(f"of recording {escaped}")
    for name in [
        "recording.id",
        "gen_ai.response.id",
        "gen_ai.response.model",
        "otelsse.stop_reason",
        "gen_ai.response.finish_reasons",
        "otelsse.provider_error_code",
    ]:
        assert escaped in fields[name], name
    # JSON is ASCII, its own escapes: every value exact.
    status, document = _run("inspect", path, "--json")
    assert document.isascii()
    assert _unprintable(document) == []
    fields = json.loads(document)
    assert fields["recording.id"] == fields["gen_ai.response.model"] == _HOSTILE
    assert fields["otelsse.provider_error_code"] == _HOSTILE


def test_a_body_prints_its_event_types_escaped(tmp_path: Path) -> None:
    # Its bytes but the surrogate's: invalid UTF-8 would make the outcome decode_error.
    event = f"boom{_HOSTILE.removesuffix(chr(0xDCFF))}".encode()
    body = b"event: " + event + b"\ndata: {}\n\nevent: " + event + b"\ndata: {"
    status, text = _inspect_body(tmp_path, body, "--events")
    assert status == EXIT_NOT_COMPLETE
    assert _unprintable(text) == []
    escaped = r"boom\x1b[31m\x1b]0;owned\x07\x7f\x9b2J\u202e\u2028"
    first, *rows = text.splitlines()
    assert first.endswith(f"; last event {escaped}")
    assert rows[2].split() == ["0", escaped, "2"]
