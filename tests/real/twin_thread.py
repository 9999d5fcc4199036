"""The engine twin in a background thread with its own event loop, for the synchronous real-engine tests:
they talk to it over HTTP exactly as they talk to the real server, so both answers go through one client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from gateway.sim.fleet import FleetSpec
from gateway.sim.runner import TwinFleet

START_TIMEOUT_S = 30.0


@contextmanager
def twin_in_thread(engines: list[dict[str, Any]], time_scale: float = 1.0) -> Iterator[TwinFleet]:
    """Start the twin's engines (ephemeral ports, 127.0.0.1) without waiting for them to be ready."""
    spec = FleetSpec.model_validate({"name": "fidelity", "engines": engines})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="twin", daemon=True)
    thread.start()
    fleet = TwinFleet(spec, time_scale=time_scale, ephemeral_ports=True)
    started: Future[None] = asyncio.run_coroutine_threadsafe(fleet.start(), loop)
    try:
        started.result(timeout=START_TIMEOUT_S)
        yield fleet
    finally:
        asyncio.run_coroutine_threadsafe(fleet.stop(), loop).result(timeout=START_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=START_TIMEOUT_S)
        loop.close()
