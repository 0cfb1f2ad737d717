"""The provider streams in ``tests/fixtures``, and what each must classify as.

``real/`` holds recorded provider bodies (sources in ``real/SOURCES.md``), ``synthetic/`` bodies
built from the providers' documentation (``synthetic/README.md``), and ``edge/`` hand-made edge
cases that individual tests name.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EDGE_FIXTURES = FIXTURES / "edge"


class Expected(NamedTuple):
    route: str
    outcome: str
    stop_reason: str | None


# What each recorded or synthetic fixture must classify as, by the outcome rules of
# docs/users/outcomes.md and the synthetic fixtures' README, under its route's default rule: a host
# profile's verdict on a recording is tested in tests/routes/test_profiles.py.
EXPECTED: dict[str, Expected] = {
    # Captured from a2a-sdk's own server (real/SOURCES.md); A2A states in their lower-case spelling.
    "real/a2a-sdk-jsonrpc-artifacts-completed.sse": Expected("a2a.stream", "complete", "completed"),
    "real/a2a-sdk-jsonrpc-canceled.sse": Expected("a2a.stream", "incomplete", "canceled"),
    "real/a2a-sdk-jsonrpc-error-event.sse": Expected("a2a.stream", "provider_error", None),
    "real/a2a-sdk-jsonrpc-v03-artifacts-completed.sse": Expected(
        "a2a.stream", "complete", "completed"
    ),
    "real/a2a-sdk-jsonrpc-v03-input-required.sse": Expected(
        "a2a.stream", "complete", "input-required"
    ),
    "real/a2a-sdk-rest-error-event.sse": Expected("a2a.stream", "provider_error", None),
    "real/a2a-sdk-rest-failed.sse": Expected("a2a.stream", "provider_error", "failed"),
    "real/a2a-sdk-rest-message.sse": Expected("a2a.stream", "complete", "message"),
    "real/a2a-sdk-rest-v03-input-required.sse": Expected(
        "a2a.stream", "complete", "input-required"
    ),
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
    "real/cloudflare-workers-ai-chat-tool-call.sse": Expected(
        "openai.chat_completions", "complete", "tool_calls"
    ),
    "real/cohere-v2-chat-text.sse": Expected("cohere.chat", "complete", "COMPLETE"),
    "real/cohere-v2-chat-tool-call.sse": Expected("cohere.chat", "complete", "TOOL_CALL"),
    "real/gemini-function-call.sse": Expected("gemini.generate_content", "complete", "STOP"),
    # Before google-genai 2.0.0 the Interactions API streamed ``content.*`` events, not steps.
    "real/gemini-interactions-legacy-content.sse": Expected(
        "gemini.interactions", "complete", "completed"
    ),
    "real/gemini-interactions-text.sse": Expected("gemini.interactions", "complete", "completed"),
    "real/gemini-interactions-thinking.sse": Expected(
        "gemini.interactions", "complete", "completed"
    ),
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
    # Snowflake Cortex never sends a finish_reason: [DONE] alone is no proof the answer is whole.
    "real/snowflake-cortex-chat-thinking-no-finish-reason.sse": Expected(
        "openai.chat_completions", "truncated", None
    ),
    "real/vertex-gemini-text.sse": Expected("gemini.generate_content", "complete", "STOP"),
    "real/vllm-chat-finish-length.sse": Expected("openai.chat_completions", "incomplete", "length"),
    # Writer never sends [DONE]: the plain route says so; its host profile reads it as complete.
    "real/writer-chat-no-done.sse": Expected("openai.chat_completions", "terminal_missing", "stop"),
    "real/writer-chat-tool-call-no-done.sse": Expected(
        "openai.chat_completions", "terminal_missing", "tool_calls"
    ),
    "synthetic/agui-cancelled.sse": Expected("agui.run", "incomplete", "cancelled"),
    "synthetic/agui-chunks-reasoning-usage.sse": Expected("agui.run", "complete", "success"),
    "synthetic/agui-dart-heartbeat-comments.sse": Expected("agui.run", "complete", "success"),
    "synthetic/agui-dart-tool-call.sse": Expected("agui.run", "complete", "success"),
    # An interrupted run is a closed run, paused for input (docs/users/outcomes.md).
    "synthetic/agui-interrupt.sse": Expected("agui.run", "complete", "interrupt"),
    "synthetic/agui-run-error.sse": Expected("agui.run", "provider_error", None),
    "synthetic/agui-spec-example.sse": Expected("agui.run", "complete", "success"),
    "synthetic/agui-truncated-mid-message.sse": Expected("agui.run", "truncated", None),
    "synthetic/agui-two-runs.sse": Expected("agui.run", "complete", "success"),
    "synthetic/a2a-v03-spec-cut-mid-artifact.sse": Expected("a2a.stream", "truncated", None),
    "synthetic/a2a-v03-spec-streaming.sse": Expected("a2a.stream", "complete", "completed"),
    "synthetic/a2a-v1-spec-streaming-rest.sse": Expected("a2a.stream", "complete", "completed"),
    "synthetic/anthropic-error-overloaded-midstream.sse": Expected(
        "anthropic.messages", "provider_error", None
    ),
    "synthetic/anthropic-max-tokens-truncated-tool-input.sse": Expected(
        "anthropic.messages", "incomplete", "max_tokens"
    ),
    "synthetic/anthropic-refusal.sse": Expected("anthropic.messages", "incomplete", "refusal"),
    "synthetic/cohere-chat-error.sse": Expected("cohere.chat", "provider_error", "ERROR"),
    "synthetic/cohere-chat-max-tokens.sse": Expected("cohere.chat", "incomplete", "MAX_TOKENS"),
    "synthetic/cohere-chat-stop-sequence.sse": Expected("cohere.chat", "complete", "STOP_SEQUENCE"),
    "synthetic/cohere-chat-thinking.sse": Expected("cohere.chat", "complete", "COMPLETE"),
    # Cohere's own generation timeout, not the client's read deadline (``timeout``).
    "synthetic/cohere-chat-timeout.sse": Expected("cohere.chat", "provider_error", "TIMEOUT"),
    "synthetic/cohere-chat-truncated-mid-tool-call.sse": Expected("cohere.chat", "truncated", None),
    "synthetic/gemini-finish-max-tokens.sse": Expected(
        "gemini.generate_content", "incomplete", "MAX_TOKENS"
    ),
    "synthetic/gemini-interactions-error-event.sse": Expected(
        "gemini.interactions", "provider_error", None
    ),
    "synthetic/gemini-interactions-failed.sse": Expected(
        "gemini.interactions", "provider_error", "failed"
    ),
    # The paused state: the model waits for the client's function results (a success stop).
    "synthetic/gemini-interactions-function-call-requires-action.sse": Expected(
        "gemini.interactions", "complete", "requires_action"
    ),
    "synthetic/gemini-interactions-function-call-truncated.sse": Expected(
        "gemini.interactions", "truncated", None
    ),
    "synthetic/gemini-interactions-incomplete.sse": Expected(
        "gemini.interactions", "incomplete", "incomplete"
    ),
    "synthetic/gemini-interactions-requires-continuation.sse": Expected(
        "gemini.interactions", "incomplete", "requires_continuation"
    ),
    "synthetic/gemini-midstream-error.sse": Expected(
        "gemini.generate_content", "provider_error", None
    ),
    "synthetic/gemini-prompt-blocked.sse": Expected(
        "gemini.generate_content", "incomplete", "SAFETY"
    ),
    "synthetic/mcp-2026-input-required.sse": Expected(
        "mcp.streamable_http", "complete", "input_required"
    ),
    "synthetic/mcp-cut-mid-response.sse": Expected("mcp.streamable_http", "truncated", None),
    "synthetic/mcp-jsonrpc-error.sse": Expected("mcp.streamable_http", "provider_error", None),
    "synthetic/mcp-request-cancelled.sse": Expected(
        "mcp.streamable_http", "incomplete", "request_cancelled"
    ),
    # The server closed the stream after event ids, for the client to resume it (2025-11-25): no
    # terminal is owed on this exchange.
    "synthetic/mcp-resumable-close.sse": Expected("mcp.streamable_http", "eof_unverified", None),
    "synthetic/mcp-tools-call-is-error.sse": Expected(
        "mcp.streamable_http", "complete", "tool_error"
    ),
    "synthetic/mcp-tools-call-progress.sse": Expected("mcp.streamable_http", "complete", "result"),
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


def fixture_names() -> list[str]:
    """Every recorded and synthetic fixture, as ``real/x.sse`` / ``synthetic/y.sse``."""
    return sorted(EXPECTED)


def read_fixture(name: str) -> bytes:
    """A fixture's bytes by its name under ``tests/fixtures`` (``real/x.sse``, ``edge/y.sse``)."""
    return (FIXTURES / name).read_bytes()


# The recorded AWS event-stream bodies (``real/bedrock-*.eventstream``): binary frames that only
# the Bedrock routes read, so they are kept apart from ``EXPECTED`` (whose sweeps read every
# fixture with the SSE framer as well). Judged by each route's rules (its module docstring):
# the invoke route judges each model family by its own (Claude's Messages events by the
# Anthropic rules, Nova's by the ConverseStream ones, Llama's and Titan's by their stop fields).
_CONVERSE = "bedrock.converse_stream"
_INVOKE = "bedrock.invoke_model_with_response_stream"
BEDROCK_EXPECTED: dict[str, Expected] = {
    "real/bedrock-converse-stream-guardrail-intervened.eventstream": Expected(
        _CONVERSE, "incomplete", "guardrail_intervened"
    ),
    "real/bedrock-converse-stream-reasoning-redacted.eventstream": Expected(
        _CONVERSE, "complete", "end_turn"
    ),
    "real/bedrock-converse-stream-reasoning.eventstream": Expected(
        _CONVERSE, "complete", "end_turn"
    ),
    "real/bedrock-converse-stream-text.eventstream": Expected(_CONVERSE, "complete", "end_turn"),
    "real/bedrock-converse-stream-tool-use.eventstream": Expected(
        _CONVERSE, "complete", "tool_use"
    ),
    "real/bedrock-invoke-stream-claude-text-and-tool-use.eventstream": Expected(
        _INVOKE, "complete", "tool_use"
    ),
    "real/bedrock-invoke-stream-llama-length.eventstream": Expected(
        _INVOKE, "incomplete", "length"
    ),
    "real/bedrock-invoke-stream-nova-max-tokens.eventstream": Expected(
        _INVOKE, "incomplete", "max_tokens"
    ),
    "real/bedrock-invoke-stream-titan-length.eventstream": Expected(
        _INVOKE, "incomplete", "LENGTH"
    ),
}


def bedrock_fixture_names() -> list[str]:
    """Every recorded AWS event-stream fixture, as ``real/bedrock-x.eventstream``."""
    return sorted(BEDROCK_EXPECTED)
