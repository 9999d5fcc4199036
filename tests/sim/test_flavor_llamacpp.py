"""llama-server surface: 503 Loading model, errors, per-token chunks, timings, /props, /slots, metrics."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.conftest import (
    MODEL,
    SPEC,
    FleetFactory,
    chat,
    engine_spec,
    image_chat,
    sse_events,
    streamed_text,
)


def llama(name: str = "e", **overrides: object) -> dict[str, object]:
    return engine_spec(name, "llamacpp", **overrides)


async def test_every_path_answers_503_loading_model_until_loaded(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama(warmup_s=100), wait=False) as fleet:
        for method, path in [("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")]:
            async with http.request(method, fleet.url("e") + path, json=chat()) as resp:
                assert resp.status == 503
                assert await resp.json() == {
                    "error": {"message": "Loading model", "type": "unavailable_error", "code": 503}
                }
        await fleet.wait_ready(timeout_s=5)
        async with http.get(fleet.url("e") + "/health") as resp:
            assert resp.status == 200 and await resp.json() == {"status": "ok"}


async def test_stream_sends_one_chunk_per_token_and_timings_with_drafts_on_the_last_chunk(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama("plain"), llama("spec", perf={"speculative": SPEC})) as fleet:
        results = {}
        for name in fleet.names:
            body = chat(max_tokens=40, stream=True, stream_options={"include_usage": True}, temperature=0)
            async with http.post(fleet.url(name) + "/v1/chat/completions", json=body) as resp:
                results[name] = sse_events(await resp.text())
    plain, spec = results["plain"], results["spec"]
    assert plain[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    content_chunks = [e for e in plain[1:-3]]
    assert len(content_chunks) == 40 and all(len(e["choices"][0]["delta"]) == 1 for e in content_chunks)
    assert plain[-3]["choices"][0] == {"finish_reason": "length", "index": 0, "delta": {}}
    assert plain[-2]["choices"] == [] and plain[-2]["usage"]["completion_tokens"] == 40
    assert "draft_n" not in plain[-2]["timings"] and plain[-2]["timings"]["predicted_n"] == 40
    assert (
        spec[-2]["timings"]["draft_n"] > 0
        and 0 < spec[-2]["timings"]["draft_n_accepted"] <= spec[-2]["timings"]["draft_n"]
    )
    assert streamed_text(plain) == streamed_text(spec)


async def test_image_to_text_only_model_is_a_500_server_error(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(llama()) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=image_chat(stream=True)) as resp,
    ):
        assert resp.status == 500
        error = (await resp.json())["error"]
    assert error["type"] == "server_error" and error["code"] == 500
    assert error["message"].startswith("image input is not supported")


async def test_context_too_long_is_exceed_context_size_error_with_counts(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(llama()) as fleet,
        http.post(
            fleet.url("e") + "/v1/completions", json={"prompt": "word " * 5000, "stream": True}
        ) as resp,
    ):
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == 4096
    assert error["n_prompt_tokens"] == 5000 and "param" not in error
    assert error["message"] == (
        "request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it"
    )


async def test_models_props_and_slots_expose_context_and_vision(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama(vision=True, perf={"speculative": SPEC})) as fleet:
        url = fleet.url("e")
        models = await (await http.get(url + "/v1/models")).json()
        alias = await (await http.get(url + "/models")).json()
        props = await (await http.get(url + "/props")).json()
        slots = await (await http.get(url + "/slots")).json()
    assert models == {**alias, "data": [{**alias["data"][0], "created": models["data"][0]["created"]}]}
    assert models["data"][0]["id"] == MODEL and models["data"][0]["meta"]["n_ctx"] == 4096
    assert models["models"][0]["capabilities"] == ["completion", "multimodal"]
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert props["modalities"]["vision"] is True
    assert props["default_generation_settings"]["params"]["speculative.n_max"] == 2
    assert slots[0]["speculative"] is True and slots[0]["n_ctx"] == 4096


async def test_mid_stream_error_ends_without_done(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with (
        twin(llama(faults={"stream_error_rate": 1.0})) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=chat(stream=True)) as resp,
    ):
        assert resp.status == 200
        events = sse_events(await resp.text())
    assert events[-1]["error"]["type"] == "server_error"
    assert "[DONE]" not in events


async def test_metrics_have_llamacpp_names_without_labels(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama(perf={"speculative": SPEC})) as fleet:
        await (await http.post(fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=30))).read()
        text = await (await http.get(fleet.url("e") + "/metrics")).text()
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:n_decode_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:spec_decode_num_drafts_total",
        "llamacpp:spec_decode_num_accepted_tokens_total",
    ):
        assert name in samples
    assert samples["llamacpp:tokens_predicted_total"].value == 30
    assert all(not s.labels or set(s.labels) == {"position"} for s in samples.values())
    assert "llamacpp:kv_cache_usage_ratio" not in text
    assert 'spec_decode_num_accepted_tokens_per_pos_total{position="0"}' in text
