"""Per-call overhead of a model provider's client: N calls to a local stub that answers at once.

```bash
.venv/bin/python -m bench.perf.providers --calls 200
.venv/bin/python -m bench.perf.providers --calls 200 --paths chat,chat-streamed
```

The stub (a `ThreadingHTTPServer` on 127.0.0.1) answers Chat Completions and the Responses API,
streamed (a few SSE events) and not, with no delay: what is timed is the client's own work per
call (building the request, the SDK's client, the HTTP exchange over loopback, parsing), not a
model. Calls run one after another; reported per path: mean, p50 and p95 milliseconds per call.
Another provider adds a row to `PATHS` (name → a factory of one call's coroutine).

Figures: 2 cores shared with other jobs (load average 5.5), `--calls 200`, ms per call,
p50 / p95, two runs each, alternating:

| path | hand-written httpx client (before, 97347b7) | `openai` SDK 3.63 (now) |
|---|---|---|
| chat | 104 / 206, 88 / 160 | 4.3 / 23, 5.4 / 25 |
| chat streamed | 39 / 98, 37 / 129 | 13 / 37, 6.5 / 26 |
| responses | n/a | 9.9 / 46, 7.2 / 19 |
| responses streamed | n/a | 25 / 44, 7.8 / 32 |

The gain is not the SDK's: both build an httpx client per call, and building one loads the CA
bundle (some 80 ms here); the provider now makes its TLS context once (`_openai._tls`). The SDK
itself adds well under a millisecond per call (its client object), noise on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from toren.worker.models._base import ModelRequest
from toren.worker.models._openai import OpenAIModel

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "stub",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3},
}  # fmt: skip
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "stub",
    "output": [{"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello there."}]}],
    "usage": {"input_tokens": 12, "output_tokens": 3},
}  # fmt: skip


def _chat_stream() -> bytes:
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": word}}]} for word in ("Hello", " there.")
    ]
    chunks.append(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": CHAT["usage"]}
    )
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _responses_stream() -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hello"},
        {"type": "response.output_text.delta", "output_index": 0, "delta": " there."},
        {"type": "response.completed", "response": RESPONSE},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        responses = self.path.endswith("/responses")
        if body.get("stream"):
            data, kind = (_responses_stream() if responses else _chat_stream()), "text/event-stream"
        else:
            data, kind = json.dumps(RESPONSE if responses else CHAT).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _request(api: str, streamed: bool) -> ModelRequest:
    return ModelRequest(
        model="stub",
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
        settings={"api": api},
        on_delta=(lambda delta: None) if streamed else None,
    )


def paths(base_url: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Each path measured: name → a factory of one call's coroutine."""
    model = OpenAIModel("sk-bench", base_url=base_url)
    return {
        "chat": lambda: model.complete(_request("chat", False)),
        "chat streamed": lambda: model.complete(_request("chat", True)),
        "responses": lambda: model.complete(_request("responses", False)),
        "responses streamed": lambda: model.complete(_request("responses", True)),
    }


async def measure(call: Callable[[], Awaitable[Any]], calls: int) -> list[float]:
    """Milliseconds per call, `calls` calls one after another (after 3 to warm up)."""
    for _ in range(3):
        await call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main(calls: int, only: list[str] | None) -> None:
    """Serve the stub, measure every path (or `only` those), print one row each."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        print(f"{'path':<20} {'calls':>6} {'mean ms':>8} {'p50 ms':>8} {'p95 ms':>8}")
        for name, call in paths(base_url).items():
            if only and name.replace(" ", "-") not in only:
                continue
            times = sorted(await measure(call, calls))
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            print(
                f"{name:<20} {calls:>6} {statistics.fmean(times):>8.2f} "
                f"{statistics.median(times):>8.2f} {p95:>8.2f}"
            )
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per path")
    parser.add_argument("--paths", help="comma-separated: chat,chat-streamed,responses,...")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.paths.split(",") if args.paths else None))
