"""The fake provider's agent protocols: MCP streamable HTTP and A2A, in SSE at any path.

Neither names a model or a URL of its own: the demo serves them at ``MCP_PATH`` and
``A2A_PATH``, and the provider tells them, as otelsse does, by the JSON-RPC body's ``method``
and the request's headers, only when its ``Accept`` lists ``text/event-stream``
(``otelsse.routes.protocol_request``). Each answer repeats the request's JSON-RPC ``id``.

- ``mcp.streamable_http``: a ``tools/call`` of ``get_weather`` under MCP 2025-06-18 (whose
  server "SHOULD NOT close the SSE stream before sending the JSON-RPC response", so a stream
  that ends before it is cut). The stream carries ``notifications/progress`` messages, one per
  word of the tool's text, then the JSON-RPC response (modelcontextprotocol
  ``docs/specification/2025-06-18/basic/transports.mdx`` "Sending Messages to the Server";
  ``.../basic/utilities/progress.mdx``; ``.../server/tools.mdx`` "Calling Tools"). Endings: the
  result (complete), a JSON-RPC ``error`` (provider_error), ``-32800`` request cancelled, as
  the mcp SDK's server ends a request that settled without an answer (incomplete), the stream
  ending before the response (truncated).
- ``a2a.stream``: A2A 1.0 ``SendStreamingMessage`` over JSON-RPC, each event a JSON-RPC
  response whose ``result`` is a ``StreamResponse`` in protobuf JSON: the Task (submitted), a
  ``working`` status update, the answer as an artifact streamed in chunks (``append``,
  ``lastChunk``), then the final state (a2aproject/A2A ``docs/specification.md`` v1.0.0 §3.1.2,
  §9.4; ``specification/a2a.proto`` ``StreamResponse``, ``TaskState``). Endings: ``completed``
  (complete), ``failed`` (provider_error), ``canceled`` (incomplete), the stream ending while
  ``working`` (truncated).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "A2A_PATH",
    "AGENT_ROUTES",
    "MCP_PATH",
    "MCP_PROTOCOL_VERSION",
    "UNSUPPORTED_ON_AGENTS",
    "a2a_events",
    "agent_request",
    "agent_request_headers",
    "mcp_events",
]

MCP = "mcp.streamable_http"
A2A = "a2a.stream"
AGENT_ROUTES = (MCP, A2A)
#: Where the demo serves them (any path would do: they are told by the request).
MCP_PATH = "/mcp"
A2A_PATH = "/a2a"
#: The MCP revision the demo's requests declare: before 2025-11-25, whose server may close a
#: stream early for the client to resume it (a clean end before the response would then be
#: ``eof_unverified``, not ``truncated``).
MCP_PROTOCOL_VERSION = "2025-06-18"
#: A2A's version header (a2a-sdk ``a2a/utils/constants.py`` ``VERSION_HEADER``).
A2A_VERSION = "1.0"
#: The progress token of the demo's ``tools/call`` (its ``params._meta.progressToken``).
PROGRESS_TOKEN = "weather-1"
#: The SDK's 2025-era error code for a request that settled without an answer (cancelled).
REQUEST_CANCELLED = -32800

#: Scenarios these routes cannot end honestly. ``tool_call``, ``tool_call_invalid``: neither
#: streams a model's tool call (MCP's ``tools/call`` is the tool run at the server, its result
#: whole in one response, so ``complete`` here is a tool's result; A2A has no tool calls):
#: otelsse counts none. ``no_terminal``: both end at their answer itself (MCP's JSON-RPC
#: response, A2A's final task state); neither has an end marker after a whole answer. And on
#: MCP the HTTP refusals (``rate_limited``, ``overloaded``, ``unauthorized``, ``bad_gateway``):
#: an MCP server may answer a POST with JSON instead of a stream, so otelsse watches an MCP
#: request for an SSE answer only, and a refusal before any stream is no stream (no span). A2A's
#: streaming methods always stream: their refusals are judged.
UNSUPPORTED_ON_AGENTS: frozenset[tuple[str, str]] = frozenset(
    {
        *(
            (route, scenario)
            for route in AGENT_ROUTES
            for scenario in ("tool_call", "tool_call_invalid", "no_terminal")
        ),
        *(
            (MCP, scenario)
            for scenario in ("rate_limited", "overloaded", "unauthorized", "bad_gateway")
        ),
    }
)


def agent_request_headers(route: str) -> dict[str, str]:
    """The headers a plain client sends on ``route`` (none for the model APIs): SSE asked for,
    and the protocol's version."""
    if route == MCP:
        return {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MCP_PROTOCOL_VERSION,
        }
    if route == A2A:
        return {"accept": "text/event-stream", "a2a-version": A2A_VERSION}
    return {}


def agent_request(route: str, prompt: str) -> tuple[str, dict[str, Any]]:
    """(path, JSON-RPC request) on ``route``: MCP's ``tools/call`` (its ids count from the
    session's ``initialize``, 0), A2A's ``SendStreamingMessage`` (a2a-sdk's ids are UUIDs)."""
    if route == MCP:
        params = {
            "name": "get_weather",
            "arguments": {"city": "Paris", "unit": "celsius"},
            "_meta": {"progressToken": PROGRESS_TOKEN},
        }
        return MCP_PATH, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    message = {"messageId": "msg-demo-1", "role": "ROLE_USER", "parts": [{"text": prompt}]}
    return A2A_PATH, {
        "jsonrpc": "2.0",
        "id": "6f1c2a9e-0b7d-4c1e-9a55-2f4d8e3b7a10",
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }


def _sse(data: Any, event: str | None = None) -> bytes:
    text = json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def mcp_events(scenario: str, words: list[str], rpc_id: str | int | None) -> list[bytes]:
    """A ``tools/call`` stream: progress, one per word of the tool's text, then its answer
    (none for a ``clean_cut``, whose ``words`` are already half of them)."""

    def message(data: dict[str, Any]) -> bytes:
        return _sse({"jsonrpc": "2.0", **data}, "message")

    events = [
        message(
            {
                "method": "notifications/progress",
                "params": {
                    "progressToken": PROGRESS_TOKEN,
                    "progress": number,
                    "total": len(words),
                    "message": word,
                },
            }
        )
        for number, word in enumerate(words, 1)
    ]
    if scenario == "clean_cut":
        return events  # the body ends before the response
    if scenario == "provider_error":
        error = {"code": -32603, "message": "Internal error: the weather service failed"}
        return [*events, message({"id": rpc_id, "error": error})]
    if scenario == "incomplete":
        error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
        return [*events, message({"id": rpc_id, "error": error})]
    text = " ".join(words) + " "
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return [*events, message({"id": rpc_id, "result": result})]


def a2a_events(
    scenario: str, words: list[str], rpc_id: str | int | None, task_id: str
) -> list[bytes]:
    """A task's stream: the task, ``working``, the answer's artifact in chunks of four words,
    then its final state (none for a ``clean_cut``, whose ``words`` are already half of them,
    its artifact still being appended to)."""
    context = f"ctx-{task_id}"

    def event(member: str, value: dict[str, Any]) -> bytes:
        return _sse({"jsonrpc": "2.0", "id": rpc_id, "result": {member: value}})

    def status(state: str, **more: Any) -> bytes:
        update = {"taskId": task_id, "contextId": context, "status": {"state": state, **more}}
        return event("statusUpdate", update)

    task = {"id": task_id, "contextId": context, "status": {"state": "TASK_STATE_SUBMITTED"}}
    events = [event("task", task), status("TASK_STATE_WORKING")]
    chunks = [" ".join(words[i : i + 4]) + " " for i in range(0, len(words), 4)]
    for number, chunk in enumerate(chunks):
        update: dict[str, Any] = {
            "taskId": task_id,
            "contextId": context,
            "artifact": {"artifactId": "answer", "parts": [{"text": chunk}]},
        }
        if number:
            update["append"] = True
        if number == len(chunks) - 1 and scenario != "clean_cut":
            update["lastChunk"] = True
        events.append(event("artifactUpdate", update))
    if scenario == "clean_cut":
        return events  # the body ends while the task is working
    if scenario == "provider_error":
        failure = {
            "messageId": f"msg-{task_id}",
            "role": "ROLE_AGENT",
            "parts": [{"text": "The agent failed: its model is unavailable."}],
        }
        return [*events, status("TASK_STATE_FAILED", message=failure)]
    if scenario == "incomplete":
        return [*events, status("TASK_STATE_CANCELED")]
    return [*events, status("TASK_STATE_COMPLETED")]
