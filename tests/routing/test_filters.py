"""Eligibility filters and the refusals written when a filter leaves no backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.policy.schema import Profile, Require, Weights
from gateway.records import BackendSnapshot, Decision, Features
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.filters import DEFAULT_FILTERS
from gateway.routing.pipeline.router import schedule
from gateway.routing.pipeline.scorers import LoadScorer

TEXT = Features(model="pool-m", endpoint="chat", prompt_tokens=1000, max_output_tokens=500)
IMAGE = replace(TEXT, modalities=frozenset({"text", "image"}))


def decide(features: Features, backends: list[BackendSnapshot], profile: Profile | None = None) -> Decision:
    ctx = RouteContext(features, profile or Profile(name="default"), "static", Weights())
    return schedule(ctx, backends, DEFAULT_FILTERS, [(LoadScorer(), 1.0)])


def reasons(decision: Decision) -> dict[str, str]:
    return {c.backend: c.reason for c in decision.candidates if not c.eligible}


def test_an_image_request_goes_only_to_image_capable_backends() -> None:
    backends = [
        BackendSnapshot("text-only"),
        BackendSnapshot("vision", modalities=frozenset({"text", "image"})),
    ]
    d = decide(IMAGE, backends)
    assert d.ranked == ("vision",)
    assert reasons(d) == {"text-only": "modality: cannot take image input"}


def test_no_image_capable_backend_is_a_400_naming_the_modality() -> None:
    d = decide(IMAGE, [BackendSnapshot("a"), BackendSnapshot("b")])
    assert d.refusal is not None
    assert (d.refusal.status, d.refusal.code) == (400, "unsupported_modality")
    assert d.refusal.message == "no backend of pool pool-m accepts image input"


def test_context_must_hold_prompt_plus_requested_output() -> None:
    backends = [BackendSnapshot("small", context_length=1499), BackendSnapshot("fits", context_length=1500)]
    d = decide(TEXT, backends)
    assert d.ranked == ("fits",)
    assert reasons(d) == {"small": "context: needs about 1500 tokens, context is 1499"}


def test_without_max_tokens_a_small_default_output_is_assumed() -> None:
    d = decide(replace(TEXT, max_output_tokens=None), [BackendSnapshot("a", context_length=1256)])
    assert d.ranked == ("a",)
    assert decide(replace(TEXT, max_output_tokens=None), [BackendSnapshot("a", context_length=1255)]).refusal


def test_an_unknown_context_is_assumed_to_fit() -> None:
    assert decide(replace(TEXT, prompt_tokens=10**6), [BackendSnapshot("a")]).ranked == ("a",)


def test_too_long_for_every_backend_is_a_400_naming_the_largest_context() -> None:
    backends = [BackendSnapshot("x", context_length=4096), BackendSnapshot("y", context_length=8192)]
    d = decide(replace(TEXT, prompt_tokens=9000, max_output_tokens=100), backends)
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (400, "context_length_exceeded")
    assert d.refusal.message == (
        "this request needs about 9100 tokens (9000 estimated prompt + 100 requested output); "
        "the largest context in pool pool-m is 8192 (backend y)"
    )


def test_starting_backends_are_not_ready_and_alone_give_a_503_with_a_hint() -> None:
    backends = [BackendSnapshot("warm", ready=False, starting=True), BackendSnapshot("down", ready=False)]
    d = decide(TEXT, backends)
    assert reasons(d) == {"warm": "ready: starting (loading the model)", "down": "ready: not ready"}
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (503, "no_ready_backend")
    assert "warm still loading the model" in d.refusal.message and "retry shortly" in d.refusal.message


def test_a_starting_backend_that_could_not_serve_anyway_gives_the_400() -> None:
    backends = [
        BackendSnapshot("warm", ready=False, starting=True),
        BackendSnapshot("vision", ready=False, modalities=frozenset({"text", "image"})),
    ]
    d = decide(IMAGE, [backends[0]])
    assert d.refusal is not None and d.refusal.status == 400
    d = decide(IMAGE, backends)
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (503, "no_ready_backend")


def test_open_breakers_are_skipped_and_alone_give_a_503() -> None:
    d = decide(TEXT, [BackendSnapshot("a", breaker_open=True), BackendSnapshot("b")])
    assert d.ranked == ("b",) and reasons(d) == {"a": "breaker: circuit breaker open (recent failures)"}
    d = decide(TEXT, [BackendSnapshot("a", breaker_open=True)])
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (503, "backend_unavailable")


def test_a_backend_at_its_concurrency_limit_is_skipped() -> None:
    d = decide(
        TEXT, [BackendSnapshot("full", inflight=4, max_concurrency=4), BackendSnapshot("b", inflight=9)]
    )
    assert d.ranked == ("b",) and reasons(d) == {"full": "concurrency: at its concurrency limit (4/4)"}
    d = decide(TEXT, [BackendSnapshot("full", inflight=4, max_concurrency=4)])
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (503, "pool_saturated")


def test_profile_require_filters_by_modality_and_minimum_context() -> None:
    profile = Profile(name="big", require=Require(vision=True, min_context=32768))
    backends = [
        BackendSnapshot("short", context_length=8192, modalities=frozenset({"text", "image"})),
        BackendSnapshot("blind", context_length=131072),
        BackendSnapshot("ok", context_length=131072, modalities=frozenset({"text", "image"})),
    ]
    d = decide(TEXT, backends, profile)
    assert d.ranked == ("ok",)
    assert reasons(d) == {
        "short": "require: profile big requires context >= 32768, has 8192",
        "blind": "require: profile big requires image input",
    }
    d = decide(TEXT, backends[:2], profile)
    assert d.refusal is not None and d.refusal.code == "no_backend_for_profile" and d.refusal.status == 400


@pytest.mark.parametrize("avoid", ["b", "slow"])
def test_profile_avoid_matches_names_and_tags(avoid: str) -> None:
    backends = [BackendSnapshot("a"), BackendSnapshot("b", tags=frozenset({"slow"}))]
    d = decide(TEXT, backends, Profile(name="p", avoid=[avoid]))
    assert d.ranked == ("a",) and reasons(d) == {"b": f"avoid: avoided by profile p ({avoid})"}
    d = decide(TEXT, backends[1:], Profile(name="p", avoid=[avoid]))
    assert d.refusal is not None and d.refusal.status == 503


def test_an_empty_pool_is_refused() -> None:
    d = decide(TEXT, [])
    assert d.refusal is not None and d.refusal.code == "no_backend" and d.ranked == ()


def test_backends_out_for_now_only_are_the_fallback_ranked_in_the_same_pass() -> None:
    backends = [
        BackendSnapshot("busy", inflight=4, max_concurrency=4),  # full: has room once back
        BackendSnapshot("ready", inflight=1),
        BackendSnapshot("warming", ready=False, starting=True),
        BackendSnapshot("down", ready=False),  # not warming up: nothing to wait for
        BackendSnapshot("tripped", breaker_open=True, inflight=2),
        BackendSnapshot("small", context_length=1024, starting=True, ready=False),  # never fits
    ]
    d = decide(TEXT, backends)
    assert d.ranked == ("ready",) and d.refusal is None
    # Once back each is idle, so the load scorer ties them: pool order.
    assert d.fallback == ("busy", "warming", "tripped")


def test_nothing_serving_now_is_a_503_with_the_fallback_to_wait_for() -> None:
    warming = BackendSnapshot("w1", ready=False, starting=True)
    d = decide(TEXT, [warming, BackendSnapshot("w2", breaker_open=True)])
    assert d.ranked == () and d.refusal is not None and d.refusal.status == 503
    assert d.fallback == ("w1", "w2")


def test_a_request_no_backend_can_take_has_no_fallback() -> None:
    d = decide(IMAGE, [BackendSnapshot("warming", ready=False, starting=True)])
    assert d.refusal is not None and d.refusal.status == 400 and d.fallback == ()
