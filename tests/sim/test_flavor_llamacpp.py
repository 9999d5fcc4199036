"""llama-server surface: 503 Loading model, errors, per-token chunks, timings, /props, /slots, metrics."""

from __future__ import annotations

import re

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
    stream,
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
            results[name] = await stream(http, fleet.url(name) + "/v1/chat/completions", body)
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


# What llama-server 0c1e570 printed (docs/real-engines.md): name -> (type, HELP), in its order.
REAL_FAMILIES = {
    "llamacpp:prompt_tokens_total": ("counter", "Number of prompt tokens processed, excluding cached tokens"),
    "llamacpp:prompt_tokens_cached_total": ("counter", "Number of prompt tokens reused from the cache"),
    "llamacpp:prompt_seconds_total": ("counter", "Total time spent processing prompts"),
    "llamacpp:tokens_predicted_total": ("counter", "Number of generation tokens processed"),
    "llamacpp:tokens_predicted_seconds_total": ("counter", "Total time spent generating tokens"),
    "llamacpp:n_decode_total": (
        "counter",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
    ),
    "llamacpp:n_tokens_max": ("counter", "Largest observed sequence length (prompt + generation)"),
    "llamacpp:spec_decode_num_draft_tokens_total": ("counter", "Speculative: Total draft tokens generated"),
    "llamacpp:spec_decode_num_accepted_tokens_total": (
        "counter",
        "Speculative: Total draft tokens accepted by the target model",
    ),
    "llamacpp:spec_decode_num_drafts_total": (
        "counter",
        "Speculative: Total speculative decoding verification steps",
    ),
    "llamacpp:prompt_tokens_seconds": ("gauge", "Average prompt throughput in tokens/s"),
    "llamacpp:predicted_tokens_seconds": ("gauge", "Average generation throughput in tokens/s"),
    "llamacpp:requests_processing": ("gauge", "Number of requests processing"),
    "llamacpp:requests_deferred": ("gauge", "Number of requests deferred"),
    "llamacpp:n_busy_slots_per_decode": ("gauge", "Average number of busy slots per llama_decode() call"),
}
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def _declared(text: str) -> dict[str, tuple[str, str]]:
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.M))
    return {name: (kind, helps[name]) for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)}


async def test_metrics_families_types_and_help_texts_match_the_real_server(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama()) as fleet:
        fresh = await http.get(fleet.url("e") + "/metrics")
        fresh_text = await fresh.text()
        await (await http.post(fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=30))).read()
        text = await (await http.get(fleet.url("e") + "/metrics")).text()
    assert fresh.headers["Content-Type"] == "text/plain; version=0.0.4"
    assert int(fresh.headers["Process-Start-Time-Unix"]) > 0
    assert list(_declared(fresh_text).items()) == list(REAL_FAMILIES.items())
    assert list(_declared(text).items()) == list(REAL_FAMILIES.items())  # no per-position family: plain
    assert "llamacpp:prompt_tokens_cached_total 0\n" in text
    # Values go through a C++ ostream: integers without a decimal point.
    assert "llamacpp:tokens_predicted_total 30\n" in text
    assert "llamacpp:spec_decode_num_draft_tokens_total 0\n" in text
    assert "llamacpp:requests_processing 0\n" in text and ".0\n" not in text


async def test_per_position_family_has_the_real_help_after_a_speculative_request(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama(perf={"speculative": SPEC})) as fleet:
        before = await (await http.get(fleet.url("e") + "/metrics")).text()
        await (await http.post(fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=30))).read()
        after = await (await http.get(fleet.url("e") + "/metrics")).text()
    assert PER_POS not in before
    assert _declared(after)[PER_POS] == ("counter", "Accepted tokens per draft position")
    assert re.search(
        r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="1"\} \d+$', after, re.M
    )


async def test_props_hide_server_side_speculation_and_carry_the_real_keys(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama(perf={"speculative": SPEC, "bytes_per_weight": 0.6})) as fleet:
        props = await (await http.get(fleet.url("e") + "/props")).json()
        models = await (await http.get(fleet.url("e") + "/v1/models")).json()
    params = props["default_generation_settings"]["params"]
    assert params["speculative.types"] == "none"
    assert not {"speculative.n_max", "speculative.n_min", "speculative.p_min"} & params.keys()
    assert props["model_ftype"] == "Q4_K - Medium" == models["data"][0]["meta"]["ftype"]
    for key in ("media_marker", "ui", "ui_settings", "cors_proxy_enabled", "endpoint_metrics"):
        assert key in props
    assert props["ui"] is True and props["cors_proxy_enabled"] is False


async def test_slots_show_only_four_fields_until_they_ran_a_task(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama("plain"), llama("spec", perf={"speculative": SPEC})) as fleet:
        fresh = {n: await (await http.get(fleet.url(n) + "/slots")).json() for n in fleet.names}
        for name in fleet.names:
            body = chat(max_tokens=3)
            await (await http.post(fleet.url(name) + "/v1/chat/completions", json=body)).read()
        used = {n: await (await http.get(fleet.url(n) + "/slots")).json() for n in fleet.names}
    assert fresh["plain"][0] == {"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": False}
    assert fresh["spec"][0] == {"id": 0, "n_ctx": 4096, "speculative": True, "is_processing": False}
    assert all(slot.keys() == fresh["plain"][0].keys() for slot in fresh["plain"])
    first, second = used["spec"][0], used["spec"][1]
    assert first["params"]["speculative.types"] == "none,draft-mtp"
    assert used["plain"][0]["params"]["speculative.types"] == "none"
    assert first["n_prompt_tokens"] == first["n_prompt_tokens_processed"] > 0
    assert first["n_prompt_tokens_cache"] == 0 and first["params"]["n_predict"] == 3
    assert first["next_token"][0]["n_decoded"] == 3 and first["is_processing"] is False
    assert "params" not in second and "id_task" not in second  # one request ran: one slot used


async def test_completions_ids_start_with_chatcmpl_like_chat(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama()) as fleet:
        body = {"prompt": "Once upon a time", "max_tokens": 4}
        reply = await (await http.post(fleet.url("e") + "/v1/completions", json=body)).json()
        stream_body = {**body, "stream": True}
        events = await stream(http, fleet.url("e") + "/v1/completions", stream_body)
    assert reply["object"] == "text_completion"
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{32}", reply["id"])
    assert all(e["id"].startswith("chatcmpl-") for e in events if isinstance(e, dict))


async def test_timings_ride_on_the_usage_chunk_with_include_usage_else_on_the_finish_chunk(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(llama()) as fleet:
        runs = {}
        for include in (True, False):
            body = chat(max_tokens=5, stream=True, stream_options={"include_usage": include})
            events = await stream(http, fleet.url("e") + "/v1/chat/completions", body)
            runs[include] = [e for e in events if isinstance(e, dict)]
    with_usage, without = runs[True], runs[False]
    finish, usage_chunk = with_usage[-2], with_usage[-1]
    assert finish["choices"][0]["finish_reason"] == "length" and "timings" not in finish
    assert usage_chunk["choices"] == [] and usage_chunk["timings"]["predicted_n"] == 5
    assert without[-1]["choices"][0]["finish_reason"] == "length" and "timings" in without[-1]
    assert all("usage" not in e and "timings" not in e for e in without[:-1])
    assert "usage" not in without[-1]
