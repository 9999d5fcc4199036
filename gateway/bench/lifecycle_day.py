"""The lifecycle benchmark's day: three engines on one Spark (119 GiB) that cannot all be resident (54,
48 and 60 GiB, as deploy/engines.example.yaml, with its warm-ups), and six hours of requests in phases:
one model's morning, a coding session, quiet hours, bursts, and periods where two or three models
interleave. Arrivals are Poisson within each phase, service times log-normal; a seed draws one day."""

from __future__ import annotations

import random
from dataclasses import dataclass

BUDGET_GIB = 119.0


@dataclass(frozen=True)
class EngineSpec:
    name: str  # also the model clients ask for
    memory_gib: float
    cold_start_s: float  # its declared warm-up; each start takes this +-15%
    concurrency: int
    service_s: float  # median service time of one request


ENGINES = (
    EngineSpec("qwen35b", 54, 420, 32, 12.0),
    EngineSpec("coder", 48, 360, 16, 20.0),
    EngineSpec("gemma27b", 60, 480, 16, 10.0),
)

# (minutes, requests per minute for qwen35b, coder, gemma27b): a day's shape, arrivals drawn per round.
DAY = (
    (60, (3.0, 0.0, 0.0)),  # morning chat
    (60, (2.0, 4.0, 0.0)),  # coding session
    (30, (0.2, 0.1, 0.0)),  # quiet
    (60, (0.5, 2.0, 2.0)),  # coding and vision interleaved
    (20, (1.0, 0.0, 10.0)),  # a vision burst
    (40, (0.1, 0.1, 0.1)),  # quiet
    (60, (2.0, 3.0, 1.0)),  # afternoon, all three
    (30, (0.5, 12.0, 0.0)),  # a coding burst
    (40, (1.0, 0.5, 0.5)),  # evening
)


def trace(seed: int) -> list[tuple[float, str, float]]:
    """(arrival s, model, service s), in arrival order, from the start of the day."""
    rng = random.Random(seed)
    out = []
    start = 0.0
    for minutes, rates in DAY:
        end = start + minutes * 60.0
        for spec, rate in zip(ENGINES, rates, strict=True):
            t = start
            while rate > 0:
                t += rng.expovariate(rate / 60.0)
                if t >= end:
                    break
                out.append((t, spec.name, spec.service_s * rng.lognormvariate(0.0, 0.6)))
        start = end
    out.sort()
    return out
