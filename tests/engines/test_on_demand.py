"""The request path's view of engines (EngineManager.on_request), with a stand-in Docker API: a stopped
engine is started only when nothing of its model can serve now, and shows as warming up meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines import labels
from gateway.engines.docker_api import Container
from gateway.engines.manager import EngineManager
from gateway.settings import EngineConfig, Settings


class FakeApi:
    """Records what it is asked; its containers never answer, and nothing else touches them. It lists the
    containers it created, running or not, as the real API does: a listing that forgot them would tell the
    manager its engine exited."""

    def __init__(self, url: str | None) -> None:
        self.calls: list[str] = []
        self.created: set[str] = set()
        self.specs: dict[str, EngineConfig] = {}
        self.running: set[str] = set()
        self.stopping = threading.Event()  # set while a stop is asked and not yet let through
        self.let_stop = threading.Event()

    def labelled(self) -> list[Container]:
        return [Container(i, i, i in self.running, labels.of_engine(spec)) for i, spec in self.specs.items()]

    def exists(self, container_id: str) -> bool:
        return container_id in self.created

    def create(self, engine: EngineConfig) -> str:
        self.calls.append(f"create {engine.name}")
        self.created.add(f"id-{engine.name}")
        self.specs[f"id-{engine.name}"] = engine
        return f"id-{engine.name}"

    def stop(self, container_id: str, timeout_s: float) -> None:
        self.stopping.set()
        self.let_stop.wait(10)
        self.running.discard(container_id)
        self.calls.append(f"stop {container_id}")

    def start(self, container_id: str) -> None:
        self.running.add(container_id)
        self.calls.append(f"start {container_id}")

    def follow_events(self, on_event: Callable[[str, str], None], stop: threading.Event) -> None:
        stop.wait()

    def close(self) -> None:
        pass


async def _never(url: str, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
    raise ConnectionRefusedError


def _manager(settings: Settings) -> tuple[EngineManager, Registry]:
    registry = Registry(settings)
    prober = Prober(registry, settings.probe, _never)
    manager = EngineManager(settings, registry, prober, api=FakeApi)  # type: ignore[arg-type]
    registry.listeners.append(manager.on_status)
    return manager, registry


def _settings(*more: dict[str, Any], **fields: Any) -> Settings:
    engine = {"name": "e", "model": "m", "image": "img", "port": 9, "memory_gib": 10, "idle_ttl_s": None}
    return Settings.model_validate({"engines": [engine, *more], **fields})


async def test_a_stopped_engine_is_left_stopped_while_another_backend_of_its_model_serves() -> None:
    backends = [{"name": "static", "url": "http://127.0.0.1:1"}]
    settings = _settings(backends=backends, pools=[{"model": "m", "backends": ["static"]}])
    manager, registry = _manager(settings)
    await manager.start()
    try:
        pool = registry.pool("m")
        assert pool is not None and pool.backends == ("static", "e")
        registry.set_status("static", Status.READY)
        seen = {s.name: s for s in manager.on_request(registry.snapshots(pool))}
        assert not seen["e"].ready and not seen["e"].starting  # hidden, not started
        assert str(manager.engines["e"].phase) == "stopped"
        registry.set_status("static", Status.DEAD)
        seen = {s.name: s for s in manager.on_request(registry.snapshots(pool))}
        assert seen["e"].starting and not seen["e"].ready  # started: the request may wait for it
        assert await manager.engines["e"].op  # type: ignore[misc]
        api = manager.api
        assert isinstance(api, FakeApi) and api.calls == ["create e", "start id-e"]
        assert manager.starts["e"] == 1
    finally:
        await manager.stop()


async def test_a_start_that_cannot_fit_leaves_the_engine_stopped_with_the_reason() -> None:
    pinned = {"name": "pinned", "model": "p", "image": "img", "port": 10, "memory_gib": 5, "pinned": True}
    manager, registry = _manager(_settings(pinned, devices={"spark": {"memory_gib": 10}}))
    await manager.start()
    try:
        assert await manager.request_start("pinned")
        assert not await manager.request_start("e")
        assert str(manager.engines["e"].phase) == "stopped"
        assert "do not fit" in manager.engines["e"].detail
        assert registry.backends["e"].status is Status.DEAD
    finally:
        await manager.stop()


async def test_a_request_that_comes_while_its_engine_stops_starts_it_again() -> None:
    manager, registry = _manager(_settings())
    await manager.start()
    try:
        api = manager.api
        assert isinstance(api, FakeApi)
        assert await manager.request_start("e")
        registry.set_status("e", Status.READY)  # as its probe would
        assert str(manager.engines["e"].phase) == "running"
        stop = manager.request_stop("e", "admin")
        await asyncio.to_thread(api.stopping.wait, 10)
        pool = registry.pool("m")
        assert pool is not None
        (seen,) = manager.on_request(registry.snapshots(pool))
        assert seen.starting and not seen.ready  # worth waiting for: it comes back
        assert registry.backends["e"].status is Status.DEAD  # no admission slot while it stops
        api.let_stop.set()
        assert await stop
        await asyncio.sleep(0)  # the start queued behind the stop
        op = manager.engines["e"].op
        assert op is not None and op is not stop and await op
        assert api.calls == ["create e", "start id-e", "stop id-e", "start id-e"]
        assert manager.stops[("e", "admin")] == 1 and manager.starts["e"] == 2
    finally:
        if isinstance(manager.api, FakeApi):
            manager.api.let_stop.set()
        await manager.stop()


class UnreachableApi(FakeApi):
    """The Docker API is down until `up` is set."""

    up = threading.Event()
    refused = threading.Event()  # set at each refused listing

    def labelled(self) -> list[Container]:
        if not self.up.is_set():
            self.refused.set()
            raise ConnectionRefusedError("no Docker API")
        return []


async def test_a_docker_api_down_at_start_leaves_the_gateway_up_and_is_listed_again_later() -> None:
    registry = Registry(_settings())
    prober = Prober(registry, _settings().probe, _never)
    manager = EngineManager(_settings(), registry, prober, api=UnreachableApi)  # type: ignore[arg-type]
    UnreachableApi.up.clear()
    await manager.start()  # does not raise
    try:
        assert "e" in registry.backends  # managed engines are backends all the same
        assert UnreachableApi.refused.is_set()
        UnreachableApi.refused.clear()
        assert await asyncio.to_thread(UnreachableApi.refused.wait, 5)  # the sync loop tried again
        listed = asyncio.Event()
        original = manager.follower.sync

        async def sync() -> None:
            await original()
            listed.set()

        manager.follower.sync = sync  # type: ignore[method-assign]
        UnreachableApi.up.set()
        await asyncio.wait_for(listed.wait(), 5)  # retried within seconds, not resync_s (30 s)
    finally:
        await manager.stop()


class StaleListingApi(FakeApi):
    """While `hold` is set, a listing is taken at once and handed back only when `release` is set: what
    a slow Docker API does when a start lands between the two."""

    def __init__(self, url: str | None) -> None:
        super().__init__(url)
        self.hold = threading.Event()
        self.taken = threading.Event()
        self.release = threading.Event()

        self.starting = threading.Event()  # set while a start is asked and not yet let through
        self.let_start = threading.Event()
        self.let_start.set()

    def labelled(self) -> list[Container]:
        listing = super().labelled()
        if self.hold.is_set():
            self.taken.set()
            self.release.wait(10)
        return listing

    def start(self, container_id: str) -> None:
        self.starting.set()
        self.let_start.wait(10)
        super().start(container_id)


@contextlib.asynccontextmanager
async def stale_listings() -> AsyncIterator[tuple[EngineManager, Registry, StaleListingApi]]:
    """A started manager over a StaleListingApi; every hold released and the manager stopped after."""
    settings = _settings()
    registry = Registry(settings)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=StaleListingApi)  # type: ignore[arg-type]
    await manager.start()
    api = manager.api
    assert isinstance(api, StaleListingApi)
    try:
        yield manager, registry, api
    finally:
        api.let_start.set()
        api.release.set()
        await manager.stop()


async def test_a_listing_asked_before_a_start_does_not_call_the_started_engine_exited() -> None:
    async with stale_listings() as (manager, registry, api):
        api.hold.set()
        listing = asyncio.create_task(manager.follower.sync())
        await asyncio.to_thread(api.taken.wait, 10)  # it lists no container of e
        api.hold.clear()
        assert await manager.request_start("e")
        assert registry.backends["e"].status is Status.STARTING
        api.release.set()
        await listing
        assert str(manager.engines["e"].phase) == "starting"  # not "stopped (exited)"
        assert registry.backends["e"].status is Status.STARTING  # still worth waiting for
        assert not manager.stops
        await manager.follower.sync()  # a listing asked after the start sees its container
        assert manager.engines["e"].container_id == "id-e"


async def test_a_listing_asked_while_a_start_is_under_way_does_not_call_the_started_engine_exited() -> None:
    async with stale_listings() as (manager, registry, api):
        api.let_start.clear()
        start = manager.request_start("e")
        await asyncio.to_thread(api.starting.wait, 10)  # created, not yet started: listed as stopped
        api.hold.set()
        listing = asyncio.create_task(manager.follower.sync())
        await asyncio.to_thread(api.taken.wait, 10)
        api.hold.clear()
        api.let_start.set()
        assert await start
        api.release.set()
        await listing
        assert str(manager.engines["e"].phase) == "starting"  # not "stopped (exited)"
        assert registry.backends["e"].status is Status.STARTING
        assert not manager.stops
