"""Composition root: the router and observers plug in; the policy router is chosen from settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from gateway_fakes import FakeEngine, running_gateway, settings_for

from gateway.app import build_gateway
from gateway.proxy.dispatch import RequestRecord
from gateway.routing.least_busy import LeastBusyRouter
from gateway.routing.router import PolicyRouter
from gateway.routing.types import BackendSnapshot, Decision

REPO = Path(__file__).resolve().parents[2]


class PinnedRouter:
    def route(self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        return Decision(profile="pinned", ranked=("b",))


async def test_a_router_passed_in_decides_and_names_the_profile(engines: list[FakeEngine]) -> None:
    records: list[RequestRecord] = []
    settings = settings_for({"a": engines[0].url, "b": engines[1].url})
    async with (
        running_gateway(settings, router=PinnedRouter(), observers=[records.append]) as (url, _),
        aiohttp.ClientSession() as session,
    ):
        body = {"model": "m", "messages": []}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.headers["x-gateway-profile"] == "pinned"
            assert response.headers["x-gateway-backend"] == "b"
    assert [(r.backend, r.profile, r.status) for r in records] == [("b", "pinned", 200)]


def test_least_busy_is_the_default_router() -> None:
    assert isinstance(build_gateway(settings_for({"a": "http://127.0.0.1:1"})).router, LeastBusyRouter)


def test_a_policy_file_selects_the_policy_router_and_its_watcher() -> None:
    settings = settings_for(
        {"fp8-base": "http://127.0.0.1:1", "fp8-mtp": "http://127.0.0.1:2"},
        policy=REPO / "policies/spark-mtp-split.yaml",
    )
    gateway = build_gateway(settings)
    assert isinstance(gateway.router, PolicyRouter)
    assert gateway.policy in gateway.services  # next to the live measurement service
