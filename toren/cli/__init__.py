"""The `toren` command: run workers, start runs, decide approvals, read the event log.

A client like `toren.client` (one module per command group); only the commands that run agent
code on this machine (`worker`, `check`, `tools`) reach into the worker's side, when they run.

```
toren worker examples/support               serve an agent (until Ctrl-C)
toren run examples/support "Refund A-1001"  start a run and follow it live
toren chat examples/support [--thread ID]   talk in a thread; approvals asked inline
toren pending [RUN]                         calls waiting for a decision (no RUN: all)
toren approve RUN CALL_ID --by alice        approve one (deny works the same)
toren events RUN [--json]                   the run's history as an event log
toren check examples/support                load, validate, print tools and schemas
toren setup                                 register toren's search attributes
toren attach report.pdf                     parse a file for read_attachment; prints its id
toren replay RUN | history.json             replay against this code before you deploy it
toren serve [--host H] [--port P]           the HTTP API (needs `pip install 'toren[web]'`)
```

Connection settings come from Temporal's own env and config (TEMPORAL_ADDRESS, ...). The Web UI
link `toren run` prints comes from TOREN_UI_URL (or TEMPORAL_UI_URL), e.g.
`http://localhost:8233`; unset, it is printed only for the dev server's default localhost:7233.
`toren run` follows a run across continue-as-new to the run that closes it, says what it waits
for (a retried model call, a long tool, an approval, no worker), and exits 0 when it completed,
1 when it failed, timed out, was cancelled or terminated, 130 on Ctrl-C (the run goes on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from toren import client as toren_client
from toren.agent._config import AgentConfig, SandboxConfig
from toren.agent._mcp_config import McpServerConfig
from toren.agent._types import DEFAULT_TOOL_ATTEMPTS, DEFAULT_TOOL_TIMEOUT_MS
from toren.cli._compact import add_compact_parser, cmd_compact
from toren.cli._live_print import LivePrinter
from toren.cli._watch import pasteable, toren_command, watch
from toren.client._events import EventStream, format_event
from toren.client._readable import ensure_readable
from toren.connect._codec import CodecSettings
from toren.errors import CodecServerError, ConfigError, TorenError, UndecodablePayloadError
from toren.worker._agent import load_agent
from toren.worker._tool_list import tool_infos
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["entrypoint", "main"]


def _ui_url(client: Client, run_id: str) -> str | None:
    """The run's Web UI page, or None when nothing says where the UI is.

    From `TOREN_UI_URL` or `TEMPORAL_UI_URL`; else only for the dev server's default address,
    whose UI is on 8233 (a gRPC port says nothing of its UI's port).
    """
    base = os.environ.get("TOREN_UI_URL") or os.environ.get("TEMPORAL_UI_URL")
    if not base:
        host = client.service_client.config.target_host
        if host not in ("localhost:7233", "127.0.0.1:7233"):
            return None
        base = "http://localhost:8233"
    return f"{base.rstrip('/')}/namespaces/{client.namespace}/workflows/{run_id}"


class _Unreachable(TorenError):
    """The Temporal server did not answer; the message says where we looked and why there."""


def _address_source() -> str:
    if os.environ.get("TEMPORAL_ADDRESS"):
        return "from TEMPORAL_ADDRESS"
    profile = os.environ.get("TEMPORAL_PROFILE")
    if profile:
        return f"from profile {profile!r} (TEMPORAL_PROFILE)"
    config_file = os.environ.get("TEMPORAL_CONFIG_FILE")
    if config_file:
        return f"from the default profile of {config_file} (TEMPORAL_CONFIG_FILE)"
    return "the default (set TEMPORAL_ADDRESS or a temporal.toml profile to change it)"


_codec = CodecSettings()
"""The codec flags of this command (`main` sets them; the environment fills the rest)."""


def _codec_settings() -> CodecSettings:
    return CodecSettings.resolve(_codec.codec, _codec.endpoint, _codec.auth)


async def _connect() -> Client:
    from toren.connect import connect, connect_config

    try:
        return await connect(codec=_codec_settings())
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        address = connect_config().get("target_host")
        raise _Unreachable(
            f"no Temporal server answers at {address} ({_address_source()}); start the dev "
            "server with ./temporal-dev.sh (in a toren checkout) or `temporal server start-dev`"
        ) from err


def _default_by() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "cli"


# The run `toren run` started, for the word it says on Ctrl-C.
_started_run: list[str] = []


# -- commands --------------------------------------------------------------------------------


async def cmd_chat(args: argparse.Namespace) -> int:
    from toren.cli._chat import chat

    agent = load_agent(args.agent).name if Path(args.agent).is_dir() else args.agent
    return await chat(await _connect(), agent, thread_id=args.thread, user_id=args.user)


async def cmd_worker(args: argparse.Namespace) -> int:
    from toren.worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    settings = _codec_settings()
    if settings.endpoint and not settings.codec:
        logging.getLogger("toren").warning(
            "encoding through the codec server %s: one request per payload; give the worker "
            "the codec in process (TOREN_PAYLOAD_CODEC=module:attribute or --codec)",
            settings.endpoint,
        )
    await run_worker(args.agent_dir, model_override=args.model, connect=_connect)
    return 0


async def cmd_run(args: argparse.Namespace) -> int:
    agent = load_agent(args.agent_dir)
    client = await _connect()
    arguments = dict(_parse_kv(a) for a in args.arg) if args.arg else None
    wall = agent.config.limits.max_wall_clock_min
    handle = await toren_client.start_run(
        client,
        agent.name,
        args.prompt,
        run_id=args.id,
        arguments=arguments,
        attachments=args.attach or None,
        task_queue=agent.task_queue,
        # Past the run's own wall-clock budget, so the workflow ends itself cleanly first.
        execution_timeout=timedelta(minutes=wall + 5) if wall else None,
    )
    _started_run.append(handle.id)
    print(f"run {handle.id} started (agent {agent.name}, task queue {agent.task_queue})")
    ui = _ui_url(client, handle.id)
    if ui:
        print(f"  Web UI: {ui}")
    if args.no_wait:
        return 0
    return await _follow(
        client, handle.id, as_json=args.json, show_help=True, agent_dir=args.agent_dir
    )


async def _follow(
    client: Client, run_id: str, *, as_json: bool, show_help: bool, agent_dir: str | None = None
) -> int:
    """Print the run's events live, from the chain's first run to the one that closes it.

    Exit status 0 when that run completed, 1 when it failed, timed out, was cancelled or
    terminated. With `show_help`, also say what the run waits for (`toren.cli._watch`).
    """
    watcher = None
    printer = None
    live = None
    if not as_json:
        # The model's text as it streams and tools' progress, between the event log's lines.
        printer = LivePrinter()
        live = asyncio.create_task(printer.follow(client, run_id))
    if show_help and not as_json:

        def say(line: str) -> None:
            if printer is not None:
                printer.line(f"  …  {line}")
            else:
                print(f"  …  {line}", flush=True)

        watcher = asyncio.create_task(
            watch(client, run_id, say, agent_dir=agent_dir or "<agent folder>")
        )
    try:
        return await _print_chain(
            client, run_id, as_json=as_json, show_help=show_help, printer=printer
        )
    finally:
        for task in (watcher, live):
            if task is not None:
                task.cancel()


async def _print_chain(
    client: Client,
    run_id: str,
    *,
    as_json: bool,
    show_help: bool,
    printer: LivePrinter | None = None,
) -> int:
    stream = EventStream(client.data_converter)

    def show(text: str) -> None:
        if printer is None:
            print(text, flush=True)
        else:
            printer.line(text)

    run: str | None = await toren_client.first_run(client, run_id)
    status = 0
    while run is not None:
        handle = client.get_workflow_handle(run_id, run_id=run)
        run = None
        async for history_event in handle.fetch_history_events(wait_new_event=True):
            for event in await stream.feed(history_event):
                show(json.dumps(event) if as_json else format_event(event))
                if printer is not None and event["type"] in ("RunCompleted", *_UNSUCCESSFUL):
                    printer.closed = True  # the run's end is the last line
                if event["type"] == "ApprovalRequested" and show_help and not as_json:
                    call = event["callId"]
                    show(
                        f"  ⏸  waiting for approval of {event['tool']} ({call}). Approve it in "
                        f"the Web UI (More Actions → Send a Signal → approve, "
                        f'Data {{"call_id": "{call}", "by": "you"}}) or run:\n'
                        f"       {toren_command(f'approve {run_id} {call}')}\n"
                        f"       {toren_command(f'deny {run_id} {call}')} --comment 'why'"
                    )
                if event["type"] == "RunContinuedAsNew":
                    run = event["newRunId"]  # the same run goes on in a new history
                if event["type"] in _UNSUCCESSFUL:
                    status = 1
    return status


_UNSUCCESSFUL = ("RunFailed", "RunTimedOut", "RunCanceled", "RunTerminated")


async def cmd_events(args: argparse.Namespace) -> int:
    client = await _connect()
    if args.follow:
        await ensure_readable(client, args.run_id)  # the live log would show garbled events
        return await _follow(client, args.run_id, as_json=args.json, show_help=False)
    for event in await toren_client.events(client, args.run_id):
        print(json.dumps(event) if args.json else format_event(event))
    return 0


async def cmd_pending(args: argparse.Namespace) -> int:
    client = await _connect()
    if not args.run_id:
        return await _inbox(client, args)
    calls = await toren_client.pending(client, args.run_id)
    if args.json:
        print(json.dumps([c.__dict__ for c in calls], indent=2))
        return 0
    if not calls:
        print(f"no call of {args.run_id} is waiting for approval")
    for c in calls:
        print(f"{c.call_id}  {c.tool}({json.dumps(c.args)})  since {c.requested_at}  [{c.reason}]")
    return 0


async def _inbox(client: Client, args: argparse.Namespace) -> int:
    items = await toren_client.inbox(client, agent=args.agent)
    if args.json:
        rows = [
            {
                "run_id": i.run_id,
                "agent": i.agent,
                "age_s": i.age.total_seconds(),
                **i.call.__dict__,
            }
            for i in items
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not items:
        print(f"no call is waiting for approval in namespace {client.namespace!r}")
    for i in items:
        age = _age(i.age.total_seconds())
        print(f"{i.run_id}  {i.call.call_id}  {i.call.tool}({json.dumps(i.call.args)})  {age} ago")
        print(f"    {toren_command(f'approve {i.run_id} {i.call.call_id}')}")
    return 0


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


async def cmd_setup(args: argparse.Namespace) -> int:
    from toren.connect import _search_attributes as search_attributes

    client = await _connect()
    added = await search_attributes.register(client)
    if added:
        print(f"registered {', '.join(added)} in namespace {client.namespace!r}")
        # Both look the attributes up once, when they start (`toren.worker`, `toren.client`).
        print("restart running toren workers and `toren serve` so that new runs set them")
    else:
        print(f"namespace {client.namespace!r} already has toren's search attributes")
    return 0


async def cmd_attach(args: argparse.Namespace) -> int:
    from toren.store._attachments import attach

    for path in args.file:
        info = attach(path, store=args.store)
        print(f"{info.id}  {info.name}  {info.pages} page(s)  {info.size} bytes  {info.mime}")
    print("start a run with them: toren run AGENT_DIR 'prompt' --attach <id> ...")
    return 0


async def cmd_workspace(args: argparse.Namespace) -> int:
    from pathlib import Path

    from toren.store._workspace import download

    version = args.version
    if version is None:
        client = await _connect()
        version = await toren_client.workspace_version(client, args.run_id)
        if version is None:
            print(
                f"toren: run {args.run_id!r} recorded no workspace version: none of its calls "
                "used the workspace (or it ran before workspaces were stored)",
                file=sys.stderr,
            )
            return 1
    manifest = await asyncio.to_thread(download, args.run_id, version, Path(args.dir))
    print(
        f"{args.dir}: {len(manifest.files)} file(s), {manifest.bytes():,} bytes "
        f"(workspace version {version[:12]} of {args.run_id})"
    )
    return 0


async def cmd_store(args: argparse.Namespace) -> int:
    from toren.errors import UsageError
    from toren.store._retention import ENV_VAR, prune, retention_days
    from toren.store._store import check_store

    days = args.older_than or retention_days()
    if days is None:
        raise UsageError(f"say how old: --older-than DAYS, or set {ENV_VAR}")
    store = await asyncio.to_thread(check_store)
    client = await _connect()
    pruned = await prune(client, days, store)
    print(
        f"{store.url}: deleted the versions of {pruned.runs} run(s) closed over "
        f"{days:g} day(s) ago ({pruned.versions} version(s)), and {pruned.blobs} "
        f"blob(s) no version names ({pruned.bytes:,} bytes)"
    )
    return 0


async def cmd_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    from toren.client._events import read_through
    from toren.client._readable import check_readable
    from toren.connect._plugin import TorenPlugin, workflow_runner
    from toren.workflows import AgentRun, AgentThread

    histories: list[WorkflowHistory] = []
    client: Client | None = None
    for source in args.source:
        path = Path(source)
        if path.suffix == ".json" and path.is_file():
            histories.append(WorkflowHistory.from_json(path.stem, path.read_text()))
            continue
        client = client or await _connect()
        histories += await toren_client.histories(client, source)
    # The client's converter has the team's codec; without a client, the settings name it.
    team = client.data_converter if client else _codec_settings().converter("default")
    converter = TorenPlugin().converter(team)
    for history in histories:
        # A copy: `read_through` decodes in place, and the replayer decodes again (a codec that
        # refuses what it did not encode would fail every replay).
        events = [_copy(e) for e in history.events]
        await read_through(events, converter)
        check_readable(converter, events)
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=converter,
    )
    failed = 0
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is None:
            print(f"ok      {history.workflow_id}: {len(history.events)} events replay")
        else:
            failed += 1
            print(f"FAILED  {history.workflow_id}: {result.replay_failure}")
    print(f"{len(histories) - failed} of {len(histories)} histories replay against this code")
    return 1 if failed else 0


async def cmd_decide(args: argparse.Namespace, approved: bool) -> int:
    client = await _connect()
    try:
        decision = await toren_client.decide(
            client,
            args.run_id,
            args.call_id,
            approved,
            by=args.by or _default_by(),
            comment=args.comment or "",
        )
    except WorkflowUpdateFailedError as err:
        print(f"refused: {getattr(err.cause, 'message', None) or err}", file=sys.stderr)
        return 1
    except UndecodablePayloadError as err:
        if not err.accepted:
            raise
        # It took effect: saying "failed" could get the call approved twice elsewhere.
        word = "approval" if approved else "denial"
        print(f"{args.call_id}: {word} accepted by run {args.run_id}")
        print(f"toren: the run's answer could not be read: {err}", file=sys.stderr)
        return 0
    word = "approved" if decision.approved else "denied"
    print(f"{decision.call_id} {word} by {decision.by}")
    return 0


async def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from toren.web import serve
    except ImportError as err:  # the web extra is optional
        print(f"toren: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    await serve(
        args.host, args.port, insecure_no_auth=args.insecure_no_auth, codec=_codec_settings()
    )
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    status = 0
    for folder in args.agent_dir:
        try:
            agent = load_agent(folder)
            hosted = hosted_tool_problems(agent.name, agent.config.model, agent.tools.values())
            if hosted:
                raise ConfigError(hosted)
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
        missing = [n for n in agent.required_env() if not os.environ.get(n)]
        print(f"  env required: {', '.join(agent.required_env()) or 'none'}")
        if missing:
            print(f"  ! missing here: {', '.join(missing)} (a worker would refuse to start)")
        defaulted = []
        for tool in tool_infos(agent):
            if tool.execution_mode == "provider":
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


def _parse_kv(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--arg takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of days, e.g. 7")
    return days


def _add_codec_flags(parser: argparse.ArgumentParser) -> None:
    """The team's codec, named as the `temporal` CLI's flags name it (`toren.connect._codec`)."""
    group = parser.add_argument_group("payload codec (an encrypted namespace)")
    group.add_argument(
        "--codec", metavar="MODULE:ATTR",
        help="the team's PayloadCodec or DataConverter, in process (default $TOREN_PAYLOAD_CODEC)",
    )  # fmt: skip
    group.add_argument(
        "--codec-endpoint", metavar="URL",
        help="the team's codec server (default $TEMPORAL_CODEC_ENDPOINT, the profile's codec)",
    )  # fmt: skip
    group.add_argument(
        "--codec-auth", metavar="VALUE",
        help="the codec server's Authorization header (default $TEMPORAL_CODEC_AUTH)",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toren", description="Durable LLM agents on Temporal.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("worker", help="serve agent folders until Ctrl-C")
    p.add_argument("agent_dir", nargs="+")
    p.add_argument("--model", help="serve with this model instead of agent.yaml's")

    p = sub.add_parser("run", help="start a run and follow it")
    p.add_argument("agent_dir")
    p.add_argument("prompt")
    p.add_argument("--id", help="run (workflow) id; default <agent>-<random>")
    p.add_argument("--arg", action="append", help="invocation argument KEY=VALUE (JSON value)")
    p.add_argument("--attach", action="append", help="attachment id (see `toren attach`)")
    p.add_argument("--no-wait", action="store_true", help="print the run id and return")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")

    p = sub.add_parser("chat", help="talk with an agent in a thread (each line a message)")
    p.add_argument("agent", help="agent folder or agent name")
    p.add_argument("--thread", help="thread (workflow) id to resume or create")
    p.add_argument("--user", help="user id of a new thread (default: none)")

    for name, help_ in (("approve", "approve a waiting call"), ("deny", "deny a waiting call")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("run_id")
        p.add_argument("call_id")
        p.add_argument("--by", help="who decides (default: your user name)")
        p.add_argument("--comment", help="why (the model sees it on a denial)")

    p = sub.add_parser(
        "pending", help="calls waiting for a decision: of one run, or (no RUN) the inbox"
    )
    p.add_argument("run_id", nargs="?")
    p.add_argument("--agent", help="with no RUN: only this agent's runs")
    p.add_argument("--json", action="store_true")

    sub.add_parser("setup", help="register toren's search attributes in the namespace")

    p = sub.add_parser("attach", help="parse files into the attachment store; prints their ids")
    p.add_argument("file", nargs="+")
    p.add_argument(
        "--store", help="attachments directory (default: attachments/ in $TOREN_STORE or .toren)"
    )

    p = sub.add_parser(
        "replay", help="replay runs (ids, or history JSON files) against this code: a deploy check"
    )
    p.add_argument("source", nargs="+", help="run id, or a history .json file")

    p = sub.add_parser("workspace", help="download a run's workspace (as history last recorded)")
    p.add_argument("run_id")
    p.add_argument("dir", help="a new or empty directory")
    p.add_argument("--version", help="a version id from the run's history instead of its last")

    p = sub.add_parser("store", help="the store (TOREN_STORE): prune closed runs' objects")
    store_sub = p.add_subparsers(dest="store_command", required=True)
    p = store_sub.add_parser("prune", help="delete the workspaces of runs closed long ago")
    p.add_argument(
        "--older-than", type=_days, default=None, metavar="DAYS",
        help="runs closed more than DAYS ago (default $TOREN_STORE_RETENTION_DAYS)",
    )  # fmt: skip

    add_compact_parser(sub)  # issue 39
    p = sub.add_parser("events", help="a run's history as an event log")
    p.add_argument("run_id")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")

    p = sub.add_parser("serve", help="serve the HTTP API (bearer tokens from TOREN_WEB_TOKENS)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve beyond loopback without TOREN_WEB_TOKENS (anyone may approve anything)",
    )

    p = sub.add_parser("check", help="load and validate agent folders")
    p.add_argument("agent_dir", nargs="+")
    p.add_argument("--no-schemas", dest="schemas", action="store_false")
    # Every command that talks to Temporal reads and writes through the team's codec.
    for name, command in sub.choices.items():
        if name not in ("check", "attach"):
            _add_codec_flags(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `toren` command."""
    global _codec
    args = _parser().parse_args(argv)
    _codec = CodecSettings(
        getattr(args, "codec", None),
        getattr(args, "codec_endpoint", None),
        getattr(args, "codec_auth", None),
    )
    commands: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "worker": cmd_worker,
        "run": cmd_run,
        "chat": cmd_chat,
        "events": cmd_events,
        "pending": cmd_pending,
        "check": cmd_check,
        "setup": cmd_setup,
        "attach": cmd_attach,
        "replay": cmd_replay,
        "workspace": cmd_workspace,
        "store": cmd_store,
        "serve": cmd_serve,
        "compact": lambda a: cmd_compact(a, _connect),  # issue 39
        "approve": lambda a: cmd_decide(a, True),
        "deny": lambda a: cmd_decide(a, False),
    }
    try:
        return asyncio.run(commands[args.command](args))
    except _Unreachable as err:
        print(f"toren: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `toren events RUN | head -1`: the reader left, which is no error of ours. Point
        # stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UndecodablePayloadError, CodecServerError) as err:  # no codec here, or it is down
        print(f"toren: {err}", file=sys.stderr)
        return 1
    except TorenError as err:  # a bad agent folder, missing env, a file that cannot attach
        print(f"toren: {err}", file=sys.stderr)
        return 2
    except WorkflowFailureError as err:
        print(f"toren: run failed: {err.cause}", file=sys.stderr)
        return 1
    except RPCError as err:
        print(f"toren: Temporal said: {err.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.command == "run" and _started_run:
            run = _started_run[-1]
            print(
                f"\nstopped following; run {run} goes on on the server.\n"
                f"  follow it:  {toren_command(f'events {run} --follow')}\n"
                f"  approve:    {toren_command(f'pending {run}')}, "
                f"then {toren_command(f'approve {run} CALL_ID')}\n"
                f"  cancel it:  {pasteable(f'temporal workflow cancel --workflow-id {run}')}",
                file=sys.stderr,
                flush=True,
            )
        return 130


def entrypoint() -> None:
    """The console script: `main`, then a hard exit.

    The Temporal client's native runtime can abort the interpreter while it finalizes
    (`PyGILState_Release`) after the command is done; exiting directly avoids that.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError):  # the reader (`| head -1`) left early
            stream.flush()
    os._exit(code)


def _copy(event: HistoryEvent) -> HistoryEvent:
    copied = HistoryEvent()
    copied.CopyFrom(event)
    return copied


if __name__ == "__main__":
    entrypoint()
