"""Scorers: each maps every eligible backend to a score in [0, 1] (1 = best); the picker sums them with the
policy's weights. Each scorer's formula is written next to it.

Three slots exist, matching the policy's `weights`:
- preference (here): the profile's `prefer` order, what the operator wrote.
- load (here): how busy the backend is right now.
- objective: the adaptive scorer, the live predicted value of the profile's objective (ttft,
  tokens_per_second, e2e) for this backend at the concurrency the request would join. It is any object
  satisfying `Scorer` or `CandidateScorer` with `name = "objective"`, handed to
  PolicyRouter(objective_scorer=...), and used only for profiles whose routing mode is adaptive.

A request's candidates come in two groups: the backends that serve now, and those out for now only
(warming up, full, breaker open) that could serve once back, given as they will be then (the fallback).
The scheduler evaluates each scorer once per request over both (`CandidateScorer.assess`). A plain
`Scorer` scores each backend on its own, so it scores both groups in one call (`PerBackend`); the adaptive
scorer normalises across the backends that serve now and may plan an exploration among them, so it is
told which group is which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.records import BackendSnapshot, ExplorationPlan
from gateway.routing.pipeline.context import RouteContext


class Scorer(Protocol):
    name: str

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        """Backend name -> score in [0, 1] for every backend given (values outside are clamped); a
        backend's score does not depend on the other backends given."""
        ...


@dataclass(frozen=True, slots=True)
class Assessment:
    """One scorer's evaluation of a request's candidates."""

    scores: dict[str, float]  # every candidate, now and once back
    exploration: ExplorationPlan | None = None  # what booking the request would do (adaptive scoring)
    # The candidates whose score already prices the queue a request would join there (an adaptive
    # prediction counts the engine's waiting requests and its sequence limit): not spilled from.
    priced: frozenset[str] = frozenset()
    # (TTFT s, TPOT s) predicted per backend by an objective scorer, kept on the decision for display.
    predicted: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)


class CandidateScorer(Protocol):
    name: str

    def assess(
        self, ctx: RouteContext, now: Sequence[BackendSnapshot], later: Sequence[BackendSnapshot]
    ) -> Assessment:
        """Scores for the backends that serve now and for those that could serve once back; changes
        nothing (an exploration comes back as a plan)."""
        ...


class PerBackend(ABC):
    """A scorer whose score of a backend does not depend on the others: both groups in one `score` call."""

    name: str

    @abstractmethod
    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        """Scores in [0, 1] per backend, each from that backend alone."""

    def assess(
        self, ctx: RouteContext, now: Sequence[BackendSnapshot], later: Sequence[BackendSnapshot]
    ) -> Assessment:
        return Assessment(self.score(ctx, [*now, *later]))


class Independent(PerBackend):
    """Any plain `Scorer` as a CandidateScorer (its scores are taken to be per backend)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.name = scorer.name

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        return self.scorer.score(ctx, backends)


class PreferenceScorer(PerBackend):
    """Position in the profile's `prefer` list (names or tags).

    score = (L - i) / L for the first entry i (0-based) that names the backend or one of its tags, L the
    list length; 0 when no entry matches; 1 for everyone when `prefer` is empty (no opinion).
    """

    name = "preference"

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        prefer = ctx.profile.prefer
        if not prefer:
            return {b.name: 1.0 for b in backends}
        return {b.name: _preference(prefer, b) for b in backends}


def _preference(prefer: Sequence[str], b: BackendSnapshot) -> float:
    length = len(prefer)
    for i, entry in enumerate(prefer):
        if entry == b.name or entry in b.tags:
            return (length - i) / length
    return 0.0


class LoadScorer(PerBackend):
    """Headroom at the moment of decision.

    score = 1 - inflight / max_concurrency when the backend has a limit (0 when full);
    score = 1 / (1 + inflight) otherwise (1 idle, 0.5 with one request, falling smoothly).
    """

    name = "load"

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        return {b.name: _headroom(b) for b in backends}


def _headroom(b: BackendSnapshot) -> float:
    if b.max_concurrency:
        return max(0.0, 1.0 - b.inflight / b.max_concurrency)
    return 1.0 / (1.0 + b.inflight)
