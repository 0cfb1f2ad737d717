"""The shared recorded and synthetic provider streams, and what each must classify as.

They are read from ``../shared/fixtures`` (or ``$OTELSSE_FIXTURES``), never copied into the
repository. With ``CI=true`` a missing directory is a failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = Path(os.environ.get("OTELSSE_FIXTURES", REPO.parent / "shared" / "fixtures"))
LOCAL_FIXTURES = Path(__file__).resolve().parent / "fixtures"


class Expected(NamedTuple):
    route: str
    outcome: str
    stop_reason: str | None


# What each shared fixture must classify as, from reference/provider-contracts.md §7 and the
# synthetic fixtures' README.
EXPECTED: dict[str, Expected] = {
    "real/anthropic-pause-turn.sse": Expected("anthropic.messages", "incomplete", "pause_turn"),
    "real/anthropic-server-tool-empty-input.sse": Expected(
        "anthropic.messages", "complete", "end_turn"
    ),
    "real/anthropic-server-tool-then-tool-use.sse": Expected(
        "anthropic.messages", "complete", "tool_use"
    ),
    "real/anthropic-text-and-two-tool-use.sse": Expected(
        "anthropic.messages", "complete", "tool_use"
    ),
    "real/anthropic-text.sse": Expected("anthropic.messages", "complete", "end_turn"),
    "real/anthropic-thinking.sse": Expected("anthropic.messages", "complete", "end_turn"),
    "real/azure-openai-chat-prompt-filter.sse": Expected(
        "openai.chat_completions", "complete", "stop"
    ),
    "real/bedrock-mantle-responses-function-call.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/cohere-v2-chat-tool-call.sse": Expected("generic", "eof_unverified", None),
    "real/gemini-function-call.sse": Expected("gemini.generate_content", "complete", "STOP"),
    "real/gemini-text.sse": Expected("gemini.generate_content", "complete", "STOP"),
    "real/gemini-thinking.sse": Expected("gemini.generate_content", "complete", "STOP"),
    "real/groq-chat-error-event.sse": Expected("openai.chat_completions", "provider_error", None),
    "real/mistral-chat-usage-inline.sse": Expected("openai.chat_completions", "complete", "stop"),
    "real/openai-chat-multiple-choices.sse": Expected(
        "openai.chat_completions", "complete", "stop"
    ),
    "real/openai-chat-parallel-tool-calls.sse": Expected(
        "openai.chat_completions", "complete", "tool_calls"
    ),
    "real/openai-chat-text-usage.sse": Expected("openai.chat_completions", "complete", "stop"),
    "real/openai-chat-text.sse": Expected("openai.chat_completions", "complete", "stop"),
    "real/openai-chat-tool-call-obfuscation.sse": Expected(
        "openai.chat_completions", "complete", "tool_calls"
    ),
    "real/openai-chat-usage-then-moderation.sse": Expected(
        "openai.chat_completions", "complete", "stop"
    ),
    "real/openai-responses-background-queued.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/openai-responses-function-call.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/openai-responses-reasoning-function-call-text.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/openai-responses-resume-starting-after.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/openai-responses-text.sse": Expected("openai.responses", "complete", "completed"),
    "real/openai-responses-web-search.sse": Expected("openai.responses", "complete", "completed"),
    "real/openrouter-chat-comments-length-error.sse": Expected(
        "openai.chat_completions", "provider_error", "length"
    ),
    "real/openrouter-responses-no-event-field.sse": Expected(
        "openai.responses", "complete", "completed"
    ),
    "real/vertex-gemini-text.sse": Expected("gemini.generate_content", "complete", "STOP"),
    "real/vllm-chat-finish-length.sse": Expected("openai.chat_completions", "incomplete", "length"),
    "synthetic/anthropic-error-overloaded-midstream.sse": Expected(
        "anthropic.messages", "provider_error", None
    ),
    "synthetic/anthropic-max-tokens-truncated-tool-input.sse": Expected(
        "anthropic.messages", "incomplete", "max_tokens"
    ),
    "synthetic/anthropic-refusal.sse": Expected("anthropic.messages", "incomplete", "refusal"),
    "synthetic/gemini-finish-max-tokens.sse": Expected(
        "gemini.generate_content", "incomplete", "MAX_TOKENS"
    ),
    "synthetic/gemini-midstream-error.sse": Expected(
        "gemini.generate_content", "provider_error", None
    ),
    "synthetic/gemini-prompt-blocked.sse": Expected(
        "gemini.generate_content", "incomplete", "SAFETY"
    ),
    "synthetic/openai-chat-error-object-then-done.sse": Expected(
        "openai.chat_completions", "provider_error", None
    ),
    "synthetic/openai-chat-finish-content-filter.sse": Expected(
        "openai.chat_completions", "incomplete", "content_filter"
    ),
    "synthetic/openai-chat-truncated-mid-tool-call.sse": Expected(
        "openai.chat_completions", "truncated", None
    ),
    "synthetic/openai-responses-error-event.sse": Expected(
        "openai.responses", "provider_error", None
    ),
    "synthetic/openai-responses-failed.sse": Expected(
        "openai.responses", "provider_error", "failed"
    ),
    "synthetic/openai-responses-function-call-truncated.sse": Expected(
        "openai.responses", "truncated", None
    ),
    "synthetic/openai-responses-incomplete-max-output-tokens.sse": Expected(
        "openai.responses", "incomplete", "max_output_tokens"
    ),
}


def shared_dir() -> Path:
    """The shared fixture directory; fails under CI when it is missing, else skips."""
    if not (SHARED_FIXTURES / "real").is_dir():
        message = f"shared fixtures not found at {SHARED_FIXTURES} (set OTELSSE_FIXTURES)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_FIXTURES


def shared_names() -> list[str]:
    """Every shared fixture this suite knows, as ``real/x.sse`` / ``synthetic/y.sse``."""
    return sorted(EXPECTED)


def read_shared(name: str) -> bytes:
    return (shared_dir() / name).read_bytes()
