"""A start that must evict first gathers the requests for its model (`engine_control.batch_wait_s`):
it evicts once they outweigh what the eviction costs the victims' clients, or once the bounded wait is
over, and never while only a busy engine could make room. A stand-in Docker API, a hand-driven clock."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warmups
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
    settings = Settings.model_validate(
        {
            "engines": [_engine("a"), _engine("b"), _engine("c")],
            "devices": {"spark": {"memory_gib": 20}},
            "engine_control": {"batch_wait_s": 300.0, "min_residency_s": 0.0},
        }
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


async def test_a_start_only_pinned_engines_stand_in_the_way_of_fails_at_once() -> None:
    clock = Clock()
    pinned = {**_engine("a"), "pinned": True, "memory_gib": 15}
    settings = Settings.model_validate(
        {
            "engines": [pinned, _engine("c")],
            "devices": {"spark": {"memory_gib": 20}},
            "engine_control": {"batch_wait_s": 300.0, "min_residency_s": 0.0},
        }
    )
    registry = Registry(settings, clock=clock)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=ListingApi)  # type: ignore[arg-type]
    await manager.start()
    try:
        assert await manager.request_start("a", batch=False)
        # Gathering would change nothing: the start fails now with the reason, not at the bound.
        assert not await asyncio.wait_for(manager.request_start("c"), 2)
        assert "do not fit" in manager.engines["c"].detail
    finally:
        await manager.stop()


async def test_past_the_bound_the_swap_takes_the_first_idle_moment_before_draining_a_busy_engine() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)
    try:
        _ask(manager, registry, "m-a", 20)  # a costs more to lose than b
        registry.inflight.add("a")
        registry.inflight.add("b")
        start = manager.request_start("c")
        clock.now += 301.0  # past the bound, both still serving: no drain yet
        await asyncio.sleep(1.2)
        assert _stops(manager) == []
        registry.inflight.remove("a")  # the first idle moment: a goes, though b is cheaper
        assert await asyncio.wait_for(start, 5)
        assert _stops(manager) == ["stop id-a"]
    finally:
        await manager.stop()


async def test_an_engine_is_held_until_the_clients_told_to_come_back_for_it_are_due() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)  # a and b became ready at their expected 60 s cold start
    try:
        assert await manager.request_stop("b", "test")
        start_b = manager.request_start("b", batch=False)
        assert await start_b
        registry.promise("b", clock.now + 60.0)  # a waiting request was told to come back then
        clock.now += 20.0  # ready early: that client is due 40 s from now
        registry.set_status("b", Status.READY)
        _ask(manager, registry, "m-a", 20)  # a costs more to lose than b
        room = manager.lifecycle.room
        held = [r.name for r in room.residents(manager.engines["c"], clock.now) if r.serving_s < 0]
        assert held == ["b"]
        assert room.plan(manager.engines["c"]).evict == ("a",)  # the one not promised to anyone
        clock.now += 41.0  # they are due: b may go (the cheaper, both idle)
        assert room.plan(manager.engines["c"]).evict == ("b",)
    finally:
        await manager.stop()


async def test_a_gathered_start_tells_waiting_requests_the_cold_start_from_the_container_start() -> None:
    clock = Clock()
    manager, registry = await _rig(clock)
    try:
        warmups = Warmups(registry, None)
        _ask(manager, registry, "m-a", 20)  # a and b are in demand: c's start gathers requests first
        _ask(manager, registry, "m-b", 5)
        start = manager.request_start("c")
        await asyncio.sleep(0.6)
        clock.now += 301.0  # gathered up to the bound: the swap goes ahead now
        assert await asyncio.wait_for(start, 5)
        warming = warmups.warming("c")
        assert warming is not None and registry.backends["c"].status is Status.STARTING
        # Not 60 s counted from the gathering's start (already past: "expected 241 s ago"), nor a startup
        # grace spent while the start waited for room.
        assert (warming.elapsed_s, warming.eta_s) == (0.0, 60.0)
    finally:
        await manager.stop()
