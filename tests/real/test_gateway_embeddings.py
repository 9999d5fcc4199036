"""Embeddings from a real llama-server started for them (`--embeddings --pooling mean`), through the
gateway with the official openai client: one vector per input, in order, of the model's width, with the
engine's usage. The server is a process of this module's own, stopped when the module ends."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from engine_fleet import COMMON_ARGS
from engine_http import request
from gateway_harness import RunningGateway, serving, wait_until_ready, write_policy
from llama_build import BuiltServer
from llama_process import LlamaServer, start, stop

from gateway.settings import load_settings

pytestmark = pytest.mark.real

EMBEDDER, POOL = "embedder", "gemma-embed"
INPUTS = ["The sky is blue.", "The sky is blue.", "Tax law of the fourteenth century."]


@pytest.fixture(scope="module")
def embedding_engine(
    llama_server_build: BuiltServer, gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    args = ["--model", str(gemma_gguf), *COMMON_ARGS, "--embeddings", "--pooling", "mean"]
    server = start("embeddings", llama_server_build.binary, args, tmp_path_factory.mktemp("llama-embed-logs"))
    try:
        yield server
    finally:
        stop(server)


@pytest.fixture(scope="module")
def embed_gateway(
    embedding_engine: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    settings = load_settings(
        None,
        backends=[{"name": EMBEDDER, "url": embedding_engine.base_url, "flavor": "llamacpp"}],
        pools=[{"model": POOL, "backends": [EMBEDDER]}],
        policy=write_policy(tmp_path_factory.mktemp("embed-policy")),
        probe={"interval_s": 0.5, "starting_interval_s": 0.02, "timeout_s": 2.0},
    )
    with serving(settings) as running:
        wait_until_ready(running, (EMBEDDER,))
        yield running


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_embeddings_create_through_the_gateway(
    embed_gateway: RunningGateway, embedding_engine: LlamaServer
) -> None:
    with openai.OpenAI(base_url=embed_gateway.v1, api_key="unused", max_retries=0, timeout=60) as client:
        raw = client.embeddings.with_raw_response.create(model=POOL, input=INPUTS)
    assert raw.headers["x-gateway-backend"] == EMBEDDER
    answer = raw.parse()
    assert [item.index for item in answer.data] == list(range(len(INPUTS)))
    vectors = [item.embedding for item in answer.data]
    width = len(vectors[0])
    assert width > 1 and all(len(v) == width for v in vectors)
    # Mean pooling of real hidden states: the same text gives the same vector, a different one does not.
    assert _cosine(vectors[0], vectors[1]) > 0.999
    assert _cosine(vectors[0], vectors[2]) < 0.99
    assert answer.usage.prompt_tokens > 0
    # The engine's own answer for the first input, asked directly: the gateway changed nothing.
    direct = request(embedding_engine.port, "POST", "/v1/embeddings", {"model": POOL, "input": INPUTS[0]})
    assert direct.status == 200
    assert _cosine(direct.json()["data"][0]["embedding"], vectors[0]) > 0.999
