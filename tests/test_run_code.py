"""`ctx.run_code`: Python source in bash's jail, called by a tool in a real run on a dev server.

Each escape attempt (network, a file outside the workspace) also runs once unconfined, as a
control: it succeeds there, so its failure in the jail is the jail's doing, not a broken probe.
Tests that run code need `bwrap` and are skipped without it (CI installs bubblewrap).
"""

from __future__ import annotations

import json
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

import toren.worker.tools._sandbox as sandbox
from tests.conftest import fetch_history, history_bytes, result_of, secret
from toren import CodeRun, SandboxError, ToolContext
from toren import client as toren_client
from toren.agent._config import AgentConfig
from toren.client._events import render
from toren.store._workspace import download
from toren.store._workspace_dirs import workspace_name
from toren.worker import serve
from toren.worker.tools._sandbox._jail import Jail

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (`bwrap`) is not installed; apt-get install bubblewrap to run these",
)

# The tool passes its arguments straight to ctx.run_code and returns the whole CodeRun.
CODE = """
import json
from toren import define_tool

async def code(args, ctx):
    run = await ctx.run_code(**args)
    return json.dumps({"ok": run.ok, "result": run.result, "stdout": run.stdout,
                       "stderr": run.stderr, "exit_code": run.exit_code, "error": run.error})

tool = define_tool(description="Run Python.", input={"type": "object"}, handler=code)
"""

# Passes the agent's secret into the code, which prints and returns it.
LEAK = """
import json
from toren import define_tool

async def leak(args, ctx):
    run = await ctx.run_code("def main(t):\\n    print(t)\\n    return t\\n",
                             args=[ctx.env["CODE_TOKEN"]])
    return json.dumps({"stdout": run.stdout, "result": run.result})

tool = define_tool(description="Leak a secret.", handler=leak)
"""

CONNECT = """
import socket
def main(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        return "connected"
    except OSError as err:
        return "refused: " + type(err).__name__
"""

READ = """
def main(path):
    try:
        with open(path) as f:
            return "read: " + f.read()
    except OSError as err:
        return "unreadable: " + type(err).__name__
"""


@pytest.fixture
def workspaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspaces root (TOREN_WORKSPACES) the worker's sandbox uses."""
    root = tmp_path / "ws"
    monkeypatch.setenv("TOREN_WORKSPACES", str(root))
    return root


@pytest.fixture
def listener() -> Iterator[int]:
    """A port on the worker's 127.0.0.1 that accepts connections."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


Run = Callable[..., Any]


@pytest.fixture
def run_calls(client: Client, make_agent: Callable[..., Path], workspaces: Path) -> Run:
    """Run an agent whose model calls `code` once per keyword; return (run id, {call id: result}).

    A keyword whose args are None calls `leak` instead.
    """

    async def run(*, env: dict[str, Any] | None = None, **calls: dict[str, Any] | None) -> Any:
        folder = make_agent(
            tools={"code": CODE, "leak": LEAK},
            script=[
                {
                    "text": "",
                    "tool_calls": [
                        {
                            "id": cid,
                            "name": "code" if args is not None else "leak",
                            "args": args or {},
                        }
                        for cid, args in calls.items()
                    ],
                },
                "done",
            ],
            **({"env": env} if env else {}),
        )
        run_id = f"{folder.name}-{uuid.uuid4().hex[:6]}"
        async with serve(client, [folder]):
            handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
            await result_of(handle)
        events = render(await fetch_history(client, handle.id))
        done = {e["callId"]: e["result"] for e in events if e["type"] == "ToolCallCompleted"}
        return run_id, {cid: _parse(text) for cid, text in done.items()}

    return run


def _parse(text: str) -> Any:
    return json.loads(text) if text.startswith("{") else text


@needs_bwrap
async def test_result_output_modules_entry_and_workspace(run_calls: Run, workspaces: Path) -> None:
    run_id, results = await run_calls(
        helpers={
            "source": "from helpers import double\n"
            "def main(x):\n"
            "    print('working on', x)\n"
            "    return {'y': double(x)}\n",
            "modules": {"helpers.py": "def double(v):\n    return 2 * v\n"},
            "args": [21],
        },
        entry={
            "source": "import json\n"
            "from pkg.util import greet\n"
            "def compute(name, times):\n"
            # Printing what looks like a result must not become the result.
            "    print(json.dumps({'result': 'spoofed'}))\n"
            "    open('made_by_code.txt', 'w').write('hi')\n"
            "    return [greet(name)] * times\n",
            "modules": {"pkg/util.py": "def greet(n):\n    return 'hello ' + n\n"},
            "entry": "compute",
            "args": ["ada", 2],
        },
        asynchronous={"source": "async def main(a, b):\n    return a + b\n", "args": [1, 2]},
    )
    assert results["helpers"] == {
        "ok": True,
        "result": {"y": 42},
        "stdout": "working on 21\n",
        "stderr": "",
        "exit_code": 0,
        "error": None,
    }
    assert results["entry"]["result"] == ["hello ada", "hello ada"]
    assert results["entry"]["stdout"] == '{"result": "spoofed"}\n'
    assert results["asynchronous"]["result"] == 3
    # It ran in the run's workspace, the directory bash and the file tools use.
    assert (workspaces / workspace_name(run_id) / "made_by_code.txt").read_text() == "hi"


@needs_bwrap
async def test_failures_come_back_as_one_line_errors(run_calls: Run) -> None:
    _, results = await run_calls(
        raises={"source": "def main():\n    return {}['missing']\n"},
        no_entry={"source": "def other():\n    return 1\n"},
        not_json={"source": "def main():\n    return {1, 2}\n"},
        syntax={"source": "def main(:\n"},
    )
    raises = results["raises"]
    assert (raises["ok"], raises["result"], raises["exit_code"]) == (False, None, 1)
    assert raises["error"] == "KeyError: 'missing'"
    assert "Traceback (most recent call last)" in raises["stderr"]
    assert results["no_entry"]["error"] == (
        "the code defines no function 'main' (the entry to call)"
    )
    assert results["not_json"]["error"] == (
        "main() returned a set, which is not JSON: Object of type set is not JSON serializable"
    )
    assert results["syntax"]["error"] == "SyntaxError: invalid syntax"


@needs_bwrap
async def test_the_network_is_unreachable(run_calls: Run, listener: int, tmp_path: Path) -> None:
    # Control: the same code, unconfined, reaches the port.
    control = await sandbox.run_code(Jail(None, False), tmp_path, CONNECT, args=[listener])
    assert control.result == "connected"
    _, results = await run_calls(net={"source": CONNECT, "args": [listener]})
    assert results["net"]["ok"], results["net"]
    assert results["net"]["result"] == "refused: ConnectionRefusedError"


@needs_bwrap
async def test_files_outside_the_workspace_cannot_be_read(run_calls: Run, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("worker-private")
    repo_file = Path(__file__).resolve()
    control = await sandbox.run_code(Jail(None, False), tmp_path, READ, args=[str(outside)])
    assert control.result == "read: worker-private"
    _, results = await run_calls(
        tmp={"source": READ, "args": [str(outside)]},
        repo={"source": READ, "args": [str(repo_file)]},
        home={"source": READ, "args": ["/root/.bashrc"]},
        write={"source": "def main():\n    open('/code/helper.py', 'w')\n"},
    )
    assert results["tmp"]["result"] == "unreadable: FileNotFoundError"
    assert results["repo"]["result"] == "unreadable: FileNotFoundError"
    assert results["home"]["result"] == "unreadable: FileNotFoundError"
    assert results["write"]["error"].startswith("OSError: [Errno 30] Read-only file system")


@needs_bwrap
async def test_bad_module_names_are_refused_naming_the_key(run_calls: Run) -> None:
    source = "def main():\n    return 1\n"
    _, results = await run_calls(
        climbs={"source": source, "modules": {"../evil.py": "x = 1"}},
        absolute={"source": source, "modules": {"/tmp/evil.py": "x = 1"}},
        not_py={"source": source, "modules": {"data.txt": "x"}},
        ours={"source": source, "modules": {"_toren_runner.py": "x = 1"}},
    )
    assert results["climbs"].startswith(
        "tool code failed: UsageError: modules key '../evil.py' is not a module file name"
    )
    assert "modules key '/tmp/evil.py' is not a module file name" in results["absolute"]
    assert "modules key 'data.txt' is not a module file name" in results["not_py"]
    assert "modules key '_toren_runner.py': names starting with '_toren_'" in results["ours"]


@needs_bwrap
async def test_a_timeout_is_enforced(run_calls: Run) -> None:
    started = time.monotonic()
    _, results = await run_calls(
        slow={"source": "import time\ndef main():\n    time.sleep(60)\n", "timeout_s": 1},
        bad={"source": "def main():\n    return 1\n", "timeout_s": 601},
        text_args={"source": "def main(*a):\n    return a\n", "args": "abc"},
    )
    assert time.monotonic() - started < 30
    slow = results["slow"]
    assert (slow["ok"], slow["exit_code"]) == (False, 124)
    assert slow["error"] == "the code timed out after 1s"
    assert slow["stderr"].endswith("[toren] killed after timeout_s=1 (at most 600)")
    assert "timeout_s must be above 0 and at most 600" in results["bad"]
    assert "args must be a list of JSON values, got str" in results["text_args"]


@needs_bwrap
async def test_secrets_the_code_prints_are_redacted(run_calls: Run, client: Client) -> None:
    token = secret("code-token-" + uuid.uuid4().hex[:8])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CODE_TOKEN", token)
        run_id, results = await run_calls(
            env={"required": ["CODE_TOKEN"]},
            leak=None,
        )
    assert results["leak"]["stdout"] == "[redacted]\n"
    assert results["leak"]["result"] == "[redacted]"
    assert token.encode() not in await history_bytes(client, run_id)


async def test_outside_a_run_it_raises() -> None:
    ctx = ToolContext(env={}, idempotency_key="k", run_id="r", call_id="c", agent="a", tool="t")
    with pytest.raises(RuntimeError, match="run_code needs a run"):
        await ctx.run_code("def main():\n    return 1\n")


def test_code_run_is_ok_without_an_error() -> None:
    assert CodeRun(result=None).ok
    assert not CodeRun(error="ValueError: x").ok


def test_without_bwrap_it_refuses_unless_both_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "coder")  # the operator alone: not enough
    plain = AgentConfig.model_validate({"name": "coder", "model": "mock/x"})
    with pytest.raises(SandboxError) as err:
        sandbox.code_jail(plain)
    assert "ctx.run_code needs bubblewrap" in str(err.value)
    assert "apt-get install bubblewrap" in str(err.value)
    both = AgentConfig.model_validate(
        {"name": "coder", "model": "mock/x", "sandbox": {"unconfined": True}}
    )
    jail = sandbox.code_jail(both)
    assert (jail.bwrap, jail.network, jail.who) == (None, False, "run_code")
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "other")  # the agent alone: not enough
    with pytest.raises(SandboxError):
        sandbox.code_jail(both)


WRITE = """
import time
def main(name):
    time.sleep(0.3)
    open(name, "w").write(name)
"""


@needs_bwrap
async def test_code_calls_of_one_turn_run_in_order(
    client: Client, make_agent: Callable[..., Path], workspaces: Path, tmp_path: Path
) -> None:
    # `code` declares nothing about the workspace, but its handler names ctx.run_code: its
    # calls run one after another, each from the version the one before it recorded, as bash's
    # do. Side by side, both would start from the same version in the same directory, and
    # each would store whatever the other had half written.
    writer = CODE.replace("handler=code)", 'effects="external", handler=code)')

    def call(name: str) -> dict[str, Any]:
        return {"id": name, "name": "code", "args": {"source": WRITE, "args": [f"{name}.txt"]}}

    script = [{"tool_calls": [call("base")]}, {"tool_calls": [call("a"), call("b")]}, "done"]
    folder = make_agent(tools={"code": writer}, script=script)
    run_id = f"{folder.name}-{uuid.uuid4().hex[:6]}"
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await result_of(handle)
    events = render(await fetch_history(client, run_id))
    order = [(e["type"], e["callId"]) for e in events if e["type"].startswith("ToolCall")]
    assert order == [
        ("ToolCallStarted", "base"), ("ToolCallCompleted", "base"),
        ("ToolCallStarted", "a"), ("ToolCallCompleted", "a"),
        ("ToolCallStarted", "b"), ("ToolCallCompleted", "b"),
    ]  # fmt: skip
    version = await toren_client.workspace_version(client, run_id)
    assert version is not None
    download(run_id, version, tmp_path / "final")
    assert sorted(p.name for p in (tmp_path / "final").iterdir()) == ["a.txt", "b.txt", "base.txt"]
