"""A thread of many messages that outlives its model's context window (issue 39).

    .venv/bin/python -m bench.perf.compaction [--messages 200] [--window-chars 32000] [--configured]

Each message is a pasted log of about 1.2 KB; the model calls a tool that returns about 5 KB,
then answers. The model is the fake server of `bench/faults/fake_window.py`, which refuses any
prompt past `--window-chars` with OpenAI's words. Without `--configured` the run learns the
window from that refusal; with it, agent.yaml gives `context.window` and none should come.
Prints prompt tokens per message (median, max: the server's count, characters / 4),
compactions (summaries written, tool results elided), refusals, wall time per message, and the
history bytes per execution (the chain's runs together, over the messages).
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

import yaml

from bench.faults.fake_window import FakeWindow
from toren import client as toren_client
from toren.connect import connect
from toren.testing import FAST_DISPATCH, DevServer
from toren.worker import serve

LOG_TOOL = """
from toren import define_tool

def fetch(args, ctx):
    return f"log {args.get('n', 0)}: " + "line of a long log " * 265

tool = define_tool(
    description="Fetch a log.",
    input={"type": "object", "properties": {"n": {"type": "integer"}}},
    handler=fetch,
)
"""
PASTED = "Here is what I see: " + "a pasted stack frame " * 55


def agent(root: Path, window: int | None) -> Path:
    """The agent folder: the fake model, one tool, the window when configured."""
    folder = root / "logs"
    (folder / "tools").mkdir(parents=True)
    config = {
        "name": "logs",
        "model": "openai/fake-window",
        "stream": False,
        "context": {"window": window} if window else {},
    }
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    (folder / "instructions.md").write_text("You read logs.")
    (folder / "tools" / "fetch_log.py").write_text(textwrap.dedent(LOG_TOOL))
    return folder


async def main() -> None:
    """Run the thread and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--window-chars", type=int, default=32_000)
    parser.add_argument("--configured", action="store_true", help="give context.window")
    args = parser.parse_args()
    fake = FakeWindow(window_chars=args.window_chars).start()
    with tempfile.TemporaryDirectory() as tmp:
        dev = DevServer(Path(tmp) / "server", dynamic_config=FAST_DISPATCH)
        dev.start()
        try:
            client = await connect(target_host=dev.address)
            window = args.window_chars // 4 if args.configured else None
            folder = agent(Path(tmp), window)
            environ = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": fake.base_url}
            walls: list[float] = []
            async with serve(client, [folder], environ=environ):
                thread = await toren_client.start_thread(client, "logs")
                for n in range(args.messages):
                    started = time.monotonic()
                    answer = await toren_client.send_message(client, thread.id, f"{PASTED} {n}")
                    walls.append(time.monotonic() - started)
                    if answer["status"] != "completed":
                        sys.exit(f"message {n} failed: {answer}")
                total = len(await toren_client.messages(client, thread.id))
                await toren_client.close_thread(client, thread.id)
                sizes = [len(h.to_json()) for h in await toren_client.histories(client, thread.id)]
        finally:
            dev.stop()
            fake.stop()
    prompts = [s.chars // 4 for s in fake.shown if not s.summary and s.outcome != "refused"]
    elided = max((json.dumps(s.messages).count("was elided") for s in fake.shown), default=0)
    window_text = f"{args.window_chars:,} characters" + (" (configured)" if window else "")
    print(f"{args.messages} messages, ~1.2 KB each, a ~5 KB tool result each; window {window_text}")
    print(f"messages the thread pages:   {total}")
    print(f"prompt tokens per call:      median {statistics.median(prompts):.0f}, "
          f"max {max(prompts)} (window {args.window_chars // 4})")  # fmt: skip
    print(f"summaries written:           {fake.count('summary')}")
    print(f"most tool results elided:    {elided} in one prompt")
    print(f"refusals:                    {fake.count('refused')}")
    print(f"wall time per message:       median {statistics.median(walls) * 1000:.0f} ms, "
          f"max {max(walls) * 1000:.0f} ms")  # fmt: skip
    print(f"history bytes per execution: {sum(sizes) // args.messages:,} "
          f"(runs of the chain: {len(sizes)}, largest {max(sizes):,} bytes)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
