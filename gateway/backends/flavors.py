"""What each engine flavor's health answers mean, and where it tells its capabilities.

vLLM and SGLang refuse connections while loading weights and capturing CUDA graphs (minutes); SGLang then
answers 503 during its warm-up request; llama.cpp answers 503 "Loading model" on every path while it
loads. A 503 after having been ready means the engine failed (vLLM EngineDeadError, SGLang's health probe
timing out). llama-cpp-python ("openai" flavor) has no /health, so /v1/models is its readiness probe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

# GET `path` on the backend -> parsed JSON, or None when the path is missing or not JSON.
FetchJson = Callable[[str], Awaitable[Any]]


class Verdict(Enum):
    READY = "ready"
    LOADING = "loading"  # an explicit warm-up answer: starting, not dead
    FAILING = "failing"


@dataclass(frozen=True, slots=True)
class Capabilities:
    context_length: int | None = None
    modalities: frozenset[str] | None = None  # None: the engine does not say
    served_models: tuple[str, ...] = ()
    # The sequences the engine runs at once, where it says (routing/pipeline/spill.py).
    capacity: int | None = None


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    health_path: str
    judge: Callable[[int, Any, bool], Verdict]
    discover: Callable[[FetchJson], Awaitable[Capabilities]]
    # Seconds from process start to ready on a Spark, assumed until the gateway has seen this backend
    # warm up (backends/warmup.py) or the operator declares `warmup_s`. Sources under FLAVORS.
    warmup_s: float
    # The client APIs (records/endpoints.py) the engine serves natively; a backend's `endpoints:` wins.
    endpoints: frozenset[str] = frozenset({"chat", "completions"})


def _judge_vllm(status: int, body: Any, ever_ready: bool) -> Verdict:
    # vLLM never answers HTTP while loading; any 5xx from a listening vLLM is a dead engine core.
    return Verdict.READY if status == 200 else Verdict.FAILING


def _judge_sglang(status: int, body: Any, ever_ready: bool) -> Verdict:
    if status == 200:
        return Verdict.READY
    return Verdict.LOADING if status == 503 and not ever_ready else Verdict.FAILING


def _judge_llamacpp(status: int, body: Any, ever_ready: bool) -> Verdict:
    if status == 200:
        return Verdict.READY
    return Verdict.LOADING if status == 503 and "loading" in error_message(body).lower() else Verdict.FAILING


def error_message(body: Any) -> str:
    """The message of an engine's error answer, whatever its shape (reference/engines.md): the nested
    `{"error": {"message": ...}}` (vLLM >= 0.10.1, llama.cpp, llama-cpp-python), the flat
    `{"object": "error", "message": ...}` (vLLM <= 0.10.0, SGLang), a plain string `{"error": "..."}`
    (vLLM's 401, proxies in front of an engine) or an early llama.cpp /health `{"status": "loading model"}`.
    Anything else (no JSON, a list, a number) has none: ""."""
    if not isinstance(body, dict):
        return body if isinstance(body, str) else ""
    error = body.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    for found in (error, body.get("message"), body.get("status")):
        if isinstance(found, str) and found:
            return found
    return ""


def _judge_openai(status: int, body: Any, ever_ready: bool) -> Verdict:
    return Verdict.READY if status == 200 else Verdict.FAILING


def _model_cards(models: Any) -> list[dict[str, Any]]:
    data = models.get("data") if isinstance(models, dict) else None
    return [card for card in data if isinstance(card, dict)] if isinstance(data, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _base_cards(models: Any) -> list[dict[str, Any]]:
    # LoRA adapters appear with a parent and max_model_len null; the base cards carry the limit.
    return [card for card in _model_cards(models) if not card.get("parent")]


async def _discover_vllm(fetch: FetchJson) -> Capabilities:
    cards = _base_cards(await fetch("/v1/models"))
    lengths = [n for n in (_int(card.get("max_model_len")) for card in cards) if n]
    return Capabilities(max(lengths) if lengths else None, None, tuple(str(c.get("id")) for c in cards))


async def _discover_sglang(fetch: FetchJson) -> Capabilities:
    cards = _base_cards(await fetch("/v1/models"))
    lengths = [n for n in (_int(card.get("max_model_len")) for card in cards) if n]
    context = max(lengths) if lengths else None
    info = await fetch("/server_info") or await fetch("/get_server_info")
    info = info if isinstance(info, dict) else {}
    context = context or _int(info.get("context_length"))
    model_info = await fetch("/model_info") or await fetch("/get_model_info")
    modalities = None
    if isinstance(model_info, dict) and "has_image_understanding" in model_info:
        found = {"text"}
        if model_info.get("has_image_understanding"):
            found.add("image")
        if model_info.get("has_audio_understanding"):
            found.add("audio")
        modalities = frozenset(found)
    capacity = _int(info.get("max_running_requests"))
    return Capabilities(context, modalities, tuple(str(c.get("id")) for c in cards), capacity)


async def _discover_llamacpp(fetch: FetchJson) -> Capabilities:
    props = await fetch("/props")
    context = modalities = capacity = None
    if isinstance(props, dict):
        capacity = _int(props.get("total_slots"))
        settings = props.get("default_generation_settings")
        context = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        context = context or _int(props.get("n_ctx"))
        found = props.get("modalities")
        if isinstance(found, dict):
            modalities = frozenset(
                {"text", *(m if m != "vision" else "image" for m, on in found.items() if on)}
            )
    cards = _model_cards(await fetch("/v1/models"))
    if context is None:
        metas = [card.get("meta") for card in cards]
        context = next((_int(m.get("n_ctx")) for m in metas if isinstance(m, dict) and m.get("n_ctx")), None)
    return Capabilities(context, modalities, tuple(str(c.get("id")) for c in cards), capacity)


async def _discover_openai(fetch: FetchJson) -> Capabilities:
    cards = _model_cards(await fetch("/v1/models"))
    return Capabilities(None, None, tuple(str(c.get("id")) for c in cards))


# Expected warm-ups, from the field reports (seeds 002, 003, 004):
# - vLLM: loading a 35 GB checkpoint took 87 s (14 shards) to 289 s (42 shards) (seed 003), then CUDA
#   graph compilation takes 5-8 minutes (seed 002): about 6.5 to 13 minutes, so 10.
# - SGLang: 90 s to ready on a warm filesystem cache, graph capture included (seed 004); a cold cache
#   adds the weight load (87-289 s above): 3 to 6.5 minutes, so 5.
# - llama.cpp: no graph compilation; it reads one GGUF, and a 4-5 bit 35B file (about 20 GB) is ~0.6 of
#   the checkpoint seed 003 loaded in 87 s: about 50 s, so 1 minute. llama-cpp-python ("openai") loads
#   the same files the same way.
_VLLM_WARMUP_S = 600.0
_SGLANG_WARMUP_S = 300.0
_GGUF_WARMUP_S = 60.0

# Endpoints each engine serves (reference/engines.md), assumed for the oldest release still in use:
# - vLLM: /v1/responses (GET /v1/responses/{id} too) since 0.11 and /v1/messages (Anthropic); the pooling
#   routes (/v1/embeddings, /v1/rerank) answer with the engine's own error on a generation model;
#   /tokenize and /detokenize always; /v1/messages/count_tokens beside /v1/messages
#   (anthropic/serving_messages.py).
# - SGLang: /v1/messages and /v1/responses exist in 0.5.x but not in 0.4.6, so they are not assumed
#   (Messages are translated to chat; a 0.5 backend declares `endpoints:` to get them natively).
# - llama-server: every endpoint here, /v1/messages/count_tokens included.
# - llama-cpp-python ("openai"): chat, completions and embeddings; its tokenizer lives under /extras.
_GENERATION = frozenset({"chat", "completions"})
_POOLING = frozenset({"embeddings", "rerank"})
_TOKENS = frozenset({"tokenize", "detokenize"})
_VLLM_ENDPOINTS = _GENERATION | _POOLING | _TOKENS | {"messages", "count_tokens", "responses"}
_SGLANG_ENDPOINTS = _GENERATION | _POOLING | _TOKENS
_LLAMACPP_ENDPOINTS = _VLLM_ENDPOINTS
_OPENAI_ENDPOINTS = _GENERATION | {"embeddings"}

FLAVORS: dict[str, Flavor] = {
    "vllm": Flavor("vllm", "/health", _judge_vllm, _discover_vllm, _VLLM_WARMUP_S, _VLLM_ENDPOINTS),
    "sglang": Flavor(
        "sglang", "/health", _judge_sglang, _discover_sglang, _SGLANG_WARMUP_S, _SGLANG_ENDPOINTS
    ),
    "llamacpp": Flavor(
        "llamacpp", "/health", _judge_llamacpp, _discover_llamacpp, _GGUF_WARMUP_S, _LLAMACPP_ENDPOINTS
    ),
    "openai": Flavor(
        "openai", "/v1/models", _judge_openai, _discover_openai, _GGUF_WARMUP_S, _OPENAI_ENDPOINTS
    ),
}
