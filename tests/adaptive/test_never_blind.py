"""Adaptive routing never goes blind: every eligible backend's estimate has a bounded age, a change on the
winner makes the others due at once, the objective counts the wait a backend's load adds, and content
(repetitive or novel) is a dimension of the decode-speed estimates."""

from __future__ import annotations

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, ExplorationPlan, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import DECODE_POLICY, POLICY, decode_samples, paced, sent, with_adaptive

SHARED = {"x": "spark", "y": "spark"}
NOVEL = {"model": "m", "prompt": "a b c d e f g h i j k l m n o p", "max_tokens": 256, "stream": True}
REPETITIVE = {"model": "m", "prompt": "edit this line please " * 20, "max_tokens": 256, "stream": True}


def router_over(recorder: LiveRecorder, policy: str, devices: dict[str, str] | None = None) -> PolicyRouter:
    return PolicyRouter(
        FixedPolicy(parse_policy(policy)), objective_scorer=AdaptiveScorer(recorder, devices=devices)
    )


def refreshes_beside_busy_x(
    y_samples: list[Sample], requests: int, devices: dict[str, str] | None = SHARED, x_inflight: int = 14
) -> list[int]:
    """The requests (by index) sent to y, measured by `y_samples`, while x, measured faster, runs 14 (or
    `x_inflight`) on their shared device (or `devices`); refreshes are due after 30 requests."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in decode_samples(0.020):
        recorder.record("x", "default", sample)
    for sample in y_samples:
        recorder.record("y", "default", sample)
    router = router_over(
        recorder, with_adaptive(DECODE_POLICY, explore_epsilon=0.5, refresh_requests=30), devices
    )
    pool = [BackendSnapshot("x", inflight=x_inflight), BackendSnapshot("y")]
    chosen = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(requests)]
    return [i for i, name in enumerate(chosen) if name == "y"]


def test_a_measured_loser_next_to_a_busy_winner_is_refreshed_within_the_bound() -> None:
    refreshes = refreshes_beside_busy_x(decode_samples(0.030, n=5), 200)  # y slower: it never wins
    # Contention (x's 14 busy requests) would defer y forever; the bound does not. A refresh there puts a
    # client's request beside x's 14, so it waits for a quiet moment up to twice the bound (none comes
    # here): y is refreshed once its estimate is 60 requests old, within two requests (MAX_EPSILON), and
    # only then (its answer is due).
    assert refreshes and refreshes[0] in (60, 61), refreshes
    assert all(60 < b - a <= 62 for a, b in zip(refreshes, refreshes[1:], strict=False)), refreshes


def test_a_refresh_that_slows_no_neighbour_goes_at_the_bound() -> None:
    # The same engines on devices of their own, x idle: refreshing y slows none of x's requests, so it
    # does not wait: due once its estimate is 30 requests old.
    refreshes = refreshes_beside_busy_x(decode_samples(0.030, n=5), 100, devices=None, x_inflight=0)
    assert refreshes and refreshes[0] in (30, 31), refreshes
    assert all(30 < b - a <= 32 for a, b in zip(refreshes, refreshes[1:], strict=False)), refreshes


def test_the_seconds_bound_refreshes_a_slow_profile() -> None:
    clock = [1_000_000.0]
    recorder = LiveRecorder(clock=lambda: clock[0])
    for backend, base in (("x", 0.020), ("y", 0.030)):
        for sample in decode_samples(base, n=8):
            recorder.record(backend, "default", sample)
    policy = with_adaptive(DECODE_POLICY, explore_epsilon=0.5, refresh_requests=1000, refresh_s=60)
    router = router_over(recorder, policy)
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]
    first = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(3)]
    clock[0] += 61.0  # a minute with no request of the profile
    later = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(2)]
    assert first.count("y") == 0 and later.count("y") == 1, (first, later)


def test_a_regime_change_on_the_winner_makes_the_alternatives_due_at_once() -> None:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    fast = Sample(e2e=0.1 + 255 * 0.02, ttft=0.1, output_tokens=256, prompt_tokens=100, concurrency=1)
    for _ in range(5):
        recorder.record(
            "y",
            "default",
            Sample(e2e=0.1 + 255 * 0.06, ttft=0.1, output_tokens=256, prompt_tokens=100, concurrency=1),
        )
    for _ in range(30):
        recorder.record("x", "default", fast)
    router = router_over(recorder, with_adaptive(POLICY, explore_epsilon=0.25))
    scorer = router.objective_scorer
    assert isinstance(scorer, AdaptiveScorer)
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]
    scorer.book(ExplorationPlan("default"), "y")  # y's newest send, before 20 requests to x
    assert [sent(router, router.route("completions", NOVEL, pool)) for _ in range(20)] == ["x"] * 20
    # x's newest samples leave its fit (2.25x slower, still ahead of y's 0.06 s per token): what is known
    # of y was measured before the change, so y is due now, not once its estimate is 40 requests old.
    slowed = Sample(e2e=0.25 + 255 * 0.045, ttft=0.25, output_tokens=256, prompt_tokens=100, concurrency=1)
    for _ in range(5):
        recorder.record("x", "default", slowed)
    chosen = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(2)]
    assert "y" in chosen  # refreshed within two requests, not after the 40 of the bound
    after = []
    for _ in range(10):  # x's answers keep coming: y, refreshed since the change, is not due again
        after.append(sent(router, router.route("completions", NOVEL, pool)))
        recorder.record("x", "default", slowed)
    assert after == ["x"] * 10


def test_load_adds_its_wait_to_the_decode_objective_so_traffic_splits_across_devices() -> None:
    """Two engines on devices of their own, x decoding 10 % faster; TTFT grows with each one's load (the
    queue a batch forms). At load, the 10 % does not pay for the wait: arrivals split across both."""

    def cell(tpot: float) -> list[Sample]:
        out = []
        for c in range(1, 17):
            ttft = 0.2 + 0.4 * (c - 1)  # each request ahead adds 0.4 s before the first token
            out.append(
                Sample(e2e=ttft + 255 * tpot, ttft=ttft, output_tokens=256, prompt_tokens=2048, concurrency=c)
            )
        return out

    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for backend, tpot in (("x", 0.020), ("y", 0.022)):
        for sample in cell(tpot):
            recorder.record(backend, "default", sample)
    router = router_over(recorder, with_adaptive(DECODE_POLICY, explore_epsilon=0))
    inflight = {"x": 0, "y": 0}
    for _ in range(16):  # a burst: each arrival sees the earlier ones in flight
        pool = [BackendSnapshot(name, inflight=n) for name, n in inflight.items()]
        inflight[router.route("completions", NOVEL, pool).ranked[0]] += 1
    assert 7 <= inflight["x"] <= 10 and inflight["y"] >= 6, inflight  # split, x a little more


def test_repetitive_and_novel_requests_go_where_each_decodes_faster() -> None:
    """s speculates: fast on repetitive content (drafts accepted), slow on novel; p decodes the same on
    both. One profile: the content bucket of the TPOT estimate tells the two apart."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    speeds = {("s", True): 0.010, ("s", False): 0.030, ("p", True): 0.020, ("p", False): 0.020}
    for i in range(40):
        for (backend, rep), tpot in speeds.items():
            c = 1 + i % 4
            recorder.record(
                backend,
                "default",
                Sample(
                    e2e=0.1 + 255 * tpot * (1 + 0.02 * c),
                    ttft=0.1,
                    output_tokens=256,
                    prompt_tokens=300,
                    concurrency=c,
                    repetition=0.8 if rep else 0.0,
                ),
            )
    policy = with_adaptive(DECODE_POLICY.replace("[x, y]", "[s, p]"), explore_epsilon=0)
    router = router_over(recorder, policy)
    pool = [BackendSnapshot("s"), BackendSnapshot("p")]
    assert router.route("completions", REPETITIVE, pool).ranked[0] == "s"
    assert router.route("completions", NOVEL, pool).ranked[0] == "p"


def test_repetitive_content_is_explored_apart_until_each_backend_has_its_estimate() -> None:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for backend, base in (("x", 0.020), ("y", 0.022)):
        for sample in decode_samples(base):  # novel samples only
            recorder.record(backend, "default", sample)
    router = router_over(recorder, with_adaptive(DECODE_POLICY, explore_epsilon=0.5))
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]
    novel = router.route("completions", NOVEL, pool)
    repetitive = router.route("completions", REPETITIVE, pool)
    assert novel.exploration is not None and novel.exploration.profile == "default"
    assert repetitive.exploration is not None and repetitive.exploration.profile == "default (repetitive)"
    explored = [sent(router, router.route("completions", REPETITIVE, pool)) for _ in range(4)]
    assert "y" in explored  # y has no repetitive sample: measured for that content


def test_a_stream_leaves_a_shared_device_engine_that_became_much_slower() -> None:
    """x, busy with 14 requests, decodes 2.5x slower than y on the same device (x throttled). Moving the
    stream slows x's last requests while both run, but y alone at the device's load is far ahead: the
    transient is not charged against every request, so traffic moves (a 10 % gap would not move it)."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in decode_samples(0.050):
        recorder.record("x", "default", sample)
    for sample in decode_samples(0.020):
        recorder.record("y", "default", sample)
    router = router_over(recorder, with_adaptive(DECODE_POLICY, explore_epsilon=0), SHARED)
    loaded = [BackendSnapshot("x", inflight=14), BackendSnapshot("y")]
    assert router.route("completions", NOVEL, loaded).ranked[0] == "y"


def test_a_slowed_engine_beside_a_busy_one_waits_its_slowdown_times_the_refresh_bound() -> None:
    """y's newest answers ran 3x its earlier pace (a throttled engine): a refresh puts a client's request on
    it for three times as long while x's 14 requests all run slower, so it waits three times the bound."""
    refreshes = refreshes_beside_busy_x(paced(0.030, 10) + paced(0.090, 6), 200)
    # Healthy, y was refreshed at the 60th request (twice the bound, the test above); slowed 3x, at the
    # 180th.
    assert refreshes and refreshes[0] in (180, 181), refreshes
