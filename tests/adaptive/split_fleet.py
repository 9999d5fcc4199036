"""The split twin fleet adaptive routing is tested on through the real gateway, and the run both API
surfaces (chat, Messages) converge on.

Two engines on devices of their own, each clearly better at one thing:
- x: MTP speculative decoding with high acceptance (fast decode) but a slow prefill (long TTFT);
- y: no speculation and BF16 weights (decode about three times slower) but a fast prefill.
The policy's `prefer` order is wrong for both profiles, so only measurements can route them well.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.sim.fleet import FleetSpec
from tests.e2e.e2e_harness import Stack, gateway_over_fleet

LONG_PROMPT = 4000  # tokens: x needs ~2.7 s of prefill, y ~0.5 s
SHORT_PROMPT = 100
LONG_OUTPUT = 256  # tokens: x ~1.5 s of decode, y ~5 s
ROUNDS = 40  # requests per profile

POLICY = """
version: 1
routing: adaptive
profiles:
  - name: long-prompt
    when: {prompt_tokens: {gte: 3000}}
    prefer: [x, y]
    objective: ttft
  - name: default
    prefer: [y, x]
    objective: e2e
"""

# One streamed request through the gateway (prompt tokens, max tokens, seed) -> (backend, profile); it
# asserts the answer was served whole.
Route = Callable[[Stack, int, int, int], Awaitable[tuple[str, str]]]


def split_fleet() -> FleetSpec:
    common: dict[str, Any] = {"served_model_name": "twin/split", "context_length": 32768, "warmup_s": 0.0}
    x = {
        **common,
        "name": "x",
        "device": "dx",
        "seed": 1,
        "perf": {
            "prefill_tokens_per_s": 1500.0,
            "speculative": {"method": "mtp", "k": 3, "acceptance": [0.95, 0.9, 0.85]},
        },
    }
    y = {
        **common,
        "name": "y",
        "device": "dy",
        "seed": 2,
        "perf": {
            "prefill_tokens_per_s": 8000.0,
            "bytes_per_weight": 2.0,
        },
    }
    return FleetSpec.model_validate({"name": "split", "devices": {"dx": {}, "dy": {}}, "engines": [x, y]})


def write_policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@dataclass(frozen=True)
class Interleaved:
    long_prompt: list[str]  # the backend of each long-prompt request, in order
    long_output: list[str]  # the same for the long-output (default profile) requests
    stats: dict[str, Any]  # /gateway/stats at the end
    upstream: dict[str, int]  # generation requests each engine received


async def run_interleaved(tmp_path: Path, route: Route) -> Interleaved:
    """The two profiles interleaved, one request at a time, from no samples."""
    long_prompt: list[str] = []
    long_output: list[str] = []
    async with gateway_over_fleet(
        split_fleet(), policy=write_policy(tmp_path), state_dir=tmp_path / "state"
    ) as stack:
        for i in range(ROUNDS):
            backend, profile = await route(stack, LONG_PROMPT, 8, i)
            assert profile == "long-prompt"
            long_prompt.append(backend)
            backend, profile = await route(stack, SHORT_PROMPT, LONG_OUTPUT, 100 + i)
            assert profile == "default"
            long_output.append(backend)
        stats = (await stack.http.get("/gateway/stats")).json()
        upstream = stack.upstream_requests()
    return Interleaved(long_prompt, long_output, stats, upstream)


def assert_converged(run: Interleaved) -> None:
    # Both priors were wrong. Exploration (every fourth request while the engine that is not winning has
    # fewer than 5 samples) measures the other engine within 20 requests; from then on each profile goes
    # to the better one.
    assert run.long_prompt[20:] == ["y"] * 20, run.long_prompt
    assert run.long_output[20:] == ["x"] * 20, run.long_output
    for loser, profile in (("x", "long-prompt"), ("y", "default")):
        assert run.stats["backends"][loser][profile]["count"] >= 5  # measured, not assumed
    ttft = {b: run.stats["backends"][b]["long-prompt"]["ttft_p50"] for b in ("x", "y")}
    assert ttft["x"] > 2 * ttft["y"], ttft  # the learned figures say why
