"""State per backend (status, in-flight count, capabilities) and the model pools that group them.

The registry is the single owner of this state: the prober writes status and capabilities, dispatch
counts in-flight requests, and the router reads plain snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.routing.types import BackendSnapshot
from gateway.settings import BackendConfig, PoolConfig, Settings


class Status(StrEnum):
    UNKNOWN = "unknown"  # not probed yet
    STARTING = "starting"  # warming up (connection refused or 503 loading within the startup grace)
    READY = "ready"
    DEAD = "dead"


@dataclass
class BackendState:
    config: BackendConfig
    status: Status = Status.UNKNOWN
    since: float = 0.0  # clock time of the last status change
    ever_ready: bool = False
    inflight: int = 0
    detail: str = ""
    discovered_context: int | None = None
    discovered_modalities: frozenset[str] | None = None
    served_models: tuple[str, ...] = field(default_factory=tuple)

    @property
    def context_length(self) -> int | None:
        return self.config.context_length or self.discovered_context

    @property
    def modalities(self) -> frozenset[str]:
        declared = self.config.modalities
        return declared or self.discovered_modalities or frozenset({"text"})

    def snapshot(self, breaker_open: bool = False) -> BackendSnapshot:
        return BackendSnapshot(
            name=self.config.name,
            ready=self.status is Status.READY,
            starting=self.status in (Status.STARTING, Status.UNKNOWN),
            breaker_open=breaker_open,
            inflight=self.inflight,
            max_concurrency=self.config.max_concurrency,
            context_length=self.context_length,
            modalities=self.modalities,
            tags=self.config.tags,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "url": self.config.url,
            "flavor": self.config.flavor,
            "status": str(self.status),
            "detail": self.detail,
            "inflight": self.inflight,
            "max_concurrency": self.config.max_concurrency,
            "context_length": self.context_length,
            "modalities": sorted(self.modalities),
            "tags": sorted(self.config.tags),
            "served_models": list(self.served_models),
        }


class Registry:
    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.backends = {b.name: BackendState(b, since=clock()) for b in settings.backends}
        self.pools = settings.pools
        self._by_model = {name: pool for pool in settings.pools for name in (pool.model, *pool.aliases)}
        # Whoever follows readiness (admission slots) and the breakers' verdict, set by the composition root.
        self.listeners: list[Callable[[str, Status], None]] = []
        self.breaker_open: Callable[[str], bool] = lambda name: False

    def pool(self, model: str) -> PoolConfig | None:
        return self._by_model.get(model)

    def model_names(self) -> list[str]:
        return [pool.model for pool in self.pools]

    def snapshots(self, pool: PoolConfig) -> list[BackendSnapshot]:
        return [self.backends[name].snapshot(self.breaker_open(name)) for name in pool.backends]

    def acquire(self, name: str) -> None:
        self.backends[name].inflight += 1

    def release(self, name: str) -> None:
        self.backends[name].inflight -= 1

    def set_status(self, name: str, status: Status, detail: str = "") -> bool:
        """Record a probe verdict; True if the status changed."""
        state = self.backends[name]
        state.detail = detail
        if state.status is status:
            return False
        state.status, state.since = status, self.clock()
        state.ever_ready = state.ever_ready or status is Status.READY
        for listener in self.listeners:
            listener(name, status)
        return True

    def pool_ready(self, pool: PoolConfig) -> bool:
        return any(self.backends[name].status is Status.READY for name in pool.backends)

    def max_context(self, pool: PoolConfig) -> int | None:
        lengths = [self.backends[n].context_length for n in pool.backends]
        known = [n for n in lengths if n is not None]
        return max(known) if known else None
