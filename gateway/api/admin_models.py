"""The gateway's own documents (/health, /ready, /gateway/*), as pydantic models for GET /openapi.json.

Like the OpenAI models, only their schema is used. The fields listed are the ones an operator or a
script can rely on; every object allows more (per-backend detail grows with the engines' flavors).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.api.openai_models import ChatCompletionRequest, CompletionRequest, ErrorDetail, Open


class Health(Open):
    status: Literal["ok"]


class Ready(Open):
    ready: bool = Field(description="every pool has a ready backend")
    pools: dict[str, bool]
    not_ready: dict[str, str] = Field(
        default_factory=dict, description="each backend not ready: its status and why (`unreachable: ...`)"
    )


class BackendState(Open):
    name: str
    url: str
    flavor: str
    status: str = Field(
        description="unknown (not probed yet), starting (warming up), ready, dead, or unreachable (nothing "
        "listens at its URL past its warm-up bound)"
    )
    detail: str | None = None
    unserved_endpoints: list[str] = Field(
        default_factory=list, description="endpoints it answered 'no such route' for, kept from it"
    )
    inflight: int
    max_concurrency: int | None = None
    context_length: int | None = None
    modalities: list[str]
    tags: list[str]
    served_models: list[str]
    breaker: dict[str, Any] | None = None
    slots: dict[str, Any] | None = None
    warming_since: float | None = Field(None, description="epoch seconds it started warming, while warming")
    expected_ready_at: float | None = Field(None, description="epoch seconds it is expected ready")
    eta_s: float | None = Field(None, description="seconds until it is expected ready")
    warmup_expected_s: float | None = Field(None, description="the warm-up time expected of it")
    warmup_source: str | None = Field(None, description="learned, configured or the flavor's default")
    warmup_learned_s: list[float] | None = Field(None, description="its past warm-ups, newest last")


class PoolState(Open):
    model: str
    aliases: list[str]
    backends: list[str]
    ready: bool
    max_model_len: int | None


class BackendsDocument(Open):
    """GET /gateway/backends: readiness, capabilities, breakers, admission slots and wait queues."""

    backends: list[BackendState]
    pools: list[PoolState]
    queues: dict[str, dict[str, int]] | None = Field(None, description="per pool: waiting, max_queue")


class StatsDocument(Open):
    """GET /gateway/stats: live windows per backend x profile and each engine's scraped /metrics view."""

    window: dict[str, Any]
    backends: dict[str, dict[str, dict[str, Any]]] = Field(description="backend -> profile -> summary")
    engines: dict[str, dict[str, Any]] = Field(description="backend -> queue, KV, acceptance, freshness")


class ChatExplainRequest(ChatCompletionRequest):
    endpoint: Literal["chat"] = "chat"


class CompletionExplainRequest(CompletionRequest):
    endpoint: Literal["completions"]


class Explanation(Open):
    """POST /gateway/explain: the decision a request would get, with every reason; nothing is sent."""

    policy: dict[str, Any]
    features: dict[str, Any]
    profile: dict[str, Any]
    scoring: dict[str, Any]
    candidates: list[dict[str, Any]]
    chosen: str | None
    ranked: list[str]
    fallback: list[str] = Field(
        default_factory=list,
        description="backends out for now only (warming up, full, breaker open), best first: what the "
        "request could wait for",
    )
    spill: str | None = Field(
        None, description="set when the first choice was saturated and the request spilled to the next"
    )
    refusal: dict[str, Any] | None
    outcome: dict[str, Any] | None = Field(None, description="served, refused, or a wait and how it ends")


class PolicyInForce(Open):
    source: str
    version: int
    sha256: str
    profiles: list[str]


class ReloadAccepted(Open):
    status: Literal["ok"]
    changed: bool
    policy: PolicyInForce


class ReloadErrorDetail(ErrorDetail):
    errors: list[str] = Field(description="one `file:line: location: message` per problem")


class ReloadRejected(Open):
    """The edit was refused; the policy named here stays in force."""

    error: ReloadErrorDetail
    policy: PolicyInForce
