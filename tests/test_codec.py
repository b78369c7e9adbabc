"""toren inside a team's encrypted Temporal: the plugin keeps the team's codec, runs and threads
leave no plaintext in history, and every toren tool reads and acts through the team's codec (in
process or its codec server) or says in one line how to get it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest
import uvicorn
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
)
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from tests.conftest import (
    DevServer,
    fetch_history,
    keep_history,
    result_of,
    secret,
    task_failures,
    wait_for,
)
from tests.team_app import DoubleIt, Money, TeamPayloadConverter
from tests.team_codec import CODEC_TOKEN, EncodeOnlyCodec, EncryptionCodec, codec_app
from toren import TorenPlugin
from toren import client as toren_client
from toren.client._events import read_through
from toren.connect import connect
from toren.store._payloads import FileStorageDriver
from toren.testing import free_port
from toren.worker import serve

ROOT = Path(__file__).resolve().parent.parent

REFUND = """
from toren import define_tool
tool = define_tool(
    description="Refund an order.",
    input={"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    approval="always",
    # The API key in the result: redacted before it leaves the worker, encrypted or not.
    handler=lambda a, c: f"refunded {a['order']} for customer-{a['order'][-4:]} ({c.env['REFUND_API_KEY']})",
)
"""

ONE_LINE = (
    "payloads in this namespace are encrypted (binary/encrypted): set TEMPORAL_CODEC_ENDPOINT"
)


def team_converter(codec: Any = None) -> DataConverter:
    """The team's converter: its codec, and failures whose messages are encoded too."""
    return DataConverter(
        payload_codec=codec or EncryptionCodec(),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


@pytest.fixture
async def team(dev_server: DevServer) -> Client:
    """A client set up as the team documents it: its converter, toren's plugin."""
    return await Client.connect(
        dev_server.address, data_converter=team_converter(), plugins=[TorenPlugin()]
    )


@pytest.fixture
async def codec_server() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """The team's codec server on a free loopback port; yields its URL and the requests seen."""
    seen: list[dict[str, str]] = []
    port = free_port()
    config = uvicorn.Config(codec_app(seen), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, timeout=10)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    await task


def _markers(tag: str) -> dict[str, str]:
    return {
        "prompt": f"Refund order ZX-{tag} for Mrs Plaintext",
        "order": f"ZX-{tag}",
        "by": f"approver-{tag}",
        "comment": f"checked receipt {tag}",
    }


def _agent(make_agent: Callable[..., Path], tag: str, calls: int = 1) -> Path:
    steps: list[Any] = [
        {"tool_calls": [{"id": f"r{i}", "name": "refund", "args": {"order": f"ZX-{tag}"}}]}
        for i in range(calls)
    ]
    return make_agent(
        tools={"refund": REFUND},
        script=[*steps, f"done for ZX-{tag}: {{last_tool_result}}"],
        env={"required": ["REFUND_API_KEY"]},
    )


async def _raw(client: Client, run_id: str) -> bytes:
    """The run's history as the server keeps it (JSON and protobuf), undecoded."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return history.to_json().encode() + History(events=history.events).SerializeToString()


async def _decoded(client: Client, run_id: str) -> bytes:
    """The run's history decoded through the client's codec, kept for the secret search."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    events = list(history.events)
    await read_through(events, client.data_converter)
    keep_history(client, WorkflowHistory(history.workflow_id, events))
    return History(events=events).SerializeToString()


async def _cli(
    address: str, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_CODEC", "TOREN_PAYLOAD_CODEC", "TEMPORAL_CONFIG_FILE"))
    }
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, input=stdin, timeout=120,
        env={**base, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT),
             "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml", **env},
    )  # fmt: skip


def _one_clear_line(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and ONE_LINE in lines[0], result.stderr


def _refunds(history: Any) -> int:
    """How many times the refund tool ran (completed activities of type `<agent>.refund`)."""
    scheduled = {
        e.event_id
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name.endswith(".refund")
    }
    return sum(
        1
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    )


# -- the plugin ----------------------------------------------------------------------------------


async def test_the_plugin_keeps_the_teams_codec_failure_converter_and_storage(
    dev_server: DevServer, tmp_path: Path
) -> None:
    codec = EncryptionCodec()
    storage = ExternalStorage(drivers=[FileStorageDriver(tmp_path / "team-store", "team.file")])
    mine = dataclasses.replace(team_converter(codec), external_storage=storage)
    client = await Client.connect(dev_server.address, data_converter=mine, plugins=[TorenPlugin()])
    converter = client.data_converter
    assert converter.payload_codec is codec
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    assert converter.external_storage is storage
    # and toren's types still convert (toren's converter is installed beside them)
    from toren.agent._types import PendingApproval

    call = PendingApproval(
        call_id="c", tool="t", args={"a": 1}, requested_at="x", reason="", step=1
    )
    payload = converter.payload_converter.to_payloads([call])[0]
    assert converter.payload_converter.from_payloads([payload], [PendingApproval]) == [call]


async def test_toren_connect_keeps_an_in_process_codec(dev_server: DevServer) -> None:
    from toren.connect._codec import CodecSettings

    client = await connect(
        target_host=dev_server.address, codec=CodecSettings(codec="tests.team_codec:codec")
    )
    assert isinstance(client.data_converter.payload_codec, EncryptionCodec)


async def test_the_teams_own_workflow_keeps_its_converter_beside_toren_on_one_worker(
    dev_server: DevServer, make_agent: Callable[..., Path], monkeypatch: Any
) -> None:
    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    tag = uuid.uuid4().hex[:8]
    folder = make_agent(script=[f"hello {tag}"])
    from toren import AgentRuntime

    runtime = AgentRuntime.load([folder], environ=os.environ)
    converter = DataConverter(
        payload_converter_class=TeamPayloadConverter, payload_codec=EncryptionCodec()
    )
    client = await Client.connect(
        dev_server.address, data_converter=converter, plugins=[TorenPlugin(runtime)]
    )
    # As a team with its own types does: its module passes through the sandbox, so `Money` is
    # one class for the workflow and the converter.
    restrictions = SandboxRestrictions.default.with_passthrough_modules("tests.team_app")
    async with Worker(
        client,
        task_queue=folder.name,
        workflows=[DoubleIt],
        workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
    ):
        doubled = await client.execute_workflow(
            DoubleIt.run, Money(1234, "EUR"), id=f"team-{tag}", task_queue=folder.name
        )
        result = await result_of(toren_client.run_agent(client, folder.name, "hi"))
    assert (doubled.cents, doubled.currency) == (2468, "EUR")
    assert result.text == f"hello {tag}"
    # The team's own workflow wrote its input in the team's encoding, under the team's codec.
    history = await client.get_workflow_handle(f"team-{tag}").fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert started.metadata["encoding"] == b"binary/encrypted"
    decoded = (await client.data_converter.payload_codec.decode([started]))[0]  # type: ignore[union-attr]
    assert decoded.metadata["encoding"] == b"text/team-money"
    assert decoded.data == b"12.34 EUR"


async def test_toren_worker_encrypts_with_the_codec_its_setting_names(
    team: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    tag = uuid.uuid4().hex[:8]
    folder = make_agent(script=[f"hello ZX-{tag}"])
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        "PYTHONPATH": str(ROOT),
        "TOREN_PAYLOAD_CODEC": "tests.team_codec:codec",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", str(folder)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        handle = await toren_client.start_run(team, folder.name, f"say hello to ZX-{tag}")
        result = await asyncio.wait_for(handle.result(), timeout=90)
    finally:
        worker.terminate()
        worker.wait()
    assert result.text == f"hello ZX-{tag}"
    raw = await _raw(team, handle.id)
    assert b"binary/encrypted" in raw and f"ZX-{tag}".encode() not in raw


# -- no plaintext --------------------------------------------------------------------------------


async def test_a_run_and_a_thread_served_through_the_plugin_leave_no_plaintext(
    team: Client, make_agent: Callable[..., Path], monkeypatch: Any
) -> None:
    tag = uuid.uuid4().hex[:8]
    key = secret(f"refund-key-{tag}")
    monkeypatch.setenv("REFUND_API_KEY", key)
    words = _markers(tag)
    folder = _agent(make_agent, tag)
    async with serve(team, [folder]):
        handle = await toren_client.start_run(team, folder.name, words["prompt"])
        calls = await toren_client.wait_for_approval(team, handle.id, timeout=60)
        decision = await toren_client.approve(
            team, handle.id, calls[0].call_id, by=words["by"], comment=words["comment"]
        )
        result = await asyncio.wait_for(handle.result(), timeout=60)
        thread = await toren_client.start_thread(team, folder.name)
        message = f"thread message {words['prompt']}"
        sending = asyncio.ensure_future(toren_client.send_message(team, thread.id, message))
        waiting = await toren_client.wait_for_approval(team, thread.id, timeout=60)
        await toren_client.deny(team, thread.id, waiting[0].call_id, by=words["by"])
        await asyncio.wait_for(sending, timeout=60)
        await toren_client.close_thread(team, thread.id)
        await asyncio.wait_for(thread.result(), timeout=60)
    assert decision.by == words["by"]
    assert (
        result.text == f"done for ZX-{tag}: refunded ZX-{tag} for customer-{tag[-4:]} ([redacted])"
    )
    for run in (handle.id, thread.id):
        raw = await _raw(team, run)
        assert b"binary/encrypted" in raw
        for word in (*words.values(), tag):
            assert word.encode() not in raw, (run, word)
        # Decoded through the codec, the run reads whole, and no secret is in it.
        decoded = await _decoded(team, run)
        assert words["order"].encode() in decoded
        assert key.encode() not in decoded
        assert not task_failures(await fetch_history(team, run))
    # Search attributes are never encoded: toren's hold the agent's name and a status only.
    described = await team.get_workflow_handle(handle.id).describe()
    values = [str(pair.value) for pair in described.typed_search_attributes]
    assert values and not [v for v in values if tag in v or "ZX" in v]


# -- the tools, through a codec server and without one -------------------------------------------


async def _waiting_run(team: Client, folder: Path, prompt: str, calls: int = 1) -> str:
    handle = await toren_client.start_run(team, folder.name, prompt)
    await wait_for(lambda: _pending_count(team, handle.id, calls), timeout=60)
    return handle.id


async def _pending_count(team: Client, run_id: str, count: int) -> bool:
    return len(await toren_client.pending(team, run_id)) >= count


async def test_events_pending_approve_and_deny_work_through_the_codec_server(
    team: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    codec_server: tuple[str, list[dict[str, str]]],
    monkeypatch: Any,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    endpoint, seen = codec_server
    tag = uuid.uuid4().hex[:8]
    words = _markers(tag)
    folder = _agent(make_agent, tag, calls=2)
    env = {"TEMPORAL_CODEC_ENDPOINT": endpoint, "TEMPORAL_CODEC_AUTH": CODEC_TOKEN}
    address = dev_server.address
    async with serve(team, [folder]):
        run = await _waiting_run(team, folder, words["prompt"])

        events = await _cli(address, "events", run, **env)
        assert events.returncode == 0, events.stderr
        # A codec server that wants credentials, asked without: one line naming the setting.
        refused = await _cli(address, "events", run, TEMPORAL_CODEC_ENDPOINT=endpoint)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "answered 401" in refused.stderr
        assert "set TEMPORAL_CODEC_AUTH" in refused.stderr
        assert words["prompt"] in events.stdout and "ApprovalRequested" in events.stdout

        # The flags, as the `temporal` CLI's
        pending = await _cli(
            address, "pending", run, "--codec-endpoint", endpoint, "--codec-auth", CODEC_TOKEN
        )
        assert pending.returncode == 0, pending.stderr
        assert f'r0  refund({{"order": "{words["order"]}"}})' in pending.stdout

        # The profile's codec section, as in temporal.toml
        config = tmp_path / "temporal.toml"
        config.write_text(
            f'[profile.default]\naddress = "{address}"\n'
            f'[profile.default.codec]\nendpoint = "{endpoint}"\nauth = "{CODEC_TOKEN}"\n'
        )
        inbox = await _cli(
            address, "pending", "--agent", folder.name, TEMPORAL_CONFIG_FILE=str(config)
        )
        assert inbox.returncode == 0, inbox.stderr
        assert f"{run}  r0  refund" in inbox.stdout

        approved = await _cli(address, "approve", run, "r0", "--by", words["by"], **env)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == f"r0 approved by {words['by']}"

        await wait_for(lambda: _pending_count(team, run, 1), timeout=60)
        denied = await _cli(address, "deny", run, "r1", "--by", "ops", "--comment", "no", **env)
        assert denied.returncode == 0, denied.stderr
        assert denied.stdout.strip() == "r1 denied by ops"
        await asyncio.wait_for(team.get_workflow_handle(run).result(), timeout=60)
    history = await fetch_history(team, run)
    assert _refunds(history) == 1  # approved once, ran once; the denied call never ran
    raw = await _raw(team, run)
    assert words["by"].encode() not in raw  # the approval went to history encrypted
    assert {s["namespace"] for s in seen} == {"default"}
    assert {s["auth"] for s in seen} == {CODEC_TOKEN, ""}
    assert {s["path"] for s in seen} == {"/encode", "/decode"}


async def test_without_the_codec_each_tool_says_so_in_one_line_and_writes_nothing(
    team: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    tag = uuid.uuid4().hex[:8]
    folder = _agent(make_agent, tag)
    address = dev_server.address
    async with serve(team, [folder]):
        run = await _waiting_run(team, folder, _markers(tag)["prompt"])
        for command in (
            ["events", run],
            ["events", run, "--follow"],
            ["pending", run],
            ["pending", "--agent", folder.name],
            ["workspace", run, "out"],
            ["replay", run],
            ["approve", run, "r0", "--by", f"nobody-{tag}"],
            ["deny", run, "r0", "--by", f"nobody-{tag}"],
        ):
            result = await _cli(address, *command)
            assert (command, result.returncode) == (command, 1), result.stderr
            _one_clear_line(result)
        # Neither decision was sent: the call still waits, and no plaintext went to history.
        assert [c.call_id for c in await toren_client.pending(team, run)] == ["r0"]
        assert f"nobody-{tag}".encode() not in await _raw(team, run)
        await toren_client.approve(team, run, "r0", by="ops")
        await asyncio.wait_for(team.get_workflow_handle(run).result(), timeout=60)
    assert _refunds(await fetch_history(team, run)) == 1


async def test_a_decision_that_took_effect_is_reported_accepted_even_when_unreadable(
    team: Client, make_agent: Callable[..., Path], dev_server: DevServer, monkeypatch: Any
) -> None:
    from toren.errors import UndecodablePayloadError

    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    tag = uuid.uuid4().hex[:8]
    folder = _agent(make_agent, tag, calls=2)
    async with serve(team, [folder]):
        run = await _waiting_run(team, folder, _markers(tag)["prompt"])
        # A codec that encrypts but cannot decrypt: the decision is written encrypted, taken by
        # the run, and its answer cannot be read here.
        result = await _cli(
            dev_server.address, "approve", run, "r0", "--by", "ops",
            TOREN_PAYLOAD_CODEC="tests.team_codec:encode_only",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"r0: approval accepted by run {run}"
        assert "Traceback" not in result.stderr
        await wait_for(lambda: _pending_count(team, run, 1), timeout=60)
        unreadable = await Client.connect(
            dev_server.address, data_converter=team_converter(EncodeOnlyCodec()),
            plugins=[TorenPlugin()],
        )  # fmt: skip
        with pytest.raises(UndecodablePayloadError) as raised:
            await toren_client.deny(unreadable, run, "r1", by="ops")
        assert raised.value.accepted
        await asyncio.wait_for(team.get_workflow_handle(run).result(), timeout=60)
    assert _refunds(await fetch_history(team, run)) == 1


async def test_chat_works_through_the_codec_server_and_says_what_is_missing_without_it(
    team: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    codec_server: tuple[str, list[dict[str, str]]],
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    endpoint, _ = codec_server
    tag = uuid.uuid4().hex[:8]
    folder = _agent(make_agent, tag)
    thread_id = f"chat-{tag}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_CODEC")},
        "TEMPORAL_ADDRESS": dev_server.address,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml",
    }
    command = [sys.executable, "-m", "toren.cli", "chat", str(folder), "--thread", thread_id]

    def talk() -> int | None:
        # pexpect blocks: in a thread, so this loop's worker and codec server go on answering.
        chat = pexpect.spawn(
            command[0], command[1:], encoding="utf-8", timeout=60,
            env={**env, "TEMPORAL_CODEC_ENDPOINT": endpoint, "TEMPORAL_CODEC_AUTH": CODEC_TOKEN},
        )  # fmt: skip
        chat.expect("you> ")
        chat.sendline(f"refund ZX-{tag} please")
        chat.expect(rf'approve refund \{{"order": "ZX-{tag}"\}}.*\? \[y/N\] ')
        chat.sendline("y")
        chat.expect("approved")
        chat.expect(f"agent> done for ZX-{tag}")
        chat.expect("you> ")
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
        chat.close()
        return chat.exitstatus

    async with serve(team, [folder]):
        assert await asyncio.to_thread(talk) == 0
        # Without the codec: the thread's history cannot be read, and it says why.
        result = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, env=env, timeout=120,
            input="hello\n",
        )  # fmt: skip
        _one_clear_line(result)
    raw = await _raw(team, thread_id)
    assert f"ZX-{tag}".encode() not in raw
    assert _refunds(await fetch_history(team, thread_id)) == 1


async def test_the_http_api_works_through_the_codec_server_and_names_the_fix_without_it(
    team: Client,
    make_agent: Callable[..., Path],
    codec_server: tuple[str, list[dict[str, str]]],
    dev_server: DevServer,
    monkeypatch: Any,
) -> None:
    from toren.connect._codec import CodecSettings
    from toren.web import Token, create_app

    monkeypatch.setenv("REFUND_API_KEY", "refund-key")
    endpoint, _ = codec_server
    tag = uuid.uuid4().hex[:8]
    words = _markers(tag)
    folder = _agent(make_agent, tag)
    tokens = [Token("t"), Token("scoped", frozenset({folder.name}))]
    through = create_app(tokens=tokens, codec=CodecSettings(endpoint=endpoint, auth=CODEC_TOKEN))
    plain = create_app(
        await connect(target_host=dev_server.address, codec=CodecSettings()), tokens=tokens
    )

    def api(app: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://toren",
            headers={"Authorization": "Bearer t"},
        )  # fmt: skip

    async with serve(team, [folder]), api(through) as good, api(plain) as bad:
        run = await _waiting_run(team, folder, words["prompt"])
        for path in (f"/v1/runs/{run}/events", f"/v1/runs/{run}/pending"):
            refused = await bad.get(path)
            assert refused.status_code == 502, refused.text
            assert ONE_LINE in refused.json()["error"]
        refused = await bad.post(
            f"/v1/runs/{run}/decisions", json={"call_id": "r0", "approve": True, "by": "web"}
        )
        assert refused.status_code == 502 and ONE_LINE in refused.json()["error"]
        # A token scoped to the agent: the same line, not a 403 for "agent ''" (the run's
        # agent is in its encrypted input).
        refused = await bad.get(
            f"/v1/runs/{run}/events", headers={"Authorization": "Bearer scoped"}
        )
        assert refused.status_code == 502 and ONE_LINE in refused.json()["error"], refused.text

        events = await good.get(f"/v1/runs/{run}/events")
        assert events.status_code == 200, events.text
        assert words["prompt"] in events.text
        pending = (await good.get(f"/v1/runs/{run}/pending")).json()["pending"]
        assert [(p["call_id"], p["args"]) for p in pending] == [("r0", {"order": words["order"]})]
        decided = await good.post(
            f"/v1/runs/{run}/decisions", json={"call_id": "r0", "approve": True, "by": words["by"]}
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["by"] == words["by"]
        await asyncio.wait_for(team.get_workflow_handle(run).result(), timeout=60)
    assert words["by"].encode() not in await _raw(team, run)
    assert _refunds(await fetch_history(team, run)) == 1
