"""Warm-up truth: the expected warm-up per backend (learned, configured, flavor default), when a warming
backend is expected ready, and the learned warm-ups kept across gateway restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import CONFIGURED, FILE_NAME, FLAVOR_DEFAULT, LEARNED, SAMPLES_KEPT, Warmups
from gateway.settings import Settings

EPOCH = 1_700_000_000.0  # the fake wall clock's reading when the fake monotonic clock reads 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def settings(*backends: dict[str, Any]) -> Settings:
    names = [b["name"] for b in backends]
    return Settings(
        backends=[{"url": "http://127.0.0.1:1", **b} for b in backends],
        pools=[{"model": "m", "backends": names}],
        probe={"startup_grace_s": 10_000.0},
    )


def tracked(clock: Clock, state_dir: Path | None, *backends: dict[str, Any]) -> tuple[Registry, Warmups]:
    registry = Registry(settings(*backends), clock=clock)
    warmups = Warmups(registry, state_dir, wall=lambda: EPOCH + clock.now)
    registry.listeners.append(warmups.on_status)
    return registry, warmups


def warm_up(registry: Registry, clock: Clock, name: str, seconds: float) -> None:
    """The prober sees `name` loading now and ready `seconds` later."""
    registry.set_status(name, Status.STARTING)
    clock.now += seconds
    registry.set_status(name, Status.READY)


def test_before_any_warm_up_each_flavor_has_its_default_and_a_configured_value_wins() -> None:
    _, warmups = tracked(
        Clock(),
        None,
        {"name": "v", "flavor": "vllm"},
        {"name": "s", "flavor": "sglang"},
        {"name": "l", "flavor": "llamacpp"},
        {"name": "c", "flavor": "vllm", "warmup_s": 1200.0},
    )
    assert warmups.expected("v") == (600.0, FLAVOR_DEFAULT)
    assert warmups.expected("s") == (300.0, FLAVOR_DEFAULT)
    assert warmups.expected("l") == (60.0, FLAVOR_DEFAULT)
    assert warmups.expected("c") == (1200.0, CONFIGURED)


def test_a_seen_warm_up_is_learned_and_wins_over_the_configured_value() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a", "warmup_s": 1200.0})
    warm_up(registry, clock, "a", 420.0)
    assert warmups.expected("a") == (420.0, LEARNED)


def test_a_backend_already_serving_at_its_first_probe_teaches_nothing() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    clock.now = 3.0
    registry.set_status("a", Status.READY)
    assert warmups.expected("a") == (600.0, FLAVOR_DEFAULT)
    assert warmups.warming("a") is None


def test_a_restart_counts_from_when_the_backend_went_down() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    warm_up(registry, clock, "a", 100.0)
    clock.now += 1000.0  # serving
    registry.set_status("a", Status.DEAD)  # crashed
    clock.now += 30.0
    registry.set_status("a", Status.STARTING)  # loading again: the warm-up still began at the crash
    clock.now += 50.0
    registry.set_status("a", Status.READY)
    assert warmups.details("a")["warmup_learned_s"] == [100.0, 80.0]
    assert warmups.expected("a") == (90.0, LEARNED)  # the median


def test_the_median_of_the_last_warm_ups_is_robust_to_one_outlier_and_bounded() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    for seconds in (900.0, 900.0, 300.0, 310.0, 2000.0, 320.0, 305.0):
        warm_up(registry, clock, "a", seconds)
    learned = warmups.details("a")["warmup_learned_s"]
    assert learned == [300.0, 310.0, 2000.0, 320.0, 305.0]  # the newest five
    assert len(learned) == SAMPLES_KEPT
    assert warmups.expected("a") == (310.0, LEARNED)


def test_hours_of_downtime_are_not_a_warm_up() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    warm_up(registry, clock, "a", 5 * 3600.0)
    assert warmups.expected("a") == (600.0, FLAVOR_DEFAULT)


def test_a_warming_backend_is_expected_ready_at_its_start_plus_the_expected_warm_up() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a", "warmup_s": 1200.0})
    clock.now = 2.0
    registry.set_status("a", Status.STARTING)
    clock.now = 182.0
    view = warmups.warming("a")
    assert view is not None and not view.restarting
    # The warm-up began when the gateway first saw it not ready: at its start (0), before the probe.
    assert view.elapsed_s == 182.0 and view.eta_s == 1018.0
    details = warmups.details("a")
    assert details["warming_since"] == EPOCH
    assert details["expected_ready_at"] == EPOCH + 1200.0
    assert details["eta_s"] == 1018.0
    assert details["warmup_source"] == CONFIGURED


def test_a_late_warm_up_has_no_time_left_and_says_it_is_overdue() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a", "warmup_s": 60.0})
    registry.set_status("a", Status.STARTING)
    clock.now = 75.0
    view = warmups.warming("a")
    assert view is not None and view.overdue and view.eta_s == 0.0


def test_a_ready_backend_shows_no_warm_up_times() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    warm_up(registry, clock, "a", 100.0)
    details = warmups.details("a")
    assert (details["warming_since"], details["expected_ready_at"], details["eta_s"]) == (None, None, None)


def test_the_first_ready_of_a_warming_pool_is_the_one_with_the_least_time_left() -> None:
    clock = Clock()
    registry, warmups = tracked(
        clock, None, {"name": "a", "warmup_s": 600.0}, {"name": "b", "warmup_s": 90.0}
    )
    registry.set_status("a", Status.STARTING)
    registry.set_status("b", Status.STARTING)
    clock.now = 30.0
    first = warmups.first_ready(["a", "b"])
    assert first is not None and first.backend == "b" and first.eta_s == 60.0
    assert warmups.all_warming(["a", "b"])


def test_a_pool_with_one_ready_backend_is_not_warming() -> None:
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"}, {"name": "b"})
    registry.set_status("a", Status.STARTING)
    registry.set_status("b", Status.READY)
    assert warmups.first_ready(["a", "b"]) is None
    assert not warmups.all_warming(["a", "b"])
    assert not warmups.all_warming([])


def test_learned_warm_ups_survive_a_gateway_restart(tmp_path: Path) -> None:
    clock = Clock()
    registry, _ = tracked(clock, tmp_path, {"name": "a"}, {"name": "b"})
    warm_up(registry, clock, "a", 400.0)
    warm_up(registry, clock, "a", 500.0)
    _, restarted = tracked(Clock(), tmp_path, {"name": "a"}, {"name": "b"})
    assert restarted.expected("a") == (450.0, LEARNED)
    assert restarted.expected("b") == (600.0, FLAVOR_DEFAULT)
    saved = json.loads((tmp_path / FILE_NAME).read_text())["backends"]
    assert saved == [{"name": "a", "url": "http://127.0.0.1:1", "served": ["m"], "samples": [400.0, 500.0]}]


def test_another_engine_behind_the_same_name_does_not_inherit_its_warm_ups(tmp_path: Path) -> None:
    clock = Clock()
    registry, _ = tracked(clock, tmp_path, {"name": "a", "url": "http://user:secret@127.0.0.1:1"})
    warm_up(registry, clock, "a", 400.0)
    assert "secret" not in (tmp_path / FILE_NAME).read_text()  # credentials are no file's business
    _, same = tracked(Clock(), tmp_path, {"name": "a", "url": "http://127.0.0.1:1"})
    _, moved = tracked(Clock(), tmp_path, {"name": "a", "url": "http://127.0.0.1:2"})
    assert same.expected("a") == (400.0, LEARNED)
    assert moved.expected("a") == (600.0, FLAVOR_DEFAULT)


def entry(name: str, samples: list[Any]) -> dict[str, Any]:
    return {"name": name, "url": "http://127.0.0.1:1", "served": ["m"], "samples": samples}


def test_a_reloaded_file_is_bounded_and_forgets_unknown_backends(tmp_path: Path) -> None:
    document = {
        "version": 1,
        "backends": [entry("a", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]), entry("gone", [9.0])],
    }
    (tmp_path / FILE_NAME).write_text(json.dumps(document))
    _, warmups = tracked(Clock(), tmp_path, {"name": "a"})
    assert warmups.details("a")["warmup_learned_s"] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert "gone" not in warmups.registry.backends


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"version": 99, "backends": [entry("a", [5.0])]}),
        json.dumps({"version": 1, "backends": [entry("a", ["x", -3, 1e9])]}),
        json.dumps({"version": 1, "backends": {"a": [5.0]}}),
    ],
)
def test_an_unreadable_or_foreign_file_is_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / FILE_NAME).write_text(content)
    _, warmups = tracked(Clock(), tmp_path, {"name": "a"})
    assert warmups.expected("a") == (600.0, FLAVOR_DEFAULT)


def test_without_a_state_directory_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    clock = Clock()
    registry, warmups = tracked(clock, None, {"name": "a"})
    warm_up(registry, clock, "a", 100.0)
    assert warmups.expected("a") == (100.0, LEARNED)
    assert list(tmp_path.iterdir()) == []
