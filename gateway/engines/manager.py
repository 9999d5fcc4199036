"""The engine manager: every engine container the gateway knows, what it is doing, and the three
background loops that follow them (docs/engines.md).

- Discovery: containers with the backend label (engines/labels.py), running or stopped, become backends
  in the registry at run time; the Docker event stream (reconnected whenever it ends or fails) and a
  slower full listing keep that true when a container is started, stopped, killed or removed by hand.
- Managed engines (the config's `engines:`) are created and started when a request needs their model,
  probed through warm-up by the prober's rules, and stopped after their idle TTL.
- Each device's memory budget holds: a start that does not fit first stops others (engines/budget.py),
  draining each (hidden from routing until its in-flight count is 0, bounded) before it is stopped.
Each engine has at most one start or stop under way; starts on one device run one at a time, so the
budget is checked against what is really resident.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from typing import Any

from gateway.backends.flavors import FLAVORS
from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines import budget, labels
from gateway.engines.demand import Demand
from gateway.engines.docker_api import DockerApi
from gateway.records import BackendSnapshot, RequestRecord
from gateway.settings import BackendConfig, EngineConfig, Settings
from gateway.tasks import BackgroundTask

log = logging.getLogger("gateway.engines")

EVENT_RECONNECT_S = 1.0  # pause before reading the event stream again after it ended or failed
COLD_STARTS_KEPT = 3  # the expected cold start is the median of the last ones: one odd start is ignored
SERVICE_WEIGHT = 0.2  # weight of the newest request in a backend's moving time per request
BATCH_POLL_S = 0.5  # how often a start gathering requests looks again at its queue and the residents


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
    measure_from: float | None = None  # when the gateway itself started it: its cold start runs from here
    last_request: float = float("-inf")
    cold_start_s: float | None = None  # measured: start to ready, the last time the gateway saw it
    cold_starts: deque[float] = field(default_factory=lambda: deque(maxlen=COLD_STARTS_KEPT))
    demand: Demand = field(default_factory=Demand)
    op: asyncio.Task[bool] | None = None  # the start or stop under way
    wanted: bool = False  # a request came for it while it was stopping: started again once stopped
    # The requests waiting for its start (counted while starting): how many, and their arrival times'
    # sum, so their waiting so far is `asked * now - asked_at_sum`.
    asked: int = 0
    asked_at_sum: float = 0.0

    @property
    def pinned(self) -> bool:
        return self.spec is not None and self.spec.pinned

    @property
    def startable(self) -> bool:
        return self.spec is not None or self.container_id is not None

    def expected_cold_start_s(self) -> float:
        if self.cold_starts:
            return statistics.median(self.cold_starts)
        if self.backend.warmup_s is not None:
            return self.backend.warmup_s
        return FLAVORS[self.backend.flavor].warmup_s


class EngineManager:
    """Made by the composition root when the config declares engines or a Docker API; a `Service`."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        prober: Prober,
        api: Callable[[str | None], DockerApi] = DockerApi,
    ) -> None:
        self.settings = settings
        self.control = settings.engine_control
        self.registry = registry
        self.prober = prober
        self._make_api = api
        self.api: DockerApi | None = None
        self.engines: dict[str, Engine] = {}
        self.starts: Counter[str] = Counter()
        self.stops: Counter[tuple[str, str]] = Counter()
        self._probes: dict[str, BackgroundTask] = {}
        self._device_locks: dict[str | None, asyncio.Lock] = {}
        self._dirty = asyncio.Event()
        self._stop_events = threading.Event()
        self._loops: list[BackgroundTask] = []
        self._unlabelled: set[str] = set()  # containers whose labels were already reported unusable
        self._per_request_s: dict[str, float] = {}  # moving time per answered request, per backend

    # -- service --

    async def start(self) -> None:
        self.api = await asyncio.to_thread(self._make_api, self.control.docker_url)
        for spec in self.settings.engines:
            self._register(_managed(spec))
        try:
            await self.sync()
        except Exception as exc:  # no Docker API yet: the gateway serves the rest, the sync loop retries
            log.warning("engines: cannot list containers yet (%s); retrying", exc)
            self._dirty.set()
        loops = [
            BackgroundTask(self._follow_events, "engines:events", on_error=self._reconnect, logger=log),
            BackgroundTask(self._resync, "engines:sync", on_error=self._resync_failed, logger=log),
            BackgroundTask(self._idle_round, "engines:idle", on_error=self._retry, logger=log),
        ]
        self._stop_events.clear()
        self._loops = loops
        for loop in loops:
            loop.start()

    async def stop(self) -> None:
        """Stops following the engines; their containers keep running (a restarted gateway finds them)."""
        self._stop_events.set()
        loops, self._loops = self._loops, []
        probes, self._probes = list(self._probes.values()), {}
        await asyncio.gather(*(task.stop() for task in (*loops, *probes)))
        for engine in self.engines.values():
            if engine.op is not None and not engine.op.done():
                engine.op.cancel()
        if self.api is not None:
            await asyncio.to_thread(self.api.close)

    # -- the request path --

    def on_request(self, backends: Sequence[BackendSnapshot]) -> list[BackendSnapshot]:
        """A request's candidates as routing should see them: demand noted, one being drained or stopped
        hidden, and, when none of them can serve now, the stopped engines among them started (shown
        warming up, so the request waits for them)."""
        now = self.registry.clock()
        for snap in backends:
            engine = self.engines.get(snap.name)
            if engine is not None:
                engine.last_request = now
                engine.demand.add(now)
                if engine.phase is Phase.STARTING and not snap.ready:
                    engine.asked, engine.asked_at_sum = engine.asked + 1, engine.asked_at_sum + now
        routed = self.preview(backends)
        if any(snap.ready for snap in routed):
            return routed
        out = []
        for snap in routed:
            engine = self.engines.get(snap.name)
            if engine is not None and engine.phase is Phase.STOPPED and engine.startable:
                self.request_start(engine.name)
                snap = _as_routed(engine, snap)
            elif engine is not None and engine.phase in (Phase.DRAINING, Phase.STOPPING):
                engine.wanted = True  # started again once stopped; the request waits for it
                snap = replace(snap, ready=False, starting=True)
            out.append(snap)
        return out

    def preview(self, backends: Sequence[BackendSnapshot]) -> list[BackendSnapshot]:
        """The candidates as routing sees them now (a stopped, draining or stopping engine not ready, a
        starting one warming up), with nothing noted or started."""
        out = []
        for snap in backends:
            engine = self.engines.get(snap.name)
            out.append(snap if engine is None else _as_routed(engine, snap))
        return out

    def startable(self, backends: Sequence[BackendSnapshot]) -> dict[str, float]:
        """The stopped engines among `backends` a request could start, with their expected warm-up."""
        out = {}
        for snap in backends:
            engine = self.engines.get(snap.name)
            if engine is not None and engine.phase is Phase.STOPPED and engine.startable:
                out[engine.name] = engine.expected_cold_start_s()
        return out

    def warmup_left_s(self, name: str) -> float:
        """Seconds until `name` is expected ready: its whole cold start while stopped, what is left of it
        while starting (0 when late or running)."""
        engine = self.engines[name]
        if engine.phase is Phase.STOPPED:
            return engine.expected_cold_start_s()
        if engine.phase is Phase.STARTING and engine.measure_from is not None:
            elapsed = self.registry.clock() - engine.measure_from
            return max(0.0, engine.expected_cold_start_s() - elapsed)
        return 0.0

    def observe(self, record: RequestRecord) -> None:
        """A dispatch observer: a moving time per answered request of each backend (its queue's cost)."""
        if record.status != 200 or record.backend is None or record.backend not in self.registry.backends:
            return
        seconds = max(0.0, record.e2e - record.queue_wait)
        previous = self._per_request_s.get(record.backend)
        moved = seconds if previous is None else previous + SERVICE_WEIGHT * (seconds - previous)
        self._per_request_s[record.backend] = moved

    def per_request_s(self, backend: str) -> float | None:
        return self._per_request_s.get(backend)

    # -- starting and stopping --

    def request_start(self, name: str, batch: bool = True) -> asyncio.Task[bool]:
        """Start `name` unless a start or stop is under way (that one is returned). With `batch`, a
        start that must evict may first gather the requests for it (`engine_control.batch_wait_s`)."""
        engine = self.engines[name]
        if engine.op is not None and not engine.op.done():
            return engine.op
        if engine.phase is not Phase.STOPPED:
            return _done(True)
        engine.phase, engine.detail, engine.wanted = Phase.STARTING, "starting", False
        engine.asked, engine.asked_at_sum = 1, self.registry.clock()  # the request asking for it
        self.registry.set_status(name, Status.STARTING, "engine container starting")
        start = self._start(engine, batch)
        engine.op = asyncio.get_running_loop().create_task(start, name=f"engine-start:{name}")
        return engine.op

    def request_stop(self, name: str, reason: str) -> asyncio.Task[bool]:
        engine = self.engines[name]
        if engine.op is not None and not engine.op.done():
            return engine.op
        if engine.phase is Phase.STOPPED:
            return _done(True)
        engine.op = asyncio.get_running_loop().create_task(
            self._stop(engine, reason), name=f"engine-stop:{name}"
        )
        return engine.op

    async def _start(self, engine: Engine, batch: bool = False) -> bool:
        try:
            async with self._device_lock(engine.device):
                if batch:
                    await self._gather(engine)
                if not await self._make_room(engine):
                    return False
                await self._run_container(engine)
        except Exception as exc:  # the Docker API failed: the engine stays stopped, the reason shown
            self._failed_start(engine, f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _gather(self, engine: Engine) -> None:
        """Before evicting for `engine`, wait (at most `batch_wait_s`) until an eviction that spares busy
        engines is possible and the requests waiting for it outweigh what it costs the victims' clients
        (engines/budget.py): swaps are batched, not made for each request."""
        device = self.settings.devices.get(engine.device or "")
        limit = self.control.batch_wait_s
        if device is None or limit <= 0:
            return
        since = self.registry.clock()
        while True:
            now = self.registry.clock()
            residents = self._residents(engine, now)
            plan = budget.plan(
                residents, engine.memory_gib, device.memory_gib, self.control.min_residency_s, spare_busy=True
            )
            if plan.refusal is None:
                if not plan.evict:
                    return  # it fits
                cold = engine.expected_cold_start_s()
                victims = [r for r in residents if r.name in plan.evict]
                eviction = sum(budget.eviction_wait_s(r, cold, self.control.min_residency_s) for r in victims)
                waiting = engine.asked * (now + cold) - engine.asked_at_sum
                if budget.worth_swapping(waiting, eviction, now - since, limit):
                    return
            if now - since >= limit:
                return  # bounded: the start goes ahead by the plain rules (a busy engine is drained)
            engine.detail = f"gathering requests before a swap ({engine.asked} waiting)"
            await asyncio.sleep(BATCH_POLL_S)

    def _residents(self, engine: Engine, now: float) -> list[budget.Resident]:
        """The other engines holding memory on `engine`'s device, as the budget sees them."""
        return [
            budget.Resident(
                name=other.name,
                memory_gib=other.memory_gib,
                inflight=self.registry.inflight[other.name],
                pinned=other.pinned,
                resident_s=now - (other.started_at if other.started_at is not None else float("-inf")),
                demand_per_min=other.demand.per_minute(now),
                cold_start_s=other.expected_cold_start_s(),
            )
            for other in self.engines.values()
            if other is not engine and other.device == engine.device and other.phase in RESIDENT
        ]

    async def _make_room(self, engine: Engine) -> bool:
        device = self.settings.devices.get(engine.device or "")
        if device is None:
            return True
        now = self.registry.clock()
        residents = self._residents(engine, now)
        plan = budget.plan(residents, engine.memory_gib, device.memory_gib, self.control.min_residency_s)
        if plan.refusal is not None:
            self._failed_start(engine, plan.refusal)
            return False
        for victim in plan.evict:
            log.info("engine %s: evicting %s to make room on %s", engine.name, victim, engine.device)
            if not await self._stop(self.engines[victim], "evicted"):
                self._failed_start(engine, f"{victim} still had requests in flight after draining")
                return False
        return True

    async def _run_container(self, engine: Engine) -> None:
        api = self._api()
        if engine.container_id is None or not await asyncio.to_thread(api.exists, engine.container_id):
            assert engine.spec is not None  # startable: a managed spec, or a container to start
            engine.container_id = await asyncio.to_thread(api.create, engine.spec)
        await asyncio.to_thread(api.start, engine.container_id)
        engine.started_at = engine.measure_from = self.registry.clock()
        engine.detail = "container started"
        self.starts[engine.name] += 1
        log.info(
            "engine %s started (container %s, %g GiB on %s)",
            engine.name,
            engine.container_id[:12],
            engine.memory_gib,
            engine.device or "no device",
        )
        self._probe(engine)

    def _failed_start(self, engine: Engine, why: str) -> None:
        engine.phase, engine.detail = Phase.STOPPED, f"cannot start: {why}"
        self.registry.set_status(engine.name, Status.DEAD, engine.detail)
        log.warning("engine %s cannot start: %s", engine.name, why)

    async def _stop(self, engine: Engine, reason: str) -> bool:
        """Drain (hidden from routing, bounded wait for in-flight to reach 0), then stop the container.
        False, and serving again, if requests were still in flight at the drain deadline."""
        previous = engine.phase
        if reason == "idle" and not self._idle(engine):  # a request came since the idle round
            return False
        engine.phase, engine.detail = Phase.DRAINING, f"draining ({reason})"
        deadline = self.registry.clock() + self.control.drain_timeout_s
        while self.registry.inflight[engine.name] > 0:
            if self.registry.clock() >= deadline:
                engine.phase, engine.detail = previous, f"kept: still serving after draining ({reason})"
                log.info("engine %s not stopped (%s): requests still in flight", engine.name, reason)
                return False
            await asyncio.sleep(0.05)
        engine.phase = Phase.STOPPING
        await self._unprobe(engine.name)  # first: a probe answered by the old container must not land after
        # Not ready from here on: admission hands it no slot, a request for it waits (or starts it again).
        self.registry.set_status(engine.name, Status.DEAD, f"stopping ({reason})")
        if engine.container_id is not None:
            with contextlib.suppress(Exception):  # gone already: stopped is what was asked
                await asyncio.to_thread(self._api().stop, engine.container_id, self.control.stop_timeout_s)
        self._stopped(engine, reason)
        if engine.wanted:  # once this stop is over (its task done), a start can begin
            asyncio.get_running_loop().call_soon(self._start_if_wanted, engine.name)
        return True

    def _start_if_wanted(self, name: str) -> None:
        engine = self.engines.get(name)
        if engine is not None and engine.wanted and engine.phase is Phase.STOPPED:
            log.info("engine %s: requests came while it stopped; starting it again", name)
            self.request_start(name)

    def _idle(self, engine: Engine) -> bool:
        ttl = engine.spec.idle_ttl_s if engine.spec is not None else None
        active = max(engine.last_request, engine.started_at or float("-inf"))
        idle = self.registry.inflight[engine.name] == 0 and self.registry.clock() - active >= (ttl or 0)
        return ttl is not None and not engine.pinned and idle

    def _stopped(self, engine: Engine, reason: str) -> None:
        engine.phase, engine.detail, engine.started_at = Phase.STOPPED, f"stopped ({reason})", None
        self.registry.set_status(engine.name, Status.DEAD, engine.detail)
        self.stops[(engine.name, reason)] += 1
        log.info("engine %s stopped (%s)", engine.name, reason)

    # -- readiness --

    def on_status(self, backend: str, status: Status) -> None:
        """Registry listener: an engine the gateway started is running once ready; its cold start is
        measured for the eviction cost."""
        engine = self.engines.get(backend)
        if engine is None or status is not Status.READY or engine.phase is not Phase.STARTING:
            return
        engine.phase, engine.detail = Phase.RUNNING, "ready"
        if engine.measure_from is not None:
            engine.cold_start_s = self.registry.clock() - engine.measure_from
            engine.cold_starts.append(engine.cold_start_s)
            engine.measure_from = None
            # The next start's warm-up ETA (backends/warmup.py reads the backend's warmup_s) is the median
            # of the last measured ones.
            state = self.registry.backends[backend]
            state.config = state.config.model_copy(
                update={"warmup_s": max(engine.expected_cold_start_s(), 0.1)}
            )
            log.info("engine %s ready after %.1fs", engine.name, engine.cold_start_s)

    def _probe(self, engine: Engine) -> None:
        if engine.name in self._probes:
            return
        task = BackgroundTask(
            partial(self._probe_round, engine.name),
            f"engines:probe:{engine.name}",
            on_error=self._retry,
            logger=log,
        )
        self._probes[engine.name] = task
        task.start()

    async def _unprobe(self, name: str) -> None:
        task = self._probes.pop(name, None)
        if task is not None:
            await task.stop()

    async def _probe_round(self, name: str) -> float:
        status = await self.prober.probe_once(name)
        probe = self.settings.probe
        return probe.interval_s if status is Status.READY else probe.starting_interval_s

    # -- following the containers --

    async def sync(self) -> None:
        """Bring the engines in line with the containers as the Docker API lists them."""
        found = {}
        for container in await asyncio.to_thread(self._api().labelled):
            read = labels.read(container.labels)
            if isinstance(read, str):
                if container.id not in self._unlabelled:
                    self._unlabelled.add(container.id)
                    log.warning("container %s is not a backend: %s", container.name, read)
                continue
            found[read.name] = (container, read)
        for name, (container, read) in found.items():
            engine = self.engines.get(name) or self._register(_discovered(read))
            await self._follow(engine, container.id, container.running)
        for engine in list(self.engines.values()):
            gone = engine.name not in found and await self._follow(engine, None, False)
            if gone and engine.spec is None and self.registry.remove_backend(engine.name):
                del self.engines[engine.name]
                log.info("engine %s is gone (container removed)", engine.name)

    async def _follow(self, engine: Engine, container_id: str | None, running: bool) -> bool:
        """Take in what the listing says of the engine's container; False while the gateway's own
        start or stop of it is under way (that one says what it is: the listing may predate it)."""
        if engine.op is not None and not engine.op.done():
            return False
        engine.container_id = container_id
        if running and engine.phase is Phase.STOPPED:
            engine.phase, engine.detail = Phase.STARTING, "found running"
            engine.started_at, engine.measure_from = self.registry.clock(), None
            self._probe(engine)
        elif not running and engine.phase in RESIDENT:
            await self._unprobe(engine.name)
            self._stopped(engine, "exited")
        return True

    async def _follow_events(self) -> float:
        loop = asyncio.get_running_loop()
        self._dirty.set()  # what happened while the stream was not read is found by a full listing

        def on_event(action: str, backend: str) -> None:
            loop.call_soon_threadsafe(self._dirty.set)

        await asyncio.to_thread(self._api().follow_events, on_event, self._stop_events)
        return EVENT_RECONNECT_S

    def _reconnect(self, exc: Exception) -> float:
        self._dirty.set()  # events may have been missed while the stream was down
        return EVENT_RECONNECT_S

    async def _resync(self) -> float:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._dirty.wait(), self.control.resync_s)
        self._dirty.clear()
        await self.sync()
        return 0.0

    def _retry(self, exc: Exception) -> float:
        return 1.0

    def _resync_failed(self, exc: Exception) -> float:
        self._dirty.set()  # list again after the pause, not a whole resync_s later
        return 1.0

    async def _idle_round(self) -> float:
        ttls = []
        for engine in list(self.engines.values()):
            ttl = engine.spec.idle_ttl_s if engine.spec is not None else None
            if ttl is None or engine.pinned or engine.phase is not Phase.RUNNING:
                continue
            ttls.append(ttl)
            if self._idle(engine):
                self.request_stop(engine.name, "idle")
        return min([1.0, *(t / 4 for t in ttls)])

    # -- views --

    def describe(self) -> dict[str, Any]:
        now = self.registry.clock()
        engines = []
        for engine in self.engines.values():
            state = self.registry.backends.get(engine.name)
            engines.append(
                {
                    "name": engine.name,
                    "model": engine.model,
                    "managed": engine.spec is not None,
                    "phase": str(engine.phase),
                    "detail": engine.detail,
                    "status": str(state.status) if state is not None else None,
                    "container": engine.container_id[:12] if engine.container_id else None,
                    "device": engine.device,
                    "memory_gib": engine.memory_gib,
                    "pinned": engine.pinned,
                    "idle_ttl_s": engine.spec.idle_ttl_s if engine.spec is not None else None,
                    "inflight": self.registry.inflight[engine.name],
                    "idle_s": _rounded(now - engine.last_request),
                    "demand_per_min": round(engine.demand.per_minute(now), 3),
                    "cold_start_s": _rounded(engine.cold_start_s),
                    "starts": self.starts[engine.name],
                }
            )
        devices = {
            name: {"memory_gib": device.memory_gib, "resident_gib": self.resident_gib(name)}
            for name, device in self.settings.devices.items()
        }
        return {"engines": engines, "devices": devices}

    def resident_gib(self, device: str) -> float:
        return sum(e.memory_gib for e in self.engines.values() if e.device == device and e.phase in RESIDENT)

    # -- internals --

    def _register(self, engine: Engine) -> Engine:
        self.engines[engine.name] = engine
        if engine.name not in self.registry.backends:
            served = engine.spec.served_name if engine.spec is not None else None
            self.registry.add_backend(engine.backend, engine.model, served)
            self.registry.set_status(engine.name, Status.DEAD, "not started")
        log.info("engine %s (%s) serves %s", engine.name, "managed" if engine.spec else "found", engine.model)
        return engine

    def _device_lock(self, device: str | None) -> asyncio.Lock:
        return self._device_locks.setdefault(device, asyncio.Lock())

    def _api(self) -> DockerApi:
        if self.api is None:
            raise RuntimeError("the engine manager is not started")
        return self.api


def _managed(spec: EngineConfig) -> Engine:
    backend = BackendConfig(
        name=spec.name,
        url=f"http://127.0.0.1:{spec.port}",
        flavor=spec.flavor,
        max_concurrency=spec.max_concurrency,
        device=spec.device,
        warmup_s=spec.warmup_s,
    )
    return Engine(spec.name, spec.model, backend, spec.memory_gib, spec.device, spec=spec)


def _discovered(read: labels.Labelled) -> Engine:
    url = f"http://127.0.0.1:{read.port}"
    backend = BackendConfig(name=read.name, url=url, flavor=read.flavor, device=read.device)
    return Engine(read.name, read.model, backend, read.memory_gib, read.device)


def _as_routed(engine: Engine, snap: BackendSnapshot) -> BackendSnapshot:
    if engine.phase is Phase.STARTING:
        return snap if snap.ready else replace(snap, starting=True)
    if engine.phase is Phase.RUNNING:
        return snap
    return replace(snap, ready=False, starting=False)  # stopped, draining or stopping


def _done(value: bool) -> asyncio.Task[bool]:
    async def result() -> bool:
        return value

    return asyncio.get_running_loop().create_task(result())


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None or seconds == float("inf") else round(seconds, 1)
