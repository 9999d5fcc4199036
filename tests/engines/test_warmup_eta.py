"""A request waiting for an engine the gateway started is told the time left of its warm-up (the
Retry-After of a 503 `backends_warming`), not the whole warm-up again at each look."""

from __future__ import annotations

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry
from gateway.backends.warmup import Warmups
from gateway.engines.manager import EngineManager
from gateway.settings import Settings
from tests.engines.test_on_demand import FakeApi, _never


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_eta_of_a_started_engine_is_the_time_left_of_its_warm_up() -> None:
    engine = {"name": "e", "model": "m", "image": "img", "port": 9, "memory_gib": 10, "warmup_s": 300.0}
    settings = Settings(engines=[engine])
    clock = Clock()
    registry = Registry(settings, clock=clock)
    warmups = Warmups(registry, None)  # made before the engine is a backend, as in the gateway
    registry.listeners.append(warmups.on_status)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=FakeApi)  # type: ignore[arg-type]
    registry.listeners.append(manager.on_status)
    await manager.start()
    try:
        clock.now += 3600.0  # stopped for an hour: that is no warm-up
        assert await manager.request_start("e")
        clock.now += 120.0
        view = warmups.warming("e")
        assert view is not None and view.expected_s == 300.0
        assert view.eta_s == 180.0
        clock.now += 400.0
        view = warmups.warming("e")
        assert view is not None and view.eta_s == 0.0 and view.overdue
    finally:
        await manager.stop()
