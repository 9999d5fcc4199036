"""The engine manager: every engine container the gateway knows and what it is doing (docs/engines.md).
It composes the parts and answers the request path:

- engines/following.py: containers with the backend label, running or stopped, are backends at run time,
  kept true from the Docker event stream and a slower full listing;
- engines/lifecycle.py: starts and stops (one at a time per engine, per device for starts), drained
  first, idle stops; engines/room.py: the device budget's evictions and the batching of a swap's
  requests; engines/probes.py: readiness by the prober's rules;
- engines/cold_starts.py: measured cold starts, kept across restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.engines import budget
from gateway.engines.cold_starts import ColdStartFile
from gateway.engines.docker_api import DockerApi
from gateway.engines.engine import RESIDENT, Engine, Phase, as_routed, managed_engine
from gateway.engines.following import ContainerFollower
from gateway.engines.lifecycle import Lifecycle
from gateway.engines.probes import EngineProbes
from gateway.engines.room import Room
from gateway.records import BackendSnapshot, RequestRecord
from gateway.settings import Settings
from gateway.tasks import BackgroundTask

log = logging.getLogger("gateway.engines")

SERVICE_WEIGHT = 0.2  # weight of the newest request in a backend's moving time per request


class EngineManager:
    """Made by the composition root when the config declares engines or a Docker API; a `Service`.
    `planner` chooses evictions (engines/budget.py `plan` unless another policy is plugged in)."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        prober: Prober,
        api: Callable[[str | None], DockerApi] = DockerApi,
        planner: budget.Planner = budget.plan,
    ) -> None:
        self.settings = settings
        self.control = settings.engine_control
        self.registry = registry
        self._make_api = api
        self.api: DockerApi | None = None
        self.engines: dict[str, Engine] = {}
        self.cold_start_file = ColdStartFile(settings.state_dir)
        probes = EngineProbes(prober, settings.probe)
        room = Room(settings, registry, self.engines, planner)
        self.lifecycle = Lifecycle(settings, registry, self.engines, self._api, probes, room)
        self.follower = ContainerFollower(
            registry, self.engines, self._api, self.lifecycle, self._register, self.control.resync_s
        )
        self._loops: list[BackgroundTask] = []
        self._per_request_s: dict[str, float] = {}  # moving time per answered request, per backend

    @property
    def starts(self) -> Counter[str]:
        return self.lifecycle.starts

    @property
    def stops(self) -> Counter[tuple[str, str]]:
        return self.lifecycle.stops

    # -- service --

    async def start(self) -> None:
        self.api = await asyncio.to_thread(self._make_api, self.control.docker_url)
        for spec in self.settings.engines:
            self._register(managed_engine(spec))
        try:
            await self.sync()
        except Exception as exc:  # no Docker API yet: the gateway serves the rest, the sync loop retries
            log.warning("engines: cannot list containers yet (%s); retrying", exc)
            self.follower.dirty.set()
        follower, lifecycle = self.follower, self.lifecycle
        loops = [
            BackgroundTask(follower.follow_events, "engines:events", on_error=follower.reconnect, logger=log),
            BackgroundTask(follower.resync, "engines:sync", on_error=follower.resync_failed, logger=log),
            BackgroundTask(lifecycle.idle_round, "engines:idle", on_error=_retry, logger=log),
        ]
        follower.stop_events.clear()
        self._loops = loops
        for loop in loops:
            loop.start()

    async def stop(self) -> None:
        """Stops following the engines; their containers keep running (a restarted gateway finds them)."""
        self.follower.stop_events.set()
        loops, self._loops = self._loops, []
        await asyncio.gather(*(task.stop() for task in loops), self.lifecycle.probes.stop_all())
        for engine in self.engines.values():
            if (op := engine.running_op) is not None:
                op.cancel()
        if self.api is not None:
            await asyncio.to_thread(self.api.close)

    async def sync(self) -> None:
        await self.follower.sync()

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
                snap = as_routed(engine, snap)
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
            out.append(snap if engine is None else as_routed(engine, snap))
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
        """A dispatch observer: an engine's idle time counts from its last answer's end (a long answer
        is no idleness), and a moving time per answered request of each backend (its queue's cost)."""
        engine = self.engines.get(record.backend) if record.backend is not None else None
        if engine is not None:
            engine.last_request = max(engine.last_request, self.registry.clock())
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
        return self.lifecycle.request_start(name, batch)

    def request_stop(self, name: str, reason: str) -> asyncio.Task[bool]:
        return self.lifecycle.request_stop(name, reason)

    # -- readiness --

    def on_status(self, backend: str, status: Status) -> None:
        """Registry listener: an engine the gateway started is running once ready; its cold start is
        measured for the eviction cost, and kept across restarts."""
        engine = self.engines.get(backend)
        if engine is None or status is not Status.READY or engine.phase is not Phase.STARTING:
            return
        engine.phase, engine.detail, engine.ready_at = Phase.RUNNING, "ready", self.registry.clock()
        if engine.measure_from is not None:
            engine.cold_start_s = self.registry.clock() - engine.measure_from
            engine.cold_starts.append(engine.cold_start_s)
            engine.measure_from = None
            self._expect_warmup(engine)
            self.cold_start_file.save(self.engines.values())
            log.info("engine %s ready after %.1fs", engine.name, engine.cold_start_s)

    def _expect_warmup(self, engine: Engine) -> None:
        """The next start's warm-up ETA (backends/warmup.py reads the backend's warmup_s) is the median of
        the last measured cold starts."""
        update = {"warmup_s": max(engine.expected_cold_start_s(), 0.1)}
        engine.backend = engine.backend.model_copy(update=update)
        state = self.registry.backends.get(engine.name)
        if state is not None:
            state.config = state.config.model_copy(update=update)

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
                    "idle_ttl_s": engine.idle_ttl_s,
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
        self.cold_start_file.restore(engine)
        if engine.cold_starts:
            self._expect_warmup(engine)
        if engine.name not in self.registry.backends:
            served = engine.spec.served_name if engine.spec is not None else None
            self.registry.add_backend(engine.backend, engine.model, served)
            self.registry.set_status(engine.name, Status.DEAD, "not started")
        log.info("engine %s (%s) serves %s", engine.name, "managed" if engine.spec else "found", engine.model)
        return engine

    def _api(self) -> DockerApi:
        if self.api is None:
            raise RuntimeError("the engine manager is not started")
        return self.api


def _retry(exc: Exception) -> float:
    return 1.0


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None or seconds == float("inf") else round(seconds, 1)
