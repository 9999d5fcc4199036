"""Blame decided once, through a real gateway over two scripted engines: an engine's 500 is retried on a
second engine once; the same failure there makes it the client's input (a 400, no engine charged), a
success there makes it the first engine's (its breaker charged, as any failure). An engine's 4xx is the
client's at once: passed through, never failed over, never charged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from fault_rig import gateway_settings, serve_gateway
from loopback import serve_asgi
from scripted_engine import MODEL, POISON, ScriptedEngine

from gateway.app import Gateway
from gateway.backends.registry import Status

BAD = {"model": MODEL, "messages": [{"role": "user", "content": f"summarise {POISON}"}], "max_tokens": 8}
GOOD = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


@dataclass
class Pair:
    url: str
    gateway: Gateway
    engines: dict[str, ScriptedEngine]
    session: aiohttp.ClientSession

    async def post(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        async with self.session.post(self.url + "/v1/chat/completions", json=body) as response:
            raw = await response.read()
            return response.status, dict(response.headers), orjson.loads(raw) if raw else None

    async def breakers(self) -> dict[str, dict[str, Any]]:
        async with self.session.get(self.url + "/gateway/backends") as response:
            listed = orjson.loads(await response.read())["backends"]
        return {b["name"]: b["breaker"] for b in listed}


@asynccontextmanager
async def pair(a: ScriptedEngine, b: ScriptedEngine) -> AsyncIterator[Pair]:
    async with AsyncExitStack() as stack:
        urls = {}
        for engine in (a, b):
            urls[engine.name], _ = await stack.enter_async_context(serve_asgi(engine))
        url, gateway, _ = await stack.enter_async_context(serve_gateway(gateway_settings(urls)))
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20))
        await stack.enter_async_context(session)
        async with asyncio.timeout(5):
            while any(s.status is not Status.READY for s in gateway.registry.backends.values()):
                await asyncio.sleep(0.02)
        yield Pair(url, gateway, {a.name: a, b.name: b}, session)


async def test_the_same_500_from_both_engines_is_the_clients_400_and_charges_neither() -> None:
    async with pair(ScriptedEngine("a"), ScriptedEngine("b")) as p:
        # More bad requests than the breakers' consecutive-failure threshold (5): were each one charged
        # to both engines, both breakers would be open.
        answers = [await p.post(BAD) for _ in range(7)]
        breakers = await p.breakers()
        served = await p.post(GOOD)
    for status, headers, body in answers:
        assert status == 400, body
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["code"] == "engine_rejected_input"
        assert "engines rejected this input" in body["error"]["message"]
        assert "failed to process the input" in body["error"]["message"]  # the engine's own words
        assert headers["x-gateway-error-source"] == "gateway"
    # Each bad request was tried on both engines exactly once: a second opinion, no more.
    assert len(p.engines["a"].chat_bodies) + len(p.engines["b"].chat_bodies) == 2 * 7 + 1
    for name in ("a", "b"):
        assert breakers[name]["state"] == "closed"
        assert breakers[name]["consecutive_failures"] == 0
        assert breakers[name]["window_failures"] == 0
    assert served[0] == 200


async def test_a_500_from_one_engine_only_fails_over_and_charges_that_engine() -> None:
    async with pair(ScriptedEngine("a"), ScriptedEngine("b", poison_status=None)) as p:
        status, headers, body = await p.post(BAD)
        breakers = await p.breakers()
    assert status == 200 and headers["x-gateway-backend"] == "b", body
    assert body["choices"][0]["message"]["content"] == "hi from b"
    assert len(p.engines["a"].chat_bodies) == 1  # the least-busy router's first choice (pool order)
    assert breakers["a"]["consecutive_failures"] == 1 and breakers["a"]["window_failures"] == 1
    assert breakers["b"]["consecutive_failures"] == 0 and breakers["b"]["window_successes"] == 1


async def test_a_streamed_request_both_engines_fail_the_same_way_gets_a_400() -> None:
    async with pair(ScriptedEngine("a"), ScriptedEngine("b")) as p:
        status, _, body = await p.post({**BAD, "stream": True})
        breakers = await p.breakers()
    assert status == 400 and body["error"]["code"] == "engine_rejected_input"
    assert all(breakers[n]["consecutive_failures"] == 0 for n in ("a", "b"))


async def test_an_engine_4xx_is_the_clients_at_once_never_failed_over_nor_charged() -> None:
    async with pair(ScriptedEngine("a", poison_status=400), ScriptedEngine("b", poison_status=400)) as p:
        status, headers, body = await p.post(BAD)
        breakers = await p.breakers()
    assert status == 400 and headers["x-gateway-backend"] == "a"
    assert "failed to process the input" in body["error"]["message"]  # the engine's answer, as it was
    assert len(p.engines["b"].chat_bodies) == 0
    assert all(breakers[n]["consecutive_failures"] == 0 for n in ("a", "b"))


async def test_a_5xx_that_says_unavailable_is_failed_over_and_never_blamed_on_the_input() -> None:
    # 502/503/504 say the engine (or what stands in front of it) could not take the request: no
    # second-opinion verdict; the last one is passed through and each engine is charged.
    async with pair(ScriptedEngine("a", poison_status=502), ScriptedEngine("b", poison_status=502)) as p:
        status, _, _ = await p.post(BAD)
        breakers = await p.breakers()
    assert status == 502
    assert all(breakers[n]["consecutive_failures"] == 1 for n in ("a", "b"))


@asynccontextmanager
async def alone(engine: ScriptedEngine) -> AsyncIterator[Pair]:
    """A pool of one engine: no second engine to judge its 500s."""
    async with AsyncExitStack() as stack:
        url_a, _ = await stack.enter_async_context(serve_asgi(engine))
        url, gateway, _ = await stack.enter_async_context(
            serve_gateway(gateway_settings({engine.name: url_a}))
        )
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20))
        await stack.enter_async_context(session)
        async with asyncio.timeout(5):
            while any(s.status is not Status.READY for s in gateway.registry.backends.values()):
                await asyncio.sleep(0.02)
        yield Pair(url, gateway, {engine.name: engine}, session)


async def test_a_single_engine_keeps_serving_through_a_run_of_inputs_it_answers_500() -> None:
    async with alone(ScriptedEngine("a")) as p:
        assert (await p.post(GOOD))[0] == 200  # it serves
        bad = [await p.post(BAD) for _ in range(20)]  # four times the consecutive-failure threshold
        good = [await p.post(GOOD) for _ in range(5)]
        breakers = await p.breakers()
    assert all(status == 500 for status, _, _ in bad)  # the engine's answer, passed through
    assert [status for status, _, _ in good] == [200] * 5
    assert breakers["a"]["state"] == "closed" and breakers["a"]["consecutive_failures"] == 0


async def test_a_single_engine_that_serves_nothing_still_opens_its_breaker() -> None:
    async with alone(ScriptedEngine("a")) as p:
        bad = [await p.post(BAD) for _ in range(5)]  # no success ever: the engine, not the input
        breakers = await p.breakers()
    assert [status for status, _, _ in bad] == [500] * 5
    assert breakers["a"]["state"] == "open"
