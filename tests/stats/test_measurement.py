"""Measurement's state: a gateway restores only the saved cells of its own backends (same name, URL and
served model), and without a state directory nothing is read or written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.app import build_gateway
from gateway.backends.identity import identity
from gateway.records import Sample
from gateway.settings import MeasurementConfig, load_settings
from gateway.stats import snapshot
from gateway.stats.live import LiveRecorder
from gateway.stats.measurement import Measurement

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
CONFIG = f"""\
backends:
  - name: fp8-mtp
    url: http://10.0.0.5:8102
  - name: fp8-base
    url: http://10.0.0.5:8101
pools:
  - model: {MODEL}
    backends: [fp8-mtp, fp8-base]
state_dir: state
"""


def _sample(e2e: float) -> Sample:
    return Sample(e2e=e2e, ttft=0.1, output_tokens=32, prompt_tokens=64, concurrency=1)


def _saved(state_dir: Path) -> None:
    """A snapshot holding this gateway's fp8-mtp, a twin's fp8-base (same name, loopback URL) and a
    backend this config does not have."""
    saved = {
        "fp8-mtp": identity("fp8-mtp", "http://10.0.0.5:8102", [MODEL]),
        "fp8-base": identity("fp8-base", "http://127.0.0.1:41234", [MODEL]),
        "q475-dflash": identity("q475-dflash", "http://127.0.0.1:41235", ["Qwen3.6-35B-A3B"]),
    }
    recorder = LiveRecorder()
    now = recorder.now()
    for i, name in enumerate(saved):
        for k in range(3):
            recorder.record(name, "default", _sample(1.0 + i), now=now - 10 + k)
    snapshot.save(recorder, state_dir, now, saved)


def test_a_gateway_restores_only_the_cells_of_its_own_backends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    _saved(tmp_path / "state")  # `state_dir: state` is relative to the config's folder
    gateway = build_gateway(load_settings(config))
    measurement = gateway.measurement
    assert measurement is not None and measurement.state_dir == tmp_path / "state"

    async def restore() -> None:
        await measurement.start()
        await measurement.stop()

    asyncio.run(restore())
    assert measurement.restored == 3
    assert {backend for backend, _, _ in measurement.recorder.cells()} == {"fp8-mtp"}
    dropped = [r.getMessage() for r in caplog.records if "dropping saved live stats" in r.getMessage()]
    assert len(dropped) == 2
    assert any("'fp8-base' (http://127.0.0.1:41234" in m and "http://10.0.0.5:8101" in m for m in dropped)
    assert any("'q475-dflash'" in m and "not configured" in m for m in dropped)


def test_without_a_state_dir_nothing_is_read_or_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    _saved(tmp_path / "cache" / "spark-gateway")  # where every gateway kept its state before
    before = sorted(tmp_path.rglob("*"))
    measurement = Measurement(MeasurementConfig(), [], None, None)

    async def run() -> None:
        await measurement.start()
        measurement.recorder.record("x", "default", _sample(1.0))
        await measurement.stop()

    asyncio.run(run())
    assert measurement.restored == 0
    assert sorted(tmp_path.rglob("*")) == before
