"""Eviction planning (gateway/engines/budget.py) on plain data."""

from __future__ import annotations

from gateway.engines.budget import Resident, eviction_wait_s, plan, worth_swapping


def resident(name: str, gib: float, **fields: float | bool | int) -> Resident:
    values = {
        "inflight": 0,
        "pinned": False,
        "serving_s": 600.0,
        "demand_per_min": 1.0,
        "cold_start_s": 60.0,
    }
    values.update(fields)
    return Resident(name, gib, **values)  # type: ignore[arg-type]


def test_nothing_is_evicted_when_the_start_fits() -> None:
    assert plan([resident("a", 50)], 60, 119, 60).evict == ()


def test_the_engine_whose_loss_costs_least_goes_first() -> None:
    residents = [
        resident("busy-day", 40, demand_per_min=10.0, cold_start_s=60),  # cost 600
        resident("rare-slow", 40, demand_per_min=0.5, cold_start_s=600),  # cost 300
        resident("rare-fast", 30, demand_per_min=0.5, cold_start_s=30),  # cost 15
    ]
    assert plan(residents, 35, 119, 60).evict == ("rare-fast",)
    assert plan(residents, 70, 119, 60).evict == ("rare-fast", "rare-slow")


def test_pinned_and_recently_ready_engines_stay() -> None:
    residents = [resident("pinned", 60, pinned=True, demand_per_min=0), resident("new", 50, serving_s=5)]
    result = plan(residents, 40, 119, 60)
    assert result.evict == ()
    assert result.refusal is not None and "pinned" in result.refusal


def test_an_engine_with_requests_in_flight_goes_only_when_idle_ones_are_not_enough() -> None:
    residents = [
        resident("serving", 40, inflight=3, demand_per_min=0),
        resident("idle", 40, demand_per_min=9),
    ]
    assert plan(residents, 50, 119, 60).evict == ("idle",)  # cheaper, but serving: the idle one goes
    assert plan(residents, 90, 119, 60).evict == ("idle", "serving")  # drained first, by the manager


def test_sparing_busy_engines_refuses_rather_than_choose_one_with_requests_in_flight() -> None:
    residents = [
        resident("busy", 60, inflight=2, demand_per_min=0.0),
        resident("idle", 40, demand_per_min=9.0),
    ]
    assert plan(residents, 50, 119, 60).evict == ("idle",)  # idle first, whatever its demand
    assert plan(residents, 70, 119, 60).evict == ("idle", "busy")  # drained when nothing else makes room
    spared = plan(residents, 70, 119, 60, spare_busy=True)
    assert spared.evict == () and spared.refusal is not None and "busy" in spared.refusal


def test_evicting_costs_the_victims_demand_over_the_span_before_it_can_be_back() -> None:
    victim = resident("v", 40, demand_per_min=6.0, cold_start_s=100.0)
    # Back after the newcomer's 200 s start, its 60 s residency and its own 100 s: 360 s, 36 requests.
    assert eviction_wait_s(victim, 200.0, 60.0) == 6.0 / 60.0 * 360.0 * 360.0 / 2.0
    assert eviction_wait_s(resident("idle", 40, demand_per_min=0.0), 200.0, 60.0) == 0.0


def test_queued_requests_gather_until_they_outweigh_the_eviction_or_wait_too_long() -> None:
    assert not worth_swapping(
        waiting_cost_s=500.0, eviction_cost_s=1000.0, oldest_wait_s=10.0, max_wait_s=900.0
    )
    assert worth_swapping(waiting_cost_s=1500.0, eviction_cost_s=1000.0, oldest_wait_s=10.0, max_wait_s=900.0)
    assert worth_swapping(waiting_cost_s=500.0, eviction_cost_s=1000.0, oldest_wait_s=900.0, max_wait_s=900.0)


def test_an_engine_still_loading_is_never_evicted() -> None:
    # Evicting it would waste its load and make its clients wait a second cold start.
    residents = [resident("loading", 60, loading=True, demand_per_min=0.0), resident("serving", 50)]
    assert plan(residents, 40, 119, 60).evict == ("serving",)
    refused = plan([resident("loading", 100, loading=True, demand_per_min=0.0)], 40, 119, 60)
    assert refused.evict == () and refused.refusal is not None and "loading" in refused.refusal
