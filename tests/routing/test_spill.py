"""Overload spill: a saturated first choice gives way to the next backend with room, unless the profile
forbids it; when every backend is saturated the shortest queue per slot goes first."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.commands.explain import render
from gateway.policy.load import PolicyError, parse_policy
from gateway.policy.schema import Profile, Weights
from gateway.records import BackendSnapshot, Features
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.filters import DEFAULT_FILTERS
from gateway.routing.pipeline.least_busy import LeastBusyRouter
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter, schedule
from gateway.routing.pipeline.scorers import Assessment
from gateway.routing.pipeline.spill import saturation

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}


def policy(spill: str = "", routing: str = "static") -> str:
    return f"""
version: 1
routing: {routing}
profiles:
  - name: default
    prefer: [fp8-mtp, fp8-base, tiny]
{spill}
"""


def router(spill: str = "", routing: str = "static", objective: object = None) -> PolicyRouter:
    return PolicyRouter(FixedPolicy(parse_policy(policy(spill, routing))), objective_scorer=objective)  # type: ignore[arg-type]


def pool(
    mtp: dict[str, object] | None = None, base: dict[str, object] | None = None
) -> list[BackendSnapshot]:
    return [
        BackendSnapshot("fp8-mtp", **(mtp or {})),  # type: ignore[arg-type]
        BackendSnapshot("fp8-base", **(base or {})),  # type: ignore[arg-type]
        BackendSnapshot("tiny", context_length=16),  # filtered out: too small for the request
    ]


def test_with_room_the_preferred_backend_serves() -> None:
    decision = router().route("chat", BODY, pool({"inflight": 7, "engine_capacity": 8, "engine_waiting": 0}))
    assert decision.ranked == ("fp8-mtp", "fp8-base") and decision.spill is None


def test_capacity_in_flight_spills_to_the_next_backend() -> None:
    decision = router().route("chat", BODY, pool({"inflight": 12, "engine_capacity": 8}))
    assert decision.ranked == ("fp8-base", "fp8-mtp")
    assert decision.spill is not None and decision.spill.source == "fp8-mtp"
    assert str(decision.spill) == "spilled from fp8-mtp (saturated: 12 in flight, capacity 8) to fp8-base"


def test_requests_waiting_in_the_engine_spill_without_a_known_capacity() -> None:
    decision = router().route("chat", BODY, pool({"inflight": 3, "engine_waiting": 5.0}))
    assert decision.ranked == ("fp8-base", "fp8-mtp")
    assert decision.spill is not None and decision.spill.why == "5 waiting in the engine"


def test_a_stale_or_unknown_engine_queue_does_not_spill() -> None:
    decision = router().route("chat", BODY, pool({"inflight": 30, "engine_waiting": None}))
    assert decision.ranked[0] == "fp8-mtp" and decision.spill is None


def test_a_reported_queue_with_nothing_in_flight_there_does_not_spill() -> None:
    # The scrape caught a request between two engine steps; the gateway's own count says it is gone.
    decision = router().route("chat", BODY, pool({"inflight": 0, "engine_waiting": 1.0}))
    assert decision.ranked[0] == "fp8-mtp" and decision.spill is None


def test_spill_false_keeps_the_saturated_preferred_backend() -> None:
    decision = router("    spill: false").route("chat", BODY, pool({"inflight": 12, "engine_capacity": 8}))
    assert decision.ranked == ("fp8-mtp", "fp8-base") and decision.spill is None
    first = next(c for c in decision.candidates if c.backend == "fp8-mtp")
    assert first.reason == "rank 1 (saturated: 12 in flight, capacity 8)"


def test_all_saturated_keeps_the_usual_ranking() -> None:
    decision = router().route(
        "chat",
        BODY,
        pool({"inflight": 12, "engine_capacity": 8}, {"inflight": 2, "engine_waiting": 1.0}),
    )
    assert decision.ranked == ("fp8-mtp", "fp8-base") and decision.spill is None


def test_all_saturated_joins_the_shortest_queue_per_slot() -> None:
    decision = router().route(
        "chat",
        BODY,
        pool({"inflight": 200, "engine_capacity": 8}, {"inflight": 10, "engine_capacity": 8}),
    )
    assert decision.ranked == ("fp8-base", "fp8-mtp")
    assert decision.spill is not None and decision.spill.target == "fp8-base"


def test_the_tighter_of_configured_and_engine_capacity_counts() -> None:
    b = BackendSnapshot("x", inflight=4, max_concurrency=16, engine_capacity=4)
    assert saturation(b) == "4 in flight, capacity 4"
    assert saturation(BackendSnapshot("x", inflight=3, max_concurrency=16, engine_capacity=4)) is None


class ObjectiveFavoursMtp:
    """An objective scorer that ranks fp8-mtp first whatever its load."""

    name = "objective"

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        return {b.name: 1.0 if b.name == "fp8-mtp" else 0.0 for b in backends}


def test_adaptive_ranking_spills_too() -> None:
    adaptive = router(routing="adaptive", objective=ObjectiveFavoursMtp())
    assert adaptive.route("chat", BODY, pool()).ranked[0] == "fp8-mtp"
    decision = adaptive.route("chat", BODY, pool({"inflight": 1, "engine_waiting": 2.0}))
    assert decision.ranked == ("fp8-base", "fp8-mtp") and decision.spill is not None


class PricedFavoursMtp:
    """A scorer that ranks fp8-mtp first and says which of its scores priced the queue in."""

    name = "objective"

    def __init__(self, priced: frozenset[str]) -> None:
        self.priced = priced

    def assess(
        self, ctx: RouteContext, now: Sequence[BackendSnapshot], later: Sequence[BackendSnapshot]
    ) -> Assessment:
        scores = {b.name: 1.0 if b.name == "fp8-mtp" else 0.5 for b in [*now, *later]}
        return Assessment(scores, priced=self.priced)


def test_a_first_backend_whose_score_priced_its_queue_is_not_spilled_from() -> None:
    ctx = RouteContext(Features("m", "chat", 10, 64), Profile(name="default"), "adaptive", Weights())
    saturated = pool({"inflight": 1, "engine_waiting": 2.0})
    priced = schedule(ctx, saturated, DEFAULT_FILTERS, [(PricedFavoursMtp(frozenset({"fp8-mtp"})), 1.0)])
    assert priced.ranked == ("fp8-mtp", "fp8-base") and priced.spill is None
    unpriced = schedule(ctx, saturated, DEFAULT_FILTERS, [(PricedFavoursMtp(frozenset()), 1.0)])
    assert unpriced.ranked == ("fp8-base", "fp8-mtp") and unpriced.spill is not None
    others = schedule(ctx, saturated, DEFAULT_FILTERS, [(PricedFavoursMtp(frozenset({"fp8-base"})), 1.0)])
    assert others.ranked == ("fp8-base", "fp8-mtp")


def test_explain_says_it_spilled() -> None:
    e = router().explain("chat", BODY, pool({"inflight": 12, "engine_capacity": 8}))
    assert e["chosen"] == "fp8-base"
    assert e["spill"] == "spilled from fp8-mtp (saturated: 12 in flight, capacity 8) to fp8-base"
    assert "spill     spilled from fp8-mtp" in render(e)
    assert router().explain("chat", BODY, pool())["spill"] is None


def test_spill_must_be_a_boolean() -> None:
    with pytest.raises(PolicyError, match="spill"):
        parse_policy(policy("    spill: sometimes"))
    assert parse_policy(policy()).policy.profiles[0].spill is True


def test_least_busy_router_spills_off_a_queueing_engine() -> None:
    backends = [BackendSnapshot("a", inflight=1, engine_waiting=4.0), BackendSnapshot("b", inflight=2)]
    decision = LeastBusyRouter().route("chat", BODY, backends)
    assert decision.ranked == ("b", "a") and decision.spill is not None
    calm = [BackendSnapshot("a", inflight=1, engine_waiting=0.0), BackendSnapshot("b", inflight=2)]
    assert LeastBusyRouter().route("chat", BODY, calm).ranked == ("a", "b")


def test_a_learned_limit_judges_each_request_on_the_live_count_not_on_a_stale_queue_report() -> None:
    # The last report said 5 waiting; since then the gateway's own requests there dropped to 2 of the 4
    # the engine was seen running when full: room now, whatever the report still says.
    room = BackendSnapshot("a", inflight=2, engine_waiting=5.0, engine_full_at=4)
    assert saturation(room) is None
    assert saturation(BackendSnapshot("a", inflight=4, engine_waiting=0.0, engine_full_at=4)) is not None
    # Nothing learned: the report is all there is.
    assert saturation(BackendSnapshot("a", inflight=2, engine_waiting=5.0)) is not None


def test_a_burst_spills_as_it_arrives_once_the_limits_are_known() -> None:
    from gateway.routing.pipeline.spill import spill

    inflight = {"a": 0, "b": 0}
    for _ in range(40):  # forty requests routed at once, before any scrape: only live counts move
        snapshots = {n: BackendSnapshot(n, inflight=inflight[n], engine_full_at=8) for n in inflight}
        order, _ = spill(("a", "b"), snapshots)
        inflight[order[0]] += 1
    assert inflight == {"a": 20, "b": 20}  # 8 each, then the shortest queue per slot, turn about
