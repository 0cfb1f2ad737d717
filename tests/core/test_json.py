"""orjson, msgspec and the standard library's json classify every stream the same way.

Each decoder is selected in a fresh interpreter by making the preferred ones unimportable.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests._fixtures import EXPECTED, FIXTURES

_PROGRAM = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # makes ``import name`` raise ImportError
from pathlib import Path
from otelsse import StreamMonitor
from otelsse._core.json import JSON_DECODER
outcomes = {{}}
for path in sorted(Path(sys.argv[1]).glob("*/*.sse")):
    monitor = StreamMonitor("auto")
    monitor.feed(path.read_bytes())
    report = monitor.close()
    outcomes[path.parent.name + "/" + path.name] = [report.outcome.value, report.stop_reason]
print(json.dumps({{"decoder": JSON_DECODER, "outcomes": outcomes}}))
"""


def _classify_with(blocked: tuple[str, ...]) -> dict[str, object]:
    program = _PROGRAM.format(blocked=blocked)
    output = subprocess.check_output([sys.executable, "-c", program, str(FIXTURES)], text=True)
    result: dict[str, object] = json.loads(output)
    return result


@pytest.mark.parametrize(
    ("blocked", "decoder"),
    [((), "orjson"), (("orjson",), "msgspec"), (("orjson", "msgspec"), "json")],
)
def test_every_decoder_gives_the_same_outcomes(blocked: tuple[str, ...], decoder: str) -> None:
    reference = _classify_with(())
    result = _classify_with(blocked)
    assert result["decoder"] == decoder
    assert result["outcomes"] == reference["outcomes"]
    outcomes = result["outcomes"]
    assert isinstance(outcomes, dict)
    for name, expected in EXPECTED.items():
        assert outcomes[name] == [expected.outcome, expected.stop_reason], name
    assert outcomes["edge/chat-tool-arguments-two-values.sse"][0] == "payload_error"
    assert outcomes["edge/chat-invalid-json-event.sse"][0] == "payload_error"
