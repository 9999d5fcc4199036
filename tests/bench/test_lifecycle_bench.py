"""`spark-gateway bench lifecycle`: the day runs through the product's engine manager on simulated time,
keeps its books (every request served, refused or given up, the budget never exceeded), and its
cost-aware strategy is the product's defaults, nothing changed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time

import pytest

from gateway.bench import lifecycle
from gateway.bench.lifecycle_day import BUDGET_GIB, ENGINES, trace
from gateway.bench.lifecycle_run import CLIENTS, STRATEGIES, Day, Result, lru_plan, run_day, settings_for
from gateway.bench.virtual_time import VirtualTimeLoop
from gateway.engines import budget
from gateway.settings import EngineConfig, EngineControl

SEED = 3


@pytest.fixture(scope="module")
def days() -> dict[str, Result]:
    arrivals = trace(SEED)
    return {strategy: run_day(strategy, SEED, arrivals) for strategy in STRATEGIES}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_request_is_accounted_for_and_the_budget_holds(strategy: str, days: dict[str, Result]) -> None:
    result = days[strategy]
    assert result.requests == len(trace(SEED)) > 1000
    assert result.served + result.not_served + result.gave_up == result.requests
    assert result.overruns == 0 and 0 < result.peak_gib <= BUDGET_GIB
    assert result.within_slo <= result.served


def test_pinned_serves_what_fits_and_refuses_the_third_model(days: dict[str, Result]) -> None:
    result = days["pinned"]
    left_out = ENGINES[-1].name  # 54 + 48 fit in 119 GiB, the 60 GiB engine does not
    assert result.not_served == sum(1 for _, model, _ in trace(SEED) if model == left_out)
    assert result.swaps == 0 and result.waited_s == 0.0


def test_swapping_strategies_serve_the_third_model_with_starts(days: dict[str, Result]) -> None:
    for strategy in ("lru", "cost-aware"):
        assert days[strategy].swaps > 0 and days[strategy].not_served == 0


def test_cost_aware_is_the_products_defaults() -> None:
    settings = settings_for("cost-aware")
    assert settings.engine_control == EngineControl(docker_url="sim://")
    declared = {"name", "model", "image", "port", "memory_gib", "device", "warmup_s", "max_concurrency"}
    for engine in settings.engines:
        defaults = EngineConfig(**{k: getattr(engine, k) for k in declared})
        assert engine == defaults  # pinned, idle TTL and the rest as the product ships them
    loop = VirtualTimeLoop()
    try:
        day = Day("cost-aware", SEED, settings, loop)
        assert day.planner.plan is budget.plan
    finally:
        loop.close()


def test_lru_takes_the_least_recently_used_and_leaves_a_loading_engine() -> None:
    def resident(name: str, idle_s: float, **fields: object) -> budget.Resident:
        values: dict[str, object] = {
            "inflight": 0,
            "pinned": False,
            "serving_s": 0.0,
            "demand_per_min": 50.0,
        }
        values.update(fields)
        return budget.Resident(name, 30, cold_start_s=60, idle_s=idle_s, **values)  # type: ignore[arg-type]

    residents = [
        resident("recent", 5),
        resident("old", 500, inflight=3),
        resident("loading", 900, loading=True),
    ]
    assert lru_plan(residents, 40, 119, 60).evict == ("old",)  # busy or not, no minimum residency


def test_a_day_of_hours_runs_in_seconds() -> None:
    started = time.perf_counter()
    result = run_day("cost-aware", SEED, trace(SEED)[:200])
    assert result.served == 200
    assert time.perf_counter() - started < 20  # about an hour of simulated day


def test_the_virtual_clock_jumps_sleeps_and_waits_for_threads_at_the_same_moment() -> None:
    loop = VirtualTimeLoop()
    release = threading.Event()

    def blocks_all_run(event: threading.Event) -> None:
        event.wait()

    loop.park(blocks_all_run)

    async def main() -> tuple[float, float, float]:
        parked = asyncio.ensure_future(asyncio.to_thread(blocks_all_run, release))
        started = time.perf_counter()
        await asyncio.sleep(3600)
        after_sleep = loop.time()

        def slow_call() -> float:
            time.sleep(0.05)
            return loop.time()

        seen_in_thread = await asyncio.to_thread(slow_call)
        release.set()
        await parked
        assert time.perf_counter() - started < 5
        return after_sleep, seen_in_thread, loop.time()

    try:
        assert loop.run_until_complete(main()) == (3600.0, 3600.0, 3600.0)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def test_the_command_prints_a_table_per_way_of_waiting_with_one_row_per_strategy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(repeats=1, seed=0, workers=1, batch_wait=[], clients=[])
    assert lifecycle.run(args) == 0
    assert logging.root.manager.disable == logging.NOTSET  # the days' quiet does not outlive them
    out = capsys.readouterr().out
    assert out.count("| strategy |") == len(CLIENTS) == 2
    for strategy in STRATEGIES:
        assert out.count(f"| {strategy} |") == len(CLIENTS)
    assert out.count("cost-aware cuts client waiting vs lru by") == len(CLIENTS)
    assert "Clients held" in out and "Clients told to come back" in out


def test_held_clients_wait_in_the_queue_and_are_never_told_to_come_back() -> None:
    held = settings_for("lru", clients="held")
    assert held.queue.warming_wait_s == held.queue.timeout_s == 3600
    assert settings_for("lru").queue == settings_for("cost-aware").queue  # the default for both
    day = run_day("cost-aware", SEED, trace(SEED)[:200], clients="held")
    assert day.served == 200 and day.refusals == 0 and day.waited_s > 0
