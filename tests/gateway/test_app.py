"""Composition root: the router and observers plug in; the policy router is chosen from settings."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from gateway_fakes import FakeEngine, running_gateway, settings_for
from starlette.applications import Starlette

from gateway.api.asgi import http_scope
from gateway.app import build_app, build_gateway
from gateway.policy.load import PolicyError
from gateway.records import BackendSnapshot, Decision, RequestRecord
from gateway.routing.pipeline.least_busy import LeastBusyRouter
from gateway.routing.pipeline.router import PolicyRouter

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


def test_a_policy_naming_backends_the_config_lacks_stops_the_start_at_its_line() -> None:
    # The shipped policy names fp8-base and fp8-mtp; this config calls its backends spark-a and spark-b.
    shipped = REPO / "policies/spark-mtp-split.yaml"
    settings = settings_for(
        {"spark-a": "http://127.0.0.1:1", "spark-b": "http://127.0.0.1:2"}, policy=shipped
    )
    with pytest.raises(PolicyError) as caught:
        build_gateway(settings)
    line = shipped.read_text().splitlines().index("    prefer: [fp8-base, fp8-mtp]") + 1
    assert caught.value.lines()[0] == (
        f"{shipped}:{line}: profiles.0.prefer.0: unknown backend 'fp8-base'; did you mean 'spark-a'? "
        "(backends: spark-a, spark-b)"
    )


async def post_empty(app: Starlette, path: str) -> tuple[int, Any]:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(http_scope("POST", path), receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, orjson.loads(
        b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    )


async def test_the_reload_endpoint_refuses_a_policy_naming_a_backend_the_config_lacks(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nprofiles:\n  - name: default\n    prefer: [a]\n")
    gateway = build_gateway(
        settings_for({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}, policy=policy)
    )
    assert gateway.policy is not None
    app, in_force = build_app(gateway), gateway.policy.current
    policy.write_text("version: 1\nprofiles:\n  - name: default\n    prefer: [c]\n")
    status, answer = await post_empty(app, "/gateway/policy/reload")
    assert status == 400
    assert answer["error"]["errors"] == [
        f"{policy}:4: profiles.0.prefer.0: unknown backend 'c'; did you mean 'a'? (backends: a, b)"
    ]
    assert gateway.policy.current is in_force and answer["policy"]["sha256"] == in_force.sha256
    policy.write_text("version: 1\nprofiles:\n  - name: default\n    avoid: [b]\n")  # valid, with a warning
    status, answer = await post_empty(app, "/gateway/policy/reload")
    assert status == 200 and gateway.policy.current.policy.profiles[0].avoid == ["b"]
    assert answer["warnings"] == [
        f"{policy}:2: warning: profiles: no profile can reach backend 'b', so it never serves: "
        "default avoids 'b'"
    ]
