"""`sandbox: true`: a `bash` tool jailed with bubblewrap, plus workspace file tools.

```yaml
# agent.yaml
name: coder
model: anthropic/claude-sonnet-4-5
env:
  required: [GITHUB_TOKEN]
sandbox:                 # or just `sandbox: true` for the defaults below
  network: false         # default; true shares the worker's network (and its 127.0.0.1)
  approval: always       # bash's gate, default; `never` runs commands without asking
  env: [GITHUB_TOKEN]    # declared env names passed into the sandbox; nothing else is
  unconfined: false      # see "Without bubblewrap" below
  limits:                # per call (bash and ctx.run_code); see `_limits` for how each holds
    memoryMB: 1024       # per process (RLIMIT_DATA); /tmp and /dev/shm are capped at it too
    cpuSeconds: 60       # per process (RLIMIT_CPU)
    processes: 256       # at once (RLIMIT_NPROC; polled when the worker runs as root)
    fileSizeMB: 512      # largest file written (RLIMIT_FSIZE)
    workspaceMB: 1024    # workspace size, polled during and checked after each call
```

The agent gets four tools, all working in one directory per run, its *workspace*:

- `bash {command, timeout_seconds=120}` → `{exit_code, stdout, stderr}`, run as `bash -c` in
  the workspace (seen as `/workspace`); each stream keeps its first and last 8,000 characters.
- `read_file {path, offset=1, limit=2000}` → lines numbered like `cat -n`.
- `write_file {path, content}` → `{path, bytes}`, creating parent directories.
- `edit_file {path, old_string, new_string, replace_all=false}` → `{path, replacements}`.

The workspace follows the run from host to host (`toren.store._workspace`): each call that changes
it stores a version in the store (`TOREN_STORE`) and records its id in history; the next call,
on whichever host, starts from that version. On a host it is `$TOREN_WORKSPACES/<run id>/`
(default `.toren/workspaces/` under the worker's cwd), a cache of the version history names.
The four tools are workspace calls: one at a time per run, in the order the model asked. File
tools take workspace-relative paths and refuse absolute paths, `..` and symlinks leading
outside it.

**Isolation.** bash runs under `bwrap` in new user, pid, network, ipc, uts and cgroup
namespaces with every capability dropped. It sees read-only `/usr` (and the `/bin`, `/lib`
links), a few files of `/etc` (passwd, group, hosts, resolv.conf, ld.so.cache, TLS roots), a
fresh `/proc`, a minimal `/dev`, an empty `/tmp` and the workspace, read-write. Not `/root`,
`/home`, the rest of `/etc`, or the worker's processes. Its environment holds only `PATH`,
`HOME=/workspace`, `LANG`, `TOREN_IDEMPOTENCY_KEY` (the call's key; bash is not idempotent,
so scripts with outside effects can dedupe on it) and the names listed in `env:`, which must
also be declared in agent.yaml's `env`. The worker's own environment (Temporal keys, cloud
credentials) never enters. Without `network: true` the sandbox has only its own loopback.
Background jobs die with the call (the pid namespace ends with bash). Bounded per call by
`limits:`; a call past one gets `error` naming it, and the worker goes on.

**Without bubblewrap.** A worker without a working `bwrap` refuses to serve a sandboxed agent:
loading it fails with an error saying to install bubblewrap. The one way to run bash
unconfined (a plain `bash -c` in the workspace with the same minimal env, but able to read the
host's files and use its network) is for both sides to opt in: the agent's block says
`unconfined: true` AND the worker's operator names the agent in
`TOREN_SANDBOX_UNCONFINED=<name>[,<name>...]`. Either alone is not enough, and where bwrap works
it is always used. The file tools enforce the workspace boundary themselves in both modes.

**`ctx.run_code`.** Any tool of any agent may run Python source in the same jail, always without
network, in its run's workspace (`code_jail`, `run_code`); without a working bwrap it raises
`SandboxError` unless the same two opt-ins allow running it unconfined.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toren.agent._config import AgentConfig, SandboxConfig
from toren.agent._context import ToolContext
from toren.agent._define import define_tool
from toren.agent._tool import Tool
from toren.errors import ConfigError, SandboxError
from toren.store._workspace_dirs import workspace_dir, workspace_root
from toren.worker.tools._sandbox._code import check_modules, run_code
from toren.worker.tools._sandbox._files import (
    edit_file,
    read_file,
    write_file,
)
from toren.worker.tools._sandbox._jail import KEEP_CHARS, SANDBOX_PATH, Jail, probe

__all__ = [
    "SandboxError",
    "check_modules",
    "code_jail",
    "run_code",
    "tools",
    "workspace_dir",
    "working_bwrap",
    "workspace_root",
]

log = logging.getLogger("toren")

MAX_TIMEOUT_S = 600
"""The longest `timeout_seconds` a bash call may ask for."""
TIMEOUT_MARGIN_MS = 30_000
"""bash's activity timeout exceeds MAX_TIMEOUT_S by this much, so our own kill always wins and
the model gets the output so far instead of a bare `timed out`."""


def tools(config: AgentConfig, name: str = "sandbox") -> list[Tool]:
    """Build bash and the file tools for `config`; called by the loader for `sandbox: true`.

    Reads `TOREN_WORKSPACES`, `TOREN_SANDBOX_UNCONFINED` and PATH (for `bwrap`) from the
    worker's environment, and runs bwrap once to check it works here.

    Raises:
        ConfigError: bash cannot be jailed on this worker, and the agent and the operator did
            not both opt into unconfined mode. (The block itself is checked by `AgentConfig`.)
    """
    # `sandbox: true` arrives as the defaults; a config without a sandbox gets them too.
    options = config.sandbox or SandboxConfig()
    root = workspace_root(os.environ)
    jail = Jail(
        bwrap=_find_bwrap(config.name, options), network=options.network, limits=options.limits
    )
    return [
        _bash_tool(options, jail, root),
        _read_file_tool(root),
        _write_file_tool(root),
        _edit_file_tool(root),
    ]


def _find_bwrap(agent: str, options: SandboxConfig) -> str | None:
    """The path of a working bwrap, or None when unconfined mode is allowed; else raise."""
    bwrap, problem = working_bwrap(options.network)
    if bwrap:
        return bwrap
    if _unconfined_allowed(agent, options):
        log.warning(
            "agent %r: running bash UNCONFINED (no bubblewrap): it can read this host's files "
            "and use its network (%s)",
            agent,
            problem,
        )
        return None
    raise ConfigError(
        f"bash needs bubblewrap: {problem}. To run bash unconfined instead, at your own risk, "
        f"set `unconfined: true` in the sandbox block AND TOREN_SANDBOX_UNCONFINED={agent} on "
        "the worker"
    )


def code_jail(config: AgentConfig) -> Jail:
    """The jail `ctx.run_code` uses for `config`'s agent: bash's, always without network.

    Reads `TOREN_SANDBOX_UNCONFINED` and PATH (for `bwrap`) from the worker's environment.

    Raises:
        SandboxError: bwrap does not work on this worker, and the agent (`sandbox:
            {unconfined: true}`) and the operator did not both opt into unconfined mode.
    """
    options = config.sandbox or SandboxConfig()
    bwrap, problem = working_bwrap(network=False)
    if bwrap:
        return Jail(bwrap=bwrap, network=False, limits=options.limits, who="run_code")
    if _unconfined_allowed(config.name, options):
        log.warning(
            "agent %r: running ctx.run_code UNCONFINED (no bubblewrap): the code can read this "
            "host's files and use its network (%s)",
            config.name,
            problem,
        )
        return Jail(bwrap=None, network=False, limits=options.limits, who="run_code")
    raise SandboxError(
        f"ctx.run_code needs bubblewrap: {problem}. To run code unconfined instead, at your own "
        f"risk, set `sandbox: {{unconfined: true}}` in agent.yaml AND "
        f"TOREN_SANDBOX_UNCONFINED={config.name} on the worker"
    )


def working_bwrap(network: bool) -> tuple[str | None, str]:
    """`(path, "")` of a bwrap that works here, or `(None, why not and how to fix it)`."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return None, (
            "`bwrap` is not on this worker's PATH; install it (Debian/Ubuntu: apt-get install "
            "bubblewrap; Fedora: dnf install bubblewrap)"
        )
    failure = probe(bwrap, network)
    if failure is None:
        return bwrap, ""
    return None, (
        f"bubblewrap ({bwrap}) cannot create a sandbox on this worker: {failure}; "
        "hosts and containers often forbid user namespaces: allow them (sysctl "
        "kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ "
        "kernel.apparmor_restrict_unprivileged_userns=0; in Docker a seccomp and AppArmor "
        "profile that permits unshare) or run the worker on a host or VM that does"
    )


def _unconfined_allowed(agent: str, options: SandboxConfig) -> bool:
    """Whether both the agent (`unconfined: true`) and the operator allow running unjailed."""
    allowed = {
        n.strip() for n in os.environ.get("TOREN_SANDBOX_UNCONFINED", "").split(",") if n.strip()
    }
    return options.unconfined and agent in allowed


class BashArgs(BaseModel):
    """Arguments of `bash`."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The bash script to run, e.g. `ls -la && cat README.md`.")
    timeout_seconds: int = Field(
        120,
        ge=1,
        le=MAX_TIMEOUT_S,
        description="Kill the command after this many seconds (exit code 124).",
    )


class ReadFileArgs(BaseModel):
    """Arguments of `read_file`."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path relative to the workspace, e.g. `src/app.py`.")
    offset: int = Field(1, ge=1, description="First line to show (1-based).")
    limit: int = Field(2000, ge=1, le=2000, description="Most lines to show.")


class WriteFileArgs(BaseModel):
    """Arguments of `write_file`."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path relative to the workspace, e.g. `src/app.py`.")
    content: str = Field(description="The file's entire new content.")


class EditFileArgs(BaseModel):
    """Arguments of `edit_file`."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path relative to the workspace, e.g. `src/app.py`.")
    old_string: str = Field(description="Exact text to replace, unique in the file.")
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(False, description="Replace every occurrence, not just one.")


def _bash_tool(options: SandboxConfig, jail: Jail, root: Path) -> Tool:
    if jail.bwrap:
        net = "has network access" if options.network else "has no network access"
        where = f"Run a bash command in an isolated sandbox that {net}."
        kept = "The working directory /workspace is this run's workspace, kept between calls"
    else:
        where = "Run a bash command UNCONFINED on the worker host."
        kept = "The working directory is this run's workspace, kept between calls"

    async def bash(args: BashArgs, ctx: ToolContext) -> dict[str, Any]:
        workspace = await _workspace(ctx, root)
        env = _sandbox_env(options, ctx.env, ctx.idempotency_key)
        return await jail.run(args.command, workspace, env, args.timeout_seconds)

    return define_tool(
        name="bash",
        description=(
            f"{where} {kept} (/tmp is not). Background jobs end with the call. Returns "
            f"exit_code, stdout and stderr; each keeps its first and last {KEEP_CHARS} "
            "characters."
        ),
        input=BashArgs,
        # Its writes land in the run's workspace, not the outside world (with network off).
        effects="sandbox",
        # Re-running a command is not harmless (appends, moves, counters), so each call gets a
        # stable key, exported as TOREN_IDEMPOTENCY_KEY for scripts that call out.
        idempotency="keyed",
        approval=options.approval,
        # Above the largest timeout_seconds: our own kill fires first and returns the output.
        timeout_ms=MAX_TIMEOUT_S * 1000 + TIMEOUT_MARGIN_MS,
        # A call whose worker died may have half-run; running it again blind could double its
        # effects, so it fails closed and the model inspects the workspace before retrying.
        max_attempts=1,
        handler=bash,
    )


async def _workspace(ctx: ToolContext, root: Path) -> Path:
    """The run's workspace: restored to the run's last version in a run, else under `root`."""
    if ctx.hooks is not None:
        return await ctx.workspace()
    return workspace_dir(root, ctx.run_id)


def _read_file_tool(root: Path) -> Tool:
    async def handler(args: ReadFileArgs, ctx: ToolContext) -> str:
        workspace = await _workspace(ctx, root)
        return await asyncio.to_thread(read_file, workspace, args.path, args.offset, args.limit)

    tool = define_tool(
        name="read_file",
        description=(
            "Read a text file in the workspace, as lines numbered like `cat -n`. Paths are "
            "relative to the workspace. Use offset and limit to page through long files."
        ),
        input=ReadFileArgs,
        effects="none",
        idempotency="none",  # reading twice is harmless
        approval="never",
        timeout_ms=60_000,
        handler=handler,
    )
    # Ordered with the writers, so it never reads (or restores over) a call half-way through.
    return dataclasses.replace(tool, workspace=True)


def _write_file_tool(root: Path) -> Tool:
    async def handler(args: WriteFileArgs, ctx: ToolContext) -> dict[str, Any]:
        workspace = await _workspace(ctx, root)
        return await asyncio.to_thread(write_file, workspace, args.path, args.content)

    return define_tool(
        name="write_file",
        description=(
            "Create or overwrite a file in the workspace with the given content, creating "
            "missing directories. Paths are relative to the workspace."
        ),
        input=WriteFileArgs,
        effects="sandbox",
        idempotency="none",  # writing the same content again leaves the same file
        approval="never",
        timeout_ms=60_000,
        handler=handler,
    )


def _edit_file_tool(root: Path) -> Tool:
    async def handler(args: EditFileArgs, ctx: ToolContext) -> dict[str, Any]:
        workspace = await _workspace(ctx, root)
        return await asyncio.to_thread(
            edit_file, workspace, args.path, args.old_string, args.new_string, args.replace_all
        )

    return define_tool(
        name="edit_file",
        description=(
            "Replace exact text in a workspace file: old_string must occur exactly once unless "
            "replace_all is true. Read the file first and copy the text exactly."
        ),
        input=EditFileArgs,
        effects="sandbox",
        idempotency="keyed",
        approval="never",
        timeout_ms=60_000,
        # Applying an edit twice is not harmless (replace_all with new_string containing
        # old_string grows each time), so a call interrupted by a worker death fails closed.
        max_attempts=1,
        handler=handler,
    )


def _sandbox_env(options: SandboxConfig, env: Mapping[str, str], key: str) -> dict[str, str]:
    """The sandbox's whole environment: fixed names, the call's key and the listed env."""
    result = {n: env[n] for n in options.env if n in env}
    result.update(PATH=SANDBOX_PATH, LANG="C.UTF-8", TOREN_IDEMPOTENCY_KEY=key)
    return result
