"""Real runs against a llama.cpp server that answers from a recording of the real one.

`fixtures/llamacpp/wire.jsonl` holds what toren sent a llama.cpp server (Qwen2.5-Coder-1.5B)
and what it answered (its README says what each line shows). `RecordedLlamaCpp` serves those
answers on 127.0.0.1, so these runs meet the real server's formats and failures without the
model: its tool calls, its HTTP 500 bursts, a reply cut at `max_tokens`, and made-up arguments.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import ROOT, fetch_history, result_of, secret, wait_for
from toren import client as toren_client
from toren.client._events import format_event, render
from toren.worker import serve

RECORDING = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures/llamacpp/wire.jsonl").read_text().splitlines()
]
MODEL = "openai/qwen2.5-coder-1.5b-instruct"
KEY = secret("sk-llamacpp-recorded-3f9e1c")
ARGUMENTS_NOT_JSON = 27
"""The line of the server's HTTP 500 for a request whose tool-call arguments are not JSON."""


def line(n: int) -> dict[str, Any]:
    """Line `n` of the recording (1-based, as its README counts)."""
    return RECORDING[n - 1]


def reply_text(n: int) -> str:
    return str(line(n)["response"]["choices"][0]["message"]["content"])


class RecordedLlamaCpp:
    """A llama.cpp server on 127.0.0.1 answering from the recording, in a thread.

    The n-th request gets the recorded answer (status and body) of the n-th line of
    `scenario`. Like the real server, a request carrying tool-call arguments that are not JSON
    gets its recorded HTTP 500 instead, whatever the scenario. `received` keeps every request
    body and `statuses` every answer's status.
    """

    def __init__(self, scenario: list[int]) -> None:
        self.scenario = list(scenario)
        self.received: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        recorded = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                status, body = recorded.answer(json.loads(self.rfile.read(length)))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        """The `/v1` root, for `OPENAI_BASE_URL`."""
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.received.append(body)
            if not all(map(_json_object, _arguments(body))):
                recorded = line(ARGUMENTS_NOT_JSON)
            elif self.scenario:
                recorded = line(self.scenario.pop(0))
            else:  # a 400 fails the run at once, with this message in its failure
                return 400, {"error": {"code": 400, "message": "the recording has no more replies"}}
            self.statuses.append(recorded["status"])
            return recorded["status"], recorded["response"]

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _arguments(body: dict[str, Any]) -> list[Any]:
    return [
        call["function"]["arguments"]
        for message in body.get("messages", [])
        for call in message.get("tool_calls") or []
    ]


def _json_object(text: Any) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (TypeError, ValueError):
        return False


@pytest.fixture
def llamacpp() -> Iterator[Callable[[list[int]], RecordedLlamaCpp]]:
    servers: list[RecordedLlamaCpp] = []

    def start(scenario: list[int]) -> RecordedLlamaCpp:
        servers.append(RecordedLlamaCpp(scenario))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


WEATHER = """
from pydantic import BaseModel
from toren import define_tool

class City(BaseModel):
    city: str

tool = define_tool(
    description="Get the current weather for a city.",
    input=City,
    handler=lambda args, ctx: {"city": args.city, "temperature_c": 18, "conditions": "light rain"},
)
"""


def weather_agent(make_agent: Callable[..., Path], **config: Any) -> Path:
    """The recorded weather agent: its system prompt and its one tool."""
    system = line(15)["request"]["messages"][0]["content"]
    return make_agent(tools={"get_weather": WEATHER}, instructions=system, model=MODEL, **config)


def environ(server: RecordedLlamaCpp, **more: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.base_url, **more}


def test_the_fake_refuses_what_the_real_server_refused(
    llamacpp: Callable[[list[int]], RecordedLlamaCpp],
) -> None:
    server = llamacpp([16])
    echoed = line(ARGUMENTS_NOT_JSON)["request"]  # the request that sent `"{"` back
    refused = httpx.post(f"{server.base_url}/chat/completions", json=echoed)
    assert refused.status_code == 500
    assert refused.json()["error"]["message"].startswith("Failed to parse tool call arguments")
    fixed = json.loads(json.dumps(echoed).replace('"arguments": "{"', '"arguments": "{}"'))
    assert httpx.post(f"{server.base_url}/chat/completions", json=fixed).status_code == 200


async def test_support_calls_park_and_made_up_arguments_never_reach_a_person(
    client: Client,
    llamacpp: Callable[[list[int]], RecordedLlamaCpp],
    tmp_path: Path,
    agent_name: str,
) -> None:
    # Lines 12-14: a refund (parks on its approval), then the same refund with a made-up `ref`,
    # then with a made-up `denied_by`; the recorded run asked a person about both.
    server = llamacpp([12, 13, 14])
    folder = tmp_path / agent_name
    shutil.copytree(ROOT / "examples/support", folder, ignore=shutil.ignore_patterns("mock_*"))
    config = yaml.safe_load((folder / "agent.yaml").read_text())
    config.update(name=agent_name, model=MODEL, limits={"maxStepsPerTask": 3})
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    env = environ(
        server, SUPPORT_DESK_TOKEN=secret("desk-7c1d0e"), SUPPORT_OUTBOX=str(tmp_path / "out")
    )
    async with serve(client, [folder], environ=env):
        handle = await toren_client.start_run(client, agent_name, "Refund order A-1001 for 149")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert [(c.call_id, c.tool, c.args) for c in calls] == [
            (
                "RquEwLkytif9CG2P5V291n3eKSo6dwEX",
                "refund_order",
                {"order_id": "A-1001", "amount": 149, "reason": "No issues."},
            )
        ]
        await toren_client.approve(client, handle.id, calls[0].call_id, by="tester")
        with pytest.raises(WorkflowFailureError) as err:
            await result_of(handle)  # the small model would go on: the step budget ends it
        transcript = await handle.query("transcript")
    assert getattr(err.value.cause, "type", None) == "BudgetExceeded"

    # The request is the recorded one, but for the schema, which now says no other keys.
    sent, recorded = server.received[0], line(12)["request"]
    assert sent["messages"] == recorded["messages"]
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names == ["lookup_order", "refund_order", "send_email"]
    refund = recorded["tools"][1]["function"]["parameters"]
    assert sent["tools"][1]["function"]["parameters"] == {**refund, "additionalProperties": False}
    allowed = "(allowed: order_id, amount, reason)"
    assert server.received[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "IQ2jQF6NinUPzGSOkkGXrD9dEyi33O6o",
        "content": f"invalid arguments for refund_order: unknown argument 'ref' {allowed}",
    }
    assert transcript[-1]["content"] == (
        f"invalid arguments for refund_order: unknown argument 'denied_by' {allowed}"
    )
    events = render(await fetch_history(client, handle.id))
    assert [e["callId"] for e in events if e["type"] == "ApprovalRequested"] == [calls[0].call_id]
    assert [e["result"] for e in events if e["type"] == "ToolCallCompleted"][0].startswith(
        "refunded 149.00 on order A-1001"
    )


async def test_a_burst_of_http_500_is_retried_and_every_attempt_is_logged(
    client: Client,
    llamacpp: Callable[[list[int]], RecordedLlamaCpp],
    make_agent: Callable[..., Path],
) -> None:
    # Lines 17-25: eight HTTP 500 (the server could not parse its model's output), then a reply.
    server = llamacpp([*range(17, 25), 25])
    folder = weather_agent(
        make_agent,
        maxTokens=512,
        modelSettings={"temperature": 0, "seed": 42},
        modelRetry={"initialIntervalS": 0.1, "maxIntervalS": 0.2},
    )
    prompt = line(17)["request"]["messages"][1]["content"]
    async with serve(client, [folder], environ=environ(server)):
        handle = await toren_client.start_run(client, folder.name, prompt)
        result = await result_of(handle)
    assert result.text == reply_text(25)
    assert server.statuses == [500] * 8 + [200]
    assert all(r["temperature"] == 0 and r["seed"] == 42 for r in server.received)
    events = render(await fetch_history(client, handle.id))
    model = [e for e in events if e["type"] in ("LlmCallFailed", "LlmCallCompleted")]
    assert [(e["type"], e["attempt"]) for e in model] == [
        *[("LlmCallFailed", n) for n in range(1, 9)],
        ("LlmCallCompleted", 9),
    ]
    for event in model[:-1]:
        assert (event["maxAttempts"], event["status"]) == (10, 500)
        assert event["error"].endswith(
            "returned HTTP 500: The model produced output that does not match the expected "
            "peg-native format"
        )
    lines = [format_event(e) for e in model]
    assert "attempt=3 maxAttempts=10 status=500 error=" in lines[2]


async def test_a_reply_cut_at_max_tokens_is_explained_and_never_echoed(
    client: Client,
    llamacpp: Callable[[list[int]], RecordedLlamaCpp],
    make_agent: Callable[..., Path],
) -> None:
    # Line 26: cut at max_tokens=8 inside a tool call (arguments "{"); the real server then
    # refused every request that echoed "{" (lines 27-36). Then the call, and the answer.
    server = llamacpp([26, 15, 16])
    folder = weather_agent(make_agent, maxTokens=8)
    prompt = line(26)["request"]["messages"][1]["content"]
    async with serve(client, [folder], environ=environ(server)):
        handle = await toren_client.start_run(client, folder.name, prompt)
        result = await result_of(handle)
    assert result.text == reply_text(16)
    assert server.statuses == [200, 200, 200]  # never the recorded 500
    assert all(_json_object(a) for body in server.received for a in _arguments(body))
    cut_call, told = server.received[1]["messages"][2:4]
    assert cut_call["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{}"}
    assert told["tool_call_id"] == "lgpVQ1c52raEPjtzbj2dtIvEay717jA8"
    assert told["content"].startswith(
        "invalid arguments for get_weather: your reply was cut at maxTokens=8 before these "
        "arguments were complete"
    )
    events = render(await fetch_history(client, handle.id))
    completed = [e for e in events if e["type"] == "LlmCallCompleted"]
    assert [e["finishReason"] for e in completed] == ["length", "tool_calls", "stop"]
    assert completed[0]["toolCalls"][0]["arguments"] == "{"  # the log shows what came
    assert "finishReason=length" in format_event(completed[0])
    first_result = next(e for e in events if e["type"] == "ToolCallCompleted")
    assert first_result["isError"] and "cut at maxTokens=8" in first_result["result"]
