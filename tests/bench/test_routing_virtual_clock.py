"""`bench routing` on the virtual clock: the gateway and the twin keep the loop's simulated time, so what a
replay measures does not depend on how busy the machine is; each round draws the twin's random numbers
from seeds of its own."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from gateway import clock
from gateway.bench import virtual_time
from gateway.bench.routing import Bench, _reseeded
from gateway.bench.routing_oracles import Strategy
from gateway.bench.routing_trace import LeastInflightRouter
from gateway.bench.routing_tracefile import load_trace
from gateway.sim.fleet import load_fleet
from tests.bench.test_routing_suite import TINY_FLEET, TINY_TRACE, write


def test_the_gateway_reads_the_loop_s_clock_only_where_the_loop_keeps_simulated_time() -> None:
    async def ten_simulated_minutes() -> tuple[float, float, float, float]:
        read = clock.reader()  # the hot path's: chosen once
        started, held, epoch, real = clock.monotonic(), read(), clock.epoch(), time.monotonic()
        await asyncio.sleep(600)
        return clock.monotonic() - started, read() - held, clock.epoch() - epoch, time.monotonic() - real

    elapsed, held_elapsed, epoch_elapsed, real = virtual_time.run(ten_simulated_minutes)
    assert elapsed == held_elapsed == 600 and abs(epoch_elapsed - 600) < 1 and real < 5

    async def on_a_real_loop() -> tuple[float, object]:
        return abs(clock.monotonic() - time.monotonic()), clock.reader()

    drift, read = asyncio.run(on_a_real_loop())
    assert drift < 0.01 and read is time.monotonic  # the machine's clock, at full resolution
    assert abs(clock.epoch() - time.time()) < 0.01


Figures = tuple[float, float, float | None, float | None]  # goodput, duration s, TTFT p50 and p95 ms


def replay(tmp_path: Path, busy_machine: bool) -> Figures:
    """One least-in-flight replay of the tiny fleet on the virtual clock, in simulated time. A busy
    machine is a task that holds the loop 3 ms of real time in every 10 ms of simulated time, as another
    process on the same core would."""
    spec = load_fleet(write(tmp_path, "fleet.yaml", TINY_FLEET))
    trace = load_trace(write(tmp_path, "trace.yaml", TINY_TRACE))

    async def hog() -> None:
        while True:
            time.sleep(0.003)
            await asyncio.sleep(0.01)

    async def one() -> Figures:
        busy = asyncio.ensure_future(hog()) if busy_machine else None
        with tempfile.TemporaryDirectory() as work, tqdm(disable=True) as progress:
            bench = Bench(spec, None, Path(work), progress, trace)
            result = await bench.run(Strategy("least_inflight", LeastInflightRouter))
        if busy is not None:
            busy.cancel()
        assert result.failures == 0 and result.requests == trace.requests()
        assert result.loop_lag_p95_ms is None  # never late: not sampled
        return result.goodput_tok_s, result.duration_s, result.ttft_p50_ms, result.ttft_p95_ms

    return virtual_time.run(one)


def test_a_replay_reads_the_same_on_a_busy_machine(tmp_path: Path) -> None:
    started = time.monotonic()
    quiet = replay(tmp_path, busy_machine=False)
    quiet_wall = time.monotonic() - started
    assert quiet[2] is not None and quiet[2] > 0  # a TTFT was measured, in simulated ms
    assert replay(tmp_path, busy_machine=True) == quiet
    # The tiny trace lasts seconds of simulated time; the replay took less wall time than that.
    assert quiet[1] > quiet_wall


def test_each_round_draws_the_twin_s_random_numbers_from_its_own_seeds(tmp_path: Path) -> None:
    engine = load_fleet(write(tmp_path, "fleet.yaml", TINY_FLEET)).engines[0]
    assert _reseeded(engine, 0) == engine
    first, second = _reseeded(engine, 1), _reseeded(engine, 2)
    assert len({engine.seed, first.seed, second.seed}) == 3
    assert len({engine.perf.seed, first.perf.seed, second.perf.seed}) == 3
    assert first.model_copy(update={"seed": engine.seed, "perf": engine.perf}) == engine  # nothing else
