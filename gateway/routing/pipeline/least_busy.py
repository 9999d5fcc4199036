"""The interim router: every request is profile "default", the least busy ready backend goes first.

Busy = in-flight / max_concurrency (in-flight alone when no limit is set), so a backend configured for
more concurrency takes proportionally more. Ties keep the pool's order; a saturated first choice (its
engine reports waiting requests, or it runs at its capacity) gives way to the next backend with room
(routing/pipeline/spill.py). A backend at its concurrency limit is left out; when none is left the request is
refused with 503 whose code and message give the true reason: warming up, open circuit breakers,
concurrency limits, or nothing ready at all. The backends out for now only (warming up, breaker open,
full) are the fallback, in pool order (once back, none has anything in flight).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.records import BackendSnapshot, Candidate, Decision, Refusal
from gateway.routing.pipeline.filters import once_back
from gateway.routing.pipeline.spill import spill

PROFILE = "default"


class LeastBusyRouter:
    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        candidates = [_judge(backend) for backend in backends]
        eligible = [c for c in candidates if c.eligible]
        eligible.sort(key=lambda c: -(c.score or 0.0))  # stable: ties keep pool order
        # Least in flight is not least queued: an engine that reports waiting requests (or runs at its
        # capacity) gives way to one with room.
        ranked, spilled = spill([c.backend for c in eligible], {b.name: b for b in backends})
        refusal = None if ranked else _refusal(backends)
        fallback = tuple(
            b.name
            for b, c in zip(backends, candidates, strict=True)
            if not c.eligible and _judge(once_back(b)).eligible
        )
        return Decision(PROFILE, ranked, tuple(candidates), refusal, fallback=fallback, spill=spilled)


def _judge(backend: BackendSnapshot) -> Candidate:
    if not backend.ready:
        return Candidate(
            backend.name, False, "starting" if backend.starting else backend.problem or "not ready"
        )
    if backend.breaker_open or backend.stalled:
        return Candidate(backend.name, False, "breaker open" if backend.breaker_open else "stalled")
    limit = backend.max_concurrency
    if limit is not None and backend.inflight >= limit:
        return Candidate(backend.name, False, f"at its concurrency limit ({limit})")
    load = backend.inflight / limit if limit else float(backend.inflight)
    # score = 1 / (1 + load): 1.0 when idle, falling as load grows; only the order matters.
    return Candidate(backend.name, True, f"{backend.inflight} in flight", 1.0 / (1.0 + load))


def _refusal(backends: Sequence[BackendSnapshot]) -> Refusal:
    if any(b.starting for b in backends):
        return Refusal(
            503, "no_ready_backend", "every backend of this model is still starting; retry shortly"
        )
    ready = [b for b in backends if b.ready]
    if not ready:
        why = "; ".join(f"{b.name}: {b.problem}" for b in backends if b.problem)
        return Refusal(
            503, "no_ready_backend", "no backend of this model is ready" + (f" ({why})" if why else "")
        )
    broken = [b for b in ready if b.breaker_open or b.stalled]
    if len(broken) == len(ready):
        return Refusal(
            503, "backend_unavailable", "every ready backend of this model is failing (circuit breaker open)"
        )
    if broken:
        return Refusal(
            503,
            "backends_busy",
            f"{len(ready) - len(broken)} backend(s) of this model at their concurrency limit, "
            f"{len(broken)} failing (circuit breaker open)",
        )
    return Refusal(503, "backends_busy", "every backend of this model is at its concurrency limit")
