"""One streamed chat answer read through the gateway with the official openai client, the engine serving
it interrupted (killed or stopped) after a few chunks: what the client read, and the checks that it read
one whole answer. Shared by the llama-server and vLLM continuation tests.

The text after the interruption is checked against the finishing engine's own greedy continuation of the
text before it, not against its uninterrupted answer: the continuation's prompt holds the answer so far,
computed in one batch, where the uninterrupted answer computed it a token at a time, and the sums in
another order can flip a near tie (docs/real-engines.md, "Speculative decoding"). Where the gateway cut
the first stream is not known to the client (it may have relayed a few frames past the ones read before
the interruption), so each cut from there on is tried until one continues into exactly what was read."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types import CompletionUsage

# How many frames past the ones the client read before the interruption the gateway may have relayed: a
# bound, so that a broken continuation cannot pass by meeting a later repeat of a repetitive answer.
RELAYED_AHEAD = 16

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
    pieces: list[str] = field(default_factory=list)  # the content of each chunk read, in order
    pieces_before: int = 0  # how many of them were read before the interruption
    ids: set[str] = field(default_factory=set)
    chunks: int = 0
    usage: CompletionUsage | None = None
    finish: str | None = None
    elapsed_s: float = 0.0

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def before(self) -> str:
        return "".join(self.pieces[: self.pieces_before])

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
            if choice.delta.content:
                read.pieces.append(choice.delta.content)
            read.finish = choice.finish_reason or read.finish
        if read.chunks == after:
            interrupt(read.first)
            read.pieces_before = len(read.pieces)
    read.elapsed_s = time.monotonic() - started
    return read


def continuation(
    engine: openai.OpenAI, model: str, prefix: str, max_tokens: int, extra: dict[str, Any]
) -> Iterator[str]:
    """The engine's greedy streamed continuation of `prefix` as the assistant's answer to QUESTION."""
    request = greedy_chat(model, max_tokens, stream=True)
    request["messages"] = [*request["messages"], {"role": "assistant", "content": prefix}]
    request["extra_body"] = {
        **request["extra_body"],
        "continue_final_message": True,
        "add_generation_prompt": False,
        **extra,
    }
    with engine.chat.completions.create(**request) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    yield choice.delta.content


def continues_into(read: Read, cut: int, pieces: Iterator[str]) -> bool:
    """Whether the first `cut` pieces read, followed by `pieces`, begin with exactly the text read (the
    continuation asks for more tokens than are left, and a speculative engine's frames hold several, so
    it may run past the end; it stops at the first piece that departs from the text)."""
    whole, text = read.text, "".join(read.pieces[:cut])
    for piece in pieces:
        text += piece
        if len(text) >= len(whole):
            return text.startswith(whole)
        if not whole.startswith(text):
            return False
    return False


def assert_one_whole_answer(
    read: Read, continue_from: Callable[[str], Iterator[str]], max_tokens: int
) -> None:
    """One stream (one id) that went on past the interruption to every token asked for, the rest of it
    the finishing engine's greedy continuation of what came before (`continue_from(prefix)` streams it,
    asking for enough tokens)."""
    assert read.before and read.text.startswith(read.before) and len(read.text) > len(read.before)
    assert len(read.ids) == 1 and read.finish == "length"
    assert read.usage is not None and read.usage.completion_tokens == max_tokens
    cuts = range(read.pieces_before, min(read.pieces_before + RELAYED_AHEAD, len(read.pieces)))
    assert any(continues_into(read, cut, continue_from("".join(read.pieces[:cut]))) for cut in cuts)
