"""Azure OpenAI (`azure/<deployment>`) through the `openai` SDK's `AsyncAzureOpenAI`.

Hand-made exchanges answered by an httpx `MockTransport` under the SDK (the helpers and reply
shapes are `tests.test_models_openai_sdk`'s); a live call that skips without credentials.
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests.test_models_openai_sdk import Recorder, answering, ask, error, response, said
from toren.errors import ConfigError, ModelHTTPError
from toren.worker.models import ModelRequest, provider_for
from toren.worker.models._openai import AzureOpenAIModel

ENDPOINT = "https://contoso.openai.azure.com"
AZURE_KEY = "azk-5e9d03b1c7a84f26"


def azure(recorder: Recorder, **auth: str) -> AzureOpenAIModel:
    auth = auth or {"api_key": AZURE_KEY}
    return AzureOpenAIModel(ENDPOINT, transport=httpx.MockTransport(recorder), **auth)


CHAT_TEXT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from Azure."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 4},
}  # fmt: skip


async def test_azure_chat_goes_to_the_deployment_with_its_key_and_api_version() -> None:
    recorder = answering(200, CHAT_TEXT)
    request = ask()
    request.model, request.settings = "prod-4o", {}
    reply = await azure(recorder).complete(request)
    assert reply.content == "Hello from Azure."
    sent = recorder.requests[0]
    assert sent.url.path == "/openai/deployments/prod-4o/chat/completions"
    assert sent.url.params["api-version"] == "2025-04-01-preview"
    assert sent.headers["api-key"] == AZURE_KEY and "authorization" not in sent.headers
    assert "prompt_cache_key" not in recorder.body


async def test_azure_responses_with_an_entra_token() -> None:
    recorder = answering(200, response([said("ok")]))
    model = azure(recorder, ad_token="eyJ0eXAi.entra.token")
    model.api_version = "preview"
    request = ask()
    request.model = "prod-5"
    assert (await model.complete(request)).content == "ok"
    sent = recorder.requests[0]
    assert sent.url.path == "/openai/responses" and sent.url.params["api-version"] == "preview"
    assert sent.headers["authorization"] == "Bearer eyJ0eXAi.entra.token"
    assert recorder.body["model"] == "prod-5"


@pytest.mark.parametrize("status", [429, 500, 401])
async def test_azure_errors_are_classified_and_hide_the_key(status: int) -> None:
    recorder = answering(status, error(f"failed for key {AZURE_KEY}"), {"retry-after": "2"})
    with pytest.raises(ModelHTTPError) as caught:
        await azure(recorder).complete(ask(on_delta=lambda delta: None))
    assert caught.value.status == status
    assert caught.value.retryable is (status != 401)
    assert caught.value.retry_after == 2.0
    assert str(caught.value).startswith(f"Azure OpenAI {ENDPOINT} returned HTTP {status}")
    assert AZURE_KEY not in str(caught.value)


def test_azure_needs_a_key_or_a_token() -> None:
    with pytest.raises(ConfigError, match="AZURE_OPENAI_API_KEY .* or AZURE_OPENAI_AD_TOKEN"):
        provider_for("azure/prod-4o", {"AZURE_OPENAI_ENDPOINT": ENDPOINT})
    model = provider_for(
        "azure/prod-4o", {"AZURE_OPENAI_ENDPOINT": ENDPOINT, "AZURE_OPENAI_AD_TOKEN": "tok-123"}
    )
    assert isinstance(model, AzureOpenAIModel) and "tok-123" not in repr(model)


@pytest.mark.skipif(
    not os.environ.get("AZURE_OPENAI_ENDPOINT")
    or not os.environ.get("TOREN_LIVE_AZURE_DEPLOYMENT"),
    reason="AZURE_OPENAI_ENDPOINT and TOREN_LIVE_AZURE_DEPLOYMENT (and a key or token) are not set",
)
async def test_live_azure() -> None:
    model = provider_for(f"azure/{os.environ['TOREN_LIVE_AZURE_DEPLOYMENT']}", dict(os.environ))
    request = ModelRequest(
        model=os.environ["TOREN_LIVE_AZURE_DEPLOYMENT"],
        system="Answer with one word.",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=32,
    )
    reply = await model.complete(request)
    assert reply.content and reply.usage["input_tokens"] > 0
