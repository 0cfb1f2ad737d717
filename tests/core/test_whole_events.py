"""Whole events (``WholeEvents``, what the proxy's strict mode relays): whatever the chunking
and the line ends (LF, CRLF, CR), the bytes handed on are the bytes received, in order; what has
been handed on always ends where the WHATWG parser (``SSEParser``) has nothing pending; and every
event the parser has dispatched from what was received has been handed on (nothing whole is held).
"""

from __future__ import annotations

import random

import pytest

from otelsse._core.framing import SSEParser, WholeEvents
from otelsse._core.http import EVENT_STREAM
from otelsse._demo.provider import DEFAULT_MODELS, Turn, script_events
from otelsse.routes import get_route
from tests._helpers import random_split
from tests._tiers import examples


def _bodies() -> list[bytes]:
    found = []
    for route, model in DEFAULT_MODELS.items():
        if get_route(route).media_type != EVENT_STREAM:
            continue  # another framing (Bedrock's binary frames): no lines to whole
        for scenario in ("complete", "tool_call"):
            body = b"".join(script_events(route, Turn(model, scenario, 10, "req_whole")))
            found += [body, body.replace(b"\n", b"\r\n"), body.replace(b"\n", b"\r")]
    # Comments, a multi-line data field, an event of fields but no data, blank lines in a row.
    found.append(
        b": keepalive\n\nid: 1\nretry: 10\n\ndata: a\ndata: b\n\n\n\nevent: x\ndata: {}\r\n\r\n"
    )
    return found


def _ends_whole(data: bytes) -> bool:
    """Whether the parser, given ``data`` and then the end, has nothing pending."""
    parser = SSEParser()
    parser.feed(data)
    parser.close()
    return not (parser.discarded_event or parser.pending_line_chars or parser.pending_event_chars)


@pytest.mark.parametrize("body", _bodies(), ids=lambda body: f"{len(body)}B-{body[:12]!r}")
def test_whole_events_hand_on_every_byte_and_never_half_an_event(body: bytes) -> None:
    rng = random.Random(len(body))
    for _ in range(examples(40)):
        whole = WholeEvents(limit=1 << 20)
        on_received, on_handed = SSEParser(), SSEParser()
        received: list[tuple[str, str]] = []
        handed: list[tuple[str, str]] = []
        handed_bytes = b""
        for chunk in random_split(body, rng, max_size=rng.choice((1, 7, 64, 400))):
            received += [(e.event, e.data) for e in on_received.feed(chunk)]
            ready = whole.take(chunk)
            if ready:
                handed_bytes += ready
                handed += [(e.event, e.data) for e in on_handed.feed(ready)]
                assert _ends_whole(handed_bytes), handed_bytes[-40:]
            assert handed == received  # every whole event handed on, nothing more
        assert not whole.overflowed
        assert handed_bytes + whole.flush() == body


def test_an_event_past_the_limit_is_handed_on_as_it_comes() -> None:
    whole = WholeEvents(limit=100)
    assert whole.take(b"data: 1\n\ndata: ") == b"data: 1\n\n"
    assert whole.take(b"x" * 90) == b""
    assert not whole.overflowed
    assert whole.take(b"x" * 10) == b"data: " + b"x" * 100
    assert whole.overflowed
