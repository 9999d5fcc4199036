"""Passive health and waiting for a comeback, through the real gateway over the twin: a backend that
answers requests stays alive whatever a slow probe says, a refused connection is proof of death at once,
and a request whose every candidate is down waits (bounded) for a restarting one instead of failing."""

from __future__ import annotations

import asyncio

from fault_rig import fleet_spec, rig

from gateway.backends.registry import Status

# Probes every 0.1 s, timing out after 0.2 s: a hung engine misses them.
SLOW_PROBES = {"interval_s": 0.1, "timeout_s": 0.2, "passive_window_s": 2.0, "timeouts_to_dead": 3}


async def test_probe_timeouts_do_not_kill_a_backend_that_serves_requests() -> None:
    async with rig(fleet_spec("a"), probe=SLOW_PROBES) as r:
        assert (await r.chat()).status == 200  # it served just now
        engine = r.fleet.engine("a")
        engine.hang()
        await asyncio.sleep(1.2)  # about four probe timeouts in a row, inside the passive window
        still = r.gateway.registry.backends["a"].status
        await r.wait_status("a", Status.DEAD, timeout=5.0)  # once the window is over, it is dead
    assert still is Status.READY


async def test_a_few_probe_timeouts_alone_are_no_proof_of_death() -> None:
    probe = {**SLOW_PROBES, "passive_window_s": 0.0, "timeouts_to_dead": 1000}
    async with rig(fleet_spec("a"), probe=probe) as r:
        r.fleet.engine("a").hang()
        await asyncio.sleep(1.0)
        status = r.gateway.registry.backends["a"].status
    assert status is Status.READY


async def test_a_refused_connection_marks_the_backend_down_at_once() -> None:
    probe = {"interval_s": 60.0}  # the prober will not notice: only the request's failure can tell
    async with rig(fleet_spec("a", "b"), probe=probe) as r:
        await r.fleet.engine("a").crash()
        answers = [await r.chat() for _ in range(4)]
        status = r.gateway.registry.backends["a"].status
    assert [a.status for a in answers] == [200] * 4
    assert {a.backend for a in answers} == {"b"}
    assert status is Status.DEAD


async def test_a_request_whose_only_backend_crashed_waits_for_its_restart() -> None:
    async with rig(fleet_spec("a"), queue={"timeout_s": 10.0}) as r:
        engine = r.fleet.engine("a")
        await engine.crash()
        pending = asyncio.create_task(r.chat())
        await asyncio.sleep(0.5)
        assert not pending.done()  # waiting, not failed with a 502
        await engine.restart()
        answer = await asyncio.wait_for(pending, 10)
    assert answer.status == 200 and answer.backend == "a"


async def test_a_crashed_backend_that_never_returns_ends_in_a_clear_503() -> None:
    async with rig(fleet_spec("a"), queue={"timeout_s": 0.8}) as r:
        await r.fleet.engine("a").crash()
        answer = await r.chat()
    assert answer.status == 503 and answer.json()["error"]["code"] == "queue_timeout"
    assert answer.headers["retry-after"] == "1"
    assert 0.5 < answer.seconds < 3.0
