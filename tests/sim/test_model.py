"""EngineModel behaviour: the generate() contract, admission limits, preemption, speculation, faults."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.sim.clock import SimClock
from gateway.sim.model import EngineModel
from gateway.sim.perf import Device, DeviceSpec, PerfSpec, SpecDecodeSpec

# Small, fast engines: real time per test stays in the tens of milliseconds at this scale.
SCALE = 2000.0


def engine(perf: PerfSpec | None = None, device: Device | None = None, scale: float = SCALE) -> EngineModel:
    return EngineModel(perf or PerfSpec(), device or Device(DeviceSpec()), SimClock(scale))


async def collect(model: EngineModel, prompt: int, max_tokens: int) -> list[int]:
    return [n async for n in model.generate(prompt, max_tokens)]


async def test_plain_engine_yields_one_token_per_step_summing_to_max_tokens() -> None:
    model = engine()
    steps = await asyncio.wait_for(collect(model, 100, 20), 10)
    assert steps == [1] * 20
    assert model.stats.requests_finished_total == 1
    assert model.stats.generation_tokens_total == 20
    assert model.stats.prompt_tokens_total == 100


async def test_speculative_engine_emits_bursts_and_counts_drafts() -> None:
    model = engine(PerfSpec(speculative=SpecDecodeSpec(k=2, acceptance=[0.82, 0.63])))
    steps = await asyncio.wait_for(collect(model, 100, 200), 10)
    assert sum(steps) == 200 and steps[0] == 1
    assert max(steps) == 3
    stats = model.stats
    assert stats.spec_draft_tokens_total == 2 * stats.spec_drafts_total
    assert stats.spec_accepted_tokens_total == sum(stats.spec_accepted_per_pos)
    # Per-position rates near the configured ones (about 130 drafts).
    assert stats.spec_accepted_per_pos[0] / stats.spec_drafts_total == pytest.approx(0.82, abs=0.1)
    assert stats.spec_accepted_per_pos[1] / stats.spec_drafts_total == pytest.approx(0.63, abs=0.1)


async def test_same_seed_replays_the_same_acceptances() -> None:
    perf = PerfSpec(speculative=SpecDecodeSpec(), seed=7)
    first = await asyncio.wait_for(collect(engine(perf), 50, 60), 10)
    second = await asyncio.wait_for(collect(engine(perf), 50, 60), 10)
    assert first == second


async def test_requests_beyond_max_num_seqs_wait_in_the_queue() -> None:
    # A slow clock (each step ~2 ms real), so the gauges are read mid-run.
    model = engine(PerfSpec(max_num_seqs=2), scale=10)
    tasks = [asyncio.create_task(collect(model, 50, 20)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert model.stats.running == 2
    assert model.stats.waiting == 1
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert model.stats.running == 0 and model.stats.waiting == 0


async def test_kv_exhaustion_mid_decode_preempts_and_still_completes() -> None:
    model = engine(PerfSpec(kv_capacity_tokens=1000))
    results = await asyncio.wait_for(asyncio.gather(*(collect(model, 300, 200) for _ in range(3))), 10)
    assert [sum(r) for r in results] == [200, 200, 200]
    assert model.stats.preemptions_total >= 1


async def test_request_larger_than_kv_capacity_is_refused() -> None:
    model = engine(PerfSpec(kv_capacity_tokens=1000))
    with pytest.raises(ValueError, match="KV tokens"):
        await collect(model, 900, 200)


async def test_closing_the_stream_early_cancels_and_frees_the_slot() -> None:
    model = engine()
    stream = model.generate(100, 1000)
    async with contextlib.aclosing(stream):
        async for _ in stream:
            break
    assert model.stats.requests_cancelled_total == 1
    assert model.stats.running == 0 and model.stats.kv_used_tokens == 0


async def test_a_wedged_engine_computes_and_counts_nothing_until_it_runs_again() -> None:
    model = engine()
    stream = model.generate(100, 50)
    got = 0
    async with contextlib.aclosing(stream):
        got += await anext(stream)
        model.wedge()
        await asyncio.sleep(0.1)  # the step under way, if any, ends
        counted = (model.stats.generation_tokens_total, model.stats.kv_used_tokens, model.stats.steps_total)
        await asyncio.sleep(0.3)
        assert (model.stats.generation_tokens_total, model.stats.kv_used_tokens, model.stats.steps_total) == (
            counted
        )
        model.unwedge()
        got += sum([n async for n in stream])
    assert got == 50


async def test_a_request_cancelled_on_a_wedged_engine_is_freed_once_it_runs_again() -> None:
    model = engine()
    stream = model.generate(100, 50)
    async with contextlib.aclosing(stream):
        await anext(stream)
        model.wedge()
    assert model.stats.running == 1  # the abort waits for the engine's loop, as in a real engine
    model.unwedge()
    await collect(model, 10, 2)  # the next step takes the abort
    assert model.stats.requests_cancelled_total == 1 and model.stats.running == 0


async def test_concurrent_requests_take_longer_steps_than_one_alone() -> None:
    # busy_seconds_total is the engine's own simulated step time, immune to event-loop lag.
    alone = engine()
    await collect(alone, 2048, 100)
    crowd = engine()
    await asyncio.wait_for(asyncio.gather(*(collect(crowd, 2048, 100) for _ in range(16))), 10)
    assert crowd.stats.busy_seconds_total > 1.5 * alone.stats.busy_seconds_total


async def test_slowdown_fault_stretches_step_time() -> None:
    normal, slowed = engine(), engine()
    slowed.slowdown = 3.0
    await collect(normal, 100, 50)
    await collect(slowed, 100, 50)
    assert slowed.stats.busy_seconds_total == pytest.approx(3 * normal.stats.busy_seconds_total)


async def test_two_busy_engines_on_one_device_slow_each_other() -> None:
    shared = Device(DeviceSpec(contention=1.0))
    alone = engine()
    await collect(alone, 100, 100)
    a, b = engine(device=shared), engine(device=shared)
    await asyncio.wait_for(asyncio.gather(collect(a, 100, 100), collect(b, 100, 100)), 10)
    assert a.stats.busy_seconds_total > 1.8 * alone.stats.busy_seconds_total


async def test_engines_on_separate_devices_do_not_interfere() -> None:
    alone = engine()
    await collect(alone, 100, 100)
    a, b = engine(), engine()
    await asyncio.wait_for(asyncio.gather(collect(a, 100, 100), collect(b, 100, 100)), 10)
    assert a.stats.busy_seconds_total == pytest.approx(alone.stats.busy_seconds_total)


async def test_idle_engine_holds_no_scheduler_task() -> None:
    model = engine()
    await collect(model, 10, 5)
    await asyncio.sleep(0)
    assert model._task is None
    await model.aclose()
