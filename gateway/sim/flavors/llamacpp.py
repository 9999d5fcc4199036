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
from typing import ClassVar

import orjson
from aiohttp import web

from gateway.sim.flavors.base import JSON, EngineView, Flavor, Handler, Piece, RunSummary, unix_now
from gateway.sim.flavors.llamacpp_metrics import metrics_text
from gateway.sim.flavors.llamacpp_slots import BUILD, SlotLedger, ftype, server_props
from gateway.sim.flavors.request import ApiError, ParsedRequest, RequestPlan
from gateway.sim.flavors.shapes import chunk_object
from gateway.sim.fleet import EngineSpec
from gateway.sim.tools import ToolDelta

_ERROR_TYPES = {
    "bad_request": "invalid_request_error",
    "context": "exceed_context_size_error",
    "not_found": "not_found_error",
    "server": "server_error",
    "unavailable": "unavailable_error",
    "not_supported": "not_supported_error",
}
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
        self._ledger = SlotLedger()

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

    def tool_call_id(self) -> str:
        return "".join(secrets.choice(_ID_CHARS) for _ in range(32))

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

    def unknown_route(self, status: int) -> web.Response:
        # cpp-httplib matches method and path together, so a wrong method is a 404 as well.
        return web.json_response(self.error_body(ApiError(404, "File Not Found", "not_found")), status=404)

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
            "system_fingerprint": BUILD,
            "object": kind,
        }

    def usage_chunk(self, plan: RequestPlan, usage: JSON) -> JSON:
        return {
            "choices": [],
            "created": plan.created,
            "id": plan.request_id,
            "model": plan.response_model,
            "system_fingerprint": BUILD,
            "object": chunk_object(plan),
            "usage": usage,
        }

    def response(
        self,
        plan: RequestPlan,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: JSON,
        tool: ToolDelta | None = None,
    ) -> JSON:
        if plan.request.endpoint == "chat":
            message: JSON = {"role": "assistant", "content": None if tool else content}
            if reasoning:
                message["reasoning_content"] = reasoning
            if tool:
                function = {"name": tool.name, "arguments": tool.arguments}
                message["tool_calls"] = [{"type": "function", "function": function, "id": tool.id}]
            choice: JSON = {"finish_reason": finish, "index": 0, "message": message}
            kind = "chat.completion"
        else:
            choice = {"text": content, "index": 0, "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        return {
            "choices": [choice],
            "created": plan.created,
            "model": plan.response_model,
            "system_fingerprint": BUILD,
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
                        "ftype": ftype(perf.bytes_per_weight),
                    },
                }
            ],
        }

    def extra_routes(self, engine: EngineView) -> list[tuple[str, str, Handler]]:
        async def props(_: web.Request) -> web.StreamResponse:
            return web.json_response(server_props(engine))

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
        return metrics_text(engine)


def _delta(piece: Piece | None) -> JSON:
    if piece is None:
        return {}
    if piece.role:
        return {"role": "assistant", "content": None}
    if piece.tool is not None:
        tool = piece.tool
        if tool.id is None:
            return {"tool_calls": [{"index": 0, "function": {"arguments": tool.arguments}}]}
        function = {"name": tool.name, "arguments": ""}
        return {"tool_calls": [{"index": 0, "id": tool.id, "type": "function", "function": function}]}
    if piece.reasoning:
        return {"reasoning_content": piece.reasoning}
    return {"content": piece.content}
