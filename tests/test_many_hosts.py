"""Many worker hosts, one store: a run survives losing the host of a call, files and
attachments included.

Two `toren worker` subprocesses serve one sandboxed agent, each with its own directory and
workspace cache (`TOREN_WORKSPACES`), as two machines would; they share only the store
(`TOREN_STORE`: a directory, then S3 on a moto server) and the Temporal server. The
attachment is made before the run (`toren.store._attachments.attach`; with S3, `toren attach` from a
third directory). The scripted run writes files, reads the attachment, then starts a slow bash call that half-changes the
workspace; the worker running it is SIGKILLed. bash fails closed (`max_attempts=1`) and the
other worker finishes the run: its calls see every file from before the killed call and none
of what the killed call did, and the attachment is still readable.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import S3_ENV, DevServer, fetch_history, task_failures, wait_for
from toren import client as toren_client
from toren.store._attachments import attach
from toren.store._objects import Store
from toren.store._store import open_store
from toren.store._workspace import download

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (`bwrap`) is not installed; apt-get install bubblewrap to run these",
)

SLOW = (
    "echo partial > half.txt && echo more >> notes/a.txt && rm d/e/b.txt && mkdir halfdir "
    "&& chmod -x run.sh && sleep 300"
)
CHECK = (
    "ls -A | tr '\\n' ' '; echo; cat notes/a.txt d/e/b.txt; ./run.sh; readlink link; "
    "test -e half.txt || echo no-half; test -e halfdir || echo no-halfdir"
)


def script(attachment: str) -> list[Any]:
    def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
        return {"tool_calls": [{"id": call_id, "name": name, "args": args}]}

    return [
        call("w1", "write_file", path="notes/a.txt", content="from before\n"),
        call("b1", "bash", command="mkdir -p d/e empty && echo b > d/e/b.txt && "
             "printf '#!/bin/sh\\necho run.sh ran\\n' > run.sh && chmod +x run.sh && "
             "ln -s notes/a.txt link"),
        call("r1", "read_attachment", file_id=attachment),
        call("slow", "bash", command=SLOW, timeout_seconds=600),
        call("r2", "read_file", path="notes/a.txt"),
        call("b2", "bash", command=CHECK),
        call("r3", "read_attachment", file_id=attachment),
        call("w2", "write_file", path="final.txt", content="done\n"),
        "finished: {last_tool_result}",
    ]  # fmt: skip


EXPECTED = {
    "notes": ("dir",),
    "notes/a.txt": ("file", b"from before\n", False),
    "d": ("dir",),
    "d/e": ("dir",),
    "d/e/b.txt": ("file", b"b\n", False),
    "empty": ("dir",),
    "run.sh": ("file", b"#!/bin/sh\necho run.sh ran\n", True),
    "link": ("link", "notes/a.txt"),
    "final.txt": ("file", b"done\n", False),
}
"""The run's last workspace version: every file from before the killed call, none of its."""


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                out[relative] = ("dir",)
            else:
                out[relative] = ("file", path.read_bytes(), os.access(path, os.X_OK))
    return out


class Host:
    """One worker host: its own directory, workspace cache and `toren worker` process."""

    def __init__(self, folder: Path, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.workspaces = home / "workspaces"
        self.log = home / "worker.log"
        home.mkdir(parents=True)
        env = {**env, "TOREN_WORKSPACES": str(self.workspaces), "PYTHONUNBUFFERED": "1"}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toren.cli", "worker", str(folder)],
                cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited: {self.log.read_text(errors='replace')[-3000:]}")
        return "serving agent" in self.log.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def hosts(dev_server: DevServer, tmp_path: Path) -> Iterator[Callable[..., list[Host]]]:
    started: list[Host] = []

    def start(folder: Path, store_env: dict[str, str], count: int = 2) -> list[Host]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AWS_"))}
        env.pop("TOREN_ATTACHMENTS", None)  # attachments come from the store
        env.update(TEMPORAL_ADDRESS=dev_server.address, PYTHONPATH=str(ROOT), **store_env)
        for n in range(count):
            started.append(Host(folder, tmp_path / f"host{n + 1}", env))
        return started[-count:]

    yield start
    for h in started:
        h.stop()


def last_workspace_version(history: Any) -> str | None:
    """The workspace version the run's last workspace-writing call recorded in history."""
    version = None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads = event.activity_task_completed_event_attributes.result.payloads
            result = json.loads(payloads[0].data) if payloads else None
            if isinstance(result, dict) and result.get("workspace"):
                version = result["workspace"]
    return version


async def run_losing_a_host(
    client: Client,
    make_agent: Callable[..., Path],
    hosts: Callable[..., list[Host]],
    store: Store,
    store_env: dict[str, str],
    tmp_path: Path,
    attach_with_cli: bool = False,
) -> None:
    brief_file = tmp_path / "brief.txt"
    brief_file.write_bytes(b"The brief: ship it on Friday.\n")
    if attach_with_cli:
        # From a third machine (its own directory), as a person would: `toren attach`.
        client_home = tmp_path / "client"
        client_home.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "TOREN_ATTACHMENTS"}
        out = subprocess.run(
            [sys.executable, "-m", "toren.cli", "attach", str(brief_file)],
            capture_output=True, text=True, timeout=60, cwd=client_home,
            env={**env, **store_env, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        [brief_id] = re.findall(r"\batt_[0-9a-f]{16}\b", out.stdout)
        assert not (client_home / ".toren").exists()  # it went to the store
    else:
        brief_id = attach(brief_file, store=store.sub("attachments")).id
    folder = make_agent(
        script=script(brief_id),
        sandbox={"approval": "never"},
        builtin_tools=["read_attachment"],
    )
    workers = hosts(folder, store_env)
    await wait_for(lambda: all(w.ready() for w in workers), timeout=90)
    run_id = f"hosts-{uuid.uuid4().hex[:10]}"
    handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id,
                                          attachments=[brief_id])  # fmt: skip

    # The slow call is in its handler on one host (it wrote its first file there): kill it.
    def running_slow_call() -> Host | None:
        return next((w for w in workers if (w.workspaces / run_id / "half.txt").exists()), None)

    victim = await wait_for(running_slow_call, timeout=90)
    victim.kill()
    [survivor] = [w for w in workers if w is not victim]

    result = await asyncio.wait_for(handle.result(), timeout=120)
    assert result.text.startswith("finished: ") and "final.txt" in result.text, result
    transcript = await handle.query("transcript")
    said = {m["tool_call_id"]: m["content"] for m in transcript if m.get("role") == "tool"}
    assert said["slow"] == "tool bash failed closed after 1 attempts"
    for call_id in ("r1", "r3"):  # before the kill, and after it on the other host
        page = json.loads(said[call_id])
        assert page["name"] == "brief.txt" and "ship it on Friday" in page["text"], said[call_id]
    assert "from before" in said["r2"] and "more" not in said["r2"], said["r2"]
    check = json.loads(said["b2"])
    assert check["exit_code"] == 0, check
    listed = check["stdout"].splitlines()[0].split()
    assert sorted(listed) == ["d", "empty", "link", "notes", "run.sh"], check
    assert check["stdout"].splitlines()[1:] == [
        "from before", "b", "run.sh ran", "notes/a.txt", "no-half", "no-halfdir"
    ], check  # fmt: skip

    # The killed call's files are on the dead host's disk only, never in a recorded version.
    assert (victim.workspaces / run_id / "half.txt").exists()
    history = await fetch_history(client, run_id)
    assert not task_failures(history)
    version = last_workspace_version(history)
    assert version is not None
    download(run_id, version, tmp_path / "final", store)
    assert snapshot(tmp_path / "final") == EXPECTED
    # The survivor's own copy is that version too (it ran the calls after the kill).
    assert survivor.proc.poll() is None
    assert snapshot(survivor.workspaces / run_id) == EXPECTED


async def test_a_run_survives_losing_its_host_with_a_shared_directory_store(
    client: Client,
    make_agent: Callable[..., Path],
    hosts: Callable[..., list[Host]],
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared-store"
    store = open_store(str(shared))
    await run_losing_a_host(
        client, make_agent, hosts, store, {"TOREN_STORE": str(shared)}, tmp_path
    )
    # Versions and blobs went to the shared directory, nowhere else.
    assert any(shared.glob("versions/*/*.json")) and any(shared.glob("blobs/sha256/*/*"))
    for n in (1, 2):
        assert not (tmp_path / f"host{n}" / ".toren").exists()


async def test_a_run_survives_losing_its_host_with_an_s3_store(
    client: Client,
    make_agent: Callable[..., Path],
    hosts: Callable[..., list[Host]],
    moto_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import boto3

    s3_env = {**S3_ENV, "AWS_ENDPOINT_URL": moto_endpoint}
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    bucket = f"hosts-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/toren"
    await run_losing_a_host(
        client, make_agent, hosts, open_store(url), {"TOREN_STORE": url, **s3_env}, tmp_path,
        attach_with_cli=True,
    )  # fmt: skip
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.startswith("toren/versions/") for k in keys)
    assert any(k.startswith("toren/attachments/") for k in keys)
    for n in (1, 2):
        assert not (tmp_path / f"host{n}" / ".toren").exists()
