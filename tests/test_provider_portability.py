"""What an agent written for one provider brings to another (`--model`, or a thread moved).

Each provider sends only the settings it takes, whatever the agent's `modelSettings` hold:
`--model anthropic/...` on an agent written for OpenAI brought `api` and `reasoningEffort` into
Anthropic's body, and every run failed with a 400. Every toren setting at once goes to each
provider, through its SDK (httpx `MockTransport`, or the local Bedrock server), and the request
must carry only that provider's own fields. `output_mode: native` on a provider without an
output schema asks through the `final_output` tool instead of dropping the schema. A `system`
message in the transcript (run input `messages` may hold one) joins the system prompt where the
API has no such role, instead of failing the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tests._fake_bedrock import FAKE_KEYS, FakeBedrock, converse_json
from tests._sdk_http import sdk_client
from toren.agent._config_blocks import ModelSettings
from toren.worker.models import ModelRequest
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._bedrock import BedrockModel
from toren.worker.models._gemini import GeminiModel
from toren.worker.models._openai import OpenAIModel
from toren.worker.models._output import ask_for_output

EVERY = {
    "temperature": 0.5,
    "top_p": 0.9,
    "seed": 7,
    "stop": ["END"],
    "thinking_budget_tokens": 2048,
    "api": "chat",
    "reasoning_effort": "low",
    "prompt_caching": True,
}
"""A value for every field of `ModelSettings` (checked below, so a new setting is tested)."""


def ask(**settings: Any) -> ModelRequest:
    return ModelRequest(
        model="m", system="", messages=[{"role": "user", "content": "hi"}], settings=settings
    )


def recording(answer: dict[str, Any], seen: list[dict[str, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=answer)

    return httpx.MockTransport(handle)


def test_every_setting_is_covered() -> None:
    assert set(EVERY) == set(ModelSettings.model_fields)
    ModelSettings.model_validate(EVERY)


async def test_anthropic_sends_only_its_settings() -> None:
    seen: list[dict[str, Any]] = []
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }  # fmt: skip
    provider = AnthropicModel("sk-ant-x", http_client=sdk_client(recording(message, seen)))
    await provider.complete(ask(**EVERY))
    assert sorted(seen[0]) == [
        "max_tokens", "messages", "model", "stop_sequences", "temperature", "thinking", "top_p"
    ]  # fmt: skip
    assert seen[0]["stop_sequences"] == ["END"]
    assert seen[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def _openai_sent(api: str, answer: dict[str, Any]) -> Callable[[], Any]:
    async def sent() -> dict[str, Any]:
        seen: list[dict[str, Any]] = []
        provider = OpenAIModel("sk-x", transport=recording(answer, seen))
        await provider.complete(ask(**{**EVERY, "api": api}))
        return seen[0]

    return sent


async def test_openai_chat_sends_only_its_settings() -> None:
    completion = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok"}}],
    }  # fmt: skip
    body = await _openai_sent("chat", completion)()
    assert sorted(body) == [
        "max_completion_tokens", "messages", "model", "prompt_cache_key", "reasoning_effort",
        "seed", "stop", "temperature", "top_p",
    ]  # fmt: skip


async def test_openai_responses_sends_only_its_settings() -> None:
    response = {
        "id": "r", "object": "response", "status": "completed", "model": "m",
        "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
    }  # fmt: skip
    body = await _openai_sent("responses", response)()
    assert sorted(body) == [
        "include", "input", "max_output_tokens", "model", "prompt_cache_key", "reasoning",
        "store", "temperature", "top_p",
    ]  # fmt: skip
    assert body["reasoning"] == {"effort": "low"}


async def test_gemini_sends_only_its_settings() -> None:
    seen: list[dict[str, Any]] = []
    reply = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                             "finishReason": "STOP"}]}  # fmt: skip
    await GeminiModel("AIza-x", transport=recording(reply, seen)).complete(ask(**EVERY))
    assert sorted(seen[0]) == ["contents", "generationConfig"]
    config = seen[0]["generationConfig"]
    assert sorted(config) == [
        "maxOutputTokens", "seed", "stopSequences", "temperature", "thinkingConfig", "topP"
    ]  # fmt: skip
    assert list(config["thinkingConfig"].values()) == [2048]  # the SDK writes it snake_case


async def test_bedrock_sends_only_its_settings() -> None:
    with FakeBedrock() as fake:
        fake.replies.append(converse_json({"text": "ok"}))
        provider = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS)
        await provider.complete(ask(**EVERY))
    body = fake.requests[0]["body"]
    assert sorted(body) == ["inferenceConfig", "messages"]
    assert body["inferenceConfig"] == {
        "maxTokens": 4096, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]
    }  # fmt: skip


async def test_native_output_on_bedrock_asks_through_the_final_output_tool() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    asked, answer = ask_for_output(ask(), schema, "Answer", "native", "bedrock")
    with FakeBedrock() as fake:
        fake.replies.append(
            converse_json(
                {"toolUse": {"toolUseId": "t1", "name": "final_output",
                             "input": {"answer": "42"}}},
                stop="tool_use",
            )
        )  # fmt: skip
        provider = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS)
        reply = answer(await provider.complete(asked))
    tools = fake.requests[0]["body"]["toolConfig"]["tools"]
    assert [t["toolSpec"]["name"] for t in tools] == ["final_output"]
    assert tools[0]["toolSpec"]["inputSchema"] == {"json": schema}
    assert json.loads(reply.content) == {"answer": "42"} and reply.tool_calls == []


SYSTEM_IN_TRANSCRIPT = [
    {"role": "system", "content": "Answer in French."},
    {"role": "user", "content": "hi"},
    {"role": "system", "content": "Be terse."},
]


def with_system_messages() -> ModelRequest:
    return ModelRequest(model="m", system="Be kind.", messages=list(SYSTEM_IN_TRANSCRIPT))


async def test_system_messages_join_anthropics_system_prompt() -> None:
    seen: list[dict[str, Any]] = []
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }  # fmt: skip
    provider = AnthropicModel("sk-ant-x", http_client=sdk_client(recording(message, seen)))
    request = with_system_messages()
    request.settings = {"prompt_caching": False}  # no cache breakpoints in the blocks
    await provider.complete(request)
    assert seen[0]["system"] == "Be kind.\n\nAnswer in French.\n\nBe terse."
    assert seen[0]["messages"] == [{"role": "user", "content": "hi"}]


async def test_system_messages_join_geminis_system_instruction() -> None:
    seen: list[dict[str, Any]] = []
    reply = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                             "finishReason": "STOP"}]}  # fmt: skip
    await GeminiModel("AIza-x", transport=recording(reply, seen)).complete(with_system_messages())
    instruction = seen[0]["systemInstruction"]
    assert [p["text"] for p in instruction["parts"]] == [
        "Be kind.\n\nAnswer in French.\n\nBe terse."
    ]
    assert seen[0]["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_system_messages_join_bedrocks_system_blocks() -> None:
    with FakeBedrock() as fake:
        fake.replies.append(converse_json({"text": "ok"}))
        provider = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS)
        reply = await provider.complete(with_system_messages())
    assert reply.content == "ok"
    body = fake.requests[0]["body"]
    assert body["system"] == [{"text": "Be kind.\n\nAnswer in French.\n\nBe terse."}]
    assert body["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]
