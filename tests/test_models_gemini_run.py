"""The Gemini provider in a worker (env, a dev-server run, Vertex AI, live API), and its timeouts.

The HTTP is faked as in `tests/test_models_gemini.py` (through Google's SDK); the live test
calls the Gemini API when `GEMINI_API_KEY` is set and skips otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.conftest import result_of, secret
from tests.test_models_gemini import HI, KEY, MODEL, WEATHER, _ok, body, model, reply, sse
from toren import MissingEnvError, load_agent
from toren import client as toren_client
from toren.errors import ConfigError
from toren.worker import serve
from toren.worker.models import provider_for
from toren.worker.models._base import ModelHTTPError, ModelRequest
from toren.worker.models._gemini import GeminiModel


def test_the_key_may_be_google_api_key_and_is_required(
    make_agent: Callable[..., Path],
) -> None:
    agent = load_agent(make_agent(model="gemini/gemini-2.5-flash"))
    with pytest.raises(MissingEnvError) as err:
        agent.resolve_env({})
    assert "GEMINI_API_KEY" in str(err.value)
    assert agent.resolve_env({"GOOGLE_API_KEY": "g-key"})["GEMINI_API_KEY"] == "g-key"
    # Both set: the Gemini-specific name wins.
    assert (
        agent.resolve_env({"GOOGLE_API_KEY": "g", "GEMINI_API_KEY": "m"})["GEMINI_API_KEY"] == "m"
    )
    assert agent.missing_env({"GOOGLE_API_KEY": "g-key"}) == []


def test_vertex_needs_a_project_and_reads_its_location(make_agent: Callable[..., Path]) -> None:
    agent = load_agent(make_agent(model="vertex/gemini-2.5-pro"))
    assert agent.missing_env({}) == ["GOOGLE_CLOUD_PROJECT"]
    env = agent.resolve_env({"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "europe-west4"})
    built = provider_for("vertex/gemini-2.5-pro", env)
    assert isinstance(built, GeminiModel) and built.vertex is not None
    assert (built.vertex.project, built.vertex.location) == ("p", "europe-west4")


def test_an_unknown_provider_names_gemini() -> None:
    with pytest.raises(ConfigError, match="gemini"):
        provider_for("gemin/x", {})


async def test_a_run_on_the_dev_server_calls_a_tool(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    key = secret("AIzaSyDEVSERVER-gemini-abcdef0123456789")
    lookup = """
    from toren import define_tool

    tool = define_tool(
        description="Look an order up.",
        input={"type": "object", "properties": {"order_id": {"type": "string"}}},
        handler=lambda a, c: "order " + a["order_id"] + " shipped",
    )
    """
    seen: list[httpx.Request] = []
    call = {"functionCall": {"name": "lookup", "args": {"order_id": "A-1"}}}
    answers = [httpx.Response(200, json=reply([call])), _ok("Order A-1 has shipped.")]

    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        assert request.headers["x-goog-api-key"] == key
        seen.append(request)
        if request.url.params.get("alt") == "sse":  # the run streams its replies
            return sse(json.loads(answers[len(seen) - 1].content))
        return answers[len(seen) - 1]

    folder = make_agent(tools={"lookup": lookup}, model="gemini/gemini-2.5-flash")
    provider = GeminiModel(key, transport=httpx.MockTransport(handle))
    async with serve(
        client,
        [folder],
        environ={"GOOGLE_API_KEY": key},  # the key's other name
        models={"gemini/gemini-2.5-flash": provider},
    ):
        handle_ = await toren_client.start_run(client, folder.name, "where is order A-1?")
        result = await result_of(handle_)
    assert result.text == "Order A-1 has shipped." and result.tool_calls == 1
    contents = body(seen[1])["contents"]
    assert contents[-1]["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"output": "order A-1 shipped"}}}
    ]


@pytest.mark.skipif(not os.environ.get("GEMINI_API_KEY"), reason="GEMINI_API_KEY is not set")
async def test_live_gemini_api_answers_and_calls_a_tool() -> None:
    provider = GeminiModel(os.environ["GEMINI_API_KEY"], timeout=60)
    model_name = os.environ.get("TOREN_GEMINI_LIVE_MODEL", "gemini-2.5-flash")
    deltas: list[dict[str, Any]] = []
    got = await provider.complete(
        ModelRequest(
            model=model_name,
            system="Use the tool to answer.",
            tools=[WEATHER],
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            on_delta=deltas.append,
        )  # fmt: skip
    )
    assert got.finish_reason == "tool_calls" and got.tool_calls[0]["name"] == "get_weather"
    assert got.usage["input_tokens"] > 0 and deltas


async def test_vertex_calls_its_project_with_a_bearer_token() -> None:
    from google.oauth2.credentials import Credentials

    from toren.worker.models._gemini import Vertex

    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _ok("Hi from Vertex.")

    provider = GeminiModel(
        vertex=Vertex("my-project", "europe-west4", credentials=Credentials(token="ya29.test")),
        transport=httpx.MockTransport(handle),
    )
    got = await provider.complete(ModelRequest(model=MODEL, system="", messages=HI))
    assert got.content == "Hi from Vertex."
    assert seen[0].headers["authorization"] == "Bearer ya29.test"
    assert "x-goog-api-key" not in seen[0].headers
    path = seen[0].url.path
    assert f"/projects/my-project/locations/europe-west4/publishers/google/models/{MODEL}" in path


async def test_a_timeout_is_retryable() -> None:
    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    provider = GeminiModel(KEY, transport=httpx.MockTransport(stall), timeout=5)
    with pytest.raises(ModelHTTPError) as err:
        await provider.complete(ModelRequest(model=MODEL, system="", messages=HI))
    assert err.value.retryable and "timed out" in str(err.value)


class _BrokenAfterACheckpoint(httpx.AsyncByteStream):
    async def __aiter__(self) -> Any:
        chunk = reply([{"text": "Hel"}], finish=None)
        chunk["candidates"][0]["continuationToken"] = "Y2hlY2twb2ludC0x"
        yield f"data: {json.dumps(chunk)}\r\n\r\n".encode()
        raise httpx.ReadError("peer closed the connection")


async def test_the_sdk_never_resumes_a_stream_itself() -> None:
    # The SDK would resend the request from the stream's checkpoint: Temporal retries instead.
    seen: list[httpx.Request] = []
    answer = httpx.Response(
        200, stream=_BrokenAfterACheckpoint(), headers={"content-type": "text/event-stream"}
    )
    provider = model([answer, _ok("resumed")], seen)
    with pytest.raises(ModelHTTPError) as err:
        await provider.complete(
            ModelRequest(model=MODEL, system="", messages=HI, on_delta=lambda delta: None)
        )
    assert err.value.retryable and len(seen) == 1


async def test_a_typed_output_comes_through_a_tool_unless_native_is_asked() -> None:
    from toren.worker.models._output import ask_for_output, mode_for

    assert mode_for("auto", "gemini") == mode_for("auto", "vertex") == "tool"
    assert mode_for("native", "gemini") == "native" and mode_for("native", "anthropic") == "tool"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    seen: list[httpx.Request] = []
    answer = {"functionCall": {"name": "final_output", "args": {"ok": True}}}
    provider = model([httpx.Response(200, json=reply([answer]))], seen)
    asked, read = ask_for_output(
        ModelRequest(model=MODEL, system="Judge.", messages=HI, tools=[WEATHER]),
        schema, "Verdict", "auto", "gemini",
    )  # fmt: skip
    got = read(await provider.complete(asked))
    assert json.loads(got.content) == {"ok": True} and not got.tool_calls
    assert got.finish_reason == "stop"
    sent = body(seen[0])
    names = [d["name"] for d in sent["tools"][0]["functionDeclarations"]]
    assert names == ["get_weather", "final_output"]
    assert "responseMimeType" not in sent.get("generationConfig", {})


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import toren.worker.models._gemini as gemini

    monkeypatch.setattr(gemini, "genai", None)
    with pytest.raises(ConfigError, match=r"pip install 'toren\[gemini\]'"):
        provider_for("gemini/gemini-2.5-flash", {"GEMINI_API_KEY": KEY})
