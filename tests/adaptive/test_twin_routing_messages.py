"""Adaptive routing converges on a Messages-only trace as it does on chat (test_twin_routing.py): the same
split fleet, the same wrong priors, the same assertion on where traffic ends up, every request a streamed
POST /v1/messages with the Anthropic body. The twin engines serve Messages natively, so the gateway
measures their Messages event streams: content deltas give TTFT and decode speed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.adaptive.test_twin_routing import LONG_OUTPUT, LONG_PROMPT, SHORT_PROMPT, split_fleet, write_policy
from tests.e2e.e2e_harness import Stack, gateway_over_fleet, text_messages


def _output_tokens(sse: str) -> int | None:
    """The final usage of a Messages stream (message_delta), None when it has none. vLLM ends its
    Messages stream with `data: [DONE]`, as the twin does; that frame carries nothing."""
    tokens = None
    for line in sse.splitlines():
        if line.startswith("data: {"):
            data = json.loads(line[len("data: ") :])
            if data.get("type") == "message_delta":
                tokens = data["usage"]["output_tokens"]
    return tokens


async def route(stack: Stack, prompt_tokens: int, max_tokens: int, seed: int) -> tuple[str, str]:
    body: dict[str, Any] = {
        "model": stack.model,
        "max_tokens": max_tokens,
        "stream": True,
        "messages": text_messages(prompt_tokens, seed=seed),
    }
    headers = {"anthropic-version": "2023-06-01"}
    async with stack.http.stream("POST", "/v1/messages", json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        sse = (await response.aread()).decode()
    assert _output_tokens(sse) == max_tokens  # served whole, wherever it went
    return response.headers["x-gateway-backend"], response.headers["x-gateway-profile"]


def test_the_router_converges_on_a_messages_only_trace(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str], dict[str, Any], dict[str, int]]:
        long_prompt: list[str] = []
        long_output: list[str] = []
        async with gateway_over_fleet(
            split_fleet(), policy=write_policy(tmp_path), state_dir=tmp_path / "state"
        ) as stack:
            for i in range(40):  # the two profiles interleaved, one request at a time
                backend, profile = await route(stack, LONG_PROMPT, 8, seed=i)
                assert profile == "long-prompt"
                long_prompt.append(backend)
                backend, profile = await route(stack, SHORT_PROMPT, LONG_OUTPUT, seed=100 + i)
                assert profile == "default"
                long_output.append(backend)
            stats = (await stack.http.get("/gateway/stats")).json()
            upstream = stack.upstream_requests()
        return long_prompt, long_output, stats, upstream

    long_prompt, long_output, stats, upstream = asyncio.run(scenario())
    assert sum(upstream.values()) == 80  # every request reached an engine once, as a Messages request
    assert long_prompt[20:] == ["y"] * 20, long_prompt
    assert long_output[20:] == ["x"] * 20, long_output
    for loser, profile in (("x", "long-prompt"), ("y", "default")):
        assert stats["backends"][loser][profile]["count"] >= 5  # measured, not assumed
    ttft = {b: stats["backends"][b]["long-prompt"]["ttft_p50"] for b in ("x", "y")}
    assert ttft["x"] > 2 * ttft["y"], ttft  # measured on the Messages streams' content events
