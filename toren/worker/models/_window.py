"""The model's context window: how large it is, and a refusal for length.

A thread lives longer than any window, so before each call the workflow needs the window's size
(the worker records the table's in the agent's spec), and after a refusal it must know that the
prompt was too long (compact and call again) rather than that the call failed. The prompt's size
the workflow estimates itself (`toren.workflows._context_window`): the tokens the provider
counted last time, plus characters / 4 of what was added since.

```python
window_of("anthropic/claude-sonnet-4-20250514")        # -> 200000 (the table below)
refusal_for("HTTP 400: prompt is too long: 208410 tokens > 200000 maximum")
# -> Refusal(window=200000, prompt_tokens=208410); None for any other error
```

Each provider turns a refusal into `PromptTooLongError` (not retryable: the same prompt is refused
again), with the window it stated; the run learns the window from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toren.worker._http import error_message

__all__ = [
    "CHARS_PER_TOKEN",
    "KNOWN_WINDOWS",
    "Refusal",
    "refusal_detail",
    "refusal_for",
    "window_of",
]

CHARS_PER_TOKEN = 4
"""Characters per token where no tokenizer knows the model (the workflow's budget uses 4 too)."""

KNOWN_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-sonnet-4-5": 200_000,
    "claude-opus-4": 200_000,
    "claude-opus-4-1": 200_000,
    "claude-haiku-4-5": 200_000,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
}
"""Context windows in tokens (prompt and reply together) of common models, by name as their
providers publish it. A dated snapshot (`gpt-4o-2024-08-06`, `claude-sonnet-4-20250514`) has its
family's window."""


@dataclass(frozen=True)
class Refusal:
    """A provider refused a prompt for its length; what it said about the sizes."""

    window: int | None = None
    """The model's context window in tokens, when the refusal states it."""
    prompt_tokens: int | None = None
    """The refused prompt's size in tokens, when the refusal states it."""


_REFUSALS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], Refusal]], ...] = (
    # OpenAI, and vLLM in each of its versions' wordings ("However, you requested N tokens",
    # "your messages resulted in N tokens", "your request has N input tokens").
    (
        re.compile(r"maximum context length is (\d+) tokens(?:\D+?(\d+) (?:input )?tokens)?"),
        lambda m: Refusal(int(m[1]), int(m[2]) if m[2] else None),
    ),
    # Anthropic: "prompt is too long: 208410 tokens > 200000 maximum".
    (
        re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum"),
        lambda m: Refusal(int(m[2]), int(m[1])),
    ),
    # Anthropic, when the prompt fits but not with `max_tokens` on top: "input length and
    # `max_tokens` exceed context limit: 197202 + 21333 > 200000".
    (
        re.compile(r"exceed context limit: (\d+) \+ \d+ > (\d+)"),
        lambda m: Refusal(int(m[2]), int(m[1])),
    ),
    # llama.cpp's server: "request (4390 tokens) exceeds the available context size (4096
    # tokens)"; older ones say only "the request exceeds the available context size" and put
    # `n_ctx` in the body (`refusal_detail` quotes it).
    (
        re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens"),
        lambda m: Refusal(int(m[2]), int(m[1])),
    ),
    (
        re.compile(r"exceeds? the available context size|exceed_context_size_error"),
        lambda m: Refusal(
            _number(r"n_ctx (\d+)", m.string), _number(r"n_prompt_tokens (\d+)", m.string)
        ),
    ),
    # llama-cpp-python: "Requested tokens (2285) exceed context window of 2048".
    (
        re.compile(r"requested tokens \((\d+)\) exceed context window of (\d+)"),
        lambda m: Refusal(int(m[2]), int(m[1])),
    ),
    # Gemini: "The input token count (1234567) exceeds the maximum number of tokens allowed
    # (1048576)."
    (
        re.compile(
            r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)"
        ),
        lambda m: Refusal(int(m[2]), int(m[1])),
    ),
    (re.compile(r"exceeds the maximum number of tokens"), lambda m: Refusal()),
    # OpenAI's error code, and llama.cpp's 500 "Context size has been exceeded."
    (re.compile(r"context_length_exceeded|context size has been exceeded"), lambda m: Refusal()),
)


def refusal_for(text: str) -> Refusal | None:
    """The refusal for length in a provider's error text, or `None` for any other error.

    Knows the wordings of OpenAI, Anthropic, Gemini, vLLM and llama.cpp (see `_REFUSALS`).
    """
    lowered = text.lower()
    for pattern, refusal in _REFUSALS:
        match = pattern.search(lowered)
        if match:
            return refusal(match)
    return None


def refusal_detail(data: Any) -> str | None:
    """The message of an error body, with what a refusal for length keeps outside it.

    OpenAI names the refusal only in its `code` (`context_length_exceeded`), and llama.cpp's
    older servers state the window only as `n_ctx`: both are added to the message, so the
    error text alone says what happened (and `refusal_for` can read it). Any other error's
    message is `toren.worker._http.error_message`'s.
    """
    message = error_message(data)
    error = data.get("error") if isinstance(data, dict) else None
    if message is None or not isinstance(error, dict):
        return message
    extra = [
        f"{key} {error[key]}"
        for key in ("n_prompt_tokens", "n_ctx")
        if isinstance(error.get(key), int) and key not in message
    ]
    if error.get("code") == "context_length_exceeded" and "context_length_exceeded" not in message:
        extra.insert(0, "context_length_exceeded")
    return f"{message} ({', '.join(extra)})" if extra else message


def window_of(model: str, learned: Mapping[str, int] | None = None) -> int | None:
    """The context window of `model` (`openai/gpt-4o` or `gpt-4o`) in tokens, or `None`.

    A window `learned` from the provider's own refusal wins over the table; a dated snapshot
    has its family's window (the longest name in `KNOWN_WINDOWS` it starts with). A Bedrock id
    of an Anthropic model (`bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0`) has its model's.
    """
    name = model.partition("/")[2] if "/" in model else model
    if learned and name in learned:
        return learned[name]
    if model.startswith("bedrock/") and "anthropic.claude" in name:
        name = name.partition("anthropic.")[2]
    if name in KNOWN_WINDOWS:
        return KNOWN_WINDOWS[name]
    family = [known for known in KNOWN_WINDOWS if name.startswith((f"{known}-", f"{known}@"))]
    return KNOWN_WINDOWS[max(family, key=len)] if family else None


def _number(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text)
    return int(found[1]) if found else None
