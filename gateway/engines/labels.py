"""The container labels that make a container a gateway backend, both ways: read from a found container,
written on a container the gateway creates for a managed engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from gateway.settings import EngineConfig, Flavor

PREFIX = "spark-gateway."
BACKEND = PREFIX + "backend"  # the backend's name; the one label a container must carry
MODEL = PREFIX + "model"
FLAVOR = PREFIX + "flavor"
PORT = PREFIX + "port"
MEMORY_GB = PREFIX + "memory-gb"
DEVICE = PREFIX + "device"
MANAGED = PREFIX + "managed"  # "true" on the containers the gateway created from its config

_FLAVORS: tuple[str, ...] = get_args(Flavor)


@dataclass(frozen=True, slots=True)
class Labelled:
    """What a container's labels say about the backend it runs."""

    name: str
    model: str
    flavor: Flavor
    port: int
    memory_gib: float
    device: str | None
    managed: bool


def read(labels: dict[str, str]) -> Labelled | str:
    """The backend a container's labels describe, or why they describe none."""
    name = labels.get(BACKEND, "").strip()
    if not name:
        return f"no {BACKEND} label"
    flavor = labels.get(FLAVOR, "vllm")
    if flavor not in _FLAVORS:
        return f"{FLAVOR}={flavor!r} is none of {', '.join(_FLAVORS)}"
    try:
        port = int(labels.get(PORT, ""))
        memory = float(labels.get(MEMORY_GB, "0"))
    except ValueError:
        return f"{PORT} must be an integer and {MEMORY_GB} a number"
    if not 0 < port < 65536 or memory < 0:
        return f"{PORT} must be 1-65535 and {MEMORY_GB} at least 0"
    return Labelled(
        name=name,
        model=labels.get(MODEL) or name,
        flavor=flavor,  # type: ignore[arg-type]  # checked against Flavor's values above
        port=port,
        memory_gib=memory,
        device=labels.get(DEVICE) or None,
        managed=labels.get(MANAGED) == "true",
    )


def of_engine(engine: EngineConfig) -> dict[str, str]:
    """The labels of a managed engine's container, so a restarted gateway finds it again."""
    return {
        BACKEND: engine.name,
        MODEL: engine.model,
        FLAVOR: engine.flavor,
        PORT: str(engine.port),
        MEMORY_GB: f"{engine.memory_gib:g}",
        DEVICE: engine.device,
        MANAGED: "true",
    }
