"""One engine the gateway knows, as plain state: where it is in its life (`Phase`), its footprint and
device, its measured cold starts and its recent demand; and how routing sees it in each phase."""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gateway.backends.flavors import FLAVORS
from gateway.engines import labels
from gateway.engines.demand import Demand
from gateway.records import BackendSnapshot
from gateway.settings import BackendConfig, EngineConfig

COLD_STARTS_KEPT = 3  # the expected cold start is the median of the last ones: one odd start is ignored


class Phase(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"  # container started, not ready yet
    RUNNING = "running"
    DRAINING = "draining"  # hidden from routing, waiting for in-flight to reach 0
    STOPPING = "stopping"


RESIDENT = (Phase.STARTING, Phase.RUNNING, Phase.DRAINING, Phase.STOPPING)


@dataclass
class Engine:
    name: str
    model: str
    backend: BackendConfig
    memory_gib: float
    device: str | None
    spec: EngineConfig | None = None  # managed: the gateway may create its container
    container_id: str | None = None
    phase: Phase = Phase.STOPPED
    detail: str = ""
    started_at: float | None = None  # when it was started, or found running; None while stopped
    ready_at: float | None = None  # when it became ready (or was found running); None until then
    measure_from: float | None = None  # when the gateway itself started it: its cold start runs from here
    last_request: float = float("-inf")
    cold_start_s: float | None = None  # measured: start to ready, the last time the gateway saw it
    cold_starts: deque[float] = field(default_factory=lambda: deque(maxlen=COLD_STARTS_KEPT))
    demand: Demand = field(default_factory=Demand)
    op: asyncio.Task[bool] | None = None  # the start or stop under way
    ops: int = 0  # starts and stops the gateway began: a container listing asked before one is stale
    wanted: bool = False  # a request came for it while it was stopping: started again once stopped
    # The requests waiting for its start (counted while starting): how many, and their arrival times'
    # sum, so their waiting so far is `asked * now - asked_at_sum`.
    asked: int = 0
    asked_at_sum: float = 0.0

    @property
    def running_op(self) -> asyncio.Task[bool] | None:
        """The start or stop the gateway began, while it is under way; None once done."""
        return self.op if self.op is not None and not self.op.done() else None

    @property
    def pinned(self) -> bool:
        return self.spec is not None and self.spec.pinned

    @property
    def startable(self) -> bool:
        return self.spec is not None or self.container_id is not None

    @property
    def idle_ttl_s(self) -> float | None:
        return self.spec.idle_ttl_s if self.spec is not None else None

    def serving_s(self, now: float, promised_until: float) -> float:
        """How long it has been ready and the clients told to come back for it (at `promised_until`) due,
        what a minimum residency counts: negative while they are still due, 0 until it is ready."""
        if self.ready_at is None:
            return 0.0
        return now - max(self.ready_at, promised_until)

    def expected_cold_start_s(self) -> float:
        if self.cold_starts:
            return statistics.median(self.cold_starts)
        if self.backend.warmup_s is not None:
            return self.backend.warmup_s
        return FLAVORS[self.backend.flavor].warmup_s


def managed_engine(spec: EngineConfig) -> Engine:
    backend = BackendConfig(
        name=spec.name,
        url=f"http://127.0.0.1:{spec.port}",
        flavor=spec.flavor,
        max_concurrency=spec.max_concurrency,
        device=spec.device,
        warmup_s=spec.warmup_s,
    )
    return Engine(spec.name, spec.model, backend, spec.memory_gib, spec.device, spec=spec)


def discovered_engine(read: labels.Labelled) -> Engine:
    url = f"http://127.0.0.1:{read.port}"
    backend = BackendConfig(name=read.name, url=url, flavor=read.flavor, device=read.device)
    return Engine(read.name, read.model, backend, read.memory_gib, read.device)


def as_routed(engine: Engine, snap: BackendSnapshot) -> BackendSnapshot:
    """The backend as routing should see it in the engine's phase."""
    if engine.phase is Phase.STARTING:
        return snap if snap.ready else replace(snap, starting=True)
    if engine.phase is Phase.RUNNING:
        return snap
    return replace(snap, ready=False, starting=False)  # stopped, draining or stopping
