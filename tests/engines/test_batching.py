"""A start that must evict first gathers the requests for its model (`engine_control.batch_wait_s`):
it evicts once they outweigh what the eviction costs the victims' clients, or once the bounded wait is
over, and never while only a busy engine could make room. A stand-in Docker API, a hand-driven clock."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines import labels
from gateway.engines.docker_api import Container
from gateway.engines.manager import EngineManager
from gateway.settings import EngineConfig, Settings
from tests.engines.test_on_demand import FakeApi, _never


class ListingApi(FakeApi):
    """Lists the containers it started as running, as the Docker API would."""

    def __init__(self, url: str | None) -> None:
        super().__init__(url)
        self.specs: dict[str, EngineConfig] = {}
        self.running: set[str] = set()

    def create(self, engine: EngineConfig) -> str:
        self.specs[f"id-{engine.name}"] = engine
        return super().create(engine)

    def start(self, container_id: str) -> None:
        self.running.add(container_id)
        super().start(container_id)

    def stop(self, container_id: str, timeout_s: float) -> None:
        super().stop(container_id, timeout_s)
        self.running.discard(container_id)

    def labelled(self) -> list[Container]:
        return [Container(i, i, i in self.running, labels.of_engine(spec)) for i, spec in self.specs.items()]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _engine(name: str) -> dict[str, Any]:
    port = 9000 + ord(name)
    return {
        "name": name,
        "model": f"m-{name}",
        "image": "img",
        "port": port,
        "memory_gib": 10,
        "warmup_s": 60.0,
    }


async def _rig(clock: Clock) -> tuple[EngineManager, Registry]:
    settings = Settings(
        engines=[_engine("a"), _engine("b"), _engine("c")],
        devices={"spark": {"memory_gib": 20}},
        engine_control={"batch_wait_s": 300.0, "min_residency_s": 0.0},
    )
    settings = settings.model_copy(
        update={"engines": [e.model_copy(update={"device": "spark"}) for e in settings.engines]}
    )
    registry = Registry(settings, clock=clock)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=ListingApi)  # type: ignore[arg-type]
    registry.listeners.append(manager.on_status)
    await manager.start()
    api = manager.api
    assert isinstance(api, ListingApi)
    api.let_stop.set()
    for name in ("a", "b"):
        assert await manager.request_start(name, batch=False)
        clock.now += 60.0  # its cold start
        registry.set_status(name, Status.READY)
    return manager, registry


def _ask(manager: EngineManager, registry: Registry, model: str, times: int) -> None:
    pool = registry.pool(model)
    assert pool is not None
    for _ in range(times):
        manager.on_request(registry.snapshots(pool))


def _stops(manager: EngineManager) -> list[str]:
    api = manager.api
    assert isinstance(api, FakeApi)
    return [call for call in api.calls if call.startswith("stop")]


async def test_one_request_for_a_third_model_waits_for_company_or_the_bound_before_a_swap() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)
    try:
        _ask(manager, registry, "m-a", 20)  # a and b are in demand: evicting one costs its clients
        _ask(manager, registry, "m-b", 5)
        start = manager.request_start("c")
        await asyncio.sleep(1.2)  # a few looks at it
        assert _stops(manager) == [] and "gathering" in manager.engines["c"].detail
        clock.now += 301.0  # the bound: the swap goes ahead, evicting the cheaper one
        assert await asyncio.wait_for(start, 5)
        assert _stops(manager) == ["stop id-b"]
        assert manager.api is not None and "start id-c" in manager.api.calls  # type: ignore[attr-defined]
    finally:
        await manager.stop()


async def test_enough_requests_waiting_make_the_swap_before_the_bound() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)
    try:
        _ask(manager, registry, "m-a", 10)
        _ask(manager, registry, "m-b", 5)
        start = manager.request_start("c")
        await asyncio.sleep(0.7)
        assert _stops(manager) == []
        clock.now += 30.0
        _ask(manager, registry, "m-c", 10)  # a batch for c: its waiting now outweighs b's clients'
        assert await asyncio.wait_for(start, 5)
        assert _stops(manager) == ["stop id-b"]
    finally:
        await manager.stop()


async def test_a_busy_engine_is_not_evicted_while_the_bound_lasts() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)
    try:
        registry.inflight.add("a")
        registry.inflight.add("b")
        start = manager.request_start("c")
        _ask(manager, registry, "m-c", 50)  # worth a swap, but both residents are serving
        await asyncio.sleep(1.2)
        assert _stops(manager) == []
        registry.inflight.remove("b")  # b idle: evicted at the next look
        assert await asyncio.wait_for(start, 5)
        assert _stops(manager) == ["stop id-b"]
    finally:
        await manager.stop()
