from __future__ import annotations

from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import Clock, make_router, serve


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
    # After both cells hold min_samples, y (8x slower TTFT) gets nothing more.
    assert chosen[100:].count("y") == 0
    assert 5 <= chosen.count("y") <= 6


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
    moved_at = next(i for i in range(len(after)) if after[i:].count("x") == 0)
    assert moved_at <= 25, after
