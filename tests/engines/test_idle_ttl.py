"""An engine's idle TTL counts from the end of its last answer, not its arrival: an answer longer than
the TTL does not get its engine stopped the moment it ends. A stand-in Docker API, a hand-driven clock."""

from __future__ import annotations

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines.manager import EngineManager
from gateway.records import RequestRecord
from gateway.settings import Settings
from tests.engines.test_on_demand import FakeApi, _never


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_idle_ttl_runs_from_the_end_of_the_last_answer() -> None:
    engine = {"name": "e", "model": "m", "image": "img", "port": 9, "memory_gib": 10, "idle_ttl_s": 10.0}
    settings = Settings.model_validate({"engines": [engine]})
    clock = Clock()
    registry = Registry(settings, clock=clock)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=FakeApi)  # type: ignore[arg-type]
    registry.listeners.append(manager.on_status)
    await manager.start()
    try:
        assert await manager.request_start("e")
        registry.set_status("e", Status.READY)
        pool = registry.pool("m")
        assert pool is not None
        manager.on_request(registry.snapshots(pool))  # a request arrives...
        clock.now += 60.0  # ...and is answered a minute later
        manager.observe(RequestRecord("r", "m", "chat", "default", True, backend="e", status=200, e2e=60.0))
        clock.now += 5.0
        assert not manager.lifecycle.idle(manager.engines["e"])  # 5 s since the answer, not 65 since it came
        clock.now += 6.0
        assert manager.lifecycle.idle(manager.engines["e"])
    finally:
        await manager.stop()
