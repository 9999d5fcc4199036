"""A Docker Engine API stand-in for the lifecycle benchmark: containers that take a simulated time to load
(their engine's cold start, +-15% per start) and hold a footprint while running, on the simulated clock.

It answers the engine manager exactly where the real API would (engines/docker_api.py's methods) and the
prober's readiness GETs (a refused connection while loading, 200 once loaded), and keeps the books the
benchmark reports: starts, the memory of running containers against the device budget (peak, overruns).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from gateway.engines import labels
from gateway.engines.docker_api import Container
from gateway.settings import EngineConfig


@dataclass
class _Box:
    spec: EngineConfig
    running: bool = False
    ready_at: float = float("inf")


class SimDocker:
    def __init__(self, clock: Callable[[], float], budget_gib: float, rng: random.Random) -> None:
        self.clock = clock
        self.budget_gib = budget_gib
        self.rng = rng
        self.boxes: dict[str, _Box] = {}
        self.starts = 0
        self.peak_gib = 0.0
        self.overruns = 0  # starts that took the running containers' memory over the budget
        self._lock = threading.Lock()  # calls come from the manager's worker threads

    # -- the Docker API, as engines/docker_api.py's DockerApi --

    def __call__(self, base_url: str | None) -> SimDocker:
        return self  # the manager's factory: `api(docker_url)`

    def ping(self) -> bool:
        return True

    def labelled(self) -> list[Container]:
        with self._lock:
            return [
                Container(cid, cid, box.running, labels.of_engine(box.spec))
                for cid, box in self.boxes.items()
            ]

    def create(self, engine: EngineConfig) -> str:
        with self._lock:
            cid = f"sim-{engine.name}"
            self.boxes[cid] = _Box(engine)
            return cid

    def exists(self, container_id: str) -> bool:
        return container_id in self.boxes

    def start(self, container_id: str) -> None:
        with self._lock:
            box = self.boxes[container_id]
            warmup = box.spec.warmup_s or 0.0
            box.running, box.ready_at = True, self.clock() + warmup * self.rng.uniform(0.85, 1.15)
            self.starts += 1
            resident = sum(b.spec.memory_gib for b in self.boxes.values() if b.running)
            self.peak_gib = max(self.peak_gib, resident)
            self.overruns += resident > self.budget_gib + 1e-9

    def stop(self, container_id: str, timeout_s: float) -> None:
        with self._lock:
            box = self.boxes[container_id]
            box.running, box.ready_at = False, float("inf")

    def remove(self, container_id: str) -> None:
        with self._lock:
            self.boxes.pop(container_id, None)

    def follow_events(self, on_event: Callable[[str, str], None], stop: threading.Event) -> None:
        stop.wait()  # nothing changes by hand here: the stream is quiet until the run ends

    def close(self) -> None:
        pass

    # -- the engines' HTTP surface, as the prober's `Fetch` --

    async def fetch(self, url: str, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        parts = urlsplit(url)
        box = self._listening(parts.port)
        if box is None or self.clock() < box.ready_at:
            raise ConnectionRefusedError(f"nothing answers on port {parts.port} yet")
        if parts.path == "/v1/models":
            served = box.spec.served_name or box.spec.model
            return 200, orjson.dumps({"data": [{"id": served, "max_model_len": 32768}]})
        return 200, b""

    def _listening(self, port: int | None) -> _Box | None:
        for box in self.boxes.values():
            if box.running and box.spec.port == port:
                return box
        return None
