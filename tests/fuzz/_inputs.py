"""Fuzz inputs that do not depend on the fuzzing engine: fixtures, mutations, SSE soup, chunkings.

Every random choice goes through a ``Chooser``, so that Hypothesis (which shrinks its draws) and
atheris (which feeds its own bytes) drive the same mutations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from tests._fixtures import EDGE_FIXTURES, fixture_names, read_fixture

T = TypeVar("T")


class Chooser(Protocol):
    """Where a mutation gets its random choices."""

    def integer(self, low: int, high: int, label: str) -> int: ...

    def choice(self, options: Sequence[T], label: str) -> T: ...


# --------------------------------------------------------------------------------------------
# Fixtures as fuzz seeds
# --------------------------------------------------------------------------------------------

#: Seeds longer than this lose events from their middle, so that one byte per read, six routes
#: and a reader per example stay cheap.
SEED_BUDGET = 2048

FIXTURE_NAMES: list[str] = fixture_names() + [
    f"edge/{path.name}" for path in sorted(EDGE_FIXTURES.iterdir()) if path.suffix == ".sse"
]

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def split_events(body: bytes) -> list[bytes]:
    """``body`` cut after each blank line; an unterminated remainder is the last piece."""
    pieces, start = [], 0
    for match in _EVENT_END.finditer(body):
        pieces.append(body[start : match.end()])
        start = match.end()
    if start < len(body):
        pieces.append(body[start:])
    return pieces


def trim(body: bytes, budget: int = SEED_BUDGET) -> bytes:
    """``body`` if small, else its first and last events within ``budget`` (middle dropped)."""
    if len(body) <= budget:
        return body
    events = [event for event in split_events(body) if len(event) <= budget // 2]
    head: list[bytes] = []
    size = 0
    for event in events:
        if size + len(event) > budget // 2:
            break
        head.append(event)
        size += len(event)
    tail: list[bytes] = []
    size = 0
    for event in reversed(events[len(head) :]):
        if size + len(event) > budget // 2:
            break
        tail.insert(0, event)
        size += len(event)
    return b"".join(head + tail)


_SEEDS: dict[tuple[str, int], bytes] = {}


def seed(name: str, budget: int = SEED_BUDGET) -> bytes:
    """The fixture ``name`` trimmed to ``budget`` bytes (cached)."""
    if (name, budget) not in _SEEDS:
        _SEEDS[name, budget] = trim(read_fixture(name), budget)
    return _SEEDS[name, budget]


# --------------------------------------------------------------------------------------------
# JSON values of every type, for swaps inside event data
# --------------------------------------------------------------------------------------------

BIG_INT = 123456789012345678901234567890

#: Replacements for a JSON value: every JSON type, big and odd numbers, nested shapes.
SWAP_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    7,
    BIG_INT,
    10**30,
    2**63,
    -(2**63) - 1,
    0.0,
    1.5,
    -2.5e-7,
    1e308,
    "",
    "0",
    "x",
    "stop",
    "[DONE]",
    [],
    ["x", 1],
    [[[]]],
    [{"type": "text", "text": "Hi"}],
    {},
    {"k": "v"},
    {"type": "text", "text": "Hi"},
    {"a": [{"b": None}]},
]

#: Replacements for index-like keys (``index``, ``output_index``, ``sequence_number``...).
INDEX_VALUES: list[Any] = [
    "0",
    "1",
    0.0,
    1.0,
    0.5,
    -1,
    10**30,
    BIG_INT,
    2**63,
    True,
    False,
    None,
    [0],
    {"i": 0},
]
INDEX_KEYS = frozenset(
    {"index", "output_index", "content_index", "sequence_number", "summary_index", "choice_index"}
)


def json_kind(value: Any) -> str:
    """The JSON type of ``value``, with integers and floats apart (a swap between them counts)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "object"


Path = tuple[Any, ...]


def json_paths(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every node of a JSON value, root first, as a path of keys and list indexes."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_paths(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from json_paths(item, (*path, position))


def json_get(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def json_set(value: Any, path: Path, new: Any) -> Any:
    """``value`` with the node at ``path`` replaced by ``new`` (in place; the root is returned)."""
    if not path:
        return new
    json_get(value, path[:-1])[path[-1]] = new
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# --------------------------------------------------------------------------------------------
# Mutations of a body
# --------------------------------------------------------------------------------------------

_DATA_LINE = re.compile(rb"^data: ?(.*?)(\r\n|\r|\n)", re.MULTILINE)

#: Tokens inserted at random positions: line ends, field names, markers, a BOM, bad UTF-8.
TOKENS: list[bytes] = [
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b":",
    b": keepalive\n",
    b"data:",
    b"data: ",
    b"data\n",
    b"event: ",
    b"event: error\n",
    b"event: ping\n",
    b"event: message_stop\n",
    b"event: response.completed\n",
    b"id: 7\n",
    b"id: \x00\n",
    b"retry: 1000\n",
    b"retry: 99999999999999999999\n",
    b"data: [DONE]\n\n",
    b'data: {"error":{"code":"x"}}\n\n',
    b"data: {}\n\n",
    b"data: null\n\n",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xf0\x9f\x98\x80",
    b"\x00",
    b" ",
    b"{",
    b"}",
    b'"',
]


def _data_payload(event: bytes) -> tuple[int, int, Any] | None:
    """Where the JSON value of an event's single data line is, and the value; None if none."""
    matches = list(_DATA_LINE.finditer(event))
    if len(matches) != 1:
        return None
    match = matches[0]
    try:
        value = json.loads(match.group(1).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return match.start(1), match.end(1), value


def _replace_in_event(
    body: bytes,
    chooser: Chooser,
    pick_paths: Callable[[Any], list[Path]],
    values: list[Any],
    other_type: bool,
) -> tuple[bytes, str]:
    """Replace one node of one event's JSON data by one of ``values`` (of another JSON type
    than the node's when ``other_type``, else just another value)."""
    events = split_events(body)
    candidates = []
    for position, event in enumerate(events):
        found = _data_payload(event)
        if found is not None and pick_paths(found[2]):
            candidates.append((position, found))
    if not candidates:
        return body, "no JSON event to swap in"
    position, (start, end, value) = chooser.choice(candidates, "event with JSON data")
    path = chooser.choice(pick_paths(value), "JSON path")
    old = json_get(value, path)
    kind = json_kind(old)
    options = [v for v in values if json_kind(v) != kind or (not other_type and v != old)]
    new = chooser.choice(options, "replacement value")
    payload = dumps(json_set(value, path, new)).encode()
    event = events[position]
    events[position] = event[:start] + payload + event[end:]
    return b"".join(events), f"event {position}: {list(path)!r} {old!r:.40} -> {new!r}"


def _type_swap(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    def every_path(value: Any) -> list[Path]:
        # Every node but the root; leaves (the fields routes read) twice as likely.
        paths = [path for path in json_paths(value) if path]
        leaves = [p for p in paths if not isinstance(json_get(value, p), (dict, list))]
        return paths + leaves

    return _replace_in_event(body, chooser, every_path, SWAP_VALUES, other_type=True)


def _index_swap(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    def index_paths(value: Any) -> list[Path]:
        return [p for p in json_paths(value) if p and p[-1] in INDEX_KEYS]

    return _replace_in_event(body, chooser, index_paths, INDEX_VALUES, other_type=False)


def _flip(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    if not body:
        return body, "flip: empty"
    at = chooser.integer(0, len(body) - 1, "flip position")
    mask = chooser.integer(1, 255, "flip mask")
    return body[:at] + bytes([body[at] ^ mask]) + body[at + 1 :], f"flip byte {at} ^ {mask:#x}"


def _truncate(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    if not body:
        return body, "truncate: empty"
    at = chooser.integer(0, len(body) - 1, "truncate at")
    return body[:at], f"truncate at {at}"


def _insert_token(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    at = chooser.integer(0, len(body), "insert position")
    token = chooser.choice(TOKENS, "token")
    return body[:at] + token + body[at:], f"insert {token!r} at {at}"


def _duplicate(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    events = split_events(body)
    if not events:
        return body, "duplicate: no events"
    source = chooser.integer(0, len(events) - 1, "event to duplicate")
    target = chooser.integer(0, len(events), "insert copy before")
    events.insert(target, events[source])
    return b"".join(events), f"duplicate event {source} before {target}"


def _delete(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    events = split_events(body)
    if not events:
        return body, "delete: no events"
    victim = chooser.integer(0, len(events) - 1, "event to delete")
    del events[victim]
    return b"".join(events), f"delete event {victim}"


def _reorder(body: bytes, chooser: Chooser) -> tuple[bytes, str]:
    events = split_events(body)
    if len(events) < 2:
        return body, "reorder: fewer than two events"
    source = chooser.integer(0, len(events) - 1, "event to move")
    moved = events.pop(source)
    target = chooser.integer(0, len(events), "move before")
    events.insert(target, moved)
    return b"".join(events), f"move event {source} to {target}"


MUTATIONS: dict[str, Callable[[bytes, Chooser], tuple[bytes, str]]] = {
    "type_swap": _type_swap,
    "index_swap": _index_swap,
    "flip": _flip,
    "truncate": _truncate,
    "insert_token": _insert_token,
    "duplicate": _duplicate,
    "delete": _delete,
    "reorder": _reorder,
}


#: The mutations to choose from; JSON swaps weigh more, as they reach deepest into the routes.
MENU: list[str] = ["type_swap", "type_swap", "type_swap", "index_swap", *MUTATIONS]


#: The mutations that keep a stream's shape: a stream that was complete mostly stays complete.
SWAPS: list[str] = ["type_swap", "type_swap", "type_swap", "index_swap"]


def mutate(
    body: bytes, chooser: Chooser, count: int, menu: Sequence[str] = MENU
) -> tuple[bytes, list[str]]:
    """Apply ``count`` mutations from ``menu``; return the bytes and what was done."""
    done = []
    for _ in range(count):
        name = chooser.choice(menu, "mutation")
        body, what = MUTATIONS[name](body, chooser)
        done.append(f"{name}: {what}")
    return body, done


# --------------------------------------------------------------------------------------------
# SSE-shaped garbage: the field names, event names, keys and values the routes look at
# --------------------------------------------------------------------------------------------

#: Keys the built-in routes read, so that random JSON objects reach their handlers.
ROUTE_KEYS: list[str] = [
    "type", "index", "choices", "delta", "content", "tool_calls", "function", "name",
    "arguments", "id", "finish_reason", "error", "code", "usage", "prompt_tokens",
    "completion_tokens", "message", "content_block", "partial_json", "text", "thinking",
    "stop_reason", "candidates", "parts", "functionCall", "args", "finishReason",
    "promptFeedback", "blockReason", "usageMetadata", "promptTokenCount",
    "candidatesTokenCount", "item", "item_id", "output_index", "sequence_number", "response",
    "incomplete_details", "reason", "model", "object", "refusal", "reasoning_content",
    "reasoning", "input", "input_tokens", "output_tokens", "status", "thought",
    "modelVersion", "responseId", "call_id", "function_call",
]  # fmt: skip

#: String values (and SSE event names) the routes branch on.
ROUTE_WORDS: list[str] = [
    "message", "message_start", "content_block_start", "content_block_delta",
    "content_block_stop", "message_delta", "message_stop", "error", "ping", "text_delta",
    "input_json_delta", "thinking_delta", "tool_use", "server_tool_use", "mcp_tool_use",
    "response.created", "response.in_progress", "response.completed", "response.incomplete",
    "response.failed", "response.output_item.added", "response.output_item.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.output_text.delta", "response.reasoning_text.delta", "function_call",
    "mcp_call", "chat.completion.chunk", "stop", "tool_calls", "length", "end_turn",
    "max_tokens", "STOP", "MAX_TOKENS", "SAFETY", "completed", "[DONE]", "{", "{}", "",
]  # fmt: skip
