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

Figures, `--calls 100`, ms per call (mean / p50 / p95), 2 cores shared with a test run (load
average 2.4); "before" is this script run in a checkout of 97347b7, the hand-written httpx
clients (only the paths it had):

| path | before (97347b7) | now (official SDKs) |
|---|---|---|
| chat | 34.4 / 30.9 / 60.3 | 4.3 / 4.0 / 7.5 |
| chat streamed | 32.4 / 29.8 / 43.3 | 5.5 / 4.8 / 7.8 |
| responses | n/a | 4.9 / 4.2 / 7.9 |
| responses streamed | n/a | 9.6 / 7.6 / 24.2 |
| anthropic | 34.0 / 32.0 / 44.1 | 6.6 / 7.4 / 10.9 |
| anthropic streamed | 33.8 / 31.5 / 45.7 | 8.3 / 7.9 / 12.3 |
| gemini | n/a | 8.6 / 7.6 / 13.1 |
| gemini streamed | n/a | 6.6 / 6.5 / 9.1 |
| bedrock (Converse) | n/a | 36.7 / 33.9 / 41.6 |

The gain is not the SDKs': every path builds its HTTP client per call (no pool outlives an
activity's event loop), and building one loaded the CA bundle each time (30 to 100 ms here,
more under load). The providers now share one TLS context per worker (`_tls.py`); google-genai
is handed it too (it would build two per client). Bedrock's aiobotocore still loads the CA
bundle into each call's connector, which is most of its 34 ms; against a real model's seconds
that is noise, and left so. The SDKs' own work is a few milliseconds per call.
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


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "stub",
    "content": [{"type": "text", "text": "Hello there."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 12, "output_tokens": 3},
}
GENERATED = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "Hello there."}]},
                    "finishReason": "STOP", "index": 0}],
    "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15},
}  # fmt: skip
CONVERSE = {
    "output": {"message": {"role": "assistant", "content": [{"text": "Hello there."}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15},
    "metrics": {"latencyMs": 1},
}


def _messages_stream() -> bytes:
    start = {**MESSAGE, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
          for w in ("Hello", " there.")),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _generated_stream() -> bytes:
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello"}]}}]}
    last = {**GENERATED, "candidates": [{**GENERATED["candidates"][0],
            "content": {"role": "model", "parts": [{"text": " there."}]}}]}  # fmt: skip
    return b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in (first, last))


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
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw) if raw else {}
        path = self.path.split("?")[0]
        streamed = bool(body.get("stream")) or ":stream" in path
        if path.endswith("/responses"):
            reply, stream = RESPONSE, _responses_stream
        elif path.endswith("/messages"):
            reply, stream = MESSAGE, _messages_stream
        elif ":" in path.rsplit("/", 1)[-1]:  # Gemini's models/<m>:generateContent
            reply, stream = GENERATED, _generated_stream
        elif path.endswith("/converse"):  # Bedrock's Converse (ConverseStream is not stubbed)
            reply, stream = CONVERSE, _chat_stream
        else:
            reply, stream = CHAT, _chat_stream
        if streamed:
            data, kind = stream(), "text/event-stream"
        else:
            data, kind = json.dumps(reply).encode(), "application/json"
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
        settings={"api": api} if api else {},
        on_delta=(lambda delta: None) if streamed else None,
    )


def paths(root: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Each path measured: name → a factory of one call's coroutine (`root`: the stub's URL).

    A provider that this checkout lacks (or whose SDK is not installed) has no rows, so the
    script runs on an older commit too, for the figures before a change.
    """
    model = OpenAIModel("sk-bench", base_url=f"{root}/v1")
    found: dict[str, Callable[[], Awaitable[Any]]] = {
        "chat": lambda: model.complete(_request("chat", False)),
        "chat streamed": lambda: model.complete(_request("chat", True)),
        "responses": lambda: model.complete(_request("responses", False)),
        "responses streamed": lambda: model.complete(_request("responses", True)),
    }
    from toren.worker.models._anthropic import AnthropicModel

    claude = AnthropicModel("sk-ant-bench", base_url=root)
    found["anthropic"] = lambda: claude.complete(_request("", False))
    found["anthropic streamed"] = lambda: claude.complete(_request("", True))
    try:
        from toren.worker.models._gemini import GeminiModel

        gemini = GeminiModel("gm-bench", base_url=f"{root}/")
        found["gemini"] = lambda: gemini.complete(_request("", False))
        found["gemini streamed"] = lambda: gemini.complete(_request("", True))
    except Exception:  # noqa: BLE001 (no such provider in this checkout, or no SDK)
        pass
    try:
        from toren.worker.models._bedrock import bedrock_provider

        env = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIABENCH",
               "AWS_SECRET_ACCESS_KEY": "bench", "BEDROCK_ENDPOINT_URL": root}  # fmt: skip
        bedrock = bedrock_provider(env, timeout=30.0)
        found["bedrock"] = lambda: bedrock.complete(_request("", False))
    except Exception:  # noqa: BLE001 (no such provider in this checkout, or no SDK)
        pass
    return found


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
        root = f"http://127.0.0.1:{server.server_address[1]}"
        print(f"{'path':<20} {'calls':>6} {'mean ms':>8} {'p50 ms':>8} {'p95 ms':>8}")
        for name, call in paths(root).items():
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
