"""One streamed chat answer read through the gateway with the official openai client, the engine serving
it interrupted (killed or stopped) after a few chunks: what the client read, and the checks that it read
one whole answer. Shared by the llama-server and vLLM continuation tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types import CompletionUsage

QUESTION = "Write a long story about a lighthouse keeper and the sea, in plain sentences."


def greedy_chat(model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    """A greedy chat request that decodes all `max_tokens` (ignore_eos), usage asked for when streamed."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "extra_body": {"ignore_eos": True},
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclass
class Read:
    """What the client read: the backend it began on, the text before and after the interruption."""

    first: str = ""
    text: str = ""
    before: str = ""
    ids: set[str] = field(default_factory=set)
    chunks: int = 0
    usage: CompletionUsage | None = None
    finish: str | None = None
    elapsed_s: float = 0.0

    def summary(self, after: int, other: str) -> str:
        return (
            f"{self.first} interrupted after {after} chunks ({len(self.before)} chars); {other} finished it: "
            f"{self.chunks} chunks, {len(self.text)} chars in {self.elapsed_s:.1f}s, usage {self.usage}, "
            f"finish {self.finish}"
        )


def read_interrupted(
    client: openai.OpenAI, request: dict[str, Any], after: int, interrupt: Callable[[str], None]
) -> Read:
    """Stream `request`, calling `interrupt(backend)` on the backend serving it after `after` chunks."""
    raw = client.chat.completions.with_raw_response.create(**request)
    read = Read(first=raw.headers["x-gateway-backend"])
    started = time.monotonic()
    for chunk in raw.parse():
        read.chunks += 1
        read.ids.add(chunk.id)
        read.usage = chunk.usage or read.usage
        for choice in chunk.choices:
            read.text += choice.delta.content or ""
            read.finish = choice.finish_reason or read.finish
        if read.chunks == after:
            interrupt(read.first)
            read.before = read.text
    read.elapsed_s = time.monotonic() - started
    return read


def assert_one_whole_answer(read: Read, reference: str | None, max_tokens: int) -> None:
    """One stream (one id) that went on past the interruption to every token asked for, and wrote what the
    engine that finished it writes uninterrupted (greedy decoding on the same weights)."""
    assert read.before and read.text.startswith(read.before) and len(read.text) > len(read.before)
    assert len(read.ids) == 1 and read.finish == "length"
    assert read.usage is not None and read.usage.completion_tokens == max_tokens
    assert read.text == reference
