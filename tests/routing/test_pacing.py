"""Exploration pacing: evenly spaced, bounded by epsilon, dropped once every cell is measured."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.policy.schema import MAX_EPSILON, MIN_SAMPLES
from gateway.records import ExplorationPlan
from gateway.routing.explore.pacing import (
    Age,
    Exploration,
    ExplorationLedger,
    plan_exploration,
    plan_refresh,
    stale_reason,
)


def pick_exploration(
    sample_counts: Mapping[str, int],
    credit: float,
    *,
    min_samples: int = MIN_SAMPLES,
    epsilon: float,
    share: Callable[[str], float] = lambda backend: 1.0,
) -> tuple[Exploration | None, float]:
    """plan_exploration with the plan applied at once, as the ledger does once a request is sent: the
    exploration (or None) and the profile's credit after this request, every request going where routed."""
    explored, rate = plan_exploration(
        sample_counts, credit, min_samples=min_samples, epsilon=epsilon, share=share
    )
    if rate is None:
        return None, 0.0  # nothing to measure: no debt carried into the next gap
    credit += rate
    return explored, credit - 1.0 if explored is not None else credit


def explorations(counts: dict[str, int], requests: int, **kwargs: Any) -> list[str | None]:
    """Where each of `requests` requests of one profile is explored (None: not explored)."""
    credit, chosen = 0.0, []
    for _ in range(requests):
        explored, credit = pick_exploration(counts, credit, **kwargs)
        chosen.append(None if explored is None else explored.backend)
    return chosen


def test_exploration_is_paced_evenly_toward_the_least_measured_cell() -> None:
    chosen = explorations({"a": 40, "b": 2, "c": 0}, 20, epsilon=0.25)
    assert chosen == [None, None, None, "c"] * 5  # every fourth request, never a run of bad luck


def test_exploration_rate_is_bounded_by_epsilon_and_capped() -> None:
    counts = {"a": 100, "b": 0}
    assert sum(e is not None for e in explorations(counts, 20_000, epsilon=0.05)) == 1000
    assert sum(e is not None for e in explorations(counts, 20_000, epsilon=1.0)) == 20_000 * MAX_EPSILON


def test_a_costly_moment_accrues_credit_at_its_share() -> None:
    costly = explorations({"a": 100, "b": 0}, 4000, epsilon=0.5, share=lambda backend: 0.2 / 16)
    assert sum(e is not None for e in costly) == 25  # 4000 x 0.5 x 0.0125


def test_no_exploration_once_every_cell_is_measured_and_no_credit_is_kept() -> None:
    explored, credit = pick_exploration({"a": 5, "b": 9}, 0.9, epsilon=0.5)
    assert explored is None and credit == 0.0
    assert set(explorations({"a": 5, "b": 9}, 1000, epsilon=0.5)) == {None}


def test_booking_every_plan_where_it_was_routed_replays_the_paced_sequence() -> None:
    counts = {"a": 100, "b": 0}
    ledger = ExplorationLedger(max_cells=8)
    booked: list[str | None] = []
    for _ in range(40):
        explored, rate = plan_exploration(counts, ledger.credit("p"), epsilon=0.3)
        assert rate is not None
        backend = explored.backend if explored is not None else "a"
        plan = ExplorationPlan("p", rate, None if explored is None else explored.backend)
        ledger.book(plan, backend, now=0.0, since=0.0)
        booked.append(None if explored is None else backend)
    assert booked == explorations(counts, 40, epsilon=0.3)
    assert ledger.explorations("b", "p", since=0.0) == booked.count("b") == 12  # 40 x 0.3


def test_an_exploration_sent_elsewhere_accrues_credit_but_spends_none() -> None:
    ledger = ExplorationLedger(max_cells=8)
    ledger.book(ExplorationPlan("p", accrued=0.5), "a", now=10.0, since=0.0)
    ledger.book(ExplorationPlan("p", accrued=0.5, backend="b"), "a", now=11.0, since=0.0)  # went to a
    assert ledger.credit("p") == 1.0 and ledger.explorations("b", "p", since=0.0) == 0
    ledger.book(ExplorationPlan("p", accrued=0.5, backend="b"), "b", now=12.0, since=0.0)
    assert ledger.credit("p") == 0.5 and ledger.explorations("b", "p", since=0.0) == 1
    assert ledger.explorations("b", "p", since=12.5) == 0  # out of the window: no longer counted
    ledger.book(ExplorationPlan("p", drop=True), "a", now=13.0, since=0.0)  # nothing left to measure
    assert ledger.credit("p") == 0.0


def test_a_probe_spends_its_credit_and_measures_its_cell_wherever_the_request_went() -> None:
    ledger = ExplorationLedger(max_cells=8)
    for at in range(4):
        ledger.book(ExplorationPlan("p"), "a", now=100.0 + at, since=0.0)
    assert ledger.age("b", "p", now=104.0) == Age(4, 4.0)
    probe = ExplorationPlan("p", accrued=1.0, backend="b", probes=1)
    ledger.book(probe, "a", now=105.0, since=0.0)  # the request went to a; b was probed
    assert ledger.credit("p") == 0.0 and ledger.explorations("b", "p", since=0.0) == 1
    assert ledger.age("b", "p", now=106.0) == Age(0, 1.0)  # measured with the 5th request of the profile
    assert ledger.age("a", "p", now=106.0) == Age(0, 1.0)  # the request itself still went to a
    ledger.book(ExplorationPlan("p"), "a", now=107.0, since=0.0)
    assert ledger.age("b", "p", now=108.0) == Age(1, 3.0)


def test_probes_that_do_not_measure_the_cell_spend_its_credit_and_leave_it_as_it_was() -> None:
    ledger = ExplorationLedger(max_cells=8)
    for at in range(4):
        ledger.book(ExplorationPlan("p"), "a", now=100.0 + at, since=0.0)
    told = ExplorationPlan("p", accrued=1.0, backend="b", probes=5, measures_cell=False)
    ledger.book(told, "a", now=105.0, since=0.0)
    assert ledger.credit("p") == 0.0 and ledger.explorations("b", "p", since=0.0) == 0
    assert ledger.age("b", "p", now=106.0) == Age(5, 6.0)  # still since the profile's first request


def test_the_ledger_keeps_at_most_max_cells_cells() -> None:
    ledger = ExplorationLedger(max_cells=2)
    for backend in ("a", "b", "c"):
        ledger.book(ExplorationPlan("p", accrued=1.0, backend=backend), backend, now=1.0, since=0.0)
    assert [ledger.explorations(b, "p", since=0.0) for b in ("a", "b", "c")] == [0, 1, 1]


def test_a_cell_ages_from_its_nth_newest_send_or_from_the_profiles_first_request() -> None:
    ledger = ExplorationLedger(max_cells=8)
    plan = ExplorationPlan("p")
    for at, backend in enumerate(["x", "y", "x", "x", "y", "x"]):
        ledger.book(plan, backend, now=100.0 + at, since=0.0)
    assert ledger.age("y", "p", now=110.0) == Age(1, 6.0)  # newest y send: the 5th request, at 104
    assert ledger.age("y", "p", now=110.0, nth=2) == Age(4, 9.0)  # its 2nd newest: the 2nd, at 101
    assert ledger.age("y", "p", now=110.0, nth=3) == Age(6, 10.0)  # fewer sends: the profile's start
    assert ledger.age("z", "p", now=110.0) == Age(6, 10.0)  # never sent: blind since the start
    assert ledger.age("z", "q", now=110.0) == Age(0, 0.0)  # no request of the profile yet


def test_a_stale_reason_names_the_bound_that_was_passed() -> None:
    assert stale_reason(Age(39, 10.0), max_requests=40, max_s=120) is None
    assert "40 requests" in (stale_reason(Age(40, 10.0), max_requests=40, max_s=120) or "")
    assert "121 s" in (stale_reason(Age(3, 121.0), max_requests=40, max_s=120) or "")
    # Older than a change another backend went through 5 samples ago: due however young.
    assert "regime change" in (stale_reason(Age(5, 1.0), max_requests=40, max_s=120, changed=5) or "")
    assert stale_reason(Age(4, 1.0), max_requests=40, max_s=120, changed=5) is None


def test_a_refresh_goes_to_the_stalest_at_the_highest_rate() -> None:
    ages = {"a": Age(41, 5.0), "b": Age(60, 1.0), "c": Age(60, 2.0)}
    assert plan_refresh(ages, credit=0.0) == (None, MAX_EPSILON)  # two requests: the second one refreshes
    explored, rate = plan_refresh(ages, credit=0.5)
    assert explored is not None and explored.backend == "c" and rate == MAX_EPSILON
    # One that would slow a busy neighbour goes back to back: every request until its estimate is under way.
    explored, rate = plan_refresh(ages, credit=0.0, back_to_back={"c"})
    assert explored is not None and explored.backend == "c" and rate == 1.0
    assert plan_refresh(ages, credit=0.0, back_to_back={"a"}) == (None, MAX_EPSILON)  # c is the stalest
