"""Calibration of the spark-pair-27b (seed 001) and spark-home-35b (seed 000) fleet files.

Each engine's `perf:` block is read from its fleet file and driven through EngineModel in virtual time
(no HTTP), measured the way the seed measured it:

- seed 001, llama-benchy pp512 / tg128: a request's tg rate is (tokens - 1) / (last token - first token);
  at c8 eight requests start together and the aggregate is all tokens after each first one over
  (last end - earliest first token). c1 averages 32 requests and c8 four batches: the seed ran each once,
  so the twin's expected value is what is compared. A batch's requests reach the engine ARRIVAL_GAP_S
  apart, as concurrent HTTP requests do: the first is scheduled alone and the other seven join the next
  step (seed 001's SGLang c8 mean TTFT, 2778 ms, is one request at ~412 ms and seven at ~3.1 s).
- seed 000: one request for 256 tokens, output tokens over wall time, averaged over five runs.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.sim.fleet import load_fleet
from gateway.sim.model import EngineModel
from gateway.sim.perf import Device
from tests.sim.test_perf import LoopClock, run_virtual

FLEETS = Path(__file__).resolve().parents[2] / "deploy" / "fleets"
NGRAM, MTP = "sglang-fp8-ngram", "vllm-nvfp4-mtp"
DFLASH, FP8 = "q475-dflash", "fp8-vision"

# Seed 001 (llama-benchy, depth 0): tok/s and TTFT ms per engine.
SEED_001 = {
    NGRAM: {"tg_c1": 12.7, "tg_c8": 43.1, "ttft_512": 412, "ttft_2048": 1637},
    MTP: {"tg_c1": 23.3, "tg_c8": 61.0, "ttft_512": 760, "ttft_2048": 1004},
}
# Seed 000: single-stream tok/s (256 output tokens over wall time). Its FP8 figure, 62.8, is not a
# target: the fleet runs that build without speculation, as seed 003 measured the same checkpoint.
SEED_000_DFLASH = 71.5
SEED_003_FP8_SINGLE_DECODE = 50.51
ARRIVAL_GAP_S = 0.002


@dataclass(frozen=True)
class Timed:
    """One request on the simulated clock: sent, first token, last token, output tokens."""

    sent: float
    first: float
    end: float
    tokens: int

    @property
    def tg_rate(self) -> float:
        return (self.tokens - 1) / (self.end - self.first)


def engine_model(fleet_file: str, engine: str) -> EngineModel:
    fleet = load_fleet(FLEETS / fleet_file)
    spec = fleet.engine(engine)
    return EngineModel(spec.perf, Device(fleet.devices[spec.device]), LoopClock())


async def timed(model: EngineModel, prompt: int, max_tokens: int, delay_s: float = 0.0) -> Timed:
    await asyncio.sleep(delay_s)
    sent = model.clock.now()
    first: float | None = None
    tokens = 0
    async for n in model.generate(prompt, max_tokens):
        first = model.clock.now() if first is None else first
        tokens += n
    assert first is not None
    return Timed(sent, first, model.clock.now(), tokens)


async def benchy(model: EngineModel, prompt: int, concurrency: int, batches: int) -> dict[str, float]:
    """llama-benchy's tg figures (aggregate at c > 1, per request) and mean TTFT, averaged over batches."""
    aggregates, rates, ttfts = [], [], []
    for _ in range(batches):
        batch = await asyncio.gather(
            *(timed(model, prompt, 128, i * ARRIVAL_GAP_S) for i in range(concurrency))
        )
        span = max(r.end for r in batch) - min(r.first for r in batch)
        aggregates.append(sum(r.tokens - 1 for r in batch) / span)
        rates += [r.tg_rate for r in batch]
        ttfts += [r.first - r.sent for r in batch]
    return {
        "aggregate": statistics.fmean(aggregates),
        "per_request": statistics.fmean(rates),
        "ttft_ms": statistics.fmean(ttfts) * 1000,
    }


async def measure_pair_engine(engine: str) -> dict[str, float]:
    c1 = await benchy(engine_model("spark-pair-27b.yaml", engine), 512, 1, 32)
    c8 = await benchy(engine_model("spark-pair-27b.yaml", engine), 512, 8, 4)
    long_prompt = await benchy(engine_model("spark-pair-27b.yaml", engine), 2048, 1, 4)
    accept = await accept_length(engine_model("spark-pair-27b.yaml", engine))
    return {
        "tg_c1": c1["per_request"],
        "tg_c8": c8["aggregate"],
        "ttft_512": c1["ttft_ms"],
        "ttft_2048": long_prompt["ttft_ms"],
        "accept_length": accept,
    }


async def concurrent(model: EngineModel, requests: int, prompt: int, max_tokens: int) -> None:
    await asyncio.gather(*(timed(model, prompt, max_tokens) for _ in range(requests)))


async def accept_length(model: EngineModel) -> float:
    """vLLM's / SGLang's mean acceptance length: tokens per speculative step, bonus token included."""
    await concurrent(model, 8, 512, 512)
    stats = model.stats
    return 1 + stats.spec_accepted_tokens_total / stats.spec_drafts_total


async def single_stream(engine: str, runs: int = 5) -> float:
    model = engine_model("spark-home-35b.yaml", engine)
    rates = []
    for _ in range(runs):
        request = await timed(model, 256, 256)
        rates.append(request.tokens / (request.end - request.sent))
    return statistics.fmean(rates)


@pytest.fixture(scope="module")
def pair() -> dict[str, dict[str, float]]:
    return {engine: run_virtual(measure_pair_engine(engine)) for engine in (NGRAM, MTP)}


@pytest.fixture(scope="module")
def home() -> dict[str, float]:
    return {engine: run_virtual(single_stream(engine)) for engine in (DFLASH, FP8)}


@pytest.mark.parametrize("engine", [NGRAM, MTP])
@pytest.mark.parametrize("figure", ["tg_c1", "tg_c8"])
def test_decode_throughput_within_20_percent_of_seed_001(pair: Any, engine: str, figure: str) -> None:
    assert pair[engine][figure] == pytest.approx(SEED_001[engine][figure], rel=0.20)


@pytest.mark.parametrize("engine", [NGRAM, MTP])
@pytest.mark.parametrize("figure", ["ttft_512", "ttft_2048"])
def test_single_request_ttft_within_15_percent_of_seed_001(pair: Any, engine: str, figure: str) -> None:
    assert pair[engine][figure] == pytest.approx(SEED_001[engine][figure], rel=0.15)


@pytest.mark.parametrize(("engine", "low", "high"), [(NGRAM, 1.65, 1.85), (MTP, 2.5, 3.5)])
def test_acceptance_length_lies_in_the_seed_001_range(
    pair: Any, engine: str, low: float, high: float
) -> None:
    assert low <= pair[engine]["accept_length"] <= high


@pytest.mark.parametrize("figure", ["tg_c1", "tg_c8"])
def test_mtp_engine_out_decodes_the_ngram_engine(pair: Any, figure: str) -> None:
    # Seed 001: +84% at c1, +42% at c8; the twin must keep the winner and a clear margin.
    assert pair[MTP][figure] > 1.25 * pair[NGRAM][figure]


def test_dflash_quant_single_stream_within_20_percent_of_seed_000(home: Any) -> None:
    assert home[DFLASH] == pytest.approx(SEED_000_DFLASH, rel=0.20)


def test_fp8_vision_build_decodes_like_seed_003_measured_the_same_checkpoint(home: Any) -> None:
    assert home[FP8] == pytest.approx(SEED_003_FP8_SINGLE_DECODE, rel=0.15)


def test_dflash_quant_decodes_faster_than_the_fp8_vision_build(home: Any) -> None:
    assert home[DFLASH] > home[FP8]


def test_dflash_drafts_are_accepted_about_60_percent_of_the_time() -> None:
    model = engine_model("spark-home-35b.yaml", DFLASH)
    run_virtual(concurrent(model, 8, 256, 256))
    stats = model.stats
    # Seed 000: 501 of 831 drafted tokens accepted over one run.
    assert stats.spec_accepted_tokens_total / stats.spec_draft_tokens_total == pytest.approx(0.60, abs=0.06)
