"""Recorder snapshots: save the live windows to the state directory and load them at start.

A restarted gateway should not route blind for the first ten minutes, so the newest samples of every cell
are written as JSON (periodically and at shutdown) and read back at start. Timestamps are wall-clock epoch
seconds, so samples that were already old when the gateway stopped age out of the windows as usual.
Writes are atomic (temp file in the same directory, fsync, os.replace): a crash mid-write leaves the
previous snapshot intact, never a truncated one.

Each cell is saved with its backend's identity (name, URL, served models), and a cell is restored only
into the configured backend of the same identity: a name alone does not say it is the same engine (a
twin fleet and a real Spark both call theirs `fp8-mtp`), and another engine's timings would steer
routing wrong until they aged out (the identity: gateway/backends/identity.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gateway.backends.identity import BackendIdentity, identity_from_json, identity_json
from gateway.records import Sample
from gateway.state_files import write_atomic
from gateway.stats.live import LiveRecorder
from gateway.tasks import BackgroundTask

log = logging.getLogger(__name__)

# 2: cells keyed by backend identity; 1 keyed them by name alone and is ignored.
FORMAT_VERSION = 2
FILE_NAME = "live-stats.json"


Identities = Mapping[str, BackendIdentity]  # configured backend name -> its identity
Row = tuple[BackendIdentity, str, float, Sample]  # (identity, profile, recorded_at, sample)


def encode(recorder: LiveRecorder, now: float, keep_per_cell: int, identities: Identities) -> bytes:
    """The newest `keep_per_cell` samples of every live cell of a known backend as JSON bytes."""
    cells = []
    for backend, profile, entries in recorder.cells(now):
        known = identities.get(backend)
        if known is None:
            continue  # no configured backend of that name: nothing could restore it
        newest = entries[-keep_per_cell:] if keep_per_cell > 0 else ()
        samples = [{"at": at, **asdict(sample)} for at, sample in newest]
        cells.append({"backend": identity_json(known), "profile": profile, "samples": samples})
    document = {"version": FORMAT_VERSION, "saved_at": now, "cells": cells}
    return json.dumps(document, separators=(",", ":")).encode()


def decode(data: bytes) -> list[Row]:
    """(identity, profile, recorded_at, sample) rows, oldest first; malformed rows are skipped. Raises
    ValueError for a document of another format version."""
    document = json.loads(data)
    version = document.get("version") if isinstance(document, dict) else None
    if version != FORMAT_VERSION:
        raise ValueError(f"snapshot format version {version!r}, this gateway reads {FORMAT_VERSION}")
    rows: list[Row] = []
    for cell in document.get("cells", []):
        backend, profile = identity_from_json(cell.get("backend")), cell.get("profile")
        if backend is None or not isinstance(profile, str):
            continue
        for raw in cell.get("samples", []):
            parsed = _sample(raw)
            if parsed is not None:
                rows.append((backend, profile, *parsed))
    rows.sort(key=lambda row: row[2])
    return rows


def _sample(raw: Any) -> tuple[float, Sample] | None:
    try:
        at = float(raw["at"])
        ttft, itl, trimmed = raw.get("ttft"), raw.get("mean_itl"), raw.get("trimmed_itl")
        load = raw.get("mean_load")
        sample = Sample(
            e2e=float(raw["e2e"]),
            ttft=None if ttft is None else float(ttft),
            output_tokens=int(raw["output_tokens"]),
            prompt_tokens=int(raw["prompt_tokens"]),
            concurrency=int(raw["concurrency"]),
            error=bool(raw.get("error", False)),
            mean_itl=None if itl is None else float(itl),
            trimmed_itl=None if trimmed is None else float(trimmed),
            device_share=float(raw.get("device_share", 0.0)),
            repetition=float(raw.get("repetition", 0.0)),
            mean_load=None if load is None else float(load),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return (at, sample) if math.isfinite(at) and math.isfinite(sample.e2e) else None


def save(
    recorder: LiveRecorder, state_dir: Path, now: float, identities: Identities, keep_per_cell: int = 64
) -> Path:
    path = Path(state_dir) / FILE_NAME
    write_atomic(path, encode(recorder, now, keep_per_cell, identities))
    return path


def load(recorder: LiveRecorder, state_dir: Path, now: float, identities: Identities) -> int:
    """Record the snapshot's samples that are still inside the window and belong to a configured backend
    of the same identity; returns how many were restored.

    A missing file is a first start; an unreadable one, or one of another format, is logged and ignored,
    because routing on gateway-side measurements from scratch is always a safe fallback. So is a cell of
    a backend the config no longer has (or has at another URL, or serving another model): it is dropped,
    with one log line per backend.
    """
    path = Path(state_dir) / FILE_NAME
    try:
        rows = decode(path.read_bytes())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        log.warning("ignoring stats snapshot %s: %s", path, exc)
        return 0
    kept = [row for row in rows if identities.get(row[0].name) == row[0]]
    _log_dropped(path, [row for row in rows if identities.get(row[0].name) != row[0]], identities)
    horizon = now - recorder.max_age_s
    restored = 0
    for known, profile, at, sample in kept:
        if horizon <= at <= now:  # future timestamps mean a clock jump: not trustworthy
            recorder.record(known.name, profile, sample, now=at)
            restored += 1
    return restored


def _log_dropped(path: Path, dropped: list[Row], identities: Identities) -> None:
    profiles: dict[BackendIdentity, set[str]] = {}
    for saved, profile, _, _ in dropped:
        profiles.setdefault(saved, set()).add(profile)
    for saved, names in profiles.items():
        configured = identities.get(saved.name)
        now_is = f"configured as {configured.describe()}" if configured else "not configured"
        log.warning(
            "dropping saved live stats of backend %s, profiles %s, from %s: that backend is %s",
            saved.describe(),
            ", ".join(sorted(names)),
            path,
            now_is,
        )


class SnapshotSaver:
    """Saves the recorder every `interval_s` on one asyncio task, and once more at stop()."""

    def __init__(
        self,
        recorder: LiveRecorder,
        state_dir: Path,
        identities: Identities,
        *,
        interval_s: float = 60.0,
        keep_per_cell: int = 64,
    ) -> None:
        self._recorder = recorder
        self._state_dir = Path(state_dir)
        self._identities = identities
        self._interval_s = interval_s
        self._keep = keep_per_cell
        # A failed save (a full disk, a sample that does not encode) is logged once per distinct error;
        # the previous snapshot stays intact on disk (atomic writes) and the next round tries again.
        self._task = BackgroundTask(
            self.save_now,
            name="stats-snapshot",
            on_error=lambda exc: interval_s,
            logger=log,
            delay_s=interval_s,
        )

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()
        await self.save_now()

    async def save_now(self) -> float:
        """Save now; returns the seconds until the next periodic save."""
        # Encode on the loop (the recorder is not thread-safe), write off the loop (fsync can be slow).
        data = encode(self._recorder, self._recorder.now(), self._keep, self._identities)
        await asyncio.to_thread(write_atomic, self._state_dir / FILE_NAME, data)
        return self._interval_s
