"""What a request would meet, for POST /gateway/explain: the router's decision (its ranking and, when nothing
serves now, its fallback: the backends that could serve once back) followed through the same steps the
completions route (api/openai.py) and dispatch (proxy/dispatch.py) take.

- A backend is ranked now: it is sent there at once.
- The router refused with a 4xx, or with a 503 and nothing worth waiting for: refused at once.
- The pool's queue is full: 429 `queue_full` at once.
- Every backend that could serve it is warming up: it waits up to `queue.warming_wait_s` for the first
  to be ready; served if that one is expected within the wait, else 503 `backends_warming` with the time
  still left as Retry-After (predicted for the end of the wait, as the client will get it).
- Otherwise (a full pool, a breaker cooling down): it waits up to `queue.timeout_s` for a slot, then
  503 `queue_timeout`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.backends.warmup import Warming
from gateway.proxy.admission import Refused, queue_timeout_message
from gateway.proxy.reliability import Reliability, warming_refused

Outcome = dict[str, Any]


class Outlook:
    """Follows an explained decision to what the client would get; reads state, changes nothing."""

    def __init__(self, reliability: Reliability) -> None:
        self.reliability = reliability

    def __call__(self, model: str, explanation: Mapping[str, Any]) -> Outcome:
        chosen = explanation.get("chosen")
        if chosen is not None:
            return _outcome("serve", f"sent to {chosen} at once", backend=chosen)
        refusal = explanation.get("refusal")
        later: Sequence[str] = ()
        if refusal is None or refusal["status"] == 503:
            later = explanation.get("fallback") or ()
        if not later:
            return _refused_now(refusal)
        pool = self._pool_name(model)
        queue = self.reliability.admission.queues().get(pool)
        if queue is not None and queue.waiting >= queue.max_queue:
            retry = self.reliability.admission.config.retry_after_seconds
            full = Refused(429, "queue_full", f"the queue of model '{pool}' is full", retry)
            return _outcome("refuse", "refused at once: the queue is full", refusal=_refusal(full))
        first = self.reliability.warmups.first_ready(later)
        if first is not None:
            return self._warming(pool, first)
        return self._queued(pool, later)

    def _pool_name(self, model: str) -> str:
        pool = self.reliability.warmups.registry.pool(model)
        return pool.model if pool is not None else model

    def _warming(self, pool: str, first: Warming) -> Outcome:
        wait = self.reliability.warming_wait_s
        then = warming_refused(pool, first, ahead_s=wait)
        if first.eta_s <= wait:
            summary = (
                f"waits for {first.backend} to finish warming up (expected in {first.eta_s:.0f} s), then is "
                f"served; if it is not ready within {wait:g} s: 503 {then.code}"
            )
        else:
            summary = (
                f"waits {wait:g} s (every backend that could serve it is warming up), then 503 {then.code}"
            )
        return _outcome(
            "wait",
            summary,
            backend=first.backend,
            waits_for="warm_up",
            wait_s=wait,
            eta_s=round(first.eta_s, 1),
            refusal=_refusal(then),
        )

    def _queued(self, pool: str, later: Sequence[str]) -> Outcome:
        config = self.reliability.admission.config
        wait = config.queue_timeout_seconds
        then = Refused(503, "queue_timeout", queue_timeout_message(pool, wait), config.retry_after_seconds)
        summary = f"waits up to {wait:g} s for a slot on {', '.join(later)}, then 503 {then.code}"
        return _outcome("wait", summary, waits_for="slot", wait_s=wait, refusal=_refusal(then))


def _outcome(
    action: str,
    summary: str,
    *,
    backend: str | None = None,
    waits_for: str | None = None,
    wait_s: float = 0.0,
    eta_s: float | None = None,
    refusal: dict[str, Any] | None = None,
) -> Outcome:
    """action: serve | refuse | wait. `refusal`: what the client gets at once (refuse) or when the wait
    ends without a backend (wait)."""
    return {
        "action": action,
        "summary": summary,
        "backend": backend,
        "waits_for": waits_for,
        "wait_s": wait_s,
        "eta_s": eta_s,
        "refusal": refusal,
    }


def _refused_now(refusal: Mapping[str, Any] | None) -> Outcome:
    if refusal is None:
        return _outcome("refuse", "refused at once: no backend can take it")
    answer = {"status": refusal["status"], "code": refusal["code"], "message": refusal["message"]}
    return _outcome("refuse", f"refused at once: {refusal['status']} {refusal['code']}", refusal=answer)


def _refusal(refused: Refused) -> dict[str, Any]:
    return {
        "status": refused.status,
        "code": refused.code,
        "message": refused.message,
        "retry_after": refused.retry_after,
    }
