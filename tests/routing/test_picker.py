"""The picker: weighted sum of clamped scores, best first, ties in pool order."""

from __future__ import annotations

from gateway.routing.pipeline.picker import pick


def test_weighted_sum_ranks_best_first() -> None:
    scores = {"preference": {"a": 0.5, "b": 1.0}, "load": {"a": 1.0, "b": 0.0}}
    assert pick(scores, {"preference": 1.0, "load": 0.3}, ["a", "b"]) == [("b", 1.0), ("a", 0.8)]
    assert pick(scores, {"preference": 1.0, "load": 1.0}, ["a", "b"])[0][0] == "a"


def test_out_of_range_and_nan_scores_are_clamped() -> None:
    ranked = pick({"s": {"a": 7.0, "b": -3.0, "c": float("nan")}}, {"s": 1.0}, ["c", "b", "a"])
    assert ranked == [("a", 1.0), ("c", 0.0), ("b", 0.0)]


def test_ties_keep_the_pool_order() -> None:
    assert [n for n, _ in pick({"s": {"a": 1.0, "b": 1.0, "c": 1.0}}, {"s": 1.0}, ["c", "a", "b"])] == [
        "c",
        "a",
        "b",
    ]


def test_a_scorer_without_weight_does_not_count() -> None:
    assert pick({"s": {"a": 1.0}, "t": {"b": 1.0}}, {"s": 1.0}, ["a", "b"])[0] == ("a", 1.0)
