"""A real llama-server killed with SIGKILL mid-answer, under the official openai client's stream: the
other real llama-server finishes the answer (proxy/resume.py), counting the text with its own
`/tokenize` and continuing the assistant's message, spliced into the same stream."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from engine_fleet import COMMON_ARGS
from gateway_harness import PLAIN, POOL, SPEC, pair_settings, serving, wait_until_ready, write_policy
from interrupted_stream import assert_one_whole_answer, continuation, greedy_chat, read_interrupted
from llama_build import BuiltServer
from llama_process import LlamaServer, start, stop

pytestmark = pytest.mark.real

MAX_TOKENS = 120
KILL_AFTER = 12  # chunks read from the first engine before it is killed: well inside the answer


@contextmanager
def two_engines(build: BuiltServer, model: Path, logs: Path) -> Iterator[dict[str, LlamaServer]]:
    """Two plain llama-servers of the model (neither the session's pair: one is killed here)."""
    started: list[LlamaServer] = []
    try:
        for name in ("first", "second"):
            started.append(start(name, build.binary, ["--model", str(model), *COMMON_ARGS], logs))
        yield {PLAIN: started[0], SPEC: started[1]}
    finally:
        for server in started:
            stop(server)


def test_an_answer_whose_engine_is_killed_mid_stream_is_finished_by_the_other(
    llama_server_build: BuiltServer, gemma_gguf: Path, tmp_path: Path
) -> None:
    with two_engines(llama_server_build, gemma_gguf, tmp_path) as engines:
        settings = pair_settings(engines[PLAIN].base_url, engines[SPEC].base_url, write_policy(tmp_path))
        with serving(settings) as running:
            wait_until_ready(running)
            client = openai.OpenAI(base_url=running.v1, api_key="unused", max_retries=0, timeout=120)
            read = read_interrupted(
                client,
                greedy_chat(POOL, MAX_TOKENS, stream=True),
                KILL_AFTER,
                lambda backend: engines[backend].process.kill(),  # SIGKILL mid-answer
            )
            other = SPEC if read.first == PLAIN else PLAIN
            print("\n" + read.summary(KILL_AFTER, other))
            # Straight to the engine that finished it, each prompt computed afresh as the gateway's
            # continuation was (no KV reused from the one before).
            direct = openai.OpenAI(base_url=engines[other].base_url + "/v1", api_key="unused", max_retries=0)
            assert_one_whole_answer(
                read,
                lambda prefix: continuation(direct, "any", prefix, MAX_TOKENS, {"cache_prompt": False}),
                MAX_TOKENS,
            )
