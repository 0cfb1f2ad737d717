"""OpenAI Chat Completions, and every OpenAI-compatible server that speaks the same contract.

Terminal rule (reference/provider-contracts.md §2.3): every choice has had a non-null
``finish_reason``, then ``data: [DONE]``. An ``error`` object anywhere, or ``event: error``, is a
provider error even when ``[DONE]`` follows. Tool-call fragments are keyed by
``(choice index, tool_calls[].index)``; ``id`` and ``name`` come on the first fragment only.
Servers that leave out the index, or reuse index 0 for parallel calls (Ollama, Gemini's
compatibility layer), are handled by the id: a fragment with a new id starts a new call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.events import SSEEvent
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState, ToolCall
from ._base import CHUNK, Request, Route, handles

__all__ = ["OPENAI_CHAT_PROFILES", "OpenAIChatRoute"]

_DEPRECATED_FUNCTION_CALL = -1  # tool index used for the legacy single ``function_call`` delta


class OpenAIChatRoute(Route):
    """Chat Completions chunks (``POST .../chat/completions``).

    Subclass and set these to describe a compatible server that bends the contract:

    Attributes:
        require_done: the server ends with ``data: [DONE]`` (api.openai.com does); when False,
            a clean EOF after every choice finished is complete (Writer and some gateways).
        allow_null_finish_reason: accept ``[DONE]`` on a choice that never sent a finish
            reason as a complete answer (some compatible servers do this on success).
    """

    name: ClassVar[str] = "openai.chat_completions"
    provider: ClassVar[str | None] = "openai"
    success_stops: ClassVar[frozenset[str]] = frozenset({"stop", "tool_calls", "function_call"})
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1/chat/completions")
    require_done: ClassVar[bool] = True
    allow_null_finish_reason: ClassVar[bool] = False

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/chat/completions")

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("object") == "chat.completion.chunk" or "choices" in payload

    def __init__(self) -> None:
        super().__init__()
        # choice index -> its finish reason, None while the choice is still open
        self._finish: dict[int, str | None] = {}
        # choice index -> tool index -> the call currently using that index
        self._by_index: dict[int, dict[int, ToolCall]] = {}
        # choice index -> every call opened for that choice, closed at its finish_reason
        self._open: dict[int, list[ToolCall]] = {}

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        try:
            obj = loads(event.data)
        except JSONDecodeError:
            # ``[DONE]`` is not JSON: testing for it only here keeps it off the hot path.
            if event.data.startswith("[DONE]"):
                self._on_done(state)
                return None
            obj = None  # not an object: judged below, after an ``event: error`` is noted
        if event.event == "error":
            state.provider_error(None)
        if type(obj) is not dict:
            state.payload_invalid()
            return None
        return CHUNK, obj

    @handles(CHUNK)
    def _on_chunk(self, obj: dict[str, Any], state: StreamState) -> None:
        get = obj.get
        error = get("error")
        if error:
            code = (error.get("code") or error.get("type")) if type(error) is dict else None
            state.provider_error(code)
        if state.response_model is None:
            state.identify(get("model"), get("id"))
        choices = get("choices")
        if choices:
            finish = self._finish
            for choice in choices:
                choice_get = choice.get
                index = choice_get("index", 0)
                if index not in finish:
                    finish[index] = None
                delta = choice_get("delta")
                if delta:
                    content = delta.get("content")
                    if content is None or len(delta) > 1:
                        self._on_delta_rest(index, delta, state)
                    if content and state.collect_text:
                        state.text(index, content)
                reason = choice_get("finish_reason")
                if reason is not None:
                    self._on_finish(index, reason, state)
        usage = get("usage")
        if usage:
            state.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))

    def _on_delta_rest(self, index: int, delta: dict[str, Any], state: StreamState) -> None:
        """Everything in a delta besides its text (rare next to the plain content deltas)."""
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            for fragment in tool_calls:
                self._on_tool_fragment(index, fragment.get("index"), fragment, state)
        legacy = delta.get("function_call")
        if legacy:
            legacy_call = {"function": legacy}
            self._on_tool_fragment(index, _DEPRECATED_FUNCTION_CALL, legacy_call, state)
        refusal = delta.get("refusal")
        if refusal:
            state.text(index, refusal)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and type(reasoning) is str:
            state.text(index, reasoning, reasoning=True)

    def _on_tool_fragment(
        self, choice: int, tool_index: int | None, fragment: dict[str, Any], state: StreamState
    ) -> None:
        function = fragment.get("function") or {}
        call_id = fragment.get("id")
        by_index = self._by_index.setdefault(choice, {})
        opened = self._open.setdefault(choice, [])
        if tool_index is None:
            # No index: a fragment with an id starts a call, one without continues the last.
            call = opened[-1] if opened and not call_id else None
        else:
            call = by_index.get(tool_index)
            if call is not None and call_id and call.call_id and call.call_id != call_id:
                state.anomaly("tool_index_reused")
                call = None
        if call is None:
            call = state.open_tool(call_id, function.get("name"))
            opened.append(call)
            if tool_index is not None:
                by_index[tool_index] = call
        else:
            # Some servers send the arguments before the name and id.
            call.call_id = call.call_id or call_id
            call.name = call.name or function.get("name")
        arguments = function.get("arguments")
        if arguments:
            state.tool_args(call, arguments)

    def _on_finish(self, choice: int, reason: Any, state: StreamState) -> None:
        if type(reason) is not str:
            state.payload_invalid()
            return
        if self._finish.get(choice) is not None:
            state.anomaly("repeated_finish_reason")  # OpenRouter repeats it: idempotent
            return
        self._finish[choice] = reason
        self._close_calls(choice, state)
        state.stop(reason, reason in self.success_stops)

    def _close_calls(self, choice: int, state: StreamState) -> None:
        for call in self._open.pop(choice, ()):
            state.close_tool(call)
        self._by_index.pop(choice, None)

    def _all_finished(self) -> bool:
        return bool(self._finish) and None not in self._finish.values()

    def _on_done(self, state: StreamState) -> None:
        self.ended = True
        if self._all_finished():
            state.terminal()
        elif self.allow_null_finish_reason and not state.provider_error_seen:
            for choice in list(self._open):
                self._close_calls(choice, state)
            state.terminal()
        else:
            state.anomaly("done_without_finish_reason")

    def on_close(self, state: StreamState) -> None:
        if not self.ended and not self.require_done and self._all_finished():
            state.terminal()


class _NoDone(OpenAIChatRoute):
    """Servers that never send ``data: [DONE]``: a clean EOF after every choice finished is
    the end. Hosts and sources: docs/gateways.md."""

    profile: ClassVar[str | None] = "no_done"
    hosts: ClassVar[tuple[str, ...]] = ("api.writer.com",)
    require_done: ClassVar[bool] = False

    @classmethod
    def matches(cls, request: Request) -> bool:
        # Writer's chat endpoint is POST /v1/chat.
        return request.method == "POST" and (
            request.path.endswith("/chat/completions") or request.path.endswith("/v1/chat")
        )


class _NoFinishReason(OpenAIChatRoute):
    """Servers that never send a ``finish_reason``: ``[DONE]`` alone ends the answer.
    Hosts and sources: docs/gateways.md."""

    profile: ClassVar[str | None] = "no_finish_reason"
    hosts: ClassVar[tuple[str, ...]] = (".snowflakecomputing.com",)
    allow_null_finish_reason: ClassVar[bool] = True


#: The built-in host profiles of this contract.
OPENAI_CHAT_PROFILES: tuple[type[OpenAIChatRoute], ...] = (_NoDone, _NoFinishReason)
