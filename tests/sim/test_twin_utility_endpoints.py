"""Embeddings, rerank, tokenize/detokenize and unknown paths: served where each engine serves them, in
its shape, and refused the way it refuses them."""

from __future__ import annotations

import math

import aiohttp
import pytest

from tests.sim.conftest import FleetFactory, chat, engine_spec

FLAVORS = ("vllm", "sglang", "llamacpp")


async def post(http: aiohttp.ClientSession, url: str, body: object) -> tuple[int, object]:
    async with http.post(url, json=body) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_embeddings_are_deterministic_unit_vectors(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor, embeddings=True)) as fleet:
        url = fleet.url("e") + "/v1/embeddings"
        status, body = await post(http, url, {"input": ["a red engine", "a blue engine"]})
        _, again = await post(http, url, {"input": "a red engine"})
    assert status == 200 and isinstance(body, dict) and isinstance(again, dict)
    first, second = (item["embedding"] for item in body["data"])
    assert first == again["data"][0]["embedding"] and first != second
    assert math.isclose(sum(v * v for v in first), 1.0, rel_tol=1e-9)
    assert [item["index"] for item in body["data"]] == [0, 1] and body["object"] == "list"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    if flavor == "vllm":
        assert body["id"].startswith("embd-")


async def test_embeddings_refused_per_flavor_without_a_pooling_model(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    engines = [engine_spec(f, f) for f in FLAVORS]
    async with twin(*engines) as fleet:
        answers = {f: await post(http, fleet.url(f) + "/v1/embeddings", {"input": "x"}) for f in FLAVORS}
        rerank = {
            f: await post(http, fleet.url(f) + "/v1/rerank", {"query": "q", "documents": ["d"]})
            for f in FLAVORS
        }
    assert answers["vllm"] == (404, {"detail": "Not Found"})  # the route exists only for pooling models
    status, body = answers["sglang"]
    assert status == 400 and isinstance(body, dict) and "--is-embedding" in body["message"]
    message = "This server does not support embeddings. Start it with `--embeddings`"
    error = {"code": 501, "message": message, "type": "not_supported_error"}
    assert answers["llamacpp"] == (501, {"error": error})
    assert rerank["vllm"][0] == 404 and rerank["sglang"][0] == 400 and rerank["llamacpp"][0] == 501


async def test_llamacpp_rerank_orders_documents_by_relevance(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    documents = ["cats sleep all day", "engines decode tokens fast", "speculative decoding drafts tokens"]
    async with twin(engine_spec("e", "llamacpp", reranking=True)) as fleet:
        status, body = await post(
            http,
            fleet.url("e") + "/v1/rerank",
            {"query": "decoding tokens", "documents": documents, "top_n": 2},
        )
    assert status == 200 and isinstance(body, dict)
    assert [r["index"] for r in body["results"]] == [2, 1]
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_tokenize_and_detokenize_round_trip(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    text = "Speculative decoding drafts several tokens per step."
    field = "content" if flavor == "llamacpp" else "prompt"
    async with twin(engine_spec("e", flavor)) as fleet:
        _, tokens = await post(http, fleet.url("e") + "/tokenize", {field: text})
        assert isinstance(tokens, dict)
        _, back = await post(http, fleet.url("e") + "/detokenize", {"tokens": tokens["tokens"]})
        _, completion = await post(
            http, fleet.url("e") + "/v1/completions", {"prompt": text, "max_tokens": 1}
        )
    assert isinstance(back, dict) and isinstance(completion, dict)
    assert list(back.values()) == [text]
    assert len(tokens["tokens"]) == completion["usage"]["prompt_tokens"]
    if flavor != "llamacpp":
        assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 4096


async def test_vllm_tokenize_of_messages_counts_the_chat_prompt(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("e", "vllm")) as fleet:
        body = chat("How many tokens is this?")
        _, tokens = await post(http, fleet.url("e") + "/tokenize", {"messages": body["messages"]})
        _, answer = await post(http, fleet.url("e") + "/v1/chat/completions", {**body, "max_tokens": 1})
    assert isinstance(tokens, dict) and isinstance(answer, dict)
    assert tokens["count"] == answer["usage"]["prompt_tokens"] == len(tokens["tokens"])


async def test_unknown_paths_answer_like_each_server(twin: FleetFactory, http: aiohttp.ClientSession) -> None:
    async with twin(*[engine_spec(f, f) for f in FLAVORS]) as fleet:
        answers = {}
        for flavor in FLAVORS:
            async with http.get(fleet.url(flavor) + "/v1/nothing-here") as resp:
                answers[flavor] = (resp.status, await resp.json())
            async with http.get(fleet.url(flavor) + "/v1/messages") as resp:  # POST only
                answers[flavor + "-get"] = (resp.status, await resp.json())
    assert answers["vllm"] == answers["sglang"] == (404, {"detail": "Not Found"})
    assert answers["vllm-get"] == (405, {"detail": "Method Not Allowed"})
    llama_404 = (404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
    assert answers["llamacpp"] == answers["llamacpp-get"] == llama_404
