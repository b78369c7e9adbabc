"""Record, with the previous release's worker and client, the histories its runs leave.

    .venv/bin/python tests/histories/record_release.py [PATH...]

Runs the wheel in `tests/fixtures/releases/` (in a subprocess, with the wheel first on
`PYTHONPATH`: see `tests._releases`) against a throwaway dev server, one run or thread per path
of the workflows, and writes each history to `tests/histories/release-<version>/<path>.json`
(`<path>.<n>.json` for each run of a chain that continued as new; `process.child.json` is the
child run). `tests/test_releases.py` replays them all against the current code.

Run it at each release, once the previous release's wheel is in place. A file that exists is
never written again: it is what that release recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SITE = "TOREN_RELEASE_SITE"
"""Set in the subprocess that runs the previous release: where its wheel is unzipped."""

TOOLS = {
    "echo": """
        from toren import define_tool
        tool = define_tool(
            description="Echo.",
            input={"type": "object", "properties": {"text": {"type": "string"}}},
            handler=lambda a, c: "echo:" + a.get("text", ""),
        )
    """,
    "lookup": """
        from toren import define_tool
        tool = define_tool(
            description="A pure lookup (runs as a local activity).",
            input={"type": "object", "properties": {"q": {"type": "string"}}},
            effects="none", idempotency="none", timeout_ms=2000,
            handler=lambda a, c: "found " + a.get("q", ""),
        )
    """,
    "gated": """
        from toren import define_tool
        tool = define_tool(description="Needs a person.", approval="always",
                           handler=lambda a, c: "gated ran")
    """,
}


def call(name: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "args": args}


def echoes(n: int, prefix: str) -> list[Any]:
    return [{"tool_calls": [call("echo", f"{prefix}{i}", text=str(i))]} for i in range(n)]


# Each path: (the mock's script, agent.yaml keys, what to do once the run or thread started).
Drive = Callable[[Any, str], Awaitable[None]]


async def nothing(client: Any, workflow_id: str) -> None:
    pass


async def approve(client: Any, run_id: str) -> None:
    from toren import client as toren

    await toren.wait_for_approval(client, run_id)
    await toren.approve(client, run_id, "g", by="release")  # the `decide` update


async def deny(client: Any, run_id: str) -> None:
    from toren import client as toren

    await toren.wait_for_approval(client, run_id)
    await client.get_workflow_handle(run_id).signal("deny", {"call_id": "g", "by": "release"})


def messages(*contents: str) -> Drive:
    async def send(client: Any, thread_id: str) -> None:
        from toren import client as toren

        for n, content in enumerate(contents):
            await toren.send_message(client, thread_id, content, message_id=f"m{n}")
        await toren.close_thread(client, thread_id, by="release", wait=False)

    return send


RUNS: dict[str, tuple[list[Any], dict[str, Any], Drive]] = {
    "tools": (
        [
            {
                "tool_calls": [
                    call("echo", "a", text="1"),
                    call("lookup", "b", q="x"),
                    call("nope", "c"),
                ]
            },
            "done: {last_tool_result}",
        ],
        {},
        nothing,
    ),  # fmt: skip
    "approval_granted": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, approve),
    "approval_denied": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, deny),
    "continue_as_new": (
        [*echoes(20, "e"), "done"],
        {"limits": {"continueAsNewAfterEvents": 100}},
        nothing,
    ),
    "process": (
        [
            {"tool_calls": [call("run_process", "r1", process="research", input="find it")]},
            *echoes(3, "e"),
            "done",
        ],
        {
            "builtin_tools": ["run_process"],
            "processes": {"research": {"agent": "../release_process_child"}},
        },
        nothing,
    ),  # fmt: skip
}
THREADS: dict[str, tuple[list[Any], dict[str, Any], Drive]] = {
    "thread_messages": (
        ["one", {"tool_calls": [call("echo", "e", text="x")]}, "two", "three"],
        {},
        messages("first", "second", "third"),
    ),  # fmt: skip
    "thread_continue_as_new_at_rest": (
        [s for n in range(8) for s in (*echoes(1, f"m{n}."), "ok")],
        {"limits": {"continueAsNewAfterEvents": 100}},
        messages(*(f"m{n}" for n in range(8))),
    ),
    "thread_continue_as_new_mid_execution": (
        [*echoes(14, "e"), "long answer", "short answer"],
        {"limits": {"continueAsNewAfterEvents": 100}},
        messages("a long one", "a short one"),
    ),
}


def workflow_id(file: str) -> str:
    """The id of the run whose history is in `file` (`process.child.json`: its child run)."""
    path = file.split(".")[0]
    return f"release-{path}/research/r1" if ".child." in file else f"release-{path}"


def agent(root: Path, name: str, script: list[Any], config: dict[str, Any]) -> Path:
    import yaml

    folder = root / name
    (folder / "tools").mkdir(parents=True)
    data = {"name": name, "model": "mock/scripted", **config}
    (folder / "agent.yaml").write_text(yaml.safe_dump(data))
    (folder / "instructions.md").write_text("Release fixture.")
    (folder / "mock_script.yaml").write_text(yaml.safe_dump(script))
    for tool, source in TOOLS.items():
        (folder / "tools" / f"{tool}.py").write_text(textwrap.dedent(source))
    return folder


def write(out: Path, name: str, data: dict[str, Any]) -> None:
    path = out / f"{name}.json"
    if path.exists():
        print(f"kept {path.name} (recorded before)")
        return
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"recorded {path.name}")


async def record(root: Path, client: Any, out: Path, path: str) -> None:
    from temporalio.client import WorkflowFailureError

    from toren import client as toren
    from toren.worker import serve

    thread = path in THREADS
    script, config, drive = THREADS[path] if thread else RUNS[path]
    name = f"release_{path}"
    folders = [agent(root, name, script, config)]
    if path == "process":
        folders.append(agent(root, "release_process_child", ["the answer is 42"], {}))
    async with serve(client, folders):
        if thread:
            handle = await toren.start_thread(client, name, thread_id=workflow_id(path))
        else:
            handle = await toren.start_run(client, name, "go", run_id=workflow_id(path))
        await drive(client, handle.id)
        try:
            await asyncio.wait_for(handle.result(), 120)
        except WorkflowFailureError as err:
            raise SystemExit(f"{path}: the run failed: {err.cause}") from err
        chain = await toren.histories(client, handle.id)
        if path == "process":
            child = client.get_workflow_handle(workflow_id("process.child.json"))
            await asyncio.wait_for(child.result(), 60)
            write(out, "process.child", json.loads((await child.fetch_history()).to_json()))
    for i, history in enumerate(chain):
        suffix = f".{i}" if len(chain) > 1 else ""
        write(out, f"{path}{suffix}", json.loads(history.to_json()))


async def main(paths: list[str], version: str) -> None:
    import toren
    from toren.connect import connect
    from toren.testing import DevServer

    site = Path(os.environ[SITE])
    assert Path(toren.__file__).is_relative_to(site), f"not the release: {toren.__file__}"
    out = HERE / f"release-{version}"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(Path(tmp) / "server")
        server.start()
        try:
            client = await connect(target_host=server.address)
            for path in paths or [*RUNS, *THREADS]:
                await record(Path(tmp), client, out, path)
        finally:
            server.stop()


def in_release(args: list[str]) -> int:
    """Run this script again with the previous release first on `PYTHONPATH`."""
    sys.path.append(str(HERE.parent.parent))  # after site-packages: `tests`, never `toren`
    from tests._releases import env_for, previous_version, unpack

    with tempfile.TemporaryDirectory() as tmp:
        site = unpack(Path(tmp))
        env = {**env_for(site), SITE: str(site), "TOREN_RELEASE_VERSION": previous_version()}
        return subprocess.run([sys.executable, __file__, *args], env=env, cwd=tmp).returncode


if __name__ == "__main__":
    if SITE not in os.environ:
        raise SystemExit(in_release(sys.argv[1:]))
    asyncio.run(main(sys.argv[1:], os.environ["TOREN_RELEASE_VERSION"]))
