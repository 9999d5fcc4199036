"""Measured cold starts of engines, kept across restarts in `engine-cold-starts.json` in the gateway's
state directory (none: nothing is persisted).

Engines are backends added at run time, so the learned warm-ups of backends/warmup.py (configured
backends only) do not cover them; yet their cold start is what the eviction cost, the start-or-serve
choice and a waiting request's Retry-After are made of, and it takes one start (5 to 20 minutes on a
Spark) to measure. Like the other state files, samples are restored only into an engine of the same
identity (name, URL, served model: backends/identity.py), and written whole and atomically: the
file is a backends/samples_file.py `SamplesFile`, as warmup.json is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from gateway.backends.identity import BackendIdentity, identity
from gateway.backends.samples_file import SamplesFile
from gateway.engines.engine import COLD_STARTS_KEPT, Engine

log = logging.getLogger("gateway.engines")

FILE_NAME = "engine-cold-starts.json"
MAX_COLD_START_S = 3600.0  # longer was downtime (left down until someone came), not loading


def engine_identity(engine: Engine) -> BackendIdentity:
    served = engine.spec.served_name if engine.spec is not None and engine.spec.served_name else engine.model
    return identity(engine.name, engine.backend.url, [served])


class ColdStartFile:
    def __init__(self, state_dir: Path | None) -> None:
        path = Path(state_dir) / FILE_NAME if state_dir is not None else None
        kept, longest = COLD_STARTS_KEPT, MAX_COLD_START_S
        self._file = SamplesFile(path, "engines", kept, longest, "engine cold-start", log)
        self._saved: dict[BackendIdentity, list[float]] = self._file.load()

    def restore(self, engine: Engine) -> None:
        """The engine's saved cold starts, if it is the same engine that made them."""
        samples = self._saved.get(engine_identity(engine))
        if samples and not engine.cold_starts:
            engine.cold_starts.extend(samples)
            engine.cold_start_s = samples[-1]

    def save(self, engines: Iterable[Engine]) -> None:
        """Once per measured cold start."""
        for engine in engines:
            if engine.cold_starts:
                self._saved[engine_identity(engine)] = list(engine.cold_starts)
        self._file.save(self._saved)
