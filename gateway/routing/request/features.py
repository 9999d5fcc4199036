"""Request features, computed once per request from the parsed body, cheaply (no tokenizer).

Prompt tokens are estimated from characters. The ratio is learned per backend from the
`usage.prompt_tokens` each backend reports (`TokenEstimator.observe`), starting at ~4 characters per token.
Images, video and audio are counted as a fixed number of tokens each, never by their (base64) bytes.
`repetition` is the share of the prompt's word 4-grams that repeat (gateway/repetition.py, bounded work).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from gateway.records import BackendSnapshot, Features
from gateway.records.endpoints import ENDPOINTS
from gateway.repetition import prompt_repetition
from gateway.routing.request.shapes import block_chars, shape_size

DEFAULT_CHARS_PER_TOKEN = 4.0
# Fixed token costs of non-text parts. A 1024x1024 image is ~1k tokens on Qwen-VL style encoders; video
# and audio vary more, so these err on the large side (context-fit checks should not under-count).
MEDIA_TOKENS = {"image": 1024, "video": 4096, "audio": 1024}
PER_MESSAGE_TOKENS = 4  # role markers and separators the chat template adds around each message
# Output budget assumed when the client sets no max_tokens: engines would otherwise allow the whole rest
# of the context, which says nothing about what the request really needs.
DEFAULT_OUTPUT_TOKENS = 256

# Content-part types (OpenAI, vLLM, SGLang, llama.cpp spellings) and the modality each carries.
_PART_MODALITY = {
    "image_url": "image",
    "input_image": "image",
    "image_embeds": "image",
    "image_pil": "image",
    "video_url": "video",
    "video_embeds": "video",
    "input_audio": "audio",
    "audio_url": "audio",
    "audio_embeds": "audio",
}


class TokenEstimator:
    """Characters per prompt token, per backend: an exponential moving average of observed ratios.

    Bounded: at most `max_backends` entries, least recently updated dropped first.
    """

    def __init__(
        self, default: float = DEFAULT_CHARS_PER_TOKEN, *, alpha: float = 0.2, max_backends: int = 256
    ) -> None:
        self.default = default
        self.alpha = alpha
        self.max_backends = max_backends
        self._ratio: OrderedDict[str, float] = OrderedDict()

    def observe(self, backend: str, prompt_chars: int, prompt_tokens: int) -> None:
        # Tiny prompts are dominated by template tokens and would skew the ratio low: skip them.
        if prompt_tokens < 16 or prompt_chars < 64:
            return
        sample = prompt_chars / prompt_tokens
        old = self._ratio.pop(backend, None)
        self._ratio[backend] = sample if old is None else old + self.alpha * (sample - old)
        while len(self._ratio) > self.max_backends:
            self._ratio.popitem(last=False)

    def chars_per_token(self, backend: str) -> float:
        return self._ratio.get(backend, self.default)

    def pool_chars_per_token(self, backends: Iterable[str]) -> float:
        """The smallest ratio in the pool: the estimate that counts the most tokens, so a prompt judged
        to fit a backend's context is not under-counted for the backend with the densest tokenizer."""
        ratios = [self._ratio[b] for b in backends if b in self._ratio]
        return min(ratios) if ratios else self.default


def needed_tokens(features: Features) -> int:
    """Estimated prompt plus requested output (or the default): what must fit in a backend's context."""
    output = features.max_output_tokens if features.max_output_tokens is not None else DEFAULT_OUTPUT_TOKENS
    return features.prompt_tokens + output


def normalize_endpoint(endpoint: str) -> str:
    """An endpoint name (records/endpoints.py) as it is; else "chat" for chat completions in any spelling
    ("/v1/chat/completions"), "completions" for the rest."""
    if endpoint in ENDPOINTS:
        return endpoint
    return "chat" if "chat" in endpoint else "completions"


def content_size(body: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]:
    """(text characters, exact token ids given, media part counts) of a chat or completions body."""
    chars, token_ids, media = 0, 0, {"image": 0, "video": 0, "audio": 0}
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                chars += _message_chars(message.get("content"), media)
                chars += _tool_call_chars(message.get("tool_calls"))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        chars += len(prompt)
    elif isinstance(prompt, list):  # a list of strings, a token id list, or a list of token id lists
        for item in prompt:
            if isinstance(item, str):
                chars += len(item)
            elif isinstance(item, int):
                token_ids += 1
            elif isinstance(item, list):
                token_ids += len(item)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        # Tool schemas are rendered into the prompt. One nested past orjson's limit is refused at the door.
        with contextlib.suppress(orjson.JSONEncodeError):
            chars += len(orjson.dumps(tools))
    shaped_chars, shaped_ids = shape_size(body, media)  # Messages, Responses, embeddings, rerank fields
    return chars + shaped_chars, token_ids + shaped_ids, media


def _message_chars(content: Any, media: dict[str, int]) -> int:
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        return 0
    chars = 0
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind is None:  # vLLM accepts a part whose only key is image_url
            kind = next((k for k in part if k in _PART_MODALITY), None)
        if isinstance(kind, str) and kind in _PART_MODALITY:  # any other type (a list: unhashable) is text
            media[_PART_MODALITY[kind]] += 1
        elif isinstance(part.get("text"), str):
            chars += len(part["text"])
        else:  # Messages and Responses blocks: tool use and results, documents, thinking
            chars += block_chars(part, media)
    return chars


def _tool_call_chars(tool_calls: Any) -> int:
    if not isinstance(tool_calls, list):
        return 0
    chars = 0
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            chars += len(arguments)
        elif arguments is not None:
            chars += len(str(arguments))
    return chars


def _prompt_tokens(
    body: Mapping[str, Any], size: tuple[int, int, dict[str, int]], chars_per_token: float
) -> int:
    chars, token_ids, media = size
    messages = body.get("messages")
    overhead = PER_MESSAGE_TOKENS * len(messages) if isinstance(messages, list) else 0
    media_tokens = sum(MEDIA_TOKENS[m] * count for m, count in media.items())
    return int(chars / chars_per_token + 0.5) + token_ids + media_tokens + overhead


def extract_features(
    endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot], estimator: TokenEstimator
) -> Features:
    """Features of one request against its pool at the moment of decision."""
    size = content_size(body)
    tools = body.get("tools")
    return Features(
        model=str(body.get("model", "")),
        endpoint=normalize_endpoint(endpoint),
        prompt_tokens=_prompt_tokens(body, size, estimator.pool_chars_per_token(b.name for b in backends)),
        max_output_tokens=_max_output(body),
        modalities=frozenset({"text"} | {m for m, count in size[2].items() if count}),
        tools=isinstance(tools, list) and bool(tools),
        response_format=_response_format(body.get("response_format")),
        stream=body.get("stream") is True,
        temperature=_number(body.get("temperature")),
        n=_int(body.get("n")) or 1,
        pool_inflight=sum(b.inflight for b in backends),
        repetition=round(prompt_repetition(body.get("messages"), body.get("prompt")), 4),
    )


def _max_output(body: Mapping[str, Any]) -> int | None:
    # max_completion_tokens is the newer chat field; when both are sent it wins, as in vLLM.
    # max_output_tokens is the Responses spelling.
    found = _int(body.get("max_completion_tokens")) or _int(body.get("max_tokens"))
    return found or _int(body.get("max_output_tokens"))


def _response_format(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return str(value["type"])
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
