"""Workspace versions (`toren.store._workspace`) without Temporal: what a host's copy holds after
`prepare`, what `commit` stores, and what a call that died half-way leaves behind (nothing).

Each "host" is a `Workspaces` with its own cache directory over one shared `DirStore`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from toren.store._manifest import Manifest, latest_version
from toren.store._store import DirStore, StoreError
from toren.store._workspace import Workspaces, download

RUN = "run-ws-1"


class Recording(DirStore):
    """A directory store that records every key written, and fails writes when told to."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []
        self.fail_after: int | None = None
        """Fail every write once this many writes were made (None: never)."""

    def _write(self, key: str, fill: object) -> None:
        if self.fail_after is not None and len(self.puts) >= self.fail_after:
            raise StoreError(f"cannot write {key} in {self.url}: injected failure")
        self.puts.append(key)
        super()._write(key, fill)


@pytest.fixture
def store(tmp_path: Path) -> Recording:
    return Recording(tmp_path / "store")


def host(tmp_path: Path, store: Recording, name: str) -> Workspaces:
    return Workspaces(tmp_path / name / "workspaces", store)


def fill(ws: Path) -> None:
    """Files, an executable, empty directories and symlinks (one dangling, one outward)."""
    (ws / "a.txt").write_text("alpha\n")
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("print('mod')\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "empty").mkdir()
    (ws / "deep" / "empty2").mkdir(parents=True)
    (ws / "big.bin").write_bytes(os.urandom(200_000))
    os.symlink("a.txt", ws / "link")
    os.symlink("../../../etc/passwd", ws / "src" / "outward")
    os.symlink("missing", ws / "dangling")


def snapshot(ws: Path) -> dict[str, object]:
    """Every entry under `ws` (links not followed): kind, content or target, exec bit."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(ws):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(ws).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[relative] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[relative] = ("dir",)
            else:
                out[relative] = ("file", path.read_bytes(), bool(st.st_mode & 0o100))
    return out


def versions(store: Recording) -> list[str]:
    """The manifests in the store (a run's folder also holds `run.json`, naming the run)."""
    return sorted(e.key for e in store.sub("versions").list() if not e.key.endswith("/run.json"))


async def test_round_trip_and_a_commit_without_changes_stores_nothing(
    tmp_path: Path, store: Recording
) -> None:
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    assert ws == spaces.path(RUN) and not any(ws.iterdir())
    fill(ws)
    v1 = await spaces.commit(RUN, None)
    assert len(v1) == 64
    assert spaces.last.uploaded_bytes == sum(
        p.stat().st_size for p in ws.rglob("*") if p.is_file() and not p.is_symlink()
    )
    manifest = spaces.manifest(RUN, v1)
    assert set(manifest.files) == {"a.txt", "src/pkg/mod.py", "run.sh", "big.bin"}
    assert manifest.files["run.sh"][2] and not manifest.files["a.txt"][2]
    assert {"empty", "deep/empty2"} <= set(manifest.dirs)
    assert manifest.links == {
        "link": "a.txt", "src/outward": "../../../etc/passwd", "dangling": "missing"
    }  # fmt: skip
    assert latest_version(RUN, store) == v1

    # The next call on the same host: nothing to restore, nothing changed, nothing stored.
    before = snapshot(ws)
    store.puts.clear()
    assert await spaces.prepare(RUN, v1) == ws
    assert spaces.last.downloaded_bytes == 0
    assert await spaces.commit(RUN, v1) == v1
    assert spaces.last.uploaded_bytes == 0 and store.puts == []
    assert snapshot(ws) == before

    # A change: only the changed file's bytes go up, and a new version is written.
    await spaces.prepare(RUN, v1)
    (ws / "a.txt").write_text("alpha 2\n")
    v2 = await spaces.commit(RUN, v1)
    assert v2 != v1 and spaces.last.uploaded_bytes == len("alpha 2\n")
    assert len(versions(store)) == 2


async def test_a_fresh_host_restores_exactly(tmp_path: Path, store: Recording) -> None:
    first = host(tmp_path, store, "h1")
    ws1 = await first.prepare(RUN, None)
    fill(ws1)
    v1 = await first.commit(RUN, None)

    second = host(tmp_path, store, "h2")
    ws2 = await second.prepare(RUN, v1)
    assert ws2 != ws1
    assert snapshot(ws2) == snapshot(ws1)
    assert second.last.downloaded_bytes == first.manifest(RUN, v1).bytes()
    assert os.access(ws2 / "run.sh", os.X_OK) and not os.access(ws2 / "a.txt", os.X_OK)
    # Links are restored as links, never followed.
    assert os.readlink(ws2 / "src" / "outward") == "../../../etc/passwd"

    # `download` writes the same version anywhere.
    dest = tmp_path / "downloaded"
    download(RUN, v1, dest, store)
    assert snapshot(dest) == snapshot(ws1)
    with pytest.raises(FileExistsError):
        download(RUN, v1, dest, store)


async def test_a_stale_host_downloads_only_what_changed(tmp_path: Path, store: Recording) -> None:
    a, b = host(tmp_path, store, "a"), host(tmp_path, store, "b")
    ws_a = await a.prepare(RUN, None)
    fill(ws_a)
    v1 = await a.commit(RUN, None)

    # The run moves to host b for a call: one file changed, one added, one removed, a
    # directory removed and a file replaced by a directory.
    ws_b = await b.prepare(RUN, v1)
    (ws_b / "a.txt").write_text("changed on b\n")
    (ws_b / "new.txt").write_text("new on b\n")
    (ws_b / "big.bin").unlink()
    (ws_b / "empty").rmdir()
    (ws_b / "run.sh").unlink()
    (ws_b / "run.sh").mkdir()
    v2 = await b.commit(RUN, v1)

    # Back on host a, whose copy is still v1: only the two new contents come down.
    await a.prepare(RUN, v2)
    assert a.last.downloaded_bytes == len("changed on b\n") + len("new on b\n")
    assert snapshot(ws_a) == snapshot(ws_b)
    assert not (ws_a / "big.bin").exists() and (ws_a / "run.sh").is_dir()


async def test_a_call_that_died_half_way_is_rolled_back(tmp_path: Path, store: Recording) -> None:
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    fill(ws)
    v1 = await spaces.commit(RUN, None)
    before = snapshot(ws)

    await spaces.prepare(RUN, v1)
    # The call writes, deletes and rewrites, then its worker dies: no commit.
    (ws / "half.txt").write_text("half-done")
    (ws / "newdir" / "x").mkdir(parents=True)
    (ws / "a.txt").write_text("alphA\n")  # same size
    st = (ws / "src" / "pkg" / "mod.py").stat()
    (ws / "src" / "pkg" / "mod.py").write_text("print('MOD')\n")
    os.utime(ws / "src" / "pkg" / "mod.py", ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    (ws / "run.sh").chmod(0o644)
    (ws / "empty").rmdir()
    (ws / "link").unlink()
    os.symlink("/etc", ws / "link")
    os.mkfifo(ws / "pipe")  # not a file a version can hold, but the call left it
    os.mkfifo(ws / "src" / "pipe2")

    # The worker restarts on this host (a new process: a new `Workspaces`) and the next call
    # asks for v1, the last version history recorded.
    restarted = host(tmp_path, store, "h1")
    assert await restarted.prepare(RUN, v1) == ws
    assert not os.path.lexists(ws / "pipe") and not os.path.lexists(ws / "src" / "pipe2")
    assert snapshot(ws) == before


async def test_a_first_call_that_died_half_way_leaves_an_empty_workspace(
    tmp_path: Path, store: Recording
) -> None:
    # The run's first call, with no version yet, dies after writing files; the next call
    # (also with no version in history) must not see them.
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    (ws / "half.txt").write_text("half-done")
    (ws / "dir").mkdir()
    restarted = host(tmp_path, store, "h1")
    assert await restarted.prepare(RUN, None) == ws
    assert list(ws.iterdir()) == []


async def test_a_store_failure_in_commit_writes_no_manifest(
    tmp_path: Path, store: Recording
) -> None:
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    fill(ws)
    v1 = await spaces.commit(RUN, None)
    before = snapshot(ws)

    await spaces.prepare(RUN, v1)
    (ws / "one.txt").write_text("one")
    (ws / "two.txt").write_text("two")
    (ws / "a.txt").write_text("rewritten")
    store.fail_after = len(store.puts) + 1  # the first blob goes up, the second fails
    with pytest.raises(StoreError, match="injected failure"):
        await spaces.commit(RUN, v1)
    assert versions(store) == [f"{RUN}/{v1}.json"]

    # The call failed (a retryable activity failure); its retry on this host starts from v1.
    store.fail_after = None
    await spaces.prepare(RUN, v1)
    assert snapshot(ws) == before


async def test_manifests_are_written_after_their_blobs(tmp_path: Path, store: Recording) -> None:
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    fill(ws)
    for n in range(5):
        (ws / f"same{n}.txt").write_text("the same content")
    v1 = await spaces.commit(RUN, None)
    await spaces.prepare(RUN, v1)
    (ws / "f9.txt").write_text("file 9")
    v2 = await spaces.commit(RUN, v1)

    for version in (v1, v2):
        manifest_key = f"versions/{RUN}/{version}.json"
        assert manifest_key in store.puts
        position = store.puts.index(manifest_key)
        blobs = {
            f"blobs/sha256/{d[:2]}/{d}" for d, _, _ in spaces.manifest(RUN, version).files.values()
        }
        # Every blob it names was written before it (in this commit or an earlier one).
        assert blobs <= set(store.puts[:position]), blobs - set(store.puts[:position])
    assert store.puts[-1] == f"versions/{RUN}/{v2}.json"
    # Each content is stored once, however many files hold it.
    blob_puts = [k for k in store.puts if k.startswith("blobs/")]
    digests = {d for v in (v1, v2) for d, _, _ in spaces.manifest(RUN, v).files.values()}
    assert len(blob_puts) == len(digests) == 4 + 1 + 1  # fill's 4, the five copies, f9


async def test_a_tampered_blob_or_manifest_is_refused(tmp_path: Path, store: Recording) -> None:
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    (ws / "a.txt").write_text("alpha")
    v1 = await spaces.commit(RUN, None)
    [digest] = [d for d, _, _ in spaces.manifest(RUN, v1).files.values()]
    (store.root / "blobs" / "sha256" / digest[:2] / digest).write_text("evil!")
    other = host(tmp_path, store, "h2")
    with pytest.raises(StoreError, match="does not match its name"):
        await other.prepare(RUN, v1)
    assert not (other.path(RUN) / "a.txt").exists()

    (store.root / "versions" / RUN / f"{v1}.json").write_bytes(Manifest().to_json())
    with pytest.raises(StoreError, match="does not match its id"):
        await host(tmp_path, store, "h3").prepare(RUN, v1)
    with pytest.raises(StoreError, match="not a workspace version id"):
        await host(tmp_path, store, "h4").prepare(RUN, "../../etc")


async def test_a_version_missing_from_the_store_names_the_setting(
    tmp_path: Path, store: Recording
) -> None:
    # History names a version this host's store lacks: a worker on another TOREN_STORE.
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    (ws / "a.txt").write_text("alpha")
    v1 = await spaces.commit(RUN, None)
    elsewhere = Workspaces(tmp_path / "h2" / "workspaces", DirStore(tmp_path / "other-store"))
    with pytest.raises(StoreError) as err:
        await elsewhere.prepare(RUN, v1)
    assert f"workspace version {v1} of {RUN!r} is not in the store" in str(err.value)
    assert "every worker of the task queue must use the same TOREN_STORE" in str(err.value)
    # The copy stays marked unchecked: once the store has the version, it is restored.
    store_two = Workspaces(tmp_path / "h2" / "workspaces", store)
    await store_two.prepare(RUN, v1)
    assert (store_two.path(RUN) / "a.txt").read_text() == "alpha"


async def test_a_host_whose_store_changed_checks_its_copy_against_the_new_store(
    tmp_path: Path, store: Recording
) -> None:
    # The same cache, TOREN_STORE switched: what the host knew the old store had proves nothing
    # about the new one, so it may not skip blobs (a manifest naming blobs the store lacks).
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    (ws / "a.txt").write_text("alpha")
    v1 = await spaces.commit(RUN, None)
    switched = Workspaces(spaces.root, DirStore(tmp_path / "new-store"))
    with pytest.raises(StoreError, match="is not in the store"):
        await switched.prepare(RUN, v1)


UNREADABLE = """
import asyncio, os, sys
from pathlib import Path
from toren.store._store import DirStore
from toren.store._workspace import Workspaces, download

base = Path(sys.argv[1])
store = DirStore(base / "store")


async def main() -> None:
    spaces = Workspaces(base / "h1", store)
    ws = await spaces.prepare("r", None)
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("f")
    (ws / "locked").mkdir()
    (ws / "locked" / "in.txt").write_text("in")
    (ws / "secret.txt").write_text("s")
    # A call locks its own files away from their owner, then ends: its copy is stored.
    os.chmod(ws / "locked", 0)
    os.chmod(ws / "secret.txt", 0)
    os.chmod(ws / "d", 0o500)
    v1 = await spaces.commit("r", None)
    download("r", v1, base / "v1", store)
    print(sorted(str(p.relative_to(base / "v1")) for p in (base / "v1").rglob("*")))
    # The next call does the same to fresh files, then dies: the copy is rolled back to v1.
    await spaces.prepare("r", v1)
    (ws / "half").mkdir()
    (ws / "half" / "x").write_text("x")
    os.chmod(ws / "half", 0)
    os.chmod(ws, 0o500)
    await Workspaces(base / "h1", store).prepare("r", v1)
    print(sorted(str(p.relative_to(ws)) for p in ws.rglob("*")))


asyncio.run(main())
"""


def test_files_the_sandbox_locked_from_their_owner_are_stored_and_rolled_back(
    tmp_path: Path,
) -> None:
    # Root reads through any mode, so as root the check runs as `nobody`.
    import shutil
    import subprocess
    import sys
    import tempfile

    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop to another user")
        prefix = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    base = Path(tempfile.mkdtemp(prefix="toren-ws-"))
    try:
        base.chmod(0o777)
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": str(root)}
        out = subprocess.run([*prefix, sys.executable, "-c", UNREADABLE, str(base)],
                             env=env, capture_output=True, text=True, cwd=base, timeout=60)  # fmt: skip
        if prefix and "ModuleNotFoundError: No module named 'toren'" in out.stderr:
            pytest.skip("user 65534 cannot read this checkout")
        assert out.returncode == 0, out.stderr[-3000:]
        stored, rolled_back = out.stdout.splitlines()
        assert stored == str(["d", "d/f.txt", "locked", "locked/in.txt", "secret.txt"])
        assert rolled_back == stored
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_a_version_history_never_recorded_is_undone(tmp_path: Path, store: Recording) -> None:
    # The worker died after `commit` stored v2 but before its result reached history: the
    # next call asks for v1 again, on this host (its copy is v2, not busy) or another.
    spaces = host(tmp_path, store, "h1")
    ws = await spaces.prepare(RUN, None)
    fill(ws)
    v1 = await spaces.commit(RUN, None)
    before = snapshot(ws)
    await spaces.prepare(RUN, v1)
    (ws / "a.txt").write_text("only in v2\n")
    (ws / "extra.txt").write_text("only in v2\n")
    v2 = await spaces.commit(RUN, v1)
    assert v2 != v1
    await host(tmp_path, store, "h1").prepare(RUN, v1)
    assert snapshot(ws) == before
    other = host(tmp_path, store, "h2")
    assert snapshot(await other.prepare(RUN, v1)) == before
