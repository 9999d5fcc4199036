"""What the HTTP layer of one engine observed, in simulated seconds: latency histograms and per-request
counters that the flavors expose on /metrics next to the model's EngineStats."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

# Bucket bounds as vLLM declares them (v1/metrics/loggers.py); SGLang's are close enough for a twin.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics: bucket i counts observations <= bounds[i])."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as exposition wants them."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self._counts, strict=False):
            running += count
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.count))
        return out


@dataclass
class Observations:
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    finished: Counter[str] = field(default_factory=Counter)  # by finish reason: stop, length, abort, error
    prompt_seconds_total: float = 0.0  # request start -> first token, summed (llama.cpp prompt_seconds)
    predicted_seconds_total: float = 0.0  # first token -> last token, summed
    decode_steps_total: int = 0  # engine steps that produced output (llama.cpp n_decode_total)
    max_tokens_in_request: int = 0  # prompt + output high-water mark (llama.cpp n_tokens_max)
    requests_total: int = 0
    errors_total: int = 0
