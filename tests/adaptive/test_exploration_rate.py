"""Exploration's pace follows its cost: an idle backend on a device of its own, while the winner is busy,
slows no other engine's requests and joins no queue when measured, so it takes the requests outright (it is
assumed as fast as its measured peer until measured: routing/model/peers.py); one sharing a device with a busy
engine accrues at a fraction of the policy's epsilon."""

from __future__ import annotations

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import DECODE_POLICY, decode_samples, sent, with_adaptive

NOVEL = {"model": "m", "prompt": "a b c d e f g h i j k l m n o p", "max_tokens": 256, "stream": True}


def to_y(
    answers: dict[str, list[Sample]],
    devices: dict[str, str] | None,
    x_inflight: int,
    requests: int,
    y_inflight: int = 0,
) -> list[int]:
    """Requests (0-based, out of `requests`) that went to y, each backend having given `answers`, x and y
    running `x_inflight` and `y_inflight` requests."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for name, samples in answers.items():
        for sample in samples:
            recorder.record(name, "default", sample)
    policy = parse_policy(with_adaptive(DECODE_POLICY, explore_epsilon=0.25, refresh_requests=1000))
    router = PolicyRouter(FixedPolicy(policy), objective_scorer=AdaptiveScorer(recorder, devices=devices))
    pool = [BackendSnapshot("x", inflight=x_inflight), BackendSnapshot("y", inflight=y_inflight)]
    chosen = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(requests)]
    return [i for i, name in enumerate(chosen) if name == "y"]


def explored_at(devices: dict[str, str] | None, x_inflight: int = 3) -> list[int]:
    """Out of 20 requests, those that went to y, with x measured and y not."""
    return to_y({"x": decode_samples(0.020)}, devices, x_inflight, 20)


def test_an_idle_backend_alone_on_its_device_takes_the_requests_while_the_winner_is_busy() -> None:
    # As fast as x at a lower load: every request (the pool's loads stand still here), none an exploration.
    assert explored_at({"x": "box-1", "y": "box-2"}) == list(range(20))
    assert explored_at(None) == list(range(20))  # no device given: a device of its own
    # The winner idle: nothing to spread, the policy's epsilon (0.25) holds.
    assert explored_at(None, x_inflight=0) == [3, 7, 11, 15, 19]


def test_a_backend_sharing_a_device_with_a_busy_engine_is_not_hurried() -> None:
    # x's newest requests met ~8 others: exploring y would slow them, so credit accrues at 0.2 / 8 of
    # epsilon (contended_share), and no exploration falls within the first 20 requests.
    assert explored_at({"x": "spark", "y": "spark"}) == []


def early_explorations(
    y_tpot: float, devices: dict[str, str] | None = None, x_inflight: int = 0, y_inflight: int = 0
) -> list[int]:
    """Out of 12 requests, those that went to y, with x (the prefer order's first) on 3 answers at TPOT
    20 ms and y on 1 at `y_tpot`: neither holds min_samples (5), so the prior names the winner."""
    answers = {"x": decode_samples(0.020, n=3), "y": decode_samples(y_tpot, n=1)}
    return to_y(answers, devices, x_inflight, 12, y_inflight)


def test_a_backend_whose_first_answers_beat_the_winner_is_measured_at_once() -> None:
    # y's one answer is twice as fast as x's: measuring it is expected to cost nothing, so every request
    # explores it until min_samples (5) explorations are under way.
    assert early_explorations(0.010) == [0, 1, 2, 3, 4]
    # Slower than x: measuring it costs, and the policy's pace (epsilon 0.25) holds.
    assert early_explorations(0.040) == [3, 7, 11]
    # y's one answer met a load of 1: it says nothing of y with 3 requests in flight (paced), and there
    # the request would queue behind more requests than on x (paced slower still: test below).
    assert early_explorations(0.010, x_inflight=3, y_inflight=3) == [3, 7, 11]
    assert early_explorations(0.010, y_inflight=3) == []
    # Beside a busy x on one device, measuring y slows x's requests however fast y is: paced as before.
    assert early_explorations(0.010, {"x": "spark", "y": "spark"}, x_inflight=3) == []


def test_a_backend_alone_on_its_device_is_explored_slower_while_it_runs_more_than_the_winner() -> None:
    def explored(x_inflight: int, y_inflight: int, requests: int = 12) -> list[int]:
        return to_y({"x": decode_samples(0.020)}, None, x_inflight, requests, y_inflight)

    # Each on a device of its own, y no busier than x: the policy's pace (epsilon 0.25) holds.
    assert explored(2, 2) == [3, 7, 11]
    # y busier: a request explored there waits behind more requests than on x, a cost a blind balancer
    # never pays, so the pace falls with that queue against x's: (1 + 1) / (2 + 1) of epsilon.
    assert explored(1, 2) == [5, 11]
    # Slower, never stopped: y's estimate is still made, and its blind bound (5 / 0.25 requests) holds.
    assert explored(0, 3) == []
    assert explored(0, 3, requests=24) == [15, 21, 23]


def test_a_request_answered_in_one_piece_explores_nothing() -> None:
    """A non-streamed answer shows no first token nor decode pace: it would measure nothing where it
    explored, so non-streaming clients keep to the prior while streamed requests of the same profile
    explore at the policy's rate."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in decode_samples(0.020):
        recorder.record("x", "default", sample)
    policy = parse_policy(with_adaptive(DECODE_POLICY, explore_epsilon=0.25, refresh_requests=1000))
    router = PolicyRouter(FixedPolicy(policy), objective_scorer=AdaptiveScorer(recorder))
    pool = [BackendSnapshot("x"), BackendSnapshot("y")]
    whole = {**NOVEL, "stream": False}
    assert [sent(router, router.route("completions", whole, pool)) for _ in range(20)] == ["x"] * 20
    streamed = [sent(router, router.route("completions", NOVEL, pool)) for _ in range(20)]
    assert [i for i, name in enumerate(streamed) if name == "y"] == [3, 7, 11, 15, 19]
