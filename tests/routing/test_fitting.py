"""Least-squares fits of latency against load: clamped, never extrapolated towards idle."""

from __future__ import annotations

import pytest

from gateway.routing.fitting import fit_linear


def test_one_concurrency_level_falls_back_to_the_mean() -> None:
    fit = fit_linear([(2.0, 1.0), (2.0, 3.0)])
    assert fit is not None and fit.slope == 0.0
    assert fit.at(10.0) == pytest.approx(2.0)


def test_noise_never_makes_more_load_look_faster() -> None:
    fit = fit_linear([(1.0, 2.0), (4.0, 1.0)])
    assert fit is not None and fit.slope == 0.0
    assert fit.at(16.0) == pytest.approx(1.5)


def test_no_extrapolation_below_the_lowest_measured_load() -> None:
    fit = fit_linear([(4.0, 1.0), (8.0, 2.0)])
    assert fit is not None
    assert fit.at(1.0) == pytest.approx(1.0)
