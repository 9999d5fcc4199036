"""The real suite's preparation step (tests/real/prep_step.py) says what it prepares, how long it expects,
and how far it got, instead of a silent terminal; no build runs here (the work is a stand-in)."""

from __future__ import annotations

import time
from pathlib import Path

import prep_step
import pytest


def test_the_build_percent_is_read_from_the_compilers_last_progress_line(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_bytes(b"$ cmake -S ...\n[  3%] Building C object\n[ 45%] Building CXX object ggml.cpp.o\n")
    assert prep_step.build_percent(log) == 45
    assert prep_step.build_percent(tmp_path / "missing.log") is None


def test_the_estimate_grows_with_the_machines_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prep_step.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(prep_step.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    idle = prep_step.llama_estimate_s()
    monkeypatch.setattr(prep_step.os, "getloadavg", lambda: (5.0, 0.0, 0.0))
    assert idle == prep_step.LLAMA_BUILD_IDLE_2CORES_S and prep_step.llama_estimate_s() == 3 * idle


def test_a_build_is_announced_followed_and_its_end_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "build.log"
    log.write_bytes(b"[ 12%] Building\n")
    monkeypatch.setattr(prep_step, "PROGRESS_EVERY_S", 0.05)
    monkeypatch.setattr(prep_step, "needs_llama", lambda: True)
    monkeypatch.setattr(prep_step, "_llama_log", lambda: log)
    monkeypatch.setattr(prep_step, "ensure_llama_server", lambda: time.sleep(0.3))
    said: list[str] = []
    prep_step.prepare(said.append, want_llama=True, want_vllm=False, gguf=lambda: tmp_path / "m.gguf")
    assert said[0].startswith("preparing tests/real: building llama-server") and "expected ~" in said[0]
    assert any("12% compiled" in line for line in said[1:-1])
    assert "done in" in said[-1]


def test_a_failed_preparation_is_said_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("build step failed (2): cmake")

    monkeypatch.setattr(prep_step, "needs_llama", lambda: True)
    monkeypatch.setattr(prep_step, "ensure_llama_server", broken)
    said: list[str] = []
    prep_step.prepare(said.append, want_llama=True, want_vllm=False, gguf=lambda: tmp_path / "m.gguf")
    assert "not done after" in said[-1] and "build step failed" in said[-1]
