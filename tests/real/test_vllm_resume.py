"""A real vLLM server stopped (SIGSTOP) mid-answer under the official openai client's stream: the gateway's
hang watch cuts the stream and the other real vLLM server finishes the answer (proxy/resume.py), counting
the text with its `/tokenize` and continuing the assistant's message (`continue_final_message`)."""

from __future__ import annotations

import os
import signal

import openai
import pytest
from gateway_harness import PLAIN, POOL, SPEC, serving, wait_until_ready, write_policy
from interrupted_stream import assert_one_whole_answer, continuation, greedy_chat, read_interrupted
from vllm_gateway import vllm_pair_settings
from vllm_process import SERVED_NAME, VllmPair

pytestmark = pytest.mark.real

MAX_TOKENS = 48
STOP_AFTER = 6  # chunks read from the first engine before it is stopped: well inside the answer


def test_an_answer_whose_vllm_engine_stops_mid_stream_is_finished_by_the_other(
    vllm_pair: VllmPair, tmp_path_factory: pytest.TempPathFactory
) -> None:
    engines = {PLAIN: vllm_pair.plain, SPEC: vllm_pair.speculative}
    policy = write_policy(tmp_path_factory.mktemp("vllm-resume-policy"))
    settings = vllm_pair_settings(vllm_pair.plain.base_url, vllm_pair.speculative.base_url, policy)
    stopped: list[int] = []

    def stop(backend: str) -> None:  # the engine stops answering mid-answer; SIGCONT below, whatever happens
        stopped.append(engines[backend].process.pid)
        os.kill(stopped[-1], signal.SIGSTOP)

    try:
        with serving(settings) as running:
            wait_until_ready(running)
            client = openai.OpenAI(base_url=running.v1, api_key="unused", max_retries=0, timeout=300)
            read = read_interrupted(client, greedy_chat(POOL, MAX_TOKENS, stream=True), STOP_AFTER, stop)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    other = SPEC if read.first == PLAIN else PLAIN
    direct = openai.OpenAI(
        base_url=engines[other].base_url + "/v1", api_key="unused", max_retries=0, timeout=300
    )
    print("\n" + read.summary(STOP_AFTER, other))
    assert_one_whole_answer(
        read, lambda prefix: continuation(direct, SERVED_NAME, prefix, MAX_TOKENS, {}), MAX_TOKENS
    )
