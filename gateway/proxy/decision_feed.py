"""The recent routing decisions, as sent: a bounded ring the status page (/ui) and GET /gateway/decisions
read.

An entry is made when a request first goes upstream (a dispatch listener, so a decision that was only
explained or refused and never sent is not in it, and routing itself records nothing), and completed when
the request finishes (an observer): the backend that answered (a failover changes it), the measured time
to first token and decode speed beside what the router predicted for the backend it chose. Memory is
bounded by `capacity` entries; a finished record whose entry was already pushed out is ignored.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.proxy.exchange import Job
from gateway.records import Decision, RequestRecord

DEFAULT_CAPACITY = 200


@dataclass(slots=True)
class FeedEntry:
    seq: int  # increasing: a reader asks for what came after the last one it saw
    at: float  # wall-clock epoch seconds when the request was sent upstream
    request_id: str
    api: str  # the client's API: chat, completions, messages, responses
    model: str
    profile: str
    chosen: str  # where the first attempt went
    runner_up: str | None
    reason: str
    predicted: dict[str, float | None] = field(default_factory=dict)  # ttft_s, decode_tps
    backend: str | None = None  # the backend that answered (the x-gateway-backend header), once finished
    measured: dict[str, float | None] = field(default_factory=dict)
    status: int | None = None  # None while in flight
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": round(self.at, 3),
            "request_id": self.request_id,
            "api": self.api,
            "model": self.model,
            "profile": self.profile,
            "chosen": self.chosen,
            "runner_up": self.runner_up,
            "reason": self.reason,
            "predicted": self.predicted,
            "backend": self.backend,
            "measured": self.measured,
            "status": self.status,
            "error": self.error,
        }


class DecisionFeed:
    """A ring of the last `capacity` dispatched decisions, keyed by request id. O(1) per request."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, FeedEntry] = OrderedDict()
        self._seq = 0

    def dispatched(self, job: Job, backend: str) -> None:
        """A dispatch listener: `job` is about to go to `backend` for the first time."""
        self._seq += 1
        ranked = [name for name in job.ranked if name != backend]
        entry = FeedEntry(
            seq=self._seq,
            at=time.time(),
            request_id=job.request_id,
            api=job.endpoint,
            model=str(job.body.get("model", "")),
            profile=job.profile,
            chosen=backend,
            runner_up=ranked[0] if ranked else None,
            reason=reason(job.decision, backend, job.ranked),
            predicted=_predicted(job.decision, backend),
        )
        self._entries.pop(job.request_id, None)  # a client reusing its x-request-id: the newest wins
        self._entries[job.request_id] = entry
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def finished(self, record: RequestRecord) -> None:
        """An observer: the request's outcome, measured."""
        entry = self._entries.get(record.request_id)
        if entry is None:
            return
        entry.backend = record.backend
        entry.status = record.status
        entry.error = record.error
        tpot = record.tpot
        entry.measured = {
            "ttft_s": record.ttft,
            "decode_tps": 1.0 / tpot if tpot else None,
            "e2e_s": record.e2e,
            "output_tokens": record.output_tokens,
        }

    def since(self, seq: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """Entries newer than `seq`, newest first (at most `limit`). An entry finished since a reader's
        last look keeps its seq: a page re-reads the entries it shows, by their request id."""
        newest = [e for e in reversed(self._entries.values()) if e.seq > seq]
        return [e.to_dict() for e in newest[:limit]]

    def __len__(self) -> int:
        return len(self._entries)


def reason(decision: Decision | None, backend: str, ranked: Sequence[str]) -> str:
    """Why the request went to `backend`, from the decision's own words (what explain shows)."""
    if decision is None:
        return "least busy" if ranked and ranked[0] == backend else "failover"
    parts: list[str] = []
    if decision.spill is not None and decision.spill.target == backend:
        parts.append(str(decision.spill))
    plan = decision.exploration
    if plan is not None and plan.backend == backend and not plan.probe:
        parts.append(f"exploring {backend} (under-measured for {plan.profile})")
    if backend not in decision.ranked:
        parts.append("waited for it (out for now when routed: warming, full or breaker open)")
    candidate = next((c for c in decision.candidates if c.backend == backend), None)
    if candidate is not None and candidate.eligible:
        scores = ", ".join(f"{name} {value:.2f}" for name, value in candidate.details.items())
        score = "" if candidate.score is None else f" score {candidate.score:.2f}"
        parts.append(f"{candidate.reason}{score}" + (f" ({scores})" if scores else ""))
    return "; ".join(parts) or "only candidate"


def _predicted(decision: Decision | None, backend: str) -> dict[str, float | None]:
    if decision is None:
        return {}
    ttft, tpot = decision.predicted.get(backend, (None, None))
    if ttft is None and tpot is None:
        return {}
    return {"ttft_s": ttft, "decode_tps": 1.0 / tpot if tpot else None}
