"""Following the containers: the ones carrying the backend label (engines/labels.py), running or
stopped, are the engines; the Docker event stream (read again whenever it ends or fails) and a slower
full listing keep that true when a container is started, stopped, killed or removed by hand."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, MutableMapping

from gateway.backends.registry import Registry
from gateway.engines import labels
from gateway.engines.docker_api import DockerApi
from gateway.engines.engine import RESIDENT, Engine, Phase, discovered_engine
from gateway.engines.lifecycle import Lifecycle

log = logging.getLogger("gateway.engines")

EVENT_RECONNECT_S = 1.0  # pause before reading the event stream again after it ended or failed


class ContainerFollower:
    def __init__(
        self,
        registry: Registry,
        engines: MutableMapping[str, Engine],
        api: Callable[[], DockerApi],
        lifecycle: Lifecycle,
        register: Callable[[Engine], Engine],
        resync_s: float,
    ) -> None:
        self.registry = registry
        self.engines = engines
        self._api = api
        self.lifecycle = lifecycle
        self._register = register
        self.resync_s = resync_s
        self.dirty = asyncio.Event()  # something changed: list the containers again
        self.stop_events = threading.Event()
        self._unlabelled: set[str] = set()  # containers whose labels were already reported unusable

    async def sync(self) -> None:
        """Bring the engines in line with the containers as the Docker API lists them."""
        found = {}
        asked = {name: _settled(engine) for name, engine in self.engines.items()}
        for container in await asyncio.to_thread(self._api().labelled):
            read = labels.read(container.labels)
            if isinstance(read, str):
                if container.id not in self._unlabelled:
                    self._unlabelled.add(container.id)
                    log.warning("container %s is not a backend: %s", container.name, read)
                continue
            found[read.name] = (container, read)
        for name, (container, read) in found.items():
            engine = self.engines.get(name) or self._register(discovered_engine(read))
            await self._follow(engine, container.id, container.running, asked)
        for engine in list(self.engines.values()):
            gone = engine.name not in found and await self._follow(engine, None, False, asked)
            if gone and engine.spec is None and self.registry.remove_backend(engine.name):
                del self.engines[engine.name]
                log.info("engine %s is gone (container removed)", engine.name)

    async def _follow(
        self, engine: Engine, container_id: str | None, running: bool, asked: Mapping[str, int | None]
    ) -> bool:
        """Take in what the listing says of the engine's container; False while the gateway's own
        start or stop of it is under way, or when one was under way or began after the listing was
        asked (that one says what it is: the listing may predate its end, and would call a container
        just started exited)."""
        if engine.running_op is not None:
            return False
        if asked.get(engine.name, engine.ops) != engine.ops:  # `asked`: see _settled
            self.dirty.set()  # list again: a listing asked from now on sees what that start or stop did
            return False
        engine.container_id = container_id
        if running and engine.phase is Phase.STOPPED:
            engine.phase, engine.detail = Phase.STARTING, "found running"
            engine.started_at, engine.measure_from = self.registry.clock(), None
            self.lifecycle.probes.start(engine.name)
        elif not running and engine.phase in RESIDENT:
            await self.lifecycle.probes.stop(engine.name)
            self.lifecycle.stopped(engine, "exited")
        return True

    # -- the background loops' steps --

    async def follow_events(self) -> float:
        loop = asyncio.get_running_loop()
        self.dirty.set()  # what happened while the stream was not read is found by a full listing

        def on_event(action: str, backend: str) -> None:
            loop.call_soon_threadsafe(self.dirty.set)

        await asyncio.to_thread(self._api().follow_events, on_event, self.stop_events)
        return EVENT_RECONNECT_S

    def reconnect(self, exc: Exception) -> float:
        self.dirty.set()  # events may have been missed while the stream was down
        return EVENT_RECONNECT_S

    async def resync(self) -> float:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.dirty.wait(), self.resync_s)
        self.dirty.clear()
        await self.sync()
        return 0.0

    def resync_failed(self, exc: Exception) -> float:
        self.dirty.set()  # list again after the pause, not a whole resync_s later
        return 1.0


def _settled(engine: Engine) -> int | None:
    """The engine's count of starts and stops when a listing is asked, None while one is under way: a
    listing asked then may be answered from before the container started (podman lists a container
    created and not yet started as exited), so only one asked after it says anything of the engine."""
    return None if engine.running_op is not None else engine.ops
