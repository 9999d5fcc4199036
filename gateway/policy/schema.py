"""The policy file's shape, as pydantic models. The same models validate a loaded YAML file and export the
JSON Schema that `spark-gateway schema` prints, so editors and the gateway agree on one definition.

Every model forbids unknown fields: a misspelt condition (`prompt_token:`) must fail loudly instead of
silently matching everything.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.records.endpoints import ENDPOINTS, Endpoint

# Successful samples a cell needs before the router trusts its prediction. Five points leave a fit of
# three coefficients (a, b, g) degrees of freedom to spare and let the regime check (CHANGE_RUN) compare a
# run against a fit; every profile's exploration costs at most this many requests per backend per window.
# The default of `adaptive.min_samples` below, which is what a running gateway uses.
MIN_SAMPLES = 5
# Exploration never takes more than half of a profile's traffic, whatever the policy says: the other half
# goes to the predicted best, so the cost of measuring stays bounded.
MAX_EPSILON = 0.5

RoutingMode = Literal["static", "adaptive"]
Objective = Literal["ttft", "tokens_per_second", "e2e"]
Modality = Literal["text", "image", "video", "audio"]
Number = float  # one type, so a bad value yields one error, not one per union member

# Profile names become Prometheus label values and explain keys: keep them short and plain.
ProfileName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NumberCondition(_Strict):
    """Comparisons on a numeric feature; every given bound must hold (`{gte: 2, lt: 16}` is a range)."""

    gt: Number | None = None
    gte: Number | None = None
    lt: Number | None = None
    lte: Number | None = None
    eq: Number | None = None

    @model_validator(mode="after")
    def _needs_a_bound(self) -> NumberCondition:
        if all(getattr(self, op) is None for op in ("gt", "gte", "lt", "lte", "eq")):
            raise ValueError("give at least one of gt, gte, lt, lte, eq")
        return self


class SetCondition(_Strict):
    """Conditions on the request's modalities (a set such as {text, image})."""

    contains: Modality | list[Modality] | None = Field(default=None, description="all of these are present")
    contains_any: list[Modality] | None = Field(default=None, description="at least one of these is present")
    excludes: Modality | list[Modality] | None = Field(default=None, description="none of these is present")
    in_: list[Modality] | None = Field(default=None, alias="in", description="every modality is one of these")

    @model_validator(mode="after")
    def _needs_a_test(self) -> SetCondition:
        if all(v is None for v in (self.contains, self.contains_any, self.excludes, self.in_)):
            raise ValueError("give at least one of contains, contains_any, excludes, in")
        return self


class StringCondition(_Strict):
    """Membership tests on a string feature (model, endpoint, response_format)."""

    in_: list[str] | None = Field(default=None, alias="in", description="the value is one of these")
    not_in: list[str] | None = Field(default=None, description="the value is none of these")

    @model_validator(mode="after")
    def _needs_a_test(self) -> StringCondition:
        if self.in_ is None and self.not_in is None:
            raise ValueError("give in or not_in")
        return self


class When(_Strict):
    """Conditions over the request's features. All given conditions must hold."""

    prompt_tokens: NumberCondition | None = Field(default=None, description="estimated prompt tokens")
    max_output_tokens: NumberCondition | None = Field(
        default=None, description="max_tokens / max_completion_tokens; a request without one never matches"
    )
    total_tokens: NumberCondition | None = Field(
        default=None, description="estimated prompt tokens + requested output tokens (or the default)"
    )
    pool_inflight: NumberCondition | None = Field(
        default=None, description="requests in flight in the model pool, this one excluded"
    )
    temperature: NumberCondition | None = Field(
        default=None, description="a request without one never matches"
    )
    repetition: NumberCondition | None = Field(
        default=None,
        description="share (0..1) of the prompt's word 4-grams that occur more than once: high for edits, "
        "code and quoted tool results (speculation pays), ~0 for novel prose",
    )
    n: NumberCondition | None = None
    modalities: SetCondition | None = None
    model: StringCondition | None = Field(default=None, description="the model name the client sent")
    # A list is turned into `in:` on loading (below); listed here so the printed schema accepts it.
    endpoint: StringCondition | list[Endpoint] | None = Field(
        default=None,
        description="the API: chat, completions, messages, count_tokens, responses, embeddings, rerank, "
        "tokenize, detokenize; a plain list is short for `in:`",
    )
    response_format: StringCondition | None = Field(
        default=None, description="json_object, json_schema, text; a request without one has 'none'"
    )
    tools: bool | None = Field(default=None, description="the request carries tool definitions")
    stream: bool | None = None

    @field_validator("endpoint", mode="before")
    @classmethod
    def _endpoint_names(cls, value: Any) -> Any:
        """`endpoint: [messages, responses]` means `in:` those; a misspelt API name fails loudly."""
        if isinstance(value, list | str):
            value = {"in": [value] if isinstance(value, str) else value}
        if isinstance(value, dict):
            named = [v for key in ("in", "not_in") for v in value.get(key) or () if isinstance(v, str)]
            unknown = sorted(set(named) - set(ENDPOINTS))
            if unknown:
                raise ValueError(f"unknown endpoint {', '.join(unknown)}; known: {', '.join(ENDPOINTS)}")
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> When:
        if not self.model_fields_set:
            raise ValueError("an empty `when` matches everything: remove it, or name the profile default")
        return self


class Require(_Strict):
    """Capabilities a backend must have to serve this profile (hard filters)."""

    modalities: list[Modality] = Field(default_factory=list, description="e.g. [image]")
    vision: bool = Field(default=False, description="shorthand for modalities: [image]")
    min_context: int | None = Field(default=None, gt=0, description="context_length at least this")

    def needed_modalities(self) -> frozenset[str]:
        return frozenset(self.modalities) | ({"image"} if self.vision else set())


class Weights(_Strict):
    """How much each scorer counts in the weighted sum (each score lies in [0, 1])."""

    preference: float = Field(default=1.0, ge=0)
    load: float = Field(default=0.3, ge=0)
    objective: float = Field(default=1.0, ge=0, description="the predicted objective, adaptive routing only")


class Adaptive(_Strict):
    """Adaptive routing's knobs (docs/measurement.md, sections 5 to 7): how much evidence a prediction
    needs, how much traffic measuring may take, and how decisive a measured gap is. Read per request, so
    an edit applies to the next one."""

    min_samples: int = Field(
        default=MIN_SAMPLES,
        ge=1,
        description="successful samples a backend x profile cell needs before its prediction counts; "
        "exploration measures every cell up to this, so it is also the most exploration costs per cell "
        "per window",
    )
    # 0.25: every fourth request of a profile while some cell is short of min_samples, so a cell is
    # measured within min_samples / 0.25 = 20 requests of its profile.
    explore_epsilon: float = Field(
        default=0.25,
        ge=0,
        le=MAX_EPSILON,
        description=f"share of a profile's requests sent, evenly spaced, to a backend still under "
        f"min_samples (0: never; at most {MAX_EPSILON:g}, the rest go to the predicted best; an idle backend "
        f"on a device of its own while the winner is busy, at {MAX_EPSILON:g})",
    )
    # 0.25: seed 003's differences between engine configs are 5-56 %; a gap of a quarter is a clear
    # winner, and a 5 % gap (noise on a busy box) moves a score by 0.15 instead of flipping the decision.
    tolerance: float = Field(
        default=0.25,
        gt=0,
        description="relative gap between two predictions that takes the whole score range; smaller "
        "gaps move scores proportionally, so noise does not flip decisions",
    )
    # 0.2: an exploration that would slow n busy requests of its device accrues credit at 0.2 / n of the
    # usual rate, so one deferred exploration costs about what waking an engine next to one request
    # does, at any load (docs/measurement.md, section 6).
    contended_share: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="on a shared device, the share of exploration kept per busy request it would slow "
        "(0: explore only on a quiet device or an engine busy anyway)",
    )
    # 40: a cell's estimate is refreshed after at most 40 requests of its profile went elsewhere, about
    # 2.5 % of the profile's traffic per other backend; a cell not yet measured gets its min_samples
    # requests once that many of its profile have gone by (beside a busy engine of its device, once
    # twice that many have, unless a quiet moment comes first), however busy its device is.
    refresh_requests: int = Field(
        default=40,
        ge=1,
        description="the most requests of a profile a backend's estimate may age (requests sent elsewhere "
        "since it was last measured) before one is sent to refresh it; beside a busy engine of its device it "
        "waits for a quiet moment up to twice this, then goes whatever the contention",
    )
    # 120 s: slow profiles (a few requests a minute) still refresh every other backend within two minutes.
    refresh_s: float = Field(
        default=120.0,
        gt=0,
        description="the most seconds a backend's estimate for a profile may age before a refresh is due",
    )


class Profile(_Strict):
    """A named workload class and what it wants from the pool."""

    name: ProfileName
    description: str | None = None
    when: When | None = Field(default=None, description="absent only on the default profile")
    prefer: list[str] = Field(default_factory=list, description="backend names or tags, best first")
    require: Require = Field(default_factory=Require)
    avoid: list[str] = Field(default_factory=list, description="backend names or tags never used")
    objective: Objective = Field(default="e2e", description="what adaptive routing minimises or maximises")
    routing: RoutingMode | None = Field(default=None, description="overrides the policy's routing mode")
    spill: bool = Field(
        default=True,
        description="when the best-ranked backend is saturated (requests waiting in its engine, or its "
        "capacity in flight), send the request to the next one with room; false keeps the ranking",
    )


class Policy(_Strict):
    """A routing policy: the first profile whose `when` holds classifies the request."""

    version: Literal[1]
    description: str | None = None
    routing: RoutingMode = "static"
    weights: Weights = Field(default_factory=Weights)
    adaptive: Adaptive = Field(default_factory=Adaptive, description="knobs of adaptive routing")
    profiles: list[Profile] = Field(min_length=1)

    @field_validator("profiles")
    @classmethod
    def _default_profile_last(cls, profiles: list[Profile]) -> list[Profile]:
        names = [p.name for p in profiles]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"profile names must be unique; repeated: {', '.join(duplicates)}")
        if profiles[-1].name != "default" or profiles[-1].when is not None:
            raise ValueError(
                "the last profile must be named default and have no `when` (it catches the rest)"
            )
        unreachable = [p.name for p in profiles[:-1] if p.when is None]
        if unreachable:
            raise ValueError(
                f"only the default profile may omit `when`; add conditions to: {', '.join(unreachable)}"
            )
        return profiles

    def profile(self, name: str) -> Profile:
        return next(p for p in self.profiles if p.name == name)

    def routing_for(self, profile: Profile) -> RoutingMode:
        return profile.routing or self.routing


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file, as `spark-gateway schema` prints it."""
    schema = Policy.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "spark-gateway policy"
    return schema
