"""The Bedrock provider: `bedrock/<modelId>` through the Converse API, with aioboto3.

```python
provider = bedrock_provider(env, timeout=120)        # ConfigError: no region, no aioboto3
reply = await provider.complete(ModelRequest(model="us.anthropic.claude-sonnet-4-20250514-v1:0",
                                             system="...", messages=[...]))
```

Credentials come from the AWS chain: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`
(/`AWS_SESSION_TOKEN`) when the worker's environment holds them, else `AWS_PROFILE`, else
whatever botocore finds (the shared files, a container or instance role). The region is
required: `AWS_REGION`, `AWS_DEFAULT_REGION`, or the profile's. `BEDROCK_ENDPOINT_URL` points
the client elsewhere (a VPC endpoint; tests use a local server).

botocore never retries (`total_max_attempts: 1`) and waits `TOREN_MODEL_TIMEOUT_S` to connect and
per read; each failure becomes a `ModelHTTPError` classified as `toren.worker._http` does for the
HTTP providers, and Temporal's retry policy decides. A request with `on_delta` streams
(ConverseStream); a stream ending before `messageStop` is retryable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from toren.errors import ConfigError, PromptTooLongError
from toren.worker._http import retry_after, retryable_status
from toren.worker._redact import redactor
from toren.worker.models._base import ModelHTTPError, ModelReply, ModelRequest
from toren.worker.models._bedrock_logs import hide_session_tokens
from toren.worker.models._bedrock_stream import BedrockStream
from toren.worker.models._bedrock_wire import converse_params, parse_reply
from toren.worker.models._window import refusal_for

__all__ = ["ENV_NAMES", "BedrockModel", "bedrock_provider"]

ENV_NAMES = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "BEDROCK_ENDPOINT_URL",
)
"""What the provider reads from the worker's environment (none is required but a region)."""

RETRYABLE_CODES = frozenset(
    {"throttlingexception", "serviceunavailableexception", "internalserverexception",
     "modelstreamerrorexception", "modelnotreadyexception", "modeltimeoutexception",
     "servicequotaexceededexception"}
)  # fmt: skip
"""Error codes worth another attempt when no status says so (an exception event mid-stream)."""

TOO_LONG = re.compile(
    r"input is too long|too many input tokens|prompt is too long|exceeds? the context window"
    r"|context (?:window|length) (?:exceeded|limit)|maximum context length",
    re.IGNORECASE,
)
"""Bedrock's own wordings of a prompt refused for its length (a `ValidationException`)."""

HINTS = {
    "accessdeniedexception": "the worker's AWS identity needs bedrock:InvokeModel and "
    "bedrock:InvokeModelWithResponseStream on this model, and access to the model granted in "
    "the Bedrock console for this region",
    "unrecognizedclientexception": "the AWS credentials are not valid (check AWS_ACCESS_KEY_ID "
    "or AWS_PROFILE)",
    "expiredtokenexception": "the AWS session token has expired; refresh the credentials",
    "resourcenotfoundexception": "check the model id and the region (some models are reached "
    "through an inference profile id such as us.<modelId>)",
}
"""What to do about a non-retryable error, by code."""


def bedrock_provider(env: Mapping[str, str], timeout: float) -> BedrockModel:
    """The provider for the worker's environment `env`, checked at worker start.

    Raises:
        ConfigError: aioboto3 is not installed, no region can be found,
            `BEDROCK_ENDPOINT_URL` is not an http(s) URL, or `AWS_PROFILE` names no profile.
    """
    try:
        import aioboto3  # noqa: F401
    except ImportError:
        raise ConfigError("bedrock/ models need aioboto3: pip install 'toren[bedrock]'") from None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or _profile_region(env)
    if not region:
        raise ConfigError(
            "bedrock/ models need an AWS region: set AWS_REGION (e.g. us-east-1) in the "
            "worker's environment, or a region in the AWS profile it uses"
        )
    endpoint = env.get("BEDROCK_ENDPOINT_URL") or None
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"BEDROCK_ENDPOINT_URL={endpoint!r}: must be an http(s) URL, e.g. "
            "https://bedrock-runtime.us-east-1.amazonaws.com"
        )
    keys = {
        "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": env.get("AWS_SESSION_TOKEN"),
    }
    import botocore.exceptions

    try:
        return BedrockModel(
            region,
            endpoint_url=endpoint,
            credentials={k: v for k, v in keys.items() if v},
            profile=env.get("AWS_PROFILE") or None,
            timeout=timeout,
        )
    except botocore.exceptions.ProfileNotFound:
        raise ConfigError(
            f"AWS_PROFILE={env.get('AWS_PROFILE')!r}: no such profile in the worker's AWS config "
            "(~/.aws/config, or AWS_CONFIG_FILE): name one it has, or unset it"
        ) from None


def _profile_region(env: Mapping[str, str]) -> str | None:
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=env.get("AWS_PROFILE") or None)
        region = session.get_config_variable("region")
    except botocore.exceptions.BotoCoreError:
        return None
    return str(region) if region else None


class BedrockModel:
    """A model on Amazon Bedrock, called through Converse (ConverseStream when streaming).

    Args:
        region: The AWS region, e.g. `us-east-1`.
        endpoint_url: Another endpoint than the region's (a VPC endpoint), or None.
        credentials: `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token` when
            given; empty: botocore's chain finds them.
        profile: The AWS profile to read, or None.
        timeout: Seconds to connect, and to wait for each read.
    """

    label = "Bedrock"

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        credentials: Mapping[str, str] | None = None,
        profile: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        import aioboto3
        from aiobotocore.config import AioConfig

        hide_session_tokens()  # botocore's DEBUG logs carry X-Amz-Security-Token
        self.region = region
        self.endpoint_url = endpoint_url
        self.timeout = timeout
        self._secrets = [v for k, v in (credentials or {}).items() if k != "aws_access_key_id"]
        given = dict(credentials or {})
        self._session = aioboto3.Session(
            aws_access_key_id=given.get("aws_access_key_id"),
            aws_secret_access_key=given.get("aws_secret_access_key"),
            aws_session_token=given.get("aws_session_token"),
            profile_name=profile,
            region_name=region,
        )
        self._config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=timeout,
            read_timeout=timeout,
            # `AWS_ENDPOINT_URL` often points S3 at MinIO or moto (TOREN_STORE): Bedrock's calls
            # go to the region's endpoint, or to `BEDROCK_ENDPOINT_URL` only.
            ignore_configured_endpoint_urls=True,
        )

    def __repr__(self) -> str:
        # Where it points, and never the credentials.
        return f"BedrockModel(region={self.region!r}, endpoint_url={self.endpoint_url!r})"

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one request and parse the reply.

        Raises:
            ModelHTTPError: Bedrock refused the call or could not be reached, or sent a reply
                toren cannot read; `retryable` says whether to try again. A prompt refused for
                its length is a `PromptTooLongError`.
            ValueError: The transcript holds something Converse cannot carry.
        """
        params = converse_params(request)
        try:
            async with self._client() as client:
                if request.on_delta is not None:
                    return await self._streamed(client, params, request, request.on_delta)
                data = await client.converse(**params)
        except ModelHTTPError:
            raise
        except Exception as exc:
            failure = self._failure(exc)
            if failure is None:
                raise
            raise failure from None
        return self._parsed(lambda: parse_reply(data, request.model))

    def _client(self) -> Any:
        # A client per call: no connection pool outlives the activity's event loop.
        return self._session.client(
            "bedrock-runtime", endpoint_url=self.endpoint_url, config=self._config
        )

    async def _streamed(
        self,
        client: Any,
        params: dict[str, Any],
        request: ModelRequest,
        on_delta: Callable[[dict[str, Any]], None],
    ) -> ModelReply:
        response = await client.converse_stream(**params)
        stream = BedrockStream()
        try:
            async for event in response["stream"]:
                try:
                    deltas = stream.feed(event)
                except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                    raise self._error(
                        f"{self.label} sent a {sorted(event)} event that is not part of a "
                        f"ConverseStream ({exc!r})"
                    ) from None
                # Outside the `try`: what `on_delta` raises is the caller's own error.
                for delta in deltas:
                    on_delta(delta)
        finally:
            # A stream left mid-way (a timeout, an error event) would hold its connection.
            response["stream"].close()
        if not stream.done:
            raise self._error(f"{self.label} ended the stream before its end (no messageStop)")
        return self._parsed(lambda: stream.reply(lambda body: parse_reply(body, request.model)))

    def _parsed(self, build: Callable[[], ModelReply]) -> ModelReply:
        try:
            return build()
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            # Most often a proxy's hiccup: retryable (status None).
            raise self._error(
                f"{self.label} sent a reply that is not a Converse response ({exc!r})"
            ) from None

    def _error(
        self,
        text: str,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> ModelHTTPError:
        return ModelHTTPError(redactor(self._secrets).text(text), status, retry_after, retryable)

    def _failure(self, exc: Exception) -> ModelHTTPError | None:
        """`exc` (botocore's or aiohttp's) as a `ModelHTTPError`, or None for another error."""
        import aiohttp
        import botocore.exceptions as boto

        if isinstance(exc, boto.ClientError):
            return self._client_error(exc)
        if isinstance(
            exc, boto.HTTPClientError | boto.ConnectionError | aiohttp.ClientError | TimeoutError
        ):
            timed_out = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
            kind = "timed out" if timed_out else "could not be reached"
            return self._error(f"{self.label} {kind}: {type(exc).__name__}: {exc}")
        if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
            return self._error(
                f"{self.label}: {exc}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                "AWS_PROFILE, in the worker's environment (or run it with an AWS role)",
                retryable=False,
            )
        if isinstance(exc, boto.BotoCoreError):
            # A request botocore cannot send (a parameter out of range), a profile not found:
            # the same call fails the same way.
            return self._error(f"{self.label}: {type(exc).__name__}: {exc}", retryable=False)
        return None

    def _client_error(self, exc: Any) -> ModelHTTPError:
        response = exc.response if isinstance(exc.response, dict) else {}
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or exc)
        meta = response.get("ResponseMetadata") or {}
        status = meta.get("HTTPStatusCode")
        status = int(status) if isinstance(status, int) and status else None
        retryable = (
            retryable_status(status) if status is not None else code.lower() in RETRYABLE_CODES
        )
        if code.lower() in RETRYABLE_CODES:
            retryable = True  # a throttle or outage mid-stream has no status of its own
        at = f"HTTP {status} " if status is not None else "mid-stream "
        text = f"{self.label} returned {at}{code}: {message}"
        hint = HINTS.get(code.lower())
        if hint and not retryable:
            text = f"{text} ({hint})"
        if code.lower() == "validationexception":
            refusal = refusal_for(message)
            if refusal is not None or TOO_LONG.search(message):
                return PromptTooLongError(
                    redactor(self._secrets).text(text),
                    status,
                    refusal.window if refusal else None,
                    refusal.prompt_tokens if refusal else None,
                )
        headers = httpx.Headers(dict(meta.get("HTTPHeaders") or {}))
        return self._error(text, status, retry_after(headers), retryable)
