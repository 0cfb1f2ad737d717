"""Routes: which provider contract a stream follows, and how to recognise it.

Each built-in contract is one module with one ``Route`` subclass that declares everything about
it (see ``_base.py``); ``BUILT_IN`` lists them in detection order, ``generic`` last, and
``docs/users/routes.md`` documents each. ``auto`` sniffs the contract from the first events.
This module is the registry: it keeps the detection order and answers ``detect_route``.

Host profiles are named variants of a contract for servers that bend it on purpose (a gateway
that never sends ``[DONE]``): a ``Route`` subclass that sets ``profile`` and ``hosts``. A request
to a host with a profile that claims it is read by that profile; the
built-in ones (``BUILT_IN_PROFILES``) cover gateways whose behaviour is documented, and
``register_host`` adds a host of your own (``instrument(host_profiles=...)`` and
``otelsse inspect --host-profile`` call it). The contract's own hosts keep its strict rules.

A route of your own uses only the names exported here, for example for Mistral's
Conversations API (its text, function calls and usage left out)::

    from otelsse.routes import Request, Route, StreamState, handles, parse_object, register_route

    class MistralConversations(Route):
        name = "mistral.conversations"
        provider = "mistral_ai"

        @classmethod
        def matches(cls, request: Request) -> bool:
            return request.method == "POST" and request.path.endswith("/v1/conversations")

        def envelope(self, event, state):
            payload = parse_object(event, state)
            return None if payload is None else (payload.get("type", ""), payload)

        @handles("conversation.response.done")
        def _on_done(self, payload, state: StreamState) -> None:
            self.ended = True
            state.terminal()

        @handles("conversation.response.error")
        def _on_error(self, payload, state: StreamState) -> None:
            self.ended = True
            state.provider_error(payload.get("code"))

    register_route(MistralConversations)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

from .._core.framers import FRAMERS
from .._core.http import is_event_stream
from .._core.state import StreamState, ToolCall
from ._base import (
    CHUNK,
    MAX_HEADER_CHARS,
    Handler,
    Redaction,
    Request,
    Route,
    handles,
    parse_object,
)
from ._sniff import Sniffer
from .a2a import A2AStreamRoute
from .agui import AGUIRoute
from .anthropic_messages import AnthropicMessagesRoute
from .bedrock_converse import BedrockConverseRoute
from .bedrock_invoke import BedrockInvokeRoute
from .cohere_chat import CohereChatRoute
from .gemini import GeminiRoute
from .gemini_interactions import GeminiInteractionsRoute
from .generic import GenericRoute
from .mcp_streamable_http import MCPStreamableHTTPRoute
from .openai_chat import OPENAI_CHAT_PROFILES, OpenAIChatRoute
from .openai_responses import OpenAIResponsesRoute

__all__ = [
    "AUTO",
    "BUILT_IN",
    "BUILT_IN_PROFILES",
    "CHUNK",
    "MAX_HEADER_CHARS",
    "A2AStreamRoute",
    "AGUIRoute",
    "AnthropicMessagesRoute",
    "BedrockConverseRoute",
    "BedrockInvokeRoute",
    "CohereChatRoute",
    "GeminiInteractionsRoute",
    "GeminiRoute",
    "GenericRoute",
    "Handler",
    "MCPStreamableHTTPRoute",
    "OpenAIChatRoute",
    "OpenAIResponsesRoute",
    "Redaction",
    "Request",
    "Route",
    "StreamState",
    "ToolCall",
    "declared_headers",
    "detect_route",
    "get_route",
    "handles",
    "make_adapter",
    "match_route",
    "parse_object",
    "protocol_request",
    "redaction_rules",
    "register_host",
    "register_route",
    "route_names",
    "routes",
    "unregister_host",
    "unregister_route",
]

#: The route name that asks for content sniffing.
AUTO = "auto"

#: The built-in contracts, in detection order; ``generic`` last, as the fallback.
BUILT_IN: tuple[type[Route], ...] = (
    OpenAIChatRoute,
    OpenAIResponsesRoute,
    AnthropicMessagesRoute,
    GeminiRoute,
    BedrockConverseRoute,
    BedrockInvokeRoute,
    CohereChatRoute,
    GeminiInteractionsRoute,
    AGUIRoute,
    A2AStreamRoute,
    MCPStreamableHTTPRoute,
    GenericRoute,
)
#: The built-in host profiles (each names its hosts and its sources in its docstring).
BUILT_IN_PROFILES: tuple[type[Route], ...] = OPENAI_CHAT_PROFILES
_BUILT_IN_NAMES = frozenset(route.full_name() for route in (*BUILT_IN, *BUILT_IN_PROFILES))

_R = TypeVar("_R", bound=type[Route])

# User routes by name, in registration order; detection tries the newest first.
_user_routes: dict[str, type[Route]] = {}
# Every route in detection order, rebuilt when user routes change (read on every request).
_routes: tuple[type[Route], ...] = BUILT_IN
# Host profiles by full name (``route:profile``), built-in and user ones.
_profiles: dict[str, type[Route]] = {}
# Host, or ".domain" for its subdomains -> the profile its servers follow.
_hosts: dict[str, type[Route]] = {}
# The built-in host entries, restored when a user entry for the same host is removed.
_built_in_hosts: dict[str, type[Route]] = {}
# The request headers some registered route reads (``Route.request_headers``).
_declared_headers: tuple[str, ...] = ()


def register_route(route: _R, *, replace: bool = False) -> _R:
    """Register ``route``; detection and sniffing try it before the built-in ones.

    A class that sets ``profile`` is a host profile of the registered route named ``name``: it
    is chosen for the requests it claims (``matches``) at one of its ``hosts``.

    Returns the class, so it also works as a class decorator.

    Raises:
        TypeError: ``route`` is not a ``Route`` subclass.
        ValueError: its name is built in, ``"auto"``, empty, or taken and ``replace`` is False;
            its media type has no framer; a profile's name has a ``":"``, or its route is not
            registered or not its base.
    """
    if not (isinstance(route, type) and issubclass(route, Route)):
        raise TypeError(f"register_route() takes a Route subclass, not {route!r}")
    name = getattr(route, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{route.__qualname__} declares no name")
    if route.media_type not in FRAMERS:
        known = ", ".join(FRAMERS)
        raise ValueError(f"no framer reads {route.media_type!r} (known: {known})")
    full_name = route.full_name()
    if full_name in _BUILT_IN_NAMES or name == AUTO:
        raise ValueError(f"route {full_name!r} is built in")
    if full_name in _user_routes or full_name in _profiles:
        if not replace:
            raise ValueError(f"route {full_name!r} is already registered")
        unregister_route(full_name)
    if route.profile is None:
        _user_routes[name] = route
        _reorder()
    else:
        _add_profile(route)
    return route


def _add_profile(profile: type[Route]) -> None:
    if not profile.profile or ":" in profile.profile:
        raise ValueError(f"profile name {profile.profile!r} must be non-empty, without ':'")
    base = next((route for route in _routes if route.name == profile.name), None)
    if base is None or not issubclass(profile, base):
        raise ValueError(f"profile {profile.full_name()!r} must subclass route {profile.name!r}")
    _profiles[profile.full_name()] = profile
    for host in profile.hosts:
        register_host(host, profile)


def unregister_route(name: str) -> None:
    """Remove a user route or host profile by its (full) name; no error when it is unknown."""
    if name in _BUILT_IN_NAMES:
        return
    profile = _profiles.pop(name, None)
    if profile is not None:
        for host in [host for host, chosen in _hosts.items() if chosen is profile]:
            unregister_host(host)
    if _user_routes.pop(name, None) is not None:
        _reorder()


def register_host(host: str, profile: str | type[Route]) -> None:
    """Read the streams of ``host`` with ``profile`` (a host profile or its full name).

    ``host`` is a host name (``"llm.internal.example"``) or ``".example.com"`` for every
    subdomain of ``example.com``. It replaces any entry for the same host, built-in ones too.

    Raises:
        KeyError: no route has that name.
        ValueError: ``profile`` is not a host profile, or ``host`` is empty.
    """
    chosen = get_route(profile) if isinstance(profile, str) else profile
    if chosen.profile is None:
        raise ValueError(f"{chosen.full_name()!r} is not a host profile (it sets no profile)")
    key = host.strip().lower()
    if not key.strip("."):
        raise ValueError("register_host() needs a host name")
    _hosts[key] = chosen
    _match.cache_clear()


def unregister_host(host: str) -> None:
    """Forget ``host``'s entry (a built-in entry for it comes back); no error when unknown."""
    key = host.strip().lower()
    _hosts.pop(key, None)
    if key in _built_in_hosts:
        _hosts[key] = _built_in_hosts[key]
    _match.cache_clear()


def _reorder() -> None:
    global _routes, _declared_headers
    _routes = (*reversed(_user_routes.values()), *BUILT_IN)
    _declared_headers = tuple(sorted(frozenset().union(*(r.request_headers for r in _routes))))
    _match.cache_clear()


def declared_headers() -> tuple[str, ...]:
    """The request headers (lower case) that some registered route reads (see ``Request``)."""
    return _declared_headers


def protocol_request(
    request: Request,
    rpc_method: str | None,
    rpc_name: str | None,
    header: Callable[[str], str | None],
) -> Request:
    """``request`` with what identifies a protocol served at any path: its JSON-RPC body's
    ``method`` and ``params.name``, and the headers registered routes declare (``header``
    gives a request header's value by its lower-case name)."""
    headers = []
    for name in _declared_headers:
        value = header(name)
        if value:
            headers.append((name, value[:MAX_HEADER_CHARS]))
    return request._replace(
        rpc_method=rpc_method or "", rpc_name=rpc_name or "", headers=tuple(headers)
    )


def routes() -> tuple[type[Route], ...]:
    """Every registered route in detection order (user routes, newest first, then built-in)."""
    return _routes


def route_names() -> list[str]:
    """Every route name that ``make_adapter`` accepts (host profiles as ``route:profile``),
    ``"auto"`` last."""
    return [route.name for route in _routes] + list(_profiles) + [AUTO]


def get_route(name: str) -> type[Route]:
    """The route or host profile registered under ``name`` (``route:profile`` for a profile).

    Raises:
        KeyError: no route has that name.
    """
    for route in _routes:
        if route.name == name:
            return route
    profile = _profiles.get(name)
    if profile is not None:
        return profile
    raise KeyError(f"unknown route {name!r}; known: {', '.join(route_names())}")


def redaction_rules(name: str) -> Redaction:
    """What the flight recorder keeps of the events of the route named ``name`` (a report's
    route): its declared ``redaction``, an ``opaque`` of None standing for every registered
    route's. A route that declares none, or an unknown name, gets every route's rules at once,
    argument fragments anywhere."""
    every = _every_rule()
    route = next((route for route in _routes if route.name == name), None)
    rules = route.redaction if route is not None and route.redaction is not None else every
    return rules if rules.opaque is not None else rules._replace(opaque=every.opaque)


def _every_rule() -> Redaction:
    """The registered routes' declared rules at once, argument fragments anywhere."""
    declared = [route.redaction for route in _routes if route.redaction is not None]

    def union(field: str) -> frozenset[str]:
        return frozenset().union(*(getattr(rules, field) or () for rules in declared))

    return Redaction(
        words=union("words"),
        errors=union("errors"),
        ids=union("ids"),
        numbers=union("numbers"),
        usage=union("usage"),
        fragments=None,
        arguments=union("arguments"),
        opaque=union("opaque"),
    )


def make_adapter(route: str | type[Route]) -> Route:
    """A fresh instance of ``route`` to read one stream (``"auto"``: a sniffer).

    Raises:
        KeyError: no route has that name.
    """
    if route == AUTO:
        return Sniffer(_routes)
    return (get_route(route) if isinstance(route, str) else route)()


def match_route(request: Request) -> type[Route] | None:
    """The route that reads ``request``'s stream, or None when no route knows it.

    The host's profile if one is registered and claims the request; else the first route (user
    routes first) that claims it; else ``generic`` for a request a route disowns (another
    contract of its provider that otelsse does not read, which sniffing must not guess).

    Every request an application sends passes here, mostly the same few: the answers for the
    latest requests are kept (a route's declarations depend on the request alone), and
    forgotten whenever routes or hosts change.
    """
    return _match(request)


@functools.lru_cache(maxsize=1024)
def _match(request: Request) -> type[Route] | None:
    profile = _host_profile(request.host)
    if profile is not None and profile.matches(request):
        return profile
    for route in _routes:  # every request passes here: kept to a plain loop
        if route.matches(request):
            return route
    for route in _routes:
        if route.disowns(request):
            return GenericRoute
    return None


def _host_profile(host: str) -> type[Route] | None:
    """The profile registered for ``host``, else for its nearest parent domain, else None."""
    profile = _hosts.get(host)
    dot = host.find(".")
    while profile is None and dot != -1:
        profile = _hosts.get(host[dot:])
        dot = host.find(".", dot + 1)
    return profile


def detect_route(method: str, url: str, content_type: str | None = None) -> str | None:
    """The route name for a request, from its method and URL and the response media type.

    Returns ``match_route``'s choice by its full name (``route:profile`` for a host profile).
    When no route knows the request, returns ``"auto"`` for a ``text/event-stream`` response
    (its first events will tell) and None otherwise: not a stream otelsse knows how to read.
    """
    parts = urlsplit(url)
    request = Request(method.upper(), parts.hostname or "", parts.path, parts.query)
    route = match_route(request)
    if route is not None:
        return route.full_name()
    return AUTO if is_event_stream(content_type) else None


for _profile in BUILT_IN_PROFILES:
    _add_profile(_profile)
_built_in_hosts.update(_hosts)
_reorder()
