"""The sans-IO core: bytes -> UTF-8 -> WHATWG SSE events -> what a route establishes.

Standard library only, no I/O, no clock (timestamps are passed in): ``decode`` (UTF-8 and the
BOM), ``framing`` (``SSEParser``), ``events`` (``SSEEvent``), ``json`` (the fastest installed
decoder), ``state`` (``StreamState``, the vocabulary routes write), ``http`` (which responses can
be a stream). The monitor, the routes and the reader build on it; nothing here imports them.
"""
