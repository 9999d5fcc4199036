"""SGLang surface: flat errors, images dropped, info endpoints, sglang:* metrics, two-stage readiness."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.conftest import MODEL, SPEC, FleetFactory, chat, engine_spec, image_chat, sse_events, stream


def sglang(name: str = "e", **overrides: object) -> dict[str, object]:
    return engine_spec(name, "sglang", **overrides)


async def test_stream_keeps_null_fields_echoes_model_and_ends_with_usage_and_done(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(sglang()) as fleet:
        body = chat(model="anything", max_tokens=6, stream=True, stream_options={"include_usage": True})
        events = await stream(http, fleet.url("e") + "/v1/chat/completions", body)
    assert events[-1] == "[DONE]"
    first = events[0]
    assert first["model"] == "anything" and first["usage"] is None
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["reasoning_content"] is None
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert "matched_stop" in events[-3]["choices"][0]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 6


async def test_continuous_usage_works_without_include_usage(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(sglang()) as fleet:
        body = chat(max_tokens=3, stream=True, stream_options={"continuous_usage_stats": True})
        events = await stream(http, fleet.url("e") + "/v1/chat/completions", body)
    assert all(e["usage"] is not None for e in events[:-1])
    assert events[-2]["usage"]["completion_tokens"] == 3


async def test_context_too_long_is_a_flat_400(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with (
        twin(sglang()) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=chat("word " * 5000, stream=True)) as resp,
    ):
        assert resp.status == 400
        error = await resp.json()
    assert error["object"] == "error" and error["code"] == 400 and error["type"] == "BadRequestError"
    assert "is longer than the model's context length (4096 tokens)" in error["message"]


async def test_image_to_text_only_model_is_silently_dropped(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(sglang()) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=image_chat(max_tokens=3)) as resp,
    ):
        assert resp.status == 200
        assert (await resp.json())["usage"]["prompt_tokens"] < 256


async def test_models_model_info_and_server_info(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with twin(sglang(vision=True, perf={"speculative": {"method": "ngram", "k": 3}})) as fleet:
        url = fleet.url("e")
        card = (await (await http.get(url + "/v1/models")).json())["data"][0]
        info = await (await http.get(url + "/model_info")).json()
        server = await (await http.get(url + "/server_info")).json()
        missing = await http.get(url + "/v1/models/other")
    assert card["owned_by"] == "sglang" and card["root"] == MODEL and card["max_model_len"] == 4096
    assert "permission" not in card
    assert info["has_image_understanding"] is True and info["model_path"] == MODEL
    assert server["speculative_algorithm"] == "NGRAM" and server["context_length"] == 4096
    assert "avg_spec_accept_length" in server["internal_states"][0]
    assert missing.status == 404 and (await missing.json())["error"]["code"] == "model_not_found"


async def test_metrics_use_sglang_names(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with twin(sglang(perf={"speculative": SPEC})) as fleet:
        await (await http.post(fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=30))).read()
        families = {
            f.name: f
            for f in text_string_to_metric_families(
                await (await http.get(fleet.url("e") + "/metrics")).text()
            )
        }
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:spec_accept_length",
        "sglang:gen_throughput",
    ):
        assert families[name].type == "gauge"
    for name in ("sglang:prompt_tokens", "sglang:generation_tokens", "sglang:num_requests"):
        assert families[name].type == "counter"
    for name in (
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    ):
        assert families[name].type == "histogram"
    assert families["sglang:spec_accept_length"].samples[0].value > 1.0


async def test_refused_while_loading_then_health_503_while_warming_then_200(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(sglang(warmup_s=200), wait=False) as fleet:  # 0.8 s refused, then 0.2 s of 503 at 200x
        engine = fleet.engine("e")
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(fleet.url("e") + "/health")
        seen_503 = False
        while engine.phase != "ready":
            if engine.phase == "warming":
                async with http.get(fleet.url("e") + "/health") as resp:
                    seen_503 = seen_503 or resp.status == 503
            await asyncio.sleep(0.02)
        assert seen_503
        async with http.get(fleet.url("e") + "/health") as resp:
            assert resp.status == 200


async def test_mid_stream_error_is_a_flat_error_event_then_done(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(sglang(faults={"stream_error_rate": 1.0})) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=chat(stream=True)) as resp,
    ):
        assert resp.status == 200
        events = sse_events(await resp.text())
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["object"] == "error" and events[-2]["error"]["code"] == 500
