"""A closed routing loop without sockets: the policy router with the adaptive scorer decides, a performance
function plays the backends, and each outcome goes back into the recorder as the gateway would record it."""

from __future__ import annotations

from collections.abc import Callable

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Decision, Sample
from gateway.repetition import prompt_repetition
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder

# (backend, profile, concurrency) -> (ttft seconds, tpot seconds)
Perf = Callable[[str, str, int], tuple[float, float]]

POLICY = """
version: 1
routing: adaptive
profiles:
  - name: chat
    when: {endpoint: {in: [chat]}}
    prefer: [x, y]
    objective: ttft
  - name: default
    prefer: [x, y]
    objective: e2e
"""

# One profile ranked by decode speed: what two engines sharing a device compete on.
DECODE_POLICY = """
version: 1
routing: adaptive
profiles:
  - name: default
    prefer: [x, y]
    objective: tokens_per_second
"""


def decode_samples(base: float, n: int = 40) -> list[Sample]:
    """A memory-bound engine: TPOT grows slowly with its batch, 1.8x while the other engine is busy."""
    out = []
    for i in range(n):
        own, shared = 1 + i % 16, float(i % 3 == 0)
        tpot = (base + 0.0004 * own) * (1.0 + 0.8 * shared)
        out.append(
            Sample(
                e2e=0.1 + 255 * tpot,
                ttft=0.1,
                output_tokens=256,
                prompt_tokens=2048,
                concurrency=own,
                device_share=shared,
            )
        )
    return out


def paced(tpot: float, n: int) -> list[Sample]:
    """Streamed answers at `tpot` (their frame gap too), one at a time, the device's other engine idle."""
    return [
        Sample(
            e2e=0.1 + 255 * tpot, ttft=0.1, output_tokens=256, prompt_tokens=512, concurrency=1, mean_itl=tpot
        )
        for _ in range(n)
    ]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def with_adaptive(policy: str, **knobs: object) -> str:
    """The policy with an `adaptive:` block setting these knobs (min_samples, explore_epsilon, ...)."""
    block = ", ".join(f"{name}: {value}" for name, value in knobs.items())
    return policy.replace("routing: adaptive\n", f"routing: adaptive\nadaptive: {{{block}}}\n", 1)


def make_router(recorder: LiveRecorder) -> PolicyRouter:
    scorer = AdaptiveScorer(recorder)
    return PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0.25))), objective_scorer=scorer
    )


def sent(router: PolicyRouter, decision: Decision) -> str:
    """Where the request goes (the first ranked), its exploration booked as the dispatcher books it."""
    chosen = decision.ranked[0]
    scorer = router.objective_scorer
    if decision.exploration is not None and isinstance(scorer, AdaptiveScorer):
        scorer.book(decision.exploration, chosen)
    return chosen


def body(endpoint: str) -> dict[str, object]:
    if endpoint == "chat":
        messages = [{"role": "user", "content": "hi " * 40}]
        return {"model": "m", "messages": messages, "max_tokens": 64, "stream": True}
    return {"model": "m", "prompt": "hi " * 40, "max_tokens": 64, "stream": True}


def serve(router: PolicyRouter, recorder: LiveRecorder, clock: Clock, endpoint: str, perf: Perf) -> str:
    """Route one request at idle load, play it on the chosen backend, record what the gateway would."""
    backends = [BackendSnapshot("x"), BackendSnapshot("y")]
    request = body(endpoint)
    decision = router.route(endpoint, request, backends)
    chosen = sent(router, decision)
    ttft, tpot = perf(chosen, decision.profile, 1)
    content = prompt_repetition(request.get("messages"), request.get("prompt"))  # as stats/measurement.py
    recorder.record(
        chosen,
        decision.profile,
        Sample(
            e2e=ttft + 63 * tpot,
            ttft=ttft,
            output_tokens=64,
            prompt_tokens=40,
            concurrency=1,
            repetition=content,
        ),
    )
    clock.t += 1.0
    return chosen
