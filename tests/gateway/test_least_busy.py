"""The interim router: least busy ready backend first, the rest as failover order."""

from __future__ import annotations

from gateway.records import BackendSnapshot
from gateway.routing.pipeline.least_busy import LeastBusyRouter

BODY = {"model": "m", "messages": []}


def test_least_busy_ready_backend_goes_first_and_the_rest_follow() -> None:
    backends = [
        BackendSnapshot("a", inflight=3),
        BackendSnapshot("b", inflight=1),
        BackendSnapshot("c", inflight=2),
    ]
    decision = LeastBusyRouter().route("chat", BODY, backends)
    assert decision.ranked == ("b", "c", "a")
    assert decision.profile == "default"


def test_load_is_relative_to_max_concurrency() -> None:
    backends = [
        BackendSnapshot("small", inflight=2, max_concurrency=4),
        BackendSnapshot("big", inflight=3, max_concurrency=32),
    ]
    assert LeastBusyRouter().route("chat", BODY, backends).ranked == ("big", "small")


def test_ties_keep_pool_order() -> None:
    backends = [BackendSnapshot("a"), BackendSnapshot("b")]
    assert LeastBusyRouter().route("chat", BODY, backends).ranked == ("a", "b")


def test_not_ready_full_or_broken_backends_are_left_out_with_a_reason() -> None:
    backends = [
        BackendSnapshot("warming", ready=False, starting=True),
        BackendSnapshot("full", inflight=2, max_concurrency=2),
        BackendSnapshot("broken", breaker_open=True),
        BackendSnapshot("ok"),
    ]
    decision = LeastBusyRouter().route("chat", BODY, backends)
    assert decision.ranked == ("ok",)
    reasons = {c.backend: c.reason for c in decision.candidates if not c.eligible}
    assert reasons == {
        "warming": "starting",
        "full": "at its concurrency limit (2)",
        "broken": "breaker open",
    }


def test_only_starting_backends_refuse_with_503_and_a_hint() -> None:
    decision = LeastBusyRouter().route("chat", BODY, [BackendSnapshot("a", ready=False, starting=True)])
    assert decision.refusal is not None and decision.refusal.status == 503
    assert "starting" in decision.refusal.message


def test_all_full_refuses_as_busy() -> None:
    decision = LeastBusyRouter().route("chat", BODY, [BackendSnapshot("a", inflight=1, max_concurrency=1)])
    assert decision.refusal is not None and decision.refusal.code == "backends_busy"


def test_all_breakers_open_refuses_as_failing_never_as_busy() -> None:
    backends = [BackendSnapshot("a", breaker_open=True), BackendSnapshot("b", breaker_open=True)]
    refusal = LeastBusyRouter().route("chat", BODY, backends).refusal
    assert refusal is not None and refusal.status == 503
    assert refusal.code == "backend_unavailable"
    assert "circuit breaker open" in refusal.message and "concurrency limit" not in refusal.message


def test_full_and_broken_backends_refuse_naming_both_reasons() -> None:
    backends = [BackendSnapshot("a", inflight=1, max_concurrency=1), BackendSnapshot("b", breaker_open=True)]
    refusal = LeastBusyRouter().route("chat", BODY, backends).refusal
    assert refusal is not None and refusal.code == "backends_busy"
    assert "1 failing (circuit breaker open)" in refusal.message


def test_backends_out_for_now_only_follow_as_the_fallback_in_pool_order() -> None:
    backends = [
        BackendSnapshot("full", inflight=2, max_concurrency=2),
        BackendSnapshot("down", ready=False),
        BackendSnapshot("free"),
        BackendSnapshot("warming", ready=False, starting=True),
        BackendSnapshot("tripped", breaker_open=True),
    ]
    decision = LeastBusyRouter().route("chat", BODY, backends)
    assert decision.ranked == ("free",)
    assert decision.fallback == ("full", "warming", "tripped")
