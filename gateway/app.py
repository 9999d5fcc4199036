"""Composition root: Settings -> wired objects -> ASGI app.

Every stateful object (backend registry, prober, upstream transport, dispatcher, metrics registry) is
made here and passed down; nothing lives at module level. Another router (the policy router) or more
completion observers (live statistics) plug in through `build_gateway`'s arguments.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.api.admin import Backends, Health, Metrics, Ready
from gateway.api.asgi import RequestContext
from gateway.api.openai import CompletionsEndpoint, ModelsEndpoint, Router
from gateway.backends.prober import Prober
from gateway.backends.registry import Registry
from gateway.policy.load import PolicyWatcher
from gateway.proxy.dispatch import Dispatcher, Observer
from gateway.proxy.upstream import AiohttpTransport, UpstreamTransport
from gateway.routing.least_busy import LeastBusyRouter
from gateway.routing.router import PolicyRouter
from gateway.settings import Settings
from gateway.stats.metrics import GatewayMetrics


class Service(Protocol):
    """A background task owner started and stopped with the app (prober, policy watcher, scraper)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Gateway:
    settings: Settings
    registry: Registry
    prober: Prober
    transport: UpstreamTransport
    router: Router
    dispatcher: Dispatcher
    metrics: GatewayMetrics
    services: list[Service] = field(default_factory=list)


def build_gateway(
    settings: Settings,
    router: Router | None = None,
    transport: UpstreamTransport | None = None,
    observers: Sequence[Observer] = (),
    services: Sequence[Service] = (),
) -> Gateway:
    """Wire one gateway. Without a router: the policy router when `settings.policy` names a file (hot
    reloaded), the least-busy router otherwise."""
    registry = Registry(settings)
    metrics = GatewayMetrics(CollectorRegistry(auto_describe=True), registry)
    running = list(services)
    if router is None and settings.policy is not None:
        watcher = PolicyWatcher(settings.policy, on_reload=metrics.count_policy_reload)
        router = PolicyRouter(watcher)
        running.append(watcher)
    transport = transport or AiohttpTransport(settings.timeouts, settings.limits.connections)
    dispatcher = Dispatcher(registry, transport, settings.limits.max_attempts, [metrics.observe, *observers])
    return Gateway(
        settings=settings,
        registry=registry,
        prober=Prober(registry, settings.probe),
        transport=transport,
        router=router or LeastBusyRouter(),
        dispatcher=dispatcher,
        metrics=metrics,
        services=running,
    )


def build_app(gateway: Gateway) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.prober.start()
        for service in gateway.services:
            await service.start()
        try:
            yield
        finally:
            for service in reversed(gateway.services):
                await service.stop()
            await gateway.prober.stop()
            await gateway.transport.aclose()

    max_body = gateway.settings.limits.max_body_bytes
    completions = {
        kind: CompletionsEndpoint(kind, gateway.registry, gateway.router, gateway.dispatcher, max_body)
        for kind in ("chat", "completions")
    }
    routes = [
        Route("/v1/chat/completions", completions["chat"], methods=["POST"]),
        Route("/v1/completions", completions["completions"], methods=["POST"]),
        Route("/v1/models", ModelsEndpoint(gateway.registry), methods=["GET"]),
        Route("/health", Health(), methods=["GET"]),
        Route("/ready", Ready(gateway.registry), methods=["GET"]),
        Route("/metrics", Metrics(gateway.metrics), methods=["GET"]),
        Route("/gateway/backends", Backends(gateway.registry), methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = gateway
    app.add_middleware(RequestContext)
    return app


def create_app(settings: Settings, router: Router | None = None) -> Starlette:
    return build_app(build_gateway(settings, router=router))
