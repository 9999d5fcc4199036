"""One simulated day through the product's own code: the engine manager (engines/manager.py and its
parts) decides every start, stop and eviction against a Docker API stand-in (bench/docker_standin.py),
on a virtual-time event loop (bench/virtual_time.py); each request goes the request path's way: the
engine-aware router (engines/on_demand.py over the least-busy router), then the first attempt's slot
(proxy/attempts.py: the pool's queue, `queue.warming_wait_s` for a warming engine, 503 with
Retry-After after it). Clients retry a 503 or 429 after its Retry-After, for up to an hour; with
`clients="held"` the queue holds them until the engine is ready instead, as llama-swap does.

Strategies are configurations of that one manager:
- pinned: only the engines that fit, pinned; the third model is not served (404);
- lru: llama-swap's way, a planner plugged into the manager: the least recently used engines are evicted
  at once (their in-flight requests finish first), no minimum residency, no batching, no idle stop;
- cost-aware: the product's defaults, nothing changed: `engines/budget.py`'s planner and every
  `engine_control` and engine default (min residency, batch bound, drain timeout, idle TTL).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry
from gateway.backends.warmup import Warmups
from gateway.bench.docker_standin import SimDocker
from gateway.bench.lifecycle_day import BUDGET_GIB, ENGINES, EngineSpec
from gateway.bench.virtual_time import VirtualTimeLoop
from gateway.engines import budget
from gateway.engines.docker_api import DockerApi
from gateway.engines.manager import EngineManager
from gateway.engines.on_demand import StartOnDemand
from gateway.proxy.admission import Refused, Slot
from gateway.proxy.attempts import Failover, Tries
from gateway.proxy.exchange import Job
from gateway.proxy.reliability import Reliability
from gateway.records import RequestRecord
from gateway.routing.pipeline.least_busy import LeastBusyRouter
from gateway.settings import Settings

STRATEGIES = ("pinned", "lru", "cost-aware")
# How a request for an engine that is not ready waits, the same for every strategy: "retry", the
# gateway's default (`queue.warming_wait_s`, 30 s, then 503 with the warm-up's ETA as Retry-After, and
# the client comes back then); "held", as llama-swap does it (the request waits in the gateway until
# the engine is ready, up to GIVE_UP_S).
CLIENTS = ("retry", "held")
DAWN_S = 500.0  # the engines that fit are started at 0, warm before the first request, not yet idle
SLO_WAIT_S = 60.0  # a request served within this wait counts toward goodput
GIVE_UP_S = 3600.0  # a client still refused this long after its first try gives up
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


@dataclass
class Result:
    requests: int = 0
    served: int = 0
    waited_s: float = 0.0  # first try to service start, summed over the served requests
    within_slo: int = 0
    not_served: int = 0  # 404 (pinned: the model is not configured)
    gave_up: int = 0
    refusals: int = 0  # 503/429 answers clients got before being served (each retry counts)
    swaps: int = 0  # engine starts after the dawn
    peak_gib: float = 0.0
    overruns: int = 0
    busy_evictions: int = 0

    @property
    def goodput(self) -> float:
        return self.within_slo / self.requests if self.requests else 0.0


def lru_plan(
    residents: Sequence[budget.Resident],
    need_gib: float,
    budget_gib: float,
    min_residency_s: float,
    spare_busy: bool = False,
) -> budget.Eviction:
    """llama-swap's choice: the least recently used engines first, busy or not, until the start fits; one
    still loading is left to finish (llama-swap swaps one model at a time)."""
    short = sum(r.memory_gib for r in residents) + need_gib - budget_gib
    chosen = []
    movable = (r for r in residents if not r.pinned and not r.loading)
    for resident in sorted(movable, key=lambda r: -r.idle_s):
        if short <= 1e-9:
            break
        chosen.append(resident.name)
        short -= resident.memory_gib
    if short > 1e-9:
        return budget.Eviction(refusal=f"{need_gib:g} GiB do not fit in {budget_gib:g} GiB")
    return budget.Eviction(tuple(chosen))


class CountingPlanner:
    """The strategy's planner, unchanged, counting the engines it chooses while they have requests in
    flight. Only the plan a start acts on (`spare_busy` false) counts: a batching start's looks spare
    busy engines by construction."""

    def __init__(self, plan: budget.Planner) -> None:
        self.plan = plan
        self.busy_evictions = 0

    def __call__(
        self,
        residents: Sequence[budget.Resident],
        need_gib: float,
        budget_gib: float,
        min_residency_s: float,
        spare_busy: bool = False,
    ) -> budget.Eviction:
        eviction = self.plan(residents, need_gib, budget_gib, min_residency_s, spare_busy)
        if not spare_busy:
            busy = {r.name for r in residents if r.inflight > 0}
            self.busy_evictions += len(busy.intersection(eviction.evict))
        return eviction


def settings_for(
    strategy: str,
    engine_control: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    clients: str = "retry",
) -> Settings:
    """The gateway's config for `strategy`; `engine_control` and `engine` override the cost-aware
    defaults (to measure another batch bound or idle TTL, say). `clients` (CLIENTS) says how a request
    for an engine that is not ready waits, the same for every strategy."""
    fits = _fitting()
    if strategy == "pinned":
        engines = [_engine(spec, pinned=True, idle_ttl_s=None) for spec in ENGINES if spec in fits]
        control: dict[str, Any] = {}
    elif strategy == "lru":
        engines = [_engine(spec, idle_ttl_s=None) for spec in ENGINES]
        control = {"min_residency_s": 0, "batch_wait_s": 0, "drain_timeout_s": GIVE_UP_S}
    else:
        engines = [_engine(spec, **(engine or {})) for spec in ENGINES]
        control = dict(engine_control or {})
    queue = {"timeout_s": GIVE_UP_S, "warming_wait_s": GIVE_UP_S} if clients == "held" else {}
    return Settings.model_validate(
        {
            "engines": engines,
            "devices": {"spark": {"memory_gib": BUDGET_GIB}},
            "engine_control": {"docker_url": "sim://", **control},
            "queue": queue,
            "state_dir": None,
        }
    )


def _fitting() -> list[EngineSpec]:
    """The engines that fit together, in config order: what is resident at dawn."""
    out, used = [], 0.0
    for spec in ENGINES:
        if used + spec.memory_gib <= BUDGET_GIB:
            out.append(spec)
            used += spec.memory_gib
    return out


def _engine(spec: EngineSpec, **fields: Any) -> dict[str, Any]:
    return {
        "name": spec.name,
        "model": spec.name,
        "image": "sim",
        "port": 9100 + ENGINES.index(spec),
        "memory_gib": spec.memory_gib,
        "device": "spark",
        "warmup_s": spec.cold_start_s,
        "max_concurrency": spec.concurrency,
        **fields,
    }


class Day:
    """The gateway's engine side and request path, wired as app.py wires them, on the running loop."""

    def __init__(self, strategy: str, seed: int, settings: Settings, loop: VirtualTimeLoop) -> None:
        self.loop = loop
        self.settings = settings
        self.registry = Registry(settings, clock=loop.time)
        warmups = Warmups(self.registry, None)
        self.reliability = Reliability(settings, warmups)
        self.registry.listeners += [self.reliability.on_status, warmups.on_status]
        self.docker = SimDocker(loop.time, BUDGET_GIB, random.Random(seed + 1))
        loop.park(self.docker.follow_events)
        prober = Prober(self.registry, settings.probe, self.docker.fetch)
        self.planner = CountingPlanner(lru_plan if strategy == "lru" else budget.plan)
        self.manager = EngineManager(
            settings, self.registry, prober, api=_as_docker_api(self.docker), planner=self.planner
        )
        self.registry.listeners.append(self.manager.on_status)
        self.registry.membership.append(self._slots_for_all)
        self.router = StartOnDemand(LeastBusyRouter(), self.manager)
        self.failover = Failover(self.registry, self.reliability, settings.limits.max_attempts)
        self.result = Result()

    def _slots_for_all(self) -> None:
        backends = self.registry.backends.items()
        self.reliability.admission.configure({n: s.config.max_concurrency for n, s in backends})

    async def run(self, arrivals: Sequence[tuple[float, str, float]]) -> Result:
        await self.manager.start()
        for spec in _fitting():
            self.manager.request_start(spec.name, batch=False)
        dawn_starts = len(_fitting())
        clients = [self.loop.create_task(self._client(DAWN_S + at, m, s)) for at, m, s in arrivals]
        self.result.requests = len(arrivals)
        await asyncio.gather(*clients)
        await self.manager.stop()
        result = self.result
        result.swaps = self.docker.starts - dawn_starts
        result.peak_gib, result.overruns = self.docker.peak_gib, self.docker.overruns
        result.busy_evictions = self.planner.busy_evictions
        return result

    async def _client(self, arrival: float, model: str, service_s: float) -> None:
        await asyncio.sleep(arrival - self.loop.time())
        result = self.result
        while True:
            got = await self._ask(model)
            if got is None:
                result.not_served += 1
                return
            if isinstance(got, Slot):
                wait = self.loop.time() - arrival
                result.served += 1
                result.waited_s += wait
                result.within_slo += wait <= SLO_WAIT_S
                await asyncio.sleep(service_s)
                got.release()
                self._answered(model, got.backend, wait, service_s)
                return
            result.refusals += 1
            pause = max(1.0, float(got.retry_after))
            if self.loop.time() + pause - arrival > GIVE_UP_S:
                result.gave_up += 1
                return
            await asyncio.sleep(pause)

    def _answered(self, model: str, backend: str, wait_s: float, service_s: float) -> None:
        """The record dispatch hands its observers, as far as the manager reads it (app.py wires
        `EngineManager.observe`): idleness from the answer's end, time per request."""
        record = RequestRecord("", model, "chat", "default", False, backend=backend, status=200)
        record.e2e, record.queue_wait = wait_s + service_s, wait_s
        self.manager.observe(record)

    async def _ask(self, model: str) -> Slot | Refused | None:
        """One try, as api/openai.py makes it: None for 404 (no such model)."""
        pool = self.registry.pool(model)
        if pool is None:
            return None
        body = {**BODY, "model": model}
        decision = self.router.route("chat", body, self.registry.snapshots(pool))
        ranked = tuple(decision.ranked)
        refusal = decision.refusal
        if decision.fallback and (refusal is None or refusal.status == 503):
            ranked += decision.fallback
        elif refusal is not None:
            ranked = ()
        if not ranked:
            status = refusal.status if refusal is not None else 503
            return Refused(status, "refused", refusal.message if refusal else "none", 5)
        started = time.perf_counter()
        job = Job("", "chat", "/v1/chat/completions", pool, body, b"", started, decision.profile, ranked)
        got = await self.failover.next(job, Tries(job.started))
        assert isinstance(got, Slot | Refused)  # with admission, a slot or a refusal, never a bare hold
        return got


def _as_docker_api(docker: SimDocker) -> Callable[[str | None], DockerApi]:
    return cast(Callable[[str | None], DockerApi], docker)  # the same methods, duck-typed


def run_day(
    strategy: str,
    seed: int,
    arrivals: Sequence[tuple[float, str, float]],
    control: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    clients: str = "retry",
) -> Result:
    """One day on a fresh virtual-time loop; `control` and `engine`: overrides for cost-aware."""
    loop = VirtualTimeLoop()
    try:
        day = Day(strategy, seed, settings_for(strategy, control, engine, clients), loop)
        return loop.run_until_complete(day.run(arrivals))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
