"""A cell measured at one load borrows the relative slope of the cells measured at several."""

from __future__ import annotations

import pytest

from gateway.records import Sample
from gateway.routing.cells import build_model
from gateway.routing.load_shape import with_borrowed_slopes


def samples(ttft: float, tpot: float, levels: list[int], per_c: float = 0.0) -> list[Sample]:
    """Samples at these concurrencies; TTFT and TPOT grow by `per_c` of their value per request in flight."""
    out = []
    for c in levels:
        grow = 1.0 + per_c * (c - 1)
        t, p = ttft * grow, tpot * grow
        out.append(Sample(e2e=t + 255 * p, ttft=t, output_tokens=256, prompt_tokens=512, concurrency=c))
    return out


def test_a_flat_cell_borrows_the_measured_relative_slope_and_keeps_its_measured_value() -> None:
    measured = build_model(samples(0.2, 0.02, [1, 2, 4, 8, 16] * 2, per_c=0.1))
    alone = build_model(samples(0.3, 0.05, [1] * 6))
    assert alone.ttft is not None and alone.ttft.slope == 0  # flat: c = 17 predicts c = 1
    out = with_borrowed_slopes({"a": measured, "b": alone})
    b = out["b"]
    assert b.ttft is not None and b.tpot is not None
    assert b.ttft.at(1) == pytest.approx(0.3)
    assert b.tpot.at(1) == pytest.approx(0.05)
    # 10% of its value per request in flight, as the measured cell shows.
    assert b.ttft.at(11) == pytest.approx(0.3 * 2.0, rel=1e-6)
    assert b.tpot.at(11) == pytest.approx(0.05 * 2.0, rel=1e-6)
    assert out["a"] is measured


def test_nothing_is_borrowed_without_a_cell_measured_at_several_loads() -> None:
    one = build_model(samples(0.2, 0.02, [1] * 6))
    two = build_model(samples(0.3, 0.05, [3] * 6))
    out = with_borrowed_slopes({"a": one, "b": two})
    assert out["a"] is one and out["b"] is two


def test_a_cell_with_its_own_slope_keeps_it() -> None:
    steep = build_model(samples(0.2, 0.02, [1, 2, 4, 8] * 2, per_c=0.5))
    gentle = build_model(samples(0.2, 0.02, [1, 2, 4, 8] * 2, per_c=0.05))
    out = with_borrowed_slopes({"a": steep, "b": gentle})
    assert out["b"].ttft == gentle.ttft and out["a"].ttft == steep.ttft
