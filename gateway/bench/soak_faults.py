"""The soak's faults: engines crashed, hung and restarted at random, never the last healthy one.

- `Chaos`: twin engines in this process, the twin's own faults (crash, hang, restart).
- `SignalChaos`: engines as processes of their own (gateway/bench/engine_procs.py), real signals: SIGKILL
  then a restart on the same port 1-3 s later (it warms up again), or SIGSTOP then SIGCONT 1-6 s later (a
  hung process that holds its connections open).
"""

from __future__ import annotations

import asyncio
import random

import aiohttp

from gateway.bench.engine_procs import EngineProcess
from gateway.sim.engine import SimEngine
from gateway.sim.runner import TwinFleet


class Chaos:
    """Kills, hangs and restarts engines at random, never leaving fewer than one healthy."""

    def __init__(self, fleet: TwinFleet, rng: random.Random) -> None:
        self.fleet = fleet
        self.rng = rng
        self.faults = 0
        self.hangs = 0  # of the faults, hangs (a stopped process holding its connections)
        self._recoveries: set[asyncio.Task[None]] = set()

    def _healthy(self) -> list[SimEngine]:
        return [self.fleet.engine(n) for n in self.fleet.names if self.fleet.engine(n).phase == "ready"]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5))
            healthy = self._healthy()
            if len(healthy) < 2:
                continue
            engine = self.rng.choice(healthy)
            action = self.rng.choice(["crash", "hang", "restart"])
            self.faults += 1
            if action == "restart":
                await engine.restart()
                continue
            if action == "crash":
                await engine.crash()
            else:
                engine.hang()
                self.hangs += 1
            task = asyncio.create_task(self._recover(engine))
            self._recoveries.add(task)
            task.add_done_callback(self._recoveries.discard)

    async def _recover(self, engine: SimEngine) -> None:
        await asyncio.sleep(self.rng.uniform(1.0, 3.0))
        await engine.restart()

    async def stop(self) -> None:
        for task in list(self._recoveries):
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url + "/health") as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


class SignalChaos:
    """SIGKILLs (then restarts) or SIGSTOPs (then resumes) engine processes at random, never leaving
    fewer than one healthy."""

    def __init__(self, engines: dict[str, EngineProcess], rng: random.Random) -> None:
        self.engines = engines
        self.rng = rng
        self.faults = 0
        self.hangs = 0  # of the faults, hangs (a stopped process holding its connections)
        self._recoveries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await asyncio.sleep(self.rng.uniform(0.5, 1.5))
                await self._one_fault(session)

    async def _one_fault(self, session: aiohttp.ClientSession) -> None:
        # Ready by its own word, not by a guess: a restarted process on a busy host starts late.
        candidates = [e for e in self.engines.values() if e.healthy]
        answers = await asyncio.gather(*(_answers(session, e.url) for e in candidates))
        healthy = [e for e, ok in zip(candidates, answers, strict=True) if ok]
        if len(healthy) >= 2:
            engine = self.rng.choice(healthy)
            self.faults += 1
            if self.rng.random() < 0.5:
                await asyncio.to_thread(engine.kill)
                recovery = self._restart(engine, self.rng.uniform(1.0, 3.0))
            else:
                engine.stop()
                self.hangs += 1
                recovery = self._resume(engine, self.rng.uniform(1.0, 6.0))
            task = asyncio.create_task(recovery)
            self._recoveries.add(task)
            task.add_done_callback(self._recoveries.discard)

    async def _restart(self, engine: EngineProcess, after: float) -> None:
        await asyncio.sleep(after)
        engine.start()  # on the same port; it warms up again before it is ready

    async def _resume(self, engine: EngineProcess, after: float) -> None:
        await asyncio.sleep(after)
        engine.resume()

    async def stop(self) -> None:
        for task in list(self._recoveries):
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)
        for engine in self.engines.values():
            if engine.stopped:
                engine.resume()
