"""Room on a device for an engine about to start: the residents as the budget sees them, the eviction
plan (engines/budget.py, or a plugged-in planner), and the batching of a swap's requests: a start that
must evict first waits, at most `engine_control.batch_wait_s`, until the requests for it outweigh what
the eviction costs the victims' clients."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from gateway.backends.registry import Registry
from gateway.engines import budget
from gateway.engines.engine import RESIDENT, Engine, Phase
from gateway.settings import DeviceConfig, Settings

BATCH_POLL_S = 0.5  # how often a start gathering requests looks again at its queue and the residents


class Room:
    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        engines: Mapping[str, Engine],
        planner: budget.Planner = budget.plan,
    ) -> None:
        self.settings = settings
        self.control = settings.engine_control
        self.registry = registry
        self.engines = engines
        self.planner = planner

    def device(self, engine: Engine) -> DeviceConfig | None:
        return self.settings.devices.get(engine.device or "")

    def residents(self, engine: Engine, now: float) -> list[budget.Resident]:
        """The other engines holding memory on `engine`'s device, as the budget sees them."""
        return [
            budget.Resident(
                name=other.name,
                memory_gib=other.memory_gib,
                inflight=self.registry.inflight[other.name],
                pinned=other.pinned,
                serving_s=other.serving_s(now, self.registry.promised_until(other.name)),
                demand_per_min=other.demand.per_minute(now),
                cold_start_s=other.expected_cold_start_s(),
                idle_s=now - other.last_request,
                # One the gateway is starting; one found running may be long loaded, its probe not in yet.
                loading=other.phase is Phase.STARTING and other.measure_from is not None,
            )
            for other in self.engines.values()
            if other is not engine and other.device == engine.device and other.phase in RESIDENT
        ]

    def plan(self, engine: Engine, spare_busy: bool = False) -> budget.Eviction:
        """Whom to stop so `engine` fits its device (nothing, without a device budget)."""
        device = self.device(engine)
        if device is None:
            return budget.Eviction()
        residents = self.residents(engine, self.registry.clock())
        return self.planner(
            residents, engine.memory_gib, device.memory_gib, self.control.min_residency_s, spare_busy
        )

    async def gather(self, engine: Engine) -> None:
        """Before evicting for `engine`, wait (at most `batch_wait_s`) until an eviction that spares busy
        engines is possible and the requests waiting for it outweigh what it costs the victims' clients
        (engines/budget.py): swaps are batched, not made for each request. Past that bound the start
        takes the first moment an idle engine can make room, for at most `drain_timeout_s` more; only
        then does it go ahead by the plain rules, draining a busy engine."""
        limit = self.control.batch_wait_s
        if self.device(engine) is None or limit <= 0 or self._never_fits(engine):
            return
        since = self.registry.clock()
        while True:
            now = self.registry.clock()
            if self._worth_it(engine, now, now - since, limit):
                return
            if now - since >= limit + self.control.drain_timeout_s:
                return
            engine.detail = f"gathering requests before a swap ({engine.asked} waiting)"
            await asyncio.sleep(BATCH_POLL_S)

    def _never_fits(self, engine: Engine) -> bool:
        """Only pinned engines stand in the way: gathering would change nothing, the start fails now."""
        device = self.device(engine)
        pinned = [r for r in self.residents(engine, self.registry.clock()) if r.pinned]
        return (
            device is not None and sum(r.memory_gib for r in pinned) + engine.memory_gib > device.memory_gib
        )

    def _worth_it(self, engine: Engine, now: float, gathered_s: float, limit: float) -> bool:
        plan = self.plan(engine, spare_busy=True)
        if plan.refusal is not None:
            return False
        if not plan.evict:
            return True  # it fits
        cold = engine.expected_cold_start_s()
        min_residency = self.control.min_residency_s
        victims = [r for r in self.residents(engine, now) if r.name in plan.evict]
        eviction = sum(budget.eviction_wait_s(r, cold, min_residency) for r in victims)
        waiting = engine.asked * (now + cold) - engine.asked_at_sum
        return budget.worth_swapping(waiting, eviction, gathered_s, limit)
