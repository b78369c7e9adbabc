"""Prompt caching and reasoning at the HTTP boundary (issue 39): cache tokens in the usage, the
Anthropic breakpoints, OpenAI's `prompt_cache_key`, thinking blocks sent back unchanged."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests._sdk_http import sdk_client
from tests.test_models_http import KEY, WEATHER_TOOL, answering, anthropic, openai
from tests.test_models_streaming import (
    OA_DONE,
    an_block,
    an_delta,
    an_end,
    an_stop,
    an_text,
    oa_chunk,
    replaying,
    sse,
)
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._anthropic_cache import MAX_BREAKPOINTS
from toren.worker.models._base import ModelRequest
from toren.worker.models._openai import OpenAIModel


def an_message(content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x",
            "content": content, "stop_reason": "end_turn", "usage": usage}  # fmt: skip


def oa_completion(usage: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "usage": usage, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ]}  # fmt: skip


def ask(messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> ModelRequest:
    fields: dict[str, Any] = {"model": "claude-x", "system": "Be brief.", "tools": [WEATHER_TOOL]}
    fields["messages"] = messages or [{"role": "user", "content": "hi"}]
    return ModelRequest(**{**fields, **kwargs})


def long_transcript(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather everywhere?"}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": f"Checking {i}.",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "name": "get_weather",
                        "arguments": json.dumps({"city": f"c{i}"}),
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "name": "get_weather",
                         "content": f"{i}C"})  # fmt: skip
    return messages


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where `body` carries `cache_control`, as `system`, `tools[i]`, `messages[i][j]`."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    if isinstance(body.get("system"), list):
        found += ["system" for block in body["system"] if "cache_control" in block]
    for i, turn in enumerate(body["messages"]):
        if isinstance(turn["content"], list):
            found += [f"messages[{i}][{j}]" for j, b in enumerate(turn["content"])
                      if "cache_control" in b]  # fmt: skip
    return found


# -- usage ------------------------------------------------------------------------------------


async def test_anthropic_usage_counts_cache_reads_and_writes_in_the_whole_prompt() -> None:
    usage = {"input_tokens": 40, "output_tokens": 10, "cache_read_input_tokens": 1000,
             "cache_creation_input_tokens": 200}  # fmt: skip
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], usage))
    reply = await anthropic(recorder).complete(ask())
    assert reply.usage == {"input_tokens": 1240, "output_tokens": 10,
                           "cache_read_tokens": 1000, "cache_write_tokens": 200}  # fmt: skip


async def test_a_reply_without_caching_has_the_two_keys_it_always_had() -> None:
    usage = {"input_tokens": 40, "output_tokens": 10, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0}  # fmt: skip
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], usage))
    assert (await anthropic(recorder).complete(ask())).usage == {
        "input_tokens": 40, "output_tokens": 10,
    }  # fmt: skip
    recorder = answering(200, oa_completion({"prompt_tokens": 19, "completion_tokens": 2,
                                             "prompt_tokens_details": {"cached_tokens": 0}}))  # fmt: skip
    assert (await openai(recorder).complete(ask())).usage == {
        "input_tokens": 19, "output_tokens": 2,
    }  # fmt: skip


async def test_anthropic_streamed_usage_counts_the_cache_tokens_of_message_start() -> None:
    start = sse("message_start", {"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "content": [], "model": "claude-x",
        "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 3000,
                  "cache_creation_input_tokens": 50}}})  # fmt: skip
    body = b"".join([start, an_block(0, {"type": "text", "text": ""}), an_text(0, "ok"),
                     an_stop(0), *an_end("end_turn", 7)])  # fmt: skip
    model = AnthropicModel(KEY, http_client=sdk_client(replaying(body)))
    reply = await model.complete(ask(on_delta=lambda delta: None))
    assert reply.usage == {"input_tokens": 3075, "output_tokens": 7,
                           "cache_read_tokens": 3000, "cache_write_tokens": 50}  # fmt: skip


async def test_openai_usage_counts_cached_prompt_tokens_streamed_and_not() -> None:
    usage = {"prompt_tokens": 2006, "completion_tokens": 300,
             "prompt_tokens_details": {"cached_tokens": 1920}}  # fmt: skip
    expected = {"input_tokens": 2006, "output_tokens": 300, "cache_read_tokens": 1920}
    reply = await openai(answering(200, oa_completion(usage))).complete(ask())
    assert reply.usage == expected
    last = "data: " + json.dumps({"model": "gpt-4o", "choices": [], "usage": usage}) + "\n\n"
    body = oa_chunk({"content": "ok"}, "stop") + last.encode() + OA_DONE
    streamed = await OpenAIModel(KEY, transport=replaying(body)).complete(
        ask(on_delta=lambda delta: None)
    )
    assert streamed.usage == expected


# -- Anthropic's breakpoints -------------------------------------------------------------------


async def test_a_long_transcript_carries_at_most_four_breakpoints_in_their_places() -> None:
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    transcript = long_transcript(40)
    before = copy.deepcopy(transcript)
    await anthropic(recorder).complete(ask(transcript))
    body = recorder.body
    assert breakpoints(body) == ["system", "messages[78][0]", "messages[80][0]"]
    assert body["system"] == [{"type": "text", "text": "Be brief.",
                               "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    assert body["messages"][-1]["content"][-1]["type"] == "tool_result"
    assert transcript == before  # marked copies: the transcript itself holds no breakpoint


async def test_a_users_own_breakpoints_count_toward_the_four() -> None:
    mine = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
            for i in range(3)]  # fmt: skip
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    await anthropic(recorder).complete(
        ask([*long_transcript(5), {"role": "user", "content": mine}])
    )
    assert len(breakpoints(recorder.body)) == MAX_BREAKPOINTS
    mine.append({"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}})
    await anthropic(recorder).complete(ask([{"role": "user", "content": mine}]))
    assert len(breakpoints(recorder.body)) == MAX_BREAKPOINTS  # none of toren's fit


async def test_without_instructions_the_last_tool_holds_the_prefix_breakpoint() -> None:
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    await anthropic(recorder).complete(
        ModelRequest(
            model="claude-x",
            system="",
            tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "hi"}],
        )  # fmt: skip
    )
    assert breakpoints(recorder.body) == ["tools[0]", "messages[0][0]"]


async def test_the_same_transcript_gives_the_same_bytes() -> None:
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    transcript = long_transcript(10)
    await anthropic(recorder).complete(ask(transcript))
    await anthropic(recorder).complete(ask(json.loads(json.dumps(transcript))))
    first, second = recorder.requests
    assert first.content == second.content


async def test_caching_off_sends_no_breakpoint_and_no_cache_key() -> None:
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    await anthropic(recorder).complete(ask(long_transcript(3), settings={"prompt_caching": False}))
    assert breakpoints(recorder.body) == [] and recorder.body["system"] == "Be brief."
    assert "prompt_caching" not in recorder.body
    recorder = answering(200, oa_completion({}))
    await openai(recorder).complete(ask(settings={"prompt_caching": False}))
    assert "prompt_cache_key" not in recorder.body and "prompt_caching" not in recorder.body


async def test_thinking_budget_turns_on_anthropic_extended_thinking() -> None:
    recorder = answering(200, an_message([{"type": "text", "text": "ok"}], {}))
    await anthropic(recorder).complete(ask(settings={"thinking_budget_tokens": 2048}))
    assert recorder.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "thinking_budget_tokens" not in recorder.body


# -- OpenAI's prompt_cache_key -----------------------------------------------------------------


async def test_openai_requests_carry_the_runs_cache_key_or_one_of_the_agent() -> None:
    recorder = answering(200, oa_completion({}))
    await openai(recorder).complete(ask(cache_key="support/run-1"))
    assert recorder.body["prompt_cache_key"] == "support/run-1"
    await openai(recorder).complete(ask(long_transcript(2)))
    derived = recorder.body["prompt_cache_key"]
    await openai(recorder).complete(ask(long_transcript(7)))  # the same agent, a longer talk
    assert recorder.body["prompt_cache_key"] == derived and derived.startswith("toren-")


async def test_a_compatible_server_gets_the_key_only_when_caching_is_asked_for() -> None:
    recorder = answering(200, oa_completion({}))
    await openai(recorder, base_url="http://localhost:8000/v1").complete(ask())
    assert "prompt_cache_key" not in recorder.body  # a strict server refuses unknown fields
    await openai(recorder, base_url="http://localhost:8000/v1").complete(
        ask(settings={"prompt_caching": True})
    )
    assert "prompt_cache_key" in recorder.body and "prompt_caching" not in recorder.body


# -- thinking ----------------------------------------------------------------------------------

THINKING = [
    {"type": "thinking", "thinking": "The user wants Paris.", "signature": "EqQBCkYIARgCIkB"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
    {"type": "text", "text": "Checking."},
    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
]


async def next_request_after(reply_of: Any) -> dict[str, Any]:
    """The body of the tool loop's next request, after a reply `reply_of` made."""
    reply = await reply_of()
    assert reply.tool_calls == [
        {"id": "toolu_01", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    result = {"role": "tool", "tool_call_id": "toolu_01", "name": "get_weather", "content": "18C"}
    recorder = answering(200, an_message([{"type": "text", "text": "18C."}], {}))
    messages = [{"role": "user", "content": "Paris?"}, reply.message(), result]
    await anthropic(recorder).complete(ask(messages, settings={"prompt_caching": False}))
    return dict(recorder.body)


async def test_thinking_blocks_go_back_unchanged_within_the_tool_loop() -> None:
    recorder = answering(200, an_message(copy.deepcopy(THINKING), {}))
    body = await next_request_after(lambda: anthropic(recorder).complete(ask()))
    assert body["messages"][1] == {"role": "assistant", "content": THINKING}


async def test_streamed_thinking_blocks_go_back_unchanged_too() -> None:
    think = {"type": "thinking", "thinking": "", "signature": ""}
    stream = b"".join([
        sse("message_start", {"type": "message_start", "message": an_message([], {"input_tokens": 9})}),
        an_block(0, think),
        an_delta(0, {"type": "thinking_delta", "thinking": "The user wants "}),
        an_delta(0, {"type": "thinking_delta", "thinking": "Paris."}),
        an_delta(0, {"type": "signature_delta", "signature": "EqQBCkYIARgCIkB"}),
        an_stop(0),
        an_block(1, THINKING[1]), an_stop(1),
        an_block(2, {"type": "text", "text": ""}), an_text(2, "Checking."), an_stop(2),
        an_block(3, {**THINKING[3], "input": {}}),
        an_delta(3, {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}),
        an_stop(3), *an_end("tool_use"),
    ])  # fmt: skip
    model = AnthropicModel(KEY, http_client=sdk_client(replaying(stream)))
    body = await next_request_after(lambda: model.complete(ask(on_delta=lambda delta: None)))
    assert body["messages"][1] == {"role": "assistant", "content": THINKING}
