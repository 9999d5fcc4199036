"""How the gateway judges a backend's health: active probes, the circuit breaker, stall detection."""

from __future__ import annotations

from pydantic import Field

from gateway.settings.strict import Strict


class ProbeConfig(Strict):
    interval_s: float = Field(default=5.0, gt=0)
    starting_interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=5.0, gt=0)
    # Engines compile CUDA graphs for 5-8 minutes and refuse connections meanwhile: that is "starting".
    startup_grace_s: float = Field(default=600.0, ge=0)
    # Passive health: a probe timeout is no proof of death for a backend that answered a request this
    # recently, and a serving backend is called dead only after this many probe timeouts in a row.
    passive_window_s: float = Field(default=15.0, ge=0)
    timeouts_to_dead: int = Field(default=3, ge=1)


class BreakerSettings(Strict):
    """Circuit breaker per backend (docs/reliability.md): only transport errors, timeouts and 5xx count."""

    failure_threshold: int = Field(default=5, ge=1, description="consecutive failures that open it")
    window_s: float = Field(default=30.0, gt=0)
    min_window_requests: int = Field(default=20, ge=1)
    failure_rate: float = Field(default=0.5, gt=0, le=1, description="failure share that opens it")
    cooldown_s: float = Field(default=5.0, gt=0)
    max_cooldown_s: float = Field(default=120.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)


class StallSettings(Strict):
    """Hang detection (docs/reliability.md, Stalled backends): a backend whose requests wait far longer
    than their work explains is suspected, and stalled only once the engine's own progress (its streams'
    bytes, its /metrics counters) has stood still too; new requests avoid it and the requests waiting
    there for their first content fail over."""

    enabled: bool = True
    # The floor of the silence allowed, whatever the backend measured so far (a few seconds).
    min_silence_s: float = Field(default=3.0, gt=0)
    # The silence allowed a stream under way is this multiple of the backend's recent p95 inter-token gap
    # (at least the floor).
    multiple: float = Field(default=4.0, ge=1)
    # Before this backend measured its own prefill rate, a prompt of N tokens (estimated at 4 bytes of
    # body per token) is allowed N / this many seconds before its first content, on top of the floor, with
    # the prompts ahead of it added. Conservative on purpose (a GB10 prefills ~6,000 tok/s of a 27B
    # model), so a slower device, a bigger model or a busy host is not taken for a hung one; once
    # measured, half the backend's own median rate replaces it.
    prefill_tokens_per_s: float = Field(default=300.0, gt=0)
    # The same prior for llama.cpp engines, which run on smaller devices and CPUs as often as not.
    llamacpp_prefill_tokens_per_s: float = Field(default=100.0, gt=0)
    # The most prompt tokens an engine prefills in one step (vLLM's max_num_batched_tokens, SGLang's
    # chunked_prefill_size): nothing moves on an engine for the length of such a step.
    step_tokens: int = Field(default=16_384, gt=0)
    # The least silence without progress allowed an engine whose health probes or metrics scrapes were
    # answered within the allowance: its server runs, so it is busy more likely than hung (a CPU-bound
    # prefill, a first batch of a new shape). A stopped process answers nothing and is still found within
    # the allowance; a wedged one, whose server answers, within this bound (~10 s with a scrape's lag).
    answering_silence_s: float = Field(default=7.0, gt=0)
    check_interval_s: float = Field(default=0.25, gt=0, description="how often in-flight work is checked")
