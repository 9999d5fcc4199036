"""Token ids for the twin's toy tokenizer (gateway/sim/text.py), for /tokenize and /detokenize.

A token is a run of at most four word characters or one other character, with the whitespace before it;
its id is its UTF-8 bytes read as one integer, so detokenizing is exact and needs no vocabulary. The
count matches `count_text_tokens` for text without trailing whitespace.
"""

from __future__ import annotations

import re

_PIECE_RE = re.compile(r"\s*(?:\w{1,4}|[^\w\s])|\s+$")
# Chat templates add marker tokens around messages; the twin gives them the Qwen ids of <|im_start|>.
TEMPLATE_TOKEN_ID = 151644


def pieces(text: str) -> list[str]:
    """The text's tokens, concatenating back to the text."""
    return _PIECE_RE.findall(text)


def encode(text: str) -> list[int]:
    return [int.from_bytes(piece.encode(), "big") for piece in pieces(text)]


def decode(ids: list[int]) -> str:
    out: list[str] = []
    for token in ids:
        if token == TEMPLATE_TOKEN_ID or token <= 0:
            continue
        raw = token.to_bytes((token.bit_length() + 7) // 8, "big")
        out.append(raw.decode(errors="replace"))
    return "".join(out)
