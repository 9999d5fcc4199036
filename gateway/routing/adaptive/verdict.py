"""From each backend's predicted objective to its score in [0, 1] and the reason, pure on plain data: the
last step of the adaptive scorer (routing/adaptive/scorer.py, whose docstring gives the whole formula).

The objective is taken per successful request (a backend failing requests costs more per success), every
prediction is compared with the best one, and the relative gap maps linearly onto the score: the best
scores 1, and a gap of max(widest gap, `tolerance`) would score KNOWN_FLOOR. A backend not yet
measured scores the policy's prior times UNKNOWN_WEIGHT, below every measured one; with none measured,
the prior alone ranks. An exploration scores 1 for the backend explored and 0 for the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.records import ExplorationPlan
from gateway.routing.explore.pacing import Exploration
from gateway.routing.model.predict import Prediction

KNOWN_FLOOR = 0.25  # the lowest score of a backend with a prediction
UNKNOWN_WEIGHT = 0.2  # a backend without one scores prior x this: always below every prediction
# A backend failing every request counts as this share of its requests succeeding: 20x worse than a
# healthy one, not infinitely (its prediction still ranks it among the others).
MIN_SUCCESS_SHARE = 0.05
# Predictions are floored at this before gaps are taken, so a zero (a degenerate fit) divides nothing by 0.
SMALLEST_VALUE = 1e-9


@dataclass(frozen=True, slots=True)
class Verdict:
    scores: dict[str, float]
    predictions: tuple[Prediction, ...]
    prior: dict[str, float]
    explored: Exploration | None
    why: str
    costs: dict[str, float] = field(default_factory=dict)  # objective after the error-rate correction
    plan: ExplorationPlan | None = None  # what booking this request would do to the exploration state


def effective_value(prediction: Prediction, error_rate: float) -> float | None:
    """The objective per successful request: time / (1 - errors), speed x (1 - errors)."""
    if prediction.value is None:
        return None
    ok = max(1.0 - error_rate, MIN_SUCCESS_SHARE)
    return prediction.value * ok if prediction.higher_is_better else prediction.value / ok


def verdict(
    predictions: Sequence[Prediction],
    error_rates: Mapping[str, float],
    prior: Mapping[str, float],
    explored: Exploration | None,
    tolerance: float,
    held: Mapping[str, str] | None = None,
) -> Verdict:
    """Scores in [0, 1] per backend from its prediction (pure; formulas in the module docstring).
    A backend in `held` leaves its shared device to the engine named there (shared_device.holders): that
    engine stands for the device with the best score among them, and the held one scores 0."""
    names = [p.backend for p in predictions]
    if explored is not None:
        scores = {name: 1.0 if name == explored.backend else 0.0 for name in names}
        return Verdict(scores, tuple(predictions), dict(prior), explored, f"exploring {explored.why}")
    values = {
        p.backend: max(v, SMALLEST_VALUE)
        for p in predictions
        if (v := effective_value(p, error_rates.get(p.backend, 0.0))) is not None
    }
    if not values:
        scores = {name: prior.get(name, 0.0) for name in names}
        why = "no backend has enough samples yet: the policy's prefer order is the prior"
        return Verdict(scores, tuple(predictions), dict(prior), None, why)
    higher = predictions[0].higher_is_better
    best = max(values.values()) if higher else min(values.values())
    gaps = {name: (best / v if higher else v / best) - 1.0 for name, v in values.items()}
    scale = max(max(gaps.values()), tolerance)
    scores = {
        name: KNOWN_FLOOR + (1 - KNOWN_FLOOR) * (1.0 - gaps[name] / scale)
        if name in values
        else UNKNOWN_WEIGHT * prior.get(name, 0.0)
        for name in names
    }
    why = _why(predictions, values, gaps)
    held = {name: holder for name, holder in (held or {}).items() if name in scores and holder in scores}
    for name, holder in held.items():  # the holder stands for its device: the best of its scores
        scores[holder] = max(scores[holder], scores[name])
        why += f"; {name} leaves its device to {holder}, which holds it"
    for name in held:
        scores[name] = 0.0
    return Verdict(scores, tuple(predictions), dict(prior), None, why, values)


def demoted(prior: Mapping[str, float], slowed: set[str]) -> dict[str, float]:
    """The prior with every slowed backend ranked after the others (their order kept among themselves).

    The prefer order is the operator's view of healthy engines: an engine seen running slower than its
    own measurements (throttled, badly restarted) is not the one they meant to favour, and a profile it was
    never measured on would otherwise follow the prior onto it."""
    floor = min((v for name, v in prior.items() if name not in slowed), default=0.0)
    if not slowed or floor <= 0:
        return dict(prior)
    return {name: v * floor / 2 if name in slowed else v for name, v in prior.items()}


def _why(predictions: Sequence[Prediction], values: Mapping[str, float], gaps: Mapping[str, float]) -> str:
    ordered = sorted(values, key=lambda name: gaps[name])
    objective = predictions[0].objective
    unit = "tok/s" if predictions[0].higher_is_better else "s"
    winner = ordered[0]
    parts = [f"{winner} predicted best for {objective}: {values[winner]:.3g} {unit}"]
    parts += [f"{name} {values[name]:.3g} {unit} ({gaps[name] * 100:+.0f}%)" for name in ordered[1:]]
    missing = [p.backend for p in predictions if p.backend not in values]
    if missing:
        parts.append(f"not yet measured (ranked after): {', '.join(missing)}")
    return "; ".join(parts)
