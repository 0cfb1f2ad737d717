"""``Route``: one provider contract, declared in one class.

A route class declares everything the rest of otelsse needs to know about its contract, and an
instance reads one stream:

- **who it is**: ``name`` (the ``otelsse.route`` value), ``provider`` (``gen_ai.provider.name``),
  ``success_stops``, ``has_terminal``, and an ``example_request`` for documentation and demos;
- **how its bytes are framed**: ``media_type``, the response media type its streams have, whose
  framer (``_core.framers.FRAMERS``) turns the body into events (SSE, AWS's event stream);
- **its host profiles**: a subclass that sets ``profile`` (and usually ``hosts``) is a named
  variant of the same contract for servers that bend it on purpose, chosen by the request's host
  (``name:profile`` names it wherever a route name is accepted);
- **which requests it serves**: ``matches(request)``, and ``always_streams(request)`` for requests
  whose URL alone asks for SSE (so the instrumentation expects a stream without reading a body);
  a protocol served at any path (JSON-RPC) matches on the ``Request``'s ``rpc_method`` and on the
  headers it declares in ``request_headers``; ``labels(request)`` are its low-cardinality
  attributes of a request, and ``on_request`` tells a stream's route what its request said;
- **how its first events betray it** when the request did not say: ``sniff_event(event)`` (by the
  SSE event name, cheap) and ``sniff_payload(payload)`` (by the data's JSON object);
- **how it reads events**: ``envelope(event, state)`` turns an event into ``(kind, payload)`` and
  the class's dispatch table (methods marked ``@handles(kind, ...)``) says what each kind does to
  the ``StreamState``; ``on_close(state)`` judges what only EOF can tell;
- **what the flight recorder may keep** of its events: ``redaction``, which JSON values are the
  protocol's vocabulary, ids or tool arguments (everything else is content, and redacted);
- **how a refused stream is ended in its own protocol**: ``strict_error_event(code, message)``,
  the event the proxy's strict mode sends a client as the last of a stream it refuses.

The registry, the sniffer, ``detect_route``, the instrumentation, the docs and the demo read
these declarations; nothing outside a route's module branches on its name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple, TypeVar

from .._core.events import SSEEvent
from .._core.http import EVENT_STREAM
from .._core.json import JSONDecodeError, loads
from .._core.state import StreamState

__all__ = [
    "CHUNK",
    "MAX_HEADER_CHARS",
    "Handler",
    "Redaction",
    "Request",
    "Route",
    "error_info",
    "handles",
    "parse_object",
    "sse_event",
    "typed_object",
]

#: The payload kind of routes whose events are all one shape (chat chunks, Gemini chunks).
CHUNK = "chunk"

#: What a dispatch-table entry is: a route method taking the payload and the state.
Handler = Callable[[Any, dict[str, Any], StreamState], None]
_H = TypeVar("_H", bound=Callable[..., None])
_KINDS_ATTRIBUTE = "_otelsse_handles"


class Request(NamedTuple):
    """What a route may look at to recognise a request: never its content.

    A contract served at any path (JSON-RPC protocols: MCP, A2A) is told by what its request
    names rather than by its URL. For a request that no route claims by its URL and that asks for
    SSE (its ``Accept`` lists ``text/event-stream``), the instrumentation also reads the
    protocol identifiers below, and asks the routes again.

    Attributes:
        method: upper case (``"POST"``).
        host: the URL's host name, lower case, without the port (``""`` when there is none).
        path: the URL path, percent-encoding as sent.
        query: the raw query string without ``?`` (``""`` when there is none).
        rpc_method: the JSON-RPC ``method`` of the body (``"tools/call"``); ``""`` when none.
        rpc_name: the body's ``params.name`` when it is a short string (the tool a
            ``tools/call`` runs); ``""`` when none.
        headers: the request headers that some registered route declares
            (``Route.request_headers``): ``(lower-case name, value)`` pairs, each value cut to
            ``MAX_HEADER_CHARS``.
    """

    method: str
    host: str
    path: str
    query: str = ""
    rpc_method: str = ""
    rpc_name: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        """The value of the declared header ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


#: The longest request header value a route is shown (a protocol version, a method name).
MAX_HEADER_CHARS = 128


class Redaction(NamedTuple):
    """What of a route's events the flight recorder keeps, by JSON key; any other value is
    content and is replaced by a placeholder of the same length.

    A value is kept verbatim only where it is a protocol value (a bounded identifier, never
    free text): under a key of ``words``, or of ``errors`` inside an error.
    """

    #: String values kept verbatim: the vocabulary the route (and its sniffing) judges by.
    words: frozenset[str] = frozenset()
    #: String and number values kept only inside an ``error`` object or at an error event's top
    #: level: the provider error code the route reports. Elsewhere the same key holds content.
    errors: frozenset[str] = frozenset()
    #: String values whose equality matters (calls, items, responses): pseudonymised.
    ids: frozenset[str] = frozenset()
    #: Numbers kept verbatim (indexes, sequence numbers).
    numbers: frozenset[str] = frozenset()
    #: Objects whose numbers are all kept (token counts).
    usage: frozenset[str] = frozenset()
    #: Where tool-argument fragments stream (matched to the route's calls); None: any string.
    fragments: frozenset[str] | None = frozenset()
    #: Whole argument texts (``.done`` events, finished items): redacted as JSON text when no
    #: call fragment matches them.
    arguments: frozenset[str] = frozenset()
    #: Subtrees redacted keys and all (tool inputs sent as objects, user metadata); None: those
    #: of every registered route.
    opaque: frozenset[str] | None = frozenset()


def handles(*kinds: str) -> Callable[[_H], _H]:
    """Mark a route method as the handler of these payload kinds in its class's dispatch table."""

    def mark(method: _H) -> _H:
        setattr(method, _KINDS_ATTRIBUTE, kinds)
        return method

    return mark


def parse_object(event: SSEEvent, state: StreamState) -> dict[str, Any] | None:
    """The event's data as a JSON object, or None after reporting a payload error."""
    try:
        obj = loads(event.data)
    except JSONDecodeError:
        state.payload_invalid()
        return None
    if type(obj) is not dict:
        state.payload_invalid()
        return None
    return obj


def typed_object(
    event: SSEEvent, state: StreamState, key: str
) -> tuple[str, dict[str, Any]] | None:
    """The event's JSON object and its kind, the string under ``key`` (the contract's own
    discriminator, ``type`` or ``event_type``); None after reporting a payload error. Dispatch
    follows the data, as the SDKs' does (some gateways send no ``event:`` line): an SSE event
    name other than the kind is only an anomaly."""
    obj = parse_object(event, state)
    if obj is None:
        return None
    kind = obj.get(key)
    if type(kind) is not str:
        state.payload_invalid()
        return None
    if event.event != kind and event.event != "message":
        state.anomaly("event_name_mismatch")
    return kind, obj


def error_info(code: str) -> dict[str, str]:
    """A ``google.rpc.ErrorInfo`` naming a strict-mode refusal's ``code`` as its reason
    (https://google.aip.dev/193): the detail Google's APIs and A2A carry in their errors."""
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": code.upper(),
        "domain": "otelsse",
    }


def sse_event(data: Mapping[str, Any], event: str | None = None) -> bytes:
    """One whole SSE event: an ``event:`` line when ``event`` names one, then ``data`` as compact
    JSON on one ``data:`` line (JSON text escapes every line break), then the blank line."""
    text = json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class Route:
    """A provider contract: subclass it, declare, mark handlers, then ``register_route()`` it.

    An instance reads one stream and may keep per-stream state (open calls, choices). The
    defaults suit a contract whose every event is one JSON object of one shape (``CHUNK``):
    override ``envelope`` when the kind comes from the event name or the payload's ``type``.

    Example, an OpenAI-compatible server at its own path that never sends ``[DONE]``::

        class AcmeChat(OpenAIChatRoute):
            name = "acme.chat"
            require_done = False

            @classmethod
            def matches(cls, request: Request) -> bool:
                return request.method == "POST" and request.path.endswith("/v1/acme/chat")

        register_route(AcmeChat)

    (An OpenAI-compatible host that only bends the terminal rule needs no route of its own:
    ``register_host(host, "openai.chat_completions:no_done")``.)
    """

    #: The low-cardinality route name recorded as ``otelsse.route``.
    name: ClassVar[str]
    #: The media type of this contract's streams: the framer that reads them, and what a
    #: response must be to be one (``_core.framers.FRAMERS`` has each one's framer).
    media_type: ClassVar[str] = EVENT_STREAM
    #: ``gen_ai.provider.name`` for this contract, or None.
    provider: ClassVar[str | None] = None
    #: ``gen_ai.operation.name`` of a call of this contract (``chat``, ``generate_content``),
    #: or None where the GenAI conventions name none.
    operation: ClassVar[str | None] = None
    #: Stop reasons that count as a successful end.
    success_stops: ClassVar[frozenset[str]] = frozenset()
    #: False where no terminal rule is known: a clean EOF is then ``eof_unverified``.
    has_terminal: ClassVar[bool] = True
    #: Whether a tool call closes at an event of its own that proves the call complete before
    #: the response ends (Anthropic ``content_block_stop``; Responses
    #: ``response.function_call_arguments.done`` or ``response.output_item.done``). A tool gate
    #: may then run it at that event when asked (``ToolGate(run_at="item")``).
    proves_item_end: ClassVar[bool] = False
    #: A request of this contract, ``(method, path with query)``, for docs, demos and tests.
    example_request: ClassVar[tuple[str, str] | None] = None
    #: Payload kind -> handler, collected from the ``@handles`` methods of the class and its bases.
    handlers: ClassVar[Mapping[str, Handler]] = {}
    #: Set by a host profile: the name of this variant of the contract (``otelsse.route.profile``).
    profile: ClassVar[str | None] = None
    #: A host profile's hosts: exact host names, or ``".example.com"`` for a domain's subdomains.
    hosts: ClassVar[tuple[str, ...]] = ()
    #: What the flight recorder keeps of this contract's events; None (a route of your own that
    #: declares none): every registered route's rules at once, argument fragments anywhere.
    redaction: ClassVar[Redaction | None] = None
    #: Request headers (lower case) whose values this contract's recognition or rules read: a
    #: protocol's version or method header, never one that holds content or credentials.
    request_headers: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table = dict(cls.handlers)
        for attribute in vars(cls).values():
            for kind in getattr(attribute, _KINDS_ATTRIBUTE, ()):
                table[kind] = attribute
        cls.handlers = table

    def __init__(self) -> None:
        # Set by the handler of the route's last event (its terminal or a fatal error):
        # anything after it is an anomaly, not input.
        self.ended = False

    @classmethod
    def full_name(cls) -> str:
        """``name``, or ``name:profile`` for a host profile: what ``get_route`` takes back."""
        return cls.name if cls.profile is None else f"{cls.name}:{cls.profile}"

    # -- declarations about requests and first events ------------------------------------------

    @classmethod
    def matches(cls, request: Request) -> bool:
        """Whether ``request`` is a request of this contract (tried before the response)."""
        return False

    @classmethod
    def disowns(cls, request: Request) -> bool:
        """Whether ``request`` (claimed by no route) follows another contract of this provider
        that otelsse does not read: it is then read as ``generic``, never sniffed."""
        return False

    @classmethod
    def always_streams(cls, request: Request) -> bool:
        """Whether this matching request asks for SSE by its URL alone (no body flag needed),
        or, for a request claimed by its JSON-RPC method (see ``Request``), whether its answer
        is always a stream; False where the server may answer with one JSON object (MCP): the
        request is then observed only when its answer is SSE."""
        return False

    @classmethod
    def url_model(cls, request: Request) -> str | None:
        """The model a matching request names in its URL (Gemini's ``models/{model}:...``);
        None where the contract names it in the body's ``model`` field."""
        return None

    @classmethod
    def labels(cls, request: Request) -> Mapping[str, str]:
        """Low-cardinality attributes of a matching request, for its span and its metric series
        (MCP's method and tool name): protocol vocabulary only. The telemetry caps the values
        each one takes, as it caps model names."""
        return {}

    @classmethod
    def sniff_event(cls, event: SSEEvent) -> bool:
        """Whether an event's SSE name proves this contract (asked before any payload)."""
        return False

    @classmethod
    def sniff_payload(cls, payload: dict[str, Any]) -> bool:
        """Whether an event's JSON object proves this contract."""
        return False

    # -- reading one stream --------------------------------------------------------------------

    @classmethod
    def strict_error_event(cls, code: str, message: str) -> bytes | None:
        """The whole event (blank line included) that ends a stream strict mode refused, in this
        contract's own protocol; None when the contract has none.

        The proxy sends it as the last bytes of a stream it refuses (``otelsse proxy
        --strict``), then ends the response cleanly, so that a client in any language learns
        the refusal the way its SDK learns the provider's own errors. It must be:

        - an error the provider's official SDKs raise on in their iteration loop;
        - the provider's documented error shape, as far as the first rule allows;
        - judged ``provider_error`` by this route, after any part of a stream;
        - never a success terminal (``[DONE]``, ``message_stop``).

        ``code`` is machine-readable (``otelsse_strict_truncated``) and ``message`` says why in
        words; neither holds content of the stream. With None (the default, for a contract
        whose error no SDK is known to raise on), the proxy cuts the client's connection
        instead: no clean end of the body, which every HTTP client reports as an error.
        """
        return None

    def on_request(self, request: Request, rpc_id: str | int | None) -> None:
        """What the request said, before its stream's first byte: ``rpc_id`` is the body's
        JSON-RPC ``id`` (None when it has none, or was not read). Not called for a stream whose
        request is unknown (a sniffed one, a replayed recording): the rules must hold without."""

    def on_event(self, event: SSEEvent, state: StreamState) -> None:
        """Interpret one complete event: envelope, then the dispatch table."""
        if self.ended:
            self.after_terminal(event, state)
            return
        found = self.envelope(event, state)
        if found is None:
            return
        kind, payload = found
        handler = self.handlers.get(kind)
        if handler is None:
            self.on_unknown(kind, payload, state)
        else:
            handler(self, payload, state)

    def envelope(self, event: SSEEvent, state: StreamState) -> tuple[str, dict[str, Any]] | None:
        """The event's payload kind and JSON object; None when nothing is left to dispatch (a
        marker handled here, or a payload error already reported)."""
        payload = parse_object(event, state)
        return None if payload is None else (CHUNK, payload)

    def on_unknown(self, kind: str, payload: dict[str, Any], state: StreamState) -> None:
        """A payload kind the table does not know: counted, never an error."""
        state.unknown()

    def after_terminal(self, event: SSEEvent, state: StreamState) -> None:
        """An event after the route ended: counted as an anomaly."""
        state.anomaly("event_after_terminal")

    def on_close(self, state: StreamState) -> None:
        """End of stream: apply any rule that can only be judged at EOF."""

    def resolved(self) -> Route:
        """The route whose contract judges the stream (the sniffer answers with its choice)."""
        return self
