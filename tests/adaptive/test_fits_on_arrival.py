"""A finished request's samples are fitted as they arrive (AdaptiveScorer.learn, run by a completion
observer in the gateway): the next decision reads the fits cached and builds none, and decides as it
would have fitting them itself."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, Sample
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.model import cells
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.stats.live import LiveRecorder
from tests.adaptive.routing_loop import POLICY, paced

BODY = {"model": "m", "prompt": "hi " * 40, "max_tokens": 64}
POOL = [BackendSnapshot("x", inflight=2), BackendSnapshot("y", inflight=1)]


def scorer() -> AdaptiveScorer:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in paced(0.020, 12):
        recorder.record("x", "default", sample)
    for sample in paced(0.030, 12):
        recorder.record("y", "default", sample)
    return AdaptiveScorer(recorder)


def test_a_decision_after_the_samples_were_fitted_fits_nothing_and_decides_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = FixedPolicy(parse_policy(POLICY))
    fitting_itself = PolicyRouter(policy, objective_scorer=scorer()).route("completions", BODY, POOL)
    learned = scorer()
    learned.learn("default", ["x", "y"])
    built: list[int] = []
    real = cells.build_model

    def counted(samples: Sequence[Sample]) -> cells.CellModel:
        built.append(len(samples))
        return real(samples)

    monkeypatch.setattr(cells, "build_model", counted)
    decided = PolicyRouter(policy, objective_scorer=learned).route("completions", BODY, POOL)
    assert built == []
    assert decided == fitting_itself
    assert decided.predicted and set(decided.predicted) == {"x", "y"}
