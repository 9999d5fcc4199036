"""Adaptive routing converges on a Messages-only trace as it does on chat (test_twin_routing.py): the same
split fleet and wrong priors (split_fleet.py), the same assertion on where traffic ends up, every request
a streamed POST /v1/messages with the Anthropic body. The twin engines serve Messages natively, so the
gateway measures their Messages event streams: content deltas give TTFT and decode speed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.adaptive.split_fleet import assert_converged, run_interleaved
from tests.e2e.e2e_harness import Stack, text_messages


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
    run = asyncio.run(run_interleaved(tmp_path, route))
    assert sum(run.upstream.values()) == 80  # every request reached an engine once, as a Messages request
    assert_converged(run)  # TTFT measured on the Messages streams' content events
