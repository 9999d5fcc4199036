"""Performance parameters of one simulated engine (PerfSpec) and of the accelerator it runs on (DeviceSpec,
Device). Fleet files embed these; gateway/sim/model.py turns them into step times.

Defaults describe Qwen3.6-35B-A3B-FP8 served by vLLM on one DGX Spark (GB10, 273 GB/s LPDDR5x), the
configuration of seed 003, so `PerfSpec()` alone is a plausible engine.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Conditional acceptance of each draft position while the output copies a span of its context (an edit
# rewriting the quoted file, a quoted tool result): lookup and model drafters both get these right.
COPY_ACCEPTANCE = 0.97
# Speculation methods that draft by looking up the context's n-grams instead of running a draft model.
PROMPT_LOOKUP_METHODS = frozenset({"ngram", "suffix", "prompt_lookup"})
# Repetition of the content an n-gram acceptance was measured on when the fleet does not say: published
# n-gram figures come from code editing, summarisation and multi-turn chat, where prompts repeat.
NGRAM_MEASURED_REPETITION = 0.4


class SpecDecodeSpec(BaseModel):
    """Speculative decoding: `k` draft tokens per step, verified in the same forward pass.

    acceptance[i] is vLLM's per-position acceptance rate: the share of drafts whose position i was
    accepted (seed 003, MTP k=2: 0.82, 0.63). Position i can only be accepted after positions < i, so
    the rates do not increase. A step emits the accepted prefix plus one bonus token from the verifier.
    The cost terms are added to the step time of any step that decodes (see `step_seconds`).
    """

    model_config = ConfigDict(extra="forbid")

    method: str = "mtp"  # mtp, ngram, eagle, dflash, ... (reported only; the numbers below carry the cost)
    k: int = Field(default=2, ge=1, le=16)
    acceptance: list[float] = Field(default_factory=lambda: [0.82, 0.63])
    # Sequential draft forwards, seconds each (MTP head: one layer + the shared 248k-vocab lm_head).
    draft_step_s: float = Field(default=0.0025, ge=0.0)
    # Fixed verification cost per step: MTP forces PIECEWISE CUDA graphs instead of FULL (seed 003 boot
    # log), so attention runs outside the graph.
    verify_fixed_s: float = Field(default=0.008, ge=0.0)
    # Verification cost per running sequence (k extra positions through attention and the sampler).
    verify_per_seq_s: float = Field(default=0.0, ge=0.0)
    # Extra cost per prefill token sharing the step: speculative steps interleave badly with prefill
    # chunks (seed 003 test B: TPOT +31 % while TTFT improves).
    verify_per_prefill_token_s: float = Field(default=0.0, ge=0.0)
    # Verification attention runs k+1 query positions over each decoding sequence's whole context.
    verify_per_context_token_s: float = Field(default=5e-7, ge=0.0)
    # Prefill attention sharing a speculative step runs outside CUDA graphs: its cost times (1 + this).
    prefill_attn_penalty: float = Field(default=0.2, ge=0.0)
    # Repetition (gateway/repetition.py) of the content `acceptance` was measured on. None: 0 for
    # model drafters (MTP, EAGLE, DFlash: benchmark prompts are novel text), NGRAM_MEASURED_REPETITION for
    # n-gram lookup, whose published acceptance comes from repetitive workloads (docs/twin.md).
    measured_repetition: float | None = Field(default=None, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _acceptance_covers_k(self) -> SpecDecodeSpec:
        if any(not 0.0 <= p <= 1.0 for p in self.acceptance):
            raise ValueError("acceptance rates must lie in [0, 1]")
        if any(b > a for a, b in itertools.pairwise(self.acceptance)):
            raise ValueError("acceptance rates cannot increase with position")
        if len(self.acceptance) < self.k:
            # Unmeasured positions keep decaying by the last measured ratio (seed 003 guesses ~0.4 at 2).
            rates = list(self.acceptance) or [0.5]
            ratio = rates[-1] / rates[-2] if len(rates) >= 2 and rates[-2] > 0 else 0.75
            while len(rates) < self.k:
                rates.append(rates[-1] * ratio)
            self.acceptance = rates
        return self

    def mean_accepted(self) -> float:
        """Expected accepted drafts per step (vLLM's mean acceptance length minus the bonus token)."""
        return sum(self.acceptance[: self.k])

    @property
    def copies_from_prompt(self) -> bool:
        """N-gram lookup drafts only what the context already holds; a model drafter predicts."""
        return self.method in PROMPT_LOOKUP_METHODS

    def reference_repetition(self) -> float:
        if self.measured_repetition is not None:
            return self.measured_repetition
        return NGRAM_MEASURED_REPETITION if self.copies_from_prompt else 0.0

    def novel_acceptance(self) -> list[float]:
        """Per-position rates on content that repeats nothing: the measured rates with the copying steps
        of the measured content taken out (see acceptance_at)."""
        m = self.reference_repetition()
        rates = [
            max(0.0, (a - m * COPY_ACCEPTANCE ** (i + 1)) / (1.0 - m)) for i, a in enumerate(self.acceptance)
        ]
        # Keep the rates non-increasing (a later position is only reached through the earlier ones).
        for i in range(1, len(rates)):
            rates[i] = min(rates[i], rates[i - 1])
        return rates

    def acceptance_at(self, repetition: float | None) -> tuple[float, list[float]]:
        """(share of steps that copy, per-position rates of the other steps) for a request's content.

        A step either continues a span the context already holds (probability = the request's
        repetition), where every method's drafts are accepted at COPY_ACCEPTANCE per position, or
        writes something new, at the novel rates. None: the configured rates as measured.
        """
        if repetition is None:
            return 0.0, list(self.acceptance)
        return min(max(repetition, 0.0), 1.0), self.novel_acceptance()


class PerfSpec(BaseModel):
    """Everything the step model needs to time one engine.

    Defaults: Qwen3.6-35B-A3B-FP8 on vLLM, one DGX Spark, seed 003's production flags
    (--max-num-seqs 32, --max-num-batched-tokens 16384, fp8 KV cache, 360k-token KV pool).
    """

    model_config = ConfigDict(extra="forbid")

    # Served model. Total parameters decide memory; a decode step reads the dense part (attention,
    # shared expert, lm_head) plus the routed experts its tokens touch.
    params_b: float = Field(default=35.0, gt=0)
    active_params_b: float = Field(default=3.0, gt=0)
    bytes_per_weight: float = Field(default=1.0, gt=0)  # FP8 = 1, NVFP4 ~ 0.56, 4.75-bit ~ 0.6
    experts_total: int = Field(default=256, ge=1)  # 1 for a dense model
    experts_per_token: int = Field(default=8, ge=1)
    # Tokens of one batch share experts more than independent draws would (routing is skewed):
    # distinct draws = tokens ** exponent. 0.85 fits seed 003's decode TPOT at batch 1, 2, 4 and 16.
    routing_batch_exponent: float = Field(default=0.85, gt=0, le=1.0)
    # 10 full-attention layers x 2 KV heads x 256 dims x (K, V) x 1 byte (fp8 KV); the 30 linear
    # attention (GDN) layers keep a fixed per-sequence state instead, costed in per_seq_s.
    kv_bytes_per_token: float = Field(default=10_240, gt=0)
    max_num_seqs: int = Field(default=32, ge=1)
    kv_capacity_tokens: int = Field(default=360_000, ge=1)
    max_num_batched_tokens: int = Field(default=16_384, ge=1)
    # Fixed cost of a step (launches, sampling, scheduler) and per running sequence (GDN state I/O).
    step_fixed_s: float = Field(default=0.00547, ge=0.0)
    per_seq_s: float = Field(default=0.000244, ge=0.0)
    bandwidth_efficiency: float = Field(default=0.8, gt=0, le=1.0)  # achieved / peak LPDDR5x bandwidth
    # Prefill compute: linear throughput plus attention quadratic in context. Seed 003: 16k tokens of 2k
    # prompts take ~2.65 s per step (test C), 16k tokens of 8k prompts ~3.16 s (test B).
    prefill_tokens_per_s: float = Field(default=6_150.0, gt=0)
    prefill_attn_s_per_token_ctx: float = Field(default=9.54e-9, ge=0.0)
    prefill_request_s: float = Field(default=0.0, ge=0.0)  # per new request (first-token machinery)
    speculative: SpecDecodeSpec | None = None
    seed: int = 0  # seeds the per-request acceptance RNG

    @model_validator(mode="after")
    def _consistent(self) -> PerfSpec:
        if self.active_params_b > self.params_b:
            raise ValueError("active_params_b cannot exceed params_b")
        if self.experts_per_token > self.experts_total:
            raise ValueError("experts_per_token cannot exceed experts_total")
        return self

    def split_params_b(self) -> tuple[float, float]:
        """(dense, all routed experts) in billions: dense + E*x = total and dense + k*x = active."""
        e, k = self.experts_total, self.experts_per_token
        if e == k:
            return self.params_b, 0.0
        per_expert = (self.params_b - self.active_params_b) / (e - k)
        return self.active_params_b - k * per_expert, e * per_expert


class DeviceSpec(BaseModel):
    """One physical accelerator (one DGX Spark) that several engines may share."""

    model_config = ConfigDict(extra="forbid")

    memory_bandwidth_gbs: float = Field(default=273.0, gt=0)
    memory_gb: float = Field(default=128.0, gt=0)
    # How much a second busy engine slows the first: 1.0 = bandwidth split evenly (each step twice as
    # long), 0 = no interference. Steps of two engines never align perfectly, so below 1.
    contention: float = Field(default=0.8, ge=0.0)


class Device:
    """A shared accelerator: knows its bandwidth and which engines on it are busy right now."""

    def __init__(self, spec: DeviceSpec | None = None) -> None:
        self.spec = spec or DeviceSpec()
        self._busy: set[int] = set()

    def set_busy(self, engine_id: int, busy: bool) -> None:
        if busy:
            self._busy.add(engine_id)
        else:
            self._busy.discard(engine_id)

    def contention_factor(self, engine_id: int) -> float:
        """Step-time multiplier for `engine_id` given the other engines busy on this device."""
        others = len(self._busy - {engine_id})
        return 1.0 + self.spec.contention * others


@dataclass(frozen=True)
class StepLoad:
    """What one engine step carries: sequences decoding (with the KV tokens they read) and prefill chunks
    as (tokens already in KV, chunk tokens)."""

    decode_seqs: int = 0
    decode_context: int = 0
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    new_requests: int = 0


def step_seconds(perf: PerfSpec, device: DeviceSpec, load: StepLoad) -> float:
    """Duration of one engine step on an otherwise idle device, before contention and slowdown.

    q          = 1 + k under speculation, else 1          positions each decoding sequence runs
    tokens     = decode_seqs * q + prefill tokens         tokens through the weights this step
    touched    = 1 - (1 - k_e/E) ** (tokens ** exponent)   share of routed experts read (MoE)
    t_memory   = (dense + experts * touched) * bytes_per_weight + decode_context * kv_bytes
                 / (bandwidth * efficiency)               weights once per step + KV per sequence
    t_prefill  = sum(chunk / prefill_rate + attn * chunk * (start + chunk / 2))
    t_step     = step_fixed + per_seq * decode_seqs + max(t_memory, t_prefill)   (roofline)
                 + prefill_request * new_requests
    speculative, when anything decodes:
               + k * draft_step + verify_fixed + verify_per_seq * decode_seqs
                 + verify_per_prefill_token * prefill tokens
    """
    spec = perf.speculative
    decoding = load.decode_seqs > 0
    q = 1 + spec.k if spec is not None else 1
    prefill_tokens = sum(n for _, n in load.prefill_chunks)
    tokens = load.decode_seqs * q + prefill_tokens
    dense_b, experts_b = perf.split_params_b()
    draws = tokens**perf.routing_batch_exponent
    touched = 1.0 - (1.0 - perf.experts_per_token / perf.experts_total) ** draws if tokens else 0.0
    weight_bytes = (dense_b + experts_b * touched) * 1e9 * perf.bytes_per_weight
    kv_bytes = load.decode_context * perf.kv_bytes_per_token
    t_memory = (weight_bytes + kv_bytes) / (device.memory_bandwidth_gbs * 1e9 * perf.bandwidth_efficiency)
    attn = perf.prefill_attn_s_per_token_ctx
    if spec is not None and decoding:
        attn *= 1 + spec.prefill_attn_penalty
    t_prefill = sum(
        n / perf.prefill_tokens_per_s + attn * n * (start + n / 2) for start, n in load.prefill_chunks
    )
    seconds = perf.step_fixed_s + perf.per_seq_s * load.decode_seqs + max(t_memory, t_prefill)
    seconds += perf.prefill_request_s * load.new_requests
    if spec is not None and decoding:
        seconds += spec.k * spec.draft_step_s + spec.verify_fixed_s
        seconds += spec.verify_per_seq_s * load.decode_seqs
        seconds += spec.verify_per_prefill_token_s * prefill_tokens
        seconds += spec.verify_per_context_token_s * load.decode_context
    return seconds
