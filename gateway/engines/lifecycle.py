"""Starting and stopping engines: at most one start or stop under way per engine, starts on one device
one at a time (so two starts never count the same free memory), room made first (engines/room.py), and
every stop drained first: hidden from routing, bounded wait for its in-flight count to reach 0, never a
client's answer cut off. Idle engines are stopped after their TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from gateway.backends.registry import Registry, Status
from gateway.engines.docker_api import DockerApi
from gateway.engines.engine import Engine, Phase
from gateway.engines.probes import EngineProbes
from gateway.engines.room import Room
from gateway.settings import Settings

log = logging.getLogger("gateway.engines")

DRAIN_POLL_S = 0.05  # how often a draining engine's in-flight count is looked at


class Lifecycle:
    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        engines: Mapping[str, Engine],
        api: Callable[[], DockerApi],
        probes: EngineProbes,
        room: Room,
    ) -> None:
        self.control = settings.engine_control
        self.registry = registry
        self.engines = engines
        self._api = api
        self.probes = probes
        self.room = room
        self.starts: Counter[str] = Counter()
        self.stops: Counter[tuple[str, str]] = Counter()
        self._device_locks: dict[str | None, asyncio.Lock] = {}

    def request_start(self, name: str, batch: bool = True) -> asyncio.Task[bool]:
        """Start `name` unless a start or stop is under way (that one is returned). With `batch`, a
        start that must evict may first gather the requests for it (`engine_control.batch_wait_s`)."""
        engine = self.engines[name]
        if (op := engine.running_op) is not None:
            return op
        if engine.phase is not Phase.STOPPED:
            return _done(True)
        engine.phase, engine.detail, engine.wanted = Phase.STARTING, "starting", False
        engine.asked, engine.asked_at_sum = 1, self.registry.clock()  # the request asking for it
        self.registry.set_status(name, Status.STARTING, "engine container starting")
        return _task(engine, self._start(engine, batch), f"engine-start:{name}")

    def request_stop(self, name: str, reason: str) -> asyncio.Task[bool]:
        engine = self.engines[name]
        if (op := engine.running_op) is not None:
            return op
        if engine.phase is Phase.STOPPED:
            return _done(True)
        return _task(engine, self._stop(engine, reason), f"engine-stop:{name}")

    async def _start(self, engine: Engine, batch: bool) -> bool:
        try:
            async with self._device_locks.setdefault(engine.device, asyncio.Lock()):
                if batch:
                    await self.room.gather(engine)
                if not await self._make_room(engine):
                    return False
                await self._run_container(engine)
        except Exception as exc:  # the Docker API failed: the engine stays stopped, the reason shown
            self.failed_start(engine, f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _make_room(self, engine: Engine) -> bool:
        plan = self.room.plan(engine)
        if plan.refusal is not None:
            self.failed_start(engine, plan.refusal)
            return False
        for victim in plan.evict:
            log.info("engine %s: evicting %s to make room on %s", engine.name, victim, engine.device)
            if not await self._stop(self.engines[victim], "evicted"):
                self.failed_start(engine, f"{victim} still had requests in flight after draining")
                return False
        return True

    async def _run_container(self, engine: Engine) -> None:
        api = self._api()
        if engine.container_id is None or not await asyncio.to_thread(api.exists, engine.container_id):
            assert engine.spec is not None  # startable: a managed spec, or a container to start
            engine.container_id = await asyncio.to_thread(api.create, engine.spec)
        await asyncio.to_thread(api.start, engine.container_id)
        now = self.registry.clock()
        engine.started_at = engine.measure_from = now
        engine.detail = "container started"
        self.registry.warming_from_now(engine.name, "engine container started")
        self.starts[engine.name] += 1
        log.info(
            "engine %s started (container %s, %g GiB on %s)",
            engine.name,
            engine.container_id[:12],
            engine.memory_gib,
            engine.device or "no device",
        )
        self.probes.start(engine.name)

    def failed_start(self, engine: Engine, why: str) -> None:
        engine.phase, engine.detail = Phase.STOPPED, f"cannot start: {why}"
        self.registry.set_status(engine.name, Status.DEAD, engine.detail)
        log.warning("engine %s cannot start: %s", engine.name, why)

    async def _stop(self, engine: Engine, reason: str) -> bool:
        """Drain (hidden from routing, bounded wait for in-flight to reach 0), then stop the container.
        False, and serving again, if requests were still in flight at the drain deadline."""
        previous = engine.phase
        if reason == "idle" and not self.idle(engine):  # a request came since the idle round
            return False
        engine.phase, engine.detail = Phase.DRAINING, f"draining ({reason})"
        deadline = self.registry.clock() + self.control.drain_timeout_s
        while self.registry.inflight[engine.name] > 0:
            if self.registry.clock() >= deadline:
                engine.phase, engine.detail = previous, f"kept: still serving after draining ({reason})"
                log.info("engine %s not stopped (%s): requests still in flight", engine.name, reason)
                return False
            await asyncio.sleep(DRAIN_POLL_S)
        engine.phase = Phase.STOPPING
        # First: a probe answered by the old container must not land after.
        await self.probes.stop(engine.name)
        # Not ready from here on: admission hands it no slot, a request for it waits (or starts it again).
        self.registry.set_status(engine.name, Status.DEAD, f"stopping ({reason})")
        if engine.container_id is not None:
            with contextlib.suppress(Exception):  # gone already: stopped is what was asked
                await asyncio.to_thread(self._api().stop, engine.container_id, self.control.stop_timeout_s)
        self.stopped(engine, reason)
        if engine.wanted:  # once this stop is over (its task done), a start can begin
            asyncio.get_running_loop().call_soon(self._start_if_wanted, engine.name)
        return True

    def _start_if_wanted(self, name: str) -> None:
        engine = self.engines.get(name)
        if engine is not None and engine.wanted and engine.phase is Phase.STOPPED:
            log.info("engine %s: requests came while it stopped; starting it again", name)
            self.request_start(name)

    def stopped(self, engine: Engine, reason: str) -> None:
        engine.phase, engine.detail, engine.started_at = Phase.STOPPED, f"stopped ({reason})", None
        engine.ready_at = None
        self.registry.set_status(engine.name, Status.DEAD, engine.detail)
        self.stops[(engine.name, reason)] += 1
        log.info("engine %s stopped (%s)", engine.name, reason)

    # -- idle stops --

    def idle(self, engine: Engine) -> bool:
        ttl = engine.idle_ttl_s
        started = engine.started_at if engine.started_at is not None else float("-inf")  # 0.0 is a time
        active = max(engine.last_request, started)
        idle = self.registry.inflight[engine.name] == 0 and self.registry.clock() - active >= (ttl or 0)
        return ttl is not None and not engine.pinned and idle

    async def idle_round(self) -> float:
        """Stop the engines idle for their TTL; the pause until the next look."""
        ttls = []
        for engine in list(self.engines.values()):
            ttl = engine.idle_ttl_s
            if ttl is None or engine.pinned or engine.phase is not Phase.RUNNING:
                continue
            ttls.append(ttl)
            if self.idle(engine):
                self.request_stop(engine.name, "idle")
        return min([1.0, *(t / 4 for t in ttls)])


def _task(engine: Engine, operation: Coroutine[Any, Any, bool], name: str) -> asyncio.Task[bool]:
    engine.ops += 1
    engine.op = asyncio.get_running_loop().create_task(operation, name=name)
    return engine.op


def _done(value: bool) -> asyncio.Task[bool]:
    async def result() -> bool:
        return value

    return asyncio.get_running_loop().create_task(result())
