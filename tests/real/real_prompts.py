"""The few short, deterministic requests the real suite sends (kept small: the suite runs in every CI run)."""

from __future__ import annotations

from typing import Any

MAX_TOKENS = 24

# Prompts whose answers repeat earlier text, so prompt-lookup drafting has n-grams to match.
REPETITIVE_PROMPTS = (
    "Repeat this sentence three times: the cat sat on the mat.",
    "Count from 1 to 20, separated by commas.",
    "Write the word 'hello' ten times, separated by spaces.",
)
FREE_PROMPT = "Name one colour of the sky."

# A 1x1 transparent PNG: the text-only model must refuse it however small it is.
TINY_PNG_DATA_URL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)

# Comfortably more tokens than the 2048-token slot: one word is about one token.
OVERFLOW_TEXT = " ".join(["apple"] * 3000)


def chat(content: Any, max_tokens: int = MAX_TOKENS, **extra: Any) -> dict[str, Any]:
    """A greedy chat request (temperature 0, fixed seed) so two engines can be compared token for token."""
    return {
        "model": "gemma",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1,
        **extra,
    }


def image_content(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": TINY_PNG_DATA_URL}},
    ]
