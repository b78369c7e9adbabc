"""Printing a run's live stream in a terminal, between the event log's lines (`toren run`).

The model's text is printed as it streams, after `  ▸ `; a tool's `ctx.emit` as a line of its
own. Lines of the event log end a streamed line first, so the two never share a line, and once
the log has printed the run's end nothing more is printed from the stream.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from temporalio.client import Client

from toren.client._stream import StreamEvent, stream

__all__ = ["LivePrinter"]


class LivePrinter:
    """Interleaves live text and progress with whole lines printed by someone else."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.mid_line = False
        self.closed = False
        """Set once the run's end is printed: later stream items are not shown."""

    def line(self, text: str) -> None:
        """Print a whole line (ending a streamed one first)."""
        self._end_line()
        print(text, file=self.out, flush=True)

    def _end_line(self) -> None:
        if self.mid_line:
            print(file=self.out, flush=True)
            self.mid_line = False

    async def follow(self, client: Client, run_id: str) -> None:
        """Print the run's stream until it ends; silent when the run has no stream."""
        try:
            async for event in stream(client, run_id):
                if self.closed:
                    return
                self.show(event)
        except Exception:  # a run from before streams, or no worker to read a closed one
            return

    def show(self, event: StreamEvent) -> None:
        """Print one stream item, if it is one a person watches."""
        data = event.data
        if event.type == "text_delta":
            text = str(data.get("text") or "")
            if not self.mid_line:
                print("  ▸ ", end="", file=self.out)
                self.mid_line = True
            print(text.replace("\n", "\n    "), end="", file=self.out, flush=True)
        elif event.type == "tool_progress":
            shown = json.dumps(data.get("data"), ensure_ascii=False)
            self.line(
                f"  ·  {data.get('name')} ({data.get('call_id')}): {data.get('event')} {shown}"
            )
        elif event.type == "superseded" and "call_id" not in data:
            self.line(f"  ↺  attempt {data.get('attempt')} of step {data.get('step')} was cut off")
        elif event.type == "truncated":
            self.line(f"  …  items before offset {data.get('first_kept')} are no longer kept")
        elif event.type == "question_asked":
            choices = data.get("choices") or []
            offer = f" [{' / '.join(map(str, choices))}]" if choices else ""
            self.line(
                f"  ?  asks a person: {data.get('question')}{offer} — answer with: toren answer "
                f"{data.get('run_id') or 'RUN'} {data.get('question_id')} 'TEXT'"
            )
        elif event.type == "question_answered":
            self.line(f"  ✓  {data.get('by') or 'someone'} answered: {data.get('text')}")
        elif event.type == "handed_off":
            self.line(
                f"  →  handed off from {data.get('from')} to {data.get('to')}: {data.get('reason')}"
            )
        elif event.type in ("tool_call_delta", "tool_call_started", "run_completed"):
            self._end_line()
