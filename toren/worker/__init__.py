"""The worker's side: everything that runs on a worker, and `serve` / `run_worker` to start one.

One Temporal worker per task queue serves agent folders. Here: loading an agent folder with its
tools (`_agent`, `_loaded`), the activities (`activities/`: model calls, tool calls, the loop's
local ones), the built-in tools and the sandbox (`tools/`), model providers (`models/`), MCP
sessions (`_mcp/`), live output (`_live`), redaction (`_redact`), HTTP (`_http`), prices,
telemetry and thread env secrets. Imports `agent`, `store`, `connect` and `workflows`; never
`client`, `cli` or `web`.

```python
await run_worker(["examples/support"])            # until SIGINT/SIGTERM

async with serve(client, ["examples/support"]):   # in tests and embedding code
    ...
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker, WorkerDeploymentConfig

from toren.connect import _search_attributes as search_attributes
from toren.connect._deployment import worker_deployment
from toren.connect._plugin import workflow_runner
from toren.errors import RunError
from toren.store import _payloads as storage
from toren.store._payloads import close_storage
from toren.store._retention import retention_days, run_retention
from toren.store._store import check_store, open_store
from toren.worker._agent import Agent
from toren.worker._mcp._pool import McpPool
from toren.worker._telemetry import Telemetry, providers_from_env
from toren.worker.activities._runtime import AgentRuntime
from toren.worker.models._base import ModelProvider
from toren.workflows import AgentRun, AgentThread

__all__ = ["build_workers", "run_worker", "serve"]

log = logging.getLogger("toren")

GRACEFUL_SHUTDOWN = timedelta(seconds=30)
"""How long in-flight calls may finish after SIGTERM before they are handed back to Temporal."""

MAX_CACHED_RUNS = 1000
"""Runs a worker keeps in memory between their workflow tasks (Temporal's workflow cache).

Chosen, not inherited (it is the SDK's default): a cached run parked on an approval costs the
worker ~100 KB (`bench.perf.concurrent --parked`: 97 KB, a bare workflow 90 KB), so the cache
bounds the memory of parked runs to ~100 MB. A smaller cache saves little and costs more: an
evicted run replays its whole history at its next task (an approval, a child's result), and a
worker serving more active runs than its cache holds replays at every task, quadratic in the
run's length. A worker's CPU serves far fewer than 1,000 runs at once (~20 turns/s on 2 cores).
"""


async def _check_search_attributes(client: Client, runtime: AgentRuntime) -> None:
    runtime.search_attributes = await search_attributes.registered(client)
    absent = [n for n in search_attributes.SEARCH_ATTRIBUTES if n not in runtime.search_attributes]
    if absent:
        log.warning(
            "namespace %r lacks search attributes %s: runs work, but the approval inbox "
            "(`toren pending` without a run id) cannot see them; run `toren setup` to add them, "
            "then restart this worker (it looks them up only at start)",
            client.namespace,
            ", ".join(absent),
        )


async def _attach_mcp(runtime: AgentRuntime) -> Callable[[], Awaitable[None]]:
    """List the agents' MCP servers (their tools join the agents before activities register).

    Returns what stops the pool's servers at shutdown.
    """
    pool = McpPool()
    try:
        await pool.attach(runtime.agents.values())
    except BaseException:
        # Refused (two tools of one name, say) after some servers started: stop them.
        await pool.close()
        raise
    runtime.mcp = pool
    return pool.close


def _log_version(versioning: WorkerDeploymentConfig) -> None:
    version = versioning.version
    log.info(
        "serving as Worker Deployment Version %s: a run finishes on the version it started on, "
        "a thread moves to the current version between messages. New runs come here once this "
        "version is current: temporal worker deployment set-current-version "
        "--deployment-name %s --build-id %s",
        version.to_canonical_string(),
        version.deployment_name,
        version.build_id,
    )


def build_workers(
    client: Client,
    runtime: AgentRuntime,
    graceful_shutdown_timeout: timedelta = GRACEFUL_SHUTDOWN,
    deployment: WorkerDeploymentConfig | None = None,
    task_queue: str | None = None,
) -> list[Worker]:
    """One worker per task queue of `runtime`'s agents (of one deployment version, if given).

    `task_queue`: one worker on that queue for every agent instead (`serve`).
    """
    queues = runtime.task_queues()
    if task_queue is not None:
        queues = {task_queue: list({a.agent.name: a for g in queues.values() for a in g}.values())}
    for queue, agents in queues.items():
        runtime.serve_on(queue, agents)
    return [
        Worker(
            client,
            task_queue=queue,
            workflows=[AgentRun, AgentThread],
            activities=runtime.activities(agents),
            workflow_runner=workflow_runner(),
            workflow_failure_exception_types=[RunError],
            graceful_shutdown_timeout=graceful_shutdown_timeout,
            interceptors=runtime.telemetry.interceptors(),
            max_cached_workflows=MAX_CACHED_RUNS,
            deployment_config=deployment,
        )
        for queue, agents in queues.items()
    ]


async def check_stores() -> None:
    """Fail now, naming the setting, if the store (or a separate payload store) cannot be used.

    Raises:
        ConfigError: `TOREN_STORE` (or `TOREN_PAYLOAD_STORE`) is unreachable or read-only.
    """
    await asyncio.to_thread(check_store)
    payloads = os.environ.get(storage.ENV_VAR, "").strip()
    if payloads:
        await asyncio.to_thread(check_store, open_store(payloads), storage.ENV_VAR)


@contextlib.asynccontextmanager
async def serve(
    client: Client,
    folders: Sequence[str | Path | Agent],
    *,
    environ: Mapping[str, str] | None = None,
    models: Mapping[str, ModelProvider] | None = None,
    model_override: str | None = None,
    graceful_shutdown_timeout: timedelta = GRACEFUL_SHUTDOWN,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    deployment: str | None = None,
    build_id: str | None = None,
    task_queue: str | None = None,
) -> AsyncIterator[AgentRuntime]:
    """Run workers for `folders` while the block runs; yields the runtime.

    `task_queue` serves every agent on that one queue instead of agent.yaml's (`toren fork
    --agent` serves a changed agent on a queue of its own, beside the agent's own workers).

    `tracer_provider` / `meter_provider` (OpenTelemetry's) turn on spans and metrics of model
    and tool calls (`toren.worker._telemetry`). `deployment` and `build_id` (default
    `TOREN_DEPLOYMENT` / `TOREN_BUILD_ID` of `environ`) make the workers that Worker Deployment
    Version (`toren.connect._deployment`); neither: unversioned.
    """
    environ = os.environ if environ is None else environ
    versioning = worker_deployment(deployment, build_id, environ)
    runtime = AgentRuntime.load(folders, environ, models, model_override)
    runtime.telemetry = Telemetry(tracer_provider, meter_provider)
    await check_stores()
    await _check_search_attributes(client, runtime)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(await _attach_mcp(runtime))
        workers = build_workers(
            client, runtime, graceful_shutdown_timeout, versioning, task_queue=task_queue
        )
        for worker in workers:
            await stack.enter_async_context(worker)
        yield runtime


async def run_worker(
    folders: Sequence[str | Path],
    *,
    client: Client | None = None,
    connect: Callable[[], Awaitable[Client]] | None = None,
    model_override: str | None = None,
    ready: asyncio.Event | None = None,
    deployment: str | None = None,
    build_id: str | None = None,
) -> None:
    """Serve `folders` until SIGINT or SIGTERM, then shut down gracefully.

    The folders are loaded and checked before connecting, so a wrong agent.yaml or a missing
    variable is reported even when the server is down. `connect` opens the client when none
    is given (toren's own `connect()` by default). `deployment` / `build_id` as in `serve`.
    """
    from toren.connect import connect as default_connect

    versioning = worker_deployment(deployment, build_id)
    runtime = AgentRuntime.load(folders, os.environ, model_override=model_override)
    runtime.telemetry = Telemetry(*providers_from_env())
    await check_stores()
    retention_days()  # a bad value fails the worker now, not an hour from now
    client = client or await (connect or default_connect)()
    # Whatever happens from here on (a refused MCP server, a worker that fails), what was
    # opened is closed, in reverse: the workers, the MCP sessions, telemetry, the store's S3
    # sessions.
    async with contextlib.AsyncExitStack() as opened:
        opened.push_async_callback(close_storage, client.data_converter)
        opened.callback(runtime.telemetry.flush)
        await _check_search_attributes(client, runtime)
        opened.push_async_callback(await _attach_mcp(runtime))
        workers = build_workers(client, runtime, deployment=versioning)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
                opened.callback(loop.remove_signal_handler, sig)
        for name, loaded in runtime.agents.items():
            # A handoff target loaded only as one is served on the queues that hand off to it.
            queues = [q for q, on in runtime.task_queues().items() if any(a is loaded for a in on)]
            log.info(
                "serving agent %r on task queue%s %s with model %s and tools: %s",
                name,
                "s" if len(queues) > 1 else "",
                ", ".join(map(repr, queues)),
                loaded.model,
                ", ".join(loaded.agent.tools) or "none",
            )
        if versioning is not None:
            _log_version(versioning)
        tasks = [asyncio.create_task(w.run()) for w in workers]
        opened.push_async_callback(_shut_down, workers, tasks)
        days = retention_days()
        pruning = asyncio.create_task(run_retention(client, days)) if days else None
        if pruning:
            opened.callback(pruning.cancel)
        if ready:
            ready.set()
        stopper = asyncio.create_task(stop.wait())
        opened.callback(stopper.cancel)
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception():
                raise task.exception()  # type: ignore[misc]


async def _shut_down(workers: Sequence[Worker], tasks: Sequence[asyncio.Task[None]]) -> None:
    """Let in-flight calls finish (`GRACEFUL_SHUTDOWN`), then wait for every worker's end."""
    log.info("shutting down: in-flight calls get %s to finish", GRACEFUL_SHUTDOWN)
    running = [w for w, t in zip(workers, tasks, strict=True) if not t.done()]
    await asyncio.gather(*(w.shutdown() for w in running), return_exceptions=True)
    await asyncio.gather(*tasks, return_exceptions=True)
