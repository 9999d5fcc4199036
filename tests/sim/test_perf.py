"""PerfSpec validation, the step-time formula, and the calibration of the step model against seed 003.

The calibration tests drive EngineModel directly (no HTTP) in virtual time: an event loop whose clock
jumps to the next timer instead of waiting, so the four scenarios simulate minutes of engine time in
well under a second of real time.
"""

from __future__ import annotations

import asyncio
import selectors
import statistics
from collections.abc import Coroutine
from typing import Any

import pytest

from gateway.bench.scenarios import SCENARIOS, Scenario
from gateway.sim.clock import SimClock
from gateway.sim.model import EngineModel
from gateway.sim.perf import Device, DeviceSpec, PerfSpec, SpecDecodeSpec, StepLoad, step_seconds


class _SkipAheadSelector(selectors.DefaultSelector):
    def __init__(self, advance: Any) -> None:
        super().__init__()
        self._advance = advance

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout:
            self._advance(timeout)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Timers fire in order with no real waiting: loop.time() is virtual."""

    def __init__(self) -> None:
        self._virtual = 0.0
        super().__init__(_SkipAheadSelector(self._advance))

    def _advance(self, seconds: float) -> None:
        self._virtual += seconds

    def time(self) -> float:
        return self._virtual


class LoopClock(SimClock):
    """A SimClock reading the running loop's (virtual) time."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()


def run_virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout=100_000))
    finally:
        loop.close()


async def drive(perf: PerfSpec, scenario: Scenario) -> dict[str, float]:
    """Run a scenario on one engine; return output tok/s and mean TTFT in simulated units."""
    clock = LoopClock()
    model = EngineModel(perf, Device(DeviceSpec()), clock)
    gate = asyncio.Semaphore(scenario.concurrency)
    ttfts: list[float] = []
    tokens = 0

    async def one() -> None:
        nonlocal tokens
        async with gate:
            sent = clock.now()
            first = True
            async for n in model.generate(scenario.prompt_tokens, scenario.max_tokens):
                if first:
                    ttfts.append(clock.now() - sent)
                    first = False
                tokens += n

    start = clock.now()
    await asyncio.gather(*(one() for _ in range(scenario.requests)))
    return {"tok_s": tokens / (clock.now() - start), "ttft_ms": statistics.fmean(ttfts) * 1000}


VANILLA = PerfSpec()
MTP = PerfSpec(kv_capacity_tokens=323_456, speculative=SpecDecodeSpec())
# Seed 003, Qwen3.6-35B-A3B-FP8: (output tok/s, mean TTFT ms or None) per scenario.
SEED_003 = {
    "vanilla": {"A": (50.51, None), "B": (73.98, 4742), "C": (214.28, 3979), "D": (73.88, 718)},
    "mtp": {"A": (54.92, None), "B": (68.68, 2892), "C": (266.25, 1721), "D": (77.60, 502)},
}


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, dict[str, float]]]:
    return {
        name: {s: run_virtual(drive(perf, SCENARIOS[s])) for s in "ABCD"}
        for name, perf in (("vanilla", VANILLA), ("mtp", MTP))
    }


@pytest.mark.parametrize("engine", ["vanilla", "mtp"])
@pytest.mark.parametrize("scenario", list("ABCD"))
def test_output_throughput_within_15_percent_of_seed_003(measured: Any, engine: str, scenario: str) -> None:
    target, _ = SEED_003[engine][scenario]
    assert measured[engine][scenario]["tok_s"] == pytest.approx(target, rel=0.15)


@pytest.mark.parametrize("engine", ["vanilla", "mtp"])
@pytest.mark.parametrize("scenario", list("BCD"))
def test_mean_ttft_within_25_percent_of_seed_003(measured: Any, engine: str, scenario: str) -> None:
    _, target = SEED_003[engine][scenario]
    assert measured[engine][scenario]["ttft_ms"] == pytest.approx(target, rel=0.25)


@pytest.mark.parametrize(("scenario", "mtp_wins"), [("A", True), ("B", False), ("C", True), ("D", True)])
def test_mtp_effect_has_the_seed_sign(measured: Any, scenario: str, mtp_wins: bool) -> None:
    gain = measured["mtp"][scenario]["tok_s"] / measured["vanilla"][scenario]["tok_s"] - 1
    assert (gain > 0) == mtp_wins, f"MTP changes {scenario} by {gain:+.1%}"


def test_spec_fills_unmeasured_positions_by_decaying_the_last_ratio() -> None:
    spec = SpecDecodeSpec(k=3, acceptance=[0.8, 0.6])
    assert spec.acceptance[2] == pytest.approx(0.6 * 0.6 / 0.8)
    assert spec.mean_accepted() == pytest.approx(0.8 + 0.6 + 0.45)


def test_spec_rejects_acceptance_rising_with_position() -> None:
    with pytest.raises(ValueError, match="cannot increase"):
        SpecDecodeSpec(k=2, acceptance=[0.5, 0.7])


def test_perf_rejects_more_active_than_total_parameters() -> None:
    with pytest.raises(ValueError, match="active_params_b"):
        PerfSpec(params_b=3, active_params_b=35)


def test_dense_model_reads_all_weights_every_step() -> None:
    dense = PerfSpec(params_b=27, active_params_b=27, experts_total=1, experts_per_token=1)
    assert dense.split_params_b() == (27, 0.0)


def test_moe_decode_step_grows_sublinearly_with_batch() -> None:
    one = step_seconds(VANILLA, DeviceSpec(), StepLoad(decode_seqs=1, decode_context=1000))
    sixteen = step_seconds(VANILLA, DeviceSpec(), StepLoad(decode_seqs=16, decode_context=16_000))
    assert one < sixteen < 16 * one


def test_prefill_cost_grows_faster_than_linearly_with_context() -> None:
    short = step_seconds(VANILLA, DeviceSpec(), StepLoad(prefill_chunks=[(0, 2048)] * 4))
    long = step_seconds(VANILLA, DeviceSpec(), StepLoad(prefill_chunks=[(0, 8192)]))
    assert long > short


def test_speculative_step_costs_more_than_a_plain_step() -> None:
    load = StepLoad(decode_seqs=4, decode_context=4 * 2048)
    assert step_seconds(MTP, DeviceSpec(), load) > step_seconds(VANILLA, DeviceSpec(), load)


def test_faster_memory_shortens_a_decode_step() -> None:
    load = StepLoad(decode_seqs=1, decode_context=512)
    slow = step_seconds(VANILLA, DeviceSpec(memory_bandwidth_gbs=273), load)
    fast = step_seconds(VANILLA, DeviceSpec(memory_bandwidth_gbs=546), load)
    assert fast < slow


def test_device_contention_counts_only_other_busy_engines() -> None:
    device = Device(DeviceSpec(contention=0.8))
    device.set_busy(1, True)
    assert device.contention_factor(1) == 1.0
    device.set_busy(2, True)
    assert device.contention_factor(1) == pytest.approx(1.8)
    device.set_busy(2, False)
    assert device.contention_factor(1) == 1.0
