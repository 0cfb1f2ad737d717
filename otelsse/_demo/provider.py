"""A local fake LLM provider for ``otelsse demo`` and the examples: no API key, no network.

It speaks ten streaming contracts otelsse knows over plain HTTP/1.1 on 127.0.0.1: OpenAI Chat
Completions and Responses, Anthropic Messages, Gemini ``streamGenerateContent``, Cohere v2 chat,
the Gemini Interactions API and AG-UI agent runs in SSE, Amazon Bedrock ConverseStream in AWS's
binary event stream, and two agent protocols at any path, told by their JSON-RPC request as
otelsse tells them (MCP streamable HTTP and A2A: ``agents.py``). It misbehaves on purpose: the
``x-otelsse-demo-scenario`` request header picks how the stream ends (see ``SCENARIOS``).
Without the header a request gets a complete answer, or a tool call when it offers tools.
``clean_cut`` and ``no_terminal`` end a well-formed body early or without its end marker:
nothing at the byte level is wrong, so no client raises. Bodies imitate the real recorded
streams closely enough for the real openai, anthropic, cohere and google-genai SDKs and botocore
to parse them. It never checks a signature: boto3's SigV4 headers are ignored like any other.
Each route is one renderer (a ``Turn`` to its events) and one ``_WIRES`` entry; AG-UI, which
claims no path (otelsse sniffs its first event), is served at ``AGUI_PATH``.

The server is asyncio on a background thread, so a cut connection or a stalled stream costs one
coroutine and the demo's clients, on other threads, see exactly what a real network would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote

from .._clients import rpc_fields
from .._core.eventstream import EVENT_STREAM_MEDIA_TYPE, encode_frame
from .._core.http import accepts_event_stream
from ..routes import Request, get_route, match_route, protocol_request
from .agents import AGENT_ROUTES, UNSUPPORTED_ON_AGENTS, a2a_events, agent_request, mcp_events

__all__ = [
    "AGUI_PATH",
    "ANSWER",
    "DEFAULT_MODELS",
    "EXPECTED_OUTCOME",
    "SCENARIOS",
    "SCENARIO_HEADER",
    "WEATHER_TOOL",
    "FakeProvider",
    "Turn",
    "example_path",
    "request_for",
    "script_events",
]

#: Request header naming the scenario; ``x-otelsse-demo-job`` becomes the response's request id.
SCENARIO_HEADER = "x-otelsse-demo-scenario"
JOB_HEADER = "x-otelsse-demo-job"

#: Every scenario and the outcome otelsse must report for it.
EXPECTED_OUTCOME: dict[str, str] = {
    "complete": "complete",
    "tool_call": "complete",
    "tool_call_invalid": "payload_error",  # a tool stop, but the arguments are cut JSON
    # The token limit: length / max_tokens / MAX_TOKENS (Interactions: the status incomplete).
    # AG-UI has none: its run that ends unfinished is a cancelled one.
    "incomplete": "incomplete",
    "truncated": "truncated",  # the connection closes mid-stream
    # An error event inside a 200 stream (Cohere: message-end with finish_reason ERROR; AG-UI:
    # RUN_ERROR)
    "provider_error": "provider_error",
    "timeout": "timeout",  # the stream stalls past the client's read timeout
    "rate_limited": "rate_limited",  # HTTP 429, a JSON body and Retry-After, on a streaming route
    "overloaded": "http_error",  # HTTP 503 (Anthropic's 529): the provider's capacity
    "unauthorized": "http_error",  # HTTP 401: the caller's credentials
    "bad_gateway": "http_error",  # HTTP 502 with an HTML page: a load balancer's, not the API's
    "gzip": "complete",  # a whole answer, gzip-coded as it streams (each event flushed)
    # A data line that never ends (cut off past 8 MiB, otelsse's line ceiling); on Bedrock, a
    # frame that never ends (its prelude declares more than otelsse's 16 MiB event ceiling,
    # and the body ends after 9 MiB of it).
    "endless_line": "buffer_limit",
    # The body ends cleanly (chunked, its last chunk sent) at an event boundary part-way
    # through the answer, as a gateway that times out and ends the response: half the text, or,
    # when the request offers tools, a tool call cut inside its arguments. Every client finishes
    # without an error.
    "clean_cut": "truncated",
    # The whole answer, every part stopped with success, then a clean end without the route's
    # end marker (chat: ``data: [DONE]``; Anthropic: ``message_stop``; Bedrock: ``metadata``
    # after ``messageStop``).
    "no_terminal": "terminal_missing",
}
#: Scenarios the provider answers with an HTTP error before any stream: status and error type.
HTTP_FAILURES: dict[str, tuple[int, str, str]] = {
    "rate_limited": (429, "rate_limit_exceeded", "Rate limit reached; retry later."),
    "overloaded": (503, "overloaded_error", "Overloaded; retry later."),
    "unauthorized": (401, "authentication_error", "Invalid API key."),
}
#: The same failures as AWS answers them: status and ``x-amzn-errortype`` (the Amazon Bedrock
#: API reference, "ConverseStream", Errors; a request signed with unknown credentials is a 403
#: ``UnrecognizedClientException``, AWS's "Common Errors"). botocore raises the type as its
#: ``ClientError`` code.
AWS_FAILURES: dict[str, tuple[int, str, str]] = {
    "rate_limited": (
        429,
        "ThrottlingException",
        "Too many requests, please wait before trying again.",
    ),
    "overloaded": (
        503,
        "ServiceUnavailableException",
        "Bedrock is unable to process your request.",
    ),
    "unauthorized": (
        403,
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
    ),
}
SCENARIOS: tuple[str, ...] = tuple(EXPECTED_OUTCOME)
#: The ``bad_gateway`` page, as a load balancer in front of an API sends it.
BAD_GATEWAY_PAGE = (
    b"<html><head><title>502 Bad Gateway</title></head><body>bad gateway</body></html>\n"
)
#: How much of the ``endless_line`` scenario's line is sent before the server gives up: past
#: otelsse's default line ceiling (8 MiB), so the monitor stops there.
ENDLESS_LINE_BYTES = 9 * 1024 * 1024
#: The length the ``endless_line`` scenario's frame declares (Bedrock), of which the server
#: sends ``ENDLESS_LINE_BYTES``: past otelsse's default event ceiling (16 MiB).
ENDLESS_FRAME_BYTES = 17 * 1024 * 1024

#: The routes it speaks, and the model each answers as unless the request names one.
DEFAULT_MODELS: dict[str, str] = {
    "openai.chat_completions": "gpt-4o-mini",
    "openai.responses": "gpt-4.1",
    "anthropic.messages": "claude-sonnet-4-6",
    "gemini.generate_content": "gemini-2.5-flash",
    "bedrock.converse_stream": "anthropic.claude-3-5-haiku-20241022-v1:0",
    "cohere.chat": "command-a-03-2025",
    "gemini.interactions": "gemini-2.5-flash",
    # An AG-UI request names no model: this is the one the demo's agent reports in its usage.
    "agui.run": "gpt-4o-mini",
    # agent protocols name no model: the server's and the agent's names, never sent
    "mcp.streamable_http": "weather-mcp-server",
    "a2a.stream": "demo-agent",
}
#: Where the fake provider serves AG-UI, which claims no path of its own: an agent serves it
#: at whatever endpoint it chooses, and otelsse recognises the stream by its first event.
AGUI_PATH = "/agui/run"

_ANSWER_TEXT = (
    "Server-Sent Events end when the provider says so, not when the socket goes quiet. "
    "A stream that stops early looks like a short answer unless someone checks."
)
ANSWER = _ANSWER_TEXT.split(" ")
_TOOL_NAME = "get_weather"
_TOOL_ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
#: What a model that plans before it calls a tool writes first (Cohere's ``tool_plan``).
_TOOL_PLAN = "I will look up the current weather in Paris."
#: The one tool the fake provider calls, with its JSON Schema (OpenAI function shape).
WEATHER_TOOL: dict[str, Any] = {
    "name": _TOOL_NAME,
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


class Turn(NamedTuple):
    """What one answer says; ``script_events`` renders it in a route's wire format."""

    model: str
    scenario: str
    words: int  # how many words of text before the ending
    request_id: str
    tools: bool = False  # the request offered tools (a ``clean_cut`` then cuts a tool call)
    rpc_id: str | int | None = None  # the JSON-RPC request's id, which MCP and A2A answer


def _sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def _pieces(text: str, parts: int = 3) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tool_answer(turn: Turn) -> bool:
    """Whether the answer is a tool call: the tool scenarios, and a clean cut offered tools."""
    return turn.scenario.startswith("tool_call") or (turn.scenario == "clean_cut" and turn.tools)


def _words(turn: Turn) -> list[str]:
    """The words of text sent: a clean cut of a text answer ends the body half-way through."""
    if turn.scenario == "clean_cut" and not _tool_answer(turn):
        return ANSWER[: turn.words // 2]
    return ANSWER[: turn.words]


def _tool_arguments(turn: Turn) -> str:
    if turn.scenario == "tool_call_invalid":
        return _TOOL_ARGUMENTS[: len(_TOOL_ARGUMENTS) // 2]  # a gateway dropped the rest
    return _TOOL_ARGUMENTS


def _argument_pieces(turn: Turn) -> list[str]:
    """The argument deltas sent: a clean cut ends the body before the last one, inside the
    arguments (``{"city": "Paris", "unit"``, which a partial-JSON parser reads as a call
    without its unit)."""
    pieces = _pieces(_tool_arguments(turn))
    return pieces[:-1] if turn.scenario == "clean_cut" else pieces


def _chat(turn: Turn) -> list[bytes]:
    base = {
        "id": f"chatcmpl-{turn.request_id}",
        "object": "chat.completion.chunk",
        "created": 1764460800,
        "model": turn.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    tool = _tool_answer(turn)
    if not tool:
        events += [chunk({"content": word + " "}) for word in _words(turn)]
    if turn.scenario == "provider_error":
        error = {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        return [*events, _sse({"error": error}), _sse("[DONE]")]
    if tool:
        call = {
            "index": 0,
            "id": f"call_{turn.request_id}",
            "type": "function",
            "function": {"name": _TOOL_NAME, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [call]}))
        events += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in _argument_pieces(turn)
        ]
    if turn.scenario == "clean_cut":
        return events  # no finish_reason, no usage, no [DONE]
    finish = "tool_calls" if tool else "length" if turn.scenario == "incomplete" else "stop"
    usage = {
        "prompt_tokens": 24,
        "completion_tokens": turn.words + 1,
        "total_tokens": 25 + turn.words,
    }
    events.append(chunk({}, finish))
    events.append(_sse({**base, "choices": [], "usage": usage}))
    if turn.scenario == "no_terminal":
        return events  # every choice finished, then no [DONE]
    return [*events, _sse("[DONE]")]


def _responses(turn: Turn) -> list[bytes]:
    sequence = iter(range(10_000))
    response: dict[str, Any] = {
        "id": f"resp_{turn.request_id}",
        "object": "response",
        "created_at": 1764460800,
        "status": "in_progress",
        "model": turn.model,
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(sequence), **fields}, kind)

    events = [
        event("response.created", response=response),
        event("response.in_progress", response=response),
    ]
    if _tool_answer(turn):
        arguments = _tool_arguments(turn)
        item: dict[str, Any] = {
            "id": f"fc_{turn.request_id}",
            "type": "function_call",
            "status": "in_progress",
            "call_id": f"call_{turn.request_id}",
            "name": _TOOL_NAME,
            "arguments": "",
        }
        events.append(event("response.output_item.added", output_index=0, item=item))
        events += [
            event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=0,
                delta=piece,
            )
            for piece in _argument_pieces(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # inside the arguments: no .done events, no response.completed
        events.append(
            event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                arguments=arguments,
            )
        )
        done_item = {**item, "status": "completed", "arguments": arguments}
        events.append(event("response.output_item.done", output_index=0, item=done_item))
        output: list[dict[str, Any]] = [done_item]
    else:
        text = ""
        message: dict[str, Any] = {
            "id": f"msg_{turn.request_id}",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
        events.append(event("response.output_item.added", output_index=0, item=message))
        events.append(event("response.content_part.added", **where, part=part))
        for word in _words(turn):
            text += word + " "
            events.append(event("response.output_text.delta", **where, delta=word + " "))
        if turn.scenario == "clean_cut":
            return events  # half the text: no .done events, no response.completed
        if turn.scenario == "provider_error":
            return [
                *events,
                event("error", code="server_error", message="Something went wrong", param=None),
            ]
        events.append(event("response.output_text.done", **where, text=text))
        events.append(event("response.content_part.done", **where, part={**part, "text": text}))
        content = [{**part, "text": text}]
        done_message = {**message, "status": "completed", "content": content}
        events.append(event("response.output_item.done", output_index=0, item=done_message))
        output = [done_message]
    usage = {"input_tokens": 24, "output_tokens": turn.words + 1, "total_tokens": 25 + turn.words}
    if turn.scenario == "incomplete":
        final = {
            **response,
            "status": "incomplete",
            "output": output,
            "usage": usage,
            "incomplete_details": {"reason": "max_output_tokens"},
        }
        return [*events, event("response.incomplete", response=final)]
    final = {**response, "status": "completed", "output": output, "usage": usage}
    return [*events, event("response.completed", response=final)]


def _anthropic(turn: Turn) -> list[bytes]:
    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, **fields}, kind)

    message: dict[str, Any] = {
        "id": f"msg_{turn.request_id}",
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 24, "output_tokens": 1},
    }
    events = [
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("ping"),
    ]
    for word in _words(turn):
        delta = {"type": "text_delta", "text": word + " "}
        events.append(event("content_block_delta", index=0, delta=delta))
    if turn.scenario == "clean_cut" and not _tool_answer(turn):
        return events  # half the text, its block still open
    if turn.scenario == "provider_error":
        error = {"type": "overloaded_error", "message": "Overloaded"}
        return [*events, event("error", error=error)]
    events.append(event("content_block_stop", index=0))
    stop = "max_tokens" if turn.scenario == "incomplete" else "end_turn"
    if _tool_answer(turn):
        block = {
            "type": "tool_use",
            "id": f"toolu_{turn.request_id}",
            "name": _TOOL_NAME,
            "input": {},
        }
        events.append(event("content_block_start", index=1, content_block=block))
        events += [
            event(
                "content_block_delta",
                index=1,
                delta={"type": "input_json_delta", "partial_json": piece},
            )
            for piece in _argument_pieces(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # inside the tool block's input: no stop, no message_stop
        events.append(event("content_block_stop", index=1))
        stop = "tool_use"
    ending: dict[str, Any] = {"stop_reason": stop, "stop_sequence": None}
    events.append(event("message_delta", delta=ending, usage={"output_tokens": turn.words + 1}))
    if turn.scenario == "no_terminal":
        return events  # every block closed, a success stop, then no message_stop
    return [*events, event("message_stop")]


def _gemini(turn: Turn) -> list[bytes]:
    base = {"modelVersion": turn.model, "responseId": turn.request_id}

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return _sse({"candidates": [candidate], **base})

    words = _words(turn)
    events = [chunk([{"text": " ".join(words[i : i + 4]) + " "}]) for i in range(0, len(words), 4)]
    if turn.scenario == "clean_cut":
        return events  # half the text: no finishReason
    if turn.scenario == "provider_error":
        error = {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        }
        return [*events, _sse({"error": error})]
    if turn.scenario == "tool_call":
        call = {"functionCall": {"name": _TOOL_NAME, "args": json.loads(_TOOL_ARGUMENTS)}}
        events.append(chunk([call]))
    usage = {
        "promptTokenCount": 24,
        "candidatesTokenCount": turn.words + 1,
        "totalTokenCount": 25 + turn.words,
    }
    finish = "MAX_TOKENS" if turn.scenario == "incomplete" else "STOP"
    last = {
        "candidates": [
            {
                "content": {"parts": [{"text": ""}], "role": "model"},
                "finishReason": finish,
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        **base,
    }
    return [*events, _sse(last)]


def _bedrock_frame(
    kind: str, payload: dict[str, Any] | bytes, message_type: str = "event"
) -> bytes:
    """One frame as Bedrock sends it: three string headers in this order (every recorded body),
    then the member's JSON object (AWS, "Event stream encoding"; the Amazon Bedrock API
    reference, "ConverseStream" and "ConverseStreamOutput")."""
    named_by = ":event-type" if message_type == "event" else ":exception-type"
    headers = [
        (named_by, kind),
        (":content-type", "application/json"),
        (":message-type", message_type),
    ]
    if not isinstance(payload, bytes):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    return encode_frame(headers, payload)


def _bedrock(turn: Turn) -> list[bytes]:
    # Bedrock also pads every payload with a ``p`` field of random length (the recorded bodies
    # show it); no client reads it, so it is left out.
    def event(kind: str, **fields: Any) -> bytes:
        return _bedrock_frame(kind, fields)

    events = [event("messageStart", role="assistant")]
    for word in _words(turn):  # a text block needs no contentBlockStart: its first delta opens it
        events.append(event("contentBlockDelta", contentBlockIndex=0, delta={"text": word + " "}))
    if turn.scenario == "clean_cut" and not _tool_answer(turn):
        return events  # half the text, its block still open
    if turn.scenario == "provider_error":
        # A modelled exception of the ConverseStreamOutput union, as an exception frame.
        error = {
            "message": "The model encountered an error while streaming. Try your request again.",
            "originalStatusCode": 500,
        }
        return [*events, _bedrock_frame("modelStreamErrorException", error, "exception")]
    events.append(event("contentBlockStop", contentBlockIndex=0))
    stop = "max_tokens" if turn.scenario == "incomplete" else "end_turn"
    if _tool_answer(turn):
        tool = {"toolUseId": f"tooluse_{turn.request_id}", "name": _TOOL_NAME}
        events.append(event("contentBlockStart", contentBlockIndex=1, start={"toolUse": tool}))
        events += [
            event("contentBlockDelta", contentBlockIndex=1, delta={"toolUse": {"input": piece}})
            for piece in _argument_pieces(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # inside the tool block's input: no stop, no messageStop
        events.append(event("contentBlockStop", contentBlockIndex=1))
        stop = "tool_use"
    events.append(event("messageStop", stopReason=stop))
    if turn.scenario == "no_terminal":
        return events  # every block closed, a success stop, then no metadata
    usage = {"inputTokens": 24, "outputTokens": turn.words + 1, "totalTokens": 25 + turn.words}
    return [*events, event("metadata", usage=usage, metrics={"latencyMs": 300 + 20 * turn.words})]


def _cohere(turn: Turn) -> list[bytes]:
    """Cohere v2 chat: ``message-start``, a text block or a tool plan and one call, then
    ``message-end`` (its ``finish_reason``, usage), then ``data: [DONE]`` (the recorded
    tests/fixtures/real/cohere-v2-chat-*.sse streams). ``message-end`` is both the answer's stop
    and the stream's terminal, so a whole answer without its end marker cannot be told from a
    cut one: no ``no_terminal`` here (``UNSUPPORTED``)."""

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, **fields}, kind)

    def content(text: str) -> dict[str, Any]:
        return {"message": {"content": {"text": text}}}

    start = {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
    events = [event("message-start", id=turn.request_id, delta={"message": start})]
    tool = _tool_answer(turn)
    if tool:
        # The plan the model writes before it calls a tool (reasoning, not the answer).
        events += [
            event("tool-plan-delta", delta={"message": {"tool_plan": word + " "}})
            for word in _TOOL_PLAN.split(" ")
        ]
        call = {
            "id": f"{_TOOL_NAME}_{turn.request_id}",
            "type": "function",
            "function": {"name": _TOOL_NAME, "arguments": ""},
        }
        events.append(event("tool-call-start", index=0, delta={"message": {"tool_calls": call}}))
        events += [
            event(
                "tool-call-delta",
                index=0,
                delta={"message": {"tool_calls": {"function": {"arguments": piece}}}},
            )
            for piece in _argument_pieces(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # inside the call's arguments: no tool-call-end, no message-end
        events.append(event("tool-call-end", index=0))
    else:
        opened = {"message": {"content": {"type": "text", "text": ""}}}
        events.append(event("content-start", index=0, delta=opened))
        events += [event("content-delta", index=0, delta=content(w + " ")) for w in _words(turn)]
        if turn.scenario == "clean_cut":
            return events  # half the text, its block still open
        events.append(event("content-end", index=0))
    tokens = {"input_tokens": 24, "output_tokens": turn.words + 1}
    ending: dict[str, Any] = {
        "finish_reason": "TOOL_CALL" if tool else "COMPLETE",
        "usage": {"billed_units": tokens, "tokens": tokens},
    }
    if turn.scenario == "incomplete":
        ending["finish_reason"] = "MAX_TOKENS"
    elif turn.scenario == "provider_error":
        # The generation failed: the finish reason says so, and ``error`` says what happened.
        ending = {"error": "An internal error occurred during generation.", **ending}
        ending["finish_reason"] = "ERROR"
    return [*events, event("message-end", delta=ending), _sse("[DONE]")]


def _interactions(turn: Turn) -> list[bytes]:
    """The Gemini Interactions API: ``interaction.created``, one step (model output, or a
    function call whose arguments stream as ``arguments_delta``), ``interaction.completed`` with
    its status, then ``event: done`` / ``data: [DONE]`` (the recorded
    tests/fixtures/real/gemini-interactions-text.sse). The stop is the terminal's own status, and
    ``[DONE]`` after it is optional, so no ``no_terminal`` here (``UNSUPPORTED``)."""

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({**fields, "event_type": kind}, kind)

    interaction: dict[str, Any] = {
        "id": f"v1_{turn.request_id}",
        "status": "in_progress",
        "object": "interaction",
        "model": turn.model,
    }
    events = [
        event("interaction.created", interaction=interaction),
        event("interaction.status_update", interaction_id=interaction["id"], status="in_progress"),
    ]
    tool = _tool_answer(turn)
    if tool:
        step = {"type": "function_call", "id": f"call_{turn.request_id}", "name": _TOOL_NAME}
        events.append(event("step.start", index=0, step=step))
        events += [
            event("step.delta", index=0, delta={"arguments": piece, "type": "arguments_delta"})
            for piece in _argument_pieces(turn)
        ]
    else:
        events.append(event("step.start", index=0, step={"type": "model_output"}))
        words = _words(turn)
        events += [
            event(
                "step.delta",
                index=0,
                delta={"text": " ".join(words[i : i + 4]) + " ", "type": "text"},
            )
            for i in range(0, len(words), 4)
        ]
    if turn.scenario == "clean_cut":
        return events  # half the text, or inside the call's arguments: the step never stops
    if turn.scenario == "provider_error":
        # An error event ends the stream (the SDK yields it and raises nothing).
        error = {"code": "unavailable", "message": "The model is overloaded. Try again later."}
        return [*events, event("error", error=error)]
    events.append(event("step.stop", index=0))
    status = "incomplete" if turn.scenario == "incomplete" else "completed"
    if tool:
        # A call the application must run leaves the interaction waiting for its result.
        status = "requires_action"
        events.append(
            event("interaction.status_update", interaction_id=interaction["id"], status=status)
        )
    usage = {
        "total_tokens": 25 + turn.words,
        "total_input_tokens": 24,
        "total_output_tokens": turn.words + 1,
    }
    final = {**interaction, "status": status, "usage": usage}
    return [*events, event("interaction.completed", interaction=final), _sse("[DONE]", "done")]


def _agui(turn: Turn) -> list[bytes]:
    """An AG-UI agent's run (``data:`` lines only, as the protocol's ``EventEncoder`` writes
    them): ``RUN_STARTED``, a text message or a tool call, then ``RUN_FINISHED`` (its
    ``outcome`` and ``usage``, one entry naming the model the agent called) or ``RUN_ERROR``.
    The run's terminal is its only end: no ``no_terminal`` here (``UNSUPPORTED``)."""

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, **fields})

    # The run's id is the provider's own, as every route's response id is here (an agent echoes
    # the input's ``runId``, which the demo's clients all send alike).
    run = {"threadId": "thread_demo", "runId": f"run_{turn.request_id}"}
    events = [event("RUN_STARTED", **run)]
    tool = _tool_answer(turn)
    if tool:
        call_id = f"call_{turn.request_id}"
        events.append(event("TOOL_CALL_START", toolCallId=call_id, toolCallName=_TOOL_NAME))
        events += [
            event("TOOL_CALL_ARGS", toolCallId=call_id, delta=piece)
            for piece in _argument_pieces(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # inside the call's arguments: no TOOL_CALL_END, no RUN_FINISHED
        events.append(event("TOOL_CALL_END", toolCallId=call_id))
    else:
        message = f"msg_{turn.request_id}"
        events.append(event("TEXT_MESSAGE_START", messageId=message, role="assistant"))
        events += [
            event("TEXT_MESSAGE_CONTENT", messageId=message, delta=word + " ")
            for word in _words(turn)
        ]
        if turn.scenario == "clean_cut":
            return events  # half the text, the message still open
        if turn.scenario != "provider_error":
            events.append(event("TEXT_MESSAGE_END", messageId=message))
    usage = [
        {
            "provider": "openai",
            "model": turn.model,
            "inputTokens": 24,
            "outputTokens": turn.words + 1,
            "totalTokens": 25 + turn.words,
        }
    ]
    if turn.scenario == "provider_error":
        # The run failed: RUN_ERROR ends it and whatever it had open (its message).
        failed = "The model provider is unavailable."
        return [*events, event("RUN_ERROR", message=failed, code="model_unavailable", usage=usage)]
    # AG-UI has no token limit of its own: the run that did not finish is the one the agent
    # stopped, ``cancelled``, which a consumer "MUST NOT report as success".
    outcome = {"outcome": {"type": "cancelled"}} if turn.scenario == "incomplete" else {}
    return [*events, event("RUN_FINISHED", **run, **outcome, usage=usage)]


def _endless_line() -> bytes:
    """A data line that never ends: the start of an event, then text past 8 MiB."""
    return b'data: {"text": "' + b"x" * ENDLESS_LINE_BYTES


def _endless_frame() -> bytes:
    """A frame that never ends: a ``contentBlockDelta`` whose prelude declares more than
    otelsse's event ceiling (``Limits.max_event_bytes``, 16 MiB), though less than the
    format's payload maximum (24 MiB, which botocore enforces), cut off after 9 MiB."""
    text = b"x" * ENDLESS_FRAME_BYTES
    payload = b'{"contentBlockIndex":0,"delta":{"text":"' + text + b'"}}'
    return _bedrock_frame("contentBlockDelta", payload)[:ENDLESS_LINE_BYTES]


#: (route, scenario) pairs the provider refuses (400). Gemini sends function-call arguments as
#: a JSON object, never as text: they cannot be cut. ``no_terminal`` needs a route that knows an
#: answer is whole before its end marker: on Responses, Cohere and Interactions the stop arrives
#: only in the terminal itself (``response.completed``, ``message-end``, ``interaction.completed``;
#: the ``[DONE]`` Cohere and Interactions send after it is optional), Gemini has no end marker
#: (the last ``finishReason`` is the end) and an AG-UI run ends only with its ``RUN_FINISHED``
#: or ``RUN_ERROR``, so on each a whole answer without its end is no different from a cut one.
#: AWS never content-codes an event stream (botocore reads the body's bytes as frames, uncoded):
#: no ``gzip`` on Bedrock. AG-UI claims no path, so otelsse knows an AG-UI stream only by its
#: first event: a refusal before any event (an HTTP error's JSON or HTML body) is no stream it
#: can tell is AG-UI's, and would not be counted on ``agui.run``. The cohere SDK refuses a line
#: longer than 1 MiB itself (cohere 7.3.1 ``core/http_sse/_api.py``, ``MAX_LINE_SIZE``: it raises
#: ``SSEError`` and the application closes the stream), well before otelsse's 8 MiB ceiling: on
#: Cohere an ``endless_line`` ends as the application's own abandonment (``cancelled``).
UNSUPPORTED: frozenset[tuple[str, str]] = frozenset(
    {
        ("gemini.generate_content", "tool_call_invalid"),
        ("gemini.generate_content", "no_terminal"),
        ("openai.responses", "no_terminal"),
        ("bedrock.converse_stream", "gzip"),
        ("cohere.chat", "no_terminal"),
        ("cohere.chat", "endless_line"),
        ("gemini.interactions", "no_terminal"),
        ("agui.run", "no_terminal"),
        *(("agui.run", scenario) for scenario in (*HTTP_FAILURES, "bad_gateway")),
        *UNSUPPORTED_ON_AGENTS,  # agents.py says why
    }
)
#: Pairs refused only when the request offers tools: a ``clean_cut`` then cuts a tool call's
#: arguments, which Gemini never sends in pieces (without tools, its text is cut).
UNSUPPORTED_WITH_TOOLS: frozenset[tuple[str, str]] = frozenset(
    {("gemini.generate_content", "clean_cut")}
)


class _Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    events: list[bytes]  # the events, SSE or frames (empty for an error reply)
    body: bytes  # an error reply's body
    first_delay: float
    gap: float  # seconds between events
    cut_after: int | None  # truncated: send this many events and part of the next, then close
    chunked: bool  # a truncated chunked body errors in the client; close-delimited looks clean
    stall_after: int | None  # timeout: send this many events, then go silent
    gzip: bool = False  # content-coded with gzip, each event flushed as it is sent
    endless: bytes | None = None  # endless_line: sent after the first event, then the end


def _error_reply(
    status: int, kind: str, message: str, headers: list[tuple[str, str]] | None = None
) -> _Reply:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    said = [("content-type", "application/json"), *(headers or ())]
    return _Reply(status, said, [], body, 0, 0, None, True, None)


def _api_failure(status: int, kind: str, message: str) -> _Reply:
    """An API's refusal: a quota or an overload says when to come back; bad credentials do
    not."""
    return _error_reply(status, kind, message, [("retry-after", "1")] if status != 401 else [])


def _aws_failure(status: int, kind: str, message: str) -> _Reply:
    """AWS's refusal (a REST-JSON service): the type in ``x-amzn-errortype``, which botocore
    reads first, and ``{"message"}``; no Retry-After."""
    body = json.dumps({"message": message}).encode()
    headers = [("content-type", "application/json"), ("x-amzn-errortype", kind)]
    return _Reply(status, headers, [], body, 0, 0, None, True, None)


class _Wire(NamedTuple):
    """How a provider answers on a route, besides its events."""

    render: Callable[[Turn], list[bytes]]
    content_type: str = "text/event-stream; charset=utf-8"
    request_id_header: str = "x-request-id"
    failures: Mapping[str, tuple[int, str, str]] = HTTP_FAILURES
    failure: Callable[[int, str, str], _Reply] = _api_failure
    endless: Callable[[], bytes] = _endless_line
    #: Where it is served when its route claims no path (AG-UI): POST, always streaming.
    path: str | None = None


_WIRES: dict[str, _Wire] = {
    "openai.chat_completions": _Wire(_chat),
    "openai.responses": _Wire(_responses),
    "anthropic.messages": _Wire(
        _anthropic,
        request_id_header="request-id",
        # Anthropic's own "overloaded" status
        failures={**HTTP_FAILURES, "overloaded": (529, *HTTP_FAILURES["overloaded"][1:])},
    ),
    "gemini.generate_content": _Wire(_gemini),
    "bedrock.converse_stream": _Wire(
        _bedrock,
        content_type=EVENT_STREAM_MEDIA_TYPE,
        request_id_header="x-amzn-requestid",
        failures=AWS_FAILURES,
        failure=_aws_failure,
        endless=_endless_frame,
    ),
    "cohere.chat": _Wire(_cohere),
    "gemini.interactions": _Wire(_interactions),
    "agui.run": _Wire(_agui, path=AGUI_PATH),
    "mcp.streamable_http": _Wire(lambda t: mcp_events(t.scenario, _words(t), t.rpc_id)),
    "a2a.stream": _Wire(
        lambda t: a2a_events(t.scenario, _words(t), t.rpc_id, f"task-{t.request_id}")
    ),
}
#: The routes served at a path of the fake provider's own choosing, by that path.
_SERVED_AT = {wire.path: route for route, wire in _WIRES.items() if wire.path is not None}


def script_events(route: str, turn: Turn) -> list[bytes]:
    """The events of an answer in ``route``'s format (SSE events, or event-stream frames): the
    whole answer (before any cut or stall on the wire), except for ``clean_cut`` and
    ``no_terminal``, whose events stop where the body ends."""
    return _WIRES[route].render(turn)


class FakeProvider:
    """The fake provider on ``host:port`` (0 picks a free port), served from a background thread.

    Use as a context manager; ``base_url`` is ``http://host:port``. ``stall`` is how long a
    ``timeout`` stream stays silent before the server gives up on it (longer than any client's
    read timeout in the demo). ``seed`` makes the answers' lengths and delays repeatable: a
    request that names its job (``x-otelsse-demo-job``) draws from the seed and the job alone,
    whatever order concurrent requests arrive in.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        seed: int | None = None,
        stall: float = 6.0,
        speed: float = 1.0,
    ) -> None:
        self.host = host
        self.port = port
        self.stall = stall
        self._speed = speed
        self._seed = seed
        self._random = random.Random(seed)
        self._requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FakeProvider:
        self._thread = threading.Thread(target=self._run, name="otelsse-fake-provider", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._finished.wait()
            self._thread.join()

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C interrupts it: ``otelsse demo --provider-only``)."""
        # An Event, not Thread.join: on CPython 3.10 and 3.11 a KeyboardInterrupt inside
        # join(timeout) marks the still-running thread as stopped (bpo-45274's handler releases
        # the thread's own lock), so the join in __exit__ would no longer wait for the server.
        # The timeout keeps the wait interruptible where lock waits ignore signals (Windows).
        while not self._finished.wait(0.5):
            pass

    # -- the server -------------------------------------------------------------------------

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()
            self._finished.set()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        handlers: set[asyncio.Task[None]] = set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                await self._handle(reader, writer)
            except asyncio.CancelledError:
                pass  # the server is stopping: this connection just ends
            finally:
                handlers.discard(task)

        try:
            server = await asyncio.start_server(accept, self.host, self.port)
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
            for task in list(handlers):
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            await self._send(writer, self._reply(method, target, headers, body))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away; nothing to answer
        except ValueError:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _reply(self, method: str, target: str, headers: dict[str, str], body: bytes) -> _Reply:
        path, _, query = target.partition("?")
        endpoint = Request(method, self.host, path, query)
        found = match_route(endpoint)
        rpc = None
        if found is None and accepts_event_stream(headers.get("accept")):
            # A protocol served at any path (MCP, A2A), told as otelsse tells it: by its
            # JSON-RPC body and declared headers, when the request asks for SSE.
            rpc = rpc_fields(body)
            found = match_route(protocol_request(endpoint, rpc.method, rpc.name, headers.get))
        # A route that names the model in its URL says there whether it streams (Gemini only
        # with ?alt=sse, without it a JSON array this server lacks; Bedrock's converse-stream
        # always); the others ask with the body's ``stream`` flag. One that claims no path is
        # served at the provider's own (``_Wire.path``), where every answer streams. Every
        # answer is a POST's: a GET that streams an existing one (the Interactions API resuming
        # an interaction) finds none here.
        url_model = None if found is None else found.url_model(endpoint)
        streams = found is not None and (rpc is not None or found.always_streams(endpoint))
        route = _SERVED_AT.get(path)
        if route is not None:
            streams = True
        elif found is not None and found.name in _WIRES and not (url_model and not streams):
            route = found.name
        if route is None or method != "POST":
            return _error_reply(404, "not_found", f"no streaming endpoint at {method} {path}")
        wire = _WIRES[route]
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return _error_reply(400, "invalid_request_error", "the body is not JSON")
        if not isinstance(request, dict):
            return _error_reply(400, "invalid_request_error", "the body is not a JSON object")
        if not streams and request.get("stream") is not True:
            return _error_reply(400, "invalid_request_error", "this fake provider only streams")
        # Bedrock's Converse API offers tools in ``toolConfig``, the others at the top.
        tools = bool(request.get("tools") or (request.get("toolConfig") or {}).get("tools"))
        scenario = headers.get(SCENARIO_HEADER, "tool_call" if tools else "complete")
        if scenario not in EXPECTED_OUTCOME:
            return _error_reply(400, "invalid_request_error", f"unknown scenario {scenario!r}")
        if (route, scenario) in UNSUPPORTED or (
            tools and (route, scenario) in UNSUPPORTED_WITH_TOOLS
        ):
            served = f"scenario {scenario!r} is not served on {route}"
            return _error_reply(400, "invalid_request_error", served + " with tools" * tools)
        self._requests += 1
        request_id = f"req_demo_{headers.get(JOB_HEADER) or self._requests}"[:40]
        request_id_field = (wire.request_id_header, request_id)
        if scenario == "bad_gateway":
            # A gateway's page; gateways (Envoy, nginx) tag it with their own request id.
            page = [("content-type", "text/html"), request_id_field]
            return _Reply(502, page, [], BAD_GATEWAY_PAGE, 0, 0, None, True, None)
        if scenario in wire.failures:
            reply = wire.failure(*wire.failures[scenario])
            return reply._replace(headers=[*reply.headers, request_id_field])
        job = headers.get(JOB_HEADER)
        seeded = self._seed is not None and job is not None
        rng = random.Random(f"{self._seed}/{job}") if seeded else self._random
        model = url_model or str(request.get("model") or DEFAULT_MODELS[route])
        words = rng.randint(8, len(ANSWER))
        rpc_id = None if rpc is None else rpc.id
        events = script_events(route, Turn(model, scenario, words, request_id, tools, rpc_id))
        # Most answers start in a few hundred milliseconds; "thinking" ones take seconds.
        thinking = rng.random() < 0.15
        first_delay = rng.uniform(0.6, 1.6) if thinking else rng.uniform(0.03, 0.35)
        middle = len(events) // 2
        said = [
            ("content-type", wire.content_type),
            ("cache-control", "no-cache"),
            request_id_field,
        ]
        if scenario == "gzip":
            said.append(("content-encoding", "gzip"))
        return _Reply(
            status=200,
            headers=said,
            events=events,
            body=b"",
            first_delay=first_delay / self._speed,
            gap=rng.uniform(0.005, 0.03) / self._speed,
            cut_after=middle if scenario == "truncated" else None,
            chunked=scenario != "truncated" or rng.random() < 0.5,
            stall_after=middle if scenario == "timeout" else None,
            gzip=scenario == "gzip",
            endless=wire.endless() if scenario == "endless_line" else None,
        )

    async def _send(self, writer: asyncio.StreamWriter, reply: _Reply) -> None:
        reason = {
            200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 429: "Too Many Requests", 502: "Bad Gateway",
            503: "Service Unavailable", 529: "Overloaded",
        }  # fmt: skip
        lines = [f"HTTP/1.1 {reply.status} {reason[reply.status]}", "connection: close"]
        lines += [f"{name}: {value}" for name, value in reply.headers]
        if reply.status != 200:
            lines.append(f"content-length: {len(reply.body)}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + reply.body)
            await writer.drain()
            return
        if reply.chunked:
            lines.append("transfer-encoding: chunked")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        await asyncio.sleep(reply.first_delay)
        coder = zlib.compressobj(wbits=31) if reply.gzip else None

        def frame(data: bytes) -> bytes:
            if coder is not None:
                data = coder.compress(data) + coder.flush(zlib.Z_SYNC_FLUSH)
            return _frame(data, reply.chunked)

        if reply.endless is not None:
            writer.write(frame(reply.events[0]))
            endless = memoryview(reply.endless)
            for start in range(0, len(endless), 65536):
                writer.write(frame(bytes(endless[start : start + 65536])))
                await writer.drain()
            writer.write(b"0\r\n\r\n" if reply.chunked else b"")
            await writer.drain()
            return
        for number, event in enumerate(reply.events):
            if number == reply.stall_after:
                await asyncio.sleep(self.stall)
                return
            if number == reply.cut_after:
                # Part of the next event, then the connection drops: a proxy's idle cut.
                writer.write(frame(event[: len(event) // 2]))
                await writer.drain()
                return
            if number:
                await asyncio.sleep(reply.gap)
            writer.write(frame(event))
            await writer.drain()
        if coder is not None:
            writer.write(_frame(coder.flush(), reply.chunked))
        if reply.chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()


def _frame(data: bytes, chunked: bool) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if chunked else data


def example_path(route: str, model: str | None = None) -> str:
    """The path (and query) of ``route``'s example request, naming ``model`` where the path
    carries it (Gemini, Bedrock: percent-encoded, as botocore sends an id's ``:``); for a route
    that claims no path, the provider's own (``AGUI_PATH``)."""
    found = get_route(route)
    if found.example_request is None:
        served_at = _WIRES[route].path
        assert served_at is not None, route
        return served_at
    method, target = found.example_request
    path, _, query = target.partition("?")
    named = found.url_model(Request(method, "", path, query))
    if model is None or named is None:
        return target
    return target.replace(quote(named, safe=""), quote(model, safe=""), 1)


def request_for(route: str, model: str, *, tools: bool) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of a streaming request to ``route``, as a plain HTTP client sends it."""
    prompt = "Why do streamed answers need a terminal event?"
    if route in AGENT_ROUTES:
        return agent_request(route, prompt)  # no model, no tools: a JSON-RPC request
    path = example_path(route, model)
    if route == "gemini.generate_content":
        body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        if tools:
            body["tools"] = [{"functionDeclarations": [WEATHER_TOOL]}]
    elif route == "anthropic.messages":
        body = {
            "model": model,
            "max_tokens": 256,
            "stream": True,
            "messages": [{"role": "user", "content": prompt}],
        }
        if tools:
            body["tools"] = [
                {
                    "name": WEATHER_TOOL["name"],
                    "description": WEATHER_TOOL["description"],
                    "input_schema": WEATHER_TOOL["parameters"],
                }
            ]
    elif route == "bedrock.converse_stream":
        # The Converse request (the Amazon Bedrock API reference, "ConverseStream"): the model
        # is in the path, and the path alone asks for a stream.
        body = {"messages": [{"role": "user", "content": [{"text": prompt}]}]}
        if tools:
            spec = {
                "name": WEATHER_TOOL["name"],
                "description": WEATHER_TOOL["description"],
                "inputSchema": {"json": WEATHER_TOOL["parameters"]},
            }
            body["toolConfig"] = {"tools": [{"toolSpec": spec}]}
    elif route in ("openai.responses", "gemini.interactions"):
        # The two take the same request: an ``input`` text, function tools at the top level.
        body = {"model": model, "input": prompt, "stream": True}
        if tools:
            body["tools"] = [{"type": "function", **WEATHER_TOOL}]
    elif route == "agui.run":
        # AG-UI's RunAgentInput: no model (the agent picks it) and no stream flag (always SSE).
        body = {
            "threadId": "thread_demo",
            "runId": "run_demo",
            "messages": [{"id": "msg_user", "role": "user", "content": prompt}],
            "tools": [WEATHER_TOOL] if tools else [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    else:  # Chat Completions, and Cohere v2 chat, whose request has the same shape
        body = {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}
        if tools:
            body["tools"] = [{"type": "function", "function": WEATHER_TOOL}]
    return path, body
