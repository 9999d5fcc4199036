"""The explanation of one routing decision as a JSON-able dict (POST /gateway/explain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.records import Decision, Features
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.request.features import needed_tokens

if TYPE_CHECKING:  # only for annotations: keeps routing importable without the policy loader
    from gateway.policy.classify import Classification
    from gateway.policy.load import LoadedPolicy


def build_explanation(
    features: Features,
    classification: Classification,
    ctx: RouteContext,
    decision: Decision,
    *,
    scorers: Mapping[str, float],
    policy: LoadedPolicy,
    last_error: str | None,
    routing_note: str,
) -> dict[str, Any]:
    refusal = decision.refusal
    return {
        "policy": {
            "source": policy.source,
            "sha256": policy.sha256,
            "version": policy.policy.version,
            "last_reload_error": last_error,
        },
        "features": _features(features),
        "profile": {
            "name": classification.profile.name,
            "why": classification.why,
            "skipped": [{"profile": name, "because": why} for name, why in classification.skipped],
            "objective": ctx.profile.objective,
            "routing": ctx.routing,
        },
        "scoring": {"note": routing_note, "weights": dict(scorers)},
        "candidates": [
            {
                "backend": c.backend,
                "eligible": c.eligible,
                "reason": c.reason,
                "score": c.score,
                "scores": dict(c.details),
            }
            for c in decision.candidates
        ],
        "ranked": list(decision.ranked),
        "chosen": decision.ranked[0] if decision.ranked else None,
        # "spilled from X (saturated: 12 in flight, capacity 8) to Y" when overload moved the first choice.
        "spill": None if decision.spill is None else str(decision.spill),
        # Out for now only (warming up, full, breaker open), best first: what the request could wait for.
        "fallback": list(decision.fallback),
        "refusal": None
        if refusal is None
        else {"status": refusal.status, "code": refusal.code, "message": refusal.message},
    }


def _features(f: Features) -> dict[str, Any]:
    return {
        "model": f.model,
        "endpoint": f.endpoint,
        "prompt_tokens": f.prompt_tokens,
        "max_output_tokens": f.max_output_tokens,
        "total_tokens": needed_tokens(f),
        "modalities": sorted(f.modalities),
        "tools": f.tools,
        "response_format": f.response_format,
        "stream": f.stream,
        "temperature": f.temperature,
        "n": f.n,
        "pool_inflight": f.pool_inflight,
    }
