"""vLLM surface: framing, usage, finish reasons, errors, /v1/models, metrics, readiness, cancellation."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.sim.text import count_text_tokens
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


async def test_stream_has_role_chunk_first_then_content_finish_usage_and_done(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec()) as fleet:
        body = chat(max_tokens=12, stream=True, stream_options={"include_usage": True})
        async with http.post(fleet.url("e") + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            events = sse_events(await resp.text())
    assert events[-1] == "[DONE]"
    first, finish, usage = events[0], events[-3], events[-2]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["id"].startswith("chatcmpl-") and first["object"] == "chat.completion.chunk"
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and "usage" not in finish
    text = streamed_text(events)
    assert usage["usage"]["completion_tokens"] == 12 == count_text_tokens(text)
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 12


async def test_no_usage_chunk_unless_asked_and_continuous_usage_needs_include_usage(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec()) as fleet:
        url = fleet.url("e") + "/v1/chat/completions"
        plain = await stream(http, url, chat(max_tokens=4, stream=True))
        opts = {"continuous_usage_stats": True}
        continuous_only = await stream(http, url, chat(max_tokens=4, stream=True, stream_options=opts))
        opts = {"include_usage": True, "continuous_usage_stats": True}
        both = await stream(http, url, chat(max_tokens=4, stream=True, stream_options=opts))
    assert not any("usage" in e for e in plain[:-1] + continuous_only[:-1])
    assert all("usage" in e for e in both[:-1])
    assert both[0]["usage"]["completion_tokens"] == 0 and both[-2]["usage"]["completion_tokens"] == 4


async def test_natural_end_finishes_with_stop_before_max_tokens(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(engine_spec(context_length=8192)) as fleet,
        http.post(
            fleet.url("e") + "/v1/completions", json={"model": MODEL, "prompt": "Tell me", "max_tokens": 6000}
        ) as resp,
    ):
        body = await resp.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] < 6000 == 6000
    assert count_text_tokens(choice["text"]) == body["usage"]["completion_tokens"]


async def test_non_stream_chat_has_vllm_shape_with_null_fields(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(engine_spec()) as fleet,
        http.post(fleet.url("e") + "/v1/chat/completions", json=chat(max_tokens=5)) as resp,
    ):
        body = await resp.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and message["reasoning"] is None and "refusal" in message
    assert body["choices"][0]["stop_reason"] is None and body["usage"]["completion_tokens"] == 5


async def test_models_reports_max_model_len_root_and_permissions(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(engine_spec(checkpoint="org/ckpt")) as fleet,
        http.get(fleet.url("e") + "/v1/models") as resp,
    ):
        card = (await resp.json())["data"][0]
    assert card["id"] == MODEL and card["root"] == "org/ckpt" and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 4096 and card["permission"][0]["object"] == "model_permission"


@pytest.mark.parametrize(
    ("body", "status", "etype", "fragment"),
    [
        (chat(model="nope"), 404, "NotFoundError", "The model `nope` does not exist."),
        (chat(stream_options={"include_usage": True}), 400, "BadRequestError", "Stream options"),
        (chat("word " * 5000), 400, "BadRequestError", "maximum context length is 4096 tokens"),
        (
            chat(max_tokens=5000),
            400,
            "BadRequestError",
            "max_tokens=5000 cannot be greater than max_model_len",
        ),
        (image_chat(), 400, "BadRequestError", f"{MODEL} is not a multimodal model"),
    ],
)
async def test_request_errors_use_the_nested_shape_with_int_code(
    twin: FleetFactory,
    http: aiohttp.ClientSession,
    body: dict[str, object],
    status: int,
    etype: str,
    fragment: str,
) -> None:
    async with (
        twin(engine_spec()) as fleet,
        http.post(
            fleet.url("e") + "/v1/chat/completions",
            json={**body, "stream": True} if "stream_options" not in body else body,
        ) as resp,
    ):
        assert resp.status == status
        assert resp.content_type == "application/json"
        error = (await resp.json())["error"]
    assert error["type"] == etype and error["code"] == status and fragment in error["message"]


async def test_prompt_plus_max_tokens_over_context_is_clamped_not_rejected(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with (
        twin(engine_spec(context_length=64)) as fleet,
        http.post(
            fleet.url("e") + "/v1/completions", json={"prompt": "word " * 50, "max_tokens": 60}
        ) as resp,
    ):
        body = await resp.json()
    assert resp.status == 200
    assert body["usage"]["completion_tokens"] == 64 - 50
    assert body["choices"][0]["finish_reason"] == "length"


async def test_engine_failure_before_stream_is_a_500_json_and_after_is_an_error_frame_then_done(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(
        engine_spec(faults={"error_rate": 1.0}), engine_spec("s", faults={"stream_error_rate": 1.0})
    ) as fleet:
        async with http.post(fleet.url("e") + "/v1/chat/completions", json=chat(stream=True)) as resp:
            assert resp.status == 500
            assert (await resp.json())["error"]["type"] == "InternalServerError"
        async with http.post(fleet.url("s") + "/v1/chat/completions", json=chat(stream=True)) as resp:
            assert resp.status == 200
            events = sse_events(await resp.text())
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == 500
    assert not any(c.get("finish_reason") for e in events[:-2] for c in e.get("choices", []))


async def test_metrics_use_vllm_names_and_spec_counters_only_when_speculative(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("base"), engine_spec("mtp", perf={"speculative": SPEC})) as fleet:
        families = {}
        for name in fleet.names:
            await (await http.post(fleet.url(name) + "/v1/chat/completions", json=chat(max_tokens=20))).read()
            async with http.get(fleet.url(name) + "/metrics") as resp:
                families[name] = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    base, mtp = families["base"], families["mtp"]
    for name, kind in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:prompt_tokens", "counter"),
        ("vllm:generation_tokens", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:request_success", "counter"),
    ]:
        assert base[name].type == kind
    assert not any(n.startswith("vllm:spec_decode") for n in base)
    generated = [s.value for s in base["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert generated == [20.0]
    per_pos = [
        s for s in mtp["vllm:spec_decode_num_accepted_tokens_per_pos"].samples if s.name.endswith("_total")
    ]
    assert sorted(s.labels["position"] for s in per_pos) == ["0", "1"]
    drafts = mtp["vllm:spec_decode_num_drafts"].samples[0].value
    assert drafts > 0 and mtp["vllm:spec_decode_num_draft_tokens"].samples[0].value == 2 * drafts
    ttft_count = [
        s.value for s in base["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")
    ]
    assert ttft_count == [1.0]


async def test_connection_refused_while_loading_then_health_200(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec(warmup_s=60), wait=False) as fleet:  # 0.3 s real at 200x
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(fleet.url("e") + "/health")
        await fleet.wait_ready(timeout_s=5)
        async with http.get(fleet.url("e") + "/health") as resp:
            assert resp.status == 200 and await resp.read() == b""


async def test_client_disconnect_cancels_the_request_in_the_model(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec(context_length=16384)) as fleet:
        engine = fleet.engine("e")
        for stream in (True, False):
            before = engine.model.stats.requests_cancelled_total
            body = chat(max_tokens=10000, stream=stream, ignore_eos=True)
            if stream:
                resp = await http.post(fleet.url("e") + "/v1/chat/completions", json=body)
                await resp.content.readline()
                resp.close()
            else:
                task = asyncio.ensure_future(http.post(fleet.url("e") + "/v1/chat/completions", json=body))
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            for _ in range(100):
                if engine.model.stats.requests_cancelled_total > before:
                    break
                await asyncio.sleep(0.01)
            assert engine.model.stats.requests_cancelled_total == before + 1
            assert engine.observed.finished["abort"] >= 1


async def test_speculative_and_plain_engines_give_identical_text(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("base"), engine_spec("mtp", perf={"speculative": SPEC})) as fleet:
        texts = {}
        for name in fleet.names:
            body = chat("Explain prefix caching.", max_tokens=80, temperature=0.0, stream=True)
            events = await stream(http, fleet.url(name) + "/v1/chat/completions", body)
            texts[name] = streamed_text(events)
            chunks = [
                e
                for e in events
                if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
            ]
            texts[name + "-chunks"] = str(len(chunks))
    assert texts["base"] == texts["mtp"] and count_text_tokens(texts["base"]) == 80
    # Speculation shows on the wire: steps with several tokens make fewer, larger chunks.
    assert int(texts["mtp-chunks"]) < int(texts["base-chunks"]) == 80
