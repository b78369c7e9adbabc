"""No declared secret reaches Temporal: each path a tool, a model or an error can write through.

One agent writes its secrets through every path at once, across a continue-as-new; then every
payload of every run of the chain is decoded and searched, with the raw protobuf, in every form
a secret takes (JSON-escaped, `repr`, percent-encoded): zero hits.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from tests._secret_oracle import encodings
from tests.conftest import keep_history, result_of, secret, task_failures
from tests.test_context import ECHO
from toren import client as toren_client
from toren.agent._types import ApprovalQuestion
from toren.worker import serve
from toren.worker._redact import MARKER, Redactor
from toren.worker.activities import AgentRuntime
from toren.worker.models import ModelReply, ModelRequest, ScriptedModel

LEAK = """
from urllib.parse import quote, quote_plus
from temporalio.exceptions import ApplicationError
from toren import Attachment, ToolResult, define_tool

async def leak(args, ctx):
    key, quoted, region = (ctx.env[n] for n in ("REDACT_KEY", "REDACT_QUOTED", "REDACT_REGION"))
    path = args["path"]
    if path == "result":
        return {"quoted": quoted, "key": key}
    if path == "state":
        await ctx.set_value("k", key)
        await ctx.set_value(key, {"nested": [quoted]})
        return "stored"
    if path == "recall":
        return "k is " + str(await ctx.get_value("k"))
    if path == "emit":
        ctx.emit("e-" + key, {"quoted": quoted, "region": region})
        return "emitted"
    if path == "inject":
        await ctx.inject_message("user", f"psst {key} {quoted}")
        return "injected"
    if path == "queue":
        ctx.queue_tool("echo", {"text": key + quoted})
        return "queued " + key
    if path == "invoke":
        found = await ctx.invoke_tool("echo", {"text": quoted})
        return f"{found.status}: {found.text}"
    if path == "invoke_var":
        found = await ctx.invoke_tool("inner", {})
        return f"{found.status}: {found.text}"
    if path == "optional":
        return "region " + region
    if path == "url":
        phrase = ctx.env["REDACT_PHRASE"]
        return f"GET https://api.example/v1/{quote(phrase)}?token={quote_plus(phrase)}"
    if path == "attachment":
        return ToolResult(result="attached " + key, attachments=[
            Attachment(name=f"{key}.txt", mime_type="text/plain", data=quoted.encode())])
    if path == "raise":
        raise ValueError(f"bad {quoted!r} and {key}")
    return "filler"

tool = define_tool(
    description="Writes the agent's secrets through one path.",
    input={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    uses=["echo", "inner"],
    handler=leak,
)
"""

INNER = """
from toren import Variable, define_tool

def inner(args, ctx):
    raise RuntimeError("variable is " + ctx.env["REDACT_VAR"])

tool = define_tool(
    description="Reads a secret variable and fails.",
    variables=[Variable("REDACT_VAR", type="secret")],
    handler=inner,
)
"""

FLAKY = """
from temporalio.exceptions import ApplicationError
from toren import define_tool

def flaky(args, ctx):
    raise ApplicationError("upstream refused " + ctx.env["REDACT_KEY"], {"echo": ctx.env["REDACT_QUOTED"]})

tool = define_tool(description="Always asks Temporal to retry.", max_attempts=2, handler=flaky)
"""

PATHS = ["result", "state", "emit", "inject", "queue", "invoke", "invoke_var", "optional",
         "url", "attachment", "raise"]  # fmt: skip


class FailsOnce:
    """A model whose first call fails retryably with a secret in its message and details."""

    def __init__(self, model: ScriptedModel, key: str) -> None:
        self.model = model
        self.key = key
        self.failed = False

    async def complete(self, request: ModelRequest) -> ModelReply:
        if not self.failed:
            self.failed = True
            raise ApplicationError(f"provider hiccup for {self.key}", self.key)
        return await self.model.complete(request)


def _payloads(message: Message) -> Iterator[Payload]:
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items: Any = value.values()
        elif isinstance(value, Message):
            items = [value]
        else:  # a repeated field
            items = value
        for item in items:
            if isinstance(item, Message):
                yield from _payloads(item)


async def test_no_secret_reaches_any_payload_of_the_chain(
    client: Client, make_agent: Callable[..., Path], monkeypatch: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    key = secret(f"key-{tag}-live")
    quoted = secret(f'q"uo\\té-{tag}')  # a quote, a backslash and non-ASCII: escaped in JSON
    region = secret(f"region-{tag}")
    variable = secret(f"var-{tag}-tok")
    phrase = secret(f"pass phrase/{tag}+x")  # in a URL: `+` or `%20` for the space, `/` or not
    for name, value in [("REDACT_KEY", key), ("REDACT_QUOTED", quoted),
                        ("REDACT_REGION", region), ("REDACT_VAR", variable),
                        ("REDACT_PHRASE", phrase)]:  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TOREN_ATTACHMENTS", str(tmp_path / "store"))

    seen: list[list[dict[str, Any]]] = []

    def final(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return f"final answer {key}"  # a model repeating a secret: redacted too

    calls = [{"tool_calls": [{"name": "leak", "args": {"path": p}}]} for p in PATHS]
    fillers = [{"tool_calls": [{"name": "leak", "args": {"path": "filler"}}]}] * 12
    steps: list[Any] = [
        *calls,
        {"tool_calls": [{"name": "flaky", "args": {}}]},
        *fillers,
        {"tool_calls": [{"name": "leak", "args": {"path": "recall"}}]},
        *calls,
        final,
    ]
    model = FailsOnce(ScriptedModel(steps), key)
    folder = make_agent(
        tools={"leak": LEAK, "echo": ECHO, "inner": INNER, "flaky": FLAKY},
        env={
            "required": ["REDACT_KEY", "REDACT_QUOTED", "REDACT_PHRASE"],
            "optional": {"REDACT_REGION": "eu"},
        },
        limits={"maxStepsPerTask": 100, "continueAsNewAfterEvents": 100},
    )
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
        latest = client.get_workflow_handle(handle.id)
        state = await latest.query("state")
        events = await latest.query("events")

    # The run did its work, with the marker where each secret was.
    assert result.text == f"final answer {MARKER}"
    assert state == {"k": MARKER, MARKER: {"nested": [MARKER]}}
    assert events[0]["event"] == f"e-{MARKER}"
    assert events[0]["data"] == {"quoted": MARKER, "region": MARKER}
    (messages,) = seen
    # Without the idempotency key ECHO appends.
    tools = [m["content"].split(" key=")[0] for m in messages if m.get("role") == "tool"]
    expected = [
        json.dumps({"quoted": MARKER, "key": MARKER}, ensure_ascii=False),
        "stored",
        "emitted",
        "injected",
        f"queued {MARKER}",
        f"echo:{MARKER}{MARKER}",  # the queued call, with redacted args
        f"success: echo:{MARKER}",
        f"error: tool inner failed: RuntimeError: variable is {MARKER}",
        f"region {MARKER}",
        f"GET https://api.example/v1/{MARKER}?token={MARKER}",
    ]
    assert tools[: len(expected)] == expected
    assert tools[len(expected)].startswith(f"attached {MARKER}\n[attachments: {MARKER}.txt (")
    assert tools[len(expected) + 1] == f"tool leak failed: ValueError: bad '{MARKER}' and {MARKER}"
    assert tools[len(expected) + 2] == "tool flaky failed closed after 2 attempts"
    assert f"k is {MARKER}" in tools
    assert {"role": "user", "content": f"psst {MARKER} {MARKER}"} in messages

    chain = await toren_client.histories(client, handle.id)
    assert len(chain) >= 2, "the run should have continued as new"
    everything: list[bytes] = []
    for history in chain:
        assert not task_failures(history)
        raw = History(events=history.events).SerializeToString()
        keep_history(client, history)  # the secret oracle searches it too
        everything.append(raw)
        for event in history.events:
            for payload in _payloads(event):
                decoded = client.data_converter.payload_converter.from_payloads([payload])[0]
                everything.append(json.dumps(decoded, ensure_ascii=False, default=str).encode())
    assert sum(1 for b in everything if MARKER.encode() in b) > 10
    # The oracle's own encodings, not the redactor's `forms`: a form it forgets is searched.
    hits = [
        (s, f)
        for s in (key, quoted, region, variable, phrase)
        for f in encodings(s)
        for blob in everything
        if f in blob
    ]
    assert not hits
    # The failures themselves are in history (the last attempt's, and the one before a retry).
    assert any(f"upstream refused {MARKER}".encode() in b for b in everything)
    assert any(f"provider hiccup for {MARKER}".encode() in b for b in everything)


async def test_a_broken_approval_predicate_logs_no_secret(
    make_agent: Callable[..., Path], monkeypatch: Any, caplog: Any
) -> None:
    key = secret(f"pred-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("PRED_KEY", key)
    folder = make_agent(
        tools={
            "gate": """
from toren import define_tool

def check(args):
    raise RuntimeError("predicate saw " + __import__("os").environ["PRED_KEY"])

tool = define_tool(description="Gated.", approval=check, handler=lambda a, c: "ran")
"""
        },
        env={"required": ["PRED_KEY"]},
    )
    runtime = AgentRuntime.load([folder], os.environ)
    with caplog.at_level(logging.WARNING, logger="toren"):
        check = await runtime.check_approval(ApprovalQuestion(folder.name, "gate", "c1", {}))
    assert check.gated
    assert f"RuntimeError('predicate saw {MARKER}')" in caplog.text
    assert key not in caplog.text


def test_every_form_of_a_secret_is_redacted() -> None:
    value = 'pa"ss\\wörd/+ 1'
    redactor = Redactor([value, "abc"])
    assert redactor.secrets == (value,)  # too short to redact: "abc"
    # Each text holds the secret in one encoding; after redaction the marker stands where the
    # whole encoded form was, and nothing else changed.
    cases = {
        value: MARKER,
        f"x {value} y": f"x {MARKER} y",
        json.dumps({"v": value}): json.dumps({"v": MARKER}),
        json.dumps({"v": value}, ensure_ascii=False): json.dumps({"v": MARKER}),
        json.dumps(json.dumps({"v": value})): json.dumps(json.dumps({"v": MARKER})),
        repr({"v": value}): repr({"v": MARKER}),
        f"https://h/?k={quote(value, safe='')}&n=1": f"https://h/?k={MARKER}&n=1",
        f"https://h/{quote(value)}/x": f"https://h/{MARKER}/x",  # `/` left as it is
        f"https://h/?k={quote_plus(value)}&n=1": f"https://h/?k={MARKER}&n=1",  # `+` for space
    }
    for text, expected in cases.items():
        assert redactor.text(text) == expected, text
    url = "postgresql://agent:s%40cret-pw@db/shop"
    assert (
        Redactor([url]).text("auth failed for s@cret-pw at db") == f"auth failed for {MARKER} at db"
    )
    assert redactor.value({value: [value, 1, (value,)]}) == {MARKER: [MARKER, 1, (MARKER,)]}


@pytest.mark.parametrize("timeout_ms", [None, 5000])
async def test_a_handlers_own_timeout_error_is_its_failure(
    client: Client, make_agent: Callable[..., Path], timeout_ms: int | None
) -> None:
    folder = make_agent(
        tools={
            "fetch": f"""
from toren import define_tool

def fetch(args, ctx):
    raise TimeoutError("upstream took too long")

tool = define_tool(description="Fetch.", timeout_ms={timeout_ms}, handler=fetch)
"""
        },
        script=[{"tool_calls": [{"name": "fetch", "args": {}}]}, "saw: {last_tool_result}"],
    )
    async with serve(client, [folder]):
        result = await result_of(toren_client.run_agent(client, folder.name, "go"))
    assert result.text == "saw: tool fetch failed: TimeoutError: upstream took too long"
