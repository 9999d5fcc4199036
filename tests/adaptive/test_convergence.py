from __future__ import annotations

from collections.abc import Sequence

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.adaptive.verdict import Verdict
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import POLICY, Clock, make_router, sent, serve, with_adaptive


def split(backend: str, profile: str, concurrency: int) -> tuple[float, float]:
    """x answers chat fast (TTFT) but decodes slowly; y the other way round."""
    if profile == "chat":
        return (0.05, 0.03) if backend == "x" else (0.40, 0.03)
    return (0.10, 0.050) if backend == "x" else (0.10, 0.020)


def test_the_router_converges_to_the_better_backend_per_profile() -> None:
    clock = Clock()
    recorder = LiveRecorder(clock=clock)
    router = make_router(recorder)
    chat = [serve(router, recorder, clock, "chat", split) for _ in range(60)]
    bulk = [serve(router, recorder, clock, "completions", split) for _ in range(60)]
    assert chat[-30:].count("x") >= 28  # x: TTFT 50 ms against 400 ms
    assert bulk[-30:].count("y") >= 28  # y: e2e 1.36 s against 3.25 s, although the policy prefers x
    assert len(recorder.samples("y", "chat")) >= 5  # the loser was measured, not assumed


def test_exploration_is_bounded_once_every_cell_is_measured() -> None:
    clock = Clock()
    recorder = LiveRecorder(clock=clock)
    router = make_router(recorder)
    chosen = [serve(router, recorder, clock, "chat", split) for _ in range(200)]
    # After both cells hold min_samples, y (8x slower TTFT) gets only its refreshes: one once its estimate
    # is refresh_requests (40) requests of the profile old, sent within two requests (MAX_EPSILON).
    measured = [i for i, name in enumerate(chosen) if name == "y"][4]
    refreshes = [i for i, name in enumerate(chosen) if name == "y" and i > measured]
    gaps = [b - a for a, b in zip([measured, *refreshes], refreshes, strict=False)]
    assert refreshes and all(40 < gap <= 42 for gap in gaps), refreshes
    assert 200 - refreshes[-1] <= 42
    assert chosen[100:].count("y") <= 3


def test_a_backend_that_slows_down_loses_its_traffic_within_a_bounded_number_of_requests() -> None:
    clock = Clock()
    recorder = LiveRecorder(max_samples=32, clock=clock)
    router = make_router(recorder)
    slowed = {"x": 1.0}

    def perf(backend: str, profile: str, concurrency: int) -> tuple[float, float]:
        ttft, tpot = (0.10, 0.020) if backend == "x" else (0.10, 0.026)
        factor = slowed.get(backend, 1.0)
        return ttft * factor, tpot * factor

    before = [serve(router, recorder, clock, "completions", perf) for _ in range(60)]
    assert before[-20:].count("x") >= 19
    slowed["x"] = 3.0  # the twin's slow-down fault: every step three times longer
    after = [serve(router, recorder, clock, "completions", perf) for _ in range(60)]
    # From then on x gets only its refreshes: at most one per refresh_requests (40) requests.
    moved_at = next(i for i in range(len(after)) if "x" not in after[i : i + 40])
    assert moved_at <= 25, after
    assert after[moved_at:].count("x") <= 1, after


def test_exploration_goes_to_a_backend_that_would_not_win_anyway() -> None:
    recorder = LiveRecorder(clock=Clock())
    scorer = AdaptiveScorer(recorder)
    router = PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0.25))), objective_scorer=scorer
    )
    explored: list[str] = []
    decide = scorer.decide

    def watched(ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> Verdict:
        verdict = decide(ctx, backends)
        if verdict.explored is not None:
            explored.append(verdict.explored.backend)
        return verdict

    scorer.decide = watched  # type: ignore[method-assign]
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for _ in range(60):
        sent(router, router.route("chat", chat, [BackendSnapshot("x"), BackendSnapshot("y")]))
    # Nothing is ever recorded: the prior keeps picking x, which its own traffic would measure, so every
    # exploration goes to y (the least measured by name would have been x itself).
    assert explored == ["y"] * 5


BORROW_POLICY = """
version: 1
routing: adaptive
profiles:
  - name: long
    when: {prompt_tokens: {gte: 1000}}
    prefer: [x, y]
    objective: tokens_per_second
  - name: short-ttft
    when: {prompt_tokens: {gte: 500}}
    prefer: [x, y]
    objective: ttft
  - name: default
    prefer: [x, y]
    objective: e2e
"""


def test_a_decode_speed_profile_borrows_the_engines_fit_until_its_own_cell_is_measured() -> None:
    recorder = LiveRecorder(clock=Clock())
    for _ in range(8):  # y decodes twice as fast as x, measured on short prompts only
        recorder.record(
            "x", "default", Sample(e2e=2.6, ttft=0.05, output_tokens=64, prompt_tokens=40, concurrency=1)
        )
        recorder.record(
            "y", "default", Sample(e2e=1.3, ttft=0.05, output_tokens=64, prompt_tokens=40, concurrency=1)
        )
    scorer = AdaptiveScorer(recorder)
    router = PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(BORROW_POLICY, explore_epsilon=0))), objective_scorer=scorer
    )
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]

    def first(prompt_words: int) -> str:
        # Novel words: the samples are novel prose, and a fit speaks only for the content it measured.
        prompt = " ".join(f"w{i}" for i in range(prompt_words))
        body = {"model": "m", "prompt": prompt, "max_tokens": 64, "stream": True}
        return router.route("completions", body, pool).ranked[0]

    assert first(1500) == "y"  # tokens_per_second: the engine's decode speed, whatever the prompt
    assert first(700) == "x"  # ttft depends on the prompt: no borrowing, the prior (x) until measured
