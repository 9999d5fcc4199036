"""API keys and the body size limit, end to end through the running gateway (uvicorn on an ephemeral
127.0.0.1 port) in front of the twin: who gets in where, and what a client sees when it does not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fault_rig import MODEL, Rig, fleet_spec, rig

from gateway.api.auth import hash_key

CLIENT, ADMIN = "sk-client-key", "sk-admin-key"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def auth(metrics: str = "open") -> dict[str, Any]:
    return {"client_key_hashes": [hash_key(CLIENT)], "admin_key_hash": hash_key(ADMIN), "metrics": metrics}


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


JSON_BODY = {"content-type": "application/json"}
Reply = tuple[int, dict[str, str], bytes]


async def call(r: Rig, method: str, path: str, key: str | None, **kw: Any) -> Reply:
    headers = {**bearer(key), **kw.pop("headers", {})}
    async with r.session.request(method, r.url + path, headers=headers, **kw) as response:
        headers = {k.lower(): v for k, v in response.headers.items()}
        return response.status, headers, await response.read()


def error_code(raw: bytes) -> str:
    code: str = orjson.loads(raw)["error"]["code"]
    return code


async def test_the_client_api_needs_a_client_key() -> None:
    async with rig(fleet_spec("a"), auth=auth()) as r:
        missing = await call(r, "POST", "/v1/chat/completions", None, json=CHAT)
        wrong = await call(r, "POST", "/v1/chat/completions", "sk-wrong", json=CHAT)
        client = await call(r, "POST", "/v1/chat/completions", CLIENT, json=CHAT)
        admin = await call(r, "POST", "/v1/chat/completions", ADMIN, json=CHAT)
        health = await call(r, "GET", "/health", None)
    assert missing[0] == 401 and error_code(missing[2]) == "missing_api_key"
    assert missing[1]["www-authenticate"].startswith("Bearer")
    assert wrong[0] == 401 and error_code(wrong[2]) == "invalid_api_key"
    assert CLIENT.encode() not in wrong[2] and b"sk-wrong" not in wrong[2]  # keys are never echoed
    assert client[0] == 200 and orjson.loads(client[2])["choices"]
    assert admin[0] == 200
    assert health[0] == 200  # always open, for load balancers


async def test_the_admin_routes_need_the_admin_key_a_client_key_is_not_enough() -> None:
    async with rig(fleet_spec("a"), auth=auth()) as r:
        missing = await call(r, "GET", "/gateway/backends", None)
        client = await call(r, "GET", "/gateway/backends", CLIENT)
        admin = await call(r, "GET", "/gateway/backends", ADMIN)
    assert missing[0] == 401
    assert client[0] == 403 and error_code(client[2]) == "admin_key_required"
    assert admin[0] == 200 and orjson.loads(admin[2])["backends"][0]["name"] == "a"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("open", {None: 200, CLIENT: 200, ADMIN: 200}),
        ("client", {None: 401, CLIENT: 200, ADMIN: 200}),
        ("admin", {None: 401, CLIENT: 403, ADMIN: 200}),
    ],
)
async def test_metrics_follow_their_protection_mode(mode: str, expected: dict[str | None, int]) -> None:
    async with rig(fleet_spec("a"), auth=auth(mode)) as r:
        seen = {key: (await call(r, "GET", "/metrics", key))[0] for key in expected}
    assert seen == expected


async def test_a_body_over_the_limit_is_413_openai_style() -> None:
    limit = 4096
    padding = "x" * (limit * 2)
    big = {**CHAT, "messages": [{"role": "user", "content": padding}]}
    async with rig(fleet_spec("a"), limits={"max_body_bytes": limit}) as r:
        declared = await call(r, "POST", "/v1/chat/completions", None, json=big)
        chunked = await call(
            r, "POST", "/v1/chat/completions", None, data=_chunked(orjson.dumps(big)), headers=JSON_BODY
        )
        small = await call(r, "POST", "/v1/chat/completions", None, json=CHAT)
    for status, headers, raw in (declared, chunked):
        assert status == 413, raw
        assert headers["content-type"].startswith("application/json")
        error = orjson.loads(raw)["error"]
        assert error["code"] == "request_too_large" and error["type"] and error["message"]
    assert small[0] == 200


async def _chunked(raw: bytes) -> Any:
    """A body without Content-Length (sent chunked): the limit must count it as it arrives."""
    for start in range(0, len(raw), 1024):
        yield raw[start : start + 1024]


async def test_an_unauthenticated_client_never_gets_its_big_body_read() -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 10_000}]}
    async with rig(fleet_spec("a"), auth=auth(), limits={"max_body_bytes": 4096}) as r:
        status, _, raw = await call(r, "POST", "/v1/chat/completions", None, json=big)
    assert status == 401 and error_code(raw) == "missing_api_key"  # auth runs before the body limit
