"""Charging a request for the time it keeps its engine busy next to a busy neighbour on the same device."""

from __future__ import annotations

import pytest

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.model.cells import CellModel, build_model
from gateway.routing.model.harm import DeviceLoad, busy_extension, device_harm
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import DECODE_POLICY as POLICY
from tests.adaptive.routing_loop import decode_samples as samples
from tests.adaptive.routing_loop import with_adaptive


def load(name: str, inflight: int, model: CellModel, device_busy: bool) -> DeviceLoad:
    return DeviceLoad(name, inflight, device_busy, model)


def test_the_extension_is_the_residence_beyond_the_longest_request_already_there() -> None:
    model = build_model(samples(0.020))
    assert busy_extension(load("y", 0, model, True), 12.0) == 12.0  # idle: the request starts the period
    longest = model.mean_e2e * 3 / 4  # 3 in flight, remaining times spread over [0, mean e2e]
    assert busy_extension(load("y", 3, model, True), 12.0) == pytest.approx(12.0 - longest)
    assert busy_extension(load("y", 3, model, True), longest / 2) == 0.0  # ends before they do


def test_prolonging_the_busy_period_next_to_a_busy_neighbour_is_charged() -> None:
    x, y = build_model(samples(0.020)), build_model(samples(0.018))
    busy_y = [load("x", 14, x, True), load("y", 3, y, True)]
    harm = device_harm("y", duration=50.0, device=busy_y)
    assert harm["x"] > 0  # before: zero, since y was busy already and woke nothing
    # Only the part beyond y's longest in-flight request counts: less than waking an idle y for 50 s.
    idle_y = [load("x", 14, x, False), load("y", 0, y, False)]
    woken = device_harm("y", duration=50.0, device=idle_y)["x"]
    assert x.tpot is not None
    shared, alone = x.tpot.at(14, True), x.tpot.at(14, False)
    extension = 50.0 - y.mean_e2e * 3 / 4
    assert harm["x"] == pytest.approx(14 * min(128, extension / shared) * (shared - alone))
    assert harm["x"] <= woken


def test_a_request_that_ends_before_its_engine_would_anyway_costs_the_neighbour_nothing() -> None:
    x, y = build_model(samples(0.020)), build_model(samples(0.018))
    device = [load("x", 14, x, True), load("y", 3, y, True)]
    assert "x" not in device_harm("y", duration=0.5, device=device)


def test_a_neighbour_kept_sharing_by_a_third_busy_engine_is_not_charged() -> None:
    x, y, z = (build_model(samples(base)) for base in (0.020, 0.018, 0.019))
    device = [load("x", 14, x, True), load("y", 3, y, True), load("z", 2, z, True)]
    assert "x" not in device_harm("y", duration=50.0, device=device)


def route(devices: dict[str, str], y_inflight: int) -> tuple[str, dict[str, object]]:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in samples(0.020):
        recorder.record("x", "default", sample)
    for sample in samples(0.018):  # y is faster per request, at any load
        recorder.record("y", "default", sample)
    scorer = AdaptiveScorer(recorder, devices=devices)
    router = PolicyRouter(
        FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0))), objective_scorer=scorer
    )
    body = {"model": "m", "prompt": "hi " * 40, "max_tokens": 256, "stream": True}
    pool = [BackendSnapshot("x", inflight=14), BackendSnapshot("y", inflight=y_inflight)]
    winner = router.route("completions", body, pool).ranked[0]
    explained = router.explain("completions", body, pool)["scoring"]["adaptive"]["predictions"]
    return winner, next(p for p in explained if p["backend"] == "y")


def test_a_long_request_joins_the_engine_that_keeps_the_device_to_itself() -> None:
    # y has one short-lived request left: a 256-token request there keeps it busy long after it ends,
    # slowing x's 14 requests all that time, so it goes to x even though y is faster for it alone.
    winner, y = route({"x": "spark", "y": "spark"}, y_inflight=1)
    assert winner == "x"
    assert y["busy_extension_s"] > 0 and y["harm_by_backend_s"]["x"] > 0  # type: ignore[index,operator]
    winner, y = route({}, y_inflight=1)  # separate devices: no neighbour, no harm beyond its own batch
    assert winner == "y" and "x" not in y["harm_by_backend_s"]  # type: ignore[operator]
