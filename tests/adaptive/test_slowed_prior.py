"""A profile no backend has measured follows the policy's prefer order, except onto an engine seen running
slower than its own measurements: the prefer order speaks of healthy engines (verdict.demoted)."""

from __future__ import annotations

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, InFlight, Progress, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.adaptive.verdict import demoted
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import POLICY, with_adaptive

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 64}


def streams(gap: float, n: int = 24) -> list[Sample]:
    """x's finished streams of the default profile at loads 1..8 (decode pace `gap` plus a little per
    request in flight)."""
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


def in_flight(gap: float, n: int = 6) -> Progress:
    requests = tuple(
        InFlight("default", n, True, 3.0, first_content_s=0.2, frames=40, recent_itl_s=gap) for _ in range(n)
    )
    return Progress(n, requests)


def first_for_chat(progress_of_x: Progress) -> str:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in streams(0.020):
        recorder.record("x", "default", sample)
    scorer = AdaptiveScorer(recorder, progress=lambda name: progress_of_x if name == "x" else Progress())
    router = PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0))), objective_scorer=scorer
    )
    # As busy as each other: engines alone on their devices are ranked by load while no backend of the
    # profile is measured (peers.levelled_prior), and the prefer order breaks the tie.
    n = progress_of_x.inflight
    pool = [BackendSnapshot("x", inflight=n), BackendSnapshot("y", inflight=n)]
    return router.route("chat", CHAT, pool).ranked[0]


def test_an_unmeasured_profile_follows_the_prefer_order_onto_a_healthy_engine() -> None:
    assert first_for_chat(in_flight(0.026)) == "x"  # x's streams on its fit (0.026 s at 6 in flight)


def test_an_unmeasured_profile_avoids_the_preferred_engine_once_it_is_seen_slowed() -> None:
    assert first_for_chat(in_flight(0.026 * 2.5)) == "y"


def test_demoted_ranks_slowed_backends_after_the_others_and_keeps_their_order() -> None:
    prior = {"a": 1.0, "b": 0.75, "c": 0.5, "d": 0.25}
    moved = demoted(prior, {"a", "b"})
    assert sorted(moved, key=moved.__getitem__, reverse=True) == ["c", "d", "a", "b"]
    assert demoted(prior, set()) == prior
    # Nothing to rank them after (the others are outside the prefer list): the prior stands.
    assert demoted({"a": 1.0, "z": 0.0}, {"a"}) == {"a": 1.0, "z": 0.0}
