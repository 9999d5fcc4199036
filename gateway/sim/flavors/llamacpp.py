"""llama.cpp's llama-server (reference/engines.md section 4, corrected by what a real llama-server at commit
0c1e570 did, docs/real-engines.md): listens at once and answers every path with 503 "Loading model" until
loaded, `{"error":{code,message,type}}` errors (context overflow with n_prompt_tokens/n_ctx, 500 for an
image to a model without mmproj), one chunk per token, `timings` with draft_n/draft_n_accepted on the last
JSON chunk (the usage chunk with include_usage), a failed stream ends without [DONE], /props and /slots,
llamacpp:* metrics without labels."""

from __future__ import annotations

import random
import secrets
import string
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

import orjson
from aiohttp import web

from gateway.sim.flavors.base import JSON, EngineView, Flavor, Handler, Piece, RunSummary, unix_now
from gateway.sim.flavors.request import ApiError, ParsedRequest, RequestPlan
from gateway.sim.flavors.shapes import chunk_object
from gateway.sim.fleet import EngineSpec

_ERROR_TYPES = {
    "bad_request": "invalid_request_error",
    "context": "exceed_context_size_error",
    "not_found": "not_found_error",
    "server": "server_error",
    "unavailable": "unavailable_error",
}
_BUILD = "b7200-0c1e570"  # b<build>-<short commit>, as llama.cpp prints its build_info
_ID_CHARS = string.ascii_letters + string.digits


class LlamaCppFlavor(Flavor):
    # Flavor.check_request as it is: no model-name check in single-model mode, images need an mmproj.
    name = "llamacpp"
    listens_while_loading = True
    done_after_error = False
    chunk_per_token = True
    requires_json_content_type = False
    metrics_content_type = "text/plain; version=0.0.4"
    route_aliases: ClassVar[dict[str, str]] = {
        "/chat/completions": "/v1/chat/completions",
        "/completions": "/v1/completions",
        "/models": "/v1/models",
        "/v1/health": "/health",
    }

    def __init__(self) -> None:
        self._ledger = _SlotLedger()

    def plan(self, req: ParsedRequest, spec: EngineSpec, rng: random.Random) -> RequestPlan:
        planned = super().plan(req, spec, rng)
        self._ledger.record(planned, spec.perf.max_num_seqs)
        return planned

    def image_error(self, spec: EngineSpec) -> ApiError:
        # Raised as std::runtime_error inside the server, hence a 500 and not a 400.
        return ApiError(
            500,
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
            "server",
        )

    def output_budget(self, req: ParsedRequest, prompt_tokens: int, spec: EngineSpec) -> int:
        n_ctx = spec.context_length
        if prompt_tokens >= n_ctx:
            raise ApiError(
                400,
                f"request ({prompt_tokens} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                "context",
                extra={"n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx},
            )
        # Generation stops when the slot's context is full (finish_reason "length").
        return min(req.max_tokens or n_ctx, n_ctx - prompt_tokens)

    def new_id(self, req: ParsedRequest) -> str:
        # Completions too: the server names every OpenAI-compatible response "chatcmpl-…".
        return "chatcmpl-" + "".join(secrets.choice(_ID_CHARS) for _ in range(32))

    def continuous_usage(self, req: ParsedRequest) -> bool:
        return False  # only include_usage is parsed

    def fault_error(self) -> ApiError:
        return ApiError(500, "failed to decode the batch", "server")

    def error_body(self, err: ApiError) -> JSON:
        return {
            "error": {"code": err.status, "message": err.message, "type": _ERROR_TYPES[err.kind], **err.extra}
        }

    def health_ok(self) -> web.Response:
        return web.json_response({"status": "ok"})

    def loading_response(self) -> web.Response | None:
        body = orjson.dumps({"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}})
        return web.Response(
            status=503, body=body, headers={"Content-Type": "application/json; charset=utf-8"}
        )

    def usage(self, prompt_tokens: int, completion_tokens: int) -> JSON:
        return {
            "completion_tokens": completion_tokens,
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def chunk(self, plan: RequestPlan, piece: Piece | None, finish: str | None, usage: JSON | None) -> JSON:
        if plan.request.endpoint == "chat":
            choice: JSON = {"finish_reason": finish, "index": 0, "delta": _delta(piece)}
            kind = "chat.completion.chunk"
        else:
            choice = {
                "text": piece.content if piece and piece.content else "",
                "index": 0,
                "logprobs": None,
                "finish_reason": finish,
            }
            kind = "text_completion"
        return {
            "choices": [choice],
            "created": plan.created,
            "id": plan.request_id,
            "model": plan.response_model,
            "system_fingerprint": _BUILD,
            "object": kind,
        }

    def usage_chunk(self, plan: RequestPlan, usage: JSON) -> JSON:
        return {
            "choices": [],
            "created": plan.created,
            "id": plan.request_id,
            "model": plan.response_model,
            "system_fingerprint": _BUILD,
            "object": chunk_object(plan),
            "usage": usage,
        }

    def response(
        self, plan: RequestPlan, content: str, reasoning: str | None, finish: str, usage: JSON
    ) -> JSON:
        if plan.request.endpoint == "chat":
            message: JSON = {"role": "assistant", "content": content}
            if reasoning:
                message["reasoning_content"] = reasoning
            choice: JSON = {"finish_reason": finish, "index": 0, "message": message}
            kind = "chat.completion"
        else:
            choice = {"text": content, "index": 0, "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        return {
            "choices": [choice],
            "created": plan.created,
            "model": plan.response_model,
            "system_fingerprint": _BUILD,
            "object": kind,
            "usage": usage,
            "id": plan.request_id,
        }

    def last_chunk_extra(self, summary: RunSummary) -> JSON:
        prompt_ms = summary.prompt_s * 1000
        predicted_ms = summary.predicted_s * 1000
        timings: JSON = {
            "cache_n": 0,
            "prompt_n": summary.prompt_tokens,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(1, summary.prompt_tokens),
            "prompt_per_second": summary.prompt_tokens / summary.prompt_s if summary.prompt_s > 0 else 0.0,
            "predicted_n": summary.completion_tokens,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / max(1, summary.completion_tokens),
            "predicted_per_second": summary.completion_tokens / summary.predicted_s
            if summary.predicted_s > 0
            else 0.0,
        }
        if summary.draft_n > 0:
            timings["draft_n"] = summary.draft_n
            timings["draft_n_accepted"] = summary.draft_accepted
        return {"timings": timings}

    def models(self, engine: EngineView) -> JSON:
        spec = engine.spec
        perf = spec.perf
        capabilities = ["completion", "multimodal"] if spec.vision else ["completion"]
        return {
            "models": [
                {
                    "name": spec.served_model_name,
                    "model": spec.served_model_name,
                    "modified_at": "",
                    "size": "",
                    "digest": "",
                    "type": "model",
                    "description": "",
                    "tags": [""],
                    "capabilities": capabilities,
                    "parameters": "",
                    "details": {
                        "parent_model": "",
                        "format": "gguf",
                        "family": "",
                        "families": [""],
                        "parameter_size": "",
                        "quantization_level": "",
                    },
                }
            ],
            "object": "list",
            "data": [
                {
                    "id": spec.served_model_name,
                    "aliases": [spec.served_model_name],
                    "tags": [],
                    "object": "model",
                    "created": unix_now(),
                    "owned_by": "llamacpp",
                    "meta": {
                        "vocab_type": 2,
                        "n_vocab": 151936,
                        "n_ctx": spec.context_length,
                        "n_ctx_train": 262144,
                        "n_embd": 2048,
                        "n_params": int(perf.params_b * 1e9),
                        "size": int(perf.params_b * 1e9 * perf.bytes_per_weight),
                        "ftype": _ftype(perf.bytes_per_weight),
                    },
                }
            ],
        }

    def extra_routes(self, engine: EngineView) -> list[tuple[str, str, Handler]]:
        async def props(_: web.Request) -> web.StreamResponse:
            return web.json_response(_props(engine))

        async def slots(request: web.Request) -> web.StreamResponse:
            body = self._ledger.slots(engine)
            if request.query.get("fail_on_no_slot") == "1" and all(s["is_processing"] for s in body):
                return web.json_response(
                    self.error_body(ApiError(503, "no slot available", "unavailable")), status=503
                )
            return web.json_response(body)

        async def metrics(_: web.Request) -> web.StreamResponse:
            # Replaces the shared /metrics route to add the server's process start header.
            headers = {
                "Content-Type": self.metrics_content_type,
                "Process-Start-Time-Unix": str(int(engine.started_unix)),
            }
            return web.Response(body=self.metrics(engine).encode(), headers=headers)

        return [("GET", "/props", props), ("GET", "/slots", slots), ("GET", "/metrics", metrics)]

    def metrics(self, engine: EngineView) -> str:
        lines: list[str] = []
        for kind, rows in (("counter", _counters(engine)), ("gauge", _gauges(engine))):
            for name, doc, value in rows:
                lines += [
                    f"# HELP llamacpp:{name} {doc}",
                    f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {_number(value)}",
                ]
        per_pos = engine.stats.spec_accepted_per_pos
        if engine.spec.perf.speculative is not None and engine.stats.spec_drafts_total > 0 and per_pos:
            name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
            # Integers here: the server prints these from uint64 counters, not through a double.
            lines += [f'{name}{{position="{i}"}} {count}' for i, count in enumerate(per_pos)]
        return "\n".join(lines) + "\n"


def _delta(piece: Piece | None) -> JSON:
    if piece is None:
        return {}
    if piece.role:
        return {"role": "assistant", "content": None}
    if piece.reasoning:
        return {"reasoning_content": piece.reasoning}
    return {"content": piece.content}


def _counters(engine: EngineView) -> list[tuple[str, str, float]]:
    """Name, HELP and value of every counter, in the order and wording of the real server."""
    stats, obs = engine.stats, engine.observed
    return [
        (
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            stats.prompt_tokens_total,
        ),
        # The twin keeps no prompt cache, so nothing is ever reused (timings.cache_n is 0 too).
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", 0),
        ("prompt_seconds_total", "Total time spent processing prompts", obs.prompt_seconds_total),
        ("tokens_predicted_total", "Number of generation tokens processed", stats.generation_tokens_total),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", obs.predicted_seconds_total),
        (
            "n_decode_total",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            obs.decode_steps_total,
        ),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", obs.max_tokens_in_request),
        (
            "spec_decode_num_draft_tokens_total",
            "Speculative: Total draft tokens generated",
            stats.spec_draft_tokens_total,
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            stats.spec_accepted_tokens_total,
        ),
        (
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            stats.spec_drafts_total,
        ),
    ]


def _gauges(engine: EngineView) -> list[tuple[str, str, float]]:
    stats, obs = engine.stats, engine.observed
    return [
        (
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            _rate(stats.prompt_tokens_total, obs.prompt_seconds_total),
        ),
        (
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s",
            _rate(stats.generation_tokens_total, obs.predicted_seconds_total),
        ),
        ("requests_processing", "Number of requests processing", stats.running),
        ("requests_deferred", "Number of requests deferred", stats.waiting),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", stats.running),
    ]


def _rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def _number(value: float) -> str:
    """A value as the server writes it: a double through a C++ ostream, i.e. printf %g with six
    significant digits (42, 0.25, 1.23457e+06), never Python's 42.0."""
    return f"{float(value):g}"


# twin `speculative.method` -> llama.cpp `--spec-type` value (common/speculative.cpp)
_SPEC_TYPES = {
    "mtp": "draft-mtp",
    "nextn": "draft-mtp",
    "eagle": "draft-eagle3",
    "eagle3": "draft-eagle3",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "draft": "draft-simple",
    "draft_model": "draft-simple",
    "standalone": "draft-simple",
    "ngram": "ngram-simple",
}
_LLAMA_SPEC_TYPES = frozenset(
    {
        "draft-simple",
        "draft-eagle3",
        "draft-mtp",
        "draft-dflash",
        "draft-dspark",
        "ngram-simple",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-mod",
        "ngram-cache",
    }
)


def _spec_type(method: str) -> str:
    name = method.lower()
    if name in _LLAMA_SPEC_TYPES:
        return name
    return _SPEC_TYPES.get(name, "draft-simple")


def _slot_spec_types(spec: EngineSpec) -> str:
    """`speculative.types` of a slot that ran a task: a comma string that starts with "none"."""
    speculative = spec.perf.speculative
    return f"none,{_spec_type(speculative.method)}" if speculative else "none"


def _ftype(bytes_per_weight: float) -> str:
    """GGUF file type name (llama_model_ftype_name) closest to the checkpoint's bits per weight."""
    bits = bytes_per_weight * 8
    for limit, name in ((5.25, "Q4_K - Medium"), (6.1, "Q5_K - Medium"), (7.5, "Q6_K"), (12.0, "Q8_0")):
        if bits < limit:
            return name
    return "BF16"


def _props(engine: EngineView) -> JSON:
    spec = engine.spec
    return {
        "default_generation_settings": {
            # The per-request defaults: "none" even when the server was started with --spec-type,
            # and no speculative.n_max/n_min/p_min (observed on llama-server 0c1e570).
            "params": {"n_predict": -1, "temperature": 0.8, "speculative.types": "none"},
            "n_ctx": spec.context_length,
        },
        "total_slots": spec.perf.max_num_seqs,
        "model_alias": spec.served_model_name,
        "model_path": spec.model_path,
        "model_ftype": _ftype(spec.perf.bytes_per_weight),
        "modalities": {"vision": spec.vision, "video": False, "audio": False},
        "media_marker": "<__media__>",
        "chat_template": "{%- for message in messages %}...{%- endfor %}",
        "chat_template_caps": {},
        "bos_token": "",
        "eos_token": "<|im_end|>",
        "build_info": _BUILD,
        "is_sleeping": False,
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "ui": True,
        "ui_settings": {},
        "cors_proxy_enabled": False,
    }


@dataclass(frozen=True, slots=True)
class _SlotTask:
    """What /slots shows about the last task a slot ran."""

    id_task: int
    prompt_tokens: int
    completion_tokens: int
    n_predict: int
    temperature: float


class _SlotLedger:
    """The most recent planned tasks, one per slot. The engine model does not track slots, so the
    last `total_slots` tasks stand for what the slots last ran; the engine's own request counter
    decides how many slots have run anything (it restarts at 0 with the engine)."""

    def __init__(self) -> None:
        self._next_id = 0
        self._recent: deque[_SlotTask] = deque()

    def record(self, plan: RequestPlan, n_slots: int) -> None:
        req = plan.request
        self._recent.append(
            _SlotTask(
                id_task=self._next_id,
                prompt_tokens=plan.prompt.tokens,
                completion_tokens=plan.completion_tokens,
                n_predict=req.max_tokens if req.max_tokens is not None else -1,
                temperature=req.temperature,
            )
        )
        self._next_id += 1
        while len(self._recent) > n_slots:
            self._recent.popleft()

    def slots(self, engine: EngineView) -> list[JSON]:
        spec = engine.spec
        n_slots = spec.perf.max_num_seqs
        used = min(engine.observed.requests_total, n_slots, len(self._recent))
        # Newest first, so the busy slots (the lowest ids, as the model reports only a count) hold
        # the tasks still running.
        tasks = list(reversed(self._recent))[:used]
        busy = engine.stats.running
        out: list[JSON] = []
        for i in range(n_slots):
            slot: JSON = {
                "id": i,
                "n_ctx": spec.context_length,
                "speculative": spec.perf.speculative is not None,
                "is_processing": i < busy,
            }
            if i < used:
                slot.update(_task_fields(tasks[i], spec, processing=i < busy))
            out.append(slot)
        return out


def _task_fields(task: _SlotTask, spec: EngineSpec, processing: bool) -> JSON:
    """The keys a slot gains once it has run a task (absent on a fresh slot)."""
    return {
        "id_task": task.id_task,
        "n_prompt_tokens": task.prompt_tokens,
        "n_prompt_tokens_processed": task.prompt_tokens,
        "n_prompt_tokens_cache": 0,
        "params": {
            "n_predict": task.n_predict,
            "temperature": task.temperature,
            "speculative.types": _slot_spec_types(spec),
        },
        "next_token": [
            {
                "has_next_token": processing,
                "has_new_line": False,
                "n_remain": -1,
                "n_decoded": task.completion_tokens,
            }
        ],
    }
