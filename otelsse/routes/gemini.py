"""Google Gemini ``:streamGenerateContent?alt=sse`` (Gemini API and Vertex AI).

Terminal rule: there is no end marker; the stream is finished when every candidate seen has
carried a ``finishReason``, or when a chunk with no candidates blocks the prompt
(``promptFeedback.blockReason``). Sources: the Gemini API reference for ``GenerateContentResponse``
and ``FinishReason`` (https://ai.google.dev/api/generate-content), and googleapis/python-genai
``google/genai/types.py`` (``FinishReason``, ``BlockedReason``). ``STOP`` is the only success,
also after a function call. A ``{"error": ...}`` payload is a provider error. Function calls
arrive whole, with ``args`` already an object.

Strict mode's error event (``strict_error_event``): a chunk holding Google's error object,
``{"error": {"code": 500, "message", "status": "INTERNAL", "details": [ErrorInfo]}}`` (the Gemini
API's error codes, https://ai.google.dev/gemini-api/docs/troubleshooting: 500 ``INTERNAL``, "an
unexpected error occurred on Google's side"; the shape and ``google.rpc.ErrorInfo``, whose
``reason`` carries the code: https://google.aip.dev/193). The official SDKs raise on a chunk
that is an error: googleapis/python-genai ``google/genai/_api_client.py``
``BaseApiClient.request_streamed`` (``if chunk_dump.startswith('{"error":')``: ``error`` must be
the first key, then ``errors.APIError.raise_error(...)``, a ``ServerError`` for 500) and
googleapis/js-genai ``src/_api_client.ts`` ``processStreamResponse`` (``if ('error' in
chunkJson)``, then ``throw new ApiError(...)``); this route judges it ``provider_error``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._core.state import StreamState
from ._base import CHUNK, Redaction, Request, Route, error_info, handles, sse_event

__all__ = ["GeminiRoute"]


class GeminiRoute(Route):
    name: ClassVar[str] = "gemini.generate_content"
    provider: ClassVar[str | None] = "gcp.gemini"
    operation: ClassVar[str | None] = "generate_content"
    success_stops: ClassVar[frozenset[str]] = frozenset({"STOP"})
    example_request: ClassVar[tuple[str, str] | None] = (
        "POST",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    )
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"finishReason", "blockReason", "role", "modelVersion"}),
        errors=frozenset({"status", "code"}),
        ids=frozenset({"id", "responseId"}),
        numbers=frozenset({"index"}),
        usage=frozenset({"usageMetadata"}),
        opaque=frozenset({"args"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith(":streamGenerateContent")

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return "alt=sse" in request.query

    @classmethod
    def url_model(cls, request: Request) -> str | None:
        # .../models/{model}:streamGenerateContent (tunedModels/{id} for a tuned one)
        head = request.path.rpartition(":")[0]
        model = head.rpartition("/")[2]
        return model or None

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        return "candidates" in payload or "usageMetadata" in payload or "promptFeedback" in payload

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        # Google's error object, ``error`` its first key (the module docstring cites why).
        details = [error_info(code)]
        error = {"code": 500, "message": message, "status": "INTERNAL", "details": details}
        return sse_event({"error": error})

    def __init__(self) -> None:
        super().__init__()
        # candidate index -> its finishReason, None while still open
        self._finish: dict[int, str | None] = {}

    @handles(CHUNK)
    def _on_chunk(self, obj: dict[str, Any], state: StreamState) -> None:
        error = obj.get("error")
        if error:
            self.ended = True
            state.provider_error(
                (error.get("status") or error.get("code")) if type(error) is dict else None
            )
            return
        if state.response_model is None:
            state.identify(obj.get("modelVersion"), obj.get("responseId"))
        usage = obj.get("usageMetadata")
        if usage:
            state.usage(usage.get("promptTokenCount"), usage.get("candidatesTokenCount"))
        candidates = obj.get("candidates")
        if candidates:
            for candidate in candidates:
                self._on_candidate(candidate, state)
            if None not in self._finish.values():
                self.ended = True
                state.terminal()
            return
        blocked = (obj.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            self.ended = True
            state.stop(str(blocked), False)
            state.terminal()

    def _on_candidate(self, candidate: dict[str, Any], state: StreamState) -> None:
        index = candidate.get("index", 0)
        finished = self._finish.get(index) is not None
        if finished:
            state.anomaly("event_after_finish_reason")
        elif index not in self._finish:
            if not state.open_part(index):
                return
            self._finish[index] = None
        content = candidate.get("content")
        if content:
            for part in content.get("parts") or ():
                text = part.get("text")
                call = part.get("functionCall")
                if finished and (text or call):
                    state.protocol_violation("content_after_finish")
                if text:
                    state.text(index, text, reasoning=part.get("thought") is True)
                if call:
                    tool = state.open_tool(call.get("id"), call.get("name"))
                    args = call.get("args")
                    state.close_tool(tool, parsed={} if args is None else args)
        reason = candidate.get("finishReason")
        if reason and not finished:
            if type(reason) is not str:
                state.payload_invalid()
                return
            self._finish[index] = reason
            state.stop(reason, reason in self.success_stops)
