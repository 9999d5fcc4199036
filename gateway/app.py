"""Composition root: Settings -> wired objects -> ASGI app.

Every stateful object (backend registry, prober, upstream transport, dispatcher, metrics registry) is
made here and passed down; nothing lives at module level. Another router (the policy router) or more
completion observers (live statistics) plug in through `build_gateway`'s arguments.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.api.admin import Backends, Health, Metrics, Ready
from gateway.api.asgi import DirectRoutes, RequestContext
from gateway.api.auth import ApiKeyAuth
from gateway.api.body_parse import body_parser
from gateway.api.engines_admin import engines_admin_routes
from gateway.api.errors import ServerErrors, exception_handlers
from gateway.api.limits import BodySizeLimit
from gateway.api.openai import CompletionsEndpoint, ModelsEndpoint, Router
from gateway.api.openapi import OpenApi
from gateway.api.outlook import Outlook
from gateway.api.policy_admin import PoolResolver, policy_admin_routes
from gateway.api.response_ids import ResponseIds
from gateway.api.shaped import CLIENT_PATHS, SHAPES, CapableRouter, ResponseById, ShapedEndpoint
from gateway.api.stats import Stats
from gateway.api.ui import ui_routes
from gateway.backends.prober import Prober
from gateway.backends.registry import Registry
from gateway.backends.scraper import MetricsScraper
from gateway.backends.warmup import Warmups
from gateway.config_check import known_backends
from gateway.engines.manager import EngineManager
from gateway.engines.metrics import EngineCollector
from gateway.engines.on_demand import StartOnDemand
from gateway.policy.load import PolicyWatcher
from gateway.policy.schema import Adaptive
from gateway.proxy.accounting import Accounting
from gateway.proxy.decision_feed import DecisionFeed
from gateway.proxy.decode_probe import DecodeProbes, ProbeTarget
from gateway.proxy.dispatch import Dispatcher, DispatchListener, Job, Observer
from gateway.proxy.move_planner import SlowedEngineMoves
from gateway.proxy.moves import KnobsFor, StreamMoves
from gateway.proxy.reliability import Reliability, ReliabilityCollector
from gateway.proxy.upstream import AiohttpTransport, UpstreamTransport
from gateway.records import BackendSnapshot, RequestRecord
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.least_busy import LeastBusyRouter
from gateway.routing.pipeline.router import PolicyRouter
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
    engines: EngineManager | None = None  # engine containers found, started and stopped on demand
    response_ids: ResponseIds | None = None  # which backend stored each Responses API response
    decisions: DecisionFeed = field(default_factory=DecisionFeed)  # recent decisions, as sent (/ui)


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
    # Stored responses live on the backend that made them; where, is kept beside the live snapshots.
    response_ids = ResponseIds(measurement.state_dir)
    running = [*services, measurement, response_ids]
    watcher = None
    objective: AdaptiveScorer | None = None
    if router is None and settings.policy is not None:
        # Every load checks the backend names the policy uses against this config's backends.
        known = known_backends(settings)
        watcher = PolicyWatcher(settings.policy, on_reload=metrics.count_policy_reload, known=known)
        objective = adaptive_scorer(measurement, settings.backends, probes=True)
        router = PolicyRouter(watcher, objective_scorer=objective)
        running.append(watcher)
        observers = [*observers, fits_from_samples(objective, registry)]
    # The policy router learns each backend's characters per token from the usage it reports.
    learn = [router.observe] if isinstance(router, PolicyRouter) else []
    # Learned warm-ups live next to the live-measurement snapshots (the same resolved state directory).
    warmups = Warmups(registry, measurement.state_dir)
    reliability = Reliability(settings, warmups)
    registry.listeners += [reliability.on_status, warmups.on_status]
    registry.breaker_open = reliability.breaker_open
    if measurement.scraper is not None:
        registry.engine_waiting = engine_queue(measurement.scraper)
        registry.engine_full_at = measurement.scraper.running_limit
    metrics.registry.register(ReliabilityCollector(reliability))
    # Probes and scrapes tell the hang watch when an engine stops answering its control plane.
    prober = Prober(
        registry,
        settings.probe,
        transport.get,
        listener=reliability.stall,
        # Refusals past it: unreachable (backends/reachability.py).
        warmup_bound=lambda name: warmups.unreachable_after(name, settings.probe.startup_grace_s),
    )
    if measurement.scraper is not None:
        measurement.scraper.listener = reliability.stall
    engines = engine_manager(settings, registry, prober, reliability, metrics)
    if engines is not None:
        running.append(engines)
        observers = [*observers, engines.observe]  # each backend's time per request: its queue's cost
        prober.managed = engines.engines.__contains__  # a stopped engine is started, not unreachable
    decisions = DecisionFeed()  # recorded as requests are sent and finish, never while routing
    dispatcher = Dispatcher(
        registry,
        transport,
        settings.limits.max_attempts,
        [metrics.observe, measurement.observe, *observers, *learn, decisions.finished],
        on_dispatch=[decisions.dispatched],
        reliability=reliability,
        first_content_s=first_content_s(settings),
        resume_streams=settings.limits.resume_streams,
        max_frame_bytes=settings.limits.max_sse_frame_bytes,
    )
    dispatcher.accounting.track(measurement.progress)  # the router sees requests before they finish
    if objective is not None:  # explorations are booked as requests are sent, probes sent with them
        probes = decode_probes(settings, transport, measurement, dispatcher.accounting)
        dispatcher.on_dispatch.append(book_explorations(objective, probes))
        running.append(probes)
        if watcher is not None and settings.limits.resume_streams:  # streams move off a slowed engine
            dispatcher.moves = StreamMoves(
                registry, move_planner(objective, measurement), adaptive_knobs(watcher)
            )
    return Gateway(
        settings=settings,
        registry=registry,
        prober=prober,
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
        response_ids=response_ids,
        engines=engines,
        decisions=decisions,
    )


def adaptive_knobs(policies: PolicyWatcher) -> KnobsFor:
    """The policy in force's adaptive knobs for a profile it routes adaptively (None for any other): what
    the stream mover (proxy/moves.py) weighs a move with, read per round so a reload applies."""

    def knobs(name: str) -> Adaptive | None:
        policy = policies.current.policy
        profile = next((p for p in policy.profiles if p.name == name), None)
        if profile is None or policy.routing_for(profile) != "adaptive":
            return None
        return policy.adaptive

    return knobs


def first_content_s(settings: Settings) -> float:
    """A request's whole time for its first content, from arrival: its longest wait for a backend (the
    queue deadline, or the warming wait when longer) and then the first-token timeout. Failovers and
    comeback waits share it, so no request waits several first-token timeouts end to end."""
    queue = settings.queue
    return max(queue.timeout_s, queue.warming_wait_s or 0.0) + settings.timeouts.first_byte_s


def adaptive_scorer(
    measurement: Measurement, backends: Sequence[BackendConfig], probes: bool = False
) -> AdaptiveScorer:
    """The policy router's objective scorer, handed what it reads: the live windows, the requests in flight
    as far as each has gone, each engine's latest report (when scraped) and which backends share a device;
    `probes`: its plans' decode probes are sent (book_explorations)."""
    scraper = measurement.scraper
    return AdaptiveScorer(
        measurement.recorder,
        hints=scraper.hint if scraper is not None else None,
        devices={b.name: b.device for b in backends if b.device is not None},
        progress=measurement.progress.view,
        probes=probes,
    )


def move_planner(objective: AdaptiveScorer, measurement: Measurement) -> SlowedEngineMoves:
    """The stream mover's planner: the adaptive scorer's windows, devices and slow-down memory, and the
    requests in flight looked at without the device-time readings a view keeps for the decisions' next
    views (`mark=False`)."""
    peek = functools.partial(measurement.progress.view, mark=False)
    return SlowedEngineMoves(objective.windows, peek, objective.devices, objective.slowdowns)


def decode_probes(
    settings: Settings, transport: UpstreamTransport, measurement: Measurement, accounting: Accounting
) -> DecodeProbes:
    """Decode probes for every backend a pool serves, under the model name that pool sends it, recorded
    into the live windows with the load a request sent there now would meet and the device time it
    shared, from the dispatcher's books. A backend configured to serve neither completions nor chat is
    never probed."""
    targets: dict[str, ProbeTarget] = {}
    for pool in settings.pools:
        for name in pool.backends:
            config = settings.backend(name)  # a pool names only configured backends
            served = config.endpoints
            if name in targets or (served is not None and not {"completions", "chat"} & served):
                continue
            headers = {"content-type": "application/json", **config.auth_headers()}
            chat = served is not None and "completions" not in served
            targets[name] = ProbeTarget(config.url.rstrip("/"), pool.served_name(name), headers, chat)
    return DecodeProbes(
        transport,
        targets,
        measurement.recorder.record,
        inflight=lambda backend: accounting.registry.inflight[backend],
        shared_seconds=accounting.device_time.shared_seconds,
    )


def engine_manager(
    settings: Settings,
    registry: Registry,
    prober: Prober,
    reliability: Reliability,
    metrics: GatewayMetrics,
) -> EngineManager | None:
    """The engine manager when the config declares engines or names a Docker API; backends it adds at
    run time get admission slots like configured ones."""
    if not settings.engines and settings.engine_control.docker_url is None:
        return None
    manager = EngineManager(settings, registry, prober)
    registry.listeners.append(manager.on_status)

    def slots_for_all() -> None:
        reliability.admission.configure({n: s.config.max_concurrency for n, s in registry.backends.items()})

    registry.membership.append(slots_for_all)
    metrics.registry.register(EngineCollector(manager))
    return manager


def engine_queue(scraper: MetricsScraper) -> Callable[[str], float | None]:
    """Requests waiting inside a backend's engine by its latest report; None when unknown or stale."""

    def waiting(backend: str) -> float | None:
        hint = scraper.hint(backend)
        return hint.waiting if hint is not None and hint.fresh else None

    return waiting


def fits_from_samples(scorer: AdaptiveScorer, registry: Registry) -> Observer:
    """A completion observer after the live windows' own: the samples a finished request left are fitted
    now (AdaptiveScorer.learn), off the next decision's path."""

    def learn(record: RequestRecord) -> None:
        scorer.learn(record.profile, list(registry.backends))

    return learn


def book_explorations(scorer: AdaptiveScorer, probes: DecodeProbes | None = None) -> DispatchListener:
    """A dispatch listener: the exploration a request's decision planned is booked once, with the backend
    its first attempt went to, and the decode probe it planned is sent."""

    def book(job: Job, backend: str) -> None:
        plan = job.exploration
        if plan is None:
            return
        scorer.book(plan, backend)
        if plan.probe and plan.backend is not None and probes is not None:
            for _ in range(plan.probes):
                probes.send(plan.backend)

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

    limits = gateway.settings.limits
    max_body = limits.max_body_bytes
    waits = gateway.reliability is not None
    parser = body_parser(limits)
    # With engines, a request's candidates pass the engine manager first (it starts what is needed).
    router = StartOnDemand(gateway.router, gateway.engines) if gateway.engines else gateway.router
    completions = {
        kind: CompletionsEndpoint(
            kind,
            gateway.registry,
            CapableRouter(router),  # only backends serving the API (`endpoints:`) are candidates
            gateway.dispatcher,
            max_body,
            can_wait=waits,
            parser=parser,
        )
        for kind in ("chat", "completions")
    }
    shaped = {
        kind: ShapedEndpoint(
            shape,
            gateway.registry,
            router,
            gateway.dispatcher,
            max_body,
            can_wait=waits,
            parser=parser,
            response_ids=gateway.response_ids,
        )
        for kind, shape in SHAPES.items()
    }
    shaped_paths = {path: shaped[kind] for path, kind in CLIENT_PATHS.items()}
    backends = (
        Backends(gateway.registry, gateway.reliability.details, gateway.reliability.queues)
        if gateway.reliability is not None
        else Backends(gateway.registry)
    )
    routes = [
        Route("/v1/chat/completions", completions["chat"], methods=["POST"]),
        Route("/v1/completions", completions["completions"], methods=["POST"]),
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in shaped_paths.items()),
        Route("/v1/models", ModelsEndpoint(gateway.registry), methods=["GET"]),
        Route("/health", Health(), methods=["GET"]),
        Route("/ready", Ready(gateway.registry), methods=["GET"]),
        Route("/metrics", Metrics(gateway.metrics), methods=["GET"]),
        Route("/gateway/backends", backends, methods=["GET"]),
    ]
    if gateway.response_ids is not None:
        by_id = ResponseById(
            gateway.registry, gateway.response_ids, gateway.transport.get, gateway.settings.timeouts.idle_s
        )
        routes.append(Route("/v1/responses/{response_id}", by_id, methods=["GET", "DELETE"]))
    if gateway.engines is not None:
        routes += engines_admin_routes(gateway.engines)
    if gateway.measurement is not None:
        stats = Stats(gateway.measurement.recorder, gateway.measurement.scraper)
        routes.append(Route("/gateway/stats", stats, methods=["GET"]))
    if gateway.policy is not None and isinstance(gateway.router, PolicyRouter):
        outlook = Outlook(gateway.reliability) if gateway.reliability is not None else None
        explainer = router if isinstance(router, StartOnDemand) else gateway.router  # says when it starts
        routes += policy_admin_routes(
            explainer, gateway.policy, _pool_resolver(gateway.registry), outlook, parser.limits
        )
    routes += ui_routes(gateway.decisions, gateway.policy)
    # Last, so it describes exactly the routes registered above.
    served = [*(route.path for route in routes), "/openapi.json"]
    routes.append(Route("/openapi.json", OpenApi(served, _model_names(gateway.registry)), methods=["GET"]))
    # The two generation routes skip Starlette's routing and exception layers (same middleware).
    direct = {"/v1/chat/completions": completions["chat"], "/v1/completions": completions["completions"]}
    direct.update(shaped_paths)
    app = DirectRoutes(
        routes=routes, lifespan=lifespan, direct=direct, exception_handlers=exception_handlers()
    )
    app.state.gateway = gateway
    # Outermost last: request context -> JSON 500 guard -> drain guard -> API keys -> body limit ->
    # routes, so an unauthenticated client never makes the gateway read its body.
    app.add_middleware(BodySizeLimit, max_bytes=max_body, read_timeout_s=limits.read_timeout_s)
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
