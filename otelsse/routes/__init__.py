"""Routes: which provider contract a stream follows, and how to recognise it.

Each built-in contract is one module with one ``Route`` subclass that declares everything about
it (see ``_base.py``): ``openai.chat_completions``, ``openai.responses``, ``anthropic.messages``,
``gemini.generate_content`` and ``generic``; ``auto`` sniffs the contract from the first events.
This module is the registry: it keeps the detection order and answers ``detect_route``.

A route of your own uses only the names exported here::

    from otelsse.routes import Request, Route, StreamState, handles, parse_object, register_route

    class CohereChat(Route):
        name = "cohere.chat"
        provider = "cohere"
        success_stops = frozenset({"COMPLETE", "TOOL_CALL"})

        @classmethod
        def matches(cls, request: Request) -> bool:
            return request.method == "POST" and request.path.endswith("/v2/chat")

        def envelope(self, event, state):
            payload = parse_object(event, state)
            return None if payload is None else (payload.get("type", ""), payload)

        @handles("message-end")
        def _on_end(self, payload, state: StreamState) -> None:
            ...

    register_route(CohereChat)
"""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import urlsplit

from .._core.http import is_event_stream
from .._core.state import StreamState, ToolCall
from ._base import CHUNK, Handler, Request, Route, handles, parse_object
from ._sniff import Sniffer
from .anthropic_messages import AnthropicMessagesRoute
from .gemini import GeminiRoute
from .generic import GenericRoute
from .openai_chat import OpenAIChatRoute
from .openai_responses import OpenAIResponsesRoute

__all__ = [
    "AUTO",
    "BUILT_IN",
    "CHUNK",
    "AnthropicMessagesRoute",
    "GeminiRoute",
    "GenericRoute",
    "Handler",
    "OpenAIChatRoute",
    "OpenAIResponsesRoute",
    "Request",
    "Route",
    "StreamState",
    "ToolCall",
    "detect_route",
    "get_route",
    "handles",
    "make_adapter",
    "match_route",
    "parse_object",
    "register_route",
    "route_names",
    "routes",
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
    GenericRoute,
)
_BUILT_IN_NAMES = frozenset(route.name for route in BUILT_IN)

_R = TypeVar("_R", bound=type[Route])

# User routes by name, in registration order; detection tries the newest first.
_user_routes: dict[str, type[Route]] = {}
# Every route in detection order, rebuilt when user routes change (read on every request).
_routes: tuple[type[Route], ...] = BUILT_IN


def register_route(route: _R, *, replace: bool = False) -> _R:
    """Register ``route``; detection and sniffing try it before the built-in ones.

    Returns the class, so it also works as a class decorator.

    Raises:
        TypeError: ``route`` is not a ``Route`` subclass.
        ValueError: its name is built in, ``"auto"``, empty, or taken and ``replace`` is False.
    """
    if not (isinstance(route, type) and issubclass(route, Route)):
        raise TypeError(f"register_route() takes a Route subclass, not {route!r}")
    name = getattr(route, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{route.__qualname__} declares no name")
    if name in _BUILT_IN_NAMES or name == AUTO:
        raise ValueError(f"route {name!r} is built in")
    if name in _user_routes and not replace:
        raise ValueError(f"route {name!r} is already registered")
    _user_routes.pop(name, None)
    _user_routes[name] = route
    _reorder()
    return route


def unregister_route(name: str) -> None:
    """Remove a user route (no error when it is not registered)."""
    _user_routes.pop(name, None)
    _reorder()


def _reorder() -> None:
    global _routes
    _routes = (*reversed(_user_routes.values()), *BUILT_IN)


def routes() -> tuple[type[Route], ...]:
    """Every registered route in detection order (user routes, newest first, then built-in)."""
    return _routes


def route_names() -> list[str]:
    """Every route name that ``make_adapter`` accepts, ``"auto"`` last."""
    return [route.name for route in _routes] + [AUTO]


def get_route(name: str) -> type[Route]:
    """The route registered under ``name``.

    Raises:
        KeyError: no route has that name.
    """
    for route in _routes:
        if route.name == name:
            return route
    raise KeyError(f"unknown route {name!r}; known: {', '.join(route_names())}")


def make_adapter(route: str | type[Route]) -> Route:
    """A fresh instance of ``route`` to read one stream (``"auto"``: a sniffer).

    Raises:
        KeyError: no route has that name.
    """
    if route == AUTO:
        return Sniffer(_routes)
    return (get_route(route) if isinstance(route, str) else route)()


def match_route(request: Request) -> type[Route] | None:
    """The first route (user routes first) that claims ``request``; None if none does."""
    for route in _routes:  # every request passes here: kept to a plain loop
        if route.matches(request):
            return route
    return None


def detect_route(method: str, url: str, content_type: str | None = None) -> str | None:
    """The route name for a request, from its method and URL and the response media type.

    Returns the first route that claims the request (user routes first). When none does,
    returns ``"auto"`` for a ``text/event-stream`` response (its first events will tell) and
    None otherwise: not a stream otelsse knows how to read.
    """
    parts = urlsplit(url)
    request = Request(method.upper(), parts.hostname or "", parts.path, parts.query)
    route = match_route(request)
    if route is not None:
        return route.name
    return AUTO if is_event_stream(content_type) else None
