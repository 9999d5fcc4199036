"""Least-squares fits of latency against load: clamped, never extrapolated towards idle."""

from __future__ import annotations

import pytest

from gateway.routing.model.fitting import fit_linear, fit_load


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


def test_device_shares_spanning_less_than_a_quarter_fit_no_contention() -> None:
    # Requests that met a neighbour's last steps: shares of 0 to 0.004, a second slower at the top. A
    # slope over that span, read at z = 1, would carry the second 250 times over.
    grazed = [(1.0, 0.0, 1.0), (2.0, 0.0, 1.1), (1.0, 0.004, 2.0), (2.0, 0.002, 1.6), (3.0, 0.004, 2.1)]
    fit = fit_load(grazed)
    assert fit is not None and fit.contention == 0.0
    assert fit.at(2.0, device_busy=True) < 2.5
    # Over a quarter of a request's life the share varies: the contention term is fitted.
    spread = [(c, z, 1.0 + 0.1 * c + 2.0 * z) for c in (1.0, 2.0, 3.0) for z in (0.0, 0.25)]
    wide = fit_load(spread)
    assert wide is not None and wide.contention == pytest.approx(2.0)
