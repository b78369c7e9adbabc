"""A team's encrypted Temporal set-up, for tests that run toren inside it.

An AES-GCM `PayloadCodec` (samples-python's `encryption` sample, in short) and a codec server
that speaks the Web UI's `/encode` `/decode` protocol. The team's own workflow, with a payload
converter of its own, is in `tests.team_app` (the sandbox imports it without the codec).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

KEY = b"0123456789abcdef0123456789abcdef"
"""The team's key (a test key)."""
KEY_ID = b"team-key-1"
CODEC_TOKEN = "Bearer codec-token"
"""What the codec server wants in `Authorization`."""


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload with AES-GCM, marking it `binary/encrypted`."""

    def __init__(self, key: bytes = KEY) -> None:
        self.aes = AESGCM(key)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            nonce = os.urandom(12)
            out.append(
                Payload(
                    metadata={"encoding": b"binary/encrypted", "encryption-key-id": KEY_ID},
                    data=nonce + self.aes.encrypt(nonce, p.SerializeToString(), None),
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != b"binary/encrypted":
                out.append(p)  # as the sample does: what was not encrypted passes
                continue
            decoded = Payload()
            decoded.ParseFromString(self.aes.decrypt(p.data[:12], p.data[12:], None))
            out.append(decoded)
        return out


class EncodeOnlyCodec(EncryptionCodec):
    """Encrypts, but cannot decrypt (a key that only encrypts): the answer stays unreadable."""

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


codec = EncryptionCodec()
"""For `TOREN_PAYLOAD_CODEC=tests.team_codec:codec`."""
encode_only = EncodeOnlyCodec()
"""For `TOREN_PAYLOAD_CODEC=tests.team_codec:encode_only`."""


def codec_app(seen: list[dict[str, str]]) -> Any:
    """The team's codec server (Starlette), recording each request's headers in `seen`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def handle(request: Request) -> JSONResponse:
        seen.append(
            {
                "path": request.url.path,
                "namespace": request.headers.get("x-namespace", ""),
                "auth": request.headers.get("authorization", ""),
            }
        )
        if request.headers.get("authorization") != CODEC_TOKEN:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        body = await request.json()
        payloads = [
            Payload(
                metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()},
                data=base64.b64decode(p.get("data", "")),
            )
            for p in body["payloads"]
        ]
        if request.url.path.endswith("/encode"):
            done = await codec.encode(payloads)
        else:
            done = await codec.decode(payloads)
        return JSONResponse(
            {
                "payloads": [
                    {
                        "metadata": {
                            k: base64.b64encode(v).decode() for k, v in p.metadata.items()
                        },
                        "data": base64.b64encode(p.data).decode(),
                    }
                    for p in done
                ]
            }
        )

    return Starlette(
        routes=[
            Route("/encode", handle, methods=["POST"]),
            Route("/decode", handle, methods=["POST"]),
        ]
    )
