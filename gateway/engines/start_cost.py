"""Whether a request should start a stopped engine, weighed against the running backends: pure, on the
router's decisions.

A stopped engine that could serve the request is a candidate whose predicted time is its warm-up left
(its measured cold starts). The request is served on a running backend unless waiting for the stopped
one wins: no running backend can serve the request at all (its context is too small, it has no vision,
...: the decision without the engine ranks nothing), or the first running backend's queue would take
longer than the start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.records import BackendSnapshot, Decision


@dataclass(frozen=True, slots=True)
class StartChoice:
    """The engine to start for this request (None: none), and why it was chosen or declined."""

    start: str | None
    why: str
    considered: tuple[str, ...] = ()  # the stopped engines that could serve the request

    def as_json(self) -> dict[str, object]:
        return {"start": self.start, "why": self.why, "considered": list(self.considered)}


def queue_wait_s(backend: BackendSnapshot, per_request_s: float | None) -> float | None:
    """How long a request sent to `backend` now waits before it runs: the requests ahead of it beyond
    its concurrency (the gateway's count, plus what the engine reports waiting), each taking
    `per_request_s` on one of its `capacity` slots. None when the time per request is unknown."""
    capacity = backend.max_concurrency or backend.engine_capacity or 1
    ahead = max(0, backend.inflight + 1 - capacity) + (backend.engine_waiting or 0.0)
    if ahead <= 0:
        return 0.0
    if per_request_s is None:
        return None
    return ahead * per_request_s / capacity


def choose(
    now: Decision,
    if_started: Decision,
    backends: Mapping[str, BackendSnapshot],
    warmup_left_s: Mapping[str, float],
    per_request_s: Callable[[str], float | None],
) -> StartChoice:
    """`now`: the decision with the stopped engines out; `if_started`: with them shown ready, to learn
    which could serve the request; `warmup_left_s`: each stopped engine's expected warm-up."""
    order = {name: i for i, name in enumerate(if_started.ranked)}
    able = sorted(
        (c.backend for c in if_started.candidates if c.eligible and c.backend in warmup_left_s),
        key=lambda name: (warmup_left_s[name], order.get(name, len(order))),
    )
    if not able:
        return StartChoice(None, "start declined: no stopped engine can serve this request")
    best, considered = able[0], tuple(able)
    left = warmup_left_s[best]
    running = now.ranked[0] if now.ranked else _ready_fallback(now, backends)
    if running is None:
        why = _why_not(now, backends)
        return StartChoice(
            best,
            f"start chosen: {best} (ready in ~{left:.0f}s); no running backend can serve: {why}",
            considered,
        )
    wait = queue_wait_s(backends[running], per_request_s(running))
    if wait is not None and wait > left:
        return StartChoice(
            best,
            f"start chosen: {best} (ready in ~{left:.0f}s); {running}'s queue would take ~{wait:.0f}s",
            considered,
        )
    queue = "unknown time per request" if wait is None else f"queue ~{wait:.0f}s"
    return StartChoice(
        None,
        f"start declined: {running} serves now ({queue}), {best} would take ~{left:.0f}s to start",
        considered,
    )


def _ready_fallback(decision: Decision, backends: Mapping[str, BackendSnapshot]) -> str | None:
    """A ready backend the request would wait a slot for (full now), if the decision falls back to one."""
    for name in decision.fallback:
        snap = backends.get(name)
        if snap is not None and snap.ready:
            return name
    return None


def _why_not(decision: Decision, backends: Mapping[str, BackendSnapshot]) -> str:
    """Why the ready backends cannot take the request (their filters' reasons), else the refusal."""
    reasons = [
        f"{c.backend}: {c.reason}"
        for c in decision.candidates
        if not c.eligible and c.backend in backends and backends[c.backend].ready
    ]
    if reasons:
        return "; ".join(reasons)
    return decision.refusal.message if decision.refusal is not None else "none is ready"
