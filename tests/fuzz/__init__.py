"""Property-based fuzzing: never raises on garbage, and the verdict never depends on the chunking.

The properties (Hypothesis):

- ``test_parser.py``: ``SSEParser`` on arbitrary bytes under random chunkings never raises
  (only ``ParserClosedError`` after ``close()``), gives the same events and state as one read,
  and the same events as a plain reference reading of the WHATWG rules.
- ``test_monitor.py``: ``StreamMonitor`` for every name in ``route_names()`` (``auto`` and
  ``generic`` included), with default and with small ``Limits``, on arbitrary bytes, SSE-shaped
  garbage and mutated recorded fixtures (byte flips, truncations, duplicated, reordered and
  deleted events, JSON type swaps and odd ``index`` values inside event data): ``feed``/``close``
  never raise, the outcome is an ``Outcome``, and the events and the whole ``StreamReport``
  (timing fields and ``chunk_count`` aside) are the same for one read, one byte per read and a
  random split.
- ``test_reader.py``: ``read_stream`` on the same inputs gives only a ``StreamResult`` or a
  ``StreamFault``, the same for every chunking, and agrees with the monitor (a stream the
  monitor calls ``complete`` is not refused without tool schemas; a refused one carries the
  monitor's outcome as its code).
- ``test_findings.py``: example-based tests for bugs these properties found.

Cost: 200 Hypothesis examples per property (the cheaper parser and agreement properties run
twice as many), scaled as every property's are (``tests/_tiers.py``: a tenth in the fast loop,
``OTELSSE_FUZZ_SCALE`` times as many for a long run)::

    python -m pytest -q tests/fuzz                              # the CI-sized run
    OTELSSE_FUZZ_SCALE=500 python -m pytest -q tests/fuzz       # a long run

Runs are not derandomized; each falsifying example is printed with ``note()`` lines (the bytes,
route, limits and chunking) and a ``@reproduce_failure`` blob, and Hypothesis' example database
(``.hypothesis/``) replays it on the next run.

For coverage-guided long runs there is an atheris harness (not collected by pytest; needs
``pip install atheris``), run from the repository root::

    python -m tests.fuzz.atheris_harness -max_total_time=3600 -print_final_stats=1
"""
