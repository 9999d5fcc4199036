"""Adaptive routing on backends that share one device: what a request does to the requests in flight."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.policy.load import parse_policy
from gateway.proxy.decode_probe import PROBE_PROFILE
from gateway.records import BackendSnapshot, ExplorationPlan
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.model.cells import build_model
from gateway.routing.model.fitting import fit_load
from gateway.routing.model.harm import DeviceLoad, device_harm
from gateway.routing.model.shared_device import holders
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import DECODE_POLICY as POLICY
from tests.adaptive.routing_loop import POLICY as E2E_POLICY
from tests.adaptive.routing_loop import decode_samples as samples
from tests.adaptive.routing_loop import sent, with_adaptive


def test_the_fit_separates_the_backends_own_batch_from_a_busy_neighbour() -> None:
    points = [(float(c), z, 0.02 + 0.001 * c + 0.015 * z) for c in range(1, 9) for z in (0.0, 1.0)]
    fit = fit_load(points)
    assert fit is not None
    assert fit.slope == pytest.approx(0.001) and fit.contention == pytest.approx(0.015)
    assert fit.at(4, device_busy=True) - fit.at(4) == pytest.approx(0.015)


def test_a_neighbour_that_never_varied_adds_no_contention_term() -> None:
    fit = fit_load([(float(c), 1.0, 0.02 + 0.001 * c) for c in range(1, 9)])
    assert fit is not None and fit.contention == 0.0 and fit.slope == pytest.approx(0.001)


def test_a_request_on_the_idle_engine_is_charged_for_slowing_the_busy_one() -> None:
    busy = build_model(samples(0.020))
    device = [DeviceLoad("x", 14, False, busy), DeviceLoad("y", 0, False, build_model(samples(0.018)))]
    harm = device_harm("y", duration=50.0, device=device)
    # 14 requests, each 128 tokens still to go (half of 256), each token slower by the fitted contention
    # term: the linear fit sees the 0.8 x TPOT slow-down at the samples' mean batch (8.5).
    assert harm["x"] == pytest.approx(14 * 128 * 0.8 * (0.020 + 0.0004 * 8.5), rel=0.1)
    short = device_harm("y", duration=1.0, device=device)  # over before they are: fewer tokens slowed
    assert short["x"] < harm["x"] / 4
    own = device_harm("x", duration=50.0, device=device)  # joining the busy engine: its batch grows by one
    assert own["x"] < harm["x"] / 20


def test_stress_traffic_stays_on_the_busy_engine_of_a_shared_device() -> None:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in samples(0.020):
        recorder.record("x", "default", sample)
    for sample in samples(0.018):  # y is faster per request, at any load
        recorder.record("y", "default", sample)
    scorer = AdaptiveScorer(recorder, devices={"x": "spark", "y": "spark"})
    policy = FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0)))
    router = PolicyRouter(policy, objective_scorer=scorer)
    body = {"model": "m", "prompt": "hi " * 40, "max_tokens": 256, "stream": True}
    loaded = [BackendSnapshot("x", inflight=14), BackendSnapshot("y")]
    assert router.route("completions", body, loaded).ranked[0] == "x"
    apart = AdaptiveScorer(recorder)
    router = PolicyRouter(policy, objective_scorer=apart)
    assert router.route("completions", body, loaded).ranked[0] == "y"  # separate devices: spread
    explained = PolicyRouter(policy, objective_scorer=scorer).explain("completions", body, loaded)["scoring"][
        "adaptive"
    ]["predictions"]
    y = next(p for p in explained if p["backend"] == "y")
    assert y["harm_s"] > 0 and y["own_value"] > y["value"]


def test_exploration_counts_requests_still_in_flight() -> None:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    scorer = AdaptiveScorer(recorder)
    router = PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0.5))), objective_scorer=scorer
    )
    body = {"model": "m", "prompt": "hi", "max_tokens": 8, "stream": True}
    # 100 arrivals before any answer is recorded: y may be explored at most min_samples times.
    chosen = [
        sent(router, router.route("completions", body, [BackendSnapshot("x"), BackendSnapshot("y")]))
        for _ in range(100)
    ]
    assert chosen.count("y") <= 5 and chosen.count("x") >= 95 - 5


def first_exploration(
    x_inflight: int,
    y_inflight: int,
    devices: dict[str, str],
    history: bool = True,
    min_samples: int = 5,
    routes: int = 4000,
    refresh_requests: int = 40,
) -> list[int]:
    """Which of `routes` requests explore y (the winner x is measured, y never answered), epsilon 0.5."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in samples(0.020) if history else []:  # x's newest 16 requests met a load of 8.5 on average
        recorder.record("x", "default", sample)
    policy = with_adaptive(
        POLICY, explore_epsilon=0.5, min_samples=min_samples, refresh_requests=refresh_requests
    )
    scorer = AdaptiveScorer(recorder, devices=devices)
    router = PolicyRouter(FixedPolicy(parse_policy(policy)), objective_scorer=scorer)
    body = {"model": "m", "prompt": "hi", "max_tokens": 8, "stream": True}
    pool = [BackendSnapshot("x", inflight=x_inflight), BackendSnapshot("y", inflight=y_inflight)]
    return [i for i in range(routes) if sent(router, router.route("completions", body, pool)) == "y"]


SHARED = {"x": "spark", "y": "spark"}


def test_exploration_waits_for_a_moment_when_it_slows_the_busy_engine_least() -> None:
    # Credit accrues at 0.5 per request, or 0.5 x 0.2 / (requests slowed) on a shared device.
    # Separate devices: y, assumed as fast as x until measured, takes every request while x is busier.
    assert first_exploration(14, 0, {})[:5] == [0, 1, 2, 3, 4]
    assert first_exploration(0, 0, SHARED, history=False)[:2] == [1, 3]  # a quiet device: the same
    # Waking y next to x's 14 requests slows all 14: credit accrues at 0.5 x 0.2 / 14 per request, so it
    # would wait for the 140th. Deferred only up to a bound: a cell short of min_samples is due once
    # min_samples / epsilon = 10 requests went by; beside a busy engine it waits for a quiet moment up to
    # twice that (plan.QUIET_WAIT), then is measured whatever the contention.
    # Back to back, so the 5 overlap: y keeps x's requests company for one request's time, not five.
    assert first_exploration(14, 0, SHARED) == [20, 21, 22, 23, 24]  # and never more than min_samples
    assert first_exploration(14, 3, SHARED)[0] == 20
    # Within a farther bound, the deferral itself: y already runs 3, so only ~1/4 of an exploration keeps
    # it busy longer and x's 14 count as 3.5 (the 35th request); x between two requests of a stream whose
    # requests met 8.5 on average is not a quiet device (the 85th).
    far = {"min_samples": 50, "refresh_requests": 1000}
    assert first_exploration(14, 3, SHARED, **far)[0] == 34
    assert first_exploration(0, 0, SHARED, **far)[0] == 84


def test_deferred_exploration_is_kept_less_often_the_more_requests_it_would_slow() -> None:
    # min_samples 1000 at epsilon 0.5: due only after 2000 requests, so the first 2000 show the deferral.
    kept = {
        n: len(first_exploration(n, 0, SHARED, min_samples=1000, routes=2000, refresh_requests=5000))
        for n in (1, 16, 32)
    }
    # 2000 requests at 0.5 x 0.2 / n: next to 16 in flight 12, next to 32 6; next to 1, x's recent
    # load (8.5) counts: 23.
    assert kept == {1: 23, 16: 12, 32: 6}


def claims_held(
    y_value: float, x_inflight: int = 14, capacity: int | None = None, x_claim: bool = True
) -> dict[str, str]:
    """holders() for x (100 tok/s with the device's load on it alone) and an idle y sharing its device."""
    model = build_model(samples(0.020))
    x, y = DeviceLoad("x", x_inflight, False, model, capacity), DeviceLoad("y", 0, x_inflight > 0, model)
    claims = {"y": y_value} | ({"x": 100.0} if x_claim else {})
    return holders({"x": [x, y], "y": [x, y]}, claims, higher_is_better=True, margin=0.125)


def test_a_shared_device_is_left_to_the_engine_holding_it_unless_another_clearly_beats_it() -> None:
    assert claims_held(110.0) == {"y": "x"}  # 10 % faster alone: not worth moving the device's traffic
    assert claims_held(130.0) == {}  # 30 % faster: the traffic moves to it
    assert claims_held(110.0, x_inflight=32, capacity=32) == {}  # the holder is full: beyond, it queues
    assert claims_held(110.0, x_inflight=0) == {}  # an idle device has no holder
    assert claims_held(110.0, x_claim=False) == {}  # the holder's steady state unknown: costs decide


def shared_and_apart(y_tpot: float) -> tuple[str, str, str]:
    """Where a decode request goes with x running 14 (measured at loads 1 to 16, never beside y, so no
    contention learned) and y idle, measured at loads 1 to 3 only (a flat fit) at `y_tpot`: on one device
    and on two, and the shared device's reason."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    alone = [replace(s, device_share=0.0) for s in samples(0.020)]
    for sample in alone:
        recorder.record("x", "default", sample)
    for sample in alone[:3] * 2:
        recorder.record("y", "default", replace(sample, e2e=0.1 + 255 * y_tpot))
    policy = FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0)))
    body = {"model": "m", "prompt": "hi " * 40, "max_tokens": 256, "stream": True}
    loaded = [BackendSnapshot("x", inflight=14), BackendSnapshot("y")]
    shared = PolicyRouter(policy, objective_scorer=AdaptiveScorer(recorder, devices=SHARED))
    why = shared.explain("completions", body, loaded)["scoring"]["adaptive"]["why"]
    apart = PolicyRouter(policy, objective_scorer=AdaptiveScorer(recorder))
    return (
        shared.route("completions", body, loaded).ranked[0],
        apart.route("completions", body, loaded).ranked[0],
        why,
    )


def test_requests_stay_with_the_engine_holding_the_device_unless_another_beats_it_at_its_load() -> None:
    # x's fit, over samples a third of which met contention it did not learn, reads 0.027 s at 3. y at
    # 0.025 is half again as fast per request as x at the 15 x runs, but only 8 % faster at the loads it
    # measured, so carried along x's fit to 15 as well: not worth moving the device's traffic. On
    # separate devices y wins.
    shared, apart, why = shared_and_apart(0.025)
    assert (shared, apart) == ("x", "y") and "y leaves its device to x" in why
    # Twice as fast at any load: the device's traffic moves to y.
    shared, apart, why = shared_and_apart(0.010)
    assert (shared, apart) == ("y", "y") and "leaves its device" not in why


def test_a_claim_is_not_carried_along_a_holder_that_never_measured_the_claimants_loads() -> None:
    """x measured only at 9-16 in flight: below 9 its fit is flat, so carrying y's speed at 1-3 along it
    would claim at x's load what y did alone. Nothing is claimed, and x keeps the device."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    alone = [replace(s, device_share=0.0) for s in samples(0.020)]
    for sample in alone:
        if sample.concurrency >= 9:
            recorder.record("x", "default", sample)
    for sample in alone[:3] * 2:
        recorder.record("y", "default", replace(sample, e2e=0.1 + 255 * 0.010))
    policy = FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0)))
    body = {"model": "m", "prompt": "hi " * 40, "max_tokens": 256, "stream": True}
    loaded = [BackendSnapshot("x", inflight=14), BackendSnapshot("y")]
    router = PolicyRouter(policy, objective_scorer=AdaptiveScorer(recorder, devices=SHARED))
    why = router.explain("completions", body, loaded)["scoring"]["adaptive"]["why"]
    assert router.route("completions", body, loaded).ranked[0] == "x" and "y leaves its device to x" in why


def probed(
    x_inflight: int,
    probes: bool = True,
    devices: dict[str, str] = SHARED,
    y_probed: int = 0,
    y_tpot: float = 0.030,
    policy_text: str = POLICY,
    y_answered: int = 0,
) -> list[tuple[int, str, int]]:
    """(request, where it went, the decode probes it sent y) for each request that measured y, as in
    first_exploration (x measured and busy, y short of answers on the profile, epsilon 0.5); `y_probed`:
    decode probes y answered before, at `y_tpot` (x's is 0.020); `y_answered`: answers of the profile y
    holds, as fast."""
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in samples(0.020):
        recorder.record("x", "default", sample)
    for sample in samples(y_tpot)[:y_probed]:
        recorder.record("y", PROBE_PROFILE, sample)
    for sample in samples(y_tpot)[:y_answered]:
        recorder.record("y", "default", sample)
    policy = FixedPolicy(parse_policy(with_adaptive(policy_text, explore_epsilon=0.5, min_samples=5)))
    router = PolicyRouter(policy, objective_scorer=AdaptiveScorer(recorder, devices=devices, probes=probes))
    body = {"model": "m", "prompt": "hi", "max_tokens": 8, "stream": True}
    pool = [BackendSnapshot("x", inflight=x_inflight), BackendSnapshot("y")]
    measured = []
    for i in range(40):
        decision = router.route("completions", body, pool)
        plan = decision.exploration
        went = sent(router, decision)
        probes = 0 if plan is None else plan.probes
        if went == "y" or probes:
            measured.append((i, went, probes))
    return measured


def test_a_busy_neighbour_gets_decode_probes_where_a_request_would_have_explored() -> None:
    # y is due after 10 requests: the five probes its estimate lacks go together, every request still going
    # to x. A probe costs x's requests a few tokens' company, so it does not wait for a quiet moment as a
    # request does.
    assert probed(14) == [(10, "x", 5)]
    assert probed(14, probes=False) == [(i, "y", 0) for i in (20, 21, 22, 23, 24)]  # no prober
    # On a device of its own, y slows nobody: assumed as fast as the busy x, it takes the requests.
    assert probed(14, devices={}) == [(i, "y", 0) for i in range(40)]


def test_an_e2e_request_is_put_off_by_probes_only_where_they_show_its_engine_decoding_slower() -> None:
    # An e2e cell borrows no decode speed, but y decoding half again slower than x is not worth a whole
    # request beside x's 14: one probe a refresh, counted as the cell's, as for tokens_per_second.
    assert probed(14, y_probed=5, policy_text=E2E_POLICY) == [(i, "x", 1) for i in (10, 11, 12, 13, 14)]
    # Shown faster, y is measured by requests of its own, as without probes.
    by_requests = [(i, "y", 0) for i in (20, 21, 22, 23, 24)]
    assert probed(14, y_probed=5, y_tpot=0.010, policy_text=E2E_POLICY) == by_requests
    assert probed(14, probes=False, policy_text=E2E_POLICY) == by_requests
    # A cell that held answers of the profile is refreshed by requests, what those answers measured
    # (its decode speed alone is what a probe refreshes for tokens_per_second).
    assert probed(14, y_probed=5, y_answered=3, policy_text=E2E_POLICY) == by_requests
    assert probed(14, y_probed=5, y_answered=3) == [(i, "x", 1) for i in (10, 11, 12, 13, 14)]
    # Not known yet: probes go, and the cell stays due (they are not its measurement), so requests of its
    # own follow once an answer shows y as fast.
    unknown = probed(14, policy_text=E2E_POLICY)
    assert unknown[:2] == [(10, "x", 5), (11, "x", 5)] and all(went == "x" for _, went, _ in unknown)


def test_probes_top_up_what_the_engine_fit_lacks() -> None:
    # Three probes answered: two more make the five an estimate needs. Five answered: one refreshes it.
    assert probed(14, y_probed=3)[0] == (10, "x", 2)
    assert probed(14, y_probed=5)[0] == (10, "x", 1)


def test_an_engine_holding_the_device_is_measured_rather_than_its_idle_neighbour_woken() -> None:
    # x is measured and idle; y runs 7 requests on the same Spark and has no estimate for the profile.
    # Sent to x, the request would slow y's 7 for its whole life; sent to y, nobody.
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in samples(0.020):
        recorder.record("x", "default", sample)
    policy = FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0.5, min_samples=5)))
    body = {"model": "m", "prompt": "hi", "max_tokens": 8, "stream": True}

    def goes(devices: dict[str, str], y_inflight: int, probes: bool = False, explorations: int = 0) -> str:
        scorer = AdaptiveScorer(recorder, devices=devices, probes=probes)
        for _ in range(explorations):  # y's requests in flight measuring it for the profile
            scorer.book(ExplorationPlan("default", accrued=1.0, backend="y"), "y")
        router = PolicyRouter(policy, objective_scorer=scorer)
        pool = [BackendSnapshot("x"), BackendSnapshot("y", inflight=y_inflight)]
        decision = router.route("completions", body, pool)
        assert decision.exploration is None or not decision.exploration.probe  # no probe stands for it
        return sent(router, decision)

    assert goes(SHARED, 7) == "y"
    assert goes(SHARED, 7, probes=True) == "y"
    assert goes(SHARED, 0) == "x"  # a quiet device: the measured x (y is explored as paced)
    assert goes({}, 7) == "x"  # a device each: waking x slows nobody
    # y's own explorations of the profile do not make it the holder: a closed loop on x would otherwise
    # follow them there one idle moment of x at a time
    assert goes(SHARED, 2, explorations=2) == "x"
    assert goes(SHARED, 3, explorations=2) == "y"
