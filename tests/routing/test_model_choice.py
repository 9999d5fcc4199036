"""Which model predicts a backend (routing/model/model_choice.py): beside a neighbour seen slowed, one not yet
measured on the profile borrows that neighbour's model as it was before the slow-down."""

from __future__ import annotations

from dataclasses import replace

from gateway.policy.schema import Adaptive, Profile, Weights
from gateway.records import BackendSnapshot, Features, Sample
from gateway.routing.model.cells import CellView, ModelCache, build_model
from gateway.routing.model.model_choice import ModelChoice
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.slowdown.memory import EngineSlowdowns
from gateway.routing.slowdown.reading import Slowdown, scaled
from gateway.stats.live import LiveRecorder

HEALTHY = [
    Sample(e2e=0.2 + 99 * 0.02, ttft=0.2, output_tokens=100, prompt_tokens=500, concurrency=1 + i % 4)
    for i in range(8)
]
SLOWED = Slowdown(live=3.0, evidence=6, slow=6)


class XSlowed:
    """Slow-downs as the model choice reads them: x seen slowed 3x, no profile known of either backend."""

    def latest(self, backend: str) -> Slowdown | None:
        return SLOWED if backend == "x" else None

    def suspect(self, backend: str, knobs: Adaptive) -> Slowdown | None:
        return self.latest(backend)

    def profiles(self, backend: str) -> list[str]:
        return []

    def remembered(self, backend: str, profile: str | None, at: float, tolerance: float) -> float:
        return 1.0  # slowed live, nothing lapsed to remember


def test_beside_a_slowed_neighbour_an_unmeasured_backend_takes_its_model_from_before_the_slow_down() -> None:
    windows = LiveRecorder(clock=lambda: 1_000_000.0)
    for sample in HEALTHY:
        windows.record("x", "chat", sample)
    choice = ModelChoice(windows, ModelCache(), XSlowed())  # type: ignore[arg-type]
    ctx = RouteContext(Features("m", "chat", 500, 100), Profile(name="chat"), "adaptive", Weights())
    own = build_model(HEALTHY)
    cells = {"x": CellView(scaled(own, SLOWED.factor), 8, 0), "y": CellView(build_model([]), 0, 0)}
    model, note = choice.choose(ctx, BackendSnapshot("y"), cells, ["x"])
    assert model == own  # unscaled: the engine as it was
    assert note is not None and "x's model before it slowed 3x" in note
    alone, none = choice.choose(ctx, BackendSnapshot("y"), cells, [])
    assert alone is cells["y"].model and none is None


def lapsed_x(windows: LiveRecorder) -> EngineSlowdowns:
    """Slow-downs of `windows`' backends: x seen slowed 3x a second ago, its live reading since lapsed."""
    slowdowns = EngineSlowdowns(windows, ModelCache(), None)
    now = windows.now()
    slowdowns.adopt("x", now - 1.0, SLOWED)
    slowdowns.adopt("x", now, Slowdown())
    return slowdowns


def test_the_all_profile_model_is_slowed_as_remembered_while_most_of_it_predates_the_slow_down() -> None:
    now = 1_000_000.0
    windows = LiveRecorder(clock=lambda: now)
    for sample in HEALTHY:
        windows.record("x", "chat", sample, now=now - 10.0)
    choice = ModelChoice(windows, ModelCache(), lapsed_x(windows))
    engine = build_model(HEALTHY)
    assert choice.engine("x", now) == engine  # the live reading alone: not slowed
    assert choice.engine("x", now, Adaptive()) == scaled(engine, SLOWED.live)
    # A tokens_per_second profile not yet measured borrows it so.
    ctx = RouteContext(
        Features("m", "edit", 500, 100),
        Profile(name="edit", objective="tokens_per_second"),
        "adaptive",
        Weights(),
    )
    cells = {"x": CellView(build_model([]), 0, 0)}
    model, note = choice.choose(ctx, BackendSnapshot("x"), cells, [])
    assert model == scaled(engine, SLOWED.live) and note is None
    # Measured mostly since: its own answers say how fast it is.
    for sample in HEALTHY:
        windows.record("x", "code", replace(sample), now=now)
    assert choice.engine("x", now, Adaptive()) == build_model([*HEALTHY, *HEALTHY])


def answers_at(tpot: float) -> list[Sample]:
    """Eight answers of 100 tokens decoded at `tpot` seconds a token, at loads 1 to 4."""
    return [
        Sample(e2e=0.2 + 99 * tpot, ttft=0.2, output_tokens=100, prompt_tokens=500, concurrency=1 + i % 4)
        for i in range(8)
    ]


def test_the_decode_ratio_reads_a_cell_of_before_the_slow_down_as_slow_as_the_engine_is_now() -> None:
    now = 1_000_000.0
    windows = LiveRecorder(clock=lambda: now)
    for sample in answers_at(0.02):  # x's chats: all of before its slow-down, 1.5x faster than y's
        windows.record("x", "chat", sample, now=now - 100.0)
    for profile in ("chat", "edit"):
        for sample in answers_at(0.03):
            windows.record("y", profile, sample, now=now - 100.0)
    slowdowns = EngineSlowdowns(windows, ModelCache(), None)
    for backend, profile in (("x", "chat"), ("y", "chat"), ("y", "edit")):
        slowdowns.refresh(backend, profile, now - 60.0)  # the profiles each was scored for
    slowdowns.adopt("x", now - 50.0, SLOWED)  # x slows 3x...
    slowdowns.adopt("x", now - 40.0, Slowdown())  # ...and its live reading lapses
    choice = ModelChoice(windows, ModelCache(), slowdowns)
    ctx = RouteContext(
        Features("m", "edit", 500, 100),
        Profile(name="edit", objective="tokens_per_second"),
        "adaptive",
        Weights(),
    )
    cells = {"x": CellView(build_model([]), 0, 0), "y": choice.cell("y", "edit", now, Adaptive())}
    found = choice.relative(ctx, BackendSnapshot("x"), cells)
    assert found is not None
    model, note = found
    # 3 x 0.02 / 0.03: twice as slow as y, not the 0.67 of its healthy days.
    assert "y's model x 2," in note
    assert model == scaled(cells["y"].model, 2.0)
