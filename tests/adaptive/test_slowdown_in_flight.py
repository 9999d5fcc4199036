"""A favoured engine that slows down mid-run is left within a few requests, through the real gateway over a
twin fleet: its streams in flight show the slow-down long before any of them finishes
(routing/slowdown/reading.py), so the router does not wait for CHANGE_RUN slow answers per profile."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from gateway.sim.fleet import FleetSpec
from tests.e2e.e2e_harness import Stack, gateway_over_fleet, send, text_messages

USERS = 8  # closed-loop clients: each sends its next request when its previous one ends
OUTPUT = 128  # tokens per answer: x ~2.5 s of decode at this load, y ~1.4x that
BEFORE, AFTER = 48, 64  # requests before the slow-down, and after it
# x's every step 4x longer: ~2.9x slower than y from then on. Not 2.5x: beside its busy neighbour a 2.5x
# slower twin engine reads 1.3-1.5x its fits (the neighbour's share of each step is not slowed with it),
# at the 1.5x a slow-down is counted from, so whether it is left within twenty requests turned on noise
# (docs/measurement.md, section 8: 3-10 in 8 runs here, 26 on CI). This tests the mechanism clear of it.
SLOWDOWN = 4.0
TIME_SCALE = 1.0  # real time: the engines, not the relaying of their frames on a busy box, set the pace

POLICY = """
version: 1
routing: adaptive
profiles:
  - name: default
    prefer: [x, y]
    objective: e2e
"""


def pair() -> FleetSpec:
    """x and y on one device (they share its bandwidth, so spreading load gains little); y reads 1.6x the
    weight bytes per step (decodes ~1.4x slower)."""
    common: dict[str, Any] = {
        "served_model_name": "twin/pair",
        "context_length": 32768,
        "warmup_s": 0.0,
        "device": "spark",
    }
    x = {**common, "name": "x", "seed": 1}
    y = {**common, "name": "y", "seed": 2, "perf": {"bytes_per_weight": 1.6}}
    return FleetSpec.model_validate({"name": "pair", "devices": {"spark": {}}, "engines": [x, y]})


async def closed_loop(stack: Stack) -> list[str]:
    """BEFORE + AFTER requests sent by USERS clients, each after its previous answer; x slows down just
    before request BEFORE is sent, while others are in flight. The backends, in sending order."""
    sending = itertools.count()
    sent: dict[int, str] = {}

    async def user() -> None:
        while (i := next(sending)) < BEFORE + AFTER:
            if i == BEFORE:
                stack.fleet.engine("x").set_slowdown(SLOWDOWN)
            routed = await send(stack, text_messages(200, seed=i), OUTPUT)
            assert routed.completion_tokens == OUTPUT  # served whole, wherever it went
            sent[i] = routed.backend

    await asyncio.gather(*(user() for _ in range(USERS)))
    return [sent[i] for i in range(BEFORE + AFTER)]


def test_a_favoured_engine_that_slows_down_is_left_within_twenty_requests(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)

    async def scenario() -> list[str]:
        async with gateway_over_fleet(
            pair(), policy=policy, state_dir=tmp_path / "state", time_scale=TIME_SCALE
        ) as stack:
            return await closed_loop(stack)

    sent = asyncio.run(scenario())
    before, after = sent[:BEFORE], sent[BEFORE:]
    assert before[-16:].count("x") >= 10, "".join(before)  # x is the favoured engine before
    # Of the requests sent once x slowed, at most 20 go to x. Waiting for finished answers alone, x keeps
    # its traffic until five answers wholly served slow restart its fit (the ones in flight at the
    # slow-down were partly fast, so they do not count).
    assert after.count("x") <= 20, "".join(after)
