"""A real gateway (uvicorn, ephemeral 127.0.0.1 port) in front of a twin fleet started in-process.

Every wait is bounded; the fleet and the gateway are always stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import uvicorn
from loopback import serve_asgi

from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Status
from gateway.settings import Settings
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec
from gateway.sim.runner import TwinFleet

MODEL = "m"
TIME_SCALE = 50.0  # simulated seconds per real second


def fleet_spec(*names: str, warmup_s: float = 0.0, **engine: Any) -> FleetSpec:
    """One vLLM-flavored engine per name, each on its own device so they never slow each other."""
    return FleetSpec(
        name="faults",
        devices={name: DeviceSpec() for name in names},
        engines=[
            EngineSpec(name=n, served_model_name=MODEL, device=n, warmup_s=warmup_s, seed=i, **engine)
            for i, n in enumerate(names)
        ],
    )


def gateway_settings(
    urls: dict[str, str], concurrency: dict[str, int] | None = None, **extra: Any
) -> Settings:
    limits = concurrency or {}
    data: dict[str, Any] = {
        "backends": [
            {"name": n, "url": u, "flavor": "vllm", "max_concurrency": limits.get(n)} for n, u in urls.items()
        ],
        "pools": [{"model": MODEL, "backends": list(urls)}],
        "probe": {"interval_s": 0.1, "starting_interval_s": 0.05, "timeout_s": 0.5},
        "timeouts": {"connect_s": 0.5, "first_byte_s": 1.0, "idle_s": 1.0},
        "breaker": {"cooldown_s": 30.0},
    }
    for key, value in extra.items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    return Settings(**data)


@dataclass
class Rig:
    url: str
    gateway: Gateway
    fleet: TwinFleet
    session: aiohttp.ClientSession

    async def chat(self, *, stream: bool = False, max_tokens: int = 8, **extra: Any) -> Answer:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens,
            "stream": stream,
            **extra,
        }
        started = time.monotonic()
        async with self.session.post(self.url + "/v1/chat/completions", json=body) as response:
            raw = await response.read()
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Answer(response.status, headers, raw, time.monotonic() - started)

    async def get_json(self, path: str) -> Any:
        async with self.session.get(self.url + path) as response:
            return orjson.loads(await response.read())

    async def metrics(self) -> str:
        async with self.session.get(self.url + "/metrics") as response:
            return await response.text()

    async def wait_status(self, backend: str, status: Status, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while self.gateway.registry.backends[backend].status is not status:
                await asyncio.sleep(0.02)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    raw: bytes
    seconds: float

    def json(self) -> Any:
        return orjson.loads(self.raw)

    @property
    def backend(self) -> str:
        return self.headers.get("x-gateway-backend", "")

    @property
    def stream_ok(self) -> bool:
        return (
            self.status == 200 and self.raw.rstrip().endswith(b"data: [DONE]") and b'"error"' not in self.raw
        )


@asynccontextmanager
async def serve_gateway(settings: Settings) -> AsyncIterator[tuple[str, Gateway, uvicorn.Server]]:
    gateway = build_gateway(settings)
    async with serve_asgi(build_app(gateway)) as (url, server):
        yield url, gateway, server


@asynccontextmanager
async def rig(spec: FleetSpec, wait_ready: bool = True, **settings: Any) -> AsyncIterator[Rig]:
    async with TwinFleet(spec, time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
        if wait_ready:
            await fleet.wait_ready(10)
        urls = {name: fleet.url(name) for name in fleet.names}
        async with (
            serve_gateway(gateway_settings(urls, **settings)) as (url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            r = Rig(url, gateway, fleet, session)
            if wait_ready:
                for name in fleet.names:
                    await r.wait_status(name, Status.READY)
            yield r
