"""What live output costs: history bytes and time per turn with streaming on and off, and how
soon a subscriber sees a provider's first token.

```bash
.venv/bin/python -m bench.perf.streaming                  # 10 turns, 3 repeats, 2,000-token answer
.venv/bin/python -m bench.perf.streaming --turns 20 --repeats 5
.venv/bin/python -m bench.perf.streaming --only sse       # the SSE readers alone
```

Two workloads, each run with `stream: false`, and with `stream: {batchMs: 200}` (the default):

- scripted: the scripted mock, T tool turns of about 400 characters of text each, then an
  answer; the mock streams its text in 8-character chunks with no delay (the cost of batching
  alone).
- 2,000-token answer: the OpenAI provider against a local fake server that streams an answer of
  2,000 tokens (8,000 characters) in 400 chunks, 5 ms apart (2 s of generation). Reported: the
  history bytes the answer added over streaming off, as a multiple of the answer's own size,
  and the time from the server writing its first chunk to `toren.client.stream` yielding the
  first `text_delta` (median over repeats), with nobody reading the stream and with one reader
  (a reader reads by query, which history does not record).

- SSE readers: a run parks on a call that needs approval while 1, then 20, clients read its
  `/v1/runs/{id}/stream` from `toren serve`'s app (uvicorn on a free port, over real HTTP).
  Once each has the run's first items, the call is approved with `POST .../decisions`.
  Reported: the run's history events and bytes (readers read by query: the same for 1 and 20),
  the decision's round trip, and the time until every reader has seen its `approval_decided`.

It starts its own dev server (SQLite in a temp dir, free ports) and a worker in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from toren import client as toren_client
from toren.connect import connect
from toren.testing import FAST_DISPATCH, DevServer, free_port
from toren.web import Token, create_app
from toren.worker import serve
from toren.worker.models._openai import OpenAIModel

TOOL = textwrap.dedent(
    """
    from toren import define_tool
    tool = define_tool(description="No-op.", handler=lambda a, c: "x" * 200)
    """
)
GATED = textwrap.dedent(
    """
    from toren import define_tool
    tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "ok")
    """
)
ANSWER_CHUNKS = 400
CHUNK = "word " * 4  # 20 characters, about 5 tokens
CHUNK_PAUSE_S = 0.005


def agent(root: Path, name: str, script: list[Any] | None, stream: Any, model: str) -> Path:
    folder = root / name
    (folder / "tools").mkdir(parents=True)
    config = {"name": name, "model": model, "stream": stream}
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    (folder / "instructions.md").write_text("Benchmark agent.")
    (folder / "tools" / "noop.py").write_text(TOOL)
    if script is not None:
        (folder / "mock_script.yaml").write_text(yaml.safe_dump(script))
    return folder


class FakeOpenAI:
    """Streams ANSWER_CHUNKS chunks; notes when it wrote the first one."""

    def __init__(self) -> None:
        self.first_chunk_at: list[float] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = json.loads(await reader.readexactly(length))
        streaming = bool(body.get("stream"))
        if not streaming:
            text = CHUNK * ANSWER_CHUNKS
            await asyncio.sleep(CHUNK_PAUSE_S * ANSWER_CHUNKS)
            payload = json.dumps(
                {
                    "id": "c",
                    "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2000},
                }
            ).encode()  # fmt: skip
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + payload
            )
            await writer.drain()
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for i in range(ANSWER_CHUNKS):
            delta = {"content": CHUNK}
            data = {"id": "c", "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}  # fmt: skip
            writer.write(f"data: {json.dumps(data)}\n\n".encode())
            await writer.drain()
            if i == 0:
                self.first_chunk_at.append(time.monotonic())
            await asyncio.sleep(CHUNK_PAUSE_S)
        end = {"id": "c", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 2000}}  # fmt: skip
        writer.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        await writer.drain()
        writer.close()


async def history_bytes(client: Any, run_id: str) -> tuple[int, int]:
    total, events = 0, 0
    for history in await toren_client.histories(client, run_id):
        events += len(history.events)
        total += sum(e.ByteSize() for e in history.events)
    return total, events


async def scripted(client: Any, root: Path, turns: int, repeats: int) -> None:
    text = "All good so far, carrying on with the next lookup. " * 8  # ~400 characters
    script = [{"text": text, "tool_calls": [{"name": "noop"}]} for _ in range(turns)]
    script.append(text)
    print(f"\nscripted workload: {turns} tool turns of ~{len(text)} characters of text each")
    print(f"{'stream':<16}{'ms/turn':>10}{'bytes/turn':>12}{'events/turn':>13}")
    for label, stream in (("off", False), ("on (200 ms)", {"batchMs": 200})):
        name = f"bench_s_{'on' if stream else 'off'}"
        folder = agent(root, name, script, stream, "mock/scripted")
        times, sizes, counts = [], [], []
        async with serve(client, [folder]):
            for _ in range(repeats):
                started = time.monotonic()
                handle = await toren_client.start_run(client, name, "go")
                await handle.result()
                times.append((time.monotonic() - started) * 1000 / (turns + 1))
                size, events = await history_bytes(client, handle.id)
                sizes.append(size / (turns + 1))
                counts.append(events / (turns + 1))
        print(
            f"{label:<16}{statistics.median(times):>10.1f}{statistics.median(sizes):>12.0f}"
            f"{statistics.median(counts):>13.1f}"
        )


async def long_answer(client: Any, root: Path, repeats: int) -> None:
    fake = FakeOpenAI()
    port = free_port()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", port)
    answer = len(CHUNK * ANSWER_CHUNKS)
    model = OpenAIModel("sk-bench", base_url=f"http://127.0.0.1:{port}/v1")
    print(f"\n2,000-token answer ({answer} characters, {ANSWER_CHUNKS} chunks, "
          f"{CHUNK_PAUSE_S * 1000:.0f} ms apart)")  # fmt: skip
    print(f"{'stream':<16}{'ms/run':>10}{'history B':>11}{'x answer':>10}{'first token ms':>16}")
    # A reader reads by query: with one, the history should be what it is with none.
    base = 0
    cases = (
        ("off", False, False),
        ("on, no reader", {"batchMs": 200}, False),
        ("on, 1 reader", {"batchMs": 200}, True),
    )
    for label, stream, reader in cases:
        name = f"bench_l_{'on' if stream else 'off'}_{int(reader)}"
        folder = agent(root, name, None, stream, "openai/gpt-4o-mini")
        times, sizes, firsts = [], [], []
        async with serve(
            client, [folder], environ={"OPENAI_API_KEY": "sk-bench"},
            models={"openai/gpt-4o-mini": model},
        ):  # fmt: skip
            for _ in range(repeats):
                fake.first_chunk_at.clear()
                started = time.monotonic()
                handle = await toren_client.start_run(client, name, "Write at length.")
                first_seen = None
                if reader:
                    async for event in toren_client.stream(client, handle.id):
                        if event.type == "text_delta" and first_seen is None:
                            first_seen = time.monotonic()
                await handle.result()
                times.append((time.monotonic() - started) * 1000)
                size, _ = await history_bytes(client, handle.id)
                sizes.append(size)
                if first_seen is not None and fake.first_chunk_at:
                    firsts.append((first_seen - fake.first_chunk_at[0]) * 1000)
        size = statistics.median(sizes)
        base = base or int(size)
        extra = (size - base) / answer if stream else 0.0
        first = f"{statistics.median(firsts):.0f}" if firsts else "-"
        print(f"{label:<16}{statistics.median(times):>10.0f}{size:>11.0f}{extra:>10.2f}{first:>16}")
    server.close()


async def sse_reader(
    http: httpx.AsyncClient, run_id: str, started: asyncio.Event, seen: list[float]
) -> None:
    """One SSE client of the run's stream: notes when it saw the decision."""
    async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            started.set()
            if json.loads(line[6:]).get("type") == "approval_decided":
                seen.append(time.monotonic())


async def sse_readers(client: Any, root: Path, repeats: int) -> None:
    name = "bench_sse"
    script = [{"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]}, "done"]
    folder = agent(root, name, script, {"batchMs": 200}, "mock/scripted")
    (folder / "tools" / "gated.py").write_text(GATED)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(client, tokens=[Token("bench")]), port=port, log_level="error")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    print("\nSSE readers of one parked run, through toren serve's app; the call approved")
    print(f"{'readers':>8}{'events':>8}{'history B':>11}{'decide ms':>11}{'all saw ms':>12}")
    headers = {"Authorization": "Bearer bench"}
    async with (
        serve(client, [folder]),
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60,
            limits=httpx.Limits(max_connections=100),
        ) as http,
    ):  # fmt: skip
        for readers in (1, 20):
            sizes, counts, decides, seens = [], [], [], []
            for _ in range(repeats):
                r = await http.post("/v1/runs", json={"agent": name, "prompt": "go"})
                run_id = r.json()["run_id"]
                while not (await http.get(f"/v1/runs/{run_id}/pending")).json()["pending"]:
                    await asyncio.sleep(0.05)
                started = [asyncio.Event() for _ in range(readers)]
                seen: list[float] = []
                tasks = [
                    asyncio.create_task(sse_reader(http, run_id, event, seen)) for event in started
                ]
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
                sent = time.monotonic()
                decided = await http.post(
                    f"/v1/runs/{run_id}/decisions", json={"call_id": "g1", "approve": True}
                )
                decides.append((time.monotonic() - sent) * 1000)
                assert decided.status_code == 200, decided.text
                await asyncio.wait_for(asyncio.gather(*tasks), 60)  # each ends after the run
                seens.append((max(seen) - sent) * 1000 if len(seen) == readers else float("nan"))
                size, events = await history_bytes(client, run_id)
                sizes.append(size)
                counts.append(events)
            print(
                f"{readers:>8}{statistics.median(counts):>8.0f}{statistics.median(sizes):>11.0f}"
                f"{statistics.median(decides):>11.0f}{statistics.median(seens):>12.0f}"
            )
    server.should_exit = True
    await serving


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only", default="scripted,long,sse", help="which workloads (comma-separated)"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        dev = DevServer(Path(tmp) / "server", dynamic_config=FAST_DISPATCH)
        dev.start()
        try:
            client = await connect(target_host=dev.address)
            if "scripted" in only:
                await scripted(client, Path(tmp), args.turns, args.repeats)
            if "long" in only:
                await long_answer(client, Path(tmp), args.repeats)
            if "sse" in only:
                await sse_readers(client, Path(tmp), args.repeats)
        finally:
            dev.stop()
    print(f"\npython {sys.version.split()[0]}; medians over {args.repeats} runs")


if __name__ == "__main__":
    asyncio.run(main())
