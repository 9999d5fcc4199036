"""Regime change: a fit restarts from the newest points when they all differ from the older ones."""

from __future__ import annotations

import pytest

from gateway.routing.model.fitting import fit_load
from gateway.routing.model.regime import current_regime, fit_current, regimes


def test_a_fit_restarts_when_the_newest_points_all_differ_from_the_rest() -> None:
    steady = [(1.0, 0.0, 0.020 + 0.001 * (i % 3)) for i in range(200)]
    slowed = [(1.0, 0.0, 0.160)] * 5  # the engine now takes 8x longer per token
    fit = fit_current(steady + slowed)
    assert fit is not None and fit.at(1) == pytest.approx(0.160)
    everything = fit_load(steady + slowed)
    assert everything is not None and everything.at(1) < 0.03  # what the whole window would say
    recovered = fit_current(steady + slowed + [(1.0, 0.0, 0.021)] * 5)
    assert recovered is not None and recovered.at(1) < 0.03  # and back again


def test_a_fit_keeps_its_history_for_fewer_outliers_noise_or_a_load_never_measured() -> None:
    steady = [(1.0, 0.0, 0.020)] * 100
    four = fit_current(steady + [(1.0, 0.0, 0.160)] * 4)
    assert four is not None and four.at(1) < 0.03
    noisy = fit_current(steady + [(1.0, 0.0, 0.160), (1.0, 0.0, 0.005)] * 5)
    assert noisy is not None and noisy.at(1) < 0.03
    burst = fit_current(steady + [(16.0, 0.0, 0.300)] * 8)  # c = 16 was never seen: load, not a change
    assert burst is not None and burst.low_c == 1.0 and burst.at(1) < 0.06


def test_the_current_regime_says_how_many_newest_points_left_the_older_fit() -> None:
    steady = [(1.0, 0.0, 0.020 + 0.001 * (i % 3)) for i in range(30)]
    assert current_regime(steady)[1] == 0
    fit, run = current_regime(steady + [(1.0, 0.0, 0.060)] * 7)
    assert run == 7 and fit is not None and fit.at(1.0) > 0.05
    assert current_regime(steady + [(1.0, 0.0, 0.005)] * 6)[1] == -6  # faster: a change the other way


def test_a_point_at_a_load_never_measured_neither_ends_a_change_nor_makes_one() -> None:
    steady = [(float(8 + i % 8), 0.0, 0.020 + 0.001 * (i % 8)) for i in range(40)]  # loads 8..15
    slowed = [(float(8 + i % 8), 0.0, 0.060 + 0.003 * (i % 8)) for i in range(6)]  # 3x slower there
    lone = (1.0, 0.0, 0.050)  # then one request alone: a load the older points never met
    fit, run = current_regime(steady + slowed + [lone])
    assert run == 7 and fit is not None and fit.at(8.0) > 0.05  # still the slow regime
    assert current_regime(steady + slowed[:4] + [lone])[1] == 0  # four slow ones and a lone one: no change


def load_points(n: int, slower: float = 1.0) -> list[tuple[float, float, float]]:
    """n points at loads 1..4, each `slower` times an engine's steady value there."""
    return [(float(1 + i % 4), 0.0, slower * (0.020 + 0.002 * (i % 4))) for i in range(n)]


def test_a_pace_regime_holds_through_an_answer_that_fits_the_old_one_until_a_run_goes_back() -> None:
    slowed = load_points(40) + load_points(6, slower=2.5)
    lucky = [(1.0, 0.0, 0.021)]  # one answer as fast as before the change: noise in the new regime
    assert regimes(slowed + lucky + load_points(2, slower=2.5))[-1] == (40, 1)
    assert current_regime(slowed + lucky + load_points(2, slower=2.5))[1] == 0  # a trailing run: broken
    assert regimes(slowed + load_points(5))[-1] == (46, -1)  # five answers back at the old speed: recovered
    assert regimes(load_points(40) + load_points(4, slower=2.5) + load_points(8)) == [(0, 0)]  # no run of 5
