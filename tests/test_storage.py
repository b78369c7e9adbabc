"""Large tool results: Temporal's ExternalStorage with toren's file driver and with S3 (moto),
and, without a store, a local activity's result cut with a note (tests/test_payload_limits.py
covers a normal activity's)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from tests.conftest import DevServer, fetch_history, task_failures
from toren import ConfigError
from toren import client as toren_client
from toren.agent._payload_limits import MAX_RESULT_BYTES
from toren.store import _payloads as storage
from toren.worker import serve
from toren.worker.models._base import ModelReply, ModelRequest

BIG_CHARS = 5 * 1024 * 1024
BIG = "".join(f"{i:08d}" for i in range(BIG_CHARS // 8))
"""5 MiB of distinct text (a repeated pattern could hide a cut or a shuffled chunk)."""
BIG_SHA = hashlib.sha256(BIG.encode()).hexdigest()
HISTORY_LIMIT = 200_000
SHOWN_WHOLE = {"maxResultBytesShown": 8 << 20}
"""An agent that declares it shows its model results this big (the default is 256 KiB)."""

TOOL = """
from toren import define_tool

def big(args, ctx):
    return "".join(f"{{i:08d}}" for i in range({n}))

tool = define_tool(description="Returns 5 MiB.", {contract}, handler=big)
"""
CONTRACTS = {
    "activity": 'effects="external", idempotency="keyed"',
    "local": 'effects="none", idempotency="none", timeout_ms=5000',
}


class Inspector:
    """A model that calls `big` once, then answers with the length and digest of what it got."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        results = [m for m in request.messages if m.get("role") == "tool"]
        if not results:
            return ModelReply(tool_calls=[{"id": "c1", "name": "big", "arguments": "{}"}])
        text = str(results[-1]["content"])
        self.seen.append(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        return ModelReply(content=f"{len(text)} {digest} error={results[-1].get('is_error')}")


def history_size(history: Any) -> int:
    return sum(e.ByteSize() for e in history.events)


async def big_round_trip(
    client: Client, folder: Path, timeout: float = 60
) -> tuple[str, Inspector, int, list[dict[str, Any]]]:
    """Run the agent once; return its answer, the model's view, the history's bytes, and the
    transcript as the `transcript` query returns it (`call_model`'s path on a cache miss)."""
    model = Inspector()
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "go")
        try:
            result = await asyncio.wait_for(handle.result(), timeout)
        except TimeoutError:
            # Stuck retrying (see the test without a store): don't leave it retrying.
            await handle.terminate("test timed out")
            raise
        transcript = await handle.query("transcript")
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    return result.text, model, history_size(history), transcript


# -- the file driver on its own -------------------------------------------------------------


async def test_file_driver_is_content_addressed_atomic_and_checked(tmp_path: Path) -> None:
    driver = storage.FileStorageDriver(tmp_path / "store")
    payloads = [Payload(data=b"a" * 1000), Payload(data=b"b" * 10), Payload(data=b"a" * 1000)]
    claims = await driver.store(StorageDriverStoreContext(), payloads)
    assert len(claims) == 3 and claims[0] == claims[2] != claims[1]
    files = sorted(p for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert len(files) == 2  # stored once each; no temporary file left behind
    key = claims[0].claim_data["key"]
    assert (tmp_path / "store" / key).is_file() and key.startswith("sha256/")
    back = await driver.retrieve(StorageDriverRetrieveContext(), claims)
    assert [p.data for p in back] == [p.data for p in payloads]

    (tmp_path / "store" / key).write_bytes(Payload(data=b"tampered").SerializeToString())
    with pytest.raises(ValueError, match="does not match its digest"):
        await driver.retrieve(StorageDriverRetrieveContext(), claims[:1])
    escape = StorageDriverClaim({"key": "../../etc/passwd", "hash_algorithm": "sha256",
                                 "hash_value": "../../etc/passwd"})  # fmt: skip
    with pytest.raises(ValueError, match="malformed claim"):
        await driver.retrieve(StorageDriverRetrieveContext(), [escape])
    missing = StorageDriverClaim({"hash_algorithm": "sha256", "hash_value": "0" * 64})
    with pytest.raises(FileNotFoundError, match=storage.ENV_VAR):
        await driver.retrieve(StorageDriverRetrieveContext(), [missing])


def test_store_setting_names_a_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file_driver = storage.driver_for(f"file://{tmp_path}/a%20b")
    assert isinstance(file_driver, storage.FileStorageDriver)
    assert file_driver.root == tmp_path / "a b"
    plain = storage.driver_for(str(tmp_path / "plain"))
    assert isinstance(plain, storage.FileStorageDriver)
    s3 = storage.driver_for("s3://bucket/some/prefix/")
    assert s3.type() == "aws.s3driver"
    with pytest.raises(ConfigError, match="needs a bucket"):
        storage.driver_for("s3:///prefix")
    with pytest.raises(ConfigError, match="unsupported scheme 'gs'"):
        storage.driver_for("gs://bucket")

    monkeypatch.delenv(storage.ENV_VAR, raising=False)
    monkeypatch.delenv("TOREN_STORE", raising=False)  # the suite sets one
    assert storage.data_converter().external_storage is None
    monkeypatch.setenv(storage.ENV_VAR, str(tmp_path / "env"))
    converter = storage.data_converter()
    assert converter.external_storage is not None
    assert converter.external_storage.payload_size_threshold == storage.DEFAULT_THRESHOLD
    assert storage.data_converter("").external_storage is None  # empty: none, env or not


# -- through a real server --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["activity", "local"])
async def test_big_result_through_the_file_store(
    dev_server: DevServer,
    make_agent: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    store = tmp_path / "payloads"
    client = await Client.connect(
        dev_server.address, data_converter=storage.data_converter(f"file://{store}")
    )
    folder = make_agent(
        tools={"big": TOOL.format(n=BIG_CHARS // 8, contract=CONTRACTS[kind])}, limits=SHOWN_WHOLE
    )
    text, model, size, transcript = await big_round_trip(client, folder)
    assert text == f"{BIG_CHARS} {BIG_SHA} error=False"
    assert model.seen == [BIG]
    assert transcript[2]["content"] == BIG
    assert size < HISTORY_LIMIT, f"history is {size} bytes"
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) > BIG_CHARS


async def test_the_model_is_shown_a_stored_result_cut_to_the_declared_limit(
    dev_server: DevServer, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    """A store keeps a 5 MiB result whole, but every later prompt would carry it too (an MCP
    result of 32 MiB was 8.4 M input tokens a call): the model sees `maxResultBytesShown`."""
    client = await Client.connect(
        dev_server.address, data_converter=storage.data_converter(str(tmp_path / "payloads"))
    )
    tool = TOOL.format(n=BIG_CHARS // 8, contract=CONTRACTS["activity"])
    for limits, shown in (({}, 256 * 1024), ({"maxResultBytesShown": 10_000}, 10_000)):
        folder = make_agent(tools={"big": tool}, limits=limits)
        _, model, _, transcript = await big_round_trip(client, folder)
        [seen] = model.seen
        assert len(seen.encode()) <= shown
        assert seen.startswith(BIG[:1000]) and seen.endswith(BIG[-1000:])
        assert (
            f"[toren: this result is {BIG_CHARS:,} bytes; the model is shown its first and last"
        ) in seen
        assert f"(limits.maxResultBytesShown: {shown})" in seen
        assert transcript[2]["content"] == BIG  # the record keeps it whole


async def test_store_keeps_whole_results_without_help(
    dev_server: DevServer, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    client = await Client.connect(
        dev_server.address, data_converter=storage.data_converter(str(tmp_path / "payloads"))
    )
    folder = make_agent(
        tools={"big": TOOL.format(n=BIG_CHARS // 8, contract=CONTRACTS["activity"])},
        limits=SHOWN_WHOLE,
    )
    text, model, _, _ = await big_round_trip(client, folder)
    assert model.seen == [BIG], text


async def test_big_result_through_s3(
    dev_server: DevServer,
    make_agent: Callable[..., Path],
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("aioboto3", reason="S3 payload store needs temporalio[aioboto3]")
    import boto3

    for name, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="toren-payloads")
    converter = storage.data_converter("s3://toren-payloads/runs")
    client = await Client.connect(dev_server.address, data_converter=converter)
    folder = make_agent(
        tools={"big": TOOL.format(n=BIG_CHARS // 8, contract=CONTRACTS["activity"])},
        limits=SHOWN_WHOLE,
    )
    try:
        text, model, size, transcript = await big_round_trip(client, folder)
    finally:
        await storage.close_storage(converter)
    assert text == f"{BIG_CHARS} {BIG_SHA} error=False"
    assert model.seen == [BIG]
    assert transcript[2]["content"] == BIG
    assert size < HISTORY_LIMIT, f"history is {size} bytes"
    objects = s3.list_objects_v2(Bucket="toren-payloads")["Contents"]
    assert objects and all(o["Key"].startswith("runs/v0/") for o in objects)
    assert max(o["Size"] for o in objects) > BIG_CHARS


async def test_connect_installs_the_store_named_by_the_environment(
    dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from temporalio.contrib.pydantic import PydanticPayloadConverter

    from toren.connect import connect
    from toren.connect._plugin import TorenPlugin

    monkeypatch.setenv(storage.ENV_VAR, f"file://{tmp_path / 'payloads'}")
    client = await connect(target_host=dev_server.address)
    assert issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter)
    assert client.data_converter.external_storage is not None
    # The replayer (`toren replay`) and test environments take the plugin's converter as is.
    assert TorenPlugin().converter().external_storage is not None


# -- without a store ------------------------------------------------------------------------


async def test_big_local_result_without_a_store_is_cut_with_a_note(
    dev_server: DevServer,
    make_agent: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A local activity's result goes into a marker of the workflow task's completion: uncut,
    # the SDK refuses that completion and the workflow task fails forever.
    from toren.connect import connect

    monkeypatch.delenv("TOREN_STORE", raising=False)  # the suite sets one
    monkeypatch.chdir(tmp_path)  # the default store, `.toren`, goes there
    client = await connect(target_host=dev_server.address)
    assert client.data_converter.external_storage is None
    folder = make_agent(tools={"big": TOOL.format(n=BIG_CHARS // 8, contract=CONTRACTS["local"])})
    text, model, size, _ = await big_round_trip(client, folder, timeout=30)
    assert text.endswith("error=False") and len(model.seen) == 1, text
    seen = model.seen[0]
    assert len(seen.encode()) <= MAX_RESULT_BYTES
    head, _, rest = seen.partition("\n\n[toren: ")
    note, _, tail = rest.partition("]\n\n")
    assert head and tail and BIG.startswith(head) and BIG.endswith(tail)
    assert f"was {BIG_CHARS:,} bytes" in note
    assert size < MAX_RESULT_BYTES + HISTORY_LIMIT
