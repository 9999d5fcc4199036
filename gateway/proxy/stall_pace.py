"""What the hang watch (proxy/stall.py) knows of one backend's pace: its inter-token gaps, its prefill
rate, when it last made progress, and how long its work in flight may keep it silent.

Progress is anything that shows the engine computes: a content frame or a whole answer from any of its
requests, or its own /metrics counters of prompt and generation tokens, steps or KV use moving between
two scrapes (backends/engine_metrics.py: `progressed`). An answered health probe is no progress: an
engine's HTTP server answers while the engine behind it is wedged.

The allowances, in seconds:

- floor: `min_silence_s`, or `multiple` x the backend's p95 inter-token gap when that is longer.
- first content of one request: floor + (its prompt + the prompts waiting ahead of it on the same
  backend) / prefill rate. The prefill rate is the flavor's conservative prior until the backend has
  samples of its own (the prompt tokens waiting there when a stream was sent, its own included, / its
  first-token time; only from streams with long prompts), then their median at half speed: a
  slow engine is given its own pace, a fast one is not given a prior's minutes to find it wedged behind
  a long prompt.
- no progress at all: floor + one engine step of the prompts waiting there (at most `step_tokens`, an
  engine's per-step token budget) / prefill rate: nothing moves on an engine during one step, however
  long its queue, but every step ends with something counted.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from gateway.settings import StallSettings

BYTES_PER_TOKEN = 4  # a prompt's size in tokens, roughly, from its body's bytes
_ITL_SAMPLES = 256  # recent inter-token gaps kept per backend
_ITL_PER_STREAM = 32  # the newest gaps taken from one finished stream
_RATE_SAMPLES = 32  # recent prefill-rate samples kept per backend
_RATE_MIN_SAMPLES = 3  # before this many, the flavor's prior alone
# Prompts shorter than this say more of the queue and the step overhead than of the prefill rate.
_RATE_MIN_PROMPT = 512
# A measured rate is allowed to halve. Its samples already err slow: a first-token time holds decode
# steps and the prompts batched with it that came after it.
_MEASURED_MARGIN = 2.0


@dataclass(eq=False, slots=True)
class Pace:
    """One backend's measured pace and last progress (clock: the watch's)."""

    prior_rate: float  # the flavor's conservative prefill rate, tokens/s
    itl: deque[float] = field(default_factory=lambda: deque(maxlen=_ITL_SAMPLES))
    rates: deque[float] = field(default_factory=lambda: deque(maxlen=_RATE_SAMPLES))
    progress_at: float = float("-inf")  # the last progress of any kind
    counters_at: float = float("-inf")  # the last /metrics scrape that read progress counters

    def measured(self, prompt_tokens: int, ttft_s: float, gaps: list[float]) -> None:
        """A finished stream's first-token time (for `prompt_tokens` prefilled before it: its own and
        those ahead) and inter-token gaps."""
        self.itl.extend(gaps[-_ITL_PER_STREAM:])
        if prompt_tokens >= _RATE_MIN_PROMPT and ttft_s > 0:
            self.rates.append(prompt_tokens / ttft_s)

    def rate(self, config: StallSettings) -> float:
        """Prefill tokens per second to allow for: the flavor's prior until measured, then the measured
        median at half speed (the device may be busier now than when it was measured)."""
        if len(self.rates) < _RATE_MIN_SAMPLES:
            return self.prior_rate
        return statistics.median(self.rates) / _MEASURED_MARGIN

    def floor(self, config: StallSettings) -> float:
        return max(config.min_silence_s, config.multiple * _p95(self.itl))

    def first_content(self, config: StallSettings, prompt_tokens: int) -> float:
        """Allowed wait for the first content of a request whose prompt, with those ahead, is so long."""
        return self.floor(config) + prompt_tokens / self.rate(config)

    def no_progress(self, config: StallSettings, waiting_tokens: int) -> float:
        """Allowed time without any progress while `waiting_tokens` of prompts wait for their prefill."""
        return self.floor(config) + min(waiting_tokens, config.step_tokens) / self.rate(config)


def prior_rate(config: StallSettings, flavor: str) -> float:
    if flavor == "llamacpp":
        return config.llamacpp_prefill_tokens_per_s
    return config.prefill_tokens_per_s


def _p95(samples: deque[float]) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[int(0.95 * (len(ordered) - 1))]
