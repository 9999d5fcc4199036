"""API-key middleware: client keys, the admin key, /metrics modes, error bodies, constant-time compare."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import io
import logging
from typing import Any

import pytest
from pydantic import ValidationError
from reliability_asgi import call, echo_app

from gateway.api.auth import AUTH_ROLE, ApiKeyAuth, hash_key
from gateway.commands import hash_key as hash_key_command
from gateway.settings import AuthConfig

CLIENT, OTHER_CLIENT, ADMIN = "sk-client-1", "sk-client-2", "sk-admin"


def guarded(seen: list[dict[str, Any]] | None = None, **config: Any) -> ApiKeyAuth:
    defaults: dict[str, Any] = {
        "client_key_hashes": (hash_key(CLIENT), hash_key(OTHER_CLIENT)),
        "admin_key_hash": hash_key(ADMIN),
    }
    return ApiKeyAuth(echo_app(seen), AuthConfig(**{**defaults, **config}))


def bearer(key: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {key}")]


async def test_a_missing_key_gets_an_openai_style_401() -> None:
    response, _ = await call(guarded())
    assert response.status == 401
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "missing_api_key"
    assert set(error) == {"message", "type", "param", "code"}
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_a_wrong_key_gets_401_without_echoing_it() -> None:
    response, delivered = await call(guarded(), headers=bearer("sk-wrong-secret"))
    assert response.status == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert b"sk-wrong-secret" not in response.body
    assert delivered == [], "a refused request's body is never read"


@pytest.mark.parametrize("key", [CLIENT, OTHER_CLIENT, ADMIN])
async def test_a_right_key_passes_and_the_role_is_recorded(key: str) -> None:
    seen: list[dict[str, Any]] = []
    response, _ = await call(guarded(seen), headers=bearer(key))
    assert response.status == 200
    assert seen[0][AUTH_ROLE] == ("admin" if key == ADMIN else "client")


async def test_the_bearer_scheme_is_case_insensitive_and_other_schemes_are_refused() -> None:
    ok, _ = await call(guarded(), headers=[("Authorization", f"bearer   {CLIENT}")])
    basic, _ = await call(guarded(), headers=[("Authorization", f"Basic {CLIENT}")])
    assert (ok.status, basic.status) == (200, 401)


async def test_a_client_key_cannot_reach_the_admin_api() -> None:
    response, _ = await call(guarded(), path="/gateway/backends", method="GET", headers=bearer(CLIENT))
    assert response.status == 403
    assert response.json()["error"]["code"] == "admin_key_required"
    admin, _ = await call(guarded(), path="/gateway/backends", method="GET", headers=bearer(ADMIN))
    assert admin.status == 200


async def test_client_keys_without_an_admin_key_close_the_admin_api() -> None:
    app = guarded(admin_key_hash=None)
    response, _ = await call(app, path="/gateway/policy", headers=bearer(CLIENT))
    assert response.status == 403


async def test_no_keys_configured_leaves_everything_open() -> None:
    app = guarded(client_key_hashes=(), admin_key_hash=None)
    for path in ("/v1/chat/completions", "/gateway/backends", "/metrics"):
        response, _ = await call(app, path=path)
        assert response.status == 200, path


async def test_an_admin_key_alone_guards_only_the_admin_api() -> None:
    app = guarded(client_key_hashes=())
    assert (await call(app, path="/v1/completions"))[0].status == 200
    assert (await call(app, path="/gateway/backends"))[0].status == 401


@pytest.mark.parametrize("path", ["/health", "/ready"])
async def test_health_and_ready_are_always_open(path: str) -> None:
    response, _ = await call(guarded(metrics="admin"), path=path, method="GET")
    assert response.status == 200


@pytest.mark.parametrize(
    ("mode", "anonymous", "client", "admin"),
    [("open", 200, 200, 200), ("client", 401, 200, 200), ("admin", 401, 403, 200)],
)
async def test_metrics_protection_modes(mode: str, anonymous: int, client: int, admin: int) -> None:
    app = guarded(metrics=mode)
    statuses = [
        (await call(app, path="/metrics", method="GET", headers=headers))[0].status
        for headers in ([], bearer(CLIENT), bearer(ADMIN))
    ]
    assert statuses == [anonymous, client, admin]


async def test_keys_are_compared_in_constant_time_against_every_stored_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    response, _ = await call(guarded(), headers=bearer(CLIENT))
    assert response.status == 200
    presented = hashlib.sha256(CLIENT.encode()).digest()
    assert len(calls) == 3, "admin hash and both client hashes, no early exit on the first match"
    assert all(a == presented for a, _ in calls)


async def test_keys_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await call(guarded(), headers=bearer("sk-leaky-key"))
    await call(guarded(), path="/gateway/x", headers=bearer(CLIENT))
    assert caplog.records, "refusals are logged"
    assert "sk-leaky-key" not in caplog.text and CLIENT not in caplog.text


def test_config_accepts_hashes_with_or_without_prefix_and_rejects_plain_keys() -> None:
    digest = hashlib.sha256(b"k").hexdigest()
    config = AuthConfig(client_key_hashes=(f"sha256:{digest}", digest.upper()))
    assert config.client_key_hashes == (digest, digest)
    with pytest.raises(ValidationError):
        AuthConfig(client_key_hashes=("sk-plain-key",))
    with pytest.raises(ValidationError):
        AuthConfig(metrics="everyone")


def main(argv: list[str]) -> int:
    """The `spark-gateway` parser with only this command registered, as gateway/cli.py discovers it."""
    parser = argparse.ArgumentParser(prog="spark-gateway")
    hash_key_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.handler(args)
    return result


def test_hash_key_command_prints_the_hash_of_the_key_on_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("sk-from-stdin\n"))
    assert main(["hash-key"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == "sha256:" + hashlib.sha256(b"sk-from-stdin").hexdigest()
    assert AuthConfig(admin_key_hash=printed).admin_key_hash == printed.removeprefix("sha256:")


def test_hash_key_command_refuses_empty_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["hash-key"]) == 2
