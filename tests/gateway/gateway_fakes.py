"""Test helpers: a scriptable fake engine (aiohttp test server) and an in-process gateway, both on
ephemeral ports of 127.0.0.1, and the client side of one ASGI exchange for the dispatcher alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from loopback import serve_asgi

from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warmups
from gateway.proxy.dispatch import Dispatcher
from gateway.proxy.reliability import Reliability
from gateway.proxy.upstream import MockHandler, MockTransport
from gateway.records import RequestRecord
from gateway.settings import Settings


@dataclass
class Behaviour:
    """How the fake engine answers the next requests."""

    status: int = 200
    error_body: dict[str, Any] = field(default_factory=lambda: {"error": {"message": "boom", "code": 500}})
    tokens: int = 3
    gap_s: float = 0.0
    crlf: bool = False
    comments: bool = False
    error_after: int | None = None  # send an error frame after this many content frames
    drop_after: int | None = None  # cut the connection after this many content frames
    hang: bool = False
    health_status: int = 200
    health_body: dict[str, Any] = field(default_factory=lambda: {"status": "ok"})
    reasoning: bool = False


class FakeEngine:
    def __init__(self, name: str = "fake", max_model_len: int = 4096) -> None:
        self.name = name
        self.max_model_len = max_model_len
        self.behaviour = Behaviour()
        self.bodies: list[dict[str, Any]] = []
        self.cancelled = 0
        self.completed = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> FakeEngine:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        b = self.behaviour
        return web.json_response(b.health_body, status=b.health_status)

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": self.name, "object": "model", "max_model_len": self.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        b = self.behaviour
        try:
            if b.hang:
                await asyncio.sleep(3600)
            if b.status != 200:
                return web.json_response(b.error_body, status=b.status)
            if body.get("stream"):
                return await self._stream(request, body, b)
            text = " ".join(f"t{i}" for i in range(b.tokens))
            usage = {"prompt_tokens": 5, "completion_tokens": b.tokens, "total_tokens": 5 + b.tokens}
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if b.reasoning:
                message["reasoning_content"] = "thinking"
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            answer = {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice]}
            self.completed += 1
            return web.json_response({**answer, "usage": usage})
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _stream(self, request: web.Request, body: dict[str, Any], b: Behaviour) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        sep = b"\r\n\r\n" if b.crlf else b"\n\n"

        async def frame(payload: dict[str, Any] | bytes) -> None:
            data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
            await response.write(b"data: " + data + sep)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {"id": "x", "object": "chat.completion.chunk", "model": body["model"], "choices": [choice]}

        await frame(chunk({"role": "assistant", "content": ""}))
        for i in range(b.tokens):
            if b.comments:
                await response.write(b": keep-alive" + sep)
            if b.error_after is not None and i == b.error_after:
                await frame({"error": {"message": "engine failed", "type": "server_error", "code": 500}})
                return response
            if b.drop_after is not None and i == b.drop_after:
                assert request.transport is not None
                request.transport.close()
                return response
            key = "reasoning_content" if b.reasoning and i == 0 else "content"
            await frame(chunk({key: f"t{i} "}))
            if b.gap_s:
                await asyncio.sleep(b.gap_s)
        await frame(chunk({}, "stop"))
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            usage = {"prompt_tokens": 5, "completion_tokens": b.tokens, "total_tokens": 5 + b.tokens}
            await frame({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        await frame(b"[DONE]")
        self.completed += 1
        return response


def settings_for(urls: dict[str, str], **extra: Any) -> Settings:
    backends = [{"name": name, "url": url, "flavor": "vllm"} for name, url in urls.items()]
    data: dict[str, Any] = {
        "backends": backends,
        "pools": [{"model": "m", "aliases": ["m-alias"], "backends": list(urls)}],
        "probe": {"interval_s": 0.05, "starting_interval_s": 0.05, "timeout_s": 1.0},
        "timeouts": {"connect_s": 1.0, "first_byte_s": 2.0, "idle_s": 2.0},
    }
    data.update(extra)
    return Settings(**data)


def reliable_dispatcher(
    settings: Settings, handler: MockHandler, max_attempts: int = 2
) -> tuple[Dispatcher, Registry, Reliability, list[RequestRecord]]:
    """A dispatcher over `handler` with admission, breakers and the hang watch, every backend ready, and
    the records it finishes."""
    registry = Registry(settings)
    warmups = Warmups(registry, None)
    reliability = Reliability(settings, warmups)
    registry.listeners += [reliability.on_status, warmups.on_status]
    for name in registry.backends:
        registry.set_status(name, Status.READY)
    records: list[RequestRecord] = []
    dispatcher = Dispatcher(
        registry, MockTransport(handler), max_attempts, observers=[records.append], reliability=reliability
    )
    return dispatcher, registry, reliability, records


@asynccontextmanager
async def running_gateway(
    settings: Settings, wait_ready: bool = True, **kw: Any
) -> AsyncIterator[tuple[str, Gateway]]:
    gateway = build_gateway(settings, **kw)
    async with serve_asgi(build_app(gateway)) as (url, _):
        if wait_ready:
            async with asyncio.timeout(10):
                await wait_until_ready(url)
        yield url, gateway


async def wait_until_ready(url: str, timeout: float = 10.0) -> None:
    async with aiohttp.ClientSession() as session, asyncio.timeout(timeout):
        while True:
            async with session.get(url + "/ready") as response:
                if response.status == 200:
                    return
            await asyncio.sleep(0.02)


class AsgiClient:
    """ASGI receive/send of a client that never disconnects and collects what is sent to it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> MutableMapping[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))
