"""What `spark-gateway serve` says about readiness: one `ready` line once the server accepts connections
and every model has a ready backend (what GET /ready answers 200 to), and until then, every few seconds,
what it waits for, with each warming backend's expected time left (backends/warmup.py). So "ready" on
the terminal means a request now is served at once, not queued behind a warm-up."""

from __future__ import annotations

import asyncio
import logging
import math

import uvicorn

from gateway.app import Gateway
from gateway.backends.registry import Status

log = logging.getLogger("gateway.serve")

POLL_S = 0.1
COUNTDOWN_EVERY_S = 5.0


async def announce_ready(gateway: Gateway, server: uvicorn.Server, url: str) -> None:
    """Log `ready` once `server` listens and every pool has a ready backend; a countdown until then."""
    registry = gateway.registry
    loop = asyncio.get_running_loop()
    told_at = -math.inf
    while not (server.started and registry.pools and all(registry.pool_ready(p) for p in registry.pools)):
        if server.started and loop.time() - told_at >= COUNTDOWN_EVERY_S:
            log.info("not ready yet at %s: waiting for %s", url, waiting_for(gateway))
            told_at = loop.time()
        await asyncio.sleep(POLL_S)
    log.info("ready: %s serves %s", url, ", ".join(registry.model_names()))


def waiting_for(gateway: Gateway) -> str:
    """Each backend not ready, with its expected time left when it is warming up."""
    parts = []
    warmups = gateway.reliability.warmups if gateway.reliability is not None else None
    for name, state in gateway.registry.backends.items():
        if state.status is Status.READY:
            continue
        warming = warmups.warming(name) if warmups is not None else None
        if warming is not None:
            parts.append(f"{name} warming up, expected ready in ~{math.ceil(warming.eta_s)} s")
        else:
            parts.append(f"{name} {state.status}" + (f" ({state.detail})" if state.detail else ""))
    return "; ".join(parts) or "the first probes"
