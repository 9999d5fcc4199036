"""`spark-gateway bench lifecycle`: the simulated day keeps its books (every request served or refused,
the budget never exceeded) and the strategies differ the way they are meant to."""

from __future__ import annotations

import argparse

import pytest

from gateway.bench import lifecycle
from gateway.bench.lifecycle import BUDGET_GIB, ENGINES, Day, trace

SEED = 3


@pytest.mark.parametrize("strategy", lifecycle.STRATEGIES)
def test_every_request_is_served_or_refused_and_the_budget_holds(strategy: str) -> None:
    arrivals = trace(SEED)
    result = Day(strategy, SEED).run(arrivals)
    assert result.requests == len(arrivals) > 1000
    assert result.served + result.refused == result.requests
    assert result.overruns == 0 and result.peak_gib <= BUDGET_GIB
    assert result.within_slo <= result.served


def test_pinned_refuses_the_model_that_does_not_fit_and_nothing_else() -> None:
    arrivals = trace(SEED)
    result = Day("pinned", SEED).run(arrivals)
    left_out = ENGINES[-1].name  # 54 + 48 fit in 119 GiB, the 60 GiB engine does not
    assert result.refused == sum(1 for _, model, _ in arrivals if model == left_out)
    assert result.swaps == 0 and result.waited_s == 0.0


def test_a_rare_model_between_two_busy_ones_makes_lru_thrash_and_cost_aware_batch_it() -> None:
    # Any two engines fit, never three. The two warm at dawn get a request a minute each; the third
    # one every ten minutes, for three hours.
    first, second, rare = (spec.name for spec in ENGINES)
    busy = [
        (60.0 * i + offset, name, 5.0) for i in range(1, 180) for offset, name in ((0, first), (30, second))
    ]
    arrivals = sorted([*busy, *((600.0 * i + 15, rare, 5.0) for i in range(1, 18))])
    lru = Day("lru", SEED).run(arrivals)
    cost = Day("cost-aware", SEED).run(arrivals)
    assert cost.swaps < lru.swaps
    assert cost.waited_s < lru.waited_s
    assert cost.busy_evictions == 0


def test_the_cost_aware_lifecycle_never_evicts_a_busy_engine_over_a_day() -> None:
    for seed in range(3):
        assert Day("cost-aware", seed).run(trace(seed)).busy_evictions == 0


def test_the_command_prints_one_row_per_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert lifecycle.run(argparse.Namespace(repeats=2, seed=0)) == 0
    out = capsys.readouterr().out
    for strategy in lifecycle.STRATEGIES:
        assert f"| {strategy} |" in out
    assert "cost-aware cuts client waiting vs lru by" in out
