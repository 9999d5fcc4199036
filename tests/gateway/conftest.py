"""Fixtures for the gateway core tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gateway_fakes import FakeEngine


@pytest.fixture
async def engines() -> AsyncIterator[list[FakeEngine]]:
    started = [await FakeEngine(f"e{i}").start() for i in range(2)]
    yield started
    for engine in started:
        await engine.stop()
