"""Operator routes: /health (the process is alive), /ready (every pool has a ready backend), /metrics
(Prometheus text) and /gateway/backends (state of every backend and pool)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.api.asgi import Receive, Scope, Send, send_bytes
from gateway.backends.registry import Registry, Status
from gateway.stats.metrics import GatewayMetrics

_JSON = [(b"content-type", b"application/json")]


class Health:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, b'{"status":"ok"}', _JSON)


class Ready:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pools = {pool.model: self.registry.pool_ready(pool) for pool in self.registry.pools}
        ready = bool(pools) and all(pools.values())
        not_ready = {  # why, so a wrong URL shows here as "unreachable: nothing listens at host:port"
            name: f"{state.status}: {state.detail}" if state.detail else str(state.status)
            for name, state in self.registry.backends.items()
            if state.status is not Status.READY
        }
        body = orjson.dumps({"ready": ready, "pools": pools, "not_ready": not_ready})
        await send_bytes(send, 200 if ready else 503, body, _JSON)


class Metrics:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.metrics.exposition()
        await send_bytes(send, 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode())])


class Backends:
    def __init__(
        self,
        registry: Registry,
        details: Callable[[str], dict[str, Any]] | None = None,
        queues: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.registry = registry
        self.details = details  # extra state per backend (breaker, slots)
        self.queues = queues  # wait queue per pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        details = self.details or (lambda name: {})
        body: dict[str, Any] = {
            "backends": [
                {**state.to_dict(), **details(name)} for name, state in self.registry.backends.items()
            ],
            "pools": [
                {
                    "model": pool.model,
                    "aliases": list(pool.aliases),
                    "backends": list(pool.backends),
                    "ready": self.registry.pool_ready(pool),
                    "max_model_len": self.registry.max_context(pool),
                }
                for pool in self.registry.pools
            ],
        }
        if self.queues is not None:
            body["queues"] = self.queues()
        await send_bytes(send, 200, orjson.dumps(body), _JSON)
