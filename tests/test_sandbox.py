"""`sandbox: true`: bash in bubblewrap and the workspace file tools, attacked from every side.

Tools are called directly (`tool.invoke`); no Temporal server is needed. Tests that run bash
need `bwrap` and are skipped without it (CI installs bubblewrap).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import toren.worker.tools._sandbox as sandbox
from toren import ConfigError, ToolContext, load_agent
from toren.agent._config import AgentConfig, SandboxConfig
from toren.agent._tool import Tool
from toren.store._workspace_dirs import workspace_dir, workspace_name
from toren.worker.tools._sandbox import SandboxError
from toren.worker.tools._sandbox._files import _open_file
from toren.worker.tools._sandbox._jail import Jail

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (`bwrap`) is not installed; apt-get install bubblewrap to run these",
)
SECRET = "worker-secret-" + uuid.uuid4().hex


def config(block: Any = True, **env: Any) -> AgentConfig:
    return AgentConfig.model_validate(
        {"name": "coder", "model": "mock/x", "sandbox": block, "env": env or {}}
    )


def ctx(run_id: str = "run-1", env: dict[str, str] | None = None) -> ToolContext:
    return ToolContext(
        env=env or {}, idempotency_key="k", run_id=run_id, call_id="c", agent="a", tool="bash"
    )


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspaces root (TOREN_WORKSPACES), with a secret in the worker's own env."""
    monkeypatch.setenv("TOREN_WORKSPACES", str(tmp_path / "ws"))
    monkeypatch.setenv("TOREN_TEST_WORKER_SECRET", SECRET)
    return tmp_path / "ws"


Make = Callable[..., dict[str, Tool]]


@pytest.fixture
def make(root: Path) -> Make:
    def build(block: Any = True, **env: Any) -> dict[str, Tool]:
        return {t.name or "": t for t in sandbox.tools(config(block, **env), "sandbox")}

    return build


@pytest.fixture
def box(make: Make) -> dict[str, Tool]:
    return make()


async def call(
    tool: Tool, run_id: str = "run-1", env: dict[str, str] | None = None, **args: Any
) -> Any:
    text = await tool.invoke(args, ctx(run_id, env))
    return json.loads(text) if text.startswith("{") else text


async def bash(box: dict[str, Tool], command: str, **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call(box["bash"], command=command, **kw)
    return result


# --- the sandbox block --------------------------------------------------------------------


def test_true_means_the_defaults_and_false_none() -> None:
    options = config(True).sandbox
    assert isinstance(options, SandboxConfig)
    assert (options.network, options.approval, options.env, options.unconfined) == (
        False,
        "always",
        [],
        False,
    )
    assert config(False).sandbox is None


def test_unknown_and_bad_keys_are_named(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(sandbox={"netwrk": True, "approval": "sometimes", "network": "yes"})
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "agent.yaml: unknown key 'sandbox.netwrk'; did you mean 'network'?" in text
    assert "agent.yaml: sandbox.approval: must be 'always' or 'never', got 'sometimes'" in text
    assert "agent.yaml: sandbox.network: must be true or false, got 'yes'" in text
    assert len(err.value.problems) == 3


def test_env_names_must_be_declared_and_not_reserved(make_agent: Callable[..., Path]) -> None:
    # The block's other mistake (`approval`) does not hide the env check: one pass shows all.
    folder = make_agent(
        sandbox={"env": ["API_TOKEN", "GH_TOKEN", "PATH"], "approval": "maybe"},
        env={"required": ["API_TOKEN"]},
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "sandbox.env: 'GH_TOKEN' is not declared in agent.yaml `env`" in text
    assert "'API_TOKEN'" not in text
    assert "sandbox.env: 'PATH' is set by the sandbox itself" in text
    assert "sandbox.approval: must be 'always' or 'never'" in text


def test_sandbox_is_true_false_or_a_block(make_agent: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError) as err:
        load_agent(make_agent(sandbox="yes"))
    assert "agent.yaml: sandbox: must be true, false or a block of network" in str(err.value)


def test_loader_reports_a_bad_block_with_the_file(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(sandbox={"network": False, "approvals": "never"})
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    assert "agent.yaml: unknown key 'sandbox.approvals'; did you mean 'approval'?" in str(err.value)


@needs_bwrap
def test_loader_adds_the_four_tools(make_agent: Callable[..., Path], root: Path) -> None:
    agent = load_agent(make_agent(sandbox=True))
    assert {"bash", "read_file", "write_file", "edit_file"} <= set(agent.tools)


# --- contracts ----------------------------------------------------------------------------


@needs_bwrap
def test_contracts(make: Make) -> None:
    box = make()
    assert box["bash"].approval == "always"
    assert box["bash"].effects == "sandbox"
    assert box["bash"].idempotency == "keyed"
    assert box["bash"].max_attempts == 1
    assert box["bash"].timeout_ms is not None and box["bash"].timeout_ms > 600_000
    for name in ("read_file", "write_file", "edit_file"):
        assert box[name].approval == "never"
    assert make({"approval": "never"})["bash"].approval == "never"


@needs_bwrap
async def test_timeout_seconds_is_bounded(box: dict[str, Tool]) -> None:
    for bad in (0, 601):
        with pytest.raises(ValidationError):
            await bash(box, "true", timeout_seconds=bad)


# --- without a working bwrap ----------------------------------------------------------------


def test_missing_bwrap_refuses_to_serve(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "coder")  # the operator alone: not enough
    with pytest.raises(ConfigError) as err:
        sandbox.tools(config(True), "sandbox")
    assert "apt-get install bubblewrap" in str(err.value)
    assert "TOREN_SANDBOX_UNCONFINED=coder" in str(err.value)
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "other")  # the agent alone: not enough
    with pytest.raises(ConfigError):
        sandbox.tools(config({"unconfined": True}), "sandbox")


def test_broken_bwrap_is_reported(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/bwrap")
    monkeypatch.setattr(
        sandbox, "probe", lambda bwrap, net: "bwrap: No permissions to create new namespace"
    )
    with pytest.raises(ConfigError) as err:
        sandbox.tools(config(True), "sandbox")
    assert "No permissions to create new namespace" in str(err.value)
    assert "user namespaces" in str(err.value)


async def test_unconfined_needs_both_and_still_clears_env(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "other, coder")
    tools = {t.name: t for t in sandbox.tools(config({"unconfined": True}), "sandbox")}
    assert "UNCONFINED" in tools["bash"].description
    result = await call(tools["bash"], command="pwd; env")
    assert result["exit_code"] == 0
    assert result["stdout"].splitlines()[0] == str(root / "run-1")
    assert SECRET not in result["stdout"]


# --- bash basics --------------------------------------------------------------------------


@needs_bwrap
async def test_bash_runs_in_the_workspace(box: dict[str, Tool]) -> None:
    result = await bash(box, "pwd; echo $HOME; echo oops >&2; exit 3")
    assert result == {"exit_code": 3, "stdout": "/workspace\n/workspace\n", "stderr": "oops\n"}


@needs_bwrap
async def test_workspace_persists_between_calls_and_restarts(
    make: Make, box: dict[str, Tool], root: Path
) -> None:
    await bash(box, "echo from-bash > a.txt")
    assert await call(box["read_file"], path="a.txt") == "     1\tfrom-bash"
    await call(box["write_file"], path="b.txt", content="from-tool\n")
    assert (await bash(box, "cat b.txt"))["stdout"] == "from-tool\n"
    restarted = make()  # a new worker process on the same host
    assert (await bash(restarted, "cat a.txt b.txt"))["stdout"] == "from-bash\nfrom-tool\n"
    assert (root / "run-1" / "a.txt").read_text() == "from-bash\n"


@needs_bwrap
async def test_runs_do_not_share_workspaces(box: dict[str, Tool]) -> None:
    await bash(box, "echo one > mine.txt")
    other = await call(box["bash"], run_id="run-2", command="ls -A")
    assert other["stdout"] == ""
    with pytest.raises(SandboxError, match="does not exist"):
        await call(box["read_file"], run_id="run-2", path="mine.txt")


@needs_bwrap
async def test_output_keeps_head_and_tail(box: dict[str, Tool]) -> None:
    result = await bash(
        box, "printf START; head -c 20000 /dev/zero | tr '\\0' x; printf END; echo e >&2"
    )
    out = result["stdout"]
    assert out.startswith("START" + "x" * 7995 + "\n… [4008 chars cut] …\n")
    assert out.endswith("x" * 7997 + "END")
    assert result["stderr"] == "e\n"


@needs_bwrap
async def test_timeout_kills_the_whole_sandbox(box: dict[str, Tool]) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"
    started = time.monotonic()
    result = await bash(
        box, f"echo before; sleep {marker} & sleep {marker}; echo after", timeout_seconds=1
    )
    assert time.monotonic() - started < 10
    assert result["exit_code"] == 124
    assert result["stdout"] == "before\n"
    assert "killed after timeout_seconds=1" in result["stderr"]
    await asyncio.sleep(0.5)
    assert not _processes_with(f"sleep {marker}")


@needs_bwrap
async def test_cancellation_kills_the_sandbox(box: dict[str, Tool]) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"
    task = asyncio.create_task(bash(box, f"sleep {marker}"))
    await asyncio.sleep(1)
    assert _processes_with(f"sleep {marker}")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.5)
    assert not _processes_with(f"sleep {marker}")


@needs_bwrap
async def test_background_jobs_do_not_hold_the_call(box: dict[str, Tool]) -> None:
    started = time.monotonic()
    result = await bash(box, "sleep 300 & echo started")
    assert result["stdout"] == "started\n"
    assert time.monotonic() - started < 5


@needs_bwrap
async def test_signal_exit_codes_look_like_a_shell(box: dict[str, Tool]) -> None:
    assert (await bash(box, "kill -9 $$"))["exit_code"] == 137


# --- escapes: environment -------------------------------------------------------------------


@needs_bwrap
async def test_worker_env_never_enters(make: Make) -> None:
    box = make({"env": ["API_TOKEN"]}, required=["API_TOKEN", "DB_URL"])
    env = {"API_TOKEN": "declared-token", "DB_URL": "postgres://not-listed"}
    result = await call(
        box["bash"],
        env=env,
        command="env; cat /proc/self/environ /proc/1/environ /proc/*/environ",
    )
    seen = result["stdout"] + result["stderr"]
    assert SECRET not in seen  # the worker's own env, e.g. TEMPORAL_API_KEY
    assert "TOREN_WORKSPACES" not in seen
    assert "postgres://not-listed" not in seen  # declared but not listed in the block
    assert "API_TOKEN=declared-token" in seen
    assert "TOREN_IDEMPOTENCY_KEY=k" in seen
    # bwrap's pid 1 inside must not carry the values on its command line either.
    cmdline = await call(box["bash"], env=env, command="tr '\\0' ' ' < /proc/1/cmdline")
    assert "bwrap" in cmdline["stdout"] and "declared-token" not in cmdline["stdout"]


# --- escapes: network -----------------------------------------------------------------------


async def _connect_from(box: dict[str, Tool]) -> dict[str, Any]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello-from-host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await bash(
            box, f"exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3", timeout_seconds=10
        )
    finally:
        server.close()
        await server.wait_closed()


@needs_bwrap
async def test_network_off_cannot_reach_host_loopback(box: dict[str, Tool]) -> None:
    result = await _connect_from(box)
    assert result["exit_code"] != 0
    assert "hello-from-host" not in result["stdout"]
    assert "Connection refused" in result["stderr"]
    interfaces = await bash(box, "cat /proc/net/dev")
    assert "lo:" in interfaces["stdout"] and "eth0" not in interfaces["stdout"]


@needs_bwrap
async def test_network_on_reaches_host_loopback(make: Make) -> None:
    result = await _connect_from(make({"network": True}))
    assert result["exit_code"] == 0
    assert result["stdout"] == "hello-from-host\n"


# --- escapes: host files ------------------------------------------------------------------


@needs_bwrap
async def test_host_files_are_out_of_sight(box: dict[str, Tool], tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host-only")
    for command in (
        f"cat {outside}",
        "ls /root",
        "ls /home",
        "cat /etc/shadow",
        "ls /sys/class",
        f"ls {Path.cwd()}",
    ):
        result = await bash(box, command)
        assert result["exit_code"] != 0, command
        assert "host-only" not in result["stdout"]
    listing = await bash(box, "ls /; ls /etc")
    assert "root" not in listing["stdout"].split() and "shadow" not in listing["stdout"].split()
    procs = await bash(box, "ls /proc | grep -c '^[0-9]'")
    assert int(procs["stdout"]) < 10  # only the sandbox's own processes


@needs_bwrap
async def test_system_dirs_are_read_only(box: dict[str, Tool]) -> None:
    name = f"toren-escape-{uuid.uuid4().hex}"
    for target in (f"/usr/{name}", f"/etc/{name}", "/etc/passwd", f"/{name}", f"/bin/{name}"):
        result = await bash(box, f"echo pwned >> {target}")
        assert result["exit_code"] != 0, target
    assert not any(Path(p, name).exists() for p in ("/", "/usr", "/etc", "/bin"))
    assert (await bash(box, f"echo ok > /tmp/{name} && cat /tmp/{name}"))["stdout"] == "ok\n"
    assert "pwned" not in Path("/etc/passwd").read_text()


@needs_bwrap
async def test_no_capabilities_even_as_root(box: dict[str, Tool]) -> None:
    status = await bash(box, "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status")
    for line in status["stdout"].splitlines():
        assert line.split()[1] == "0000000000000000", line
    remount = await bash(box, "mount -o remount,rw /usr")
    assert remount["exit_code"] != 0


@needs_bwrap
async def test_hardlinks_to_host_files_fail(box: dict[str, Tool]) -> None:
    result = await bash(box, "ln /etc/passwd hl")
    assert result["exit_code"] != 0


# --- escapes: file tools ------------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "is absolute"),
        ("/workspace/a.txt", "e.g. 'a.txt'"),
        ("../outside.txt", "climbs out of the workspace"),
        ("../../outside.txt", "climbs out of the workspace"),
        ("sub/../../outside.txt", "climbs out of the workspace"),
        ("", "path is empty"),
        (".", "workspace directory itself"),
        ("nul\0byte", "NUL byte"),
    ],
)
async def test_file_tools_refuse_paths_outside(
    box: dict[str, Tool], tmp_path: Path, path: str, message: str
) -> None:
    (tmp_path / "ws" / "outside.txt").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ws" / "outside.txt").write_text("host-only")
    (tmp_path / "outside.txt").write_text("host-only")
    with pytest.raises(SandboxError, match=message):
        await call(box["read_file"], path=path)
    with pytest.raises(SandboxError, match=message):
        await call(box["write_file"], path=path, content="pwned")
    with pytest.raises(SandboxError, match=message):
        await call(box["edit_file"], path=path, old_string="host", new_string="pwned")
    assert (tmp_path / "outside.txt").read_text() == "host-only"
    assert (tmp_path / "ws" / "outside.txt").read_text() == "host-only"


@needs_bwrap
async def test_symlinks_out_of_the_workspace_are_refused(
    box: dict[str, Tool], tmp_path: Path
) -> None:
    (tmp_path / "outside.txt").write_text("host-only")
    passwd = Path("/etc/passwd").read_text()
    made = await bash(
        box,
        "ln -s /etc/passwd pw && ln -s ../.. up && ln -s /etc etc && ln -s /root home && "
        "mkdir -p d && ln -s ../../../outside.txt d/deep && echo ok",
    )
    assert made["stdout"] == "ok\n"
    for path in ("pw", "up/outside.txt", "etc/passwd", "home/.bashrc", "d/deep", "up/new.txt"):
        with pytest.raises(SandboxError, match="symlink that points outside"):
            await call(box["read_file"], path=path)
        with pytest.raises(SandboxError, match="symlink that points outside"):
            await call(box["write_file"], path=path, content="pwned\n")
        with pytest.raises(SandboxError, match="symlink that points outside"):
            await call(box["edit_file"], path=path, old_string="root", new_string="pwned")
    assert Path("/etc/passwd").read_text() == passwd
    assert (tmp_path / "outside.txt").read_text() == "host-only"
    assert not (tmp_path / "new.txt").exists()


@needs_bwrap
async def test_symlinks_inside_the_workspace_work(box: dict[str, Tool]) -> None:
    await bash(box, "mkdir real && echo hi > real/f.txt && ln -s real alias && ln -s f.txt real/l")
    assert await call(box["read_file"], path="alias/l") == "     1\thi"
    written = await call(box["write_file"], path="alias/g.txt", content="x")
    assert written == {"path": "real/g.txt", "bytes": 1}


def test_symlink_swapped_in_after_the_check_is_not_followed(tmp_path: Path) -> None:
    # The race a concurrent bash call could win: the path resolved clean, then a component
    # became a symlink. The O_NOFOLLOW walk refuses it.
    workspace = workspace_dir(tmp_path / "ws", "run-1")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "f").write_text("host-only")
    (workspace / "d").symlink_to(tmp_path / "target")
    (workspace / "f").symlink_to(tmp_path / "target" / "f")
    for parts in (("d", "f"), ("f",)):
        with (
            pytest.raises(SandboxError, match="symlink"),
            _open_file(workspace, parts, os.O_RDONLY, create=False),
        ):
            pass


@needs_bwrap
async def test_fifos_and_directories_are_refused_without_hanging(box: dict[str, Tool]) -> None:
    await bash(box, "mkfifo pipe && mkdir dir")
    for path in ("pipe", "dir"):
        with pytest.raises(SandboxError, match="not a regular file|is a directory"):
            await asyncio.wait_for(call(box["read_file"], path=path), 5)
        with pytest.raises(SandboxError, match="not a regular file|is a directory"):
            await asyncio.wait_for(call(box["write_file"], path=path, content="x"), 5)


def test_workspace_names_cannot_escape_the_root(tmp_path: Path) -> None:
    assert workspace_name("run-1") == "run-1"
    for run_id in ("../../etc", "a/b", "..", ".hidden", ""):
        name = workspace_name(run_id)
        assert "/" not in name and not name.startswith(".") and name
        assert workspace_dir(tmp_path, run_id).parent == tmp_path
    assert workspace_name("a/b") != workspace_name("a_b")


# --- file tools -----------------------------------------------------------------------------


@needs_bwrap
async def test_read_file_numbers_lines_and_pages(box: dict[str, Tool]) -> None:
    lines = "".join(f"line{i}\n" for i in range(1, 11))
    await call(box["write_file"], path="ten.txt", content=lines)
    whole = await call(box["read_file"], path="ten.txt")
    assert whole.splitlines()[0] == "     1\tline1"
    assert whole.splitlines()[-1] == "    10\tline10"
    page = await call(box["read_file"], path="ten.txt", offset=3, limit=2)
    assert page == "     3\tline3\n     4\tline4\n… more lines follow; read on with offset=5"
    assert await call(box["read_file"], path="ten.txt", offset=9) == "     9\tline9\n    10\tline10"
    with pytest.raises(SandboxError, match="offset 11 is past the end of 'ten.txt', which has 10"):
        await call(box["read_file"], path="ten.txt", offset=11)
    with pytest.raises(ValidationError):
        await call(box["read_file"], path="ten.txt", offset=0)
    with pytest.raises(ValidationError):
        await call(box["read_file"], path="ten.txt", limit=2001)


@needs_bwrap
async def test_read_file_edge_cases(box: dict[str, Tool]) -> None:
    await call(box["write_file"], path="empty.txt", content="")
    assert await call(box["read_file"], path="empty.txt") == "(empty file)"
    await call(box["write_file"], path="long.txt", content="y" * 2500)
    assert (await call(box["read_file"], path="long.txt")).endswith("y… [500 chars cut]")
    await bash(box, "head -c 3000000 /dev/zero | tr '\\0' z > huge; echo end >> huge")
    huge = await call(box["read_file"], path="huge")
    assert huge == "     1\t" + "z" * 2000 + "… [line cut at 2000 chars]"
    await bash(box, "printf 'a\\0b' > bin")
    with pytest.raises(SandboxError, match="looks binary"):
        await call(box["read_file"], path="bin")
    with pytest.raises(SandboxError, match="'missing.txt' does not exist"):
        await call(box["read_file"], path="missing.txt")


@needs_bwrap
async def test_write_file_creates_parents_and_counts_bytes(box: dict[str, Tool]) -> None:
    result = await call(box["write_file"], path="a/b/c.txt", content="é\n")
    assert result == {"path": "a/b/c.txt", "bytes": 3}
    await call(box["write_file"], path="a/b/c.txt", content="short")
    assert (await bash(box, "cat a/b/c.txt"))["stdout"] == "short"


@needs_bwrap
async def test_edit_file(box: dict[str, Tool]) -> None:
    await call(box["write_file"], path="f.py", content="x = 1\nx = 1\nx = 1\ny = 2\n")
    with pytest.raises(SandboxError, match="old_string not found in 'f.py'"):
        await call(box["edit_file"], path="f.py", old_string="z = 3", new_string="z = 4")
    with pytest.raises(SandboxError, match="occurs 3 times in 'f.py'.*replace_all: true"):
        await call(box["edit_file"], path="f.py", old_string="x = 1", new_string="x = 2")
    with pytest.raises(SandboxError, match="identical"):
        await call(box["edit_file"], path="f.py", old_string="y", new_string="y")
    one = await call(box["edit_file"], path="f.py", old_string="y = 2", new_string="y = 3")
    assert one == {"path": "f.py", "replacements": 1}
    every = await call(
        box["edit_file"], path="f.py", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert every == {"path": "f.py", "replacements": 3}
    assert (await bash(box, "cat f.py"))["stdout"] == "x = 2\nx = 2\nx = 2\ny = 3\n"


def _processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


async def test_a_call_leaves_no_pipe_open_when_a_stray_process_holds_its_output(
    tmp_path: Path,
) -> None:
    # An unconfined command's descendant in its own session escapes the group kill and keeps
    # the call's stdout and stderr open; the call ends after its drain, and its ends of the
    # pipes must be closed then, not at some later garbage collection.
    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        result = await Jail(None, False).run(
            f"setsid sleep {marker}00 & echo started", tmp_path, {"PATH": os.environ["PATH"]}, 10
        )
        await asyncio.sleep(0.1)  # a closed pipe lets go of its descriptor at the next loop turn
        after = len(os.listdir("/proc/self/fd"))
    finally:
        gc.enable()
        subprocess.run(["pkill", "-f", f"sleep {marker}00"], check=False)
    assert result["stdout"] == "started\n"
    assert after == before
