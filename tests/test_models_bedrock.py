"""`bedrock/<modelId>`: Converse and ConverseStream through real aioboto3 against a local server.

The server (`tests._fake_bedrock`) answers as Bedrock does: JSON for Converse, AWS event-stream
frames for ConverseStream, REST-JSON errors (`x-amzn-ErrorType`). botocore signs every request
with fake keys (SigV4) and must never retry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._fake_bedrock import (
    FAKE_KEYS,
    FakeBedrock,
    converse_json,
    error,
    event,
    exception_event,
    message_stop,
    metadata,
    start,
    stop,
    stream_body,
    text_delta,
    tool_delta,
    tool_start,
)
from toren.agent._config import read_config
from toren.errors import ConfigError, PromptTooLongError
from toren.worker._prices import prices_for
from toren.worker.models import ModelHTTPError, ModelRequest, provider_for
from toren.worker.models._bedrock import BedrockModel
from toren.worker.models._output import ask_for_output
from toren.worker.models._window import window_of

MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"
TOOL = {
    "name": "lookup",
    "description": "Look an order up.",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
}


@pytest.fixture
def fake() -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


def provider(fake: FakeBedrock) -> BedrockModel:
    return BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS, timeout=10)


def request(**more: Any) -> ModelRequest:
    fields: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], **more}
    return ModelRequest(model=MODEL, system="Be brief.", **fields)


async def test_a_text_reply_maps_the_transcript_and_settings_and_is_signed(
    fake: FakeBedrock,
) -> None:
    fake.replies.append(converse_json({"text": "Hello."}, inputTokens=12, outputTokens=3))
    transcript = [
        {"role": "user", "content": "find order 7"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "name": "lookup", "arguments": '{"id": "7"}'}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": "no such order",
         "is_error": True},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    reply = await provider(fake).complete(
        ModelRequest(
            model=MODEL,
            system="Be brief.",
            messages=transcript,
            tools=[TOOL],
            max_tokens=300,
            settings={"temperature": 0.2, "top_p": 0.9, "stop": ["END"]},
        )  # fmt: skip
    )
    assert (reply.content, reply.finish_reason, reply.tool_calls) == ("Hello.", "stop", [])
    assert reply.usage == {"input_tokens": 12, "output_tokens": 3}
    assert reply.model == MODEL and reply.provider_content is None
    [sent] = fake.requests
    assert sent["path"] == "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse"
    auth = sent["headers"]["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIAFAKEBEDROCKTEST1/")
    assert "/us-east-1/bedrock/aws4_request" in auth
    body = sent["body"]
    assert body["system"] == [{"text": "Be brief."}]
    assert body["inferenceConfig"] == {
        "maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]
    }  # fmt: skip
    assert body["toolConfig"] == {"tools": [{"toolSpec": {
        "name": "lookup", "description": "Look an order up.",
        "inputSchema": {"json": TOOL["parameters"]}}}]}  # fmt: skip
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "find order 7"}]},
        {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "call_1", "name": "lookup", "input": {"id": "7"}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "call_1", "content": [{"text": "no such order"}],
                            "status": "error"}},
            {"text": "thanks"}]},
    ]  # fmt: skip


async def test_a_tool_call_and_cache_tokens(fake: FakeBedrock) -> None:
    use = {"toolUseId": "tooluse_abc", "name": "lookup", "input": {"id": "7"}}
    fake.replies.append(
        converse_json(
            {"text": "Looking."},
            {"toolUse": use},
            stop="tool_use",
            inputTokens=5,
            outputTokens=9,
            cacheReadInputTokens=100,
            cacheWriteInputTokens=20,
        )  # fmt: skip
    )
    reply = await provider(fake).complete(request(tools=[TOOL]))
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [{"id": "tooluse_abc", "name": "lookup", "arguments": '{"id": "7"}'}]
    assert reply.usage == {"input_tokens": 125, "output_tokens": 9, "cache_read_tokens": 100,
                           "cache_write_tokens": 20}  # fmt: skip


async def test_a_reply_cut_at_max_tokens_is_length(fake: FakeBedrock) -> None:
    fake.replies.append(converse_json({"text": "It was the best of"}, stop="max_tokens"))
    reply = await provider(fake).complete(request())
    assert (reply.content, reply.finish_reason) == ("It was the best of", "length")
    fake.replies.append(converse_json({"text": "no"}, stop="guardrail_intervened"))
    assert (await provider(fake).complete(request())).finish_reason == "guardrail_intervened"


async def test_streaming_passes_text_and_tool_call_deltas_on(fake: FakeBedrock) -> None:
    fake.replies.append(
        stream_body(
            start(),
            text_delta(0, "Let me "),
            text_delta(0, "look."),
            stop(0),
            tool_start(1, "tooluse_1", "lookup"),
            tool_delta(1, '{"id": '),
            tool_delta(1, '"7"}'),
            stop(1),
            message_stop("tool_use"),
            metadata(inputTokens=30, outputTokens=8),
        )  # fmt: skip
    )
    deltas: list[dict[str, Any]] = []
    reply = await provider(fake).complete(request(tools=[TOOL], on_delta=deltas.append))
    assert fake.requests[0]["path"].endswith("/converse-stream")
    assert deltas == [
        {"type": "text_delta", "text": "Let me "},
        {"type": "text_delta", "text": "look."},
        {"type": "tool_call_delta", "index": 0, "id": "tooluse_1", "name": "lookup",
         "arguments": ""},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '{"id": '},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '"7"}'},
    ]  # fmt: skip
    assert reply.content == "".join(d["text"] for d in deltas if d["type"] == "text_delta")
    assert reply.tool_calls == [{"id": "tooluse_1", "name": "lookup", "arguments": '{"id": "7"}'}]
    assert (reply.finish_reason, reply.usage) == (
        "tool_calls",
        {"input_tokens": 30, "output_tokens": 8},
    )


async def test_a_stream_cut_mid_arguments_keeps_the_raw_text_and_sends_back_an_object(
    fake: FakeBedrock,
) -> None:
    fake.replies.append(
        stream_body(start(), tool_start(0, "tooluse_2", "lookup"), tool_delta(0, '{"id": "7'),
                    message_stop("max_tokens"), metadata(inputTokens=3, outputTokens=4))
    )  # fmt: skip
    reply = await provider(fake).complete(request(tools=[TOOL], on_delta=lambda d: None))
    assert reply.finish_reason == "length"
    assert reply.tool_calls[0]["arguments"] == '{"id": "7'
    # The call goes back in the next request with `{}` in place of its broken input.
    fake.replies.append(converse_json({"text": "ok"}))
    then = [
        *request().messages,
        reply.message(),
        {"role": "tool", "tool_call_id": "tooluse_2", "name": "lookup", "content": ""},
    ]
    await provider(fake).complete(request(messages=then, tools=[TOOL]))  # fmt: skip
    sent = fake.requests[1]["body"]["messages"]
    assert sent[1]["content"] == [
        {"toolUse": {"toolUseId": "tooluse_2", "name": "lookup", "input": {}}}
    ]
    assert sent[2]["content"][0]["toolResult"]["content"] == [{"text": "(no output)"}]


async def test_a_stream_ending_before_message_stop_is_retryable(fake: FakeBedrock) -> None:
    fake.replies.append(stream_body(start(), text_delta(0, "half")))
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request(on_delta=lambda d: None))
    assert err.value.retryable and "no messageStop" in str(err.value)


async def test_a_stream_that_stalls_times_out_retryably(fake: FakeBedrock) -> None:
    stalled = stream_body(start(), text_delta(0, "so far"))
    stalled.stall = True
    fake.replies.append(stalled)
    model = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=FAKE_KEYS, timeout=1)
    seen: list[dict[str, Any]] = []
    with pytest.raises(ModelHTTPError) as err:
        await model.complete(request(on_delta=seen.append))
    assert err.value.retryable and "timed out" in str(err.value)
    assert seen == [{"type": "text_delta", "text": "so far"}]


async def test_an_exception_mid_stream_is_classified_by_its_type(fake: FakeBedrock) -> None:
    fake.replies.append(
        stream_body(start(), text_delta(0, "x"), exception_event("throttlingException", "slow"))
    )
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request(on_delta=lambda d: None))
    assert err.value.retryable and "throttlingException" in str(err.value)
    fake.replies.append(
        stream_body(start(), exception_event("validationException", "bad stop sequence"))
    )
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request(on_delta=lambda d: None))
    assert not err.value.retryable


async def test_throttling_is_retryable_with_its_retry_after_and_never_retried_by_botocore(
    fake: FakeBedrock,
) -> None:
    fake.replies.append(
        error(429, "ThrottlingException", "Too many requests", **{"Retry-After": "7"})
    )
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request())
    assert (err.value.status, err.value.retryable, err.value.retry_after) == (429, True, 7.0)
    assert "ThrottlingException: Too many requests" in str(err.value)
    assert len(fake.requests) == 1


async def test_a_500_is_retryable_and_sent_once(fake: FakeBedrock) -> None:
    fake.replies.append(error(500, "InternalServerException", "boom"))
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request(on_delta=lambda d: None))
    assert (err.value.status, err.value.retryable) == (500, True)
    assert len(fake.requests) == 1


async def test_access_denied_fails_at_once_says_what_to_grant_and_hides_the_secret(
    fake: FakeBedrock,
) -> None:
    secret = FAKE_KEYS["aws_secret_access_key"]
    fake.replies.append(error(403, "AccessDeniedException", f"denied for {secret}"))
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request())
    assert (err.value.status, err.value.retryable) == (403, False)
    assert "bedrock:InvokeModel" in str(err.value) and secret not in str(err.value)
    fake.replies.append(error(403, "UnrecognizedClientException", "The security token is invalid"))
    with pytest.raises(ModelHTTPError) as err:
        await provider(fake).complete(request())
    assert not err.value.retryable and "credentials are not valid" in str(err.value)


@pytest.mark.parametrize(
    ("message", "window"),
    [
        ("Input is too long for requested model.", None),
        ("The model returned the following errors: prompt is too long: 208410 tokens > 200000 "
         "maximum", 200_000),
    ],
)  # fmt: skip
async def test_a_prompt_too_long_is_a_prompt_too_long_error(
    fake: FakeBedrock, message: str, window: int | None
) -> None:
    fake.replies.append(error(400, "ValidationException", message))
    with pytest.raises(PromptTooLongError) as err:
        await provider(fake).complete(request())
    assert (err.value.window, err.value.retryable) == (window, False)
    fake.replies.append(stream_body(start(), exception_event("validationException", message)))
    with pytest.raises(PromptTooLongError) as err:
        await provider(fake).complete(request(on_delta=lambda d: None))
    assert (err.value.window, err.value.retryable) == (window, False)


async def test_an_unreachable_endpoint_is_retryable() -> None:
    with FakeBedrock() as gone:
        url = gone.url
    model = BedrockModel("us-east-1", endpoint_url=url, credentials=FAKE_KEYS, timeout=5)
    with pytest.raises(ModelHTTPError) as err:
        await model.complete(request())
    assert err.value.retryable and err.value.status is None


async def test_a_typed_output_forces_its_tool(fake: FakeBedrock) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    asked, answer = ask_for_output(request(), schema, "Verdict", "auto", "bedrock")
    use = {"toolUseId": "t1", "name": "final_output", "input": {"ok": True}}
    fake.replies.append(converse_json({"toolUse": use}, stop="tool_use"))
    reply = answer(await provider(fake).complete(asked))
    assert (json.loads(reply.content), reply.finish_reason) == ({"ok": True}, "stop")
    choice = fake.requests[0]["body"]["toolConfig"]["toolChoice"]
    assert choice == {"tool": {"name": "final_output"}}
    asked, _ = ask_for_output(request(tools=[TOOL]), schema, "Verdict", "auto", "bedrock")
    fake.replies.append(converse_json({"text": "x"}))
    await provider(fake).complete(asked)
    assert fake.requests[1]["body"]["toolConfig"]["toolChoice"] == {"any": {}}


def test_the_region_is_required_at_worker_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="need an AWS region: set AWS_REGION"):
        provider_for(f"bedrock/{MODEL}", {})
    with pytest.raises(ConfigError, match="BEDROCK_ENDPOINT_URL='localhost:9'"):
        provider_for(f"bedrock/{MODEL}", {"AWS_REGION": "eu-west-1",
                                          "BEDROCK_ENDPOINT_URL": "localhost:9"})  # fmt: skip
    built = provider_for(f"bedrock/{MODEL}", {"AWS_DEFAULT_REGION": "eu-west-1", **{
        "AWS_ACCESS_KEY_ID": "AKIAX", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value-123456"}})  # fmt: skip
    assert repr(built) == "BedrockModel(region='eu-west-1', endpoint_url=None)"


def test_a_bedrock_claude_id_has_its_models_window() -> None:
    assert window_of(f"bedrock/{MODEL}") == 200_000
    assert window_of("bedrock/anthropic.claude-3-5-haiku-20241022-v1:0") == 200_000
    assert window_of("bedrock/amazon.nova-pro-v1:0") is None


def test_genai_prices_knows_bedrock_model_ids() -> None:
    prices = prices_for(f"bedrock/{MODEL}", None)
    assert prices is not None and prices[:2] == (3.0, 15.0)
    assert (
        prices_for("bedrock/arn:aws:bedrock:us-east-1:1:application-inference-profile/x", None)
        is None
    )


async def test_reasoning_goes_back_verbatim_and_caching_and_a_toolless_call_are_well_formed(
    fake: FakeBedrock,
) -> None:
    reasoning = {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}}
    use = {"toolUseId": "t1", "name": "lookup", "input": {}}
    fake.replies.append(
        stream_body(
            start(),
            event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"reasoningContent": {"text": "think"}}}),
            event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"reasoningContent": {"signature": "sig"}}}),
            tool_start(1, "t1", "lookup"), message_stop("tool_use"),
        )
    )  # fmt: skip
    reply = await provider(fake).complete(request(tools=[TOOL], on_delta=lambda d: None))
    assert reply.provider_content == {"bedrock": [reasoning, {"toolUse": use}]}
    # A summary call without tools: the transcript's tool blocks still need a toolConfig.
    fake.replies.append(converse_json({"text": "summary"}))
    then = [
        *request().messages,
        reply.message(),
        {"role": "tool", "tool_call_id": "t1", "name": "lookup", "content": "none"},
    ]
    await provider(fake).complete(request(messages=then, settings={"prompt_caching": True}))  # fmt: skip
    body = fake.requests[1]["body"]
    assert body["messages"][1] == {"role": "assistant", "content": [reasoning, {"toolUse": use}]}
    assert [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]] == ["lookup"]
    assert body["system"] == [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}]


def test_agent_yaml_takes_bedrock_models_and_refuses_what_converse_cannot_do(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(f"name: a\nmodel: bedrock/{MODEL}\nmodelSettings: {{temperature: 0.5}}\n")
    assert read_config(path).problems == []
    path.write_text(
        f"name: a\nmodel: bedrock/{MODEL}\nmodelSettings: {{seed: 1}}\n"
        "output: {type: object}\noutput_mode: native\n"
    )
    problems = "\n".join(read_config(path).problems)
    assert "seed: Bedrock's Converse API takes no seed" in problems
    assert "which Bedrock's Converse API does not take" in problems


async def test_the_session_token_stays_out_of_botocores_debug_logs(
    fake: FakeBedrock, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review: with logging at DEBUG, botocore logged `x-amz-security-token:<token>`
    (the request it sends, the canonical request it signs)."""
    token = "IQoJb3JpZ2luX2VjEFAKESESSIONTOKEN0123456789"
    keys = {**FAKE_KEYS, "aws_session_token": token}
    fake.replies.append(converse_json({"text": "Hello."}))
    with caplog.at_level("DEBUG"):
        model = BedrockModel("us-east-1", endpoint_url=fake.url, credentials=keys, timeout=10)
        await model.complete(request())
    assert fake.requests[0]["headers"]["X-Amz-Security-Token"] == token  # it was sent
    logged = caplog.text
    assert "x-amz-security-token:[redacted]" in logged.lower()  # the canonical request
    assert token not in logged
