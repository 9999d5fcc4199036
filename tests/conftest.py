"""Shared fixtures. Servers in tests listen on 127.0.0.1 only."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/real keeps its llama-server build and model files here (default ~/.cache/spark-gateway): a build
# takes minutes, so the isolated home below must not hide it.
BUILD_CACHE_ENV = "SPARK_GATEWAY_CACHE"
STATE_DIR_ENV = "SPARK_GATEWAY_STATE_DIR"


@pytest.fixture(autouse=True, scope="session")
def isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Whatever a test does, it never reads or writes a real gateway's state: for the whole session HOME
    and XDG_CACHE_HOME name a temp folder (subprocesses inherit both), so the user cache, where a config
    file's default state folder lives, is a throwaway one; and a SPARK_GATEWAY_STATE_DIR exported for
    a real gateway is not inherited. A test that sets `state_dir` itself still wins."""
    home = tmp_path_factory.mktemp("home")
    build_cache = os.environ.get(BUILD_CACHE_ENV) or str(Path.home() / ".cache" / "spark-gateway")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BUILD_CACHE_ENV, build_cache)
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
        patch.delenv(STATE_DIR_ENV, raising=False)
        yield home
