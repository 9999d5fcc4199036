"""/health, /ready, /metrics and /gateway/backends on a running gateway."""

from __future__ import annotations

import aiohttp
from gateway_fakes import FakeEngine, running_gateway, settings_for


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_health_answers_while_no_backend_is_ready(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.health_status = 503
    async with running_gateway(settings_for({"a": engines[0].url}), wait_ready=False) as (url, _):
        assert (await get(url + "/health"))[0] == 200
        status, body = await get(url + "/ready")
    assert status == 503 and '"m":false' in body


async def test_ready_once_every_pool_has_a_ready_backend(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, body = await get(url + "/ready")
    assert status == 200 and '"ready":true' in body


async def test_metrics_is_prometheus_text_with_backend_gauges(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, body = await get(url + "/metrics")
    assert status == 200
    assert 'gateway_backend_ready{backend="a"} 1.0' in body


async def test_backends_route_shows_state_and_pools(engines: list[FakeEngine]) -> None:
    async with (
        running_gateway(settings_for({"a": engines[0].url})) as (url, _),
        aiohttp.ClientSession() as session,
        session.get(url + "/gateway/backends") as response,
    ):
        body = await response.json()
    assert body["backends"][0]["status"] == "ready" and body["backends"][0]["context_length"] == 4096
    assert body["pools"][0] == {
        "model": "m",
        "aliases": ["m-alias"],
        "backends": ["a"],
        "ready": True,
        "max_model_len": 4096,
    }
