"""A real llama-server killed with SIGKILL mid-answer, under the official openai client's stream: the
other real llama-server finishes the answer (proxy/resume.py), counting the text with its own
`/tokenize` and continuing the assistant's message, spliced into the same stream."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from engine_fleet import COMMON_ARGS
from gateway_harness import PLAIN, POOL, SPEC, pair_settings, serving, wait_until_ready, write_policy
from llama_build import BuiltServer
from llama_process import LlamaServer, start, stop

pytestmark = pytest.mark.real

MAX_TOKENS = 120
# Chunks the client reads from the first engine before it is killed: well inside the answer.
KILL_AFTER = 12
QUESTION = "Write a long story about a lighthouse keeper and the sea, in plain sentences."


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


def _request() -> dict[str, object]:
    return {
        "model": POOL,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"ignore_eos": True},
    }


def test_an_answer_whose_engine_is_killed_mid_stream_is_finished_by_the_other(
    llama_server_build: BuiltServer, gemma_gguf: Path, tmp_path: Path
) -> None:
    with two_engines(llama_server_build, gemma_gguf, tmp_path) as engines:
        settings = pair_settings(engines[PLAIN].base_url, engines[SPEC].base_url, write_policy(tmp_path))
        with serving(settings) as running:
            wait_until_ready(running)
            client = openai.OpenAI(base_url=running.v1, api_key="unused", max_retries=0, timeout=120)
            raw = client.chat.completions.with_raw_response.create(**_request())  # type: ignore[call-overload]
            first = raw.headers["x-gateway-backend"]
            other = SPEC if first == PLAIN else PLAIN
            text, before, ids, chunks, usage, finish = "", "", set(), 0, None, None
            started = time.monotonic()
            for chunk in raw.parse():
                chunks += 1
                ids.add(chunk.id)
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                if chunks == KILL_AFTER:
                    engines[first].process.kill()  # SIGKILL mid-answer
                    before = text
            elapsed = time.monotonic() - started
            # The same request straight to the engine that finished it, uninterrupted, for comparison.
            direct = openai.OpenAI(base_url=engines[other].base_url + "/v1", api_key="unused", max_retries=0)
            reference = direct.chat.completions.create(
                **{**_request(), "model": "any", "stream": False}  # type: ignore[arg-type]
            )
    print(
        f"\nkilled {first} after {KILL_AFTER} chunks ({len(before)} chars); {other} finished it: "
        f"{chunks} chunks, {len(text)} chars in {elapsed:.1f}s, usage {usage}, finish {finish}"
    )
    assert before and text.startswith(before) and len(text) > len(before)
    assert len(ids) == 1 and finish == "length"
    assert usage is not None and usage.completion_tokens == MAX_TOKENS
    # Greedy decoding on the same weights: the continuation writes what the engine would have.
    assert text == reference.choices[0].message.content
