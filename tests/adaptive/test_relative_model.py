"""A backend sharing its device, short of samples for a decode-speed profile, is predicted from the profile's
model on the peer that measured it, times how much slower it decodes the profiles both measured
(ModelChoice.relative, peers.decode_ratio), not from its own all-profile fit, which only knows the
loads and prompts it happened to serve."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.model.cells import build_model
from gateway.routing.model.peers import decode_ratio
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import paced, with_adaptive

POLICY = """
version: 1
routing: adaptive
profiles:
  - name: stress
    when: {max_output_tokens: {gte: 500}}
    prefer: [x, y]
    objective: tokens_per_second
  - name: default
    prefer: [x, y]
    objective: tokens_per_second
"""
STRESS = {"model": "m", "prompt": "a b c d", "max_tokens": 512}


def streams(base: float, growth: float, loads: range, n: int = 32) -> list[Sample]:
    """Answers at TPOT base + growth x c over `loads`, the device's other engine idle."""
    out = []
    for i in range(n):
        c = loads[i % len(loads)]
        tpot = base + growth * c
        out.append(
            Sample(e2e=0.1 + 255 * tpot, ttft=0.1, output_tokens=256, prompt_tokens=512, concurrency=c)
        )
    return out


def stress_prediction(devices: dict[str, str] | None) -> dict[str, Any]:
    """y's prediction for a stress request joining 11 of its own: x measured stress at 1..16 (its steps
    grow fast with the batch) and chat at 1..16; y measured chat alone, one or two at a time, 1.5x
    slower per step than x there."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in streams(0.020, 0.004, range(1, 17)):
        recorder.record("x", "stress", sample)
    for sample in streams(0.020, 0.0004, range(1, 17)):
        recorder.record("x", "default", sample)
    for sample in streams(0.030, 0.0006, range(1, 3)):
        recorder.record("y", "default", sample)
    policy = parse_policy(with_adaptive(POLICY, explore_epsilon=0))
    scorer = AdaptiveScorer(recorder, devices=devices)
    router = PolicyRouter(FixedPolicy(policy), objective_scorer=scorer)
    chat = {**STRESS, "max_tokens": 64}
    pool = [BackendSnapshot("x"), BackendSnapshot("y", inflight=11)]
    router.route("completions", chat, pool)  # a routed request: the scorer learns the profiles served
    explained = router.explain("completions", STRESS, pool)
    predictions = explained["scoring"]["adaptive"]["predictions"]
    return next(p for p in predictions if p["backend"] == "y")


def test_beside_a_neighbour_a_profile_it_never_served_is_predicted_from_the_peer_that_did() -> None:
    shared = stress_prediction({"x": "spark", "y": "spark"})
    # x's stress TPOT at 12 in flight is 0.068 s; y decodes chat 1.5x slower than x where both measured.
    assert shared["tpot_s"] == pytest.approx(0.068 * 0.0312 / 0.0208, rel=0.02)
    assert "x's model x 1.5" in shared["why"]
    # Alone on their devices the ratio is not taken: y keeps its own fit (carried along x's stress fit).
    apart = stress_prediction(None)
    assert apart["tpot_s"] < shared["tpot_s"] * 0.8


def test_the_decode_ratio_is_read_at_the_load_both_measured_nearest_the_one_asked() -> None:
    pairs = [
        (build_model(streams(0.030, 0.0006, range(1, 3))), build_model(streams(0.020, 0.0004, range(1, 17))))
    ]
    assert decode_ratio(pairs, 5, 12) == pytest.approx(0.0312 / 0.0208)  # at 2: the most y measured
    assert decode_ratio(pairs, 5, 1) == pytest.approx(0.0306 / 0.0204)
    apart = [
        (build_model(streams(0.030, 0.0006, range(1, 3))), build_model(streams(0.020, 0.0004, range(8, 17))))
    ]
    assert decode_ratio(apart, 5, 12) is None  # no load both measured
    assert decode_ratio(pairs, 64, 12) is None  # too few samples


def chat_prediction(x_default: list[Sample]) -> dict[str, Any]:
    """y's prediction for an e2e profile only x measured, beside x on one device: both measured the
    decode profile, y at 0.03 s per token, x as given."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in paced(0.020, 20):
        recorder.record("x", "stress", sample)
    for sample in x_default:
        recorder.record("x", "default", sample)
    for sample in paced(0.030, 10):
        recorder.record("y", "default", sample)
    policy = parse_policy(
        with_adaptive(
            POLICY.replace("tokens_per_second\n  - name: default", "e2e\n  - name: default"),
            explore_epsilon=0,
        )
    )
    scorer = AdaptiveScorer(recorder, devices={"x": "spark", "y": "spark"})
    router = PolicyRouter(FixedPolicy(policy), objective_scorer=scorer)
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]
    router.route("completions", {**STRESS, "max_tokens": 64}, pool)  # routed: the profiles each one serves
    explained = router.explain("completions", STRESS, pool)
    predictions = explained["scoring"]["adaptive"]["predictions"]
    return next(p for p in predictions if p["backend"] == "y")


def test_beside_a_slowed_neighbour_a_time_objective_is_predicted_from_its_model() -> None:
    """Ranked by e2e, a measured engine would otherwise outrank its unmeasured neighbour on being measured,
    even seen slowed and predicted at 90 s (spark-duo-degrading). While the peer is healthy the prior and
    exploration decide, as before."""
    slowed = chat_prediction(paced(0.020, 10) + paced(0.060, 6))  # x's newest answers 3x slower
    assert slowed["value"] is not None and "x's model x" in slowed["why"], slowed
    assert chat_prediction(paced(0.020, 16))["value"] is None
