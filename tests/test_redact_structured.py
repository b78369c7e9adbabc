"""A secret inside a structured result is redacted leaf by leaf, before it is serialized.

A `repr` or a bytes' `str` of a secret holding a quote, a backslash or non-ASCII is already an
escaped form of it; serialized into a JSON result it is escaped once more. Each leaf (string,
key, bytes, anything JSON writes as `str`) is redacted before that, then the text as always.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests._secret_oracle import search
from tests.conftest import fetch_history, result_of, secret, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve
from toren.worker._redact import MARKER

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
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        assert (await result_of(handle)).text == "done"
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)

    # The suite's own oracle (its encodings, not the redactor's), over every decoded payload.
    decode = client.data_converter.payload_converter.from_payload
    assert search(history.events, [key, other], decode) == []
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
