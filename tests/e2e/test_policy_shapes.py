"""Each shipped policy, through the real gateway over its twin fleet: the seed scenario shapes land on
the backend the policy's comments promise (checked on `x-gateway-backend` / `x-gateway-profile`), its
prefer order routed alone (`routing: static`); as shipped, adaptive routing starts from that order as its
prior and moves off it as measurements say (tests/adaptive).

Shapes (seed 003): A 512 in / 512 out alone; B 8192 / 256 with 4 in flight; C 2048 / 512 with 16 in
flight; D 2048 / 256 with 2 in flight. "N in flight" is made by holding N-1 long requests open before the
probe request is sent; the probe is the shape itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from e2e_harness import Stack, gateway_over_fleet, held, image_messages, send, text_messages


@dataclass(frozen=True)
class Shape:
    prompt: int
    output: int
    in_flight: int  # including the probe


A, B, C, D = Shape(512, 512, 1), Shape(8192, 256, 4), Shape(2048, 512, 16), Shape(2048, 256, 2)

# (fleet, shape, expected backend, expected profile, read the probe to its end)
CASES = [
    # policies/spark-mtp-split.yaml: MTP for A, C and D; the non-MTP instance for B.
    ("spark-duo-35b", "A", "fp8-mtp", "default", True),
    ("spark-duo-35b", "B", "fp8-base", "long-prefill-concurrent", True),
    ("spark-duo-35b", "C", "fp8-mtp", "concurrent-stress", True),
    ("spark-duo-35b", "D", "fp8-mtp", "chat", True),
    # policies/spark-pair.yaml: beyond 8k (prompt + output) to SGLang, the rest to NVFP4 + MTP. The NVFP4
    # box runs four sequences at a time, so at C the held requests queue inside it and the probe spills
    # to SGLang, which has room (docs/policy.md, Overload spill).
    ("spark-pair-27b", "A", "vllm-nvfp4-mtp", "default", True),
    ("spark-pair-27b", "B", "sglang-fp8-ngram", "long-context", True),
    ("spark-pair-27b", "C", "sglang-fp8-ngram", "default", True),
    ("spark-pair-27b", "D", "vllm-nvfp4-mtp", "default", True),
    # policies/spark-home.yaml: all text to the DFlash quant.
    ("spark-home-35b", "A", "q475-dflash", "default", True),
    ("spark-home-35b", "B", "q475-dflash", "default", True),
    ("spark-home-35b", "C", "q475-dflash", "default", True),
    ("spark-home-35b", "D", "q475-dflash", "default", True),
]
SHAPES = {"A": A, "B": B, "C": C, "D": D}
# (fleet, shape) -> the preferred backend whose engine queue the probe spills from: vLLM does not announce
# its max_num_seqs, so the probe waits until the gateway has scraped that queue.
SPILLS = {("spark-pair-27b", "C"): "vllm-nvfp4-mtp"}
# Output of the held requests: long enough to outlast the probe, small enough that 16 of them fit the
# KV cache (and, on spark-pair, the 8k context of the NVFP4 box for the C shape).
HELD_OUTPUT = {"spark-duo-35b": 12000, "spark-pair-27b": 6000, "spark-home-35b": 12000}


async def queue_seen(stack: Stack, backend: str) -> None:
    async with asyncio.timeout(5):
        while not (stack.gateway.registry.engine_waiting(backend) or 0) > 0:
            await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("fleet", "shape_name", "backend", "profile", "complete"),
    CASES,
    ids=[f"{fleet}-{shape}" for fleet, shape, *_ in CASES],
)
async def test_seed_shape_goes_where_the_policy_says(
    fleet: str, shape_name: str, backend: str, profile: str, complete: bool
) -> None:
    shape = SHAPES[shape_name]
    async with (
        gateway_over_fleet(fleet, routing="static") as stack,
        held(stack, shape.in_flight - 1, shape.prompt, HELD_OUTPUT[fleet]),
    ):
        assert stack.inflight() == shape.in_flight - 1
        if (fleet, shape_name) in SPILLS:
            await queue_seen(stack, SPILLS[fleet, shape_name])
        routed = await send(stack, text_messages(shape.prompt), shape.output, complete=complete)
    assert (routed.backend, routed.profile) == (backend, profile)
    if complete:
        assert routed.completion_tokens == shape.output


async def test_spark_home_sends_images_to_the_vision_build_and_text_to_the_fast_quant() -> None:
    async with gateway_over_fleet("spark-home-35b") as stack:
        image = await send(stack, image_messages(), 64)
        text = await send(stack, text_messages(512), 64)
    assert (image.backend, image.profile, image.completion_tokens) == ("fp8-vision", "vision", 64)
    assert (text.backend, text.profile) == ("q475-dflash", "default")


@pytest.mark.parametrize(
    ("prompt", "output", "backend", "profile"),
    [
        (12000, 256, "sglang-fp8-ngram", "long-context"),  # beyond the NVFP4 box's 8192 context
        (7900, 512, "sglang-fp8-ngram", "long-context"),  # the prompt fits, prompt + answer does not
        (6000, 512, "vllm-nvfp4-mtp", "default"),
    ],
)
async def test_spark_pair_sends_what_exceeds_8k_to_the_long_context_box(
    prompt: int, output: int, backend: str, profile: str
) -> None:
    async with gateway_over_fleet("spark-pair-27b", time_scale=200.0) as stack:
        routed = await send(stack, text_messages(prompt), output)
    assert (routed.backend, routed.profile, routed.completion_tokens) == (backend, profile, output)


async def test_reported_prompt_tokens_teach_the_estimator_the_backends_ratio() -> None:
    async with gateway_over_fleet("spark-duo-35b", time_scale=200.0) as stack:
        estimator = stack.gateway.router.estimator  # type: ignore[attr-defined]
        assert estimator.chars_per_token("fp8-mtp") == estimator.default
        messages = text_messages(2048)
        await send(stack, messages, 16)
    content = messages[0]["content"]
    assert isinstance(content, str)
    chars = len(content)
    # The twin counts ~one token per short word; its reported usage replaces the 4-characters guess.
    learned = estimator.chars_per_token("fp8-mtp")
    assert learned != estimator.default
    assert learned == pytest.approx(chars / 2048, rel=0.02)
