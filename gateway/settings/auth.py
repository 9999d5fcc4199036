"""The `auth:` section: API keys as SHA-256 hashes (api/auth.py enforces them)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from gateway.settings.strict import Strict

AuthNeed = Literal["open", "client", "admin"]  # who may call a path: anyone, a client key, the admin key
_KEY_HASH = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


class AuthConfig(Strict):
    """The `auth:` section: API keys as SHA-256 hashes (api/auth.py enforces them)."""

    client_key_hashes: tuple[str, ...] = Field(default=(), max_length=10_000)
    admin_key_hash: str | None = None
    metrics: AuthNeed = "open"

    @field_validator("client_key_hashes")
    @classmethod
    def _client_digests(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_key_digest(v) for v in values)

    @field_validator("admin_key_hash")
    @classmethod
    def _admin_digest(cls, value: str | None) -> str | None:
        return None if value is None else _key_digest(value)


def _key_digest(value: str) -> str:
    match = _KEY_HASH.match(value.strip().lower())
    if match is None:
        raise ValueError("must be a SHA-256 hex digest, optionally prefixed 'sha256:' (see hash-key)")
    return match.group(1)
