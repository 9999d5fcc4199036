"""Recorder snapshots: bounded, atomic, and a restart resumes with the still-fresh samples."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gateway.stats import snapshot
from gateway.stats.live import LiveRecorder, Sample

NOW = 1_760_000_000.0  # wall-clock epoch seconds


def _sample(i: int, error: bool = False) -> Sample:
    return Sample(
        e2e=2.0 + i,
        ttft=0.25,
        output_tokens=100 + i,
        prompt_tokens=2048,
        concurrency=1 + i % 4,
        error=error,
        mean_itl=0.05 if i % 2 else None,
    )


def _filled() -> LiveRecorder:
    rec = LiveRecorder()
    for i in range(10):
        rec.record("mtp", "chat", _sample(i, error=i == 3), now=NOW - 100 + i)
    rec.record("plain", "long", _sample(0), now=NOW - 50)
    return rec


def test_round_trip_restores_every_sample_and_timestamp(tmp_path: Path) -> None:
    original = _filled()
    snapshot.save(original, tmp_path, now=NOW)
    restored = LiveRecorder()
    assert snapshot.load(restored, tmp_path, now=NOW) == 11
    assert restored.entries("mtp", "chat", now=NOW) == original.entries("mtp", "chat", now=NOW)
    assert restored.summary("plain", "long", now=NOW) == original.summary("plain", "long", now=NOW)


def test_snapshot_keeps_only_the_newest_samples_per_cell(tmp_path: Path) -> None:
    path = snapshot.save(_filled(), tmp_path, now=NOW, keep_per_cell=3)
    restored = LiveRecorder()
    snapshot.load(restored, tmp_path, now=NOW)
    assert [s.e2e for s in restored.samples("mtp", "chat", now=NOW)] == [9.0, 10.0, 11.0]
    document = json.loads(path.read_text())
    assert document["saved_at"] == NOW and document["version"] == 1


def test_samples_older_than_the_window_age_out_after_load(tmp_path: Path) -> None:
    snapshot.save(_filled(), tmp_path, now=NOW)
    restored = LiveRecorder(max_age_s=90.0)
    assert snapshot.load(restored, tmp_path, now=NOW + 30) == 1  # "plain" is 80 s old, "mtp" 121+ s
    assert restored.summary("mtp", "chat", now=NOW + 30).count == 0
    assert restored.summary("plain", "long", now=NOW + 30).count == 1
    assert restored.summary("plain", "long", now=NOW + 41).count == 0  # ages out as usual


def test_failed_write_leaves_the_previous_snapshot_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = snapshot.save(_filled(), tmp_path, now=NOW)
    before = path.read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    empty = LiveRecorder()
    with pytest.raises(OSError):
        snapshot.save(empty, tmp_path, now=NOW + 1)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot.FILE_NAME]


def test_missing_or_corrupt_snapshot_starts_empty(tmp_path: Path) -> None:
    rec = LiveRecorder()
    assert snapshot.load(rec, tmp_path, now=NOW) == 0
    (tmp_path / snapshot.FILE_NAME).write_text('{"version": 1, "cells": [')
    assert snapshot.load(rec, tmp_path, now=NOW) == 0
    assert len(rec) == 0


def test_malformed_rows_are_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    good = {"at": NOW - 1, "e2e": 1.0, "ttft": 0.1, "output_tokens": 10, "prompt_tokens": 5, "concurrency": 1}
    bad = {"at": NOW - 1, "e2e": "slow"}
    document = {"version": 1, "cells": [{"backend": "b", "profile": "p", "samples": [good, bad]}]}
    (tmp_path / snapshot.FILE_NAME).write_text(json.dumps(document))
    rec = LiveRecorder()
    assert snapshot.load(rec, tmp_path, now=NOW) == 1


async def test_saver_writes_periodically_and_at_stop(tmp_path: Path) -> None:
    t = [NOW]
    rec = LiveRecorder(clock=lambda: t[0])
    saver = snapshot.SnapshotSaver(rec, tmp_path, interval_s=0.05)
    saver.start()
    rec.record("b", "p", _sample(0))
    await asyncio.sleep(0.12)
    assert (tmp_path / snapshot.FILE_NAME).exists()
    rec.record("b", "p", _sample(1))
    await asyncio.wait_for(saver.stop(), timeout=2.0)
    restored = LiveRecorder(clock=lambda: t[0])
    assert snapshot.load(restored, tmp_path, now=NOW) == 2
