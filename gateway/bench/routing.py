"""`spark-gateway bench routing --fleet FILE [--json]`: routing strategies compared on one mixed trace.

The twin fleet and the gateway run in this process; the trace (routing_trace.TRACE: seed 003's A, B, C, D
shapes in phases and mixed, plus image requests and over-length prompts) is replayed through the gateway's
ASGI app once per strategy and round (`--repeats`), each on a fresh fleet and a fresh gateway:

    round_robin     blind rotation over the pool (no capability or context filter)
    least_inflight  blind, fewest requests in flight
    static          the fleet's shipped policy
    adaptive        the same policy with `routing: adaptive`, starting with no samples
    oracle          the best static assignment of each request class to a backend, found by trying them

Reported in simulated time: goodput (output tokens of successful requests / makespan), TTFT p50 and p95,
failures (servable requests that did not succeed), refused (requests no backend of the fleet can take:
over-length prompts, images on a fleet without vision) and percent of the oracle's goodput; median and
spread over the rounds (routing_report.py). The event loop's lateness is sampled during every replay: the
twin, the gateway and the client share it, so a loop late by a sizeable share of a request's latency
(too high a --time-scale for the machine) measures the loop rather than the fleet, and the bench says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import yaml
from tqdm import tqdm

from gateway.api.openai import Router
from gateway.app import build_app, build_gateway
from gateway.backends.registry import Status
from gateway.bench.routing_report import StrategyResult, render, summarize
from gateway.bench.routing_trace import (
    CLASSES,
    TRACE,
    AssignmentRouter,
    LeastInflightRouter,
    Lifespan,
    Outcome,
    RoundRobinRouter,
    Stream,
    post,
    request_body,
)
from gateway.commands.serve import settings_for_fleet
from gateway.settings import Settings
from gateway.sim.fleet import FleetSpec, load_fleet
from gateway.sim.runner import TwinFleet
from gateway.stats.live import percentile

DEFAULT_TIME_SCALE = 50.0  # x100 left the loop ~0.9 s (simulated) late at p95 on 2 shared cores
DEFAULT_REPEATS = 3
EXHAUSTIVE_LIMIT = 8  # oracle: every assignment up to this many, else one pass of coordinate descent


@dataclass(frozen=True)
class Strategy:
    name: str
    router: Callable[[], Router] | None  # None: the policy router the gateway builds from `policy`
    policy: Path | None = None
    detail: str = ""


class LoopLag:
    """How late the event loop wakes a sleeper, sampled every `interval_s` (wall) during a replay.

    The twin lays engine steps end to end on its own timeline, but the gateway, the client's closed loop
    and every streamed chunk run on the same loop: when the loop is late by L wall seconds, each of them
    is late by L x time_scale simulated seconds. A p95 lag well above an engine step (~20 ms on a GB10,
    a few ms on an H100) means the time scale is too high for this machine and the figures are not the
    fleet's but the loop's.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.lags.append(max(0.0, loop.time() - before - self.interval_s))

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.ensure_future(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def p95(self) -> float | None:
        return percentile(self.lags, 95)


class Bench:
    def __init__(self, spec: FleetSpec, time_scale: float, workdir: Path, progress: tqdm[Any]) -> None:
        # The bench measures serving, not loading: engines start warm.
        engines = [e.model_copy(update={"warmup_s": 0.0}) for e in spec.engines]
        self.spec = spec.model_copy(update={"engines": engines})
        self.time_scale = time_scale
        self.workdir = workdir
        self.progress = progress
        self.model = spec.engines[0].served_model_name
        self.unservable = {name for name, c in CLASSES.items() if not c.servable_by(self.spec)}
        self._runs = itertools.count()

    async def run(self, strategy: Strategy) -> StrategyResult:
        async with TwinFleet(self.spec, time_scale=self.time_scale, ephemeral_ports=True) as fleet:
            await fleet.wait_ready()
            settings = self._settings({n: fleet.url(n) for n in fleet.names}, strategy.policy)
            router = strategy.router() if strategy.router is not None else None
            gateway = build_gateway(settings, router=router)
            app = build_app(gateway)
            async with Lifespan(app):
                await _until_ready(gateway.registry.backends)
                async with LoopLag() as lag:
                    outcomes, wall = await self._replay(app)
        scaled = [_scaled(o, self.time_scale) for o in outcomes]
        result = summarize(strategy.name, scaled, wall * self.time_scale, self.unservable, strategy.detail)
        late = lag.p95()
        lag_ms = None if late is None else round(late * self.time_scale * 1000, 1)
        return replace(result, loop_lag_p95_ms=lag_ms)

    def _settings(self, urls: Mapping[str, str], policy: Path | None) -> Settings:
        base = settings_for_fleet(self.spec, dict(urls))
        state = self.workdir / f"state-{next(self._runs)}"  # adaptive starts with no samples
        update = {
            "policy": policy,
            "state_dir": state,
            "probe": base.probe.model_copy(update={"interval_s": 0.5, "starting_interval_s": 0.02}),
            "measurement": base.measurement.model_copy(update={"scrape_interval_s": 0.05}),
        }
        return base.model_copy(update=update)

    async def _replay(self, app: Any) -> tuple[list[Outcome], float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcomes: list[Outcome] = []
        seeds = itertools.count()
        for phase in TRACE:
            await asyncio.gather(*(self._stream(app, s, outcomes, seeds) for s in phase))
        return outcomes, loop.time() - started

    async def _stream(self, app: Any, stream: Stream, out: list[Outcome], seeds: Any) -> None:
        cls = CLASSES[stream.cls]
        left = iter(range(stream.requests))

        async def user() -> None:
            for _ in left:
                body = request_body(cls, self.model, cls.prompt_for(self.spec), next(seeds))
                out.append(await post(app, cls, body))
                self.progress.update(1)

        await asyncio.gather(*(user() for _ in range(stream.users)))


async def _until_ready(backends: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while any(state.status is not Status.READY for state in backends.values()):
            await asyncio.sleep(0.01)


def _scaled(o: Outcome, factor: float) -> Outcome:
    ttft = None if o.ttft is None else o.ttft * factor
    return Outcome(o.cls, o.status, ttft, o.e2e * factor, o.output_tokens, o.error, o.backend)


def oracle_candidates(bench: Bench) -> list[dict[str, str]]:
    """Every assignment of the classes that have a choice, when few; else None (coordinate descent)."""
    options = {name: c.servable_by(bench.spec) or [bench.spec.engines[0].name] for name, c in CLASSES.items()}
    free = [name for name, opts in options.items() if len(opts) > 1]
    fixed = {name: opts[0] for name, opts in options.items() if len(opts) == 1}
    combos = list(itertools.product(*(options[name] for name in free)))
    return [{**fixed, **dict(zip(free, combo, strict=True))} for combo in combos]


async def find_oracle(bench: Bench) -> tuple[Strategy, int]:
    """The best static class -> backend assignment by goodput, and how many assignments were replayed."""
    candidates = oracle_candidates(bench)
    if len(candidates) <= EXHAUSTIVE_LIMIT:
        results = [(await bench.run(_assigned(a)), a) for a in candidates]
        return _assigned(max(results, key=lambda r: r[0].goodput_tok_s)[1]), len(results)
    return await _descend(bench)


async def _descend(bench: Bench) -> tuple[Strategy, int]:
    """Start from the best all-on-one-backend assignment, then move one class at a time, keeping gains."""
    options = {name: c.servable_by(bench.spec) or [bench.spec.engines[0].name] for name, c in CLASSES.items()}
    tried = 0
    best = 0.0
    best_assignment: dict[str, str] = {}
    for engine in bench.spec.engines:
        assignment = {n: engine.name if engine.name in opts else opts[0] for n, opts in options.items()}
        result = await bench.run(_assigned(assignment))
        tried += 1
        if not best_assignment or result.goodput_tok_s > best:
            best, best_assignment = result.goodput_tok_s, assignment
    for name, opts in options.items():
        for alternative in opts:
            if alternative == best_assignment[name]:
                continue
            assignment = {**best_assignment, name: alternative}
            result = await bench.run(_assigned(assignment))
            tried += 1
            if result.goodput_tok_s > best:
                best, best_assignment = result.goodput_tok_s, assignment
    return _assigned(best_assignment), tried


def _assigned(assignment: Mapping[str, str]) -> Strategy:
    detail = " ".join(f"{cls}->{backend}" for cls, backend in assignment.items())
    return Strategy("oracle", lambda: AssignmentRouter(assignment), detail=detail)


def adaptive_copy(policy: Path, workdir: Path) -> Path:
    """The same policy file with `routing: adaptive` (per-profile overrides dropped)."""
    data = yaml.safe_load(policy.read_text())
    data["routing"] = "adaptive"
    for profile in data.get("profiles", []):
        profile.pop("routing", None)
    path = workdir / f"adaptive-{policy.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


async def run_fleet(path: Path, time_scale: float, repeats: int = 1) -> tuple[list[StrategyResult], str]:
    """Every strategy `repeats` times, in rounds; the oracle's assignment is searched once, then replayed
    in every round like the others (the search's own best replay is the luckiest of many: not reused)."""
    spec = load_fleet(path)
    policy = settings_for_fleet(spec, {e.name: "http://127.0.0.1:1" for e in spec.engines}).policy
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        workdir = Path(tmp)
        strategies = [
            Strategy("round_robin", RoundRobinRouter),
            Strategy("least_inflight", LeastInflightRouter),
        ]
        if policy is not None:
            strategies += [
                Strategy("static", None, policy, detail=str(policy.name)),
                Strategy("adaptive", None, adaptive_copy(policy, workdir), detail=f"{policy.name}, adaptive"),
            ]
        with tqdm(unit="req", file=sys.stderr, desc=spec.name) as progress:
            bench = Bench(spec, time_scale, workdir, progress)
            oracle, tried = await find_oracle(bench)
            results = []
            for round_ in range(repeats):
                for strategy in [*strategies, oracle]:
                    results.append(replace(await bench.run(strategy), round=round_))
    return results, f"{oracle.detail} (best of {tried})"


def _handle(args: argparse.Namespace) -> int:
    results, oracle = asyncio.run(run_fleet(Path(args.fleet), args.time_scale, args.repeats))
    if args.json:
        keys = ("policy", "round", "goodput_tok_s", "ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms", "failures",
                "refused", "requests", "loop_lag_p95_ms")
        document = {"oracle": oracle, "results": [{k: asdict(r)[k] for k in keys} for r in results]}
        print(orjson.dumps(document).decode())
    else:
        print(render(Path(args.fleet).stem, results, args.time_scale, oracle))
    return 0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "routing", help="routing strategies (round robin .. adaptive, oracle) on a mixed trace over a twin"
    )
    parser.add_argument("--fleet", required=True, help="twin fleet file (its policy is the static strategy)")
    parser.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE,
                        help="twin clock speed-up (results are reported in simulated time)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help="rounds: every strategy replayed this many times (median and spread reported)")
    parser.add_argument("--json", action="store_true",
                        help='print {"oracle": ..., "results": [every replay]} instead of a table')
    parser.set_defaults(handler=_handle)
