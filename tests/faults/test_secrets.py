"""Secrets and internal addresses never reach a client, end to end through the running gateway: a backend
whose URL carries basic-auth credentials is reached with them (the engine checks them), and when it hangs
or goes away the client's error names the backend by its configured name only: no credentials, no host,
no port. The admin route shows the URL without its credentials; the log never holds the password."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from fault_rig import MODEL, gateway_settings, serve_gateway

from gateway.api.auth import hash_key
from gateway.backends.registry import Status

USER, PASSWORD = "gw-user", "pw-SECRET-8731"
NAME = "secret-box"
CLIENT, ADMIN = "sk-client-key", "sk-admin-key"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class GuardedEngine:
    """A vLLM-shaped engine behind basic auth: 401 without the right credentials. Chat requests hang
    until the engine stops (a hung engine), so the gateway's first-token timeout ends them."""

    def __init__(self) -> None:
        self.port = 0
        self.authorized = 0
        self.refused = 0
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> GuardedEngine:
        app = web.Application(middlewares=[self._basic_auth])
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._hang)
        self._runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _basic_auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            self.refused += 1
            return web.json_response({"error": "Unauthorized"}, status=401)
        self.authorized += 1
        response: web.StreamResponse = await handler(request)
        return response

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "max_model_len": 4096}]})

    async def _hang(self, request: web.Request) -> web.Response:
        await self._release.wait()
        return web.json_response({"error": {"message": "stopped"}}, status=500)


@asynccontextmanager
async def guarded(**extra: Any) -> AsyncIterator[tuple[str, GuardedEngine, Any, aiohttp.ClientSession]]:
    engine = await GuardedEngine().start()
    auth = {"client_key_hashes": [hash_key(CLIENT)], "admin_key_hash": hash_key(ADMIN)}
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{engine.port}"
    settings = gateway_settings({NAME: url}, auth=auth, **extra)
    try:
        async with (
            serve_gateway(settings) as (gateway_url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            async with asyncio.timeout(10):  # ready: the probes got through the engine's basic auth
                while gateway.registry.backends[NAME].status is not Status.READY:
                    await asyncio.sleep(0.02)
            yield gateway_url, engine, gateway, session
    finally:
        await engine.stop()


async def call(
    session: aiohttp.ClientSession, method: str, url: str, key: str, **kw: Any
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"}
    async with session.request(method, url, headers=headers, **kw) as response:
        return response.status, await response.read()


def assert_nothing_internal(raw: bytes, port: int) -> None:
    text = raw.decode()
    for secret in (PASSWORD, USER, "127.0.0.1", f":{port}", str(port)):
        assert secret not in text, f"{secret!r} reached the client: {text}"


async def test_a_hung_backend_with_credentials_is_named_not_addressed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    timeouts = {"first_byte_s": 0.5}
    async with guarded(timeouts=timeouts) as (url, engine, _, session):
        status, raw = await call(session, "POST", url + "/v1/chat/completions", CLIENT, json=CHAT)
        admin_status, backends = await call(session, "GET", url + "/gateway/backends", ADMIN)
    assert engine.authorized > 0 and engine.refused == 0  # the URL's credentials reached the engine
    assert status == 504
    message = orjson.loads(raw)["error"]["message"]
    assert message.startswith(f"no backend answered: {NAME}: ")
    assert_nothing_internal(raw, engine.port)
    assert admin_status == 200
    shown = orjson.loads(backends)["backends"][0]
    assert shown["url"] == f"http://127.0.0.1:{engine.port}"  # the admin sees the address, never the secret
    assert PASSWORD.encode() not in backends and USER.encode() not in backends
    assert PASSWORD not in caplog.text and f"{USER}:" not in caplog.text


async def test_a_backend_with_credentials_that_went_away_is_named_not_addressed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # The prober will not notice before the request does: the refused connection is what it meets.
    slow_probes, short_queue = {"interval_s": 60.0}, {"timeout_s": 0.5}
    async with guarded(probe=slow_probes, queue=short_queue) as (url, engine, gateway, session):
        await engine.stop()
        status, raw = await call(session, "POST", url + "/v1/chat/completions", CLIENT, json=CHAT)
        detail = gateway.registry.backends[NAME].detail
    assert status in (502, 503)
    assert NAME in orjson.loads(raw)["error"]["message"]
    assert_nothing_internal(raw, engine.port)
    assert PASSWORD not in detail  # what /gateway/backends shows as the reason
    assert PASSWORD not in caplog.text and f"{USER}:" not in caplog.text
