"""Content decides what a borrowed estimate is worth: a backend's fit from its other profiles speaks for a
request only where it measured the request's content (repetitive or novel)."""

from __future__ import annotations

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import with_adaptive

# s speculates (the policy sends it repetitive content), p decodes plainly; both profiles rank decode speed,
# so a cell short of samples may borrow its backend's fit from the other profiles.
POLICY = """
version: 1
routing: adaptive
profiles:
  - name: repetitive
    when: {repetition: {gte: 0.3}}
    prefer: [s, p]
    objective: tokens_per_second
  - name: default
    prefer: [s, p]
    objective: tokens_per_second
"""
NOVEL = {"model": "m", "prompt": "a b c d e f g h i j k l m n o p", "max_tokens": 256, "stream": True}
REPETITIVE = {"model": "m", "prompt": "edit this line please " * 20, "max_tokens": 256, "stream": True}


def prose_samples(n: int = 10) -> list[Sample]:
    return [
        Sample(e2e=0.1 + 255 * 0.02, ttft=0.1, output_tokens=256, prompt_tokens=300, concurrency=1 + i % 4)
        for i in range(n)
    ]


def router_with_plain_measured_on_prose(devices: dict[str, str] | None = None) -> PolicyRouter:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in prose_samples():  # p served prose under some other profile; s was never measured
        recorder.record("p", "warm-up", sample)
    policy = parse_policy(with_adaptive(POLICY, explore_epsilon=0))
    return PolicyRouter(FixedPolicy(policy), objective_scorer=AdaptiveScorer(recorder, devices=devices))


def test_a_fit_learned_on_prose_does_not_outrank_the_prior_for_repetitive_content() -> None:
    router = router_with_plain_measured_on_prose()
    pool = [BackendSnapshot("s"), BackendSnapshot("p")]
    # p's prose speed says nothing of repetitive content on s: neither is predicted, the prior decides.
    assert router.route("completions", REPETITIVE, pool).ranked[0] == "s"


def test_a_fit_learned_on_prose_still_speaks_for_prose() -> None:
    # One device: s, not measured, is not assumed as fast as p (it would be on a device of its own).
    router = router_with_plain_measured_on_prose({"s": "spark", "p": "spark"})
    pool = [BackendSnapshot("s"), BackendSnapshot("p")]
    # Decode speed is the engine's whatever the prompt, for the content it was measured on: p is predicted,
    # s is not, so p ranks first against the prior.
    assert router.route("completions", NOVEL, pool).ranked[0] == "p"
    # Apart, s is taken to be as fast as p: a tie, which the prior decides.
    assert router_with_plain_measured_on_prose().route("completions", NOVEL, pool).ranked[0] == "s"
