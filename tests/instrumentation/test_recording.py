"""The flight recorder wired into the instrumentation: from an alert to the trace to the skeleton.

A stream that did not end ``complete`` leaves a redacted skeleton whose id is on its span; the
skeleton replays to the span's outcome and holds none of the body's content. A recorder that
fails is contained and counted like every other otelsse failure. Real server on 127.0.0.1, real
httpx and botocore (Bedrock's event streams), real SDK, real files (the recorder's own rules are
tested in tests/test_recorder.py).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from otelsse import semconv
from otelsse._core.eventstream import EventStreamParser
from otelsse._instrumentor import RECORDER_DIR_ENV
from otelsse.recorder import FlightRecorder, load_recording
from tests import _eventstream as es
from tests._fixtures import read_fixture
from tests._otel import Telemetry
from tests._server import Reply, SSEServer
from tests.instrumentation.test_botocore import (
    CONVERSE_PATH,
    INVOKE_PATH,
    contents,
    converse,
    corrupted,
    invoke,
    served,
)

TOOLS = "real/openai-chat-parallel-tool-calls.sse"
PATH = "/v1/chat/completions"


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


def stream(url: str) -> bytes:
    body = {"model": "gpt-x", "stream": True}
    with httpx.Client() as client, client.stream("POST", url, json=body) as response:
        return response.read()


def recordings(directory: Path) -> dict[str, Path]:
    """Recording id -> its file (the id is the file name's last part)."""
    return {
        path.stem.rpartition("-")[2]: path
        for path in directory.iterdir()
        if path.name.startswith("otelsse-")
    }


def serve_three(server: SSEServer) -> list[str]:
    """A complete stream, the same one cut at a clean EOF halfway, and a 429."""
    body = read_fixture(TOOLS)
    refused = Reply(
        b'{"error": {"message": "slow down, org-7"}}', 429, "Too Many Requests",
        "application/json", framing="length", headers=(("retry-after", "3"),),
    )  # fmt: skip
    return [
        server.route(f"/whole{PATH}", Reply(body)),
        server.route(f"/cut{PATH}", Reply(body, framing="close", cut=len(body) // 2)),
        server.route(f"/limited{PATH}", refused),
    ]


def test_a_failed_stream_leaves_a_skeleton_named_on_its_span(
    server: SSEServer, tmp_path: Path
) -> None:
    body = read_fixture(TOOLS)
    otel = Telemetry().install(recorder=FlightRecorder(tmp_path))
    try:
        for url in serve_three(server):
            try:
                stream(url)
            except httpx.HTTPError:
                pass
        spans = {
            (span.attributes or {})[semconv.OUTCOME]: dict(span.attributes or {})
            for span in otel.spans()
        }
    finally:
        otel.uninstall()
    assert set(spans) == {"complete", "truncated", "rate_limited"}
    assert semconv.RECORDING_ID not in spans["complete"]  # nothing kept of a good stream
    found = recordings(tmp_path)
    assert set(found) == {spans[o][semconv.RECORDING_ID] for o in ("truncated", "rate_limited")}
    for outcome in ("truncated", "rate_limited"):
        span = spans[outcome]
        recording = load_recording(found[str(span[semconv.RECORDING_ID])])
        assert recording.outcome == outcome
        replayed = recording.replay()
        assert replayed.outcome.value == outcome
        assert replayed.event_count == span[semconv.EVENT_COUNT]
        assert replayed.bytes_received == span[semconv.BYTES_RECEIVED]
        assert replayed.tool_call_count == span[semconv.TOOL_CALL_COUNT]
    assert spans["rate_limited"][semconv.RETRY_AFTER] == 3.0
    # No content on disk: not the 429's message, the ids, the tool's name or its arguments.
    on_disk = b"".join(path.read_bytes() for path in found.values())
    skeletons = b"".join(
        chunk for path in found.values() for _, chunk in load_recording(path).chunks
    )
    for secret in (b"org-7", b"slow down", b"call_fHCjJqt9", b"ASYMbACeb", b"get_current_weather",
                   b"Boston", b"fp_9b78b61c52"):  # fmt: skip
        assert secret not in on_disk
        assert secret not in skeletons
    cut_recording = load_recording(found[str(spans["truncated"][semconv.RECORDING_ID])])
    skeleton = b"".join(chunk for _, chunk in cut_recording.chunks)
    assert len(skeleton) == len(body) // 2  # every byte in place, redacted


def test_the_recorder_directory_can_come_from_the_environment(
    server: SSEServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORDER_DIR_ENV, str(tmp_path / "ring"))
    otel = Telemetry().install()
    try:
        stream(serve_three(server)[1])
        (span,) = otel.spans()
    finally:
        otel.uninstall()
    recording_id = (span.attributes or {})[semconv.RECORDING_ID]
    assert set(recordings(tmp_path / "ring")) == {recording_id}


def test_a_recorder_directory_that_cannot_be_made_leaves_the_rest_of_the_instrumentation_on(
    server: SSEServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The recorder is an optional part: a directory that cannot be created (a path under a
    regular file, which fails even for root) costs the recordings, never the spans or metrics.
    Counted once as a ``record`` error and warned about once, however many streams follow."""
    blocker = tmp_path / "file"
    blocker.write_bytes(b"a regular file")
    monkeypatch.setenv(RECORDER_DIR_ENV, str(blocker / "sub"))
    with caplog.at_level(logging.DEBUG, logger="otelsse"):
        otel = Telemetry().install()
        try:
            url = serve_three(server)[1]
            got = [stream(url) for _ in range(2)]
            spans = otel.spans()
            errors = otel.errors_by_stage()
        finally:
            otel.uninstall()
    body = read_fixture(TOOLS)
    assert got == [body[: len(body) // 2]] * 2
    assert [(span.attributes or {})[semconv.OUTCOME] for span in spans] == ["truncated"] * 2
    assert not any(semconv.RECORDING_ID in (span.attributes or {}) for span in spans)
    assert errors["record"] == 1
    assert sum(errors.values()) == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert RECORDER_DIR_ENV in warnings[0].getMessage()
    assert str(blocker / "sub") in warnings[0].getMessage()
    assert blocker.read_bytes() == b"a regular file"


def test_an_entry_the_ring_cannot_remove_is_counted_as_a_record_error(
    server: SSEServer, tmp_path: Path
) -> None:
    """The ring skips an entry it cannot delete (here a directory named like the oldest
    recording) and keeps its bound with the rest; each such failure is counted, stage
    ``record``, and the streams are recorded all the same."""
    ring = tmp_path / "ring"
    stuck = ring / f"otelsse-{1:020d}-{'0' * 16}.json"
    stuck.mkdir(parents=True)
    (stuck / "inside").write_bytes(b"x")
    recorder = FlightRecorder(ring, max_recordings=1)
    otel = Telemetry().install(recorder=recorder)
    try:
        url = serve_three(server)[1]
        for _ in range(3):
            stream(url)
        spans = otel.spans()
        errors = otel.errors_by_stage()
    finally:
        otel.uninstall()
    assert all(semconv.RECORDING_ID in (span.attributes or {}) for span in spans)
    assert len(spans) == 3
    assert errors["record"] == recorder.prune_failures == 3
    assert sum(errors.values()) == 3
    # The bound holds over the rest: the newest recording alone, beside the stuck entry.
    newest = (spans[-1].attributes or {})[semconv.RECORDING_ID]
    recordings = [path.name for path in ring.iterdir() if path.is_file()]
    assert len(recordings) == 1
    assert str(newest) in recordings[0]
    assert stuck.is_dir()


def test_a_recorder_that_cannot_write_is_contained_and_counted(
    server: SSEServer, tmp_path: Path
) -> None:
    ring = tmp_path / "ring"
    recorder = FlightRecorder(ring)
    ring.rmdir()  # the disk went away under it: every write now fails
    (ring.parent / "ring").write_bytes(b"not a directory")
    otel = Telemetry().install(recorder=recorder)
    try:
        got = stream(serve_three(server)[1])
        (span,) = otel.spans()
        errors = otel.errors_by_stage()
    finally:
        otel.uninstall()
    body = read_fixture(TOOLS)
    assert got == body[: len(body) // 2]  # the application's read is untouched
    attributes = span.attributes or {}
    assert attributes[semconv.OUTCOME] == "truncated"  # and so is the verdict
    assert semconv.RECORDING_ID not in attributes
    assert errors["record"] == 1
    assert sum(errors.values()) == 1


def _frame_texts(skeleton: bytes) -> str:
    """A Bedrock skeleton's bytes and frames as text, each invoke chunk's own event decoded."""
    texts = [skeleton.decode("utf-8", "replace")]
    for event in EventStreamParser(max_event_bytes=len(skeleton) + 16).feed(skeleton):
        texts.append(event.data)
        if event.event == "chunk":
            texts.append(base64.b64decode(json.loads(event.data)["bytes"]).decode())
    return "\n".join(texts)


def test_a_failed_bedrock_stream_leaves_a_skeleton_of_its_frames(
    server: SSEServer, tmp_path: Path
) -> None:
    """botocore's two operations: a ConverseStream body with a corrupt frame (botocore raises
    its checksum error) and a Claude invoke body cut inside a chunk. Each span names its
    recording, whose frames replay to the span's verdict; no content the application got is on
    disk, not even inside the chunks' base64."""
    text = read_fixture("real/bedrock-converse-stream-text.eventstream")
    claude = read_fixture("real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream")
    ends, chunk_ends = es.frame_ends(text), es.frame_ends(claude)
    server.route(CONVERSE_PATH, served(corrupted(text, ends[3] + 40)))
    server.route(INVOKE_PATH, served(claude, cut=chunk_ends[len(chunk_ends) // 2] + 30))
    complete = served(claude)  # the same answer whole: read, never recorded
    otel = Telemetry().install(recorder=FlightRecorder(tmp_path))
    try:
        seen = [converse(server.url("")), invoke(server.url(""))]
        server.route(INVOKE_PATH, complete)
        invoke(server.url(""))
        spans = [dict(span.attributes or {}) for span in otel.spans()]
    finally:
        otel.uninstall()
    assert [span[semconv.OUTCOME] for span in spans] == ["decode_error", "truncated", "complete"]
    assert semconv.RECORDING_ID not in spans[2]
    found = recordings(tmp_path)
    assert set(found) == {span[semconv.RECORDING_ID] for span in spans[:2]}
    on_disk = b"".join(path.read_bytes() for path in found.values())
    skeletons = []
    for span in spans[:2]:
        recording = load_recording(found[str(span[semconv.RECORDING_ID])])
        replayed = recording.replay()
        assert replayed.outcome.value == recording.outcome == span[semconv.OUTCOME]
        assert replayed.event_count == span[semconv.EVENT_COUNT]
        assert replayed.bytes_received == span[semconv.BYTES_RECEIVED]
        skeletons.append(_frame_texts(b"".join(chunk for _, chunk in recording.chunks)))
    pieces = [piece for got in seen for piece in contents(got)]
    assert len(pieces) > 5  # the application got text and tool arguments, before the fault
    for piece in pieces:
        assert piece.encode() not in on_disk
        assert not [skeleton for skeleton in skeletons if piece in skeleton], piece
