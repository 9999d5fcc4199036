"""Simulated time. The twin runs `time_scale` times faster than the wall clock, so a 10-minute warm-up
or a 512-token decode at 50 tok/s takes seconds in tests; every report converts back to simulated time.
Its real seconds are gateway/clock.py's: on a loop that keeps simulated time itself
(bench/virtual_time.py), the twin at time scale 1 keeps that loop's time."""

from __future__ import annotations

import asyncio

from gateway.clock import monotonic


class SimClock:
    """Maps real time (gateway/clock.py) onto simulated time: one second is `time_scale` simulated ones."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale
        self._origin = monotonic()

    def now(self) -> float:
        """Simulated seconds since the clock was made."""
        return (monotonic() - self._origin) * self.time_scale

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(max(0.0, sim_seconds) / self.time_scale)
