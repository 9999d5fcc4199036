"""The picker: weighted sum of the clamped scorer outputs, best first. The order is the failover order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def clamp(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, x))  # NaN (x != x) scores as the worst


def pick(
    scores: Mapping[str, Mapping[str, float]], weights: Mapping[str, float], backends: Sequence[str]
) -> list[tuple[str, float]]:
    """(backend, total) best first. total = sum over scorers of weight * clamp(score); a backend a scorer
    did not score gets 0 from it. Ties keep the pool's configured order, so equal backends are stable."""
    totals = {
        name: sum(weights.get(scorer, 0.0) * clamp(per.get(name, 0.0)) for scorer, per in scores.items())
        for name in backends
    }
    position = {name: i for i, name in enumerate(backends)}
    return sorted(totals.items(), key=lambda item: (-item[1], position[item[0]]))
