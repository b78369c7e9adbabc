"""A fake OpenAI-compatible server on 127.0.0.1 that fails on purpose, in a thread.

`POST /v1/chat/completions` answers per a plan. The run's prompt names it: `run=<id> plan=<name>`
(the first user message). A plan is a list of steps (step *i* answers the request that carries
*i* assistant messages, as toren's scripted model counts), each a list of actions tried in
order, one per attempt (the last repeats):

```python
{"status": 429, "retry_after": "2"}     # an error status, optionally with Retry-After
{"hang": 3.0, "then": {"status": 500}}  # hold the request, then answer with `then`
{"tool": "work", "args": {...}, "id": "c1"}  # a tool call
{"text": "done"}                        # a final answer
```

Every request is logged (run, step, attempt, arrival and answer times, whether the client had
gone away), so attempts per model call are counted by the server, not inferred.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Request"]


@dataclass
class Request:
    """One request the fake server received."""

    run: str
    plan: str
    step: int
    attempt: int
    t: float
    action: dict[str, Any]
    answered_at: float = 0.0
    client_gone: bool = False


@dataclass
class FakeOpenAI:
    """The server; `start()` it, point OPENAI_BASE_URL at `base_url`, `stop()` it."""

    plans: dict[str, list[list[dict[str, Any]]]]
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        """The `/v1` root to use as OPENAI_BASE_URL."""
        assert self.server
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        """Listen on a free port and serve from a daemon thread."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the harness's output to its table

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fake.handle(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving (hanging handler threads are daemons and die with the harness)."""
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def of(self, run: str) -> list[Request]:
        """The requests of one run, in arrival order."""
        with self.lock:
            return [r for r in self.requests if r.run == run]

    def handle(self, http: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """Answer one Chat Completions request per its run's plan."""
        messages = body.get("messages") or []
        first_user: dict[str, Any] = next((m for m in messages if m.get("role") == "user"), {})
        prompt = str(first_user.get("content") or "")
        run = _token("run", prompt)
        plan_name = _token("plan", prompt)
        step = sum(1 for m in messages if m.get("role") == "assistant")
        plan = self.plans.get(plan_name) or [[{"status": 400}]]
        actions = plan[min(step, len(plan) - 1)]
        with self.lock:
            attempt = 1 + sum(1 for r in self.requests if r.run == run and r.step == step)
            request = Request(run, plan_name, step, attempt, time.time(), {})
            self.requests.append(request)
        action = actions[min(attempt - 1, len(actions) - 1)]
        request.action = action
        if "hang" in action:
            time.sleep(float(action["hang"]))
            action = action["then"]
        try:
            _answer(http, action, body.get("model", "test-model"))
        except (BrokenPipeError, ConnectionResetError):
            request.client_gone = True
        request.answered_at = time.time()


def _token(name: str, prompt: str) -> str:
    found = re.search(rf"{name}=(\S+)", prompt)
    return found.group(1) if found else "?"


def _answer(http: BaseHTTPRequestHandler, action: dict[str, Any], model: str) -> None:
    headers: dict[str, str] = {}
    if "status" in action:
        status = int(action["status"])
        payload: dict[str, Any] = {
            "error": {"message": f"fake {status}", "type": "fake", "param": None, "code": None}
        }
        if "retry_after" in action:
            headers["Retry-After"] = str(action["retry_after"])
    else:
        status = 200
        message: dict[str, Any] = {"role": "assistant", "content": action.get("text")}
        if "tool" in action:
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": action.get("id", "call_1"),
                    "type": "function",
                    "function": {"name": action["tool"], "arguments": json.dumps(action["args"])},
                }
            ]
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if "tool" in action else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    data = json.dumps(payload).encode()
    http.send_response(status)
    http.send_header("Content-Type", "application/json")
    http.send_header("Content-Length", str(len(data)))
    for name, value in headers.items():
        http.send_header(name, value)
    http.end_headers()
    http.wfile.write(data)
