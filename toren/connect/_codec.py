"""The team's payload codec: in process, or through its codec server, found as `temporal` finds it.

```bash
TOREN_PAYLOAD_CODEC=myteam.crypto:codec     # in process: a PayloadCodec or a DataConverter
TEMPORAL_CODEC_ENDPOINT=https://codec.internal   # or the codec server the Web UI uses
TEMPORAL_CODEC_AUTH="Bearer ..."            # its Authorization header
```

Workers need the codec in process (`TOREN_PAYLOAD_CODEC` or `--codec`). The read-only tools and
the ones that act on a run (`events`, `pending`, `approve`, `chat`, `toren serve`, ...) also take
a codec server, read from the same flags, variables and `temporal.toml` profile (its `codec`
section: `endpoint`, `auth`) as the `temporal` CLI, so one set of settings serves both. The
server speaks the Web UI's protocol: `POST {endpoint}/encode` and `/decode` with
`{"payloads": [{"metadata": {key: base64}, "data": base64}]}`, the namespace in `X-Namespace`.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

from toren.errors import CodecServerError, ConfigError

__all__ = [
    "AUTH_VAR",
    "CODEC_VAR",
    "ENDPOINT_VAR",
    "CodecServer",
    "CodecSettings",
    "load_codec",
    "unknown_encoding",
]

CODEC_VAR = "TOREN_PAYLOAD_CODEC"
"""`module:attribute` of the team's `PayloadCodec` or `DataConverter` (or a callable making one)."""
ENDPOINT_VAR = "TEMPORAL_CODEC_ENDPOINT"
"""The codec server's URL, as the `temporal` CLI reads it."""
AUTH_VAR = "TEMPORAL_CODEC_AUTH"
"""The codec server's `Authorization` header value, as the `temporal` CLI reads it."""

TIMEOUT_S = 30.0
"""How long one codec server request may take."""


@dataclasses.dataclass(frozen=True)
class CodecSettings:
    """Where the team's codec is: in process, or a codec server."""

    codec: str | None = None
    """`module:attribute` of a `PayloadCodec` or `DataConverter` (`TOREN_PAYLOAD_CODEC`)."""
    endpoint: str | None = None
    """The codec server's URL (`TEMPORAL_CODEC_ENDPOINT`, the profile's `codec.endpoint`)."""
    auth: str | None = None
    """Its `Authorization` header (`TEMPORAL_CODEC_AUTH`, the profile's `codec.auth`)."""

    @classmethod
    def resolve(
        cls,
        codec: str | None = None,
        endpoint: str | None = None,
        auth: str | None = None,
        *,
        profile: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CodecSettings:
        """The settings from flags, else the environment, else the `temporal.toml` profile."""
        env = os.environ if environ is None else environ
        from_profile = _profile_codec(profile, env)
        return cls(
            codec=codec or env.get(CODEC_VAR, "").strip() or None,
            endpoint=endpoint or env.get(ENDPOINT_VAR, "").strip() or from_profile.get("endpoint"),
            auth=auth or env.get(AUTH_VAR, "").strip() or from_profile.get("auth"),
        )

    def converter(self, namespace: str) -> DataConverter | None:
        """The team's converter these settings name (`None`: no codec configured).

        The in-process codec wins over a codec server.
        """
        if self.codec:
            found = load_codec(self.codec)
            if isinstance(found, DataConverter):
                return found
            return DataConverter(payload_codec=found)
        if self.endpoint:
            return DataConverter(payload_codec=CodecServer(self.endpoint, namespace, self.auth))
        return None


def _config_file(env: Mapping[str, str]) -> Path:
    """Where the `temporal` CLI and `temporalio.envconfig` look for `temporal.toml`."""
    given = env.get("TEMPORAL_CONFIG_FILE", "").strip()
    if given:
        return Path(given)
    base = env.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base) / "temporalio" / "temporal.toml"


def _profile_codec(profile: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The `codec` section of the profile in use (`temporalio.envconfig` does not read it)."""
    path = _config_file(env)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: cannot read it for the codec settings: {err}") from err
    name = profile or env.get("TEMPORAL_PROFILE", "").strip() or "default"
    section = data.get("profile", {}).get(name, {}).get("codec", {})
    if not isinstance(section, dict):
        return {}
    return {k: str(v) for k, v in section.items() if k in ("endpoint", "auth") and v}


def load_codec(spec: str) -> PayloadCodec | DataConverter:
    """The `PayloadCodec` or `DataConverter` a `module:attribute` setting names.

    The attribute may be an instance, or a class or function that makes one with no arguments.

    Raises:
        ConfigError: the module or attribute is missing, or names something else.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"{CODEC_VAR}={spec!r}: give module:attribute, e.g. myteam.crypto:codec")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{CODEC_VAR}={spec!r}: cannot import {module_name!r}: {err}") from err
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"{CODEC_VAR}={spec!r}: {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, (PayloadCodec, DataConverter)) and callable(found):
        found = found()
    if not isinstance(found, (PayloadCodec, DataConverter)):
        raise ConfigError(
            f"{CODEC_VAR}={spec!r} is a {type(found).__name__}: name a "
            "temporalio PayloadCodec or DataConverter (or a callable returning one)"
        )
    return found


def _to_json(payloads: Sequence[Payload]) -> dict[str, Any]:
    return {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                "data": base64.b64encode(p.data).decode(),
            }
            for p in payloads
        ]
    }


def _from_json(body: Any, count: int) -> list[Payload]:
    items = body.get("payloads") if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(f"expected {count} payload(s) in {{'payloads': [...]}}")
    return [
        Payload(
            metadata={k: base64.b64decode(v) for k, v in (item.get("metadata") or {}).items()},
            data=base64.b64decode(item.get("data") or ""),
        )
        for item in items
    ]


class CodecServer(PayloadCodec):
    """A `PayloadCodec` that asks the team's codec server (the Web UI's protocol).

    A connection per request: nothing is left open between them (a process may run several
    event loops, and leave any of them at any time). The answer is trusted as the Web UI
    trusts it.
    """

    def __init__(self, endpoint: str, namespace: str, auth: str | None = None) -> None:
        """Create the codec.

        Args:
            endpoint: the server's base URL (`/encode` and `/decode` are under it).
            namespace: sent as `X-Namespace` (a server may keep a key per namespace).
            auth: the `Authorization` header value, if the server wants one.
        """
        self.endpoint = endpoint.rstrip("/")
        self.namespace = namespace
        self._headers = {"X-Namespace": namespace, "Content-Type": "application/json"}
        if auth:
            self._headers["Authorization"] = auth

    async def _post(self, path: str, payloads: Sequence[Payload]) -> list[Payload]:
        if not payloads:
            return []
        url = f"{self.endpoint}/{path}"
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                response = await client.post(url, json=_to_json(payloads), headers=self._headers)
        except httpx.HTTPError as err:
            why = str(err) or type(err).__name__
            raise CodecServerError(
                f"codec server {url} ({ENDPOINT_VAR}) did not answer: {why}"
            ) from None
        if response.status_code != 200:
            text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
            hint = (
                f"; set {AUTH_VAR} (or --codec-auth)" if response.status_code in (401, 403) else ""
            )
            raise CodecServerError(
                f"codec server {url} answered {response.status_code} {text}".rstrip() + hint
            )
        try:
            return _from_json(response.json(), len(payloads))
        except ValueError as err:
            raise CodecServerError(f"codec server {url} answered something else: {err}") from None

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encode through the server's `/encode`."""
        return await self._post("encode", payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decode through the server's `/decode`."""
        return await self._post("decode", payloads)


def unknown_encoding(payloads: Iterable[Payload], known: Iterable[bytes]) -> str | None:
    """The first encoding among `payloads` that no converter in `known` reads, if any."""
    readable = set(known)
    for payload in payloads:
        encoding = payload.metadata.get("encoding", b"")
        if encoding and encoding not in readable:
            return encoding.decode(errors="replace")
    return None
