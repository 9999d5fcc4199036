"""Engine faults and controls: crash, hang, restart, slowdown, error rate, scheduled faults."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.sim.conftest import FleetFactory, chat, engine_spec


async def test_crash_refuses_connections_and_restart_warms_up_on_the_same_port(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec(warmup_s=40)) as fleet:
        engine = fleet.engine("e")
        url = fleet.url("e")
        await engine.crash()
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(url + "/health")
        await engine.restart()
        assert fleet.url("e") == url and engine.phase == "loading"
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(url + "/health")
        await engine.wait_ready(timeout_s=5)
        async with http.get(url + "/health") as resp:
            assert resp.status == 200


async def test_crash_drops_an_in_flight_stream(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with twin(engine_spec(context_length=16384)) as fleet:
        resp = await http.post(
            fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=10000, ignore_eos=True, stream=True)
        )
        await resp.content.readline()
        await fleet.engine("e").crash()
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()


async def test_hang_accepts_connections_but_never_answers(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec()) as fleet:
        fleet.engine("e").hang()
        with pytest.raises(asyncio.TimeoutError):
            await http.get(fleet.url("e") + "/health", timeout=aiohttp.ClientTimeout(total=0.3))


async def test_scheduled_faults_fire_on_the_simulated_clock(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    faults = {"crash_at_s": 400.0}  # 2 s real at 200x: the first check runs well before it on a loaded host
    async with twin(
        engine_spec("c", faults=faults),
        engine_spec("s", faults={"slowdown_at_s": 20.0, "slowdown_factor": 3.0}),
    ) as fleet:
        async with http.get(fleet.url("c") + "/health") as resp:
            assert resp.status == 200
        async with asyncio.timeout(10):  # wait for the fault itself, not a fixed real time
            while fleet.engine("c").phase != "crashed":
                await asyncio.sleep(0.02)
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(fleet.url("c") + "/health")
        assert fleet.engine("s").model.slowdown == 3.0


async def test_error_rate_control_switches_requests_to_500(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec()) as fleet:
        url = fleet.url("e") + "/v1/chat/completions"
        async with http.post(url, json=chat(max_tokens=2)) as resp:
            assert resp.status == 200
        fleet.engine("e").set_error_rate(1.0)
        async with http.post(url, json=chat(max_tokens=2)) as resp:
            assert resp.status == 500


async def test_slowdown_control_stretches_simulated_decode_time(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("fast"), engine_spec("slow")) as fleet:
        # Steps stretched well past the event loop's own overhead per step (at x200 a healthy step is
        # tens of microseconds of real time, and a busy machine's lateness adds as much to both engines):
        # with a 4x slow-down a loaded run read 1.5x; tests/sim/test_model.py checks the factor itself.
        fleet.engine("slow").set_slowdown(40.0)
        for name in fleet.names:
            async with http.post(
                fleet.url(name) + "/v1/completions", json={"prompt": "go", "max_tokens": 40}
            ) as resp:
                assert resp.status == 200
        fast = fleet.engine("fast").observed.itl
        slow = fleet.engine("slow").observed.itl
    assert slow.sum / slow.count > 4 * fast.sum / fast.count
