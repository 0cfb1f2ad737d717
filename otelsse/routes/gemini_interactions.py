"""Google Gemini Interactions API: ``POST /{version}/interactions`` with ``"stream": true``, and
``GET /{version}/interactions/{id}?stream=true`` that streams (or resumes, with
``last_event_id``) an existing interaction. Vertex AI serves the same API under
``/{version}/projects/{project}/locations/{location}/interactions``.

Sources: googleapis/python-genai (PyPI ``google-genai``) 3.6.1, ``google/genai/_gaos/
interactions.py`` (``Interactions.create``: path ``/{api_version}/interactions``, the body's
``stream`` flag, ``Accept: text/event-stream``; ``Interactions.get``: the same path with the id,
query ``stream`` and ``last_event_id``), ``google/genai/_gaos/google_genai.py``
(``get_google_genai_api_version``: Vertex's project and location in the path),
``google/genai/_gaos/utils/eventstreaming.py`` (the SDK's reader: it decodes each event's
``data`` as one JSON object, ignores ``event:`` names, and stops at the data ``[DONE]``) and the
event union ``google/genai/_gaos/types/interactions/interactionsseevent.py``, which dispatches on
the data's ``event_type``; recordings of the real API in Arize-ai/openinference
``python/instrumentation/openinference-instrumentation-google-genai/tests/cassettes/
test_interactions_instrumentation/`` (tests/fixtures/real/SOURCES.md).

Event flow: ``interaction.created`` (the interaction's ``id``, ``status``, ``model``),
``interaction.status_update`` (``interaction_id``, ``status``), then per step, keyed by
``index``, ``step.start`` (the ``step`` with its ``type``), any number of ``step.delta``
(``delta.type``: ``text``, ``thought_summary``, ``thought_signature``, ``arguments_delta``, media
and tool deltas), ``step.stop``; then ``interaction.completed`` (the interaction with its final
``status`` and ``usage``), then ``event: done`` / ``data: [DONE]``. Every ``event:`` line names
the data's ``event_type``. Before google-genai 2.0.0 (2026-05-07, CHANGELOG "Add steps for
interactions", "Rename SSE events to interaction.created and interaction.completed") the same
flow was ``interaction.start``, ``content.start`` / ``content.delta`` / ``content.stop`` (the
part under ``content``) and ``interaction.complete`` (google-genai 1.75.0
``google/genai/_interactions/types/interaction_sse_event.py``; the openinference recordings
before 2026-05 show it); this route reads both. Any event may carry ``metadata.total_usage``
(``stepdeltametadata.py``, "metadata accompanying ANY streamed event"; ``metadata.usage`` in the
recordings): a snapshot of the interaction's cumulative token counts, as is ``usage`` on
``interaction.*``, ``interaction.status_update`` and ``step.stop``. ``total_input_tokens`` and
``total_output_tokens`` (thought tokens apart, as ``gemini.generate_content`` counts them) are
the usage reported.

Terminal rule: ``interaction.completed`` ("No more input can be sent to the Interaction after
this": ``interactioncompletedevent.py``), judged by its ``interaction.status``:

- ``completed`` is success, and so is ``requires_action``: the model asks the client to run the
  function calls it made and send their results back (``previous_interaction_id`` and
  ``function_result`` input); the turn is whole and the protocol waits for the client, as after
  OpenAI's ``tool_calls`` or Anthropic's ``tool_use`` (docs/users/outcomes.md, "Paused states").
  The SDK's own test streams one such interaction (google-genai 3.6.1
  ``google/genai/tests/interactions/test_automatic_continuation.py``,
  ``test_stream_automatic_continuation_stops_on_requires_action_or_missing_token``).
- ``failed`` is a provider error (its code, the first of ``interaction.errors``, when sent).
- Every other status is a well-formed end the caller cannot take as finished: ``incomplete``
  (for example ``max_output_tokens``), ``budget_exceeded``, ``cancelled`` (someone cancelled
  the interaction, ``POST .../interactions/{id}/cancel``: a server-side end, not the
  application's abandoned read), and ``requires_continuation`` (the per-request decode limit was
  reached and the SDK resumes with a new request, its ``continuation_token``: like Anthropic's
  ``pause_turn``, the answer is not whole; google-genai 3.6.1 ``_interactions_continuation.py``).
  They are ``incomplete``, the status their stop reason.

``data: [DONE]`` after the terminal is the stream's end marker (the SDK's sentinel), accepted
once; before it, the server ended a stream whose interaction never completed: a protocol
error (the SDK stops reading there). An ``error`` event (``{"error": {"code", "message"}}``,
``errorevent.py``) is a provider error; the SDK yields it like any event and raises nothing
(the SDK's test above, and ``test_stream_automatic_continuation_resumes_on_dead_connection_
with_last_token``), so this route declares no strict-mode error event: the proxy's strict mode
cuts such a stream instead, which the SDK raises on (``APIConnectionError``). A
``status_update`` saying ``failed`` is a provider error as well.

Tool calls: a ``function_call`` step (``id``, ``name``) is a call the application runs; its
arguments stream as ``arguments_delta`` fragments (``argumentsdelta.py``: ``arguments``;
``partial_arguments`` in google-genai 2.0.0 ``_interactions/types/step_delta.py``), or arrive
whole as the step's ``arguments`` object (``functioncallstep.py``) or, before steps, a
``function_call`` delta (google-genai 1.75.0 ``content_delta.py``). Every other ``*_call`` step
(``google_search_call``, ``code_execution_call``, ``mcp_server_tool_call``, ...) is run by the
provider itself. A call closes at its ``step.stop``. Under a success status every step must be
stopped. A stream resumed with ``last_event_id`` may begin inside a step: a delta or a stop
whose step never started here is admitted (a ``step.stop`` is then an anomaly), except argument
fragments without their call, which cannot be judged (a protocol error).
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import parse_qs

from .._core.events import SSEEvent
from .._core.state import FUNCTION, SERVER, StreamState, ToolCall
from ._base import Redaction, Request, Route, handles, typed_object

__all__ = ["GeminiInteractionsRoute"]

#: The stream's end marker (the SDK's ``sentinel="[DONE]"``).
_DONE = "[DONE]"
#: The step type of a call the application runs; every other ``*_call`` step is the provider's.
_FUNCTION_CALL = "function_call"
_CALL_SUFFIX = "_call"
# The event types that prove this contract when sniffing: ``event_type`` (and the SSE name) is
# the contract's own key. ``content.*`` are only trusted in the data, under that key.
_SNIFFED_EVENTS = frozenset(
    {
        "interaction.created",
        "interaction.status_update",
        "interaction.completed",
        "step.start",
        "step.delta",
        "step.stop",
        "interaction.start",
        "interaction.complete",
    }
)
_SNIFFED_TYPES = _SNIFFED_EVENTS | {"content.start", "content.delta", "content.stop", "error"}


def _usage(usage: Any, state: StreamState) -> None:
    """A cumulative usage snapshot (``Usage``), where there is one."""
    if type(usage) is dict:
        state.usage(usage.get("total_input_tokens"), usage.get("total_output_tokens"))


def _first_error_code(errors: Any) -> Any:
    """The code of the first of a failed interaction's ``errors``, else None."""
    if type(errors) is list and errors and type(errors[0]) is dict:
        return errors[0].get("code")
    return None


class GeminiInteractionsRoute(Route):
    name: ClassVar[str] = "gemini.interactions"
    provider: ClassVar[str | None] = "gcp.gemini"
    # A conversational turn (input turns, ``previous_interaction_id``, tool calls), the GenAI
    # conventions' ``chat`` ("Chat completion operation"), as they report OpenAI's Responses
    # API, this API's counterpart (open-telemetry/semantic-conventions docs/gen-ai/openai.md:
    # ``gen_ai.operation.name`` ``chat`` with ``openai.api.type`` ``responses``);
    # ``generate_content`` names Gemini's ``models.generateContent`` method.
    operation: ClassVar[str | None] = "chat"
    success_stops: ClassVar[frozenset[str]] = frozenset({"completed", "requires_action"})
    proves_item_end: ClassVar[bool] = True  # a call's step.stop
    example_request: ClassVar[tuple[str, str] | None] = ("POST", "/v1beta/interactions")
    redaction: ClassVar[Redaction | None] = Redaction(
        words=frozenset({"event_type", "type", "status", "model", "object", "role"}),
        errors=frozenset({"code"}),
        ids=frozenset({"id", "interaction_id", "event_id", "previous_interaction_id"}),
        numbers=frozenset({"index"}),
        usage=frozenset({"usage", "total_usage"}),
        fragments=frozenset({"arguments", "partial_arguments"}),
        # a call's arguments object (a step's, or a whole call's delta)
        opaque=frozenset({"arguments"}),
    )

    @classmethod
    def matches(cls, request: Request) -> bool:
        path = request.path
        if request.method == "POST":
            return path.endswith("/interactions")
        # Streaming or resuming an interaction: GET .../interactions/{id}?stream=true
        head, _, interaction_id = path.rpartition("/")
        return (
            request.method == "GET"
            and head.endswith("/interactions")
            and bool(interaction_id)
            and parse_qs(request.query).get("stream", [""])[0].lower() == "true"
        )

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        return request.method == "GET"  # matched only with ``stream=true``

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        return event.event in _SNIFFED_EVENTS

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        kind = payload.get("event_type")
        return type(kind) is str and kind in _SNIFFED_TYPES

    def __init__(self) -> None:
        super().__init__()
        self._open: set[int] = set()
        self._calls: dict[int, ToolCall] = {}
        # step index -> a call's whole arguments object, sent in a delta
        self._whole: dict[int, Any] = {}
        self._done_seen = False

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        if event.data == _DONE:
            # The end marker before the interaction completed: the SDK stops reading here.
            self.ended = self._done_seen = True
            state.protocol_violation("done_before_completed")
            return None
        found = typed_object(event, state, "event_type")
        if found is None:
            return None
        kind, obj = found
        metadata = obj.get("metadata")
        if type(metadata) is dict:
            _usage(metadata.get("total_usage", metadata.get("usage")), state)
        return kind, obj

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        if event.data == _DONE and not self._done_seen:
            self._done_seen = True
            return
        state.anomaly("event_after_terminal")

    # -- the interaction -----------------------------------------------------------------------

    @handles("interaction.created", "interaction.start")
    def _on_created(self, obj: dict[str, Any], state: StreamState) -> None:
        interaction = obj.get("interaction")
        if type(interaction) is not dict:
            state.payload_invalid()
            return
        state.identify(interaction.get("model"), interaction.get("id"))
        _usage(interaction.get("usage"), state)

    @handles("interaction.status_update")
    def _on_status_update(self, obj: dict[str, Any], state: StreamState) -> None:
        status = obj.get("status")
        if type(status) is not str:
            state.payload_invalid()
            return
        state.identify(None, obj.get("interaction_id"))  # a resumed stream starts here
        if status == "failed":
            state.provider_error(None)
        _usage(obj.get("usage"), state)

    @handles("interaction.completed", "interaction.complete")
    def _on_completed(self, obj: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        interaction = obj.get("interaction")
        if type(interaction) is not dict:
            state.payload_invalid()
            return
        status = interaction.get("status")
        if type(status) is not str or not status:
            state.payload_invalid()
            return
        state.identify(interaction.get("model"), interaction.get("id"))
        _usage(interaction.get("usage"), state)
        if status == "failed":
            state.provider_error(_first_error_code(interaction.get("errors")))
        state.final_stop(status, status in self.success_stops, open_parts=bool(self._open))
        state.terminal()

    @handles("error")
    def _on_error(self, obj: dict[str, Any], state: StreamState) -> None:
        self.ended = True
        error = obj.get("error")
        state.provider_error(error.get("code") if type(error) is dict else None)

    # -- steps (``content.*`` before google-genai 2.0.0) -----------------------------------------

    @handles("step.start")
    def _on_step_start(self, obj: dict[str, Any], state: StreamState) -> None:
        self._start(obj.get("index"), obj.get("step"), state)

    @handles("content.start")
    def _on_content_start(self, obj: dict[str, Any], state: StreamState) -> None:
        self._start(obj.get("index"), obj.get("content"), state)

    def _start(self, index: Any, step: Any, state: StreamState) -> None:
        if type(index) is not int or type(step) is not dict:
            state.payload_invalid()
            return
        if index in self._open:
            state.protocol_violation("step_reopened")
            return
        kind = step.get("type")
        call_kind = kind if type(kind) is str and kind.endswith(_CALL_SUFFIX) else None
        arguments = None if call_kind is None else step.get("arguments")
        if not (arguments is None or type(arguments) is dict):
            state.payload_invalid()
            return
        if not state.open_part(index):
            return
        self._open.add(index)
        if call_kind is not None:
            self._open_call(index, call_kind, step, {} if arguments is None else arguments, state)

    def _open_call(
        self, index: int, kind: str, item: dict[str, Any], empty_means: Any, state: StreamState
    ) -> None:
        self._calls[index] = state.open_tool(
            item.get("id"),
            item.get("name", kind),
            empty_means,
            FUNCTION if kind == _FUNCTION_CALL else SERVER,
        )

    @handles("step.delta", "content.delta")
    def _on_delta(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj.get("index")
        delta = obj.get("delta")
        if type(index) is not int or type(delta) is not dict:
            state.payload_invalid()
            return
        if index not in self._open:
            # A stream resumed with last_event_id may begin inside a step.
            if not state.open_part(index):
                return
            self._open.add(index)
        kind = delta.get("type")
        if kind == "text":
            state.text(index, delta.get("text"))
        elif kind == "thought_summary":
            content = delta.get("content")
            if type(content) is dict and content.get("type") == "text":
                state.text(index, content.get("text"), reasoning=True)
        elif kind == "arguments_delta":
            call = self._calls.get(index)
            fragment = delta.get("arguments", delta.get("partial_arguments"))
            if call is None or call.kind != FUNCTION:
                state.protocol_violation("arguments_without_call")
            elif fragment is not None:
                state.tool_args(call, fragment)
        elif type(kind) is str and kind.endswith(_CALL_SUFFIX) and "arguments" in delta:
            self._on_whole_call(index, kind, delta, state)

    def _on_whole_call(
        self, index: int, kind: str, delta: dict[str, Any], state: StreamState
    ) -> None:
        """A call sent whole in one delta (its arguments an object)."""
        arguments = delta["arguments"]
        if type(arguments) is not dict:
            state.payload_invalid()
            return
        call = self._calls.get(index)
        if call is None:
            self._open_call(index, kind, delta, {}, state)
        else:
            # A start that named only the part's type: the whole call names itself.
            call_id, name = delta.get("id"), delta.get("name")
            if call.call_id is None and type(call_id) is str:
                call.call_id = call_id
            if call.name in (None, kind) and type(name) is str:
                call.name = name
        self._whole[index] = arguments

    @handles("step.stop", "content.stop")
    def _on_stop(self, obj: dict[str, Any], state: StreamState) -> None:
        index = obj.get("index")
        if type(index) is not int:
            state.payload_invalid()
            return
        if index not in self._open:
            state.anomaly("step_stop_without_start")  # a resumed stream began inside it
            return
        self._open.discard(index)
        state.close_part()
        call = self._calls.pop(index, None)
        if call is not None:
            state.close_tool(call, parsed=self._whole.pop(index, None))
        _usage(obj.get("usage"), state)
