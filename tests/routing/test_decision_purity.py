"""A decision reads a frozen state and changes nothing: the adaptive scorer's slow-down memory is written by
the producer's step (`PolicyRouter.refresh`, run by `route` before it decides), never by the decision, so
`decide` and `explain` on the same state give the same answer and write nothing."""

from __future__ import annotations

import copy
from typing import Any

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, InFlight, Progress, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import POLICY

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 64}


def streams(gap: float, n: int = 24) -> list[Sample]:
    """Finished streams at loads 1..8, decoding at `gap` plus a little per request in flight."""
    out = []
    for i in range(n):
        c = 1 + i % 8
        itl = gap + 0.001 * c
        out.append(
            Sample(
                e2e=0.2 + 99 * itl,
                ttft=0.2,
                output_tokens=100,
                prompt_tokens=500,
                concurrency=c,
                mean_itl=itl,
            )
        )
    return out


def throttled(n: int = 6) -> Progress:
    """x's requests in flight, decoding 2.5x slower than its fit at their load says."""
    slow = InFlight("default", n, True, 3.0, first_content_s=0.2, frames=40, recent_itl_s=0.026 * 2.5)
    return Progress(n, (slow,) * n)


def setup() -> tuple[PolicyRouter, AdaptiveScorer, list[float], list[BackendSnapshot]]:
    clock = [1_000_000.0]
    recorder = LiveRecorder(clock=lambda: clock[0])
    for backend in ("x", "y"):
        for sample in streams(0.020):
            recorder.record(backend, "default", sample)
    scorer = AdaptiveScorer(recorder, progress=lambda name: throttled() if name == "x" else Progress())
    router = PolicyRouter(FixedPolicy(parse_policy(POLICY)), objective_scorer=scorer)
    pool = [BackendSnapshot("x", inflight=6), BackendSnapshot("y", inflight=1)]
    return router, scorer, clock, pool


def state(scorer: AdaptiveScorer) -> Any:
    """Everything a decision could write that a later one reads: the slow-down memory (readings, episodes,
    the profiles each backend was scored for) and the exploration ledger."""
    memory = scorer.slowdowns
    kept = (memory._slowed, memory._episodes, memory._profiles, scorer.ledger.__dict__)
    return copy.deepcopy(kept)


def test_deciding_twice_on_the_same_state_gives_the_same_answer_and_writes_nothing() -> None:
    router, scorer, clock, pool = setup()
    router.route("chat", CHAT, pool)  # the memory holds a reading now, x seen slowed
    clock[0] += 5.0  # a later moment, not yet refreshed
    before = state(scorer)
    first = router.decide("chat", CHAT, pool)
    explained = router.explain("completions", CHAT, pool)  # a profile never scored: not remembered either
    assert router.decide("chat", CHAT, pool) == first
    assert router.explain("completions", CHAT, pool) == explained
    assert state(scorer) == before


def test_routing_twice_on_the_same_snapshot_gives_the_same_answer_and_the_second_writes_nothing() -> None:
    router, scorer, clock, pool = setup()
    untouched = state(scorer)
    first = router.route("chat", CHAT, pool)
    after_first = state(scorer)
    assert after_first != untouched  # the producer's step took the reading before the decision
    slowed = scorer.slowdowns.latest("x")
    assert slowed is not None and slowed.live > 2.0
    assert first.ranked[0] == "y"  # the slowed x is not chosen on its healthy fit
    assert router.route("chat", CHAT, pool) == first
    assert router.decide("chat", CHAT, pool) == first  # the decision route made, without the refresh
    router.explain("chat", CHAT, pool)
    assert state(scorer) == after_first
