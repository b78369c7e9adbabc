"""OpenTelemetry: spans per model and tool call, linked to the workflow's trace, none on replay,
no content unless asked, metrics; and a real `toren worker` exporting to an OTLP/HTTP receiver."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.conftest import DevServer, fetch_history, result_of, secret
from toren import client as toren_client
from toren.connect import connect
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.testing import free_port
from toren.worker import serve
from toren.worker._telemetry import CAPTURE_VAR, Telemetry
from toren.worker.models import ScriptedModel
from toren.workflows import AgentRun

ECHO = """
from toren import define_tool
tool = define_tool(
    description="Echo.",
    input={"type": "object", "properties": {"text": {"type": "string"}}},
    handler=lambda a, c: "echo " + a.get("text", ""),
)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""


def step(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def call(tool: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": tool, "args": args}


def providers() -> tuple[InMemorySpanExporter, TracerProvider, InMemoryMetricReader, MeterProvider]:
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    return spans, tracer, reader, MeterProvider(metric_readers=[reader])


async def run_traced(
    dev_server: DevServer,
    folder: Path,
    tracer: TracerProvider,
    meters: MeterProvider,
    token: str,
    prompt: str | None = None,
) -> str:
    # The client carries the interceptor too, so the run's trace starts where it is started.
    traced = await connect(
        target_host=dev_server.address, interceptors=Telemetry(tracer).interceptors()
    )
    model = ScriptedModel(
        [step(call("echo", "e1", text=token)), step(call("gated", "g1")), "done {last_tool_result}"]
    )
    async with serve(
        traced, [folder], models={"mock/scripted": model}, tracer_provider=tracer,
        meter_provider=meters,
    ):  # fmt: skip
        handle = await toren_client.start_run(traced, folder.name, prompt or "go: " + token)
        await toren_client.wait_for_approval(traced, handle.id, timeout=30)
        await toren_client.approve(traced, handle.id, "g1", by="ops")
        await result_of(handle)
    return handle.id


async def test_spans_per_call_in_the_runs_trace_with_no_content_and_none_on_replay(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv(CAPTURE_VAR, raising=False)
    token = "otel-content-5d4c3b2a19"  # content, not a secret: it is in history by design
    folder = make_agent(tools={"echo": ECHO, "gated": GATED})
    spans, tracer, reader, meters = providers()
    run_id = await run_traced(dev_server, folder, tracer, meters, token)
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    chats = [s for s in finished if s.name == "chat scripted"]
    tools = [s for s in finished if s.name.startswith("execute_tool ")]
    assert len(chats) == 3 and sorted(s.name for s in tools) == [
        "execute_tool echo",
        "execute_tool gated",
    ]
    first = chats[0].attributes or {}
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert first["toren.attempt"] == 1 and first["toren.run_id"] == run_id
    echo = next(s for s in tools if s.name == "execute_tool echo")
    assert (echo.attributes or {})["gen_ai.tool.call.id"] == "e1"
    # One trace, from the client's StartWorkflow through the workflow to each activity.
    start = next(s for s in finished if s.name == "StartWorkflow:AgentRun")
    assert {s.context.trace_id for s in [*chats, *tools]} == {start.context.trace_id}
    assert echo.parent is not None and any(
        s.context.span_id == echo.parent.span_id and s.name.startswith("RunActivity:")
        for s in finished
    )
    # Nothing a person typed or a tool returned is in a span by default.
    for span in finished:
        for value in (span.attributes or {}).values():
            assert token not in str(value) and "go: " not in str(value), (span.name, value)
    # Metrics: tokens per call, tool durations, the approval.
    data = reader.get_metrics_data()
    assert data is not None
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    tokens = metrics["gen_ai.client.token.usage"].data.data_points
    assert {p.attributes["gen_ai.token.type"] for p in tokens} == {"input", "output"}
    assert sum(p.count for p in tokens) == 6
    assert sum(p.count for p in metrics["toren.tool.duration"].data.data_points) == 2
    assert sum(p.value for p in metrics["toren.approvals.requested"].data.data_points) == 1

    # A replaying worker with the same telemetry adds no span.
    before = len(names)
    history = await fetch_history(client, run_id)
    await Replayer(
        workflows=[AgentRun],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
        interceptors=Telemetry(tracer).interceptors(),
    ).replay_workflow(history)
    assert len(spans.get_finished_spans()) == before


async def test_content_only_when_asked_and_redacted(
    client: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CAPTURE_VAR, "true")
    monkeypatch.setenv("OTEL_TEST_TOKEN", secret("otel-cap-1a2b3c4d5e"))
    folder = make_agent(tools={"echo": ECHO, "gated": GATED}, env={"required": ["OTEL_TEST_TOKEN"]})
    spans, tracer, _, meters = providers()
    token = os.environ["OTEL_TEST_TOKEN"]
    run_id = await run_traced(dev_server, folder, tracer, meters, token, prompt="go")
    await fetch_history(client, run_id)  # searched for the secret with every other history
    results = [
        (s.attributes or {}).get("gen_ai.tool.call.result") for s in spans.get_finished_spans()
    ]
    assert "echo [redacted]" in results
    for span in spans.get_finished_spans():
        assert token not in str(dict(span.attributes or {}))


async def test_a_worker_exports_to_an_otlp_http_receiver(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    received: list[tuple[str, bytes]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ", 2)[1]
        length = next(
            int(line.split(":", 1)[1])
            for line in head.split("\r\n")
            if line.lower().startswith("content-length:")
        )
        received.append((path, await reader.readexactly(length)))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Type: application/x-protobuf\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    folder = make_agent(tools={"echo": ECHO}, script=[step(call("echo", "e1", text="hi")), "done"])
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": "toren-test-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", str(folder)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        result = await asyncio.wait_for(toren_client.run_agent(client, folder.name, "go"), 60)
        assert result.text == "done"
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
    finally:
        if worker.poll() is None:
            worker.kill()
        server.close()
    names = []
    for path, body in received:
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    names += [s.name for s in scope.spans]
    assert "chat scripted" in names and "execute_tool echo" in names, names
    assert "/v1/metrics" in {p for p, _ in received}
