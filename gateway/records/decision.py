"""What the router decided for one request: the ranking, every candidate's fate, or a refusal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Candidate:
    """One backend's fate in a decision: filtered out (with why) or scored."""

    backend: str
    eligible: bool
    reason: str = ""  # why filtered, or a short why-this-score
    score: float | None = None
    details: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refusal:
    """No backend of the pool can serve this request: an OpenAI-style client error."""

    status: int  # 400 for capability/context, 503 when only starting backends could serve
    code: str  # e.g. "context_length_exceeded", "unsupported_modality", "no_ready_backend"
    message: str  # names the limit, e.g. the largest context available


@dataclass(frozen=True, slots=True)
class ExplorationPlan:
    """What this request would do to its profile's exploration state: computed while scoring, applied only
    when the dispatcher sends the request (scoring changes nothing, so explain and a fallback cost nothing).

    `accrued` is the credit this request adds; `backend`, when set, is the under-measured backend the request
    explores, which spends one credit and books one exploration if the request is sent there (sent elsewhere,
    it spends nothing). `probes`: `backend` is measured by that many decode probes (proxy/decode_probe.py)
    instead, sent together when the request is, wherever the request goes; `measures_cell` False: they tell
    the engine's decode speed and not the profile's cell, which they neither age nor count as explored
    (probes.probe_measures). `drop`: nothing is left to measure for the profile, so its credit is dropped
    instead of carried into the next gap."""

    profile: str
    accrued: float = 0.0
    backend: str | None = None
    drop: bool = False
    probes: int = 0
    measures_cell: bool = True

    @property
    def probe(self) -> bool:
        return self.probes > 0


@dataclass(frozen=True, slots=True)
class Spill:
    """The ranking's first backend was saturated, so a backend with room (or, all saturated, a shorter
    queue) was moved ahead of it."""

    source: str  # the backend the ranking put first
    target: str  # the backend that takes the request instead
    why: str  # the saturation, e.g. "12 in flight, capacity 8"

    def __str__(self) -> str:
        return f"spilled from {self.source} (saturated: {self.why}) to {self.target}"


@dataclass(frozen=True, slots=True)
class Decision:
    profile: str
    ranked: tuple[str, ...]  # eligible backends best first: the first is tried, the rest are failover
    candidates: tuple[Candidate, ...] = ()
    refusal: Refusal | None = None
    # Backends out for now only (warming up, at their concurrency limit, breaker open) that could serve the
    # request once back, best first: what it may wait for when nothing serves now or every attempt failed.
    fallback: tuple[str, ...] = ()
    exploration: ExplorationPlan | None = None  # booked by the dispatcher when it sends the request
    spill: Spill | None = None  # set when saturation reordered the ranking
    prompt_tokens: int = 0  # the request's estimated prompt tokens (0: not estimated)
    # What the objective scorer predicted per backend: (TTFT s, TPOT s), either None when not predicted.
    # Read only after the decision (the decision feed shows it beside what was measured).
    predicted: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
