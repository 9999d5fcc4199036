"""The twin's OpenAI Responses endpoint per flavor: the SDK's client works against it, streams follow
each engine's event order, and stored responses make a follow-up work only on the engine that has it."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from gateway.sim.agent_api import ResponseStore
from tests.sim.conftest import MODEL, FleetFactory, engine_spec

FLAVORS = ("vllm", "sglang", "llamacpp")


def parse_events(raw: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for block in raw.strip("\n").split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data[len("data: ") :])
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def responses(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "input": "Name three engines.",
        "max_output_tokens": 12,
        "temperature": 0,
        **extra,
    }


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_sdk_client_gets_reasoning_and_message_items(twin: FleetFactory, flavor: str) -> None:
    async with twin(engine_spec("e", flavor, reasoning=True)) as fleet:
        client = openai.AsyncOpenAI(base_url=fleet.url("e") + "/v1", api_key="unused", max_retries=0)
        response = await client.responses.create(**responses())
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output_text and response.usage is not None
    assert response.usage.output_tokens == 12
    assert response.usage.total_tokens == response.usage.input_tokens + 12
    assert response.id.startswith("resp_")


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_stream_event_order_and_text(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor)) as fleet:
        async with http.post(fleet.url("e") + "/v1/responses", json=responses(stream=True)) as resp:
            events = parse_events(await resp.text())
        async with http.post(fleet.url("e") + "/v1/responses", json=responses()) as resp:
            whole = await resp.json()
    kinds = [e["type"] for e in events]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    text = "".join(d["delta"] for d in deltas)
    assert text == events[-4]["text"] == whole["output"][0]["content"][0]["text"]  # greedy: same words
    assert events[-1]["response"]["usage"]["output_tokens"] == 12
    if flavor == "llamacpp":
        assert len(deltas) == 12 and all("sequence_number" not in e for e in events)
    else:
        assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_follow_up_works_on_the_engine_that_stored_the_response_and_fails_elsewhere(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    engines = [engine_spec("a", "vllm"), engine_spec("b", "vllm"), engine_spec("s", "sglang")]
    async with twin(*engines, engine_spec("l", "llamacpp")) as fleet:
        async with http.post(fleet.url("a") + "/v1/responses", json=responses()) as resp:
            first = await resp.json()
        follow_up = responses(input="And a fourth?", previous_response_id=first["id"])
        async with http.post(fleet.url("a") + "/v1/responses", json=follow_up) as resp:
            assert resp.status == 200
            second = await resp.json()
        async with http.get(fleet.url("a") + f"/v1/responses/{first['id']}") as resp:
            assert resp.status == 200 and await resp.json() == first
        answers = {}
        for name in ("b", "s", "l"):
            async with http.post(fleet.url(name) + "/v1/responses", json=follow_up) as resp:
                answers[name] = (resp.status, await resp.json())
    # The follow-up's prompt holds the first turn's input and output.
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    assert second["previous_response_id"] == first["id"]
    message = f"Response with id '{first['id']}' not found."
    assert answers["b"] == (
        404,
        {"error": {"message": message, "type": "NotFoundError", "param": "response_id", "code": 404}},
    )
    assert answers["s"][0] == 404 and answers["s"][1]["message"] == message
    assert answers["l"][0] == 400 and answers["l"][1]["error"]["type"] == "invalid_request_error"


async def test_stored_responses_routes_per_flavor(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with twin(engine_spec("v", "vllm"), engine_spec("l", "llamacpp")) as fleet:
        async with http.post(fleet.url("v") + "/v1/responses", json=responses(stream=True)) as resp:
            completed = parse_events(await resp.text())[-1]["response"]
        async with http.get(fleet.url("v") + f"/v1/responses/{completed['id']}") as resp:
            assert await resp.json() == completed  # a streamed response is stored too
        async with http.delete(fleet.url("v") + f"/v1/responses/{completed['id']}") as resp:
            assert resp.status == 405 and await resp.json() == {"detail": "Method Not Allowed"}
        async with http.get(fleet.url("v") + "/v1/responses/resp_unknown") as resp:
            assert resp.status == 404
        async with http.get(fleet.url("l") + "/v1/responses/resp_unknown") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"] == {
                "code": 404,
                "message": "File Not Found",
                "type": "not_found_error",
            }
        async with http.post(fleet.url("l") + "/responses", json=responses()) as resp:
            assert resp.status == 200  # llama-server's alias


def test_response_store_forgets_the_oldest_beyond_its_capacity() -> None:
    store = ResponseStore(capacity=2)
    for number in range(3):
        store.put({"id": f"resp_{number}"}, [])
    assert store.get("resp_0") is None
    assert store.get("resp_1") is not None and store.get("resp_2") is not None
