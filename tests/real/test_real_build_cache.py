"""The llama-server build cache: one build per machine, even with concurrent callers; reuse afterwards."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import llama_build
import pytest
from llama_build import BuildToolsMissing, BuiltServer, ensure_llama_server, install_dir

pytestmark = pytest.mark.real

# The real tool lookup, kept for the test that checks it: the other tests fake the build, so they must
# pass on a machine without cmake or a compiler too.
REAL_MISSING_TOOLS = llama_build.missing_tools


@pytest.fixture
def fake_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Point the cache at tmp_path and replace the compile with a slow fake that records each build; the
    fake needs no build tools, so none are looked for."""
    monkeypatch.setenv(llama_build.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(llama_build.BINARY_ENV, raising=False)
    monkeypatch.setattr(llama_build, "missing_tools", lambda: [])
    builds: list[Path] = []

    def fake_build(target: Path, version: str, jobs: int) -> float:
        builds.append(target)
        time.sleep(0.3)  # long enough for a second caller to arrive while the first holds the lock
        target.mkdir(parents=True)
        (target / "llama-server").write_text("")
        (target / "build-info.json").write_text('{"cold_build_seconds": 0.3}')
        return 0.3

    monkeypatch.setattr(llama_build, "_build_into", fake_build)
    return builds


def test_concurrent_callers_build_once_and_the_second_reuses(fake_builds: list[Path]) -> None:
    results: list[BuiltServer] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_llama_server())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(fake_builds) == 1
    assert sorted(r.reused for r in results) == [False, True]
    assert {r.binary for r in results} == {install_dir() / "llama-server"}


def test_cached_binary_is_reused_without_building(fake_builds: list[Path]) -> None:
    first = ensure_llama_server()
    second = ensure_llama_server()
    assert len(fake_builds) == 1
    assert (first.reused, second.reused) == (False, True)
    assert second.cold_build_seconds == 0.3


def test_missing_tools_raise_before_any_build(
    fake_builds: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_build, "missing_tools", REAL_MISSING_TOOLS)
    monkeypatch.setattr(shutil, "which", lambda _tool: None)
    with pytest.raises(BuildToolsMissing, match="cmake"):
        ensure_llama_server()
    assert fake_builds == []


def test_binary_override_skips_the_cache(fake_builds: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(llama_build.BINARY_ENV, "/opt/llama/llama-server")
    assert ensure_llama_server().binary == Path("/opt/llama/llama-server")
    assert fake_builds == []
