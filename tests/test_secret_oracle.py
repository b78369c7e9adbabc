"""The secret oracle finds a secret in each of its encodings, in each place history keeps text.

`tests/conftest.py::secret_oracle` runs `tests._secret_oracle.search` after every test over the
histories it made; these tests show the search itself works, without asking `toren.worker._redact`.
"""

from __future__ import annotations

import ast
import base64
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from temporalio.api.common.v1 import Memo, SearchAttributes
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure
from temporalio.api.history.v1 import (
    ActivityTaskFailedEventAttributes,
    HistoryEvent,
    WorkflowExecutionStartedEventAttributes,
)
from temporalio.client import Client
from temporalio.converter import default

from tests._secret_oracle import encodings, search

SECRET = 'pa"ss\\wörd/+ 1 tok'
"""A quote, a backslash, non-ASCII, a slash, a plus and spaces: each encoding differs."""

converter = default().payload_converter


def _payload(value: Any) -> Any:
    return converter.to_payloads([value])[0]


def _encoded(secret: str) -> dict[str, str | bytes]:
    """The secret written down as a tool or a library might, inside other text."""
    raw = secret.encode()
    return {
        "raw": f"before {secret} after",
        "json": json.dumps({"v": secret}),
        "json ascii off": json.dumps({"v": secret}, ensure_ascii=False),
        "json in json": json.dumps(json.dumps({"v": secret})),
        "json x3": json.dumps(json.dumps(json.dumps([secret]))),
        "repr": repr({"v": secret}),
        "quote": f"https://h/{quote(secret)}?x=1",
        "quote safe=''": f"https://h/?k={quote(secret, safe='')}",
        "quote_plus": f"https://h/?k={quote_plus(secret)}&n=2",
        "base64": base64.b64encode(b"x" + raw + b"yz").decode(),
        "base64 aligned 2": base64.b64encode(b"xy" + raw).decode(),
        "urlsafe base64": base64.urlsafe_b64encode(b"head:" + raw).decode(),
        "hex": "0x" + raw.hex(),
        "HEX": raw.hex().upper(),
        "percent bytes": "".join(f"%{b:02X}" for b in raw),
        "utf-16": ("<" + secret + ">").encode("utf-16-le"),
    }


PLACES = ["input", "memo", "search attribute", "failure", "details"]


@pytest.mark.parametrize(
    ("form", "place"),
    [
        (form, place)
        for form, text in _encoded(SECRET).items()
        for place in PLACES
        if not (place == "failure" and isinstance(text, bytes))  # a failure message is text
    ],
)
def test_each_encoding_is_found_in_each_place(form: str, place: str) -> None:
    text = _encoded(SECRET)[form]
    value: Any = text if isinstance(text, str) else base64.b64encode(text).decode()
    if isinstance(text, bytes):  # raw bytes reach history as a binary payload
        payload = converter.to_payloads([text])[0]
    else:
        payload = _payload({"nested": [value]})
    event = HistoryEvent(event_id=1)
    if place == "input":
        event.workflow_execution_started_event_attributes.CopyFrom(
            WorkflowExecutionStartedEventAttributes(input={"payloads": [payload]})
        )
    elif place == "memo":
        event.workflow_execution_started_event_attributes.CopyFrom(
            WorkflowExecutionStartedEventAttributes(memo=Memo(fields={"m": payload}))
        )
    elif place == "search attribute":
        event.workflow_execution_started_event_attributes.CopyFrom(
            WorkflowExecutionStartedEventAttributes(
                search_attributes=SearchAttributes(indexed_fields={"TorenStatus": payload})
            )
        )
    else:
        failure = (
            Failure(message=str(text), stack_trace="")
            if place == "failure"
            else Failure(
                message="failed",
                application_failure_info=ApplicationFailureInfo(details={"payloads": [payload]}),
            )
        )
        event.activity_task_failed_event_attributes.CopyFrom(
            ActivityTaskFailedEventAttributes(failure=failure)
        )
    hits = search([event], [SECRET], converter.from_payload)
    assert hits, (form, place)
    assert search([event], ["some-other-secret-value"], converter.from_payload) == []


def test_the_encodings_are_its_own() -> None:
    import tests._secret_oracle as oracle

    tree = ast.parse(Path(oracle.__file__).read_text())
    imported = [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    ]
    assert not [m for m in imported if m.startswith("toren")]  # never asks the redactor
    needles = encodings("a b+c/d-e")
    assert b"a+b%2Bc%2Fd-e" in needles and b"a%20b%2Bc/d-e" in needles
    assert b"a b+c/d-e".hex().encode() in needles
    assert all(len(n) >= 6 for n in needles)


async def test_a_real_history_is_searched_in_memo_input_and_termination(client: Client) -> None:
    leaked = f"oracle-{uuid.uuid4().hex[:8]}-pw"  # not registered: this test expects hits
    handle = await client.start_workflow(
        "AgentRun",
        {"prompt": quote_plus(leaked + " x")},
        id=f"oracle-{uuid.uuid4().hex[:8]}",
        task_queue=f"oracle-nobody-{uuid.uuid4().hex[:6]}",  # no worker: it only waits
        memo={"note": base64.b64encode(leaked.encode()).decode()},
    )
    await handle.terminate(reason=f"done with {leaked.encode().hex()}")
    history = await handle.fetch_history()
    hits = search(history.events, [leaked], client.data_converter.payload_converter.from_payload)
    places = {hit.split(" in ")[1].split(".")[1] for hit in hits}
    assert {"workflow_execution_started_event_attributes",
            "workflow_execution_terminated_event_attributes"} <= places, hits  # fmt: skip
    assert any("memo" in hit for hit in hits) and any("input" in hit for hit in hits)
