"""Free capacity: a backend never measured, alone on its device, shares a burst that queues on the
winner, as least in-flight would, instead of waiting for its min_samples explorations while the burst
piles onto an engine the policy's prior (here a wrong one) prefers.

A socket-free closed loop: 16 users on two engines on separate boxes, each request's time growing with
the engine's load at dispatch (batching, then queueing); x is the policy's first choice, half y's speed,
and was measured at several loads before the burst (earlier traffic), y never."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Decision, Sample
from gateway.routing.adaptive import AdaptiveScorer
from gateway.routing.router import FixedPolicy, PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import Clock, sent

POLICY = """
version: 1
routing: adaptive
profiles:
  - name: default
    prefer: [x, y]
    objective: e2e
"""
BASE_S = {"x": 2.0, "y": 1.0}  # one request alone on the engine
PER_REQUEST = 0.25  # each request already in flight adds this share of the base time
USERS, REQUESTS = 16, 64
BODY = {"model": "m", "prompt": "hi " * 40, "max_tokens": 64}

Route = Callable[[dict[str, int]], str]


def e2e_s(backend: str, inflight_at_dispatch: int) -> float:
    return BASE_S[backend] * (1 + PER_REQUEST * (inflight_at_dispatch - 1))


def closed_loop(
    route: Route, on_done: Callable[[str, int, float], None], clock: Clock
) -> tuple[float, list[str]]:
    """USERS users, REQUESTS requests: (makespan in s, the backend of each request in sending order)."""
    inflight = {"x": 0, "y": 0}
    start = clock.t
    done: list[tuple[float, int, str, int, float]] = []
    chosen: list[str] = []

    def send() -> None:
        backend = route(inflight)
        inflight[backend] += 1
        took = e2e_s(backend, inflight[backend])
        heapq.heappush(done, (clock.t + took, len(chosen), backend, inflight[backend], took))
        chosen.append(backend)

    for _ in range(USERS):
        send()
    while done:
        clock.t, _, backend, concurrency, took = heapq.heappop(done)
        inflight[backend] -= 1
        on_done(backend, concurrency, took)
        if len(chosen) < REQUESTS:
            send()
    return clock.t - start, chosen


def adaptive_run() -> tuple[float, list[str]]:
    clock = Clock()
    recorder = LiveRecorder(clock=clock)
    scorer = AdaptiveScorer(recorder, devices={"x": "box-1", "y": "box-2"})
    router = PolicyRouter(FixedPolicy(parse_policy(POLICY)), objective_scorer=scorer)

    def route(inflight: dict[str, int]) -> str:
        pool = [BackendSnapshot(name, inflight=n) for name, n in inflight.items()]
        decision: Decision = router.route("completions", BODY, pool)
        return sent(router, decision)

    def on_done(backend: str, concurrency: int, took: float) -> None:
        recorder.record(backend, "default", sample(concurrency, took))

    for c in [1, 2, 4, 8] * 2:  # x's earlier traffic
        on_done("x", c, e2e_s("x", c))
        clock.t += 1.0

    return closed_loop(route, on_done, clock)


def sample(concurrency: int, took: float) -> Sample:
    return Sample(e2e=took, ttft=0.1 * took, output_tokens=64, prompt_tokens=40, concurrency=concurrency)


def least_inflight_run() -> tuple[float, list[str]]:
    turn = iter(range(10**6))

    def route(inflight: dict[str, int]) -> str:
        t = next(turn)
        return min(inflight, key=lambda name: (inflight[name], (name == "y") ^ (t % 2 == 0)))

    return closed_loop(route, lambda *_: None, Clock())


def test_a_burst_on_a_wrongly_preferred_engine_spreads_onto_the_unmeasured_faster_one() -> None:
    makespan, chosen = adaptive_run()
    blind, _ = least_inflight_run()
    first_burst = chosen[:USERS]
    # The 16 arrivals split between the engines instead of piling onto x while y waits to be measured.
    assert first_burst.count("y") >= USERS // 2 - 1, "".join(first_burst)
    # Once measured, the faster engine takes most of the rest, and the whole run ends sooner than least
    # in-flight's (which balances load but never learns that y is twice as fast). Without free capacity
    # the burst gave y 4 of 16, and the run took as long as least in-flight's (16.5 s each).
    assert chosen[USERS:].count("y") > len(chosen[USERS:]) // 2, "".join(chosen)
    assert makespan < blind * 0.97, (makespan, blind)
