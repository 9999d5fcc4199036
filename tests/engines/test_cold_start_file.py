"""Measured cold starts of engines survive a restart (engines/cold_starts.py): a new manager over the same
state directory expects the last measured ones, not the declared warm-up, for the same engine only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines.cold_starts import FILE_NAME
from gateway.engines.manager import EngineManager
from gateway.settings import Settings
from tests.engines.test_on_demand import FakeApi, _never


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _settings(state_dir: Path, **engine: Any) -> Settings:
    spec = {"name": "e", "model": "m", "image": "img", "port": 9, "memory_gib": 10, "warmup_s": 300.0}
    return Settings.model_validate({"engines": [{**spec, **engine}], "state_dir": state_dir})


async def _gateway(settings: Settings, clock: Clock) -> tuple[EngineManager, Registry]:
    registry = Registry(settings, clock=clock)
    manager = EngineManager(settings, registry, Prober(registry, settings.probe, _never), api=FakeApi)  # type: ignore[arg-type]
    registry.listeners.append(manager.on_status)
    await manager.start()
    return manager, registry


async def _measure(manager: EngineManager, registry: Registry, clock: Clock, seconds: float) -> None:
    assert await manager.request_start("e")
    clock.now += seconds
    registry.set_status("e", Status.READY)  # as its probe would
    assert manager.engines["e"].cold_start_s == seconds


async def test_measured_cold_starts_are_expected_again_after_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    manager, registry = await _gateway(_settings(tmp_path), clock)
    try:
        await _measure(manager, registry, clock, 90.0)
    finally:
        await manager.stop()
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved["engines"][0]["samples"] == [90.0]

    manager, registry = await _gateway(_settings(tmp_path), clock)  # the restarted gateway
    try:
        assert manager.engines["e"].expected_cold_start_s() == 90.0  # not the declared 300
        assert manager.warmup_left_s("e") == 90.0
        assert registry.backends["e"].config.warmup_s == 90.0  # the warm-up ETA a waiting request gets
    finally:
        await manager.stop()


async def test_another_engine_behind_the_name_does_not_inherit_them(tmp_path: Path) -> None:
    clock = Clock()
    manager, registry = await _gateway(_settings(tmp_path), clock)
    try:
        await _measure(manager, registry, clock, 90.0)
    finally:
        await manager.stop()
    manager, _ = await _gateway(_settings(tmp_path, port=10), clock)  # another URL: another engine
    try:
        assert manager.engines["e"].expected_cold_start_s() == 300.0
    finally:
        await manager.stop()


async def test_an_unreadable_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    manager, _ = await _gateway(_settings(tmp_path), Clock())
    try:
        assert manager.engines["e"].expected_cold_start_s() == 300.0
    finally:
        await manager.stop()
