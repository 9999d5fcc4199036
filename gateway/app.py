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
from gateway.api.asgi import DirectRoutes, RequestContext
from gateway.api.auth import ApiKeyAuth
from gateway.api.errors import ServerErrors, exception_handlers
from gateway.api.limits import BodySizeLimit
from gateway.api.openai import CompletionsEndpoint, ModelsEndpoint, Router
from gateway.api.openapi import OpenApi
from gateway.api.outlook import Outlook
from gateway.api.policy_admin import PoolResolver, policy_admin_routes
from gateway.api.stats import Stats
from gateway.backends.prober import Prober
from gateway.backends.registry import Registry
from gateway.backends.warmup import Warmups
from gateway.config_check import known_backends
from gateway.policy.load import PolicyWatcher
from gateway.proxy.dispatch import Dispatcher, DispatchListener, Job, Observer
from gateway.proxy.reliability import Reliability, ReliabilityCollector
from gateway.proxy.upstream import AiohttpTransport, UpstreamTransport
from gateway.records import BackendSnapshot
from gateway.routing.adaptive import AdaptiveScorer
from gateway.routing.least_busy import LeastBusyRouter
from gateway.routing.router import PolicyRouter
from gateway.settings import BackendConfig, Settings
from gateway.shutdown import DrainGuard, DrainTracker
from gateway.stats.live_metrics import LiveCollector
from gateway.stats.measurement import Measurement
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
    policy: PolicyWatcher | None = None  # the hot-reloaded policy file, when one is configured
    reliability: Reliability | None = None  # breakers, admission slots and wait queues
    drain: DrainTracker = field(default_factory=DrainTracker)  # graceful shutdown on SIGTERM
    measurement: Measurement | None = None  # live windows, engine scraper, snapshots


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
    transport = transport or AiohttpTransport(settings.timeouts, settings.limits.connections)
    measurement = Measurement(
        settings.measurement,
        settings.backends,
        settings.state_dir,
        transport.get,  # engine /metrics through the transport's control-plane GET
        pools=settings.pools,
    )
    metrics.registry.register(LiveCollector(measurement.recorder, measurement.scraper))
    running = [*services, measurement]
    watcher = None
    booking: list[DispatchListener] = []
    if router is None and settings.policy is not None:
        # Every load checks the backend names the policy uses against this config's backends.
        known = known_backends(settings)
        watcher = PolicyWatcher(settings.policy, on_reload=metrics.count_policy_reload, known=known)
        objective = adaptive_scorer(measurement, settings.backends)
        router = PolicyRouter(watcher, objective_scorer=objective)
        booking.append(book_explorations(objective))
        running.append(watcher)
    # The policy router learns each backend's characters per token from the usage it reports.
    learn = [router.observe] if isinstance(router, PolicyRouter) else []
    # Learned warm-ups live next to the live-measurement snapshots (the same resolved state directory).
    warmups = Warmups(registry, measurement.state_dir)
    reliability = Reliability(settings, warmups)
    registry.listeners += [reliability.on_status, warmups.on_status]
    registry.breaker_open = reliability.breaker_open
    metrics.registry.register(ReliabilityCollector(reliability))
    dispatcher = Dispatcher(
        registry,
        transport,
        settings.limits.max_attempts,
        [metrics.observe, measurement.observe, *observers, *learn],
        reliability=reliability,
        on_dispatch=booking,
    )
    return Gateway(
        settings=settings,
        registry=registry,
        prober=Prober(registry, settings.probe, transport.get),
        transport=transport,
        router=router or LeastBusyRouter(),
        dispatcher=dispatcher,
        metrics=metrics,
        services=running,
        policy=watcher,
        reliability=reliability,
        # At the drain deadline, what is still in flight is ended by its exchange (error frame, [DONE]).
        drain=DrainTracker(end_inflight=dispatcher.end_all),
        measurement=measurement,
    )


def adaptive_scorer(measurement: Measurement, backends: Sequence[BackendConfig]) -> AdaptiveScorer:
    """The policy router's objective scorer, handed what it reads: the live windows, each engine's latest
    report (when scraped) and which backends share a device."""
    scraper = measurement.scraper
    return AdaptiveScorer(
        measurement.recorder,
        hints=scraper.hint if scraper is not None else None,
        devices={b.name: b.device for b in backends if b.device is not None},
    )


def book_explorations(scorer: AdaptiveScorer) -> DispatchListener:
    """A dispatch listener: the exploration a request's decision planned is booked once, with the backend
    its first attempt went to."""

    def book(job: Job, backend: str) -> None:
        if job.exploration is not None:
            scorer.book(job.exploration, backend)

    return book


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
    waits = gateway.reliability is not None
    completions = {
        kind: CompletionsEndpoint(
            kind, gateway.registry, gateway.router, gateway.dispatcher, max_body, can_wait=waits
        )
        for kind in ("chat", "completions")
    }
    backends = (
        Backends(gateway.registry, gateway.reliability.details, gateway.reliability.queues)
        if gateway.reliability is not None
        else Backends(gateway.registry)
    )
    routes = [
        Route("/v1/chat/completions", completions["chat"], methods=["POST"]),
        Route("/v1/completions", completions["completions"], methods=["POST"]),
        Route("/v1/models", ModelsEndpoint(gateway.registry), methods=["GET"]),
        Route("/health", Health(), methods=["GET"]),
        Route("/ready", Ready(gateway.registry), methods=["GET"]),
        Route("/metrics", Metrics(gateway.metrics), methods=["GET"]),
        Route("/gateway/backends", backends, methods=["GET"]),
    ]
    if gateway.measurement is not None:
        stats = Stats(gateway.measurement.recorder, gateway.measurement.scraper)
        routes.append(Route("/gateway/stats", stats, methods=["GET"]))
    if gateway.policy is not None and isinstance(gateway.router, PolicyRouter):
        outlook = Outlook(gateway.reliability) if gateway.reliability is not None else None
        routes += policy_admin_routes(
            gateway.router, gateway.policy, _pool_resolver(gateway.registry), outlook
        )
    # Last, so it describes exactly the routes registered above.
    served = [*(route.path for route in routes), "/openapi.json"]
    routes.append(Route("/openapi.json", OpenApi(served, _model_names(gateway.registry)), methods=["GET"]))
    # The two generation routes skip Starlette's routing and exception layers (same middleware).
    direct = {"/v1/chat/completions": completions["chat"], "/v1/completions": completions["completions"]}
    app = DirectRoutes(
        routes=routes, lifespan=lifespan, direct=direct, exception_handlers=exception_handlers()
    )
    app.state.gateway = gateway
    # Outermost last: request context -> JSON 500 guard -> drain guard -> API keys -> body limit ->
    # routes, so an unauthenticated client never makes the gateway read its body.
    app.add_middleware(BodySizeLimit, max_bytes=max_body)
    app.add_middleware(ApiKeyAuth, config=gateway.settings.auth)
    app.add_middleware(DrainGuard, tracker=gateway.drain, retry_after_seconds=5)
    app.add_middleware(ServerErrors)
    app.add_middleware(RequestContext)
    return app


def _model_names(registry: Registry) -> list[str]:
    return [name for pool in registry.pools for name in (pool.model, *pool.aliases)]


def _pool_resolver(registry: Registry) -> PoolResolver:
    def resolve(model: str) -> list[BackendSnapshot] | None:
        pool = registry.pool(model)
        return None if pool is None else registry.snapshots(pool)

    return resolve
