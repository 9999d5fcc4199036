"""Recent demand per engine: a request count decaying with a five-minute time constant, read as
requests per minute. Constant memory per engine, whatever the traffic."""

from __future__ import annotations

import math

TAU_S = 300.0


class Demand:
    __slots__ = ("_value", "_at")

    def __init__(self) -> None:
        self._value = 0.0
        self._at = 0.0

    def add(self, now: float) -> None:
        self._value = self._decayed(now) + 1.0
        self._at = now

    def per_minute(self, now: float) -> float:
        return self._decayed(now) / TAU_S * 60.0

    def _decayed(self, now: float) -> float:
        return self._value * math.exp(-max(0.0, now - self._at) / TAU_S)
