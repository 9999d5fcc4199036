"""A backend not yet measured, alone on its device, is assumed as fast as its measured peer: it takes load
as least-in-flight would, a burst included, and its own samples take over once it has min_samples
answers (routing/model/peers.py)."""

from __future__ import annotations

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import DECODE_POLICY, decode_samples, with_adaptive

BODY = {"model": "m", "prompt": "a b c d e f g h i j k l m n o p", "max_tokens": 256, "stream": True}


def router(
    y_tpot: float | None = None,
    devices: dict[str, str] | None = None,
    x_answers: int = 40,
    y_answers: int = 5,
) -> PolicyRouter:
    """x measured on `x_answers` requests (TPOT 20 ms and up); y on `y_answers` at `y_tpot`, or never."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in decode_samples(0.020, n=x_answers):
        recorder.record("x", "default", sample)
    for sample in decode_samples(y_tpot, n=y_answers) if y_tpot is not None else []:
        recorder.record("y", "default", sample)
    policy = parse_policy(with_adaptive(DECODE_POLICY, explore_epsilon=0))
    return PolicyRouter(FixedPolicy(policy), objective_scorer=AdaptiveScorer(recorder, devices=devices))


def first(router: PolicyRouter, x_inflight: int, y_inflight: int = 0) -> str:
    pool = [BackendSnapshot("x", inflight=x_inflight), BackendSnapshot("y", inflight=y_inflight)]
    return router.route("completions", BODY, pool).ranked[0]


def test_an_unmeasured_backend_of_its_own_device_takes_the_request_when_its_peer_is_busier() -> None:
    apart = router()
    assert first(apart, x_inflight=3) == "y"
    assert first(apart, x_inflight=3, y_inflight=4) == "x"  # as fast, and busier: the peer
    assert first(apart, x_inflight=8, y_inflight=4) == "y"
    # Five requests sent on the assumption and none answered yet: a burst still splits as least-in-flight
    # would, never more onto y than onto x.
    assert first(apart, x_inflight=8, y_inflight=5) == "y"
    assert first(apart, x_inflight=8, y_inflight=8) == "x"
    assert first(apart, x_inflight=0) == "x"  # a tie: the policy's prefer order
    y = next(
        p
        for p in apart.explain("completions", BODY, [BackendSnapshot("x", inflight=3), BackendSnapshot("y")])[
            "scoring"
        ]["adaptive"]["predictions"]
        if p["backend"] == "y"
    )
    assert "assumed as fast as x" in y["why"] and y["value"] is not None


def test_beside_a_busy_neighbour_an_unmeasured_backend_waits_to_be_measured() -> None:
    # On x's device, y would slow x's requests in a way x's fit never saw: no prediction, ranked after.
    assert first(router(devices={"x": "spark", "y": "spark"}), x_inflight=3) == "x"


def test_its_own_samples_take_over_from_the_peers() -> None:
    assert first(router(y_tpot=0.080), x_inflight=3) == "x"  # measured 4x slower: the busier x still wins
    assert first(router(y_tpot=0.020), x_inflight=3) == "y"


def test_answers_too_few_to_rank_it_still_end_the_assumption_when_they_are_slower() -> None:
    # Two answers of y, 4x slower than x: no prediction of its own yet, and no longer assumed x's equal.
    assert first(router(y_tpot=0.080, y_answers=2), x_inflight=3) == "x"
    # Two answers as fast as x's (one of them beside a busy neighbour, 1.8x): the assumption stands.
    assert first(router(y_tpot=0.014, y_answers=2), x_inflight=3) == "y"


def test_with_no_backend_measured_a_burst_splits_as_least_in_flight_would_from_a_batch_on() -> None:
    # x holds 3 answers and y none: no peer to borrow from, yet neither is known to be slower, so load
    # ranks them and the prefer order only breaks a tie (a burst does not all go to the prior's first).
    blind = router(x_answers=3)
    assert first(blind, x_inflight=0) == "x"
    # A second request costs x little and the policy may know why y is worse for it: the order stands.
    assert first(blind, x_inflight=1) == "x"
    assert first(blind, x_inflight=2) == "y"  # from a batch on, load ranks them
    assert first(blind, x_inflight=9, y_inflight=8) == "y"
    assert first(blind, x_inflight=8, y_inflight=9) == "x"
    # On one device, spreading a burst over two engines is contention, not balance: the prior ranks.
    assert first(router(devices={"x": "spark", "y": "spark"}, x_answers=3), x_inflight=3) == "x"
