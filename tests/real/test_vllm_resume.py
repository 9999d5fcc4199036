"""A real vLLM server stopped (SIGSTOP) mid-answer under the official openai client's stream: the gateway's
hang watch cuts the stream and the other real vLLM server finishes the answer (proxy/resume.py), counting
the text with its `/tokenize` and continuing the assistant's message (`continue_final_message`)."""

from __future__ import annotations

import os
import signal
import time

import openai
import pytest
from gateway_harness import PLAIN, POOL, SPEC, serving, wait_until_ready, write_policy
from vllm_gateway import vllm_pair_settings
from vllm_process import SERVED_NAME, VllmPair

pytestmark = pytest.mark.real

MAX_TOKENS = 48
KILL_AFTER = 6  # chunks read from the first engine before it is stopped: well inside the answer
QUESTION = "Write a long story about a lighthouse keeper and the sea, in plain sentences."


def _request(model: str, stream: bool) -> dict[str, object]:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
        "extra_body": {"ignore_eos": True},
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def test_an_answer_whose_vllm_engine_stops_mid_stream_is_finished_by_the_other(
    vllm_pair: VllmPair, tmp_path_factory: pytest.TempPathFactory
) -> None:
    engines = {PLAIN: vllm_pair.plain, SPEC: vllm_pair.speculative}
    policy = write_policy(tmp_path_factory.mktemp("vllm-resume-policy"))
    settings = vllm_pair_settings(vllm_pair.plain.base_url, vllm_pair.speculative.base_url, policy)
    stopped: int | None = None
    try:
        with serving(settings) as running:
            wait_until_ready(running)
            client = openai.OpenAI(base_url=running.v1, api_key="unused", max_retries=0, timeout=300)
            raw = client.chat.completions.with_raw_response.create(**_request(POOL, True))  # type: ignore[call-overload]
            first = raw.headers["x-gateway-backend"]
            other = SPEC if first == PLAIN else PLAIN
            text, before, ids, chunks, usage, finish = "", "", set(), 0, None, None
            started = time.monotonic()
            for chunk in raw.parse():
                chunks += 1
                ids.add(chunk.id)
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                if chunks == KILL_AFTER:
                    stopped = engines[first].process.pid
                    os.kill(stopped, signal.SIGSTOP)  # the engine stops answering mid-answer
                    before = text
            elapsed = time.monotonic() - started
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
    direct = openai.OpenAI(
        base_url=engines[other].base_url + "/v1", api_key="unused", max_retries=0, timeout=300
    )
    reference = direct.chat.completions.create(**_request(SERVED_NAME, False))  # type: ignore[call-overload]
    print(
        f"\nstopped {first} after {KILL_AFTER} chunks ({len(before)} chars); {other} finished it: "
        f"{chunks} chunks, {len(text)} chars in {elapsed:.1f}s, usage {usage}, finish {finish}"
    )
    assert before and text.startswith(before) and len(text) > len(before)
    assert len(ids) == 1 and finish == "length"
    assert usage is not None and usage.completion_tokens == MAX_TOKENS
    # Greedy decoding on the same weights: the continuation writes what the engine would have.
    assert text == reference.choices[0].message.content
