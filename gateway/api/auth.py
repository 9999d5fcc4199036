"""API keys: a pure-ASGI middleware guarding the client API, the admin API and /metrics.

Keys are configured as SHA-256 hashes (`spark-gateway hash-key` prints one), so the configuration file
holds no secret; the `auth:` section (AuthConfig) is plain settings, in gateway/settings/auth.py. A presented
key (`Authorization: Bearer <key>`, or `x-api-key: <key>` as Anthropic clients send it) is hashed and
compared with every configured hash through hmac.compare_digest, without stopping at the first match, so
the time taken says nothing about which key or how much of it matched. Keys are never logged nor
echoed in errors.

Who may call what:
- /health and /ready: always open (container health checks, load balancers).
- /ui and /ui/...: always open: the status page's own files, which hold no data; the page reads its data
  from /gateway/... with the admin key the user gives it.
- /gateway/...: the admin key. With client keys but no admin key, the admin API is closed to everyone:
  a client key must never be enough to change the gateway.
- /metrics: `metrics: open | client | admin`.
- everything else (/v1/...): a client key or the admin key; open when no client key is configured.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Literal

import orjson

from gateway.api.asgi import ASGIApp, Receive, Scope, Send, header, send_bytes
from gateway.settings import AuthConfig
from gateway.settings import AuthNeed as Need

Role = Literal["admin", "client", "anonymous"]
AUTH_ROLE = "gateway.auth_role"  # scope key: who the request was authenticated as

_OPEN_PATHS = frozenset({"/health", "/ready"})
_log = logging.getLogger(__name__)


def hash_key(key: str) -> str:
    """The configuration form of an API key: `sha256:<64 hex digits>`."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeyAuth:
    """Pure-ASGI middleware enforcing AuthConfig. Sets scope[AUTH_ROLE] for the routes behind it."""

    def __init__(self, app: ASGIApp, config: AuthConfig) -> None:
        self.app = app
        self._client = [bytes.fromhex(h) for h in config.client_key_hashes]
        self._admin = bytes.fromhex(config.admin_key_hash) if config.admin_key_hash else None
        self._metrics = config.metrics
        # No key configured: every path is open and no presented key can match, so every request is
        # anonymous; skip the header scan and hashing on the request path.
        self._keyless = not self._client and self._admin is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._keyless:
            scope[AUTH_ROLE] = "anonymous"
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope) or _x_api_key(scope)
        role = self.role_of(presented)
        refusal = self._refusal(self.need(scope["path"]), role, has_key=presented is not None)
        if refusal is not None:
            _log.info("refused %s %s: %s", scope.get("method", ""), scope["path"], refusal[1])
            await _send_auth_error(send, *refusal)
            return
        scope[AUTH_ROLE] = role
        await self.app(scope, receive, send)

    def need(self, path: str) -> Need:
        """The level a path needs, after taking into account which keys are configured."""
        if path in _OPEN_PATHS or path == "/ui" or path.startswith("/ui/"):
            return "open"  # /ui: the status page's static files, no data (its data needs the admin key)
        if path == "/metrics":
            wanted = self._metrics
        elif path == "/gateway" or path.startswith("/gateway/"):
            wanted = "admin"
        else:
            wanted = "client"
        if wanted == "client" and not self._client:
            return "open"
        if wanted == "admin" and self._admin is None and not self._client:
            return "open"  # no key configured at all: a local, unauthenticated set-up
        return wanted

    def role_of(self, key: str | None) -> Role:
        if key is None:
            return "anonymous"
        presented = hashlib.sha256(key.encode("utf-8")).digest()
        is_admin = self._admin is not None and hmac.compare_digest(presented, self._admin)
        is_client = False
        for stored in self._client:  # no early exit: constant work whichever key matches
            is_client |= hmac.compare_digest(presented, stored)
        return "admin" if is_admin else "client" if is_client else "anonymous"

    def _refusal(self, need: Need, role: Role, has_key: bool) -> tuple[int, str, str] | None:
        if need == "open" or role == "admin" or (need == "client" and role == "client"):
            return None
        if role == "client":
            return 403, "This path needs the admin key.", "admin_key_required"
        if not has_key:
            message = "Missing API key: send it as 'Authorization: Bearer <key>'."
            return 401, message, "missing_api_key"
        return 401, "Incorrect API key provided.", "invalid_api_key"


def _bearer(scope: Scope) -> str | None:
    raw = header(scope, b"authorization")
    if raw is None:
        return None
    scheme, _, token = raw.decode("latin-1").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _x_api_key(scope: Scope) -> str | None:
    """The Anthropic clients' header (Claude Code and the anthropic SDK send `x-api-key: <key>`)."""
    raw = header(scope, b"x-api-key")
    key = raw.decode("latin-1").strip() if raw is not None else ""
    return key or None


async def _send_auth_error(send: Send, status: int, message: str, code: str) -> None:
    # OpenAI itself answers a bad key with type invalid_request_error and code invalid_api_key.
    kind = "invalid_request_error" if status == 401 else "permission_error"
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="spark-gateway"'))
    await send_bytes(send, status, body, headers)
