"""Speculative acceptance follows the request's content: repetitive prompts are drafted well by every
method, novel prose leaves n-gram lookup with little to copy; the twin reads the same `repetition` the
gateway's features compute."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from gateway.repetition import prompt_repetition
from gateway.sim.clock import SimClock
from gateway.sim.model import EngineModel
from gateway.sim.perf import Device, DeviceSpec, PerfSpec, SpecDecodeSpec
from gateway.sim.text import make_prompt
from tests.sim.conftest import MODEL, FleetFactory, engine_spec

MTP = SpecDecodeSpec(method="mtp", k=3, acceptance=[0.8, 0.6, 0.4])
NGRAM = SpecDecodeSpec(method="ngram", k=3, acceptance=[0.45, 0.2, 0.1])


async def tokens_per_step(spec: SpecDecodeSpec, repetition: float | None, tokens: int = 600) -> float:
    model = EngineModel(PerfSpec(speculative=spec), Device(DeviceSpec()), SimClock(5000.0))
    steps = [n async for n in model.generate(64, tokens, repetition)]
    return tokens / len(steps[1:]) if len(steps) > 1 else 0.0


@pytest.mark.parametrize("spec", [MTP, NGRAM], ids=["mtp", "ngram"])
async def test_tokens_per_step_rise_with_repetition(spec: SpecDecodeSpec) -> None:
    rates = [await asyncio.wait_for(tokens_per_step(spec, r), 20) for r in (0.0, 0.5, 1.0)]
    assert rates[0] < rates[1] < rates[2]
    assert rates[2] > 0.9 * (1 + spec.k)  # verbatim repetition: nearly every draft is accepted


async def test_model_drafters_keep_their_measured_acceptance_on_novel_prose() -> None:
    novel = await tokens_per_step(MTP, 0.0, 2000)
    configured = await tokens_per_step(MTP, None, 2000)
    assert novel == pytest.approx(1 + MTP.mean_accepted(), rel=0.1)
    assert novel == pytest.approx(configured, rel=0.1)


async def test_ngram_lookup_drafts_little_on_novel_prose() -> None:
    novel = await tokens_per_step(NGRAM, 0.0, 2000)
    configured = await tokens_per_step(NGRAM, None, 2000)
    assert novel < 1.2 < configured  # measured (on repetitive work) ~1.75; novel prose ~1.1


def test_novel_rates_never_increase_with_position() -> None:
    rates = SpecDecodeSpec(method="ngram", k=4, acceptance=[0.9, 0.85, 0.2, 0.19]).novel_acceptance()
    assert all(b <= a for a, b in zip(rates, rates[1:], strict=False))
    assert all(0.0 <= r <= 1.0 for r in rates)


def test_measured_repetition_pins_the_configured_rates() -> None:
    spec = SpecDecodeSpec(method="mtp", k=2, acceptance=[0.82, 0.63], measured_repetition=0.5)
    copy_share, rates = spec.acceptance_at(0.5)
    # At the measured content the step mixture gives back the configured per-position rates.
    mixed = [copy_share * 0.97 ** (i + 1) + (1 - copy_share) * r for i, r in enumerate(rates)]
    assert mixed == pytest.approx([0.82, 0.63], abs=1e-9)


async def accepted_share(fleet: Any, http: aiohttp.ClientSession, body: dict[str, Any]) -> float:
    engine = fleet.engine("e")
    before = engine.stats.spec_accepted_tokens_total, engine.stats.spec_draft_tokens_total
    async with http.post(fleet.url("e") + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        await resp.read()
    accepted = engine.stats.spec_accepted_tokens_total - before[0]
    drafted = engine.stats.spec_draft_tokens_total - before[1]
    return accepted / drafted


async def test_the_twin_reads_repetition_from_the_request_it_receives(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    spec = {"method": "ngram", "k": 3, "acceptance": [0.45, 0.2, 0.1]}
    passage = make_prompt(600, seed=5)
    quoting = [
        {"role": "user", "content": passage},
        {"role": "user", "content": f"The tool returned: {passage}"},
    ]
    novel = [{"role": "user", "content": make_prompt(1200, seed=6)}]
    assert prompt_repetition(quoting, None) > 0.9 and prompt_repetition(novel, None) < 0.05
    async with twin(engine_spec(perf={"speculative": spec}, context_length=8192)) as fleet:
        common = {"model": MODEL, "max_tokens": 300, "ignore_eos": True}
        repetitive = await accepted_share(fleet, http, {**common, "messages": quoting})
        prose = await accepted_share(fleet, http, {**common, "messages": novel})
    assert repetitive > 0.8
    assert prose < 0.15
