"""Exceptions for API misuse. Bad *input* is never an exception: it becomes an outcome.

OtelSSEError
├── ParserClosedError   feed() after close()
└── StreamFault         the enforcing reader refused a stream (see reader.py)
"""

from __future__ import annotations

__all__ = ["OtelSSEError", "ParserClosedError", "missing_extra"]


class OtelSSEError(Exception):
    """Base class of every exception otelsse raises on purpose."""


class ParserClosedError(OtelSSEError):
    """``feed()`` or ``close()`` was called on a parser or monitor that is already closed."""


def missing_extra(what: str, module: str | None, extra: str) -> str:
    """The one line saying ``what`` needs ``module``, which the ``extra`` installs. otelsse is
    not on PyPI, so the command that works is the editable install of a clone."""
    return (
        f"{what} needs {module or 'an optional dependency'}: install otelsse's {extra!r} extra"
        f" (in a clone of otelsse: python -m pip install -e '.[{extra}]')"
    )
