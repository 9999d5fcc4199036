"""Warm-up truth through the running gateway over a twin fleet whose engines load for 20 and 30
simulated minutes: clients wait `queue.warming_wait_s`, then get 503 `backends_warming` with the time the
first engine still needs as Retry-After; `explain` predicts the same; /gateway/backends shows the times;
nothing speaks of capacity. A ready but full pool still answers `queue_timeout`: that one is capacity.

The twin runs TIME_SCALE times faster than the gateway's clock, so each backend's `warmup_s` is its
simulated warm-up in real seconds: what an operator would declare, or the gateway would have learned."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
from fault_rig import MODEL, Answer, Rig, serve_gateway

from gateway.backends.registry import Status
from gateway.commands.explain import render
from gateway.settings import Settings
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec
from gateway.sim.runner import TwinFleet

TIME_SCALE = 20.0  # simulated seconds per real second: 20 minutes of warm-up are 60 s of real time
WARMUP_SIM_S = {"vllm-a": 1200.0, "sglang-b": 1800.0}  # 20 and 30 simulated minutes
FLAVORS: dict[str, Literal["vllm", "sglang"]] = {"vllm-a": "vllm", "sglang-b": "sglang"}
WARMING_WAIT_S = 1.0
TOLERANCE = 0.2  # Retry-After within 20% of the warm-up really left
QUEUE_WORDS = ("room", "capacity", "busy", "full")  # a warm-up must never be reported in these terms
POLICY = "version: 1\nprofiles:\n  - name: default\n    prefer: [vllm-a]\n"


def warming_fleet() -> FleetSpec:
    return FleetSpec(
        name="warming",
        devices={name: DeviceSpec() for name in WARMUP_SIM_S},
        engines=[
            EngineSpec(name=n, flavor=FLAVORS[n], served_model_name=MODEL, device=n, warmup_s=s, seed=i)
            for i, (n, s) in enumerate(WARMUP_SIM_S.items())
        ],
    )


def warming_settings(
    urls: dict[str, str], policy: Path, *, timeout_s: float = 30.0, max_concurrency: int | None = None
) -> Settings:
    backends = [
        {
            "name": n,
            "url": u,
            "flavor": FLAVORS[n],
            "warmup_s": WARMUP_SIM_S[n] / TIME_SCALE,
            "max_concurrency": max_concurrency,
        }
        for n, u in urls.items()
    ]
    return Settings(
        backends=backends,
        pools=[{"model": MODEL, "backends": list(urls)}],
        policy=policy,
        probe={"interval_s": 0.1, "starting_interval_s": 0.05, "timeout_s": 0.5},
        timeouts={"connect_s": 0.5, "first_byte_s": 2.0, "idle_s": 2.0},
        queue={"timeout_s": timeout_s, "warming_wait_s": WARMING_WAIT_S},
    )


def real_seconds_left(fleet: TwinFleet, engine: str) -> float:
    """What the engine really still needs, in the gateway's (real) seconds: it started loading at the
    fleet's start, simulated time 0."""
    return (WARMUP_SIM_S[engine] - fleet.clock.now()) / TIME_SCALE


def within(value: float, truth: float) -> bool:
    return abs(value - truth) <= TOLERANCE * truth


def speaks_of_capacity(text: str) -> bool:
    return any(word in text.lower() for word in QUEUE_WORDS)


async def explain(r: Rig) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}
    async with r.session.post(r.url + "/gateway/explain", json=body) as response:
        assert response.status == 200
        explained: dict[str, Any] = orjson.loads(await response.read())
    return explained


async def test_a_warming_fleet_answers_backends_warming_with_the_time_left_and_explain_agrees(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with TwinFleet(warming_fleet(), time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
        urls = {name: fleet.url(name) for name in fleet.names}
        async with (
            serve_gateway(warming_settings(urls, policy)) as (url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            r = Rig(url, gateway, fleet, session)
            for name in fleet.names:
                await r.wait_status(name, Status.STARTING)
            explained = await explain(r)
            predicted_left = real_seconds_left(fleet, "vllm-a") - WARMING_WAIT_S  # when the wait ends
            answers: list[Answer] = await asyncio.gather(*(r.chat() for _ in range(3)))
            left = real_seconds_left(fleet, "vllm-a")
            backends = {b["name"]: b for b in (await r.get_json("/gateway/backends"))["backends"]}
            metrics = await r.metrics()
            assert all(fleet.engine(n).observed.requests_total == 0 for n in fleet.names)

    for answer in answers:
        error = answer.json()["error"]
        assert answer.status == 503 and error["code"] == "backends_warming", answer.raw
        assert answer.headers["x-gateway-error-source"] == "gateway"
        assert within(int(answer.headers["retry-after"]), left), (answer.headers["retry-after"], left)
        expected = f"the first (vllm-a) is expected ready in ~{answer.headers['retry-after']} s"
        assert expected in error["message"]
        assert not speaks_of_capacity(error["message"])
        assert WARMING_WAIT_S * 0.8 < answer.seconds < WARMING_WAIT_S + 3.0  # waited, then refused
        assert float(answer.headers["x-gateway-queue-ms"]) >= WARMING_WAIT_S * 800

    outcome = explained["outcome"]
    assert outcome["action"] == "wait" and outcome["waits_for"] == "warm_up"
    assert outcome["wait_s"] == WARMING_WAIT_S and outcome["backend"] == "vllm-a"
    then = outcome["refusal"]
    assert (then["status"], then["code"]) == (503, "backends_warming")
    assert within(then["retry_after"], predicted_left)
    assert abs(then["retry_after"] - int(answers[0].headers["retry-after"])) <= 2  # the same ETA
    assert within(outcome["eta_s"], predicted_left + WARMING_WAIT_S)
    assert not speaks_of_capacity(outcome["summary"] + then["message"] + explained["refusal"]["message"])
    shown = render(explained)
    assert "outcome   waits 1 s (every backend that could serve it is warming up)" in shown
    assert f"then 503 backends_warming (Retry-After {then['retry_after']} s)" in shown

    for name, backend in backends.items():
        assert backend["status"] == "starting" and backend["warmup_source"] == "configured"
        expected_s = backend["expected_ready_at"] - backend["warming_since"]
        assert math.isclose(expected_s, WARMUP_SIM_S[name] / TIME_SCALE, abs_tol=0.01)
        assert within(backend["eta_s"], real_seconds_left(fleet, name) + 0.5)  # read just before
    assert 'gateway_queue_wait_seconds_count{pool="m"} 3.0' in metrics


async def test_a_ready_but_full_pool_is_capacity_for_clients_and_for_explain(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    spec = warming_fleet()
    spec = spec.model_copy(update={"engines": [e.model_copy(update={"warmup_s": 0.0}) for e in spec.engines]})
    async with TwinFleet(spec, time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        urls = {"vllm-a": fleet.url("vllm-a")}
        settings = warming_settings(urls, policy, timeout_s=0.5, max_concurrency=1)
        async with (
            serve_gateway(settings) as (url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            r = Rig(url, gateway, fleet, session)
            await r.wait_status("vllm-a", Status.READY)
            holder = asyncio.create_task(r.chat(max_tokens=2000))  # the only slot, for seconds
            async with asyncio.timeout(5):
                while gateway.registry.backends["vllm-a"].inflight == 0:
                    await asyncio.sleep(0.01)
            explained = await explain(r)
            answer = await r.chat()
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
    error = answer.json()["error"]
    assert answer.status == 503 and error["code"] == "queue_timeout"
    assert "had room within 0.5s" in error["message"]
    outcome = explained["outcome"]
    assert outcome["action"] == "wait" and outcome["waits_for"] == "slot" and outcome["wait_s"] == 0.5
    assert outcome["refusal"]["code"] == "queue_timeout"
    assert math.isclose(float(answer.headers["x-gateway-queue-ms"]), 500, rel_tol=0.5)
