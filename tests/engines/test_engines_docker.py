"""Engines on demand against a real Docker Engine API (podman's): discovery by labels, start on the first
request, stop after the idle TTL, eviction to fit a memory budget, no eviction of a busy engine, and
recovery when a container is killed or removed by hand. Every test is bounded by BOUND_S."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from engine_rig import IMAGE, REPO, Podman, engine, free_port, gateway_settings, twin_command, twin_volumes
from loopback import serve_asgi

from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Status
from gateway.cli import main as cli
from gateway.engines import labels

BOUND_S = 40.0


@asynccontextmanager
async def serving(settings: Any) -> AsyncIterator[tuple[str, Gateway, aiohttp.ClientSession]]:
    gateway = build_gateway(settings)
    async with (
        asyncio.timeout(BOUND_S),
        serve_asgi(build_app(gateway)) as (url, _),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=BOUND_S)) as session,
    ):
        yield url, gateway, session


async def chat(session: aiohttp.ClientSession, url: str, model: str, max_tokens: int = 8) -> tuple[int, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens}
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        await response.read()
        return response.status, response.headers.get("x-gateway-backend", "")


async def until(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def engines_view(session: aiohttp.ClientSession, url: str) -> dict[str, dict[str, Any]]:
    async with session.get(url + "/gateway/engines") as response:
        assert response.status == 200
        return {e["name"]: e for e in (await response.json())["engines"]}


async def metrics(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as response:
        return await response.text()


async def test_discovery_by_labels_follows_containers_started_stopped_and_removed_by_hand(
    podman: Podman,
) -> None:
    name, model, port = f"found{podman.token}", f"m-found-{podman.token}", free_port()
    client = podman.client()
    container = client.containers.run(
        IMAGE,
        twin_command(podman.folder, name, model, port),
        name=f"by-hand-{podman.token}",
        detach=True,
        labels={labels.BACKEND: name, labels.MODEL: model, labels.PORT: str(port), labels.MEMORY_GB: "4"},
        volumes={host: {"bind": host, "mode": "ro"} for host in twin_volumes(podman.folder)},
        working_dir=str(REPO),
        network_mode="host",
        init=True,
    )
    async with serving(gateway_settings(podman)) as (url, gateway, session):
        registry = gateway.registry
        # Found by its labels, probed to ready, routed to: no backend in the config.
        await until(lambda: name in registry.backends, "the labelled container is a backend")
        await until(lambda: registry.backends[name].status is Status.READY, "it is ready")
        assert await chat(session, url, model) == (200, name)
        # Stopped by hand: the event stream says so well before the next full listing (resync_s).
        await asyncio.to_thread(container.stop, timeout=2)
        manager = gateway.engines
        assert manager is not None
        await until(lambda: str(manager.engines[name].phase) == "stopped", "its stop is seen", 4.0)
        assert registry.backends[name].status is Status.DEAD
        assert (await engines_view(session, url))[name]["phase"] == "stopped"
        # Removed by hand: it is no backend any more, and its model is gone with it.
        await asyncio.to_thread(container.remove, force=True)
        await until(lambda: name not in registry.backends, "its removal is seen", 4.0)
        assert registry.pool(model) is None


async def test_a_stopped_engine_starts_on_the_first_request_and_stops_after_its_idle_ttl(
    podman: Podman,
) -> None:
    name, model = f"lazy{podman.token}", f"m-lazy-{podman.token}"
    settings = gateway_settings(podman, [engine(podman, name, model, idle_ttl_s=1.5)])
    async with serving(settings) as (url, gateway, session):
        before = await engines_view(session, url)
        assert before[name]["phase"] == "stopped" and before[name]["container"] is None
        # The first request waits for the container to be created, started and warmed up.
        assert await chat(session, url, model) == (200, name)
        after = await engines_view(session, url)
        assert after[name]["phase"] == "running" and after[name]["starts"] == 1
        assert after[name]["cold_start_s"] is not None
        # No request for its TTL: stopped, counted with its reason.
        manager = gateway.engines
        assert manager is not None
        await until(lambda: str(manager.engines[name].phase) == "stopped", "the idle stop", 10.0)
        stopped_at = gateway.registry.backends[name].since  # its status went to dead when it stopped
        assert stopped_at - manager.engines[name].last_request >= 1.5  # not before its TTL
        text = await metrics(session, url)
        assert f'gateway_engine_stops_total{{engine="{name}",reason="idle"}} 1.0' in text
        assert f'gateway_engine_starts_total{{engine="{name}"}} 1.0' in text
        # And the next request brings it back.
        assert await chat(session, url, model) == (200, name)


async def test_a_start_that_does_not_fit_evicts_the_cheapest_idle_engine(podman: Podman) -> None:
    a, b, c = (f"{x}{podman.token}" for x in "abc")
    models = {n: f"m-{n}" for n in (a, b, c)}
    specs = [
        engine(podman, a, models[a], memory_gib=5),
        engine(podman, b, models[b], memory_gib=5),
        engine(podman, c, models[c], memory_gib=5),
    ]
    settings = gateway_settings(podman, specs, devices={"spark": {"memory_gib": 11}})
    async with serving(settings) as (url, gateway, session):
        manager = gateway.engines
        assert manager is not None
        assert await chat(session, url, models[a]) == (200, a)
        for _ in range(5):  # a is in demand, b is not: b is the cheaper one to lose
            assert await chat(session, url, models[a]) == (200, a)
        assert await chat(session, url, models[b]) == (200, b)
        assert manager.resident_gib("spark") == 10
        assert await chat(session, url, models[c]) == (200, c)
        phases = {n: str(manager.engines[n].phase) for n in (a, b, c)}
        assert phases == {a: "running", b: "stopped", c: "running"}
        assert manager.resident_gib("spark") <= 11
        text = await metrics(session, url)
        assert f'gateway_engine_stops_total{{engine="{b}",reason="evicted"}} 1.0' in text
        assert 'gateway_engine_resident_memory_gib{device="spark",kind="resident"} 10.0' in text


async def test_an_engine_with_requests_in_flight_is_never_evicted(podman: Podman) -> None:
    a, b = f"busy{podman.token}", f"next{podman.token}"
    # Model names of this session only: a gateway finds every labelled container, other sessions' too.
    busy, following = f"m-busy-{podman.token}", f"m-next-{podman.token}"
    specs = [engine(podman, a, busy, memory_gib=8), engine(podman, b, following, memory_gib=8)]
    control = {"drain_timeout_s": 0.5}
    settings = gateway_settings(podman, specs, devices={"spark": {"memory_gib": 10}}, engine_control=control)
    async with serving(settings) as (url, gateway, session):
        manager = gateway.engines
        assert manager is not None
        assert await chat(session, url, busy) == (200, a)
        # A long answer in flight on a; meanwhile b is asked for and does not fit beside it.
        long = asyncio.create_task(chat(session, url, busy, max_tokens=1500))
        await until(lambda: gateway.registry.inflight[a] > 0, "the long request is in flight")
        async with session.post(url + f"/gateway/engines/{b}/start") as response:
            assert response.status == 409  # a was drained for 0.5 s, still serving: kept, b not started
            assert "in flight" in (await response.json())["engine"]["detail"]
        assert str(manager.engines[a].phase) == "running"
        assert gateway.registry.inflight[a] > 0  # the drain deadline passed before the answer ended
        assert await long == (200, a)  # the answer in flight ran to its end on a
        # Idle now: a is evicted and b starts.
        assert await chat(session, url, following) == (200, b)
        assert str(manager.engines[a].phase) == "stopped"


async def test_an_engine_killed_or_removed_by_hand_comes_back_on_the_next_request(podman: Podman) -> None:
    name, model = f"phoenix{podman.token}", f"m-phoenix-{podman.token}"
    async with serving(gateway_settings(podman, [engine(podman, name, model)])) as (url, gateway, session):
        manager = gateway.engines
        assert manager is not None
        assert await chat(session, url, model) == (200, name)
        client = podman.client()
        first = manager.engines[name].container_id
        await asyncio.to_thread(client.containers.get(first).kill)
        await until(lambda: str(manager.engines[name].phase) == "stopped", "the kill is seen", 4.0)
        assert await chat(session, url, model) == (200, name)  # started again
        assert manager.engines[name].container_id == first
        await asyncio.to_thread(client.containers.get(first).remove, force=True)
        await until(lambda: manager.engines[name].container_id is None, "the removal is seen", 4.0)
        assert await chat(session, url, model) == (200, name)  # a new container
        assert manager.engines[name].container_id not in (None, first)
        stops = await metrics(session, url)
        assert f'gateway_engine_stops_total{{engine="{name}",reason="exited"}} 2.0' in stops


async def test_the_command_line_lists_stops_and_starts_engines(
    podman: Podman, capsys: pytest.CaptureFixture[str]
) -> None:
    name, model = f"cli{podman.token}", f"m-cli-{podman.token}"
    async with serving(gateway_settings(podman, [engine(podman, name, model)])) as (url, gateway, session):
        manager = gateway.engines
        assert manager is not None
        assert await asyncio.to_thread(cli, ["engines", "start", name, "--url", url]) == 0
        assert manager.engines[name].container_id is not None and manager.starts[name] == 1
        assert await chat(session, url, model) == (200, name)
        assert await asyncio.to_thread(cli, ["engines", "stop", name, "--url", url]) == 0
        assert str(manager.engines[name].phase) == "stopped"
        capsys.readouterr()
        assert await asyncio.to_thread(cli, ["engines", "list", "--url", url]) == 0
        listing = capsys.readouterr().out.splitlines()
        assert listing[0].split()[:3] == ["name", "model", "phase"]
        assert listing[1].split()[:3] == [name, model, "stopped"]
        assert await asyncio.to_thread(cli, ["engines", "stop", "nope", "--url", url]) == 1
        assert f'gateway_engine_stops_total{{engine="{name}",reason="admin"}} 1.0' in await metrics(
            session, url
        )


async def test_a_start_longer_than_the_warming_wait_is_answered_with_its_eta(podman: Podman) -> None:
    name, model = f"slow{podman.token}", f"m-slow-{podman.token}"
    spec = engine(podman, name, model, warmup_s=4)
    queue = {"timeout_s": 20, "warming_wait_s": 0.2}
    async with serving(gateway_settings(podman, [spec], queue=queue)) as (url, gateway, session):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.status == 503
            assert (await response.json())["error"]["code"] == "backends_warming"
            assert response.headers["retry-after"] == "4"  # its warm-up budget, not yet measured
        manager = gateway.engines
        assert manager is not None
        await until(lambda: str(manager.engines[name].phase) == "running", "the start the request began")
        assert await chat(session, url, model) == (200, name)
