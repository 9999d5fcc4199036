"""How much of a prompt repeats itself: the share of its word 4-grams that occur more than once.

One pure function on the request's raw JSON values (`messages`, `prompt`), shared by the gateway's
request features and the engine twin, so the twin's speculative acceptance depends on exactly the figure
the router sees. Repetitive content (an edit that quotes the file, a tool result the answer will cite,
code) lets draft tokens be copied from the context; novel prose does not.

Bounded work whatever the prompt's size: only the last MAX_CHARS characters of text are read (latest
messages first, at most 64 parts or calls of a message), so a 1 MB prompt costs what a 16 KB one does:
well under a millisecond. Words are whitespace-separated (punctuation stays on them: a copied span
repeats it too), compared without case.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

NGRAM = 4
MAX_CHARS = 16_384  # ~4k tokens of the prompt's tail: a quoted file or tool result and the request on it


def prompt_repetition(messages: Any, prompt: Any) -> float:
    """Share (0..1) of the word 4-grams of the prompt's tail that occur more than once in it."""
    words = _tail_text(messages, prompt).lower().split()
    total = len(words) - NGRAM + 1
    if total <= 0:
        return 0.0
    # Counted by their hashes (a 4-gram's tuple is dropped at once) and the 4-grams seen once counted in C:
    # a fifth faster than counting the tuples and summing in Python, the same figure.
    counts = Counter(map(hash, zip(*(words[i:] for i in range(NGRAM)), strict=False)))
    return (total - list(counts.values()).count(1)) / total


def _tail_text(messages: Any, prompt: Any) -> str:
    """The last MAX_CHARS characters of the prompt's text, in order (chat messages or a completion)."""
    pieces: list[str] = []
    budget = MAX_CHARS
    for text in _texts_latest_first(messages, prompt):
        if budget <= 0:
            break
        piece = text[-budget:]
        pieces.append(piece)
        budget -= len(piece)
    return " ".join(reversed(pieces))


def _texts_latest_first(messages: Any, prompt: Any) -> list[str]:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        return [p for p in reversed(prompt[-64:]) if isinstance(p, str)]
    if not isinstance(messages, list):
        return []
    texts: list[str] = []
    chars = 0
    # Latest first, stopping once the budget is covered: a long history is never walked in full.
    for message in reversed(messages):
        if chars >= MAX_CHARS:
            break
        if isinstance(message, dict):
            for text in reversed(_message_texts(message)):
                texts.append(text)
                chars += len(text)
    return texts


def _message_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts += [p["text"] for p in content[-64:] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls[-16:]:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                texts.append(arguments)
    return texts
