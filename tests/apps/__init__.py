"""Small example applications that the tests run in subprocesses (and import in-process)."""
