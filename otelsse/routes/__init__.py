"""Routes: which provider contract a stream follows, and how to recognise it from the request.

Built in: ``openai.chat_completions``, ``openai.responses``, ``anthropic.messages``,
``gemini.generate_content`` and ``generic``; ``auto`` sniffs the contract from the first events.
Users add their own with ``register_route()``, for example an OpenAI-compatible server that
omits ``[DONE]``::

    register_route(
        "writer.chat",
        lambda: OpenAIChatAdapter(require_done=False),
        matches=lambda method, path: path.endswith("/v1/chat") and method == "POST",
    )
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from ._base import RouteAdapter
from ._sniff import SniffingAdapter, sniff
from .anthropic_messages import AnthropicMessagesAdapter
from .gemini import GeminiAdapter
from .generic import GenericAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter

__all__ = [
    "AUTO",
    "AnthropicMessagesAdapter",
    "GeminiAdapter",
    "GenericAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "Route",
    "RouteAdapter",
    "SniffingAdapter",
    "detect_route",
    "make_adapter",
    "match_route",
    "register_route",
    "route_names",
    "sniff",
]

#: The route name that asks for content sniffing.
AUTO = "auto"

PathMatcher = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True)
class Route:
    """A named contract: how to build its adapter and which requests it serves.

    ``matches(method, path)`` gets the upper-case HTTP method and the URL path (no query).
    """

    name: str
    adapter: Callable[[], RouteAdapter]
    matches: PathMatcher | None = None


def _chat(method: str, path: str) -> bool:
    return method == "POST" and path.endswith("/chat/completions")


def _responses(method: str, path: str) -> bool:
    if method == "POST":
        return path.endswith("/responses")
    # Resuming a background response: GET /v1/responses/{id}?stream=true
    return method == "GET" and "/responses/" in path


def _anthropic(method: str, path: str) -> bool:
    return method == "POST" and (
        path.endswith("/messages")
        or ("/publishers/anthropic/" in path and path.endswith(":streamRawPredict"))
    )


def _gemini(method: str, path: str) -> bool:
    return method == "POST" and path.endswith(":streamGenerateContent")


_BUILT_IN = (
    Route(OpenAIChatAdapter.name, OpenAIChatAdapter, _chat),
    Route(OpenAIResponsesAdapter.name, OpenAIResponsesAdapter, _responses),
    Route(AnthropicMessagesAdapter.name, AnthropicMessagesAdapter, _anthropic),
    Route(GeminiAdapter.name, GeminiAdapter, _gemini),
    Route(GenericAdapter.name, GenericAdapter),
    Route(AUTO, SniffingAdapter),
)
_BUILT_IN_NAMES = frozenset(route.name for route in _BUILT_IN)

# User routes first (newest first), so they can override detection of the built-in ones.
_user_routes: dict[str, Route] = {}
_built_in_routes: dict[str, Route] = {route.name: route for route in _BUILT_IN}
# (name, matcher) in detection order, rebuilt when user routes change.
_matchers: tuple[tuple[str, PathMatcher], ...] = ()


def register_route(
    name: str,
    adapter: Callable[[], RouteAdapter],
    *,
    matches: PathMatcher | None = None,
    replace: bool = False,
) -> Route:
    """Register a route under ``name``; it is tried before the built-in ones in detection.

    Raises:
        ValueError: ``name`` is taken and ``replace`` is False, or is a built-in name.
    """
    if name in _BUILT_IN_NAMES:
        raise ValueError(f"route {name!r} is built in")
    if name in _user_routes and not replace:
        raise ValueError(f"route {name!r} is already registered")
    route = Route(name, adapter, matches)
    _user_routes.pop(name, None)
    _user_routes[name] = route
    _order_matchers()
    return route


def unregister_route(name: str) -> None:
    """Remove a user route (no error when it is not registered)."""
    _user_routes.pop(name, None)
    _order_matchers()


def route_names() -> list[str]:
    """Every route name that ``make_adapter`` accepts."""
    return [*_user_routes, *_built_in_routes]


def make_adapter(route: str | Route) -> RouteAdapter:
    """A fresh adapter for one stream of ``route``.

    Raises:
        KeyError: no route has that name.
    """
    if isinstance(route, Route):
        return route.adapter()
    found = _user_routes.get(route) or _built_in_routes.get(route)
    if found is None:
        raise KeyError(f"unknown route {route!r}; known: {', '.join(route_names())}")
    return found.adapter()


def _is_event_stream(content_type: str | None) -> bool:
    return (
        content_type is not None
        and content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
    )


def _order_matchers() -> None:
    global _matchers
    routes = (*reversed(_user_routes.values()), *_BUILT_IN)
    _matchers = tuple((route.name, route.matches) for route in routes if route.matches)


def match_route(method: str, path: str, query: str = "") -> str | None:
    """The first route (user routes first) whose rule matches a request; None if none does."""
    method = method.upper()
    for name, matches in _matchers:  # every request passes here: kept to a plain loop
        if matches(method, path):
            if matches is _responses and method == "GET":
                stream = parse_qs(query).get("stream", [""])[0].lower()
                if stream != "true":
                    continue
            return name
    return None


def detect_route(method: str, url: str, content_type: str | None = None) -> str | None:
    """The route for a request, from its method and URL path and the response media type.

    Returns the name of the first route whose path rule matches (user routes first). When no
    rule matches, returns ``"auto"`` for a ``text/event-stream`` response (its first events will
    tell) and None otherwise: not a stream otelsse knows how to read.
    """
    parts = urlsplit(url)
    route = match_route(method, parts.path, parts.query)
    if route is None and _is_event_stream(content_type):
        return AUTO
    return route


_order_matchers()
