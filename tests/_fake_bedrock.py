"""A local stand-in for Bedrock Runtime's Converse endpoints, reached through real aioboto3.

```python
with FakeBedrock() as fake:
    fake.replies.append(converse_json(text("hi"), stop="end_turn"))  # POST .../converse
    fake.replies.append(stream_body(delta_text(0, "hi"), message_stop()))  # .../converse-stream
    provider = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS)
```

Each request pops the next reply (`Reply`: status, headers, body); `requests` records what came
(path, headers, decoded JSON body). Streams are AWS event-stream frames as Bedrock sends them:
a prelude (total and headers length, CRC32), string headers (`:event-type`, `:message-type`,
`:content-type`), the JSON payload and the message's CRC32 (botocore's `eventstream.py` checks
both CRCs).
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FAKE_KEYS",
    "FakeBedrock",
    "Reply",
    "converse_json",
    "error",
    "event",
    "exception_event",
    "message_stop",
    "metadata",
    "start",
    "stop",
    "stream_body",
    "text_delta",
    "tool_delta",
    "tool_start",
]

FAKE_KEYS = {
    "aws_access_key_id": "AKIAFAKEBEDROCKTEST1",
    "aws_secret_access_key": "fake-secret-access-key-for-bedrock-tests-0123",
}
"""Credentials botocore signs with (SigV4); the local server never checks them."""

EVENT_STREAM = "application/vnd.amazon.eventstream"


@dataclass
class Reply:
    """One canned HTTP answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stall: bool = False
    """Send `body`, then hang (promising more) until the server closes: a stalled stream."""


def converse_json(*blocks: dict[str, Any], stop: str = "end_turn", **usage: int) -> Reply:
    """A Converse response holding `blocks`, stopped for `stop`, with `usage` (default 10/5)."""
    counted = {"inputTokens": 10, "outputTokens": 5, **usage}
    counted["totalTokens"] = sum(counted.values())
    body = {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop,
        "usage": counted,
        "metrics": {"latencyMs": 12},
    }
    return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())


def error(status: int, code: str, message: str, **headers: str) -> Reply:
    """An error the way Bedrock's REST-JSON protocol sends it (`x-amzn-ErrorType`)."""
    body = json.dumps({"message": message}).encode()
    return Reply(
        status,
        {
            "Content-Type": "application/json",
            "x-amzn-ErrorType": f"{code}:http://internal/",
            **headers,
        },
        body,
    )


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude + CRC, string headers, payload, message CRC."""
    encoded = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(kind: str, payload: dict[str, Any]) -> bytes:
    """A ConverseStream event (`messageStart`, `contentBlockDelta`, `metadata`…)."""
    headers = {":event-type": kind, ":message-type": "event", ":content-type": "application/json"}
    return frame(headers, json.dumps(payload).encode())


def exception_event(kind: str, message: str) -> bytes:
    """An exception sent mid-stream (`throttlingException`, `modelStreamErrorException`…)."""
    headers = {
        ":exception-type": kind,
        ":message-type": "exception",
        ":content-type": "application/json",
    }
    return frame(headers, json.dumps({"message": message}).encode())


def stream_body(*frames: bytes) -> Reply:
    """A ConverseStream answer made of `frames`."""
    return Reply(200, {"Content-Type": EVENT_STREAM}, b"".join(frames))


def start() -> bytes:
    return event("messageStart", {"role": "assistant"})


def text_delta(index: int, text: str) -> bytes:
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": text}})


def tool_start(index: int, call_id: str, name: str) -> bytes:
    start = {"toolUse": {"toolUseId": call_id, "name": name}}
    return event("contentBlockStart", {"contentBlockIndex": index, "start": start})


def tool_delta(index: int, fragment: str) -> bytes:
    delta = {"toolUse": {"input": fragment}}
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})


def stop(index: int) -> bytes:
    return event("contentBlockStop", {"contentBlockIndex": index})


def message_stop(reason: str) -> bytes:
    return event("messageStop", {"stopReason": reason})


def metadata(**usage: int) -> bytes:
    return event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}})


class FakeBedrock:
    """A threaded HTTP server on 127.0.0.1 answering Converse and ConverseStream."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.closing = threading.Event()
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw)}
                )
                reply = fake.replies.pop(0) if fake.replies else error(500, "X", "no reply left")
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                promised = len(reply.body) + (1000 if reply.stall else 0)
                self.send_header("Content-Length", str(promised))
                self.end_headers()
                self.wfile.write(reply.body)
                self.wfile.flush()
                if reply.stall:
                    fake.closing.wait()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeBedrock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
