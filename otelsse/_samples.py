"""Embedded sample streams for ``otelsse demo``: one per kind of ending, built in code.

They imitate real provider bodies closely enough to exercise every layer (framing, routes,
accumulators, outcomes) with no network, API key or fixture file.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

__all__ = ["SAMPLES", "Sample"]


class Sample(NamedTuple):
    name: str
    route: str
    body: bytes


def _sse(data: Any, event: str | None = None, crlf: bool = False) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = ([f"event: {event}"] if event else []) + [f"data: {text}"]
    end = "\r\n" if crlf else "\n"
    return (end.join(lines) + end + end).encode()


def _chat(words: list[str], finish: str | None, done: bool, tool_args: str | None = None) -> bytes:
    base = {"id": "chatcmpl-demo", "object": "chat.completion.chunk", "model": "demo-model"}
    out = [_sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    for word in words:
        out.append(_sse({**base, "choices": [{"index": 0, "delta": {"content": word}}]}))
    if tool_args is not None:
        call = {"index": 0, "id": "call_demo", "type": "function"}
        call["function"] = {"name": "get_weather", "arguments": ""}
        out.append(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
        for piece in (tool_args[: len(tool_args) // 2], tool_args[len(tool_args) // 2 :]):
            fragment = {"index": 0, "function": {"arguments": piece}}
            delta = {"tool_calls": [fragment]}
            out.append(_sse({**base, "choices": [{"index": 0, "delta": delta}]}))
    if finish is not None:
        finish_choice = {"index": 0, "delta": {}, "finish_reason": finish}
        out.append(_sse({**base, "choices": [finish_choice]}))
    if done:
        out.append(_sse("[DONE]"))
    return b"".join(out)


def _anthropic(stop: str, error: bool = False) -> bytes:
    start = {"id": "msg_demo", "model": "demo-claude", "usage": {"input_tokens": 12}}
    out = [
        _sse({"type": "message_start", "message": start}, "message_start"),
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            "content_block_start",
        ),
        _sse({"type": "ping"}, "ping"),
    ]
    for word in ("Four ", "plus ", "five ", "is ", "nine."):
        delta = {"type": "text_delta", "text": word}
        out.append(
            _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        )
    if error:
        failure = {"type": "overloaded_error", "message": "Overloaded"}
        out.append(_sse({"type": "error", "error": failure}, "error"))
        return b"".join(out)
    out += [
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 5},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]
    return b"".join(out)


_WORDS = ["Streams ", "end ", "when ", "the ", "provider ", "says ", "so."]
_complete_chat = _chat(_WORDS, "stop", True)

SAMPLES: tuple[Sample, ...] = (
    Sample("chat complete", "openai.chat_completions", _complete_chat),
    Sample(
        "chat cut mid-event", "openai.chat_completions", _complete_chat[: len(_complete_chat) // 2]
    ),
    Sample("chat without [DONE]", "openai.chat_completions", _chat(_WORDS, "stop", False)),
    Sample("chat finish=length", "openai.chat_completions", _chat(_WORDS[:3], "length", True)),
    Sample(
        "chat tool call",
        "openai.chat_completions",
        _chat([], "tool_calls", True, tool_args='{"city": "Paris"}'),
    ),
    Sample(
        "chat tool call, bad JSON",
        "openai.chat_completions",
        _chat([], "tool_calls", True, tool_args='{"city": "Par'),
    ),
    Sample(
        "chat error object",
        "openai.chat_completions",
        _chat(_WORDS[:2], None, False) + _sse({"error": {"type": "server_error"}}) + _sse("[DONE]"),
    ),
    Sample(
        "chat invalid UTF-8", "openai.chat_completions", _complete_chat.replace(b"end", b"\xffnd")
    ),
    Sample("anthropic end_turn", "anthropic.messages", _anthropic("end_turn")),
    Sample("anthropic overloaded", "anthropic.messages", _anthropic("end_turn", error=True)),
    Sample("anthropic max_tokens", "anthropic.messages", _anthropic("max_tokens")),
)
