"""Recorder snapshots: save the live windows to the state directory and load them at start.

A restarted gateway should not route blind for the first ten minutes, so the newest samples of every cell
are written as JSON (periodically and at shutdown) and read back at start. Timestamps are wall-clock epoch
seconds, so samples that were already old when the gateway stopped age out of the windows as usual.
Writes are atomic (temp file in the same directory, fsync, os.replace): a crash mid-write leaves the
previous snapshot intact, never a truncated one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gateway.stats.live import LiveRecorder, Sample
from gateway.tasks import BackgroundTask

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FILE_NAME = "live-stats.json"


def encode(recorder: LiveRecorder, now: float, keep_per_cell: int) -> bytes:
    """The newest `keep_per_cell` samples of every live cell as JSON bytes."""
    cells = []
    for backend, profile, entries in recorder.cells(now):
        newest = entries[-keep_per_cell:] if keep_per_cell > 0 else ()
        samples = [{"at": at, **asdict(sample)} for at, sample in newest]
        cells.append({"backend": backend, "profile": profile, "samples": samples})
    document = {"version": FORMAT_VERSION, "saved_at": now, "cells": cells}
    return json.dumps(document, separators=(",", ":")).encode()


def decode(data: bytes) -> list[tuple[str, str, float, Sample]]:
    """(backend, profile, recorded_at, sample) rows, oldest first; malformed rows are skipped."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError("unknown snapshot format")
    rows: list[tuple[str, str, float, Sample]] = []
    for cell in document.get("cells", []):
        backend, profile = cell.get("backend"), cell.get("profile")
        if not isinstance(backend, str) or not isinstance(profile, str):
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
        ttft, itl = raw.get("ttft"), raw.get("mean_itl")
        sample = Sample(
            e2e=float(raw["e2e"]),
            ttft=None if ttft is None else float(ttft),
            output_tokens=int(raw["output_tokens"]),
            prompt_tokens=int(raw["prompt_tokens"]),
            concurrency=int(raw["concurrency"]),
            error=bool(raw.get("error", False)),
            mean_itl=None if itl is None else float(itl),
            device_share=float(raw.get("device_share", 0.0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return (at, sample) if math.isfinite(at) and math.isfinite(sample.e2e) else None


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so readers see either the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def save(recorder: LiveRecorder, state_dir: Path, now: float, keep_per_cell: int = 64) -> Path:
    path = Path(state_dir) / FILE_NAME
    write_atomic(path, encode(recorder, now, keep_per_cell))
    return path


def load(recorder: LiveRecorder, state_dir: Path, now: float) -> int:
    """Record the snapshot's samples that are still inside the window; returns how many were restored.

    A missing file is a first start; an unreadable one is logged and ignored, because routing on
    gateway-side measurements from scratch is always a safe fallback.
    """
    path = Path(state_dir) / FILE_NAME
    try:
        rows = decode(path.read_bytes())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable stats snapshot %s: %s", path, exc)
        return 0
    horizon = now - recorder.max_age_s
    restored = 0
    for backend, profile, at, sample in rows:
        if horizon <= at <= now:  # future timestamps mean a clock jump: not trustworthy
            recorder.record(backend, profile, sample, now=at)
            restored += 1
    return restored


class SnapshotSaver:
    """Saves the recorder every `interval_s` on one asyncio task, and once more at stop()."""

    def __init__(
        self,
        recorder: LiveRecorder,
        state_dir: Path,
        *,
        interval_s: float = 60.0,
        keep_per_cell: int = 64,
    ) -> None:
        self._recorder = recorder
        self._state_dir = Path(state_dir)
        self._interval_s = interval_s
        self._keep = keep_per_cell
        self._task = BackgroundTask(self._run, name="stats-snapshot")

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()
        await self.save_now()

    async def save_now(self) -> None:
        # Encode on the loop (the recorder is not thread-safe), write off the loop (fsync can be slow).
        data = encode(self._recorder, self._recorder.now(), self._keep)
        await asyncio.to_thread(write_atomic, self._state_dir / FILE_NAME, data)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.save_now()
            except OSError as exc:  # a full disk must not kill the gateway; the next round retries
                log.warning("stats snapshot failed: %s", exc)
