"""Fixtures for the engine twin's tests: a one-engine fleet per flavor on ephemeral ports, fast clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from gateway.sim.fleet import FleetSpec
from gateway.sim.runner import TwinFleet

TIME_SCALE = 200.0
MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
SPEC = {"method": "mtp", "k": 2, "acceptance": [0.82, 0.63]}

FleetFactory = Callable[..., AbstractAsyncContextManager[TwinFleet]]


def engine_spec(name: str = "e", flavor: str = "vllm", **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "flavor": flavor,
        "served_model_name": MODEL,
        "context_length": 4096,
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def twin() -> FleetFactory:
    """`async with twin(engine_spec(...), ...) as fleet:` starts the engines and waits until they serve
    (unless wait=False)."""

    @asynccontextmanager
    async def start(*engines: dict[str, Any], wait: bool = True) -> AsyncIterator[TwinFleet]:
        spec = FleetSpec.model_validate({"name": "test", "engines": list(engines)})
        async with TwinFleet(spec, time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
            if wait:
                await fleet.wait_ready(timeout_s=10)
            yield fleet

    return start


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


def chat(content: str = "Say something about engines.", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def image_chat(**extra: Any) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "What is on this screenshot?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    return {"model": MODEL, "messages": [{"role": "user", "content": parts}], **extra}


def sse_events(raw: str) -> list[Any]:
    """Parse an SSE body strictly: every event is one `data: ...` line followed by a blank line."""
    assert raw.endswith("\n\n"), raw[-200:]
    events: list[Any] = []
    for block in raw[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def stream(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[Any]:
    """POST a streaming request and return its parsed SSE events."""
    async with http.post(url, json=body) as resp:
        return sse_events(await resp.text())


def streamed_text(events: list[Any], key: str = "content") -> str:
    text = ""
    for event in events:
        if isinstance(event, dict):
            for choice in event.get("choices", []):
                part = choice.get("delta", {}).get(key) if "delta" in choice else choice.get("text")
                text += part or ""
    return text
