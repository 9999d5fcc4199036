"""The adaptive scorer's pure helpers (routing/adaptive/scorer.py): when the winner's prediction beats a
holder's by more than the tolerance, so measuring the holder with the request is not free."""

from __future__ import annotations

from gateway.routing.adaptive.scorer import _clearly_beaten
from gateway.routing.adaptive.verdict import Verdict


def costs(**values: float) -> Verdict:
    return Verdict({name: 0.5 for name in values}, (), {}, None, "", costs=dict(values))


def test_a_winner_faster_by_more_than_the_tolerance_clearly_beats_a_holder() -> None:
    assert _clearly_beaten(costs(w=100.0, h=70.0), "h", "w", "tokens_per_second", 0.25)
    assert not _clearly_beaten(costs(w=100.0, h=90.0), "h", "w", "tokens_per_second", 0.25)
    assert _clearly_beaten(costs(w=2.0, h=3.0), "h", "w", "e2e", 0.25)
    assert not _clearly_beaten(costs(w=2.0, h=2.4), "h", "w", "e2e", 0.25)
    assert not _clearly_beaten(costs(w=3.0, h=2.0), "h", "w", "ttft", 0.25)  # the holder is faster


def test_without_both_predictions_or_another_winner_nothing_is_clearly_beaten() -> None:
    assert not _clearly_beaten(costs(w=100.0), "h", "w", "tokens_per_second", 0.25)
    assert not _clearly_beaten(costs(h=70.0), "h", "w", "tokens_per_second", 0.25)
    assert not _clearly_beaten(costs(w=100.0, h=70.0), "h", None, "tokens_per_second", 0.25)
    assert not _clearly_beaten(costs(h=70.0), "h", "h", "tokens_per_second", 0.25)
