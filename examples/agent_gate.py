"""An agent loop whose tools run only through otelsse's tool-execution gate.

    python -m otelsse demo --provider-only          # terminal 1: the fake provider
    python examples/agent_gate.py [--scenario tool_call_invalid | truncated | ...]

The openai SDK streams a chat completion; ``with_streaming_response`` hands over the raw HTTP
response, which ``otelsse.ToolGate`` reads instead of the SDK's parser. The gate walks every tool
call through the gate's states (``RECEIVING -> ITEM_OPEN -> ITEM_TERMINAL -> PARSED ->
SCHEMA_VALID -> POLICY_APPROVED -> EXECUTED``, or ``QUARANTINED``, ``POLICY_DENIED``...) and calls
a tool only once the response's terminal event arrived, the arguments are exactly one JSON object
that passes the tool's JSON Schema, the policy approved the call and the SQLite ledger holds that
decision. The loop: run the gate -> send what the tools returned as the next request -> stop at a
final answer. Each call prints its sanitized record (``call.record()``: ids, sizes, statuses,
never arguments or results); the console shows the ``otelsse.stream`` span of each response, an
``otelsse.gate`` span per stream the gate read and an ``otelsse.tool_call`` span per call.

Two tools work in a temporary directory, the workspace; the SQLite ledger sits beside it, out of
the tools' reach. The policy refuses any call whose file resolves outside the workspace (``..``,
an absolute path, a symlink out); the executors check again before they touch the file. The run
id is the agent loop's: every stream the gate reads under it is one numbered attempt, its
``otelsse.gate`` span linked to the earlier ones. Each request runs under an ``agent turn`` span
of the application's, so that its ``otelsse.stream`` and ``otelsse.gate`` spans share a trace.

What is real and what is simulated:

- Real: the SDK, HTTP, the fake provider's streams, the gate, the policy, the ledger file, the
  files read and written.
- The fake provider knows one tool, ``get_weather``, and calls it (``{"city": "Paris", ...}``)
  whenever a request offers tools. Here ``get_weather`` is the read-only tool: it reads the
  city's file from the workspace, a weather cache the example writes first.
- The fake provider does not read tool results: the follow-up request asks it for its
  ``complete`` scenario, the final answer a real model would write from them, and its text is
  canned.
- It never calls ``write_file``, the mutating tool. That model turn is written by hand in the
  chat-completions wire format and fed to the same gate as bytes: four parallel calls, one
  inside the workspace (run) and three outside it (refused); then the same turn cut in the
  middle of its arguments (quarantined).
- The replay asks the provider for the same response again (the ``x-otelsse-demo-job`` header
  fixes its response and call ids) and a second gate on the same ledger file reads it under the
  same run id: ``REPLAYED``, the tool does not run twice.

``--scenario`` picks how the first response ends. ``tool_call_invalid`` (arguments cut in half,
then a normal tool stop): the call ends ``QUARANTINED`` (``invalid_json``) and no tool runs. With
``truncated``, ``timeout``, ``provider_error`` or ``incomplete`` the fake provider sends text, not
a tool call: the gate refuses the stream with no call to quarantine, and the agent stops there
(the hand-written cut turn above shows a cut call ending ``QUARANTINED``). ``rate_limited``: the
SDK raises before any stream. The ``write_file`` turns run whatever the scenario.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
from _common import TIMEOUT, instrument, parse_args
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)
from opentelemetry.trace import Tracer

import otelsse

MODEL = "gpt-4o-mini"
#: Every turn after the first could ask for more tools; an agent bounds its loop.
MAX_TURNS = 4
SCENARIO_HEADER = "x-otelsse-demo-scenario"
#: The fake provider builds its response and call ids from this header: the same value, the
#: same ids.
JOB_HEADER = "x-otelsse-demo-job"
CHAT = "openai.chat_completions"
QUESTION: ChatCompletionMessageParam = {
    "role": "user",
    "content": "What is the weather in Paris? Check the workspace.",
}
#: The run id of a loop where a tool ran, and the headers of its first request.
FirstTurn = tuple[str, dict[str, str]]


def _function(name: str, description: str, properties: dict[str, Any], *required: str) -> Any:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }
    function = {"name": name, "description": description, "parameters": schema}
    return {"type": "function", "function": function}


#: Sent with every request and registered with the gate: the gate checks each call against its
#: tool's JSON Schema, and quarantines a call to any other name.
TOOLS = [
    _function(
        "get_weather",  # the fake provider's one tool; read-only here
        "Current weather for a city, from the workspace's weather cache.",
        {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "city",
    ),
    _function(
        "write_file",  # mutating
        "Write a text file in the workspace.",
        {"path": {"type": "string"}, "text": {"type": "string"}},
        "path",
        "text",
    ),
]


class Workspace:
    """The tools' directory, the policy that keeps them in it, and the tools themselves."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()  # e.g. /tmp is itself a symlink on some systems
        self.ran: list[str] = []  # the tools the executors ran, in order

    def target(self, call: str, arguments: dict[str, Any]) -> Path:
        """The file a call touches, resolved: symlinks followed, ``..`` collapsed."""
        if call == "get_weather":
            relative = Path("weather", f"{arguments['city']}.json")
        else:
            relative = Path(arguments["path"])  # an absolute path replaces the root
        return (self.root / relative).resolve()

    def inside(self, path: Path) -> bool:
        return path.is_relative_to(self.root)

    def policy(self, view: otelsse.ToolCallView) -> otelsse.Decision:
        """Approve a call only if the file it touches is inside the workspace."""
        if view.name not in ("get_weather", "write_file"):
            return otelsse.Decision.DENY
        if not self.inside(self.target(view.name, view.arguments)):
            return otelsse.Decision.DENY
        return otelsse.Decision.APPROVE

    def executors(self) -> dict[str, Callable[[Any], Any]]:
        return {"get_weather": self.get_weather, "write_file": self.write_file}

    def _checked(self, call: str, arguments: dict[str, Any]) -> Path:
        # Checked again at execution: a symlink may have moved since the policy looked.
        path = self.target(call, arguments)
        if not self.inside(path):
            raise PermissionError("outside the workspace")
        self.ran.append(call)
        print(f"  the executor of {call} ran")
        return path

    def get_weather(self, arguments: dict[str, Any]) -> str:
        return self._checked("get_weather", arguments).read_text()

    def write_file(self, arguments: dict[str, Any]) -> str:
        path = self._checked("write_file", arguments)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(arguments["text"])
        return f"wrote {len(arguments['text'])} characters"


def show(result: otelsse.GateResult) -> None:
    """Each call's sanitized record, then how the stream itself ended."""
    for call in result.calls:
        print(f"  record {json.dumps(call.record())}")
    if result.fault is not None:
        reason = result.disconnect_reason
        print(f"  the gate refused the stream: {result.fault} (disconnect: {reason})")


def follow_up(result: otelsse.GateResult) -> list[ChatCompletionMessageParam]:
    """The assistant's tool calls and one tool message per call, for the next request."""
    assert result.stream is not None  # an accepted stream: its calls' arguments are whole
    arguments = {call.id: json.dumps(call.arguments) for call in result.stream.tool_calls}
    asked: list[ChatCompletionMessageFunctionToolCallParam] = []
    answers: list[ChatCompletionMessageParam] = []
    for call in result.calls:
        call_id, name = call.call_id or "", call.tool_name or ""
        asked.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments[call.call_id]},
            }
        )
        if call.state is otelsse.ToolCallState.EXECUTED:
            content = str(call.output)
        else:  # the model must hear about every call it made, run or not
            content = f"not run: {call.state.value}"
        answers.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return [{"role": "assistant", "tool_calls": asked}, *answers]


class Agent:
    """The model's client, the tools' workspace, and the application's own tracer."""

    def __init__(self, client: openai.OpenAI, workspace: Workspace, tracer: Tracer) -> None:
        self.client = client
        self.workspace = workspace
        self.tracer = tracer

    def turn(
        self,
        gate: otelsse.ToolGate,
        messages: list[ChatCompletionMessageParam],
        headers: dict[str, str],
        run_id: str,
    ) -> otelsse.GateResult:
        """One request, its stream read by ``gate``: under one span of the application's, the
        ``otelsse.stream`` span and the ``otelsse.gate`` span share a trace."""
        with (
            self.tracer.start_as_current_span("agent turn"),
            self.client.chat.completions.with_streaming_response.create(
                model=MODEL,
                messages=messages,
                tools=TOOLS,
                stream=True,
                extra_headers=headers,
            ) as response,
        ):
            # The raw httpx2 response: the gate reads it, stops at the terminal event, closes it.
            return gate.run(
                response.http_response, CHAT, execute=self.workspace.executors(), run_id=run_id
            )


def agent_loop(agent: Agent, gate: otelsse.ToolGate, scenario: dict[str, str]) -> FirstTurn | None:
    """Run the loop; return the run id and the first request's headers when a tool ran."""
    run_id = uuid.uuid4().hex
    print(f"== the agent loop, run {run_id}")
    messages = [QUESTION]
    first = {**scenario, JOB_HEADER: f"{run_id[:12]}-1"}
    for turn in range(1, MAX_TURNS + 1):
        # The first turn ends the way --scenario says; later ones are asked for a final answer.
        later = {SCENARIO_HEADER: "complete", JOB_HEADER: f"{run_id[:12]}-{turn}"}
        headers = first if turn == 1 else later
        print(f"-- turn {turn}")
        try:
            result = agent.turn(gate, messages, headers, run_id)
        except (openai.OpenAIError, httpx2.HTTPError) as error:
            print(f"the application got {type(error).__name__}")
            return None
        show(result)
        if result.stream is None:
            ran = len(agent.workspace.ran)
            print(f"the application got no answer: {result.fault}, {ran} tool runs")
            return None
        if not result.calls:
            print(
                f"the application got a final answer of {len(result.stream.text)} characters "
                f"after {len(agent.workspace.ran)} tool runs"
            )
            return (run_id, first) if agent.workspace.ran else None
        messages += follow_up(result)
    print(f"the application got no final answer in {MAX_TURNS} turns")
    return None


def replay(agent: Agent, gate: otelsse.ToolGate, first: FirstTurn) -> None:
    """The first turn's response again, read by ``gate``: a second gate on the same ledger."""
    run_id, headers = first
    print(f"== replay: the first response again, a second gate on the same ledger, run {run_id}")
    show(agent.turn(gate, [QUESTION], headers, run_id))


def chat_chunks(
    response_id: str, calls: list[tuple[str, dict[str, Any]]], *, cut: bool = False
) -> list[bytes]:
    """A chat-completions stream calling ``write_file`` once per ``(call id, arguments)``, each
    call's arguments in two deltas; with ``cut`` it stops in the middle of the first call's."""
    base = {"id": response_id, "object": "chat.completion.chunk", "created": 0, "model": MODEL}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

    chunks = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, arguments) in enumerate(calls):
        opened = {"index": index, "id": call_id, "type": "function"}
        chunks.append(chunk({"tool_calls": [{**opened, "function": {"name": "write_file"}}]}))
        text = json.dumps(arguments)
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            delta = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [delta]}))
            if cut:
                return chunks  # the connection dropped after half of the arguments
    return [*chunks, chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def mutating_tool(gate: otelsse.ToolGate, workspace: Workspace, elsewhere: Path) -> None:
    """The turn the fake provider cannot make, written by hand and read by the same gate."""
    (workspace.root / "link").symlink_to(elsewhere, target_is_directory=True)
    text = "Paris is clear today."
    turn = [
        ("call_inside", {"path": "notes/paris.txt", "text": text}),
        ("call_dotdot", {"path": "notes/../../outside.txt", "text": text}),
        ("call_absolute", {"path": str(elsewhere / "absolute.txt"), "text": text}),
        ("call_symlink", {"path": "link/escape.txt", "text": text}),
    ]
    run_id = uuid.uuid4().hex
    executors = workspace.executors()
    print(f"== write_file: a model turn written by hand, run {run_id}")
    result = gate.run(
        chat_chunks("chatcmpl-by-hand-1", turn), CHAT, execute=executors, run_id=run_id
    )
    show(result)
    print("== write_file: the same turn cut in the middle of its first call's arguments")
    cut = chat_chunks("chatcmpl-by-hand-2", turn, cut=True)
    show(gate.run(cut, CHAT, execute=executors, run_id=run_id))
    named = [workspace.target("write_file", arguments) for _, arguments in turn]
    inside, *outside = (path.is_file() for path in named)
    print(f"files the calls named: inside the workspace {inside}, outside it {sum(outside)}")


def main() -> None:
    base_url, scenario = parse_args(__doc__)
    tracer_provider, meter_provider = instrument()
    client = openai.OpenAI(
        base_url=f"{base_url}/v1",
        api_key="not-needed-for-the-fake-provider",
        max_retries=0,  # a retry is a new attempt: the gate's to number, not the SDK's to hide
        timeout=TIMEOUT,
    )
    with tempfile.TemporaryDirectory() as directory:
        # The tools' workspace; the ledger beside it, out of the tools' reach; another directory
        # for the symlink out.
        root = Path(directory).resolve()
        workspace = Workspace(root / "workspace")
        (workspace.root / "weather").mkdir(parents=True)
        (workspace.root / "weather" / "Paris.json").write_text('{"sky": "clear", "celsius": 18}')
        (root / "elsewhere").mkdir()
        ledger_path = root / "ledger.sqlite3"

        def gate(ledger: otelsse.SQLiteLedger) -> otelsse.ToolGate:
            return otelsse.ToolGate(
                TOOLS,
                workspace.policy,
                ledger,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
            )

        agent = Agent(client, workspace, tracer_provider.get_tracer("agent_gate"))
        ledger = otelsse.SQLiteLedger(ledger_path)
        try:
            first = agent_loop(agent, gate(ledger), scenario)
            if first is not None:
                # As after a restart: a new gate, a new connection to the same ledger file.
                second = otelsse.SQLiteLedger(ledger_path)
                try:
                    replay(agent, gate(second), first)
                finally:
                    second.close()
            mutating_tool(gate(ledger), workspace, root / "elsewhere")
        finally:
            ledger.close()
    print(f"executors ran: {', '.join(workspace.ran) or 'none'}")


if __name__ == "__main__":
    main()
