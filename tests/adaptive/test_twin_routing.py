"""Adaptive routing through the real gateway over the split twin fleet (split_fleet.py), starting with no
samples: chat completions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.adaptive.split_fleet import (
    LONG_OUTPUT,
    SHORT_PROMPT,
    assert_converged,
    run_interleaved,
    split_fleet,
    write_policy,
)
from tests.e2e.e2e_harness import Stack, gateway_over_fleet, send, text_messages


async def route(stack: Stack, prompt_tokens: int, max_tokens: int, seed: int) -> tuple[str, str]:
    routed = await send(stack, text_messages(prompt_tokens, seed=seed), max_tokens)
    assert routed.completion_tokens == max_tokens  # served whole, wherever it went
    return routed.backend, routed.profile


def test_the_router_converges_to_the_better_backend_per_profile_on_a_twin_fleet(tmp_path: Path) -> None:
    assert_converged(asyncio.run(run_interleaved(tmp_path, route)))


def test_traffic_moves_away_from_a_backend_that_slows_down_mid_run(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with gateway_over_fleet(
            split_fleet(), policy=write_policy(tmp_path), state_dir=tmp_path / "state"
        ) as stack:
            before = [(await route(stack, SHORT_PROMPT, LONG_OUTPUT, i))[0] for i in range(70)]
            # The twin's slow-down fault: every step 16x longer. (At 8x, x's measured TPOT, 1.96 ms, ties
            # y's 1.98 ms: a router that keeps measuring both then rightly flips between them.)
            stack.fleet.engine("x").set_slowdown(16.0)
            after = [(await route(stack, SHORT_PROMPT, LONG_OUTPUT, 100 + i))[0] for i in range(20)]
        return before, after

    before, after = asyncio.run(scenario())
    # x's window holds ~55 fast samples; y gets only its refresh once its estimate is 40 requests old.
    assert before[20:].count("y") <= 50 // 40, "".join(before)
    # Five slow samples restart x's fit (regime.fit_current): the bound does not grow with the window.
    # From then on x gets at most a refresh (its estimate is due again once it is old, or once y's own
    # newest samples leave y's fit: what is known of x was measured before).
    moved_at = next(i for i in range(len(after)) if after[i:].count("x") <= 1)
    assert moved_at <= 6, "".join(after)
    assert after[moved_at:].count("x") <= 1, "".join(after)
