"""Scorers: each maps every eligible backend to a score in [0, 1] (1 = best); the picker sums them with the
policy's weights. Each scorer's formula is written next to it.

Three slots exist, matching the policy's `weights`:
- preference (here): the profile's `prefer` order, what the operator wrote.
- load (here): how busy the backend is right now.
- objective: the adaptive scorer, the live predicted value of the profile's objective (ttft,
  tokens_per_second, e2e) for this backend at the concurrency the request would join. It is any object
  satisfying `Scorer` with `name = "objective"`, handed to PolicyRouter(objective_scorer=...), and used
  only for profiles whose routing mode is adaptive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.records import BackendSnapshot
from gateway.routing.context import RouteContext


class Scorer(Protocol):
    name: str

    def score(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        """Backend name -> score in [0, 1] for every backend given (values outside are clamped)."""
        ...


class PreferenceScorer:
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


class LoadScorer:
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
