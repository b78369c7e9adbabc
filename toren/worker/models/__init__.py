"""Model providers: `openai/`, `azure/`, `anthropic/`, `gemini/`, `vertex/`, `bedrock/`, `mock/`.

```python
provider = provider_for("openai/gpt-4o-mini", env, folder)   # OPENAI_BASE_URL is honoured
reply = await provider.complete(ModelRequest(model="gpt-4o-mini", system="...", messages=[...]))
# on_delta: the reply streams (OpenAI, Anthropic), each piece passed on as it arrives
reply = await provider.complete(ModelRequest(..., on_delta=lambda delta: print(delta)))
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from toren.errors import ConfigError
from toren.worker.models._base import ModelHTTPError, ModelProvider, ModelReply, ModelRequest
from toren.worker.models._mock import EchoModel, ScriptedModel

__all__ = [
    "EchoModel",
    "ModelHTTPError",
    "ModelProvider",
    "ModelReply",
    "ModelRequest",
    "ScriptedModel",
    "provider_for",
]


def provider_for(model: str, env: Mapping[str, str], folder: Path | None = None) -> ModelProvider:
    """Build the provider for `model` (`<provider>/<name>`).

    `env` holds the agent's resolved env (the provider's key is folded into it); `folder` is the
    agent folder, where `mock/scripted` finds `mock_script.yaml`.

    Raises:
        ConfigError: the provider is unknown, or a mock script is missing.
    """
    provider, _, name = model.partition("/")
    if provider == "openai":
        from toren.worker.models._openai import OpenAIModel

        return OpenAIModel(
            env["OPENAI_API_KEY"],
            base_url=env.get("OPENAI_BASE_URL") or None,
            timeout=_timeout(),
        )
    if provider == "azure":
        from toren.worker.models._openai import AzureOpenAIModel

        if not (env.get("AZURE_OPENAI_API_KEY") or env.get("AZURE_OPENAI_AD_TOKEN")):
            raise ConfigError(
                f"model {model!r}: set AZURE_OPENAI_API_KEY (the resource's key) or "
                "AZURE_OPENAI_AD_TOKEN (a Microsoft Entra ID token) in the worker's environment"
            )
        return AzureOpenAIModel(
            env["AZURE_OPENAI_ENDPOINT"],
            api_key=env.get("AZURE_OPENAI_API_KEY", ""),
            ad_token=env.get("AZURE_OPENAI_AD_TOKEN", ""),
            api_version=env.get("OPENAI_API_VERSION") or None,
            timeout=_timeout(),
        )
    if provider == "anthropic":
        from toren.worker.models._anthropic import AnthropicModel

        return AnthropicModel(
            env["ANTHROPIC_API_KEY"],
            base_url=env.get("ANTHROPIC_BASE_URL") or None,
            timeout=_timeout(),
        )
    if provider in ("gemini", "vertex"):
        from toren.worker.models._gemini import GeminiModel, Vertex

        # GOOGLE_API_KEY stands in for GEMINI_API_KEY (`toren.worker._agent._KEY_ALIASES`).
        return GeminiModel(
            env.get("GEMINI_API_KEY", ""),
            vertex=Vertex(
                env["GOOGLE_CLOUD_PROJECT"],
                env.get("GOOGLE_CLOUD_LOCATION") or "global",
                env.get("GOOGLE_APPLICATION_CREDENTIALS") or None,
            )
            if provider == "vertex"
            else None,
            base_url=env.get(f"GOOGLE_{provider.upper()}_BASE_URL") or None,
            timeout=_timeout(),
        )
    if provider == "bedrock":
        from toren.worker.models._bedrock import bedrock_provider

        return bedrock_provider(env, timeout=_timeout())
    if provider == "mock":
        if name == "echo":
            return EchoModel()
        script = (folder or Path(".")) / f"mock_{name}.yaml"
        if name == "scripted":
            script = (folder or Path(".")) / "mock_script.yaml"
        if not script.is_file():
            raise ConfigError(
                f"model {model!r}: no script at {script} (write a YAML list of steps there, "
                "or use mock/echo)"
            )
        return ScriptedModel.from_file(script)
    raise ConfigError(
        f"model {model!r}: unknown provider {provider!r} (openai, azure, anthropic, gemini, "
        "vertex, bedrock, mock)"
    )


def _timeout() -> float:
    """Seconds a provider waits on each HTTP phase: `TOREN_MODEL_TIMEOUT_S` (default 120).

    Below the model activity's 5-minute start-to-close, so a hung server becomes a retryable
    error first.

    Raises:
        ConfigError: the variable is not a positive number.
    """
    raw = os.environ.get("TOREN_MODEL_TIMEOUT_S", "120")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(
            f"TOREN_MODEL_TIMEOUT_S={raw!r}: must be a positive number of seconds, e.g. 120"
        )
    return seconds
