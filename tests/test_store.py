"""The store (`TOREN_STORE`): a directory and S3 (a moto server) pass the same tests, and a
store a worker cannot use stops it at start with one line naming the setting and the reason."""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import toren.store._store as store_module
from tests.conftest import S3_ENV
from toren import ConfigError
from toren.store._objects import Store
from toren.store._s3 import S3Store
from toren.store._store import DirStore, StoreError, StoreMissing, check_store
from toren.testing import free_port

ROOT = Path(__file__).resolve().parent.parent
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|DEBUG) ")


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """boto3 pointed at the moto server; returns a fresh bucket's name."""
    pytest.importorskip("boto3", reason="S3 store needs boto3")
    import boto3

    for name, value in {**S3_ENV, "AWS_ENDPOINT_URL": moto_endpoint}.items():
        monkeypatch.setenv(name, value)
    bucket = f"toren-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(params=["dir", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "dir":
        return DirStore(tmp_path / "store")
    bucket = request.getfixturevalue("s3_env")
    return S3Store(bucket, "some/prefix")


def keys(store: Store, prefix: str = "") -> list[str]:
    return sorted(entry.key for entry in store.list(prefix))


# -- the same behaviour on both --------------------------------------------------------------


def test_bytes_and_files_round_trip(store: Store, tmp_path: Path) -> None:
    store.put_bytes("a/b.txt", b"hello")
    assert store.get_bytes("a/b.txt") == b"hello"
    assert store.exists("a/b.txt") and not store.exists("a/c.txt")

    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # several copy chunks
    store.put_file("files/big.bin", source)
    dest = tmp_path / "out" / "deep" / "big.bin"
    store.get_file("files/big.bin", dest)
    assert dest.read_bytes() == source.read_bytes()
    assert store.get_bytes("files/big.bin") == source.read_bytes()
    # Nothing else was left beside the destination (the download's temporary file).
    assert os.listdir(dest.parent) == ["big.bin"]

    # A key is written whole again: the new content replaces the old.
    store.put_bytes("a/b.txt", b"second")
    assert store.get_bytes("a/b.txt") == b"second"
    [entry] = [e for e in store.list("a/") if e.key == "a/b.txt"]
    assert entry.size == len(b"second") and entry.mtime > 0


def test_a_missing_key_is_store_missing(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="nope/x"):
        store.get_bytes("nope/x")
    dest = tmp_path / "dest" / "x"
    with pytest.raises(StoreMissing):
        store.get_file("nope/x", dest)
    # The failed download left no file (final or temporary) behind.
    assert not dest.exists() and not any(dest.parent.iterdir())
    # StoreMissing is a StoreError and a KeyError: callers may catch either.
    assert issubclass(StoreMissing, StoreError) and issubclass(StoreMissing, KeyError)


def test_list_by_folder_and_by_name_prefix(store: Store) -> None:
    for key in ("x/1", "x/2", "x/sub/3", "xy/4", "y/5", "top"):
        store.put_bytes(key, key.encode())
    assert keys(store) == ["top", "x/1", "x/2", "x/sub/3", "xy/4", "y/5"]
    assert keys(store, "x/") == ["x/1", "x/2", "x/sub/3"]
    assert keys(store, "x") == ["x/1", "x/2", "x/sub/3", "xy/4"]
    assert keys(store, "x/s") == ["x/sub/3"]
    assert keys(store, "none/") == []
    assert {e.key: e.size for e in store.list("y/")} == {"y/5": 3}


def test_delete(store: Store) -> None:
    store.put_bytes("d/one", b"1")
    store.put_bytes("d/two", b"2")
    store.delete("d/one")
    store.delete("d/one")  # absent: nothing happens
    store.delete("never/was")
    assert keys(store, "d/") == ["d/two"]
    with pytest.raises(StoreMissing):
        store.get_bytes("d/one")


def test_sub_views_see_only_their_prefix(store: Store, tmp_path: Path) -> None:
    store.put_bytes("outside", b"o")
    view = store.sub("attachments")
    view.put_bytes("a1/meta.json", b"{}")
    nested = view.sub("/a1/")
    assert nested.get_bytes("meta.json") == b"{}"
    nested.put_bytes("page-1.txt", b"p1")
    source = tmp_path / "f"
    source.write_bytes(b"file")
    nested.put_file("orig", source)
    assert keys(view) == ["a1/meta.json", "a1/orig", "a1/page-1.txt"]
    assert keys(nested, "page") == ["page-1.txt"]
    assert keys(store) == ["attachments/a1/meta.json", "attachments/a1/orig",
                           "attachments/a1/page-1.txt", "outside"]  # fmt: skip
    assert store.get_bytes("attachments/a1/page-1.txt") == b"p1"
    assert view.exists("a1/orig") and not view.exists("outside")
    nested.delete("orig")
    assert not store.exists("attachments/a1/orig")
    assert view.url.endswith("attachments/") and nested.url.endswith("attachments/a1/")


@pytest.mark.parametrize("bad", ["../x", "/abs", "a//b", "a/./b", "a/../b", "", "sp ace"])
def test_keys_that_could_escape_are_refused(store: Store, bad: str) -> None:
    with pytest.raises(ValueError, match="not a store key"):
        store.put_bytes(bad, b"x")
    with pytest.raises(ValueError, match="not a store key"):
        store.sub("v").get_bytes(bad)


def test_a_write_that_fails_leaves_nothing(store: Store, tmp_path: Path) -> None:
    store.put_bytes("w/kept", b"old")
    # Reading the source fails after the write began (a directory is not a readable file).
    with pytest.raises((StoreError, OSError)):
        store.put_file("w/kept", tmp_path)
    with pytest.raises((StoreError, OSError)):
        store.put_file("w/new", tmp_path)
    assert keys(store) == ["w/kept"]
    assert store.get_bytes("w/kept") == b"old"


def test_check_store_passes_and_leaves_no_probe(store: Store) -> None:
    assert check_store(store) is store
    assert keys(store) == []


# -- a directory: atomic writes --------------------------------------------------------------


def test_dir_write_in_progress_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirStore(tmp_path / "store")
    store.put_bytes("k/old", b"old")
    seen: list[list[str]] = []
    real = store_module.shutil.copyfileobj

    def copy_and_look(src: object, dst: object, length: int = 0) -> None:
        real(src, dst, length)  # type: ignore[arg-type]
        # The bytes are written but not yet renamed into place: a reader sees nothing new.
        seen.append(keys(store))
        seen.append(sorted(p.name for p in (tmp_path / "store" / "k").iterdir()))

    monkeypatch.setattr(store_module.shutil, "copyfileobj", copy_and_look)
    source = tmp_path / "src"
    source.write_bytes(b"new content")
    store.put_file("k/new", source)
    listed, on_disk = seen
    assert listed == ["k/old"]
    assert any(name.startswith(".tmp-") for name in on_disk), on_disk  # it was there, unlisted
    assert keys(store) == ["k/new", "k/old"]
    assert sorted(p.name for p in (tmp_path / "store" / "k").iterdir()) == ["new", "old"]
    # A writer that died mid-write leaves a temporary file: never an object.
    (tmp_path / "store" / "k" / ".tmp-dead").write_bytes(b"half")
    assert keys(store) == ["k/new", "k/old"]


def test_dir_objects_are_private_to_the_worker_user(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "store")
    store.put_bytes("p/q", b"secret")
    assert (tmp_path / "store" / "p" / "q").stat().st_mode & 0o077 == 0
    assert (tmp_path / "store" / "p").stat().st_mode & 0o077 == 0


# -- a store a worker cannot use -------------------------------------------------------------


def _refused(store: Store, monkeypatch: pytest.MonkeyPatch, setting: str) -> str:
    monkeypatch.setenv("TOREN_STORE", setting)
    with pytest.raises(ConfigError) as err:
        check_store(store)
    text = str(err.value)
    assert f"TOREN_STORE={setting!r}" in text, text
    assert "\n" not in text
    return text


def test_check_store_names_a_directory_it_cannot_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A path under a regular file: no user, root included, can make that directory.
    (tmp_path / "a-file").write_text("x")
    where = str(tmp_path / "a-file" / "store")
    text = _refused(DirStore(where), monkeypatch, where)
    assert "Not a directory" in text and where in text


def test_check_store_names_an_endpoint_nothing_listens_on(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    text = _refused(S3Store(s3_env, "p"), monkeypatch, f"s3://{s3_env}/p")
    assert "Could not connect to the endpoint URL" in text and endpoint in text


def test_check_store_names_a_bucket_that_does_not_exist(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _refused(S3Store("no-such-bucket-here", "p"), monkeypatch, "s3://no-such-bucket-here/p")
    assert "NoSuchBucket" in text and "s3://no-such-bucket-here/p/" in text


def test_check_store_refuses_a_bad_setting() -> None:
    with pytest.raises(ConfigError, match="TOREN_STORE='gs://b': unsupported scheme 'gs'"):
        store_module.open_store("gs://b")
    with pytest.raises(ConfigError, match="an S3 store needs a bucket"):
        store_module.open_store("s3:///prefix")


# -- `toren worker` -------------------------------------------------------------------------


@pytest.fixture
def worker_with_store(
    make_agent: Callable[..., Path], tmp_path: Path
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    folder = make_agent()

    def run(setting: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        # No server listens there: the store must be refused before any connection is tried.
        env.update(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", PYTHONPATH=str(ROOT))
        env.update(TOREN_STORE=setting, **extra)
        return subprocess.run(
            [sys.executable, "-m", "toren.cli", "worker", str(folder)],
            capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
        )  # fmt: skip

    yield run


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("{tmp}/a-file/store", "Not a directory"),
        ("gs://bucket/x", "unsupported scheme 'gs'"),
        ("s3:///x", "an S3 store needs a bucket"),
    ],
)
def test_worker_with_an_unusable_store_exits_with_one_line(
    worker_with_store: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
    setting: str,
    reason: str,
) -> None:
    (tmp_path / "a-file").write_text("x")
    where = setting.format(tmp=tmp_path)
    out = worker_with_store(where)
    assert out.returncode != 0, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"TOREN_STORE={where!r}" in lines[0] and reason in lines[0], lines[0]
    assert "Traceback" not in out.stderr


def test_worker_with_a_missing_bucket_exits_with_one_line(
    worker_with_store: Callable[..., subprocess.CompletedProcess[str]], moto_endpoint: str
) -> None:
    out = worker_with_store("s3://no-such-bucket-here/x", AWS_ENDPOINT_URL=moto_endpoint, **S3_ENV)
    assert out.returncode != 0, out
    # boto3 logs where it found credentials (INFO, timestamped); the error is one line.
    lines = [x for x in out.stderr.strip().splitlines() if not LOG_LINE.match(x)]
    assert len(lines) == 1, out.stderr
    assert "TOREN_STORE='s3://no-such-bucket-here/x'" in lines[0] and "NoSuchBucket" in lines[0]


def test_workers_probing_one_directory_store_together_all_pass(tmp_path: Path) -> None:
    # Workers start together (the fault harness starts several): each probe is its own object,
    # so none removes a directory another one is writing into.
    def probe(_: int) -> int:
        failures = 0
        for _ in range(300):
            try:
                check_store(DirStore(tmp_path))
            except ConfigError:
                failures += 1
        return failures

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        assert sum(pool.map(probe, range(6))) == 0
    assert keys(DirStore(tmp_path)) == []
