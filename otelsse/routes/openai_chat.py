"""OpenAI Chat Completions, and every OpenAI-compatible server that speaks the same contract.

Terminal rule: every choice has had a non-null ``finish_reason``, then ``data: [DONE]`` (OpenAI API
reference, "Create chat completion", ``stream``: "data-only server-sent events ... terminated by a
``data: [DONE]`` message", https://platform.openai.com/docs/api-reference/chat/create; the chunk's
shape: ``CreateChatCompletionStreamResponse`` in openai/openai-openapi ``openapi.yaml``). A body
that ends cleanly after every choice finished but without ``[DONE]`` is ``terminal_missing``: not
``complete`` (a cut just before ``[DONE]`` is the same bytes), not ``truncated`` (the answer is
whole); a host profile for a server known to end so (``no_done``) makes it ``complete``. An
``error`` object anywhere, or ``event: error``, is a provider error even when ``[DONE]`` follows.
Tool-call fragments are keyed by ``(choice index, tool_calls[].index)``; ``id`` and ``name`` come
on the first fragment only. Servers that leave out the index, or reuse index 0 for parallel calls
(Ollama, Gemini's compatibility layer), are handled by the id: a fragment with a new id starts a
new call. A non-empty delta for a choice that already finished is a protocol error; ``content`` may
be a list of typed parts (Mistral); ``refusal`` text is kept apart from the answer.

Strict mode's error event (``strict_error_event``): a data-only chunk holding OpenAI's error
object, ``{"error": {"message", "type", "param", "code"}}`` (the error object of "Error codes",
https://platform.openai.com/docs/guides/error-codes, as the API sends it in a stream), with
``type`` ``server_error``. The official SDKs raise on any chunk whose ``error`` is set:
openai-python ``src/openai/_streaming.py`` ``Stream.__stream__`` (``if is_mapping(data) and
data.get("error"): raise APIError(...)``) and openai-node ``src/core/streaming.ts``
``Stream.fromSSEResponse`` (``if (data && data.error) throw new APIError(...)``); this route
judges it ``provider_error``.

Host profiles (``no_done``, ``no_finish_reason``) bend the terminal rule for the servers that
document doing so; docs/users/gateways.md lists what each OpenAI-compatible service sends and why.

Speed: a chunk is read first through its typed shape (``_Chunk``, with msgspec) straight into
the state; any text that is not exactly that shape is read by ``loads`` and ``_on_chunk``, which
stay the definition. A stream whose chunks keep missing the shape (a gateway's own keys) stops
trying it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core import json as core_json
from .._core.events import SSEEvent
from .._core.json import JSONDecodeError, TypedShape, loads, typed_decoder
from .._core.state import StreamState, ToolCall
from ._base import CHUNK, Redaction, Request, Route, handles, sse_event

__all__ = ["OPENAI_CHAT_PROFILES", "OpenAIChatRoute"]

_DEPRECATED_FUNCTION_CALL = -1  # tool index used for the legacy single ``function_call`` delta
_UNSEEN = object()  # a choice index not seen before (its finish reason is None while open)
# Chunks in a row that miss the typed shape before a stream stops trying it.
_TYPED_MISSES = 4

# A value the route never reads: any JSON but a float (which msgspec would not read in full),
# three levels deep at most. Keys the shapes below do not name leave a chunk to ``loads``.
_Scalar = None | bool | int | str
_Nested = _Scalar | list[_Scalar] | dict[str, _Scalar]
_Ignored = _Scalar | list[_Nested] | dict[str, _Nested]


class _Function(TypedShape):
    name: str | None = None
    arguments: str | None = None


class _ToolFragment(TypedShape):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None
    type: _Ignored = None


class _Delta(TypedShape):
    content: str | None = None  # a list of parts (Mistral) is left to the generic reading
    tool_calls: list[_ToolFragment] | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    function_call: None = None  # the legacy call, likewise
    role: _Ignored = None
    channel: _Ignored = None  # Groq
    reasoning_details: _Ignored = None  # OpenRouter


class _Choice(TypedShape):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: _Ignored = None
    native_finish_reason: _Ignored = None  # OpenRouter
    content_filter_results: _Ignored = None  # Azure
    stop_reason: _Ignored = None  # vLLM


class _Usage(TypedShape):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: _Ignored = None
    prompt_tokens_details: _Ignored = None
    completion_tokens_details: _Ignored = None


class _Chunk(TypedShape):
    """A chunk as the route reads it: every key it may hold, each of the type read without
    a question (an ``error`` object, say, is left to the generic reading)."""

    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: None = None
    object: _Ignored = None
    created: _Ignored = None
    service_tier: _Ignored = None
    system_fingerprint: _Ignored = None
    obfuscation: _Ignored = None
    provider: _Ignored = None  # OpenRouter
    x_groq: _Ignored = None  # Groq
    p: _Ignored = None  # Mistral's padding


_read_chunk = typed_decoder(_Chunk)
# The generic methods the typed reading stands in for: a subclass that overrides one of them
# reads every chunk through it.
_TYPED_STANDS_FOR = ("_on_delta", "_on_delta_rest", "_after_finish")


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
    operation: ClassVar[str | None] = "chat"
    # "eos": Together's name for a natural end (docs/users/gateways.md).
    success_stops: ClassVar[frozenset[str]] = frozenset(
        {"stop", "tool_calls", "function_call", "eos"}
    )
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1/chat/completions")
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"object", "type", "role", "finish_reason", "model"}),
        errors=frozenset({"code"}),
        ids=frozenset({"id"}),
        numbers=frozenset({"index"}),
        usage=frozenset({"usage"}),
        fragments=frozenset({"arguments"}),
        arguments=frozenset({"arguments"}),
    )
    require_done: ClassVar[bool] = True
    allow_null_finish_reason: ClassVar[bool] = False

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/chat/completions")

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        return payload.get("object") == "chat.completion.chunk" or "choices" in payload

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        # OpenAI's error object as a chunk (the module docstring cites the docs and SDKs).
        error = {"message": message, "type": "server_error", "param": None, "code": code}
        return sse_event({"error": error})

    def __init__(self) -> None:
        super().__init__()
        # choice index -> its finish reason, None while the choice is still open
        self._finish: dict[int, str | None] = {}
        # choice index -> tool index -> the call currently using that index
        self._by_index: dict[int, dict[int, ToolCall]] = {}
        # choice index -> every call opened for that choice, closed at its finish_reason
        self._open: dict[int, list[ToolCall]] = {}
        cls, base = type(self), OpenAIChatRoute
        # A flag, not the reader itself: a monitor, and so its route, can be pickled.
        self._typed = (
            _read_chunk is not None
            and core_json.typed_decoding
            and cls.handlers.get(CHUNK) is base._on_chunk
            and all(getattr(cls, name) is getattr(base, name) for name in _TYPED_STANDS_FOR)
        )
        self._typed_misses = 0

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if self._typed and event.event != "error":  # _typed: the reader exists
            chunk = _read_chunk(event.data)  # type: ignore[misc]
            if chunk is not None:
                self._typed_misses = 0
                self._on_typed_chunk(chunk, state)
                return None
            self._typed_misses += 1
            if self._typed_misses == _TYPED_MISSES:
                self._typed = False
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
                finished = finish.get(index, _UNSEEN)
                if finished is _UNSEEN:
                    if not state.open_part(index):
                        continue
                    finish[index] = finished = None
                delta = choice_get("delta")
                if delta:
                    self._on_delta(index, finished, delta, state)
                reason = choice_get("finish_reason")
                if reason is not None:
                    self._on_finish(index, reason, state)
        usage = get("usage")
        if usage:
            state.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))

    def _on_delta(
        self, index: int, finished: object, delta: dict[str, Any], state: StreamState
    ) -> None:
        """One choice's non-empty delta (``finished``: the choice's finish reason so far)."""
        if finished is not None:
            self._after_finish(delta, state)
        content = delta.get("content")
        if content is None or len(delta) > 1:
            self._on_delta_rest(index, delta, state)
        if content:
            if type(content) is not str:
                self._on_parts(index, content, state)
            else:
                state.text(index, content)

    def _on_typed_chunk(self, chunk: _Chunk, state: StreamState) -> None:
        """``_on_chunk`` for a chunk read through its typed shape: each value is of the type the
        generic reading takes without a question, so only the hot text delta is read here; any
        other delta goes to ``_on_delta`` as the dict it was."""
        if state.response_model is None:
            state.identify(chunk.model, chunk.id)
        choices = chunk.choices
        if choices:
            finish = self._finish
            for choice in choices:
                index = choice.index
                finished = finish.get(index, _UNSEEN)
                if finished is _UNSEEN:
                    if not state.open_part(index):
                        continue
                    finish[index] = finished = None
                delta = choice.delta
                if delta is not None:
                    if finished is None and not (
                        delta.tool_calls or delta.refusal or delta.reasoning_content
                        or delta.reasoning
                    ):  # fmt: skip
                        if delta.content:
                            state.text(index, delta.content)
                    else:
                        self._on_delta(index, finished, _delta_dict(delta), state)
                reason = choice.finish_reason
                if reason is not None:
                    self._on_finish(index, reason, state)
        usage = chunk.usage
        if usage is not None:
            state.usage(usage.prompt_tokens, usage.completion_tokens)

    @staticmethod
    def _after_finish(delta: dict[str, Any], state: StreamState) -> None:
        """A delta for a choice that already finished: only an empty one is allowed (gateways
        repeat the finish chunk, with an empty delta, beside the usage)."""
        if any(delta.get(key) for key in ("content", "tool_calls", "function_call", "refusal")):
            state.protocol_violation("content_after_finish")

    @staticmethod
    def _on_parts(index: int, parts: Any, state: StreamState) -> None:
        """``content`` as a list of typed parts (Mistral's reasoning models): ``text`` parts are
        the answer, ``thinking`` parts (a string or a list of text parts) reasoning."""
        if type(parts) is not list:
            state.payload_invalid()
            return
        for part in parts:
            kind = part.get("type")
            if kind == "text":
                state.text(index, part.get("text"))
            elif kind == "thinking":
                thinking = part.get("thinking")
                pieces: Any = [thinking] if type(thinking) is str else thinking
                for piece in pieces:
                    text = piece if type(piece) is str else piece.get("text")
                    state.text(index, text, reasoning=True)
            else:
                state.anomaly("other_content_part")  # references, images: not text

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
            state.refusal(index, refusal)
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
            name = function.get("name")
            if not (call_id is None or type(call_id) is str) or not (
                name is None or type(name) is str
            ):
                state.payload_invalid()  # as open_tool judges them
            else:
                call.call_id = call.call_id or call_id
                call.name = call.name or name
        arguments = function.get("arguments")
        if arguments:
            state.tool_args(call, arguments)

    def _on_finish(self, choice: int, reason: Any, state: StreamState) -> None:
        if type(reason) is not str:
            state.payload_invalid()
            return
        if not reason:
            return  # old Ollama sends "" on every chunk: no finish yet
        if reason == "error":
            state.provider_error(None)  # Mistral, vLLM and OpenRouter end a failure this way
        previous = self._finish.get(choice)
        if previous is not None:
            state.anomaly("repeated_finish_reason")  # OpenRouter repeats it: idempotent
            if reason != previous:
                state.stop(reason, reason in self.success_stops)  # the worse one wins
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
        if not self.ended and self._all_finished():
            # Every choice finished, then the body ended without ``[DONE]``: the answer is
            # whole, its end marker missing (``terminal_missing``), unless the server is known
            # to end so (``require_done`` False: a host profile).
            if self.require_done:
                state.answer_finished()
            else:
                state.terminal()


def _delta_dict(delta: _Delta) -> dict[str, Any]:
    """A typed delta as the keys ``_on_delta`` reads (an absent key and null read alike)."""
    tool_calls = delta.tool_calls
    return {
        "content": delta.content,
        "tool_calls": None
        if tool_calls is None
        else [_fragment_dict(fragment) for fragment in tool_calls],
        "refusal": delta.refusal,
        "reasoning_content": delta.reasoning_content,
        "reasoning": delta.reasoning,
    }


def _fragment_dict(fragment: _ToolFragment) -> dict[str, Any]:
    function = fragment.function
    return {
        "index": fragment.index,
        "id": fragment.id,
        "function": None
        if function is None
        else {"name": function.name, "arguments": function.arguments},
    }


class _NoDone(OpenAIChatRoute):
    """Servers that never send ``data: [DONE]``: a clean EOF after every choice finished is
    the end. Hosts and sources: docs/users/gateways.md."""

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
    Hosts and sources: docs/users/gateways.md."""

    profile: ClassVar[str | None] = "no_finish_reason"
    hosts: ClassVar[tuple[str, ...]] = (".snowflakecomputing.com",)
    allow_null_finish_reason: ClassVar[bool] = True


#: The built-in host profiles of this contract.
OPENAI_CHAT_PROFILES: tuple[type[OpenAIChatRoute], ...] = (_NoDone, _NoFinishReason)
