"""Strict mode's policy: which outcomes make the application's own read raise, and as what.

Observing never alters what the application reads; strict mode is the one opt-in exception. It
is on for a stream when ``instrument(strict=...)`` (or ``$OTEL_PYTHON_OTELSSE_STRICT``) says so,
or when the request is sent inside ``with otelsse.strict(...)``, which overrides the
instrumentation's setting for that block (``otelsse.strict(False)`` turns it off there).

A refused stream raises ``StreamFault`` (its ``code`` the outcome's name, its ``report`` the
stream's report) that is also an instance of the client library's own error for a body cut
mid-way (``Client.body_cut_error``): ``except`` clauses, SDK error mapping and retry helpers
written for the network failure treat it as one. docs/users/strict.md says where each SDK
surfaces it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

from ._clients import Client
from ._monitor import Outcome, StreamReport
from ._reader import StreamFault

__all__ = [
    "STRICTABLE",
    "STRICT_DEFAULT",
    "STRICT_ENV",
    "StrictOption",
    "fault_class",
    "refusal",
    "scoped_outcomes",
    "strict",
    "strict_outcomes",
]

#: ``instrument(strict=...)`` for zero-code setups: ``true`` (the default outcomes), ``false``,
#: or outcome names, comma-separated (``default`` stands for the default ones).
STRICT_ENV = "OTEL_PYTHON_OTELSSE_STRICT"

#: Refused unless told otherwise: the stream was cut, or what came cannot be trusted. A stop the
#: provider chose (``incomplete``: ``length``, ``max_tokens``) is the application's to see.
STRICT_DEFAULT: frozenset[str] = frozenset(
    outcome.value
    for outcome in (
        Outcome.TRUNCATED,
        Outcome.BUFFER_LIMIT,
        Outcome.DECODE_ERROR,
        Outcome.PAYLOAD_ERROR,
        Outcome.PROTOCOL_ERROR,
    )
)
#: What strict mode can refuse: the verdicts a body alone decides. A timeout and a cancellation
#: already raise in the application, an HTTP error is refused at its headers by the SDKs
#: themselves, and ``internal_error`` is otelsse's own failure, never the application's.
STRICTABLE: frozenset[str] = STRICT_DEFAULT | {
    Outcome.TERMINAL_MISSING.value,
    Outcome.INCOMPLETE.value,
    Outcome.PROVIDER_ERROR.value,
    Outcome.EOF_UNVERIFIED.value,
}

#: What the option accepts: None (the environment decides, for ``instrument()``), a bool, outcome
#: names (an iterable, or one comma-separated string).
StrictOption = bool | str | Iterable[str] | None

#: The block's override (``strict()``): the outcomes refused there, empty for off; None outside.
_SCOPED: ContextVar[frozenset[Outcome] | None] = ContextVar("otelsse_strict", default=None)


def strict_outcomes(option: StrictOption) -> frozenset[Outcome]:
    """The outcomes ``option`` refuses: empty for None or False, ``STRICT_DEFAULT`` for True.

    In a string, ``true``/``on``/``1`` mean the default and ``false``/``off``/``0``/empty mean
    off; ``default`` names the default outcomes among others (``default,terminal_missing``).

    Raises:
        ValueError: a name that is not an outcome strict mode can refuse.
    """
    if option is None or option is False:
        return frozenset()
    if option is True:
        names: Iterable[str] = STRICT_DEFAULT
    elif isinstance(option, str):
        word = option.strip().lower()
        if word in ("", "false", "off", "0"):
            return frozenset()
        names = STRICT_DEFAULT if word in ("true", "on", "1") else word.split(",")
    else:
        names = option
    chosen: set[Outcome] = set()
    for name in (str(name).strip() for name in names):
        if name == "default":
            chosen.update(Outcome(default) for default in STRICT_DEFAULT)
        elif name in STRICTABLE:
            chosen.add(Outcome(name))
        elif name:
            raise ValueError(
                f"strict mode cannot refuse {name!r}; it refuses any of: "
                f"{', '.join(sorted(STRICTABLE))} (or 'default')"
            )
    return frozenset(chosen)


@contextlib.contextmanager
def strict(outcomes: StrictOption = True) -> Iterator[None]:
    """Strict mode for the requests sent in this block (this thread or task and what it starts),
    whatever ``instrument()`` was told: ``True`` for the default outcomes, outcome names, or
    ``False`` to turn it off here. Without ``instrument()`` it changes nothing.

    Raises:
        ValueError: an outcome strict mode cannot refuse.
    """
    token = _SCOPED.set(strict_outcomes(outcomes))
    try:
        yield
    finally:
        _SCOPED.reset(token)


def scoped_outcomes() -> frozenset[Outcome] | None:
    """The block's override (``strict()``), None outside any."""
    return _SCOPED.get()


#: A client's error for a body cut mid-way -> the ``StreamFault`` that is also one.
_FAULT_CLASSES: dict[type[Exception], type[StreamFault]] = {}


def fault_class(client: Client) -> type[StreamFault]:
    """``StreamFault`` that is also ``client``'s own error for a body cut mid-way."""
    base = client.body_cut_error()
    made = _FAULT_CLASSES.get(base)
    if made is None:
        made = type("StrictStreamFault", (StreamFault, base), {"__module__": "otelsse"})
        _FAULT_CLASSES[base] = made
    return made


def refusal(cls: type[StreamFault], report: StreamReport) -> StreamFault:
    """The exception strict mode raises for ``report``: no content in its message."""
    return cls(report.outcome.value, report, detail="refused by otelsse strict mode")
