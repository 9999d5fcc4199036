"""State per backend (status, in-flight count, capabilities) and the model pools that group them.

The registry is the single owner of this state: the prober writes status and capabilities, dispatch
reports answered requests (passive health), and the router reads plain snapshots. The in-flight count
is `Registry.inflight` (backends/inflight.py), the one count admission slots and dispatch accounting
take and give back; `BackendState.inflight` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.backends.flavors import FLAVORS
from gateway.backends.inflight import InFlight
from gateway.clock import monotonic
from gateway.records import BackendSnapshot
from gateway.redact import without_credentials
from gateway.settings import BackendConfig, PoolConfig, Settings


class Status(StrEnum):
    UNKNOWN = "unknown"  # not probed yet
    STARTING = "starting"  # warming up (connection refused or 503 loading within the startup grace)
    READY = "ready"
    DEAD = "dead"
    # Nothing listens at its URL past its warm-up bound (backends/reachability.py): a wrong URL, or an
    # engine not running. Not waited for; the prober keeps probing, and its first answer brings it back.
    UNREACHABLE = "unreachable"


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
    discovered_capacity: int | None = None  # the engine's own limit on running sequences, where it says
    last_success: float | None = None  # clock time of the last request it answered successfully
    stalled_since: float | None = None  # clock time it was found stalled (proxy/stall.py); None: it is not
    stall_detail: str = ""
    # Endpoints it answered "no such route" for (proxy/engine_errors.py), though its flavor or config says
    # it serves them (a generation model's vLLM has no /v1/embeddings): kept from the router until it
    # restarts, when it may serve another model.
    unserved: set[str] = field(default_factory=set)
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

    @property
    def native_endpoints(self) -> frozenset[str]:
        """The client APIs the engine serves itself: declared in the config, else its flavor's."""
        declared = self.config.endpoints
        served = frozenset(declared) if declared is not None else FLAVORS[self.config.flavor].endpoints
        return served - self.unserved

    @property
    def translates_messages(self) -> bool:
        """Messages reach it translated to chat: it serves chat, not Messages, and translation is not off."""
        native = self.native_endpoints
        return "chat" in native and "messages" not in native and self.config.translate_messages is not False

    @property
    def endpoints(self) -> frozenset[str]:
        """What the router may send it: its own endpoints, plus Messages when it takes them translated."""
        return self.native_endpoints | {"messages"} if self.translates_messages else self.native_endpoints

    def snapshot(
        self,
        breaker_open: bool = False,
        restarting: bool = False,
        engine_waiting: float | None = None,
        engine_full_at: int | None = None,
    ) -> BackendSnapshot:
        return BackendSnapshot(
            name=self.config.name,
            ready=self.status is Status.READY,
            # A restarting backend is warming up again: worth waiting for, like one starting.
            starting=restarting or self.status in (Status.STARTING, Status.UNKNOWN),
            problem=f"{self.status}: {self.detail}"
            if self.status in (Status.DEAD, Status.UNREACHABLE)
            else "",
            breaker_open=breaker_open,
            stalled=self.stalled_since is not None,
            inflight=self.inflight,
            max_concurrency=self.config.max_concurrency,
            context_length=self.context_length,
            modalities=self.modalities,
            tags=self.config.tags,
            endpoints=self.endpoints,
            engine_waiting=engine_waiting,
            engine_capacity=self.discovered_capacity,
            engine_full_at=engine_full_at,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "url": without_credentials(self.config.url),  # credentials are the engine's business only
            "flavor": self.config.flavor,
            "device": self.config.device,
            "status": str(self.status),
            "detail": self.detail,
            "inflight": self.inflight,
            "max_concurrency": self.config.max_concurrency,
            "context_length": self.context_length,
            "modalities": sorted(self.modalities),
            "tags": sorted(self.config.tags),
            "served_models": list(self.served_models),
            "stalled": self.stalled_since is not None,
            "stall_detail": self.stall_detail,
            "unserved_endpoints": sorted(self.unserved),
        }


class Registry:
    def __init__(self, settings: Settings, clock: Callable[[], float] = monotonic) -> None:
        self.clock = clock
        self.inflight = InFlight()
        self.backends = {
            b.name: BackendState(b, since=clock(), load=self.inflight) for b in settings.backends
        }
        # The config's backends, as against those added at run time (engine containers, add_backend).
        self.configured = frozenset(self.backends)
        self.pools = settings.pools
        self.startup_grace_s = settings.probe.startup_grace_s
        self._by_model = {name: pool for pool in settings.pools for name in (pool.model, *pool.aliases)}
        # Whoever follows readiness (admission slots) and the breakers' verdict, set by the composition root.
        self.listeners: list[Callable[[str, Status], None]] = []
        self.breaker_open: Callable[[str], bool] = lambda name: False
        # Requests waiting inside each engine by its latest fresh report (None: unknown or stale), set by
        # the composition root from the metrics scraper; the router spills off a backend whose queue is not
        # empty.
        self.engine_waiting: Callable[[str], float | None] = lambda name: None
        # What each engine ran when last seen with a queue (the scraper's `running_limit`), likewise.
        self.engine_full_at: Callable[[str], int | None] = lambda name: None
        # Whoever keeps per-backend state (admission slots), told after a backend is added or removed.
        self.membership: list[Callable[[], None]] = []
        # The latest time a client was told to come back for each backend (a 503 with Retry-After while it
        # warms up): an engine is not evicted before its clients were due (engines/room.py).
        self._promised: dict[str, float] = {}

    def promise(self, name: str, until: float) -> None:
        """A client was told to come back for `name` at `until` (clock time)."""
        self._promised[name] = max(until, self._promised.get(name, until))

    def promised_until(self, name: str) -> float:
        return self._promised.get(name, float("-inf"))

    def pool(self, model: str) -> PoolConfig | None:
        return self._by_model.get(model)

    def add_backend(self, config: BackendConfig, model: str, served_name: str | None = None) -> None:
        """Register a backend at run time (an engine container found or started) in the pool of `model`,
        made when no pool has that name. The new state starts unknown, like a configured one."""
        if config.name in self.backends:
            raise ValueError(f"backend {config.name!r} already exists")
        self.backends[config.name] = BackendState(config, since=self.clock(), load=self.inflight)
        pool = self._by_model.get(model) or PoolConfig(model=model, backends=(config.name,))
        served = {**pool.served_names, **({config.name: served_name} if served_name else {})}
        backends = tuple(dict.fromkeys((*pool.backends, config.name)))
        self._replace_pool(pool, pool.model_copy(update={"backends": backends, "served_names": served}))
        for listener in self.membership:
            listener()

    def remove_backend(self, name: str) -> bool:
        """Forget a run-time backend; False (kept) while requests are in flight on it. A pool left
        without backends goes with it."""
        if name not in self.backends or self.inflight[name] > 0:
            return False
        del self.backends[name]
        for pool in [p for p in self.pools if name in p.backends]:
            left = tuple(b for b in pool.backends if b != name)
            served = {b: n for b, n in pool.served_names.items() if b != name}
            self._replace_pool(pool, pool.model_copy(update={"backends": left, "served_names": served}))
        for listener in self.membership:
            listener()
        return True

    def _replace_pool(self, old: PoolConfig, new: PoolConfig) -> None:
        pools = [new if p is old else p for p in self.pools]
        pools += [] if any(p is old for p in self.pools) else [new]
        self.pools = tuple(p for p in pools if p.backends)
        self._by_model = {name: pool for pool in self.pools for name in (pool.model, *pool.aliases)}

    def model_names(self) -> list[str]:
        return [pool.model for pool in self.pools]

    def snapshots(self, pool: PoolConfig) -> list[BackendSnapshot]:
        return [
            self.backends[name].snapshot(
                self.breaker_open(name),
                self.may_come_back(name),
                self.engine_waiting(name),
                self.engine_full_at(name),
            )
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
        self.note_unstalled(name, "answered a request")
        if state.status is Status.DEAD and state.ever_ready:
            self.set_status(name, Status.READY, "answering requests")

    def note_stalled(self, name: str, detail: str) -> bool:
        """Hang detection (proxy/stall.py): its in-flight requests produced no byte for far longer than it
        usually takes. Out for new requests until it produces bytes again; True if it just became so."""
        state = self.backends[name]
        state.stall_detail = detail
        if state.stalled_since is not None:
            return False
        state.stalled_since = self.clock()
        return True

    def note_unstalled(self, name: str, why: str) -> bool:
        """It produced bytes again (a request's, or a readiness probe's answer): back at once. True if it
        was stalled."""
        state = self.backends[name]
        if state.stalled_since is None:
            return False
        state.stalled_since, state.stall_detail = None, f"recovered: {why}"
        return True

    def note_unserved(self, name: str, endpoint: str) -> bool:
        """The backend answered that it has no route for `endpoint`: the router sends it no more of them
        until it restarts. True if this is news."""
        state = self.backends.get(name)
        if state is None or endpoint in state.unserved:
            return False
        state.unserved.add(endpoint)
        return True

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
        if status is Status.READY:
            state.unserved.clear()  # back from a (re)start: it may serve another model now
        state.ever_ready = state.ever_ready or status is Status.READY
        for listener in self.listeners:
            listener(name, status)
        return True

    def warming_from_now(self, name: str, detail: str) -> None:
        """A warm-up begins now (an engine container just started): the startup grace and the ETA waiting
        requests are told count from here, not from an earlier status change (a start that waited for
        room first)."""
        state = self.backends[name]
        if not self.set_status(name, Status.STARTING, detail):
            state.since, state.detail = self.clock(), detail

    def pool_ready(self, pool: PoolConfig) -> bool:
        return any(self.backends[name].status is Status.READY for name in pool.backends)

    def max_context(self, pool: PoolConfig) -> int | None:
        lengths = [self.backends[n].context_length for n in pool.backends]
        known = [n for n in lengths if n is not None]
        return max(known) if known else None
