"""Eligibility: which backends of the pool may serve this request at all, before any preference.

Filters run in order. Filters about the request (modality, context, the profile's require/avoid) come
before filters about the backend's state now (ready, breaker, concurrency: `Filter.now`), so when the
latter empty the set we know the remaining backends *could* serve the request once available: that is a
503 (retry later), whereas a capability gap is the client's 400. The filter that empties the set writes
the refusal. A backend only a filter about now rejects is kept aside as it will be once back (`once_back`:
warmed up, with room, its breaker cooled down); those that then pass every filter are the decision's
fallback, ranked in the same pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.records import BackendSnapshot, Refusal
from gateway.records.endpoints import ENDPOINT_PATHS
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.request.features import DEFAULT_OUTPUT_TOKENS, needed_tokens

Reject = Callable[[RouteContext, BackendSnapshot], str | None]  # why the backend is out, or None
Refuse = Callable[[RouteContext, Sequence[BackendSnapshot]], Refusal]  # when this filter left none


@dataclass(frozen=True, slots=True)
class Filter:
    name: str
    reject: Reject
    refuse: Refuse
    now: bool = False  # about the backend's state at this moment, not the request: it may pass once back


def once_back(b: BackendSnapshot) -> BackendSnapshot:
    """The backend as it will be once warmed up (a starting backend counts as ready), with room (nothing in
    flight) and its breaker cooled down (each lets a probe through after its cool-down). A backend down
    without warming up stays not ready."""
    ready = b.ready or b.starting
    return dataclasses.replace(b, ready=ready, starting=False, inflight=0, breaker_open=False, stalled=False)


def _endpoint_unserved(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    endpoint = ctx.features.endpoint
    if b.endpoints is None or endpoint in b.endpoints:
        return None
    return f"does not serve {ENDPOINT_PATHS.get(endpoint, endpoint)}"


def _no_endpoint(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    path = ENDPOINT_PATHS.get(ctx.features.endpoint, ctx.features.endpoint)
    message = f"no backend of pool {ctx.pool} serves {path} (a backend's `endpoints:` in the config adds it)"
    return Refusal(400, "unsupported_endpoint", message)


def _missing_modalities(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    missing = sorted(ctx.features.modalities - b.modalities)
    return f"cannot take {'/'.join(missing)} input" if missing else None


def _no_modality(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    missing = sorted(ctx.features.modalities - {"text"})
    return Refusal(
        400, "unsupported_modality", f"no backend of pool {ctx.pool} accepts {'/'.join(missing)} input"
    )


def _context_too_small(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    need = needed_tokens(ctx.features)
    if b.context_length is None or need <= b.context_length:
        return None  # an unknown context is assumed to fit: the engine has the last word
    return f"needs about {need} tokens, context is {b.context_length}"


def _no_context(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    f = ctx.features
    largest = max(rejected, key=lambda b: b.context_length or 0)
    output = (
        f"{f.max_output_tokens} requested output"
        if f.max_output_tokens is not None
        else f"a default {DEFAULT_OUTPUT_TOKENS} output"
    )
    return Refusal(
        400,
        "context_length_exceeded",
        f"this request needs about {needed_tokens(f)} tokens "
        f"({f.prompt_tokens} estimated prompt + {output}); "
        f"the largest context in pool {ctx.pool} is {largest.context_length} (backend {largest.name})",
    )


def _profile_requirement(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    req = ctx.profile.require
    missing = sorted(req.needed_modalities() - b.modalities)
    if missing:
        return f"profile {ctx.profile.name} requires {'/'.join(missing)} input"
    if req.min_context is not None and b.context_length is not None and b.context_length < req.min_context:
        return f"profile {ctx.profile.name} requires context >= {req.min_context}, has {b.context_length}"
    return None


def _no_requirement(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    return Refusal(
        400,
        "no_backend_for_profile",
        f"requests of profile {ctx.profile.name} need {_requirement_text(ctx)}; "
        f"no backend of pool {ctx.pool} has it",
    )


def _requirement_text(ctx: RouteContext) -> str:
    req = ctx.profile.require
    parts = [f"{m} input" for m in sorted(req.needed_modalities())]
    if req.min_context is not None:
        parts.append(f"a context of at least {req.min_context}")
    return " and ".join(parts)


def _avoided(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    hit = next((a for a in ctx.profile.avoid if a == b.name or a in b.tags), None)
    return f"avoided by profile {ctx.profile.name} ({hit})" if hit is not None else None


def _all_avoided(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    # The request is fine; the policy excludes every backend that could take it: a server-side problem.
    return Refusal(
        503,
        "no_backend_for_profile",
        f"profile {ctx.profile.name} avoids every backend of pool {ctx.pool} that could serve this request",
    )


def _not_ready(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    if b.starting:
        return "starting (loading the model)"
    return None if b.ready else b.problem or "not ready"


def _none_ready(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    starting = [b.name for b in rejected if b.starting]
    if starting:
        return Refusal(
            503,
            "no_ready_backend",
            f"pool {ctx.pool} has no ready backend for this request yet: {', '.join(starting)} "
            "still loading the model (this can take several minutes); retry shortly",
        )
    names = "; ".join(f"{b.name}: {b.problem}" if b.problem else b.name for b in rejected)
    return Refusal(
        503,
        "no_ready_backend",
        f"no backend of pool {ctx.pool} that can serve this request is ready ({names})",
    )


def _breaker_open(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    if b.stalled:
        return "stalled (its engine made no progress for longer than this work allows)"
    return "circuit breaker open (recent failures)" if b.breaker_open else None


def _all_broken(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    names = ", ".join(b.name for b in rejected)
    return Refusal(
        503,
        "backend_unavailable",
        f"every backend of pool {ctx.pool} that can serve this request is failing ({names}); retry shortly",
    )


def _at_limit(ctx: RouteContext, b: BackendSnapshot) -> str | None:
    if b.max_concurrency is not None and b.inflight >= b.max_concurrency:
        return f"at its concurrency limit ({b.inflight}/{b.max_concurrency})"
    return None


def _all_full(ctx: RouteContext, rejected: Sequence[BackendSnapshot]) -> Refusal:
    return Refusal(
        503,
        "pool_saturated",
        f"every backend of pool {ctx.pool} that can serve this request is at its concurrency limit; "
        "retry shortly",
    )


DEFAULT_FILTERS: tuple[Filter, ...] = (
    Filter("endpoint", _endpoint_unserved, _no_endpoint),
    Filter("modality", _missing_modalities, _no_modality),
    Filter("context", _context_too_small, _no_context),
    Filter("require", _profile_requirement, _no_requirement),
    Filter("avoid", _avoided, _all_avoided),
    Filter("ready", _not_ready, _none_ready, now=True),
    Filter("breaker", _breaker_open, _all_broken, now=True),
    Filter("concurrency", _at_limit, _all_full, now=True),
)
