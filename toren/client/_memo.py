"""The memo `toren.client.start_run` sets on a run: what a run list shows without its history.

A memo is the client's (no workflow command) and visibility returns it with each listed run, so
`GET /v1/runs` and the console show a run's prompt without reading every history. Only the
first line, at most 200 characters; the prompt itself is in the run's input as always.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROMPT_MEMO_KEY", "start_memo"]

PROMPT_MEMO_KEY = "toren_prompt"
"""The memo key holding the first line of a run's prompt."""


def start_memo(prompt: str) -> dict[str, Any]:
    """The memo of a run started with `prompt` (none for an empty prompt)."""
    first = prompt.strip().splitlines()[0][:200] if prompt.strip() else ""
    return {PROMPT_MEMO_KEY: first} if first else {}
