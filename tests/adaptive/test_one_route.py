"""One routing decision per request, and exploration booked when the request is sent, through the running
gateway over a twin fleet while one backend of the pool is warming up.

A request that finds a backend filtered out for now (warming, full, breaker open) still needs a fallback
ranking (what it could wait for). One `route()` gives the ranking and the fallback together, so the
adaptive scorer is evaluated once per request (a second pass over the pool "once back" would evaluate it
twice and could accrue exploration credit twice), and the exploration plan is booked once, by the
dispatcher, with the backend it sent the request to.

Sampling error: exploration is paced, not drawn (each request of a profile adds epsilon to a credit while
some backend serving now is under min_samples, and the request that brings it to 1 explores), so over U
such requests the number of explorations E is floor(U * epsilon) (+1 at most with float rounding): the
test holds E within 1 of U * epsilon, with no randomness to allow for.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from loopback import serve_asgi

from gateway.app import build_app, build_gateway
from gateway.backends.registry import Status
from gateway.policy.load import parse_policy
from gateway.policy.schema import MIN_SAMPLES
from gateway.proxy.dispatch import Job
from gateway.records import BackendSnapshot, Decision, ExplorationPlan
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.routing.pipeline.scorers import Assessment
from gateway.settings import load_settings
from gateway.sim.runner import TwinFleet
from gateway.stats.live import LiveRecorder
from tests.adaptive.split_fleet import split_fleet

EPSILON = 0.2  # not the default (0.25): the policy's knob is the one in force
REQUESTS = 40
BODY = {"model": "twin/split", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
BODY["stream"] = True  # a streamed answer measures what it explores
POLICY = f"""
version: 1
routing: adaptive
adaptive: {{explore_epsilon: {EPSILON}}}
profiles:
  - name: default
    prefer: [x, y, w]
    objective: e2e
"""


def closed_port() -> int:
    """A port nothing listens on: a backend there refuses connections, as an engine still loading does."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Counted:
    """Every routing decision, scorer evaluation, dispatch and booking the gateway makes."""

    def __init__(self, router: PolicyRouter, scorer: AdaptiveScorer) -> None:
        self.decisions: list[Decision] = []
        self.assessed = 0
        self.dispatched: list[str] = []
        self.booked: list[tuple[ExplorationPlan, str]] = []
        route, assess, book = router.route, scorer.assess, scorer.book

        def counted_route(endpoint: str, body: Any, backends: Sequence[BackendSnapshot]) -> Decision:
            decision = route(endpoint, body, backends)
            self.decisions.append(decision)
            return decision

        def counted_assess(
            ctx: RouteContext, now: Sequence[BackendSnapshot], later: Sequence[BackendSnapshot] = ()
        ) -> Assessment:
            self.assessed += 1
            return assess(ctx, now, later)

        def counted_book(plan: ExplorationPlan, backend: str) -> None:
            self.booked.append((plan, backend))
            book(plan, backend)

        router.route = counted_route  # type: ignore[method-assign]
        scorer.assess = counted_assess  # type: ignore[method-assign]
        scorer.book = counted_book  # type: ignore[method-assign]

    def dispatch(self, job: Job, backend: str) -> None:
        self.dispatched.append(backend)


def test_each_request_is_routed_once_and_explores_at_the_configured_rate(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)

    async def scenario() -> tuple[Counted, list[str], dict[str, Any], float, float]:
        async with TwinFleet(split_fleet(), time_scale=50.0, ephemeral_ports=True) as fleet:
            await fleet.wait_ready(timeout_s=10)
            backends = [{"name": n, "url": fleet.url(n), "device": f"d{n}"} for n in ("x", "y")]
            backends.append({"name": "w", "url": f"http://127.0.0.1:{closed_port()}"})  # still loading
            settings = load_settings(
                None,
                backends=backends,
                pools=[{"model": "twin/split", "backends": ["x", "y", "w"]}],
                policy=str(policy),
                probe={"interval_s": 0.2, "starting_interval_s": 0.05},
            )
            gateway = build_gateway(settings)
            assert isinstance(gateway.router, PolicyRouter)
            scorer = gateway.router.objective_scorer
            assert isinstance(scorer, AdaptiveScorer)
            counted = Counted(gateway.router, scorer)
            gateway.dispatcher.on_dispatch.append(counted.dispatch)
            served: list[str] = []
            async with serve_asgi(build_app(gateway)) as (url, _), httpx.AsyncClient(base_url=url) as http:
                async with asyncio.timeout(10):
                    states = gateway.registry.backends
                    while not (
                        states["x"].status is states["y"].status is Status.READY
                        and states["w"].status is Status.STARTING
                    ):
                        await asyncio.sleep(0.02)
                for i in range(REQUESTS):
                    answer = await http.post("/v1/chat/completions", json=BODY, timeout=10)
                    assert answer.status_code == 200, answer.text
                    served.append(answer.headers["x-gateway-backend"])
                    if i == REQUESTS // 2:  # explain changes nothing: no decision, no credit spent
                        credit = scorer.ledger.credit("default")
                        explained = (await http.post("/gateway/explain", json=BODY)).json()
                        after = scorer.ledger.credit("default")
        return counted, served, explained, credit, after

    counted, served, explained, credit, after = asyncio.run(scenario())
    # One decision per request, each with its fallback (w, warming), and one scorer evaluation each, and
    # one for explain: the same scorer and code as a decision, which books nothing.
    assert len(counted.decisions) == REQUESTS
    assert all(d.fallback == ("w",) and "w" not in d.ranked for d in counted.decisions)
    assert counted.assessed == REQUESTS + 1
    assert explained["fallback"] == ["w"] and explained["outcome"]["action"] == "serve"
    assert after == credit
    # The dispatcher sent every request once and booked each plan once, with the backend it sent to.
    assert counted.dispatched == served
    booked_to = [backend for _, backend in counted.booked]
    assert booked_to == [b for b, d in zip(served, counted.decisions, strict=True) if d.exploration]
    # Exploration: y (under min_samples while x wins on the prior) at epsilon of the requests that found a
    # backend serving now under min_samples; never w, which is not serving now.
    under = sum(1 for plan, _ in counted.booked if plan.accrued > 0)
    explored = [backend for plan, backend in counted.booked if plan.backend == backend]
    assert explored and set(explored) == {"y"}
    assert abs(len(explored) - under * EPSILON) <= 1, (len(explored), under)
    # y needs min_samples explorations, one per 1 / epsilon requests: 25 requests at 0.2 (20 at 0.25), the
    # last of them spared when y's answers so far are in by then.
    assert len(explored) == MIN_SAMPLES
    assert round(MIN_SAMPLES / EPSILON) - 1 <= under <= round(MIN_SAMPLES / EPSILON)
    assert served.count("y") >= 5 and "w" not in served  # y was measured: min_samples answers


def test_scoring_books_nothing_so_decisions_never_sent_never_explore() -> None:
    recorder = LiveRecorder(clock=lambda: 1_000_000.0)
    scorer = AdaptiveScorer(recorder)
    router = PolicyRouter(FixedPolicy(parse_policy(POLICY)), objective_scorer=scorer)
    pool = [BackendSnapshot("x"), BackendSnapshot("y"), BackendSnapshot("w", ready=False, starting=True)]
    decisions = [router.route("chat", BODY, pool) for _ in range(20)]
    # Every decision plans the same: the credit was never booked, so it never reaches 1.
    assert {d.exploration for d in decisions} == {ExplorationPlan("default", accrued=EPSILON)}
    assert {d.ranked for d in decisions} == {("x", "y")} and scorer.ledger.credit("default") == 0.0
    for _ in range(4):  # booked as sent to x: the credit accrues; the fifth explores y
        plan = router.route("chat", BODY, pool).exploration
        assert plan is not None and plan.backend is None
        scorer.book(plan, "x")
    fifth = router.route("chat", BODY, pool)
    assert fifth.ranked[0] == "y" and fifth.exploration is not None and fifth.exploration.backend == "y"
    scorer.book(fifth.exploration, "x")  # but the dispatcher sent it to x: nothing spent, y not counted
    assert scorer.ledger.explorations("y", "default", since=0.0) == 0
    assert router.route("chat", BODY, pool).exploration == ExplorationPlan("default", EPSILON, "y")
