"""Overload spill through a running gateway over a twin fleet: a static `prefer` policy, more concurrent
streams than the preferred engine runs at once, and the other engine serves some of them.

Two ways the gateway learns the preferred engine is saturated: its own in-flight count reaching the
capacity the engine announced (llama.cpp's total_slots), and the engine's scraped queue (vLLM's
num_requests_waiting, since vLLM does not announce max_num_seqs). Every wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from fault_rig import MODEL, Answer, Rig, serve_gateway

from gateway.backends.registry import Status
from gateway.settings import Settings
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec, PerfSpec
from gateway.sim.runner import TwinFleet

PREFERRED, OTHER = "fp8-mtp", "fp8-base"
SLOTS = 2  # the preferred engine's max_num_seqs
POLICY = f"""
version: 1
routing: static
profiles:
  - name: default
    prefer: [{PREFERRED}, {OTHER}]
"""


@asynccontextmanager
async def spill_rig(tmp_path: Path, preferred_flavor: str) -> AsyncIterator[Rig]:
    spec = FleetSpec(
        name="spill",
        devices={PREFERRED: DeviceSpec(), OTHER: DeviceSpec()},
        engines=[
            EngineSpec(
                name=PREFERRED,
                flavor=preferred_flavor,  # type: ignore[arg-type]
                served_model_name=MODEL,
                device=PREFERRED,
                perf=PerfSpec(max_num_seqs=SLOTS),
            ),
            EngineSpec(name=OTHER, served_model_name=MODEL, device=OTHER, seed=1),
        ],
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with TwinFleet(spec, time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        flavors = {PREFERRED: preferred_flavor, OTHER: "vllm"}
        settings = Settings(
            backends=[{"name": n, "url": fleet.url(n), "flavor": flavors[n]} for n in fleet.names],
            pools=[{"model": MODEL, "backends": [PREFERRED, OTHER]}],
            policy=policy,
            probe={"interval_s": 0.1, "starting_interval_s": 0.05, "timeout_s": 0.5},
            timeouts={"connect_s": 0.5, "first_byte_s": 5.0, "idle_s": 5.0},
            measurement={"scrape_interval_s": 0.05},
        )
        async with (
            serve_gateway(settings) as (url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            r = Rig(url, gateway, fleet, session)
            for name in fleet.names:
                await r.wait_status(name, Status.READY)
            yield r


def long_stream(r: Rig) -> asyncio.Task[Answer]:
    """A stream that runs for about a second of real time (1,500 tokens, no early stop)."""
    extra: dict[str, Any] = {"ignore_eos": True}
    return asyncio.create_task(r.chat(stream=True, max_tokens=1500, **extra))


async def staggered(r: Rig, n: int) -> list[asyncio.Task[Answer]]:
    """`n` streams, started a little apart so each is routed after the previous one was dispatched."""
    tasks = []
    for _ in range(n):
        tasks.append(long_stream(r))
        await asyncio.sleep(0.03)
    return tasks


async def test_streams_beyond_the_announced_capacity_spill_to_the_other_engine(tmp_path: Path) -> None:
    async with asyncio.timeout(30), spill_rig(tmp_path, "llamacpp") as r:
        assert r.gateway.registry.backends[PREFERRED].discovered_capacity == SLOTS
        answers = await asyncio.gather(*await staggered(r, 3 * SLOTS))
    assert all(a.stream_ok for a in answers), [a.status for a in answers]
    served = [a.backend for a in answers]
    assert served.count(OTHER) >= SLOTS, served  # the preferred engine's slots full: the rest spilled
    assert served.count(PREFERRED) >= 1, served


async def test_a_queue_inside_the_engine_spills_the_next_streams(tmp_path: Path) -> None:
    async with asyncio.timeout(30), spill_rig(tmp_path, "vllm") as r:
        # vLLM does not announce its limit: one stream past it queues inside the engine unseen.
        first = await staggered(r, SLOTS + 1)
        async with asyncio.timeout(5):
            while not (r.gateway.registry.engine_waiting(PREFERRED) or 0) > 0:
                await asyncio.sleep(0.02)
        later = await staggered(r, SLOTS)
        answers = await asyncio.gather(*first, *later)
    assert all(a.stream_ok for a in answers), [a.status for a in answers]
    assert answers[0].backend == PREFERRED
    assert [a.backend for a in answers[SLOTS + 1 :]] == [OTHER] * SLOTS
