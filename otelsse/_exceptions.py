"""Exceptions for API misuse. Bad *input* is never an exception: it becomes an outcome.

OtelSSEError
├── ParserClosedError   feed() after close()
└── StreamFault         the enforcing reader refused a stream (see reader.py)
"""

from __future__ import annotations

__all__ = ["OtelSSEError", "ParserClosedError"]


class OtelSSEError(Exception):
    """Base class of every exception otelsse raises on purpose."""


class ParserClosedError(OtelSSEError):
    """``feed()`` or ``close()`` was called on a parser or monitor that is already closed."""
