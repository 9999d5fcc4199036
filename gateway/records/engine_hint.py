"""What an engine itself reports about its queue, and how old that report is: a hint the router may use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineHint:
    """One backend's latest engine /metrics figures the router reads, with their age on the reporter's clock.
    Stale data (older than `stale_after_s`) is ignored by the router, explicitly."""

    waiting: float | None  # a queue seen in its two latest reports (backends/scraper.py), not a request
    # caught between arrival and the engine's next step
    running: float | None
    kv_usage: float | None  # 0..1
    age_s: float
    stale_after_s: float

    @property
    def fresh(self) -> bool:
        return self.age_s <= self.stale_after_s
