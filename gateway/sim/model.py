"""Engine performance model (PLACEHOLDER BODY: the interface below is the contract the HTTP surfaces use;
the step-based performance model replaces the naive timing here)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.sim.clock import SimClock


@dataclass
class EngineStats:
    """Cumulative counters and live gauges an engine exposes on /metrics (flavor-neutral)."""

    running: int = 0
    waiting: int = 0
    kv_used_tokens: int = 0
    kv_capacity_tokens: int = 1
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished_total: int = 0
    requests_cancelled_total: int = 0
    preemptions_total: int = 0
    spec_drafts_total: int = 0
    spec_draft_tokens_total: int = 0
    spec_accepted_tokens_total: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)


class EngineModel:
    """One simulated engine instance on a device.

    generate() yields, once per engine step that produced output for this request, the number of new
    tokens that step produced (1 normally; up to k+1 with speculative decoding). The first yield is the
    first token (its timing is the TTFT). The sum of yields is exactly min(max_tokens, what the request
    asked for). Closing the iterator early (client went away) cancels the request: the engine frees its
    slot and counts it in stats.requests_cancelled_total.
    """

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.stats = EngineStats()
        self.slowdown = 1.0

    async def generate(self, prompt_tokens: int, max_tokens: int) -> AsyncIterator[int]:
        self.stats.running += 1
        finished = False
        try:
            await self.clock.sleep(prompt_tokens / 5000 * self.slowdown)
            self.stats.prompt_tokens_total += prompt_tokens
            for _ in range(max_tokens):
                await self.clock.sleep(0.02 * self.slowdown)
                self.stats.generation_tokens_total += 1
                yield 1
            finished = True
        finally:
            self.stats.running -= 1
            if finished:
                self.stats.requests_finished_total += 1
            else:
                self.stats.requests_cancelled_total += 1
