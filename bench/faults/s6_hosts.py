"""Scenario 6: every worker host SIGKILLed mid bash call; the runs end on other hosts, files
and attachments included.

Two worker hosts (each its own `TOREN_WORKSPACES` cache) share one store (`TOREN_STORE`, a
directory) and serve a sandboxed agent. Each run writes files (write_file, bash), reads an
attachment, then starts a slow bash call that half-changes the workspace and sleeps. Once every
run's slow call is in its handler, both hosts are SIGKILLed; one restarts on its old cache
(its copies marked busy by the killed calls) and a new host with an empty cache joins. bash
fails closed (`max_attempts=1`); each run then reads its files back, reads the attachment
again and writes one more file. Each run's last workspace version (named by history) is
downloaded from the store and compared with the files the script leaves: from before the kill
all of them, from the killed call none.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType

from bench.faults.common import Harness, await_outcome
from bench.faults.report import Figure, info, must_equal, must_zero
from toren import client as toren_client
from toren.store._attachments import attach
from toren.store._store import DirStore
from toren.store._workspace import download

__all__ = ["run", "skipped"]

NAME = "6 host loss + workspace"
SLOW = (
    "echo partial > half.txt && echo more >> notes/a.txt && rm d/e/b.txt && mkdir halfdir "
    "&& chmod -x run.sh && sleep 300"
)
CHECK = (
    "ls -A | tr '\\n' ' '; echo; cat notes/a.txt d/e/b.txt; ./run.sh; readlink link; "
    "test -e half.txt || echo no-half; test -e halfdir || echo no-halfdir"
)
CHECK_SAYS = [["d", "empty", "link", "notes", "run.sh"], "from before", "b", "run.sh ran",
              "notes/a.txt", "no-half", "no-halfdir"]  # fmt: skip
"""What the bash call after the kill prints: every earlier file, none of the killed call's."""
EXPECTED: dict[str, tuple[Any, ...]] = {
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
"""Each run's last workspace version, entry by entry."""
BRIEF = b"The brief: ship it on Friday.\n"


def _script(attachment: str) -> list[Any]:
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


def _write_agent(base: Path, name: str, attachment: str) -> Path:
    path = base / name
    path.mkdir(parents=True)
    config = {
        "name": name,
        "model": "mock/scripted",
        "sandbox": {"approval": "never"},
        "builtin_tools": ["read_attachment"],
        "limits": {"maxStepsPerTask": 20},
    }
    (path / "agent.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (path / "instructions.md").write_text("You are a fault-injection test agent.\n")
    (path / "mock_script.yaml").write_text(yaml.safe_dump(_script(attachment), sort_keys=False))
    return path


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under `root` (links not followed): kind, then content and exec bit or target."""
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


async def last_workspace_version(h: Harness, run_id: str) -> str | None:
    """The workspace version the run's last writing call recorded in its history."""
    history = await h.client.get_workflow_handle(run_id).fetch_history()
    version = None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads = event.activity_task_completed_event_attributes.result.payloads
            try:
                result = json.loads(payloads[0].data) if payloads else None
            except ValueError:
                continue
            if isinstance(result, dict) and result.get("workspace"):
                version = str(result["workspace"])
    return version


def skipped() -> list[Figure]:
    """The scenario's row when this machine cannot run it (no bubblewrap)."""
    return [Figure(NAME, "runs with a missing or extra file", "skipped: no bwrap", kind="skip")]


async def run(h: Harness, runs: int) -> list[Figure]:
    """Run scenario 6 with `runs` runs; return its figures."""
    if shutil.which("bwrap") is None:
        return skipped()
    began = time.monotonic()
    base = h.workdir / "s6"
    store_dir = base / "store"
    store = DirStore(store_dir)
    brief = attach(BRIEF, "brief.txt", store=store.sub("attachments"))
    folder = _write_agent(base, "f6_hosts", brief.id)

    def host(name: str) -> Any:
        return h.worker(folder, TOREN_STORE=str(store_dir),
                        TOREN_WORKSPACES=str(base / name / "workspaces"))  # fmt: skip

    a, b = host("a").start(), host("b").start()
    await asyncio.gather(a.ready(), b.ready())
    ids = [f"f6-{i:03d}-{uuid.uuid4().hex[:6]}" for i in range(runs)]
    handles = [
        await toren_client.start_run(
            h.client, folder.name, "go", run_id=run_id, attachments=[brief.id]
        )
        for run_id in ids
    ]

    # Every run's slow call is in its handler (it wrote its first file on one of the hosts).
    def in_slow_call(run_id: str) -> bool:
        return any((base / n / "workspaces" / run_id / "half.txt").exists() for n in "ab")

    deadline = time.monotonic() + 120
    while not all(map(in_slow_call, ids)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    caught = sum(map(in_slow_call, ids))
    on_a = sum((base / "a" / "workspaces" / r / "half.txt").exists() for r in ids)
    a.kill()
    b.kill()
    # Host a comes back on its old cache; host c is new. Host b is gone for good.
    restarted, fresh = host("a").start(), host("c").start()
    await asyncio.gather(restarted.ready(), fresh.ready())
    outcomes = await asyncio.gather(*(await_outcome(hd, timeout=180.0) for hd in handles))

    bad_files: list[str] = []
    saw_wrong = failed_closed = attachment_lost = 0
    for run_id, hd, outcome in zip(ids, handles, outcomes, strict=True):
        said: dict[str, str] = {}
        if outcome.status == "completed":
            transcript = await hd.query("transcript")
            said = {m["tool_call_id"]: str(m["content"]) for m in transcript
                    if m.get("role") == "tool"}  # fmt: skip
        failed_closed += said.get("slow") == "tool bash failed closed after 1 attempts"
        try:
            check = json.loads(said.get("b2", "{}"))
        except ValueError:
            check = {}
        lines: list[Any] = str(check.get("stdout", "")).splitlines() or [""]
        saw_wrong += [sorted(lines[0].split()), *lines[1:]] != CHECK_SAYS
        attachment_lost += BRIEF.decode().strip() not in said.get("r3", "")
        version = await last_workspace_version(h, run_id)
        final = base / "final" / run_id
        if version is None:
            bad_files.append(f"{run_id}: no workspace version in history")
            continue
        await asyncio.to_thread(download, run_id, version, final, store)
        got = snapshot(final)
        if got != EXPECTED:
            missing = sorted(EXPECTED.keys() - got.keys())
            extra = sorted(got.keys() - EXPECTED.keys())
            differ = sorted(k for k in EXPECTED.keys() & got.keys() if got[k] != EXPECTED[k])
            bad_files.append(f"{run_id}: missing {missing}, extra {extra}, differ {differ}")
    # Which host finished each run: the one whose copy holds the last file.
    finished_on = {n: sum((base / n / "workspaces" / r / "final.txt").exists() for r in ids)
                   for n in "ac"}  # fmt: skip
    restarted.stop()
    fresh.stop()
    for line in bad_files:
        print(f"  scenario 6: {line}", flush=True)
    completed = sum(o.status == "completed" for o in outcomes)
    return [
        info(NAME, "runs / hosts (a, b killed; a restarted, c new)", f"{runs} / 3"),
        info(NAME, "slow calls in their handler at the kill (on a / on b)",
             f"{caught} ({on_a} / {caught - on_a})"),
        must_equal(NAME, "runs completed", completed, runs),
        must_equal(NAME, "killed bash calls failed closed (max_attempts=1)", failed_closed, runs),
        info(NAME, "runs finished on the restarted host / the new host",
             f"{finished_on['a']} / {finished_on['c']}"),
        must_zero(NAME, "runs whose later calls saw a killed call's file or missed an earlier one",
                  saw_wrong),
        must_zero(NAME, "runs whose attachment was unreadable after the kill", attachment_lost),
        must_zero(NAME, "runs with a missing or extra file", len(bad_files)),
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]  # fmt: skip
