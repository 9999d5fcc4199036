"""A state file of durations measured per backend (warm-ups, engine cold starts), kept across restarts:
`{"version": 1, SECTION: [{identity..., "samples": [seconds, ...]}, ...]}`, keyed by the backend's
identity (name, URL, served models: backends/identity.py) so samples are restored only into the same
backend, written whole and atomically (state_files.py). A missing, unreadable or foreign file, and any
malformed entry or sample, is skipped: it costs what was learned, nothing else."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gateway.backends.identity import BackendIdentity, identity_from_json, identity_json
from gateway.state_files import write_atomic

FORMAT_VERSION = 1


class SamplesFile:
    def __init__(
        self, path: Path | None, section: str, kept: int, max_s: float, what: str, log: logging.Logger
    ) -> None:
        self.path = path  # None: nothing is persisted
        self.section = section
        self.kept = kept  # the newest samples kept per backend
        self.max_s = max_s  # longer is not a duration of this kind (downtime, say): dropped
        self.what = what  # for the log: "warm-ups", "engine cold starts"
        self.log = log

    def load(self) -> dict[BackendIdentity, list[float]]:
        """Saved identity -> its samples, oldest first."""
        if self.path is None:
            return {}
        try:
            document = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.log.warning("ignoring unreadable %s file %s: %s", self.what, self.path, exc)
            return {}
        return self._decode(document)

    def save(self, samples: Mapping[BackendIdentity, Iterable[float]]) -> None:
        """Written at once on the caller's thread: it is small, and written once per measurement."""
        if self.path is None:
            return
        entries = [{**identity_json(known), "samples": list(values)} for known, values in samples.items()]
        document = {"version": FORMAT_VERSION, self.section: [e for e in entries if e["samples"]]}
        try:
            write_atomic(self.path, json.dumps(document, separators=(",", ":")).encode())
        except OSError as exc:  # an unwritable state dir costs what was learned, nothing else
            self.log.warning("could not save %s to %s: %s", self.what, self.path, exc)

    def _decode(self, document: Any) -> dict[BackendIdentity, list[float]]:
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            return {}
        entries = document.get(self.section)
        out: dict[BackendIdentity, list[float]] = {}
        for entry in entries if isinstance(entries, list) else []:
            known = identity_from_json(entry)
            raw = entry.get("samples") if isinstance(entry, dict) else None
            if known is None or not isinstance(raw, list):
                continue
            samples = [s for s in (self._seconds(value) for value in raw) if s is not None]
            if samples:
                out[known] = samples[-self.kept :]
        return out

    def _seconds(self, value: Any) -> float | None:
        with contextlib.suppress(TypeError, ValueError):
            seconds = float(value)
            if math.isfinite(seconds) and 0 < seconds <= self.max_s:
                return seconds
        return None
