"""A secret inside a structured result is redacted leaf by leaf, before it is serialized.

A `repr` or a bytes' `str` of a secret holding a quote, a backslash or non-ASCII is already an
escaped form of it; serialized into a JSON result it is escaped once more. Each leaf (string,
key, bytes, anything JSON writes as `str`) is redacted before that, then the text as always.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests.conftest import fetch_history, result_of, secret, task_failures
from toren import client as toren_client
from toren._events import render
from toren._redact import MARKER
from toren.worker import serve

DEBUG = """
import os
from pydantic import BaseModel
from toren import define_tool

class Holder:
    def __init__(self, value):
        self.value = value
    def __repr__(self):
        return f"Holder(value={self.value!r})"

class Shown(BaseModel):
    note: str

def debug(args, ctx):
    key, other = ctx.env["STRUCT_KEY"], ctx.env["STRUCT_OTHER"]
    if args["as"] == "model":
        return Shown(note=repr({"k": other}))
    return {
        "debug": repr({"k": key}),
        "b": str(key.encode()),
        "raw": key.encode(),
        "obj": Holder(other),
        "nested": [{"deep": repr([other])}],
        repr(key): "a key",
    }

tool = define_tool(
    description="Returns its secrets inside a structured value.",
    input={"type": "object", "properties": {"as": {"type": "string"}}, "required": ["as"]},
    handler=debug,
)
"""


def escaped_forms(value: str) -> set[str]:
    """The secret, its `repr` and its bytes' `repr`, each JSON-escaped once and twice."""
    found = {value, repr(value)[1:-1], repr(value.encode())[2:-1]}
    for _ in range(2):
        found |= {json.dumps(v, ensure_ascii=a)[1:-1] for v in found for a in (True, False)}
    return found


def payloads(message: Message) -> Iterator[Payload]:
    """Every `Payload` anywhere in `message`."""
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
        else:
            items = value
        for item in items:
            if isinstance(item, Message):
                yield from payloads(item)


async def test_a_secret_in_a_repr_or_bytes_inside_a_dict_is_redacted(
    client: Client, make_agent: Callable[..., Path], monkeypatch: Any
) -> None:
    tag = uuid.uuid4().hex[:8]
    key = secret(f'q"uo\\té-{tag}')  # a quote, a backslash, non-ASCII
    other = secret(f'it\'s "both" \\-{tag}')  # both quotes: its repr escapes one of them
    monkeypatch.setenv("STRUCT_KEY", key)
    monkeypatch.setenv("STRUCT_OTHER", other)
    folder = make_agent(
        tools={"debug": DEBUG},
        env={"required": ["STRUCT_KEY", "STRUCT_OTHER"]},
        script=[
            {"tool_calls": [{"id": "d", "name": "debug", "args": {"as": "dict"}}]},
            {"tool_calls": [{"id": "m", "name": "debug", "args": {"as": "model"}}]},
            "done",
        ],
    )
    seen: list[str] = []
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        assert (await result_of(handle)).text == "done"
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)

    for event in history.events:
        for payload in payloads(event):
            decoded = client.data_converter.payload_converter.from_payloads([payload])[0]
            seen.append(json.dumps(decoded, ensure_ascii=False, default=str))
            seen.append(json.dumps(decoded, default=str))
    seen.append(History(events=history.events).SerializeToString().decode("utf-8", "replace"))
    hits = sorted({f for s in (key, other) for f in escaped_forms(s) for text in seen if f in text})
    assert hits == []
    # What the model was given: each leaf with the marker where the secret was.
    results = {
        e["callId"]: json.loads(e["result"])
        for e in render(history)
        if e["type"] == "ToolCallCompleted"
    }
    assert results["d"] == {
        "debug": f"{{'k': '{MARKER}'}}",
        "b": f"b'{MARKER}'",
        "raw": f"b'{MARKER}'",
        "obj": f"Holder(value='{MARKER}')",
        "nested": [{"deep": f"['{MARKER}']"}],
        f"'{MARKER}'": "a key",
    }
    assert results["m"] == {"note": f"{{'k': '{MARKER}'}}"}
