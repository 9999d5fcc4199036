"""The Docker Engine API (Docker's or podman's), through the official `docker` SDK.

Every call blocks, so the manager runs them in a worker thread. The SDK is imported only here and only
when engines are in use, so a gateway without engines starts without it installed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.engines import labels
from gateway.settings import EngineConfig

log = logging.getLogger("gateway.engines")


class DockerMissing(RuntimeError):
    """Engines are configured but the `docker` package is not installed."""


@dataclass(frozen=True, slots=True)
class Container:
    """One labelled container as plain data."""

    id: str
    name: str
    running: bool
    labels: dict[str, str]


def _docker() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerMissing("engines need the `docker` package: pip install docker") from exc
    return docker


class DockerApi:
    def __init__(self, base_url: str | None = None) -> None:
        docker = _docker()
        self._client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        self._errors = docker.errors

    def ping(self) -> bool:
        return bool(self._client.ping())

    def labelled(self) -> list[Container]:
        """Every container carrying the backend label, running or not."""
        found = self._client.containers.list(all=True, filters={"label": labels.BACKEND})
        return [
            Container(c.id, c.name, c.status == "running", dict(c.labels or {}))
            for c in found
            if labels.BACKEND in (c.labels or {})
        ]

    def create(self, engine: EngineConfig) -> str:
        """Create (not start) a managed engine's container; its id."""
        docker = _docker()
        requests = [docker.types.DeviceRequest(**r) for r in engine.device_requests]
        container = self._client.containers.create(
            engine.image,
            list(engine.command) or None,
            name=f"spark-gateway-{engine.name}",
            labels=labels.of_engine(engine),
            environment=dict(engine.environment),
            volumes=_volumes(engine.volumes),
            device_requests=requests or None,
            working_dir=engine.working_dir,
            # Host networking keeps the engine on 127.0.0.1:port; init forwards SIGTERM to the server.
            network_mode="host",
            init=True,
        )
        return str(container.id)

    def start(self, container_id: str) -> None:
        self._client.containers.get(container_id).start()

    def stop(self, container_id: str, timeout_s: float) -> None:
        self._client.containers.get(container_id).stop(timeout=max(0, round(timeout_s)))

    def remove(self, container_id: str) -> None:
        self._client.containers.get(container_id).remove(force=True)

    def exists(self, container_id: str) -> bool:
        try:
            self._client.containers.get(container_id)
        except self._errors.NotFound:
            return False
        return True

    def follow_events(self, on_event: Callable[[str, str], None], stop: threading.Event) -> None:
        """Call `on_event(action, backend)` for each event of a labelled container until `stop` is set or
        the stream ends (the caller reconnects). The label is filtered here: podman's API ignores a label
        filter on events."""
        stream = self._client.events(decode=True, filters={"type": "container"})
        ended = threading.Event()

        def close_on_stop() -> None:  # a blocking read ends only when its stream is closed
            while not ended.is_set():
                if stop.wait(0.2):
                    stream.close()
                    return

        threading.Thread(target=close_on_stop, daemon=True, name="engine-events-closer").start()
        try:
            for event in stream:
                attributes = (event.get("Actor") or {}).get("Attributes") or {}
                backend = attributes.get(labels.BACKEND)
                if backend:
                    on_event(str(event.get("Action") or event.get("status") or ""), backend)
                if stop.is_set():
                    return
        finally:
            ended.set()
            stream.close()

    def close(self) -> None:
        self._client.close()


def _volumes(volumes: dict[str, str]) -> dict[str, dict[str, str]]:
    """{host: "container[:ro]"} as the SDK takes it."""
    out = {}
    for host, target in volumes.items():
        path, _, mode = target.partition(":")
        out[host] = {"bind": path, "mode": mode or "rw"}
    return out
