"""`toren worker` and `toren check`, and loading an agent folder: the commands that run agent code.

Loading a folder imports the agent's tools (the user's code) and the worker's built-ins, so
this is the one module of `toren.cli` that imports `toren.worker` (`tests/test_architecture.py`
allows it no other). `toren.cli` imports it only when one of these commands runs, or when `toren
run` and `toren chat` load the folder they are given, so `toren approve` loads no worker code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from toren.agent._config import AgentConfig, SandboxConfig
from toren.agent._mcp_config import McpServerConfig
from toren.agent._spec import DEFAULT_TOOL_ATTEMPTS, DEFAULT_TOOL_TIMEOUT_MS
from toren.cli._common import codec_settings, connect
from toren.errors import ConfigError, TorenError, UsageError
from toren.worker._agent import Agent, load_agent
from toren.worker._handoffs import handoff_targets
from toren.worker._tool_list import tool_infos
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["cmd_check", "cmd_worker", "load_folder", "serving", "serving_fork"]


def load_folder(folder: str) -> Agent:
    """The agent in `folder`, loaded and checked as a worker loads it (its tools imported)."""
    return load_agent(folder)


async def cmd_worker(args: argparse.Namespace) -> int:
    from toren.worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    settings = codec_settings(args)
    if settings.endpoint and not settings.codec:
        logging.getLogger("toren").warning(
            "encoding through the codec server %s: one request per payload; give the worker "
            "the codec in process (TOREN_PAYLOAD_CODEC=module:attribute or --codec)",
            settings.endpoint,
        )
    await run_worker(
        args.agent_dir,
        model_override=args.model,
        connect=lambda: connect(args),
        deployment=args.deployment,
        build_id=args.build_id,
    )
    return 0


@contextlib.asynccontextmanager
async def serving(
    client: Client, agent: Agent, queue: str, model: str | None = None
) -> AsyncIterator[None]:
    """Serve `agent` (`load_folder`) here, with `model` when given, on task queue `queue`.

    For runs of a changed agent that only this command runs (`toren fork --agent`, `toren
    eval`): the agent's own workers go on serving its queue with the code they have.
    """
    from toren.worker import serve

    logging.getLogger("temporalio").setLevel(logging.WARNING)
    async with serve(client, [agent], model_override=model, task_queue=queue):
        yield


@contextlib.asynccontextmanager
async def serving_fork(client: Client, args: argparse.Namespace) -> AsyncIterator[tuple[str, str]]:
    """`toren fork --agent DIR [--model M]`: serve DIR here, on a queue of the fork's own.

    Yields the fork's run id and that queue while DIR (with `--model`, that model) is served
    on it; the fork runs only while this block serves it.
    """
    from toren.client._fork import source_agent

    agent = load_agent(args.agent)
    source = await source_agent(client, args.run_id)
    if source != agent.name:
        raise UsageError(
            f"{args.agent} is agent {agent.name!r}, and run {args.run_id!r} is of agent "
            f"{source!r}: fork it with a folder of {source!r} (a changed copy of it)"
        )
    run_id = args.id or f"{agent.name}-fork-{uuid.uuid4().hex[:12]}"
    queue = f"{run_id}.fork"
    async with serving(client, agent, queue, args.model):
        yield run_id, queue


async def cmd_check(args: argparse.Namespace) -> int:
    status = 0
    for folder in args.agent_dir:
        try:
            agent = load_agent(folder)
            hosted = hosted_tool_problems(
                agent.name,
                agent.config.model,
                agent.tools.values(),
                agent.config.model_settings.api,
            )
            if hosted:
                raise ConfigError(hosted)
            targets = handoff_targets(agent)  # each must load: a worker serves them too
        except ConfigError as err:
            print(f"✗ {folder}: {err}", file=sys.stderr)
            status = 1
            continue
        print(f"✓ agent {agent.name!r} ({agent.folder})")
        print(f"  model: {agent.config.model}   task queue: {agent.task_queue}")
        limits = agent.config.limits
        print(
            f"  limits: maxStepsPerTask={limits.max_steps_per_task} "
            f"maxAttemptsPerTask={limits.max_attempts_per_task} "
            f"maxWallClockMin={limits.max_wall_clock_min}"
        )
        if agent.config.sandbox:
            print(f"  {_sandbox_limits_line(agent.config)}")
        missing = agent.missing_env(os.environ)
        print(f"  env required: {', '.join(agent.required_env()) or 'none'}")
        if missing:
            print(f"  ! missing here: {', '.join(missing)} (a worker would refuse to start)")
        defaulted = []
        for tool in tool_infos(agent):
            native = agent.tools[tool.name].native or ""
            if native.startswith("agent:"):  # agents as tools (`agents:`)
                child = agent.agent_tools[tool.name]
                print(
                    f"  tool {tool.name}: asks agent {child['agent']} (a child run on queue "
                    f"{child['task_queue']}) approval={tool.approval}"
                )
            elif tool.execution_mode == "provider":
                print(
                    f"  tool {tool.name}: run by {tool.execution_provider} inside the model call "
                    "(no activity)"
                )
            else:
                timeout = tool.timeout_ms or DEFAULT_TOOL_TIMEOUT_MS
                attempts = (
                    tool.max_attempts or limits.max_attempts_per_task or DEFAULT_TOOL_ATTEMPTS
                )
                marks = ("" if tool.timeout_ms else "*", "" if tool.max_attempts else "*")
                if not agent.tools[tool.name].native and "*" in marks:
                    defaulted.append(tool.name)
                print(
                    f"  tool {tool.name}: effects={tool.effects} idempotency={tool.idempotency} "
                    f"approval={tool.approval} timeout_ms={timeout}{marks[0]} "
                    f"max_attempts={attempts}{marks[1]}"
                )
            print(f"    {tool.description}")
            if tool.progress_argument:
                print(f"    progress: {tool.progress_argument}")
            if tool.annotations:
                print(f"    annotations: {_one_line(tool.annotations)}")
            if args.schemas:
                schema = json.dumps(tool.schema, indent=2).replace("\n", "\n    ")
                print(f"    {schema}")
        if agent.output_schema is not None:  # typed final output
            mode, retries = agent.config.output_mode, limits.max_output_retries
            print(f"  output {agent.output_name}: output_mode={mode} maxOutputRetries={retries}")
            print("    " + json.dumps(agent.output_schema, indent=2).replace("\n", "\n    "))
        for name, target in targets.items():  # handoffs in a thread
            print(
                f"  handoff transfer_to_{name}: to agent {name!r} ({target.folder}), served by "
                f"this agent's workers on task queue {agent.task_queue!r}"
            )
            absent = target.missing_env(os.environ)
            if absent:
                print(f"  ! {name}: missing here: {', '.join(absent)} (a worker would refuse)")
        for name, server in agent.config.mcp_servers.items():
            defaulted += await _check_mcp(agent.folder, name, server, limits.max_attempts_per_task)
        if defaulted:
            print(
                f"  * not declared by the tool: a default (timeout_ms {DEFAULT_TOOL_TIMEOUT_MS}, "
                f"max_attempts limits.maxAttemptsPerTask or {DEFAULT_TOOL_ATTEMPTS}); "
                f"relying on defaults: {', '.join(defaulted)}"
            )
    print(_store_line())
    return status


def _store_line() -> str:
    """Where workspaces, attachments and secrets go, and whether this host can use it."""
    from toren.store._store import ENV_VAR, check_store

    try:
        store = check_store()
    except TorenError as err:
        return f"! {err}"
    return f"store: {store.url} ({ENV_VAR}; workspaces, attachments, secrets): usable here"


def _sandbox_limits_line(config: AgentConfig) -> str:
    """Which mechanism bounds the agent's sandbox calls on this worker."""
    from toren.worker.tools._sandbox import working_bwrap
    from toren.worker.tools._sandbox._limits import describe

    options = config.sandbox or SandboxConfig()
    return describe(options.limits, jailed=working_bwrap(network=False)[0] is not None)


async def _check_mcp(
    folder: Path, name: str, server: McpServerConfig, default_attempts: int | None
) -> list[str]:
    """Print what MCP server `name` lists, or why it could not be reached.

    Returns the tools that rely on a default timeout or attempts.
    """
    from toren.worker._mcp._session import check_server, describe_server, reason

    try:
        tools, skipped = await check_server(folder, name, server, os.environ)
    except Exception as err:
        where = describe_server(server)
        print(f"  ! mcp server {name} ({where}): could not reach it: {reason(err)}")
        print("    a worker would serve the agent without its tools")
        return []
    print(f"  mcp server {name} ({describe_server(server)}): {len(tools)} tool(s)")
    for problem in skipped:
        print(f"  ! {problem}")
    defaulted = []
    for tool in tools:
        timeout = tool.timeout_ms or DEFAULT_TOOL_TIMEOUT_MS
        attempts = tool.max_attempts or default_attempts or DEFAULT_TOOL_ATTEMPTS
        marks = ("" if tool.timeout_ms else "*", "" if tool.max_attempts else "*")
        if "*" in marks:
            defaulted.append(str(tool.name))
        print(
            f"  tool {tool.name}: effects={tool.effects} idempotency={tool.idempotency} "
            f"approval={tool.approval_kind} timeout_ms={timeout}{marks[0]} "
            f"max_attempts={attempts}{marks[1]}"
        )
        print(f"    {tool.description}")
    return defaulted


def _one_line(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"
