"""`spark-gateway bench lifecycle`: which engines are resident over a day of shifting demand, on one
Spark (119 GiB) where three engines (54, 48, 60 GiB, as deploy/engines.example.yaml) cannot all be.

Everything is simulated, in simulated time (a discrete-event loop, no Docker, no HTTP): each engine's
cold start (its example `warmup_s`, +-15% per start), its stop (a few seconds), its concurrency and
each request's service time (log-normal). The trace is a day in phases: one model's morning, a coding
session, quiet hours, bursts, and periods where requests for two models interleave. What is real is the
gateway's decision code for (c): `gateway.engines.budget.plan` chooses the victims (demand x cold start,
never pinned, never younger than the minimum residency, here never busy) with the demand measured by
`gateway.engines.demand.Demand`, and `budget.worth_swapping` says when queued requests have gathered
enough to be worth a swap. Three strategies replay the same trace:

- pinned: the engines that fit are started at dawn and never stopped; requests for the others are
  refused.
- lru: llama-swap's way: a request for a stopped model starts it at once, evicting the least recently
  used engines (their in-flight requests finish first), no minimum residency, no batching.
- cost-aware: the gateway's lifecycle: victims by cost, never busy, minimum residency; requests for a
  stopped model are batched until the swap is worth it, bounded by a maximum wait.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.engines import budget
from gateway.engines.demand import Demand

BUDGET_GIB = 119.0
STOP_S = 8.0
SLO_WAIT_S = 60.0  # a request served within this wait counts toward goodput
MIN_RESIDENCY_S = 120.0
MAX_BATCH_WAIT_S = 900.0
RECHECK_S = 10.0  # a declined swap is considered again this soon, events or not


@dataclass(frozen=True)
class EngineSpec:
    name: str
    memory_gib: float
    cold_start_s: float
    concurrency: int
    service_s: float  # median service time of one request


ENGINES = (
    EngineSpec("qwen35b", 54, 420, 32, 12.0),
    EngineSpec("coder", 48, 360, 16, 20.0),
    EngineSpec("gemma27b", 60, 480, 16, 10.0),
)

# (minutes, requests per minute for qwen35b, coder, gemma27b): a day's shape, arrivals drawn per round.
DAY = (
    (60, (3.0, 0.0, 0.0)),  # morning chat
    (60, (2.0, 4.0, 0.0)),  # coding session
    (30, (0.2, 0.1, 0.0)),  # quiet
    (60, (0.5, 2.0, 2.0)),  # coding and vision interleaved
    (20, (1.0, 0.0, 10.0)),  # a vision burst
    (40, (0.1, 0.1, 0.1)),  # quiet
    (60, (2.0, 3.0, 1.0)),  # afternoon, all three
    (30, (0.5, 12.0, 0.0)),  # a coding burst
    (40, (1.0, 0.5, 0.5)),  # evening
)


def trace(seed: int) -> list[tuple[float, str, float]]:
    """(arrival s, model, service s), in arrival order."""
    rng = random.Random(seed)
    out = []
    start = 0.0
    for minutes, rates in DAY:
        end = start + minutes * 60.0
        for spec, rate in zip(ENGINES, rates, strict=True):
            t = start
            while rate > 0:
                t += rng.expovariate(rate / 60.0)
                if t >= end:
                    break
                out.append((t, spec.name, spec.service_s * rng.lognormvariate(0.0, 0.6)))
        start = end
    out.sort()
    return out


@dataclass
class Eng:
    spec: EngineSpec
    phase: str = "stopped"  # stopped, starting, running, draining, stopping
    inflight: int = 0
    queue: deque[tuple[float, float]] = field(default_factory=deque)  # (arrival, service)
    started_at: float = float("-inf")
    last_used: float = float("-inf")
    demand: Demand = field(default_factory=Demand)
    then_start: str | None = None  # the engine to start once this one is stopped


@dataclass
class Result:
    waited_s: float = 0.0
    swaps: int = 0
    served: int = 0
    within_slo: int = 0
    refused: int = 0
    peak_gib: float = 0.0
    overruns: int = 0
    busy_evictions: int = 0
    requests: int = 0

    @property
    def goodput(self) -> float:
        return self.within_slo / self.requests if self.requests else 0.0


class Day:
    """The shared event loop; a strategy decides starts and evictions through `decide`."""

    def __init__(self, strategy: str, seed: int) -> None:
        self.strategy = strategy
        self.rng = random.Random(seed + 1)
        self.engines = {spec.name: Eng(spec) for spec in ENGINES}
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.result = Result()
        self.recheck_at: float | None = None

    # -- the loop --

    def run(self, arrivals: list[tuple[float, str, float]]) -> Result:
        self.result.requests = len(arrivals)
        for at, model, service in arrivals:
            self.at(at, "arrive", (model, service))
        self.dawn()
        while self.events:
            self.now, _, kind, data = heapq.heappop(self.events)
            getattr(self, f"on_{kind}")(data)
            self.admit()
            self.decide()
            self.admit()
        return self.result

    def at(self, when: float, kind: str, data: Any) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, data))

    def dawn(self) -> None:
        """Every strategy starts the day with the engines that fit resident and warm, in config order."""
        used = 0.0
        for eng in self.engines.values():
            if used + eng.spec.memory_gib <= BUDGET_GIB:
                used += eng.spec.memory_gib
                eng.phase, eng.started_at = "running", -MIN_RESIDENCY_S
        self.result.peak_gib = used

    def on_arrive(self, data: tuple[str, float]) -> None:
        model, service = data
        eng = self.engines[model]
        eng.demand.add(self.now)
        eng.last_used = self.now
        if self.strategy == "pinned" and eng.phase == "stopped":
            self.result.refused += 1
            return
        eng.queue.append((self.now, service))

    def on_recheck(self, _: None) -> None:
        self.recheck_at = None

    def on_finish(self, name: str) -> None:
        eng = self.engines[name]
        eng.inflight -= 1
        if eng.phase == "draining" and eng.inflight == 0:
            self.stop(eng)

    def on_ready(self, name: str) -> None:
        self.engines[name].phase = "running"

    def on_stopped(self, name: str) -> None:
        eng = self.engines[name]
        eng.phase = "stopped"
        if eng.then_start is not None:
            follower, eng.then_start = eng.then_start, None
            if self.fits(self.engines[follower]):
                self.start(self.engines[follower])

    def admit(self) -> None:
        for eng in self.engines.values():
            while eng.phase == "running" and eng.queue and eng.inflight < eng.spec.concurrency:
                arrival, service = eng.queue.popleft()
                wait = self.now - arrival
                self.result.waited_s += wait
                self.result.served += 1
                self.result.within_slo += wait <= SLO_WAIT_S
                eng.inflight += 1
                eng.last_used = max(eng.last_used, self.now)
                self.at(self.now + service, "finish", eng.spec.name)

    # -- starts and stops --

    def resident_gib(self) -> float:
        return sum(e.spec.memory_gib for e in self.engines.values() if e.phase != "stopped")

    def fits(self, eng: Eng) -> bool:
        return self.resident_gib() + eng.spec.memory_gib <= BUDGET_GIB + 1e-9

    def start(self, eng: Eng) -> None:
        eng.phase, eng.started_at = "starting", self.now
        used = self.resident_gib()
        self.result.peak_gib = max(self.result.peak_gib, used)
        self.result.overruns += used > BUDGET_GIB + 1e-9
        self.result.swaps += 1
        self.at(self.now + eng.spec.cold_start_s * self.rng.uniform(0.85, 1.15), "ready", eng.spec.name)

    def evict(self, victim: Eng, then: Eng | None) -> None:
        self.result.busy_evictions += victim.inflight > 0
        victim.then_start = then.spec.name if then is not None else None
        victim.phase = "draining"  # takes no new request; stopped once its in-flight ones end
        if victim.inflight == 0:
            self.stop(victim)

    def stop(self, eng: Eng) -> None:
        eng.phase = "stopping"
        self.at(self.now + STOP_S, "stopped", eng.spec.name)

    def swapping(self) -> bool:
        return any(e.phase in ("starting", "draining", "stopping") for e in self.engines.values())

    # -- the strategies --

    def decide(self) -> None:
        if self.strategy == "pinned" or self.swapping():
            return  # one swap at a time on the device, as the manager's device lock does
        waiting = [e for e in self.engines.values() if e.phase == "stopped" and e.queue]
        if not waiting:
            return
        if self.strategy == "lru":
            self._lru(min(waiting, key=lambda e: e.queue[0][0]))
        elif not self._cost_aware(waiting) and self.recheck_at is None:
            self.recheck_at = self.now + RECHECK_S  # the bounded wait or the residency may end by then
            self.at(self.recheck_at, "recheck", None)

    def _lru(self, want: Eng) -> None:
        if self.fits(want):
            self.start(want)
            return
        residents = sorted(
            (e for e in self.engines.values() if e.phase == "running"), key=lambda e: e.last_used
        )
        short = self.resident_gib() + want.spec.memory_gib - BUDGET_GIB
        victims = []
        for eng in residents:
            if short <= 1e-9:
                break
            victims.append(eng)
            short -= eng.spec.memory_gib
        for i, victim in enumerate(victims):  # the last victim's stop starts the wanted engine
            self.evict(victim, want if i == len(victims) - 1 else None)

    def _cost_aware(self, waiting: list[Eng]) -> bool:
        # The model whose queued requests have waited longest in all goes first.
        want = max(waiting, key=lambda e: sum(self.now - a for a, _ in e.queue))
        if self.fits(want):
            self.start(want)
            return True
        residents = [self._resident(e) for e in self.engines.values() if e.phase == "running"]
        plan = budget.plan(residents, want.spec.memory_gib, BUDGET_GIB, MIN_RESIDENCY_S, spare_busy=True)
        if plan.refusal is not None:
            return False  # an engine to evict is busy or too young: asked again later
        chosen = {r.name: r for r in residents if r.name in plan.evict}
        cold = want.spec.cold_start_s
        waiting_cost = sum(self.now - a + cold for a, _ in want.queue)
        eviction_cost = sum(budget.eviction_wait_s(r, cold, MIN_RESIDENCY_S) for r in chosen.values())
        oldest = self.now - want.queue[0][0]
        if not budget.worth_swapping(waiting_cost, eviction_cost, oldest, MAX_BATCH_WAIT_S):
            return False
        names = list(plan.evict)
        for i, name in enumerate(names):
            self.evict(self.engines[name], want if i == len(names) - 1 else None)
        return True

    def _resident(self, eng: Eng) -> budget.Resident:
        return budget.Resident(
            name=eng.spec.name,
            memory_gib=eng.spec.memory_gib,
            inflight=eng.inflight,
            pinned=False,
            resident_s=self.now - eng.started_at,
            demand_per_min=eng.demand.per_minute(self.now),
            cold_start_s=eng.spec.cold_start_s,
        )


STRATEGIES = ("pinned", "lru", "cost-aware")


def rounds(repeats: int, seed: int) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {s: [] for s in STRATEGIES}
    for i in range(repeats):
        arrivals = trace(seed + i)
        for strategy in STRATEGIES:
            out[strategy].append(Day(strategy, seed + i).run(arrivals))
    return out


def _spread(values: list[float], fmt: Callable[[float], str]) -> str:
    med = statistics.median(values)
    return f"{fmt(med)} [{fmt(min(values))}-{fmt(max(values))}]"


def report(results: dict[str, list[Result]]) -> list[str]:
    lines = [
        "| strategy | client wait (h) | swaps | goodput (served <= 60 s) | refused | peak GiB | overruns "
        "| busy evictions | unserved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for strategy, rs in results.items():

        def col(get: Callable[[Result], float], fmt: Callable[[float], str], rs: list[Result] = rs) -> str:
            return _spread([get(r) for r in rs], fmt)

        lines.append(
            f"| {strategy} | {col(lambda r: r.waited_s / 3600, lambda v: f'{v:.1f}')} "
            f"| {col(lambda r: r.swaps, lambda v: f'{v:.0f}')} "
            f"| {col(lambda r: r.goodput * 100, lambda v: f'{v:.1f}%')} "
            f"| {col(lambda r: r.refused, lambda v: f'{v:.0f}')} "
            f"| {col(lambda r: r.peak_gib, lambda v: f'{v:.0f}')} "
            f"| {col(lambda r: r.overruns, lambda v: f'{v:.0f}')} "
            f"| {col(lambda r: r.busy_evictions, lambda v: f'{v:.0f}')} "
            f"| {col(lambda r: r.requests - r.served - r.refused, lambda v: f'{v:.0f}')} |"
        )
    lru = [r.waited_s for r in results["lru"]]
    cost = [r.waited_s for r in results["cost-aware"]]
    cuts = [1 - c / b for b, c in zip(lru, cost, strict=True) if b > 0]
    if cuts:
        cut = _spread([c * 100 for c in cuts], lambda v: f"{v:.0f}%")
        lines.append(f"cost-aware cuts client waiting vs lru by {cut} (median [min-max] over the rounds)")
    return lines


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lifecycle", help="engine swapping over a simulated day: pinned, LRU, cost-aware"
    )
    parser.add_argument("--repeats", type=int, default=15, help="rounds, each its own day (default 15)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    for line in report(rounds(args.repeats, args.seed)):
        print(line)
    return 0
