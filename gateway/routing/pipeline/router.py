"""The policy router: features -> profile -> filters -> scorers -> picker, for every request.

`schedule` is the whole scheduling loop, pure: plain data in, a Decision out, in one pass: the ranking of
the backends that serve now, the fallback (those that could serve once back: warming up, full, breaker
open), and the exploration the request would book once sent. `PolicyRouter` wraps it with the state a
running gateway has: the policy in force (read from a PolicyWatcher, so a reload applies to the next
request), the learned characters-per-token ratios, and the optional adaptive objective scorer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from gateway.policy.classify import classify, classify_explained
from gateway.policy.schema import Policy, Profile
from gateway.records import BackendSnapshot, Candidate, Decision, Features, Refusal, Spill
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.explain import build_explanation
from gateway.routing.pipeline.filters import DEFAULT_FILTERS, Filter, once_back
from gateway.routing.pipeline.picker import pick
from gateway.routing.pipeline.policy_source import PolicySource
from gateway.routing.pipeline.scorers import (
    CandidateScorer,
    Independent,
    LoadScorer,
    PreferenceScorer,
    Scorer,
)
from gateway.routing.pipeline.spill import saturation, spill
from gateway.routing.request.features import TokenEstimator, content_size, extract_features

WeightedScorer = tuple[CandidateScorer, float]


def schedule(
    ctx: RouteContext,
    backends: Sequence[BackendSnapshot],
    filters: Sequence[Filter],
    scorers: Sequence[WeightedScorer],
) -> Decision:
    """Filter in order (stop when none are left: that filter writes the refusal), score the survivors,
    rank them by weighted sum. Every backend ends up in `candidates`, with its reason or its scores.
    A saturated first choice gives way to the next backend with room, unless the profile forbids it
    (routing/pipeline/spill.py).

    A backend that only filters about now reject is followed as it will be once back through the
    remaining filters; those that pass are scored in the same evaluation and ranked as the fallback."""
    profile = ctx.profile.name
    if not backends:
        return Decision(profile, (), (), Refusal(503, "no_backend", f"pool {ctx.pool} has no backends"))
    screen = screened(ctx, backends, filters)
    if screen.final:
        return Decision(profile, (), tuple(screen.filtered), screen.refusal)
    filtered, survivors, later, refusal = screen.filtered, screen.survivors, screen.later, screen.refusal
    assessed = [(s, s.assess(ctx, survivors, later)) for s, _ in scorers]
    per_scorer = {s.name: a.scores for s, a in assessed}
    weights = {s.name: w for s, w in scorers}
    ranked = pick(per_scorer, weights, [b.name for b in survivors])
    priced = frozenset().union(*(a.priced for _, a in assessed))
    order, spilled = _spilled(ctx, [name for name, _ in ranked], survivors, priced)
    totals = dict(ranked)
    waiting = {b.name for b in later}
    fallback = pick(per_scorer, weights, [b.name for b in backends if b.name in waiting])
    exploration = next((a.exploration for _, a in assessed if a.exploration is not None), None)
    by_name = {b.name: b for b in survivors}
    scored = [
        Candidate(
            name,
            eligible=True,
            reason=_rank_reason(i, by_name[name]),
            score=round(totals[name], 6),
            details={s: round(per[name], 6) for s, per in per_scorer.items() if name in per},
        )
        for i, name in enumerate(order)
    ]
    return Decision(
        profile,
        order,
        tuple(scored + filtered),
        refusal,
        fallback=tuple(name for name, _ in fallback),
        exploration=exploration,
        spill=spilled,
        prompt_tokens=ctx.features.prompt_tokens,
        predicted={name: p for _, a in assessed for name, p in a.predicted.items()},
    )


@dataclass(frozen=True, slots=True)
class Screen:
    """What the filters leave of a pool: the backends that serve now (`survivors`), those that could once
    back (`later`, as they will be then), the rejected with their reasons, and the refusal when none
    serve now; `final`: the decision is that refusal, nothing is left to score."""

    filtered: list[Candidate]
    survivors: list[BackendSnapshot]
    later: list[BackendSnapshot]
    refusal: Refusal | None
    final: bool = False


def screened(ctx: RouteContext, backends: Sequence[BackendSnapshot], filters: Sequence[Filter]) -> Screen:
    """The filters in order (schedule's first half, pure): stop when none are left, that filter writing
    the refusal; a backend only filters about now reject is followed as it will be once back."""
    filtered: list[Candidate] = []
    survivors = list(backends)
    later: list[BackendSnapshot] = []  # out for now only, as they will be once back
    refusal: Refusal | None = None
    for f in filters:
        if refusal is None:
            kept: list[BackendSnapshot] = []
            rejected: list[BackendSnapshot] = []
            for b in survivors:
                reason = f.reject(ctx, b)
                if reason is None:
                    kept.append(b)
                else:
                    rejected.append(b)
                    filtered.append(Candidate(b.name, eligible=False, reason=f"{f.name}: {reason}"))
            if f.now:
                later += [once_back(b) for b in rejected]
            if not kept:
                refusal = f.refuse(ctx, rejected)
                if not f.now:  # the request itself cannot be served here: nothing to wait for
                    return Screen(filtered, [], [], refusal, final=True)
            survivors = kept
        later = [b for b in later if f.reject(ctx, b) is None]
    if not survivors and not later:
        return Screen(filtered, survivors, later, refusal, final=True)
    return Screen(filtered, survivors, later, refusal)


def _spilled(
    ctx: RouteContext,
    ranked: Sequence[str],
    survivors: Sequence[BackendSnapshot],
    priced: frozenset[str] = frozenset(),
) -> tuple[tuple[str, ...], Spill | None]:
    """The ranking after overload spill (routing/pipeline/spill.py), unless the profile forbids it or the
    first backend's score already priced the queue there (`priced`: an adaptive prediction counts the engine's
    waiting requests and its sequence limit, and ranked it first with them). Spilling from it would overrule
    that price with a cruder one: a one-Spark pair's throttled engine, predicted at half the other's pace,
    took three requests because two waited a step on the other."""
    if not ctx.profile.spill or (ranked and ranked[0] in priced):
        return tuple(ranked), None
    return spill(ranked, {b.name: b for b in survivors})


def _rank_reason(i: int, b: BackendSnapshot) -> str:
    why = saturation(b)
    return f"rank {i + 1}" if why is None else f"rank {i + 1} (saturated: {why})"


class Completion(Protocol):
    """What the router learns from a finished request (proxy.dispatch.RequestRecord satisfies it)."""

    @property
    def backend(self) -> str | None: ...

    @property
    def status(self) -> int: ...

    @property
    def prompt_tokens(self) -> int | None: ...

    @property
    def body(self) -> Mapping[str, Any] | None: ...


class PolicyRouter:
    def __init__(
        self,
        policy: PolicySource,
        *,
        estimator: TokenEstimator | None = None,
        objective_scorer: CandidateScorer | Scorer | None = None,
        filters: Sequence[Filter] = DEFAULT_FILTERS,
    ) -> None:
        self.policy = policy
        self.estimator = estimator or TokenEstimator()
        self.objective_scorer = objective_scorer
        self.filters = tuple(filters)
        self._preference, self._load = PreferenceScorer(), LoadScorer()
        self._objective = _candidate_scorer(objective_scorer)

    def route(self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        """The one decision for a request: ranking, fallback and the exploration it books once sent. First
        the producer's step (`refresh`: the adaptive scorer's slow-down readings of the backends it will
        score, at the clock's reading), then `decide`, which changes nothing; the dispatcher books
        `Decision.exploration` when it sends."""
        policy = self.policy.current.policy  # one read: a reload mid-request cannot mix two policies
        features = extract_features(endpoint, body, backends, self.estimator)
        ctx = self._context(policy, classify(policy, features), features)
        self.refresh(ctx, backends)
        return schedule(ctx, backends, self.filters, self._scorers(ctx))

    def decide(self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        """The decision `route` makes, on the state as it is (no refresh first): a pure read, which
        `explain` shares."""
        policy = self.policy.current.policy
        features = extract_features(endpoint, body, backends, self.estimator)
        ctx = self._context(policy, classify(policy, features), features)
        return schedule(ctx, backends, self.filters, self._scorers(ctx))

    def refresh(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> None:
        """Before an adaptive decision: the objective scorer's readings of what it reads live (requests in
        flight) for the backends the filters leave, now and once back (AdaptiveScorer.refresh)."""
        refresh = getattr(self._objective, "refresh", None)
        if ctx.routing != "adaptive" or refresh is None or ctx.weights.objective <= 0:
            return
        screen = screened(ctx, backends, self.filters)
        if not screen.final:
            refresh(ctx, [*screen.survivors, *screen.later])

    def explain(
        self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]
    ) -> dict[str, Any]:
        """The decision `route` would make (`decide`: the same code, on the state as it is), with every
        reason; nothing is sent anywhere and nothing changes."""
        loaded = self.policy.current
        features = extract_features(endpoint, body, backends, self.estimator)
        classification = classify_explained(loaded.policy, features)
        ctx = self._context(loaded.policy, classification.profile, features)
        scorers = self._scorers(ctx)
        decision = schedule(ctx, backends, self.filters, scorers)
        explanation = build_explanation(
            features,
            classification,
            ctx,
            decision,
            scorers={s.name: w for s, w in scorers},
            policy=loaded,
            last_error=self.policy.last_error,
            routing_note=self._routing_note(ctx),
        )
        adaptive = getattr(self.objective_scorer, "explain", None)
        if ctx.routing == "adaptive" and adaptive is not None and decision.ranked:
            eligible = [b for b in backends if b.name in decision.ranked]
            explanation["scoring"]["adaptive"] = adaptive(ctx, eligible)
        return explanation

    def observe(self, record: Completion) -> None:
        """A dispatch observer: a successful answer's usage.prompt_tokens teaches the estimator the
        characters per token of the backend that counted them."""
        if record.status == 200 and record.backend and record.prompt_tokens and record.body is not None:
            self.observe_prompt_tokens(record.backend, record.body, record.prompt_tokens)

    def observe_prompt_tokens(self, backend: str, body: Mapping[str, Any], prompt_tokens: int) -> None:
        """Teach the estimator from a finished request's usage.prompt_tokens on `backend`."""
        chars, token_ids, _ = content_size(body)
        if token_ids == 0:  # a prompt given as token ids says nothing about characters per token
            self.estimator.observe(backend, chars, prompt_tokens)

    def _context(self, policy: Policy, profile: Profile, features: Features) -> RouteContext:
        return RouteContext(features, profile, policy.routing_for(profile), policy.weights, policy.adaptive)

    def _scorers(self, ctx: RouteContext) -> list[WeightedScorer]:
        w = ctx.weights
        chosen: list[WeightedScorer] = [(self._preference, w.preference), (self._load, w.load)]
        if ctx.routing == "adaptive" and self._objective is not None:
            objective = self._objective
            # The objective scorer carries the prefer order as its prior, fading as cells get measured,
            # so the preference scorer does not also vote in adaptive routing.
            chosen = [(objective, w.objective), (self._load, w.load)]
        return [(s, weight) for s, weight in chosen if weight > 0]

    def _routing_note(self, ctx: RouteContext) -> str:
        if ctx.routing == "static":
            return "static: policy preference and load"
        if self.objective_scorer is None:
            return "adaptive requested, but no objective scorer is configured: static scoring used"
        return f"adaptive: predicted {ctx.profile.objective} (prefer order as the prior) and load"


def _candidate_scorer(scorer: CandidateScorer | Scorer | None) -> CandidateScorer | None:
    """The objective scorer as the scheduler evaluates it: a plain Scorer is taken to score per backend."""
    if scorer is None:
        return None
    if hasattr(scorer, "assess"):
        return cast(CandidateScorer, scorer)
    return Independent(scorer)
