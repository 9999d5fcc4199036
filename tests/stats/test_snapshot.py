"""Recorder snapshots: bounded, atomic, a restart resumes with the still-fresh samples, and only into the
backend of the same identity (name, URL, served models)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from gateway.backends.identity import identity
from gateway.records import Sample
from gateway.stats import snapshot
from gateway.stats.live import LiveRecorder

NOW = 1_760_000_000.0  # wall-clock epoch seconds
IDS = {
    name: identity(name, f"http://127.0.0.1:{port}", ["qwen"])
    for name, port in (("mtp", 8102), ("plain", 8101), ("b", 8103))
}


def _sample(i: int, error: bool = False) -> Sample:
    return Sample(
        e2e=2.0 + i,
        ttft=0.25,
        output_tokens=100 + i,
        prompt_tokens=2048,
        concurrency=1 + i % 4,
        error=error,
        mean_itl=0.05 if i % 2 else None,
        trimmed_itl=0.04 if i % 2 else None,
        device_share=0.25 * (i % 3),
        repetition=0.1 * (i % 5),
        mean_load=None if i % 2 else 1.5 + i,
    )


def _filled() -> LiveRecorder:
    rec = LiveRecorder()
    for i in range(10):
        rec.record("mtp", "chat", _sample(i, error=i == 3), now=NOW - 100 + i)
    rec.record("plain", "long", _sample(0), now=NOW - 50)
    return rec


def test_round_trip_restores_every_sample_and_timestamp(tmp_path: Path) -> None:
    original = _filled()
    snapshot.save(original, tmp_path, NOW, IDS)
    restored = LiveRecorder()
    assert snapshot.load(restored, tmp_path, NOW, IDS) == 11
    assert restored.entries("mtp", "chat", now=NOW) == original.entries("mtp", "chat", now=NOW)
    assert restored.summary("plain", "long", now=NOW) == original.summary("plain", "long", now=NOW)


def test_snapshot_keeps_only_the_newest_samples_per_cell(tmp_path: Path) -> None:
    path = snapshot.save(_filled(), tmp_path, NOW, IDS, keep_per_cell=3)
    restored = LiveRecorder()
    snapshot.load(restored, tmp_path, NOW, IDS)
    assert [s.e2e for s in restored.samples("mtp", "chat", now=NOW)] == [9.0, 10.0, 11.0]
    document = json.loads(path.read_text())
    assert document["saved_at"] == NOW and document["version"] == 2


def test_samples_older_than_the_window_age_out_after_load(tmp_path: Path) -> None:
    snapshot.save(_filled(), tmp_path, NOW, IDS)
    restored = LiveRecorder(max_age_s=90.0)
    assert snapshot.load(restored, tmp_path, NOW + 30, IDS) == 1  # "plain" is 80 s old, "mtp" 121+ s
    assert restored.summary("mtp", "chat", now=NOW + 30).count == 0
    assert restored.summary("plain", "long", now=NOW + 30).count == 1
    assert restored.summary("plain", "long", now=NOW + 41).count == 0  # ages out as usual


def test_failed_write_leaves_the_previous_snapshot_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = snapshot.save(_filled(), tmp_path, NOW, IDS)
    before = path.read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    empty = LiveRecorder()
    with pytest.raises(OSError):
        snapshot.save(empty, tmp_path, NOW + 1, IDS)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot.FILE_NAME]


def test_missing_or_corrupt_snapshot_starts_empty(tmp_path: Path) -> None:
    rec = LiveRecorder()
    assert snapshot.load(rec, tmp_path, NOW, IDS) == 0
    (tmp_path / snapshot.FILE_NAME).write_text('{"version": 2, "cells": [')
    assert snapshot.load(rec, tmp_path, NOW, IDS) == 0
    assert len(rec) == 0


def test_malformed_rows_are_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    good = {"at": NOW - 1, "e2e": 1.0, "ttft": 0.1, "output_tokens": 10, "prompt_tokens": 5, "concurrency": 1}
    bad = {"at": NOW - 1, "e2e": "slow"}
    backend = {"name": "b", "url": IDS["b"].url, "served": ["qwen"]}
    document = {"version": 2, "cells": [{"backend": backend, "profile": "p", "samples": [good, bad]}]}
    (tmp_path / snapshot.FILE_NAME).write_text(json.dumps(document))
    rec = LiveRecorder()
    assert snapshot.load(rec, tmp_path, NOW, IDS) == 1


async def test_a_save_that_raises_is_logged_once_and_the_saver_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.stats.snapshot")
    encode, attempts = snapshot.encode, 0

    def flaky(*args: object, **kwargs: object) -> bytes:
        nonlocal attempts
        attempts += 1
        if attempts <= 4:  # not an OSError: a sample that does not encode, a bug
            raise TypeError("Object of type Decimal is not JSON serializable")
        return encode(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot, "encode", flaky)
    rec = LiveRecorder(clock=lambda: NOW)
    rec.record("b", "p", _sample(0))
    saver = snapshot.SnapshotSaver(rec, tmp_path, IDS, interval_s=0.01)
    saver.start()
    try:
        async with asyncio.timeout(3):
            while not (tmp_path / snapshot.FILE_NAME).exists():
                await asyncio.sleep(0.005)
    finally:
        await saver.stop()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "Decimal" in r.getMessage()]
    assert attempts > 4 and len(errors) == 1
    assert snapshot.load(LiveRecorder(clock=lambda: NOW), tmp_path, NOW, IDS) == 1


async def test_saver_writes_periodically_and_at_stop(tmp_path: Path) -> None:
    t = [NOW]
    rec = LiveRecorder(clock=lambda: t[0])
    saver = snapshot.SnapshotSaver(rec, tmp_path, IDS, interval_s=0.05)
    saver.start()
    rec.record("b", "p", _sample(0))
    await asyncio.sleep(0.12)
    assert (tmp_path / snapshot.FILE_NAME).exists()
    rec.record("b", "p", _sample(1))
    await asyncio.wait_for(saver.stop(), timeout=2.0)
    restored = LiveRecorder(clock=lambda: t[0])
    assert snapshot.load(restored, tmp_path, NOW, IDS) == 2


def test_a_cell_is_restored_only_into_the_backend_of_the_same_identity(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot.save(_filled(), tmp_path, NOW, IDS)
    # Same names, but "mtp" is now another engine (another URL) and "plain" serves another model.
    now_configured = {
        "mtp": identity("mtp", "http://10.0.0.7:8000", ["qwen"]),
        "plain": identity("plain", IDS["plain"].url, ["qwen-vision"]),
    }
    restored = LiveRecorder()
    caplog.set_level(logging.WARNING, logger="gateway.stats.snapshot")
    assert snapshot.load(restored, tmp_path, NOW, now_configured) == 0
    assert len(restored) == 0
    dropped = [r.getMessage() for r in caplog.records if "dropping saved live stats" in r.getMessage()]
    assert len(dropped) == 2
    assert any("'mtp' (http://127.0.0.1:8102, serving qwen)" in m and "10.0.0.7" in m for m in dropped)
    assert any("'plain'" in m and "serving qwen-vision" in m for m in dropped)


def test_cells_of_backends_that_are_not_configured_are_dropped_and_the_rest_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot.save(_filled(), tmp_path, NOW, IDS)
    restored = LiveRecorder()
    caplog.set_level(logging.WARNING, logger="gateway.stats.snapshot")
    assert snapshot.load(restored, tmp_path, NOW, {"plain": IDS["plain"]}) == 1
    assert restored.summary("plain", "long", now=NOW).count == 1
    assert restored.summary("mtp", "chat", now=NOW).count == 0
    assert any("'mtp'" in r.getMessage() and "not configured" in r.getMessage() for r in caplog.records)


def test_an_old_format_snapshot_is_ignored_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sample = {"at": NOW - 1, "e2e": 1.0, "output_tokens": 10, "prompt_tokens": 5, "concurrency": 1}
    old = {"version": 1, "cells": [{"backend": "mtp", "profile": "chat", "samples": [sample]}]}
    (tmp_path / snapshot.FILE_NAME).write_text(json.dumps(old))
    rec = LiveRecorder()
    caplog.set_level(logging.WARNING, logger="gateway.stats.snapshot")
    assert snapshot.load(rec, tmp_path, NOW, IDS) == 0
    assert any("format version 1" in r.getMessage() for r in caplog.records)


def test_the_saved_identity_leaves_url_credentials_out(tmp_path: Path) -> None:
    secret = {"b": identity("b", "http://user:s3cret@10.0.0.9:8000", ["qwen"])}
    rec = LiveRecorder()
    rec.record("b", "p", _sample(0), now=NOW - 1)
    path = snapshot.save(rec, tmp_path, NOW, secret)
    assert "s3cret" not in path.read_text()
    assert json.loads(path.read_text())["cells"][0]["backend"]["url"] == "http://10.0.0.9:8000"
    assert snapshot.load(LiveRecorder(), tmp_path, NOW, secret) == 1
