"""The bench's two oracles, found by replaying the trace (routing.py runs them and every strategy).

    oracle          the best fixed assignment of each request class to one backend: every assignment when
                    there are at most EXHAUSTIVE_LIMIT, else the best all-on-one assignment improved one
                    class at a time (`find_oracle`)
    split_oracle    the best fixed per-class traffic fractions over the backends, by coordinate descent
                    from the oracle (`find_split_oracle`): a class may be spread, which the assignment
                    oracle cannot do, so blind load balancing can beat the assignment oracle but should not
                    beat this one

Each search replays through whatever runs a strategy on a fresh fleet (`Replayer`: routing.Bench).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gateway.api.openai import Router
from gateway.bench.routing_report import StrategyResult
from gateway.bench.routing_trace import AssignmentRouter, SplitRouter, Trace
from gateway.sim.fleet import FleetSpec

EXHAUSTIVE_LIMIT = 8  # oracle: every assignment up to this many, else one pass of coordinate descent
SPLIT_BUDGET = 6  # split oracle: replays of candidate fractions after the best assignment
SPLIT_STEPS = (0.5, 0.25)  # split oracle: shares of a class moved at once, coarse then fine


@dataclass(frozen=True)
class Strategy:
    """One way to route the trace: a router made per replay, or the policy router built from `policy`."""

    name: str
    router: Callable[[], Router] | None  # None: the policy router the gateway builds from `policy`
    policy: Path | None = None
    detail: str = ""


class Replayer(Protocol):
    """Replays the trace over a fresh fleet and gateway with one strategy (routing.Bench)."""

    spec: FleetSpec
    trace: Trace

    async def run(self, strategy: Strategy) -> StrategyResult: ...


def _options(bench: Replayer) -> dict[str, list[str]]:
    first = bench.spec.engines[0].name
    return {name: c.servable_by(bench.spec) or [first] for name, c in bench.trace.classes.items()}


def oracle_candidates(bench: Replayer) -> list[dict[str, str]]:
    """Every assignment of the classes that have a choice (find_oracle replays them all when there are at
    most EXHAUSTIVE_LIMIT, else searches by coordinate descent)."""
    options = _options(bench)
    free = [name for name, opts in options.items() if len(opts) > 1]
    fixed = {name: opts[0] for name, opts in options.items() if len(opts) == 1}
    combos = list(itertools.product(*(options[name] for name in free)))
    return [{**fixed, **dict(zip(free, combo, strict=True))} for combo in combos]


@dataclass(frozen=True)
class OracleSearch:
    """A search's winner, its goodput in the search, and how many replays the search took."""

    strategy: Strategy
    assignment: dict[str, str]  # the assignment oracle's; empty for a split that moved some traffic
    goodput: float
    tried: int


async def find_oracle(bench: Replayer) -> OracleSearch:
    """The best static class -> backend assignment by goodput, and how many assignments were replayed."""
    candidates = oracle_candidates(bench)
    if len(candidates) <= EXHAUSTIVE_LIMIT:
        results = [(await bench.run(_assigned(a)), a) for a in candidates]
        result, best = max(results, key=lambda r: r[0].goodput_tok_s)
        return OracleSearch(_assigned(best), best, result.goodput_tok_s, len(results))
    return await _descend(bench)


async def _descend(bench: Replayer) -> OracleSearch:
    """Start from the best all-on-one-backend assignment, then move one class at a time, keeping gains."""
    options = _options(bench)
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
    return OracleSearch(_assigned(best_assignment), best_assignment, best, tried)


def _assigned(assignment: Mapping[str, str]) -> Strategy:
    detail = " ".join(f"{cls}->{backend}" for cls, backend in assignment.items())
    return Strategy("oracle", lambda: AssignmentRouter(assignment), detail=detail)


Fractions = dict[str, dict[str, float]]


async def find_split_oracle(bench: Replayer, start: OracleSearch, budget: int = SPLIT_BUDGET) -> OracleSearch:
    """The best fixed per-class traffic fractions found by coordinate descent from the best assignment.

    Searches: for each share step in SPLIT_STEPS (0.5, then 0.25), for each class that more than one
    backend can serve (classes with the most output tokens first), for each other backend it could use:
    move `step` of the class's traffic from its largest share to that backend, replay, and keep the move
    if goodput rose. Budget: at most `budget` replays after the start (the assignment search's winner,
    all fractions 1.0, scored by its own replay there), so the result is never below the assignment
    oracle's search score. Each replay is one noisy sample: a gain within the noise may be kept, which
    is why every round replays the winner afresh instead of reusing its search score.
    """
    options = _options(bench)
    current: Fractions = {cls: {backend: 1.0} for cls, backend in start.assignment.items()}
    best, tried = start.goodput, 0
    free = sorted(
        (cls for cls, opts in options.items() if len(opts) > 1),
        key=lambda cls: -_output_tokens(bench.trace, cls),
    )
    for step in SPLIT_STEPS:
        for cls in free:
            for target in options[cls]:
                moved = _moved(current[cls], target, step)
                if moved is None:
                    continue
                if tried >= budget:
                    return _split_result(current, start, best, tried)
                candidate = {**current, cls: moved}
                result = await bench.run(_split(candidate))
                tried += 1
                if result.goodput_tok_s > best:
                    best, current = result.goodput_tok_s, candidate
    return _split_result(current, start, best, tried)


def _split_result(fractions: Fractions, start: OracleSearch, best: float, tried: int) -> OracleSearch:
    unsplit = all(len(shares) == 1 for shares in fractions.values())
    return OracleSearch(_split(fractions), dict(start.assignment) if unsplit else {}, best, tried)


def _output_tokens(trace: Trace, cls: str) -> int:
    requests = sum(s.requests for phase in trace.phases for s in phase if s.cls == cls)
    return requests * trace.classes[cls].max_tokens


def _moved(shares: Mapping[str, float], target: str, step: float) -> dict[str, float] | None:
    """`step` of the traffic moved from the largest share to `target`; None if that changes nothing."""
    source = max(shares, key=lambda b: shares[b])
    if source == target or shares[source] < step - 1e-9:
        return None
    moved = dict(shares)
    moved[source] = round(moved[source] - step, 6)
    moved[target] = round(moved.get(target, 0.0) + step, 6)
    return {b: f for b, f in moved.items() if f > 1e-9}


def _split(fractions: Fractions) -> Strategy:
    detail = " ".join(
        f"{cls}->" + "+".join(f"{b}:{f:g}" for b, f in sorted(shares.items(), key=lambda kv: -kv[1]))
        for cls, shares in fractions.items()
    )
    return Strategy("split_oracle", lambda: SplitRouter(fractions), detail=detail)
