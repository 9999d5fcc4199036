"""routing/model/peers.py on plain data: a fit carried beyond the loads it measured, and which peer lends."""

from __future__ import annotations

import pytest

from gateway.routing.model.cells import CellModel
from gateway.routing.model.fitting import Fit
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.peers import borrowed_from_peers, carried, decodes_slower, widest

ONE_LOAD = Fit(intercept=0.040, slope=0.0, low_c=1, floor=0.040, high_c=1)  # measured at c = 1 only
WIDE = Fit(intercept=0.018, slope=0.002, low_c=1, floor=0.020, high_c=16)  # 20 ms alone, 50 ms at 16


def model(samples: int, tpot: Fit | None) -> CellModel:
    return CellModel(samples, None, tpot, 1.0, 256.0, "1", content_samples=(samples, 0))


def test_a_fit_of_one_load_grows_beyond_it_as_the_peer_that_saw_more_grows() -> None:
    fit = carried(ONE_LOAD, WIDE, 9)
    assert fit is not None
    # The peer is 1.8x slower at 9 than at 1 (0.036 / 0.020): so is the carried fit.
    assert fit.at(9) == pytest.approx(0.040 * 0.036 / 0.020)
    assert fit.at(1) == pytest.approx(0.040)


def test_within_its_range_or_beside_a_narrower_peer_a_fit_is_left_alone() -> None:
    assert carried(ONE_LOAD, WIDE, 1) is ONE_LOAD
    assert carried(WIDE, ONE_LOAD, 30) is WIDE
    steep = Fit(intercept=0.0, slope=0.010, low_c=1, floor=0.010, high_c=2)
    kept = carried(steep, WIDE, 9)
    assert kept is not None and kept.slope == pytest.approx(0.010)  # its own growth when steeper


def test_the_widest_measured_peer_guides_and_a_cell_short_of_samples_never_does() -> None:
    models = {"a": model(9, ONE_LOAD), "b": model(20, WIDE), "c": model(3, WIDE)}
    assert widest(models, 5) is models["b"]
    assert widest({"a": models["a"], "c": models["c"]}, 5) is models["a"]
    assert widest({"c": models["c"]}, 5) is None


def test_only_a_backend_alone_on_its_device_borrows_and_only_while_short() -> None:
    models = {
        "x": model(30, WIDE),
        "y": model(0, None),
        "z": model(0, None),
        "w": model(2, None),
        "u": model(5, None),
    }
    device = {
        "x": [DeviceLoad("x", 3, False, models["x"])],
        "y": [DeviceLoad("y", 0, False, models["y"])],
        "z": [DeviceLoad("z", 0, False, models["z"]), DeviceLoad("v", 2, False, models["z"])],
        "w": [DeviceLoad("w", 3, False, models["w"])],  # 2 answers, 3 in flight: still short of answers
        "u": [DeviceLoad("u", 0, False, models["u"])],  # 5 answers: its own cell speaks
    }
    borrowed = borrowed_from_peers(models, device, 0.0, 5)
    assert set(borrowed) == {"y", "w"} and borrowed["y"].peer == "x"
    assert borrowed_from_peers({"y": models["y"]}, device, 0.0, 5) == {}  # no peer measured


def test_an_engine_decodes_slower_than_a_peer_beyond_the_tolerance_once_both_are_measured() -> None:
    peer = model(5, Fit(intercept=0.020, slope=0.001, low_c=1.0, floor=0.0, high_c=5.0))

    def engine(tpot: float, samples: int = 5) -> CellModel:
        return model(samples, Fit(intercept=tpot, slope=0.001, low_c=1.0, floor=0.0, high_c=5.0))

    assert decodes_slower(engine(0.030), peer, 5, 0.1) is True
    assert decodes_slower(engine(0.0215), peer, 5, 0.1) is False  # 7 % slower: within the tolerance
    assert decodes_slower(engine(0.010), peer, 5, 0.1) is False
    assert decodes_slower(engine(0.030, samples=4), peer, 5, 0.1) is None  # not known yet
