"""Prompt size of the request shapes beyond chat and completions, for routing/request/features.py's estimate.

Agent clients speak other APIs than chat, and their prompts sit in other fields:
- Anthropic Messages (and its count_tokens): `system` (a string or text blocks), content blocks in
  `messages` (text, image, document, tool_use input, tool_result content, thinking), `tools`;
- Responses: `instructions`, `input` (a string or items: messages with input_text / output_text /
  input_image parts, function_call arguments, function_call_output output, reasoning summaries);
- embeddings: `input` (a string, strings, token ids or lists of token ids);
- rerank: `query` and `documents`.
Chat's own fields stay features.py's; what is here reads only the fields chat does not have, so a chat
body is counted exactly as before. Work is bounded by the request checks at the door (depth and counts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

# Anthropic block types that carry media, and the modality each counts as (a fixed token cost each).
# A PDF page (document) is rendered like an image; input_image is the Responses spelling.
_BLOCK_MODALITY = {"image": "image", "document": "image", "input_image": "image"}
_MAX_NESTING = 8  # tool_result content holds blocks, which may hold more: deep enough for real requests


def shape_size(body: Mapping[str, Any], media: dict[str, int]) -> tuple[int, int]:
    """(text characters, exact token ids) in the fields only the non-chat shapes use; media counted into
    `media`."""
    chars = _text_chars(body.get("system"), media, 0)  # Messages: a string or a list of text blocks
    instructions = body.get("instructions")  # Responses
    if isinstance(instructions, str):
        chars += len(instructions)
    input_chars, token_ids = _input_size(body.get("input"), media)
    chars += input_chars
    query = body.get("query")  # rerank
    if isinstance(query, str):
        chars += len(query)
    documents = body.get("documents")
    if isinstance(documents, list):
        for document in documents:
            chars += _text_chars(document, media, 0)
    return chars, token_ids


def block_chars(block: dict[str, Any], media: dict[str, int]) -> int:
    """Characters of one content block chat does not know (it has no string `text`): Anthropic image,
    document, tool_use, tool_result and thinking blocks, Responses function calls and their outputs."""
    return _block_chars(block, media, 0)


def _input_size(value: Any, media: dict[str, int]) -> tuple[int, int]:
    if isinstance(value, str):
        return len(value), 0
    if not isinstance(value, list):
        return 0, 0
    chars = token_ids = 0
    for item in value:
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            token_ids += 1  # embeddings: one prompt given as token ids
        elif isinstance(item, list):
            token_ids += sum(1 for i in item if isinstance(i, int))  # a batch of token id lists
        elif isinstance(item, dict):
            chars += _block_chars(item, media, 0)
    return chars, token_ids


def _block_chars(block: dict[str, Any], media: dict[str, int], depth: int) -> int:
    if depth > _MAX_NESTING:
        return 0
    kind = block.get("type")
    if isinstance(kind, str) and kind in _BLOCK_MODALITY:
        media[_BLOCK_MODALITY[kind]] += 1
        return 0
    chars = 0
    for key in ("text", "thinking", "arguments", "name"):  # text-like fields of blocks and items
        value = block.get(key)
        if isinstance(value, str):
            chars += len(value)
    tool_input = block.get("input")  # tool_use: the arguments as an object
    if isinstance(tool_input, dict):
        with contextlib.suppress(orjson.JSONEncodeError):
            chars += len(orjson.dumps(tool_input))
    for key in ("content", "output", "summary"):  # tool_result, function_call_output, Responses messages
        chars += _text_chars(block.get(key), media, depth + 1)
    return chars


def _text_chars(value: Any, media: dict[str, int], depth: int) -> int:
    """A string, or a list of blocks (text, images, nested tool results)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return _block_chars(value, media, depth)
    if not isinstance(value, list) or depth > _MAX_NESTING:
        return 0
    return sum(_block_chars(b, media, depth) for b in value if isinstance(b, dict))
