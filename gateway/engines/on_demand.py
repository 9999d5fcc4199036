"""The router as the request path sees it when engines are managed: each request's candidates pass the
engine manager first, which notes the demand, hides an engine being drained or stopped, and decides
whether the request starts a stopped engine (engines/start_cost.py): always when nothing of the model
is ready, and, when something is, only if waiting for the start wins for this request (no running
backend can serve it, or the running one's queue is longer than the start). A started engine shows as
warming up, so a request that has nothing else waits with the warm-up truth."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from gateway.engines import start_cost
from gateway.engines.manager import EngineManager
from gateway.engines.start_cost import StartChoice
from gateway.records import BackendSnapshot, Decision


class Routes(Protocol):
    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision: ...


class StartOnDemand:
    def __init__(self, router: Routes, engines: EngineManager) -> None:
        self.router = router
        self.engines = engines

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        routed = self.engines.on_request(backends)  # nothing ready: every stopped engine starts here
        decision = self.router.route(endpoint, body, routed)
        choice = self.choose(endpoint, body, routed, decision)
        if choice is None or choice.start is None:
            return decision
        self.engines.request_start(choice.start)
        return self.router.route(endpoint, body, self.engines.preview(routed))

    def choose(
        self, endpoint: str, body: Mapping[str, Any], routed: Sequence[BackendSnapshot], decision: Decision
    ) -> StartChoice | None:
        """Whether this request should start one of the stopped engines among its candidates (None:
        there is none)."""
        stopped = self.engines.startable(routed)
        if not stopped:
            return None
        shown = [replace(s, ready=True, starting=False) if s.name in stopped else s for s in routed]
        if_started = self.router.route(endpoint, dict(body), shown)
        by_name = {s.name: s for s in routed}
        return start_cost.choose(decision, if_started, by_name, stopped, self.engines.per_request_s)

    def explain(
        self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]
    ) -> dict[str, Any]:
        """The wrapped router's explanation of the candidates as the manager shows them, and whether the
        request would start an engine and why; nothing is started."""
        routed = self.engines.preview(backends)
        explanation: dict[str, Any] = self.router.explain(endpoint, body, routed)  # type: ignore[attr-defined]
        if not any(s.ready for s in routed) and self.engines.startable(routed):
            names = ", ".join(self.engines.startable(routed))
            start: dict[str, object] = {
                "start": names,
                "why": "start chosen: no backend of the model is ready",
            }
        else:
            choice = self.choose(endpoint, body, routed, self.router.route(endpoint, dict(body), routed))
            start = choice.as_json() if choice is not None else {"start": None, "why": "no stopped engine"}
        explanation["engine_start"] = start
        return explanation

    def __getattr__(self, name: str) -> Any:  # whatever else the wrapped router offers (observe, ...)
        return getattr(self.router, name)
