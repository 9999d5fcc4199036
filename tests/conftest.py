"""Shared fixtures. Servers in tests listen on 127.0.0.1 only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def isolated_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the live-measurement snapshots that gateways write at shutdown out of the user's cache, so a
    test run never seeds the routing of a real gateway. The default state directory follows
    XDG_CACHE_HOME (subprocesses inherit it); a test that sets `state_dir` itself still wins."""
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(path))
        yield path
