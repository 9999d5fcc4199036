"""Plain data the router works on: what a request looks like, what each backend looks like right now,
and what the router decided. No framework objects cross this line, so routing stays pure and testable."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Features:
    """What the classifier and filters know about one request, computed once at ingress."""

    model: str
    endpoint: str  # "chat" | "completions"
    prompt_tokens: int  # estimated
    max_output_tokens: int | None  # max_tokens / max_completion_tokens as sent (None if absent)
    modalities: frozenset[str] = frozenset({"text"})  # subset of {"text","image","video","audio"}
    tools: bool = False
    response_format: str | None = None  # "json_object", "json_schema", ... or None
    stream: bool = False
    temperature: float | None = None
    n: int = 1
    pool_inflight: int = 0  # live concurrency of the model pool at decision time (this request excluded)


@dataclass(frozen=True, slots=True)
class BackendSnapshot:
    """One backend as the router sees it at decision time."""

    name: str
    ready: bool = True
    starting: bool = False  # warming up (connection refused / 503 loading): not dead
    breaker_open: bool = False
    inflight: int = 0  # counted from the moment of dispatch, streams and retries included
    max_concurrency: int | None = None
    context_length: int | None = None  # None: unknown, assume it fits
    modalities: frozenset[str] = frozenset({"text"})
    tags: frozenset[str] = frozenset()


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
class Decision:
    profile: str
    ranked: tuple[str, ...]  # eligible backends best first: the first is tried, the rest are failover
    candidates: tuple[Candidate, ...] = ()
    refusal: Refusal | None = None
