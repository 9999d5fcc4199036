"""Passive health and waiting for a comeback, through the real gateway over the twin: a backend that
answers requests stays alive whatever a slow probe says, a refused connection is proof of death at once,
and a request whose every candidate is down waits (bounded) for a restarting one instead of failing."""

from __future__ import annotations

import asyncio
from typing import Any

from fault_rig import Rig, fleet_spec, rig

from gateway.backends.registry import Status

# Probes every 0.1 s, timing out after 0.2 s: a hung engine misses them.
SLOW_PROBES = {"interval_s": 0.1, "timeout_s": 0.2, "passive_window_s": 2.0, "timeouts_to_dead": 3}
# The restarted engine shares the test's event loop: on a loaded host a loop stall longer than the rig's
# 0.5 s connect timeout would read as the engine's, a failure these tests are not about.
AFTER_RESTART = {"connect_s": 5.0}


async def test_probe_timeouts_do_not_kill_a_backend_that_serves_requests() -> None:
    probe = {**SLOW_PROBES, "passive_window_s": 4.0}
    async with rig(fleet_spec("a"), probe=probe) as r:
        assert (await r.chat()).status == 200  # it served just now
        r.fleet.engine("a").hang()
        await _probe_timeouts(r, "a", 3)  # enough in a row to call it dead, were it not serving
        serving = r.gateway.registry.served_within("a", 4.0)
        still = r.gateway.registry.backends["a"].status
        await r.wait_status("a", Status.DEAD, timeout=10.0)  # once the window is over, it is dead
    assert serving, "the probes took longer than the passive window: the check below would say nothing"
    assert still is Status.READY


async def test_a_few_probe_timeouts_alone_are_no_proof_of_death() -> None:
    probe = {**SLOW_PROBES, "passive_window_s": 0.0, "timeouts_to_dead": 1000}
    async with rig(fleet_spec("a"), probe=probe) as r:
        r.fleet.engine("a").hang()
        await _probe_timeouts(r, "a", 4)
        status = r.gateway.registry.backends["a"].status
    assert status is Status.READY


async def _probe_timeouts(r: Rig, backend: str, count: int) -> None:
    """Wait for the probe timeouts themselves: a loaded host runs fewer probes in a given time."""
    async with asyncio.timeout(10):
        while r.gateway.prober.timeouts_in_a_row(backend) < count:
            await asyncio.sleep(0.02)


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
    async with rig(fleet_spec("a"), queue={"timeout_s": 10.0}, timeouts=AFTER_RESTART) as r:
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
    error = answer.json()["error"]
    # Within the startup grace it may be restarting: a warm-up, with vLLM's default 10 min as the ETA.
    assert answer.status == 503 and error["code"] == "backends_warming"
    assert "warming up or restarting" in error["message"]
    assert 590 <= int(answer.headers["retry-after"]) <= 600
    assert 0.5 < answer.seconds < 3.0


async def test_a_request_reset_by_a_restarting_engine_waits_for_it() -> None:
    async with rig(fleet_spec("a"), queue={"timeout_s": 10.0}, timeouts=AFTER_RESTART) as r:
        engine = r.fleet.engine("a")
        engine.hang()
        pending = asyncio.create_task(r.chat())
        await asyncio.sleep(0.3)  # sent, waiting for an answer (first-token timeout 1 s)
        await engine.restart()  # the connection is reset before any answer: no proof of death
        answer = await asyncio.wait_for(pending, 10)
    assert answer.status == 200 and answer.backend == "a"


async def test_a_request_whose_only_backend_has_an_open_breaker_waits_for_the_cool_down() -> None:
    breaker = {"failure_threshold": 1, "cooldown_s": 0.5}
    async with rig(fleet_spec("a"), breaker=breaker, queue={"timeout_s": 10.0}) as r:
        engine = r.fleet.engine("a")
        engine.set_error_rate(1.0)
        failed = await r.chat()  # a 5xx opens the breaker
        engine.set_error_rate(0.0)
        answer = await r.chat()
    assert failed.status == 500
    assert answer.status == 200 and answer.backend == "a"
    assert answer.seconds > 0.2  # it waited for the cool-down rather than failing at once


async def test_an_open_breaker_cooling_down_after_the_deadline_is_refused_at_once() -> None:
    breaker = {"failure_threshold": 1, "cooldown_s": 30.0}
    async with rig(fleet_spec("a"), breaker=breaker, queue={"timeout_s": 2.0}) as r:
        engine = r.fleet.engine("a")
        engine.set_error_rate(1.0)
        await r.chat()
        answer = await r.chat()
    assert answer.status == 503 and answer.headers["retry-after"] == "1"
    assert answer.seconds < 1.5  # no wait for a cool-down the deadline cannot reach


async def test_a_request_cut_on_a_stalled_backend_waits_for_its_mark_to_lift() -> None:
    """Its only backend stops answering anything (a SIGSTOP): the request waiting there is cut (its
    control plane silent: found unresponsive by the hang watch, or dead by the prober, whichever is
    first; silence alone confirms nothing where no other engine could take it), and with no other
    candidate it waits, within its queue deadline, for the backend's next answer rather than failing
    with a 504 that could have been served."""
    settings = {
        "timeouts": {"first_byte_s": 30.0},
        "queue": {"timeout_s": 10.0},
        "stall": {"min_silence_s": 1.0},
    }
    async with rig(fleet_spec("a"), **settings) as r:
        engine = r.fleet.engine("a")
        engine.hang()
        pending = asyncio.create_task(r.chat(stream=True))
        async with asyncio.timeout(10):
            state = r.gateway.registry.backends["a"]
            while state.stalled_since is None and state.status is not Status.DEAD:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        assert not pending.done()  # cut, and waiting for a comeback
        _resume(engine)  # SIGCONT: it answers again
        answer = await asyncio.wait_for(pending, 10)
    assert answer.stream_ok and answer.backend == "a", answer.raw[-300:]


def _resume(engine: Any) -> None:
    """The twin's hang ends as a stopped process continues: what waited is served."""
    engine.phase = "ready"
    engine._awake.set()
