"""Which engine a backend's saved state describes: its name, its URL and the models it serves.

The live-measurement snapshots (stats/snapshot.py) and the learned warm-ups (backends/warmup.py) are both
restored only into the configured backend of the same identity: a name alone does not say it is the same
engine (a twin fleet and a real Spark both call theirs `fp8-mtp`), and another engine's timings would
mislead until they aged out. Both files spell an identity the same way (`identity_json`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.redact import without_credentials


@dataclass(frozen=True, slots=True)
class BackendIdentity:
    """Which engine a backend's measurements describe: its name, its URL and the models it serves."""

    name: str
    url: str  # without user:password, which is no part of the engine's identity and no file's business
    served: tuple[str, ...]  # the model names the gateway sends it, sorted

    def describe(self) -> str:
        return f"{self.name!r} ({self.url}, serving {', '.join(self.served) or 'no pool'})"


def identity(name: str, url: str, served: Iterable[str]) -> BackendIdentity:
    return BackendIdentity(name, without_credentials(url), tuple(sorted(set(served))))


def identity_json(known: BackendIdentity) -> dict[str, Any]:
    return {"name": known.name, "url": known.url, "served": list(known.served)}


def identity_from_json(raw: Any) -> BackendIdentity | None:
    """The identity `identity_json` wrote, or None for anything malformed."""
    if not isinstance(raw, dict):
        return None
    name, url, served = raw.get("name"), raw.get("url"), raw.get("served")
    if not isinstance(name, str) or not isinstance(url, str) or not isinstance(served, list):
        return None
    if not all(isinstance(model, str) for model in served):
        return None
    return BackendIdentity(name, url, tuple(served))
