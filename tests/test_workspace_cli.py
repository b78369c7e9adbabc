"""A run's workspace through a real run: versions named in history, `toren workspace`, and
`toren store prune`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.conftest import fetch_history, result_of
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve


def toren(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip


async def test_versions_in_history_download_and_prune(
    client: Client,
    make_agent: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    monkeypatch.setenv("TOREN_STORE", str(store))
    monkeypatch.setenv("TOREN_WORKSPACES", str(cache))
    write = {"name": "write_file", "args": {"path": "notes/a.txt", "content": "alpha\n"}}
    folder = make_agent(
        sandbox={"approval": "never"},
        script=[
            {"tool_calls": [{"id": "w", **write}]},
            # Two workspace calls in one turn run one after the other, in the order asked:
            # bash sees the file write_file made just before it.
            {"tool_calls": [
                {"id": "w2", "name": "write_file", "args": {"path": "b.sh", "content": "echo hi\n"}},
                {"id": "b", "name": "bash", "args": {"command": "chmod +x b.sh && cat b.sh && mkdir -p empty"}},
            ]},
            {"tool_calls": [{"id": "r", "name": "read_file", "args": {"path": "notes/a.txt"}}]},
            "done: {last_tool_result}",
        ],
    )  # fmt: skip
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "work")
        result = await result_of(handle)
    assert "alpha" in result.text
    events = render(await fetch_history(client, handle.id))
    bash = next(e for e in events if e["type"] == "ToolCallCompleted" and e["callId"] == "b")
    assert "echo hi" in bash["result"]

    # History names the version every workspace call left; reading changes nothing.
    history = await fetch_history(client, handle.id)
    versions = []
    for event in history.events:
        if event.HasField("activity_task_completed_event_attributes"):
            value = client.data_converter.payload_converter.from_payloads(
                [event.activity_task_completed_event_attributes.result.payloads[0]]
            )[0]
            if isinstance(value, dict) and "workspace" in value:
                versions.append(value["workspace"])
    # model, write, model, write, bash, model, read (None: it only read), model
    made = [v for v in versions if v]
    assert len(made) == 3 and len(set(made)) == 3
    assert await toren_client.workspace_version(client, handle.id) == made[-1]

    env = {"TOREN_STORE": str(store), "TEMPORAL_ADDRESS": os.environ["TEMPORAL_ADDRESS"]}
    out = await asyncio.to_thread(toren, "workspace", handle.id, str(tmp_path / "dl"), env=env)
    assert out.returncode == 0, out.stderr
    assert "2 file(s)" in out.stdout
    dl = tmp_path / "dl"
    assert (dl / "notes" / "a.txt").read_text() == "alpha\n"
    assert os.access(dl / "b.sh", os.X_OK) and (dl / "empty").is_dir()
    # An earlier version, by id: before bash ran.
    first = tmp_path / "first"
    out = await asyncio.to_thread(
        toren, "workspace", handle.id, str(first), "--version", made[0], env=env
    )
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in first.rglob("*")) == ["a.txt", "notes"]
    out = await asyncio.to_thread(toren, "workspace", handle.id, str(first), env=env)
    assert out.returncode != 0 and "not empty" in out.stderr

    # Retention: a run closed longer ago than the setting loses its versions, its blobs and
    # this host's cache. (A tiny number of days: "closed before now".)
    assert list((store / "blobs").rglob("*")) and (cache / handle.id).is_dir()
    out = await asyncio.to_thread(toren, "store", "prune", "--older-than", "1e-9", env=env)
    assert out.returncode == 0, out.stderr
    assert "versions of 1 run(s)" in out.stdout, out.stdout
    assert not [p for p in (store / "versions").rglob("*") if p.is_file()]
    assert not (cache / handle.id).exists()
    # The blobs stay an hour (a version being written may need them), then go.
    out = await asyncio.to_thread(toren, "workspace", handle.id, str(tmp_path / "gone"), env=env)
    assert out.returncode != 0 and "is not in the store" in out.stderr


async def test_a_running_run_is_never_pruned(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    monkeypatch.setenv("TOREN_STORE", str(store))
    monkeypatch.setenv("TOREN_WORKSPACES", str(tmp_path / "cache"))
    folder = make_agent(
        sandbox={"approval": "always"},
        script=[
            {"tool_calls": [{"id": "w", "name": "write_file", "args": {"path": "x", "content": "1"}}]},
            {"tool_calls": [{"id": "b", "name": "bash", "args": {"command": "echo gated"}}]},
            "never reached",
        ],
    )  # fmt: skip
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "work")
        await toren_client.wait_for_approval(client, handle.id, timeout=60)
        env = {"TOREN_STORE": str(store), "TEMPORAL_ADDRESS": os.environ["TEMPORAL_ADDRESS"]}
        out = await asyncio.to_thread(toren, "store", "prune", "--older-than", "1e-9", env=env)
        assert out.returncode == 0, out.stderr
        assert "versions of 0 run(s)" in out.stdout
        assert [p for p in (store / "versions").rglob("*.json") if p.name != "run.json"]
        await handle.terminate("test over")


@pytest.mark.parametrize(
    ("planted", "why"),
    [
        ("../escaped.txt", "'../escaped.txt' is not a plain relative path"),
        ("{abs}", "is not a plain relative path"),
        ("sub/../../escaped.txt", "is not a plain relative path"),
        ("link/escaped.txt", "'link/escaped.txt' passes through symlink 'link'"),
    ],
)
def test_a_planted_manifest_never_writes_outside_the_folder(
    tmp_path: Path, planted: str, why: str
) -> None:
    """A hash-valid manifest someone wrote into the store, naming paths outside the workspace,
    is refused by `toren workspace --version` and by a worker's restore alike; nothing lands."""
    import hashlib
    import json

    from toren.errors import StoreError
    from toren.store._store import open_store
    from toren.store._workspace import Workspaces

    store_dir, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    planted = planted.replace("{abs}", str(outside / "escaped.txt"))
    store = open_store(str(store_dir))
    data = b"planted\n"
    digest = hashlib.sha256(data).hexdigest()
    store.sub("blobs").put_bytes(f"sha256/{digest[:2]}/{digest}", data)
    doc = {"v": 1, "files": {planted: [digest, len(data), False]}, "dirs": [], "links": {}}
    if planted.startswith("link/"):
        doc["links"] = {"link": str(outside)}
    manifest = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    version = hashlib.sha256(manifest).hexdigest()
    store.sub("versions").put_bytes(f"run-x/{version}.json", manifest)

    dest = tmp_path / "dl" / "inner"
    env = {"TOREN_STORE": str(store_dir)}
    out = toren("workspace", "run-x", str(dest), "--version", version, env=env)
    assert out.returncode != 0
    assert f"workspace version {version} is refused: path" in out.stderr, out.stderr
    assert why in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(outside.iterdir()) and not (tmp_path / "dl" / "escaped.txt").exists()

    spaces = Workspaces(tmp_path / "cache", store)
    with pytest.raises(StoreError, match="is refused"):
        asyncio.run(spaces.prepare("run-x", version))
    assert not list(outside.iterdir()) and not (tmp_path / "cache" / "escaped.txt").exists()
