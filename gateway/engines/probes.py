"""The readiness probes of resident engines: one background loop per engine, by the prober's rules
(backends/flavors.py), fast while it warms up and at the normal interval once ready. Only resident
engines are probed: a stopped engine's refused connection says nothing new."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from gateway.backends.prober import Prober
from gateway.backends.registry import Status
from gateway.settings import ProbeConfig
from gateway.tasks import BackgroundTask

log = logging.getLogger("gateway.engines")


class EngineProbes:
    def __init__(self, prober: Prober, config: ProbeConfig) -> None:
        self.prober = prober
        self.config = config
        self._tasks: dict[str, BackgroundTask] = {}

    def start(self, name: str) -> None:
        if name in self._tasks:
            return
        step = partial(self._round, name)
        task = BackgroundTask(step, f"engines:probe:{name}", on_error=_retry, logger=log)
        self._tasks[name] = task
        task.start()

    async def stop(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            await task.stop()

    async def stop_all(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        await asyncio.gather(*(task.stop() for task in tasks))

    async def _round(self, name: str) -> float:
        status = await self.prober.probe_once(name)
        return self.config.interval_s if status is Status.READY else self.config.starting_interval_s


def _retry(exc: Exception) -> float:
    return 1.0
