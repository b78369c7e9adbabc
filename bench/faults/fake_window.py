"""A fake OpenAI-compatible server with a context window, that logs what the model was shown.

`POST /v1/chat/completions` refuses a request whose messages pass `window_chars` characters of
JSON with OpenAI's words (HTTP 400, code `context_length_exceeded`), as a provider refuses a
prompt past its window. Otherwise it answers like a tool-using agent:

- a request with no tools is a summarising call: it answers `SUMMARY-<n>: ...` (after failing
  `fail_summaries` times with a 500, to show that a summary is retried);
- otherwise it calls the tool `tool`, `loop` times in a row, then answers `answer to <the
  user's last words>`.

Usage reports `prompt_tokens` as characters / 4, so the run's estimates meet the server's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.faults.fake_openai import FakeOpenAI

__all__ = ["FakeWindow", "Shown"]


@dataclass
class Shown:
    """One request: what the model was shown and what the server did."""

    chars: int
    messages: list[dict[str, Any]]
    summary: bool
    outcome: str
    """`refused`, `failed`, `tool`, `text` or `summary`."""


@dataclass
class FakeWindow(FakeOpenAI):
    """The server (`FakeOpenAI`'s, answering by the window instead of by plans)."""

    plans: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    """Unused: this server answers every request by the rules above."""
    window_chars: int = 32_000
    tool: str = "fetch_log"
    loop: int = 1
    """Tool calls in a row after each user message."""
    fail_summaries: int = 0
    shown: list[Shown] = field(default_factory=list)
    _calls: int = 0

    def handle(self, http: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """Answer one Chat Completions request."""
        status, payload = self.answer(body)
        data = json.dumps(payload).encode()
        http.send_response(status)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(data)))
        http.end_headers()
        http.wfile.write(data)

    def count(self, outcome: str) -> int:
        """Requests that ended in `outcome`."""
        with self.lock:
            return sum(1 for s in self.shown if s.outcome == outcome)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for one request."""
        messages = body.get("messages") or []
        chars = len(json.dumps(messages, ensure_ascii=False))
        summary = not body.get("tools")
        with self.lock:
            summaries = sum(1 for s in self.shown if s.summary)
            shown = Shown(chars, messages, summary, "")
            self.shown.append(shown)
        if chars > self.window_chars:
            shown.outcome = "refused"
            return 400, _error(
                f"This model's maximum context length is {self.window_chars // 4} tokens. "
                f"However, your messages resulted in {chars // 4} tokens. Please reduce the "
                "length of the messages.",
                "context_length_exceeded",
            )
        if summary and summaries < self.fail_summaries:
            shown.outcome = "failed"
            return 500, _error("fake outage", None)
        usage = {"prompt_tokens": chars // 4, "completion_tokens": 20}
        if summary:
            shown.outcome = "summary"
            return 200, _reply({"content": f"SUMMARY-{summaries + 1}: logs were fetched."}, usage)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and self._calls >= self.loop:
            self._calls = 0  # the turn's calls are done (counted here: a summary hides them)
            user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
            shown.outcome = "text"
            return 200, _reply({"content": f"answer to {str(user.get('content'))[-40:]}"}, usage)
        self._calls += 1
        shown.outcome = "tool"
        call = {
            "id": f"call_{len(self.shown)}",
            "type": "function",
            "function": {"name": self.tool, "arguments": json.dumps({"n": len(self.shown)})},
        }
        return 200, _reply({"content": None, "tool_calls": [call]}, usage)


def _reply(message: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-window",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {**usage, "total_tokens": sum(usage.values())},
    }


def _error(message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}  # fmt: skip
