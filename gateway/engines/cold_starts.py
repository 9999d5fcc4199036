"""Measured cold starts of engines, kept across restarts in `engine-cold-starts.json` in the gateway's
state directory (none: nothing is persisted).

Engines are backends added at run time, so the learned warm-ups of backends/warmup.py (configured
backends only) do not cover them; yet their cold start is what the eviction cost, the start-or-serve
choice and a waiting request's Retry-After are made of, and it takes one start (5 to 20 minutes on a
Spark) to measure. Like the other state files, samples are restored only into an engine of the same
identity (name, URL, served model: backends/identity.py), and written whole and atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gateway.backends.identity import BackendIdentity, identity, identity_from_json, identity_json
from gateway.engines.engine import COLD_STARTS_KEPT, Engine
from gateway.state_files import write_atomic

log = logging.getLogger("gateway.engines")

FILE_NAME = "engine-cold-starts.json"
FORMAT_VERSION = 1
MAX_COLD_START_S = 3600.0  # longer was downtime (left down until someone came), not loading


def engine_identity(engine: Engine) -> BackendIdentity:
    served = engine.spec.served_name if engine.spec is not None and engine.spec.served_name else engine.model
    return identity(engine.name, engine.backend.url, [served])


class ColdStartFile:
    def __init__(self, state_dir: Path | None) -> None:
        self.path = Path(state_dir) / FILE_NAME if state_dir is not None else None
        self._saved: dict[BackendIdentity, list[float]] = self._load()

    def restore(self, engine: Engine) -> None:
        """The engine's saved cold starts, if it is the same engine that made them."""
        samples = self._saved.get(engine_identity(engine))
        if samples and not engine.cold_starts:
            engine.cold_starts.extend(samples)
            engine.cold_start_s = samples[-1]

    def save(self, engines: Iterable[Engine]) -> None:
        """Once per measured cold start: small, written at once on the caller's thread."""
        for engine in engines:
            if engine.cold_starts:
                self._saved[engine_identity(engine)] = list(engine.cold_starts)
        if self.path is None:
            return
        entries = [{**identity_json(known), "samples": samples} for known, samples in self._saved.items()]
        document = {"version": FORMAT_VERSION, "engines": entries}
        try:
            write_atomic(self.path, json.dumps(document, separators=(",", ":")).encode())
        except OSError as exc:  # an unwritable state dir costs the memory of cold starts, nothing else
            log.warning("could not save engine cold starts to %s: %s", self.path, exc)

    def _load(self) -> dict[BackendIdentity, list[float]]:
        if self.path is None:
            return {}
        try:
            document = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable engine cold-start file %s: %s", self.path, exc)
            return {}
        return _decode(document)


def _decode(document: Any) -> dict[BackendIdentity, list[float]]:
    """Saved identity -> cold starts, oldest first; anything malformed is skipped."""
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        return {}
    entries = document.get("engines")
    out: dict[BackendIdentity, list[float]] = {}
    for entry in entries if isinstance(entries, list) else []:
        known = identity_from_json(entry)
        raw = entry.get("samples") if isinstance(entry, dict) else None
        if known is None or not isinstance(raw, list):
            continue
        samples = [s for s in (_seconds(value) for value in raw) if s is not None]
        if samples:
            out[known] = samples[-COLD_STARTS_KEPT:]
    return out


def _seconds(value: Any) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        seconds = float(value)
        if math.isfinite(seconds) and 0 < seconds <= MAX_COLD_START_S:
            return seconds
    return None
