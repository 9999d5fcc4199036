"""Faults in the agent APIs: a stream that fails after it started ends with the engine's error event,
a failed request answers the flavor's 500, and a client that goes away cancels the request."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.sim.conftest import MODEL, FleetFactory, engine_spec

MESSAGES = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Tell a story."}]}
RESPONSES = {"model": MODEL, "max_output_tokens": 64, "input": "Tell a story."}


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp"])
async def test_a_stream_failing_after_its_first_event_ends_with_an_error_event(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor)) as fleet:
        fleet.engine("e").set_error_rate(0.0, stream_rate=1.0)
        async with http.post(fleet.url("e") + "/v1/messages", json={**MESSAGES, "stream": True}) as resp:
            messages = await resp.text()
        async with http.post(fleet.url("e") + "/v1/responses", json={**RESPONSES, "stream": True}) as resp:
            responses = await resp.text()
        assert fleet.engine("e").observed.finished["error"] == 2
    assert "event: message_stop" not in messages and "event: error\n" in messages
    assert messages.endswith("data: [DONE]\n\n") == (flavor == "vllm")
    assert "response.completed" not in responses and "event: error\n" in responses


async def test_a_failed_request_answers_the_flavors_500(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("e", "llamacpp")) as fleet:
        fleet.engine("e").set_error_rate(1.0)
        for path, body in (("/v1/messages", MESSAGES), ("/v1/responses", RESPONSES)):
            async with http.post(fleet.url("e") + path, json=body) as resp:
                assert resp.status == 500
                assert (await resp.json())["error"]["type"] == "server_error"


@pytest.mark.parametrize(("path", "body"), [("/v1/messages", MESSAGES), ("/v1/responses", RESPONSES)])
async def test_client_disconnect_cancels_the_request(
    twin: FleetFactory, http: aiohttp.ClientSession, path: str, body: dict[str, Any]
) -> None:
    async with twin(engine_spec("e", "vllm")) as fleet:
        engine = fleet.engine("e")
        engine.set_slowdown(200.0)  # long enough to still be generating when the client leaves
        resp = await http.post(fleet.url("e") + path, json={**body, "stream": True})
        await resp.content.readline()
        resp.close()
        for _ in range(200):
            if engine.model.stats.requests_cancelled_total:
                break
            await asyncio.sleep(0.01)
        assert engine.model.stats.requests_cancelled_total == 1
        assert engine.observed.finished["abort"] == 1
