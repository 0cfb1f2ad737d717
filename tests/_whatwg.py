"""A reference reading of the WHATWG event-stream interpretation, for differential tests.

Spec: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

``reference()`` follows the algorithm line by line, for obviousness rather than speed: decode the
whole stream as UTF-8 with replacement, drop one leading BOM, cut it into lines at CRLF, LF or CR,
and apply the per-line rules and the dispatch steps. Where the spec leaves a choice, it makes the
parser's documented decision (``otelsse/_core/framing.py``): each event carries the last event ID
and the reconnection time in force when it is dispatched, and a ``retry`` value longer than 300
digits is ignored.
"""

from __future__ import annotations

from otelsse import SSEEvent

BOM = b"\xef\xbb\xbf"
# The parser's documented bound on a retry value (see the framing module docstring).
RETRY_MAX_DIGITS = 300


def reference(stream: bytes) -> tuple[list[SSEEvent], str, int | None]:
    """The events of ``stream`` per the spec, then the last event ID and reconnection time."""
    # "Streams must be decoded using the UTF-8 decode algorithm": replacement, one BOM removed.
    text = stream.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]

    # Lines end at CRLF, at LF, or at CR. What follows the last line end never ends, so it is
    # never processed: it belongs to the pending data discarded at the end of the file.
    lines: list[str] = []
    line = ""
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\r":
            lines.append(line)
            line = ""
            if text[position + 1 : position + 2] == "\n":
                position += 1  # CRLF is one line end
        elif char == "\n":
            lines.append(line)
            line = ""
        else:
            line += char
        position += 1

    events: list[SSEEvent] = []
    data_buffer = ""
    event_type_buffer = ""
    last_event_id_buffer = ""
    last_event_id_string = ""  # the event source's, set at each dispatch
    reconnection_time: int | None = None

    for line in lines:
        if line == "":
            # Dispatch the event.
            last_event_id_string = last_event_id_buffer
            if data_buffer == "":
                data_buffer = event_type_buffer = ""
                continue
            if data_buffer.endswith("\n"):
                data_buffer = data_buffer[:-1]
            event_type = event_type_buffer if event_type_buffer != "" else "message"
            event = SSEEvent(event_type, data_buffer, last_event_id_string, reconnection_time)
            events.append(event)
            data_buffer = event_type_buffer = ""
            continue
        if line.startswith(":"):
            continue  # a comment
        if ":" in line:
            field, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            field, value = line, ""
        if field == "event":
            event_type_buffer = value
        elif field == "data":
            data_buffer += value + "\n"
        elif field == "id":
            if "\0" not in value:
                last_event_id_buffer = value
        elif field == "retry":
            ascii_digits = value != "" and all(char in "0123456789" for char in value)
            if ascii_digits and len(value) <= RETRY_MAX_DIGITS:
                reconnection_time = int(value)
        # Any other field is ignored.

    # End of file: the pending event (data_buffer, event_type_buffer) is discarded.
    return events, last_event_id_string, reconnection_time
