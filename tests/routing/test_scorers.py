"""Scorers return [0, 1] per backend, by the formulas written next to them."""

from __future__ import annotations

from gateway.policy.schema import Profile, Weights
from gateway.records import BackendSnapshot, Features
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.scorers import LoadScorer, PreferenceScorer

FEATURES = Features(model="m", endpoint="chat", prompt_tokens=10, max_output_tokens=10)


def ctx(prefer: list[str]) -> RouteContext:
    return RouteContext(FEATURES, Profile(name="p", prefer=prefer), "static", Weights())


def test_preference_follows_position_in_the_prefer_list_by_name_or_tag() -> None:
    backends = [BackendSnapshot("x", tags=frozenset({"mtp"})), BackendSnapshot("y"), BackendSnapshot("z")]
    scores = PreferenceScorer().score(ctx(["mtp", "y"]), backends)
    assert scores == {"x": 1.0, "y": 0.5, "z": 0.0}


def test_an_empty_prefer_list_has_no_opinion() -> None:
    backends = [BackendSnapshot("x"), BackendSnapshot("y")]
    assert PreferenceScorer().score(ctx([]), backends) == {"x": 1.0, "y": 1.0}


def test_load_is_headroom_against_the_limit_or_decays_without_one() -> None:
    backends = [
        BackendSnapshot("idle", inflight=0, max_concurrency=8),
        BackendSnapshot("half", inflight=4, max_concurrency=8),
        BackendSnapshot("over", inflight=9, max_concurrency=8),
        BackendSnapshot("free1", inflight=1),
        BackendSnapshot("free3", inflight=3),
    ]
    assert LoadScorer().score(ctx([]), backends) == {
        "idle": 1.0,
        "half": 0.5,
        "over": 0.0,
        "free1": 0.5,
        "free3": 0.25,
    }
