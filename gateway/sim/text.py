"""Deterministic toy tokenizer and output text for the engine twin.

Tokens: a word counts one token per started group of four characters, every other non-space character
counts one, so English prose comes out near four characters per token, like a real BPE vocabulary.

Output: the twin "generates" short vocabulary words whose text depends only on (model name, prompt, seed,
temperature, position). Temperature 0 is greedy and ignores the seed. Speculative decoding is lossless in
real engines, so the text never depends on how many tokens an engine step emitted: the same model and
prompt give the same words on a speculative and a non-speculative engine.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_CHARS_PER_WORD_TOKEN = 4
# Tokens a chat template adds around each message (<|im_start|>role\n ... <|im_end|>\n) and for the
# assistant turn the engine opens for generation.
_TOKENS_PER_MESSAGE = 4
_GENERATION_PROMPT_TOKENS = 3
# Vision encoders turn one image into a fixed grid of patch tokens at the default resolution.
IMAGE_TOKENS = 256

# Every word is at most four letters, so each output token is exactly one token when re-counted.
_VOCAB = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "from",
    "this",
    "be",
    "are",
    "was",
    "or",
    "an",
    "not",
    "but",
    "can",
    "all",
    "we",
    "one",
    "has",
    "more",
    "time",
    "data",
    "runs",
    "fast",
    "step",
    "load",
    "next",
    "each",
    "like",
    "such",
    "fit",
    "keep",
    "peak",
    "pass",
    "line",
    "node",
    "work",
    "test",
    "part",
    "code",
    "view",
]
# Natural answer lengths: long enough that benchmark requests with max_tokens up to 1024 end on "length".
_NATURAL_MIN, _NATURAL_MAX = 1024, 4096


def count_text_tokens(text: str) -> int:
    total = 0
    for piece in _TOKEN_RE.findall(text):
        if piece[0].isalnum() or piece[0] == "_":
            total += -(-len(piece) // _CHARS_PER_WORD_TOKEN)
        else:
            total += 1
    return total


def make_prompt(n_tokens: int, seed: int = 0) -> str:
    """A prompt of exactly `n_tokens` toy tokens (as a completion prompt), varied by `seed`."""
    rng = random.Random(seed)
    return "".join(f" {rng.choice(_VOCAB)}" for _ in range(max(0, n_tokens))).lstrip()


@dataclass(frozen=True, slots=True)
class Prompt:
    """What the engine sees of a request's input: the text it conditions on, its token count, images."""

    text: str
    tokens: int
    images: int = 0


def chat_prompt(messages: Sequence[Mapping[str, Any]], count_images: bool = True) -> Prompt:
    """Flatten chat messages as a chat template would and count their tokens.

    Images add IMAGE_TOKENS each when `count_images` (a vision engine); a text-only engine that drops
    images counts none.
    """
    texts: list[str] = []
    tokens = _GENERATION_PROMPT_TOKENS
    images = 0
    for message in messages:
        role = str(message.get("role", ""))
        parts, n_images = _content_text(message.get("content"))
        body = "".join(parts)
        texts.append(f"{role}: {body}")
        tokens += _TOKENS_PER_MESSAGE + count_text_tokens(body)
        images += n_images
    if count_images:
        tokens += images * IMAGE_TOKENS
    return Prompt(text="\n".join(texts), tokens=tokens, images=images)


def completion_prompt(prompt: str) -> Prompt:
    return Prompt(text=prompt, tokens=count_text_tokens(prompt))


def image_parts(messages: Iterable[Mapping[str, Any]]) -> int:
    return sum(_content_text(m.get("content"))[1] for m in messages)


def _content_text(content: Any) -> tuple[list[str], int]:
    if isinstance(content, str):
        return [content], 0
    if not isinstance(content, list):
        return [], 0
    texts: list[str] = []
    images = 0
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") in ("image_url", "input_image", "image_pil"):
            images += 1
    return texts, images


class OutputText:
    """The words a model "says" for one prompt: position -> token text, plus where it would stop."""

    def __init__(self, model: str, prompt: str, seed: int | None, temperature: float) -> None:
        greedy = temperature <= 0.0
        key = f"{model}\x00{prompt}\x00{'greedy' if greedy else f'{seed}:{temperature:.4f}'}"
        digest = hashlib.sha256(key.encode()).digest()
        self._rng_seed = int.from_bytes(digest[:8], "big")
        self.natural_length = _NATURAL_MIN + int.from_bytes(digest[8:12], "big") % (
            _NATURAL_MAX - _NATURAL_MIN + 1
        )
        self._words: list[str] = []
        self._rng = random.Random(self._rng_seed)

    def token(self, position: int) -> str:
        while len(self._words) <= position:
            self._words.append(self._next_word(len(self._words)))
        return self._words[position]

    def span(self, start: int, count: int) -> str:
        return "".join(self.token(i) for i in range(start, start + count))

    def _next_word(self, position: int) -> str:
        word = self._rng.choice(_VOCAB)
        if position == 0:
            return word.capitalize()
        # A sentence ends roughly every twelve words; the period is its own token.
        if self._rng.random() < 1 / 12:
            return "."
        return f" {word}"
