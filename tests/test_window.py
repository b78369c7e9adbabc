"""The context window's pure parts (`toren.worker.models._window`) and a refusal for length at
the HTTP boundary: each provider's wording, the window it states, the known table, estimates."""

from __future__ import annotations

import pytest

from tests.test_models_http import answering, anthropic, openai
from tests.test_prompt_cache import ask
from toren.errors import ModelHTTPError, PromptTooLongError
from toren.worker.models._window import (
    KNOWN_WINDOWS,
    Refusal,
    refusal_for,
    window_of,
)

OPENAI = {
    "error": {
        "message": "This model's maximum context length is 8000 tokens. However, your messages "
        "resulted in 9137 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208410 tokens > 200000 maximum",
    },
}
VLLM = {
    "object": "error",
    "type": "BadRequestError",
    "code": 400,
    "message": "This model's maximum context length is 16384 tokens. However, you requested 122946 tokens "
    "(112946 in the messages, 10000 in the completion). Please reduce the length of the "
    "messages or completion.",
}
LLAMA_CPP = {
    "error": {
        "code": 400,
        "message": "request (4390 tokens) exceeds the available "
        "context size (4096 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4390,
        "n_ctx": 4096,
    }
}
LLAMA_CPP_OLD = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context "
        "size. try increasing the context size or enable context shift",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 14429,
        "n_ctx": 8192,
    }
}
# fmt: skip


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("This model's maximum context length is 8000 tokens. However, your messages resulted "
         "in 9137 tokens.", Refusal(8000, 9137)),
        ("This model's maximum context length is 2048 tokens. However, your request has 8 input "
         "tokens plus 2045 'max_tokens'.", Refusal(2048, 8)),
        ("prompt is too long: 208410 tokens > 200000 maximum", Refusal(200000, 208410)),
        ("input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000, decrease "
         "input length or `max_tokens` and try again", Refusal(200000, 197202)),
        ("request (4390 tokens) exceeds the available context size (4096 tokens), try increasing "
         "it", Refusal(4096, 4390)),
        ("the request exceeds the available context size. try increasing the context size or "
         "enable context shift (n_prompt_tokens 14429, n_ctx 8192)", Refusal(8192, 14429)),
        ("Requested tokens (2285) exceed context window of 2048", Refusal(2048, 2285)),
        ("Context size has been exceeded.", Refusal()),
        ("Invalid request (context_length_exceeded)", Refusal()),
    ],
)  # fmt: skip
def test_each_providers_wording_is_a_refusal_with_its_sizes(text: str, refusal: Refusal) -> None:
    assert refusal_for(f"Server returned HTTP 400: {text}") == refusal


@pytest.mark.parametrize(
    "text",
    ["OpenAI returned HTTP 429: Rate limit reached for gpt-4o",
     "Anthropic returned HTTP 400: max_tokens: 300000 > 64000, which is the maximum allowed",
     "OpenAI returned HTTP 400: Invalid 'messages[2].content': string too long"],
)  # fmt: skip
def test_other_errors_are_no_refusal(text: str) -> None:
    assert refusal_for(text) is None


@pytest.mark.parametrize(
    ("body", "window", "prompt"),
    [(OPENAI, 8000, 9137), (VLLM, 16384, 122946), (LLAMA_CPP, 4096, 4390),
     (LLAMA_CPP_OLD, 8192, 14429)],
)  # fmt: skip
async def test_an_openai_compatible_refusal_is_not_retried_and_states_the_window(
    body: dict[str, object], window: int, prompt: int
) -> None:
    model = openai(answering(400, body))
    with pytest.raises(PromptTooLongError) as refused:
        await model.complete(ask(model="my-local-model"))
    assert isinstance(refused.value, ModelHTTPError) and not refused.value.retryable
    assert (refused.value.window, refused.value.prompt_tokens) == (window, prompt)
    assert refused.value.status == 400


async def test_an_anthropic_refusal_is_not_retried() -> None:
    with pytest.raises(PromptTooLongError) as refused:
        await anthropic(answering(400, ANTHROPIC)).complete(ask())
    assert "prompt is too long: 208410 tokens > 200000 maximum" in str(refused.value)
    assert (refused.value.window, refused.value.retryable) == (200000, False)


async def test_openais_code_alone_names_the_refusal() -> None:
    body = {"error": {"message": "Input too large.", "code": "context_length_exceeded"}}
    with pytest.raises(PromptTooLongError) as refused:
        await openai(answering(400, body)).complete(ask())
    assert str(refused.value).endswith("Input too large. (context_length_exceeded)")


async def test_another_400_stays_a_plain_model_error() -> None:
    body = {"error": {"message": "Invalid value for 'temperature'.", "code": "invalid_value"}}
    with pytest.raises(ModelHTTPError) as failed:
        await openai(answering(400, body)).complete(ask())
    assert type(failed.value) is ModelHTTPError


def test_known_windows_and_their_dated_snapshots() -> None:
    assert len(KNOWN_WINDOWS) >= 12
    assert window_of("openai/gpt-4o") == 128_000
    assert window_of("gpt-4o-2024-08-06") == 128_000
    assert window_of("openai/gpt-4.1-mini-2025-04-14") == 1_047_576  # not gpt-4.1's prefix only
    assert window_of("anthropic/claude-sonnet-4-20250514") == 200_000
    assert window_of("gemini-2.5-pro") == 1_048_576
    assert window_of("claude-sonnet-4@20250514") == 200_000  # Vertex's spelling
    assert window_of("mock/scripted") is None and window_of("gpt-4oo") is None
    assert window_of("openai/gpt-4o", {"gpt-4o": 8000}) == 8000  # what the server said wins
