"""State per backend (status, in-flight count, capabilities) and the model pools that group them.

The registry is the single owner of this state: the prober writes status and capabilities, dispatch
reports answered requests (passive health), and the router reads plain snapshots. The in-flight count
is `Registry.inflight` (backends/inflight.py), the one count admission slots and dispatch accounting
take and give back; `BackendState.inflight` reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.backends.inflight import InFlight
from gateway.records import BackendSnapshot
from gateway.redact import without_credentials
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
    detail: str = ""
    discovered_context: int | None = None
    discovered_modalities: frozenset[str] | None = None
    served_models: tuple[str, ...] = field(default_factory=tuple)
    last_success: float | None = None  # clock time of the last request it answered successfully
    load: InFlight = field(default_factory=InFlight, repr=False, compare=False)  # the registry's count

    @property
    def inflight(self) -> int:
        return self.load[self.config.name]

    @property
    def context_length(self) -> int | None:
        return self.config.context_length or self.discovered_context

    @property
    def modalities(self) -> frozenset[str]:
        declared = self.config.modalities
        return declared or self.discovered_modalities or frozenset({"text"})

    def snapshot(self, breaker_open: bool = False, restarting: bool = False) -> BackendSnapshot:
        return BackendSnapshot(
            name=self.config.name,
            ready=self.status is Status.READY,
            # A restarting backend is warming up again: worth waiting for, like one starting.
            starting=restarting or self.status in (Status.STARTING, Status.UNKNOWN),
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
            "url": without_credentials(self.config.url),  # credentials are the engine's business only
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
        self.inflight = InFlight()
        self.backends = {
            b.name: BackendState(b, since=clock(), load=self.inflight) for b in settings.backends
        }
        self.pools = settings.pools
        self.startup_grace_s = settings.probe.startup_grace_s
        self._by_model = {name: pool for pool in settings.pools for name in (pool.model, *pool.aliases)}
        # Whoever follows readiness (admission slots) and the breakers' verdict, set by the composition root.
        self.listeners: list[Callable[[str, Status], None]] = []
        self.breaker_open: Callable[[str], bool] = lambda name: False

    def pool(self, model: str) -> PoolConfig | None:
        return self._by_model.get(model)

    def model_names(self) -> list[str]:
        return [pool.model for pool in self.pools]

    def snapshots(self, pool: PoolConfig) -> list[BackendSnapshot]:
        return [
            self.backends[name].snapshot(self.breaker_open(name), self.may_come_back(name))
            for name in pool.backends
        ]

    def acquire(self, name: str) -> None:
        self.inflight.add(name)

    def release(self, name: str) -> None:
        self.inflight.remove(name)

    def note_success(self, name: str) -> None:
        """Passive health: the backend just answered a request. A backend that serves is alive, so a
        verdict of death from probes that timed out under load is taken back at once."""
        state = self.backends[name]
        state.last_success = self.clock()
        if state.status is Status.DEAD and state.ever_ready:
            self.set_status(name, Status.READY, "answering requests")

    def note_down(self, name: str, detail: str) -> None:
        """Passive health: a connection to the backend was refused, so nothing listens there now. It is
        down until the prober sees it answer again (its restart, if it restarts)."""
        state = self.backends[name]
        if state.status is Status.READY:
            self.set_status(name, Status.DEAD, detail)

    def served_within(self, name: str, seconds: float) -> bool:
        last = self.backends[name].last_success
        return last is not None and self.clock() - last <= seconds

    def may_come_back(self, name: str) -> bool:
        """Not serving now, but worth waiting for: warming up, or down after serving (a crash or restart)
        for less than the startup grace a restart may take."""
        state = self.backends[name]
        if state.status in (Status.STARTING, Status.UNKNOWN):
            return True
        return (
            state.status is Status.DEAD
            and state.ever_ready
            and self.clock() - state.since <= self.startup_grace_s
        )

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
