"""The `engines:`, `devices:` and `engine_control:` sections: engine containers run on demand
(gateway/engines/, docs/engines.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.settings.backends import Flavor
from gateway.settings.strict import Strict


class EngineConfig(Strict):
    """A managed engine (gateway/engines/, docs/engines.md): the container the gateway creates, starts when
    a request needs it and stops after its idle TTL, within its device's memory budget."""

    name: str = Field(min_length=1, description="also the backend's name")
    model: str = Field(min_length=1, description="the model name clients send (its pool)")
    served_name: str | None = Field(default=None, description="the name the engine serves, if different")
    image: str = Field(min_length=1)
    command: tuple[str, ...] = ()
    environment: dict[str, str] = Field(default_factory=dict)
    # host path -> container path, with ":ro" appended for a read-only mount
    volumes: dict[str, str] = Field(default_factory=dict)
    # Docker device requests as the Engine API takes them, e.g. {driver: nvidia, count: -1,
    # capabilities: [[gpu]]}
    device_requests: tuple[dict[str, Any], ...] = ()
    working_dir: str | None = None
    port: int = Field(ge=1, le=65535, description="where it listens on 127.0.0.1 (host network)")
    flavor: Flavor = "vllm"
    max_concurrency: int | None = Field(default=None, ge=1)
    memory_gib: float = Field(gt=0, description="its resident footprint on its device")
    device: str = Field(default="spark", min_length=1)
    warmup_s: float | None = Field(default=None, gt=0, description="warm-up budget: start to ready")
    pinned: bool = False  # never evicted, never stopped for idleness
    idle_ttl_s: float | None = Field(default=600.0, gt=0, description="None: never stopped when idle")


class DeviceConfig(Strict):
    memory_gib: float = Field(gt=0, description="what resident engines may use together")


class EngineControl(Strict):
    """How the gateway drives engine containers (the `engine_control:` section)."""

    # The Docker Engine API (docker or podman's); None: DOCKER_HOST, else the default socket.
    docker_url: str | None = None
    min_residency_s: float = Field(default=60.0, ge=0, description="a started engine stays this long")
    drain_timeout_s: float = Field(default=30.0, ge=0, description="longest wait for in-flight to end")
    stop_timeout_s: float = Field(default=10.0, ge=0, description="SIGTERM to SIGKILL")
    resync_s: float = Field(default=30.0, gt=0, description="full container listing, besides events")
    # A start that must evict gathers the requests for its model this long at most, until they outweigh
    # what the eviction costs the victims' clients (engines/budget.py); 0: it evicts at once.
    batch_wait_s: float = Field(default=900.0, ge=0, description="longest wait to batch a swap's requests")
