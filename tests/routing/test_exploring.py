"""Exploration plans (routing/explore/plan.py): which backends short of samples hold the device the winner
would wake, and so are measured by the request itself."""

from __future__ import annotations

from gateway.policy.schema import Adaptive
from gateway.records import Sample
from gateway.routing.explore.pacing import ExplorationLedger
from gateway.routing.explore.plan import Explorer
from gateway.routing.explore.probes import probe_measures
from gateway.routing.model.cells import CellModel, CellView, build_model
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.slowdown.reading import Slowdown

MEASURED = build_model(
    [Sample(e2e=2.0, ttft=0.2, output_tokens=100, prompt_tokens=500, concurrency=1 + i % 4) for i in range(8)]
)


class SeenSlowed:
    """Slow-downs as the explorer reads them: the backends named were seen slowed 2.5x."""

    def __init__(self, *slowed: str) -> None:
        self.slowed = set(slowed)

    def latest(self, backend: str) -> Slowdown | None:
        return Slowdown(live=2.5, evidence=6, slow=6) if backend in self.slowed else None

    def suspect(self, backend: str, knobs: Adaptive) -> Slowdown | None:
        found = self.latest(backend)
        return found if found is not None and found.beyond(knobs.tolerance) else None


def held(explorer: Explorer) -> list[str]:
    """What holds the device of the idle winner `w`: `h`, short of samples, runs three requests."""
    cells = {"w": CellView(MEASURED, 8, 0), "h": CellView(CellModel(2, None, None, 2.0, 100.0, "1"), 2, 0)}
    loads = [DeviceLoad("w", 0, True, MEASURED), DeviceLoad("h", 3, False, MEASURED)]
    return explorer.held("chat", Adaptive(), cells, "w", {"w": loads, "h": loads}, at=1000.0)


def test_a_holder_short_of_samples_is_explored_unless_its_engine_is_seen_slowed() -> None:
    ledger = ExplorationLedger(max_cells=64)
    assert held(Explorer(ledger, SeenSlowed(), 600.0)) == ["h"]  # type: ignore[arg-type]
    assert held(Explorer(ledger, SeenSlowed("w"), 600.0)) == ["h"]  # type: ignore[arg-type]
    assert held(Explorer(ledger, SeenSlowed("h"), 600.0)) == []  # type: ignore[arg-type]


class Remembered(SeenSlowed):
    """x's live reading lapsed (the fits took its slow-down in), its episode still remembered."""

    def latest(self, backend: str) -> Slowdown | None:
        return Slowdown() if backend in self.slowed else None

    def suspect(self, backend: str, knobs: Adaptive) -> Slowdown | None:
        return Slowdown(live=2.5, evidence=6, slow=6) if backend in self.slowed else None


def test_a_refresh_of_an_engine_still_suspect_waits_its_slow_down_times_the_bounds_beside_busy_one() -> None:
    explorer = Explorer(ExplorationLedger(max_cells=64), Remembered("x"), 600.0)  # type: ignore[arg-type]
    busy = [DeviceLoad("x", 0, True, MEASURED), DeviceLoad("y", 13, False, MEASURED)]
    assert explorer.refresh_stretch("x", Adaptive(), busy) == 2.5
    idle = build_model([])  # no recent load either
    quiet = [DeviceLoad("x", 0, False, idle), DeviceLoad("y", 0, False, idle)]
    assert explorer.refresh_stretch("x", Adaptive(), quiet) == 1.0  # nobody to slow meanwhile
    assert explorer.refresh_stretch("y", Adaptive(), busy) == 1.0  # not suspect


def test_probes_measure_a_decode_speed_cell_always_and_another_once_they_show_its_engine_slower() -> None:
    assert probe_measures("tokens_per_second", None)
    assert probe_measures("e2e", True) and probe_measures("ttft", True)
    assert not probe_measures("e2e", None) and not probe_measures("ttft", False)
