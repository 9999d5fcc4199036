"""vLLM's OpenAI server as of 0.33 (reference/engines.md section 1-2): nested error objects with an int
`code`, 404 for an unknown model, 400 for images to a text-only model, `max_tokens` clamped to the
context, `reasoning` deltas, continuous usage only together with include_usage, V1 metric names."""

from __future__ import annotations

import re
import secrets

from aiohttp import web

from gateway.sim.flavors.base import JSON, EngineView, Flavor, Handler, Piece, unix_now
from gateway.sim.flavors.exposition import Families, kv_usage
from gateway.sim.flavors.request import ApiError, ParsedRequest, RequestPlan
from gateway.sim.flavors.shapes import EXCEPTION_ERROR_TYPES
from gateway.sim.fleet import EngineSpec
from gateway.sim.tools import ToolDelta

VERSION = "0.33.0"
# vLLM's fingerprint is its version and a short build hash; the twin's is fixed.
SYSTEM_FINGERPRINT = f"vllm-{VERSION}-5117a1ee"
# The twin's messages for a field of the wrong type (gateway/sim/flavors/request.py).
_TYPE_ERROR = re.compile(r"^\w+ must be an? (integer|number)\.$")


class VllmFlavor(Flavor):
    name = "vllm"
    reasoning_key = "reasoning"

    def check_request(self, req: ParsedRequest, spec: EngineSpec) -> None:
        if req.model is not None and req.model != spec.served_model_name:
            raise ApiError(404, f"The model `{req.model}` does not exist.", "not_found", param="model")
        if req.stream_options is not None and not req.stream:
            raise ApiError(
                400, "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        super().check_request(req, spec)

    def image_error(self, spec: EngineSpec) -> ApiError:
        return ApiError(400, f"{spec.served_model_name} is not a multimodal model")

    def output_budget(self, req: ParsedRequest, prompt_tokens: int, spec: EngineSpec) -> int:
        limit = spec.context_length
        if prompt_tokens > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt.",
                "context",
                param="input_tokens",
            )
        if prompt_tokens == limit:
            raise ApiError(
                400,
                f"The decoder prompt (length {prompt_tokens}) plus the number of requested output tokens "
                f"(at least 1) is longer than the maximum model length of {limit}. Make sure that "
                "`max_model_len` is no smaller than the number of text tokens (prompt + requested output "
                "tokens).",
                "context",
            )
        if req.max_tokens is not None and req.max_tokens > limit:
            raise ApiError(
                400,
                f"{req.max_tokens_field}={req.max_tokens} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
                param=req.max_tokens_field,
            )
        # 0.33 no longer rejects prompt + max_tokens > context: it clamps to what is left.
        return min(req.max_tokens or limit, limit - prompt_tokens)

    def tool_call_id(self) -> str:
        return "chatcmpl-tool-" + secrets.token_hex(16)

    def error_body(self, err: ApiError) -> JSON:
        kind, param = EXCEPTION_ERROR_TYPES[err.kind], err.param
        if err.kind == "bad_request" and param and _TYPE_ERROR.match(err.message):
            # A field of the wrong type fails pydantic validation: vLLM names the HTTP phrase and the
            # field's path in the body (the message is pydantic's, not reproduced).
            kind, param = "Bad Request", f"body.{param}"
        return {"error": {"message": err.message, "type": kind, "param": param, "code": err.status}}

    def usage_chunk(self, plan: RequestPlan, usage: JSON) -> JSON:
        return {**super().usage_chunk(plan, usage), "system_fingerprint": SYSTEM_FINGERPRINT}

    def usage(self, prompt_tokens: int, completion_tokens: int) -> JSON:
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    def chunk(self, plan: RequestPlan, piece: Piece | None, finish: str | None, usage: JSON | None) -> JSON:
        chat = plan.request.endpoint == "chat"
        body: JSON = {
            "id": plan.request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": plan.created,
            "model": plan.response_model,
        }
        choice: JSON = {"index": 0}
        if chat:
            choice["delta"] = _delta(piece)
        else:
            choice["text"] = piece.content if piece and piece.content else ""
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        if finish is not None or not chat:
            choice["stop_reason"] = None
        if not chat:
            choice["prompt_token_ids"] = None
        if not (piece is not None and piece.role):
            choice["token_ids"] = None  # every chunk but the role chunk
        body["choices"] = [choice]
        if piece is not None and piece.role:
            body["prompt_token_ids"] = None
            body["prompt_text"] = None
        if usage is not None:
            body["usage"] = usage
        if finish is not None and not plan.request.include_usage:
            body["system_fingerprint"] = SYSTEM_FINGERPRINT  # else it rides on the usage chunk
        return body

    def response(
        self,
        plan: RequestPlan,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: JSON,
        tool: ToolDelta | None = None,
    ) -> JSON:
        full_usage = {**usage, "prompt_tokens_details": None, "completion_tokens_details": None}
        if plan.request.endpoint == "completions":
            return {
                "id": plan.request_id,
                "object": "text_completion",
                "created": plan.created,
                "model": plan.response_model,
                "choices": [
                    {
                        "index": 0,
                        "text": content,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": None,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "usage": full_usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        message: JSON = {
            "role": "assistant",
            "content": None if tool else content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": reasoning,
        }
        if tool:  # the key is left out when there is no call
            message["tool_calls"] = [_tool_call(tool)]
        return {
            "id": plan.request_id,
            "object": "chat.completion",
            "created": plan.created,
            "model": plan.response_model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "token_ids": None,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "usage": full_usage,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    def models(self, engine: EngineView) -> JSON:
        spec = engine.spec
        created = unix_now()
        return {
            "object": "list",
            "data": [
                {
                    "id": spec.served_model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": spec.model_path,
                    "parent": None,
                    "max_model_len": spec.context_length,
                    "permission": [
                        {
                            "id": f"modelperm-{secrets.token_hex(16)}",
                            "object": "model_permission",
                            "created": created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
            ],
        }

    def extra_routes(self, engine: EngineView) -> list[tuple[str, str, Handler]]:
        async def version(_: web.Request) -> web.StreamResponse:
            return web.json_response({"version": VERSION})

        async def load(_: web.Request) -> web.StreamResponse:
            return web.json_response({"server_load": 0})

        return [
            ("GET", "/version", version),
            ("GET", "/load", load),
            ("GET", "/ping", self.health_alias),
            ("POST", "/ping", self.health_alias),
        ]

    def metrics(self, engine: EngineView) -> str:
        stats, obs, spec = engine.stats, engine.observed, engine.spec
        fam = Families({"engine": "0", "model_name": spec.served_model_name})
        fam.gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", stats.running
        )
        fam.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", stats.waiting)
        fam.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            kv_usage(stats),
        )
        fam.counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            stats.preemptions_total,
        )
        fam.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total)
        fam.counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens_total
        )
        fam.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prompt_tokens_total,
        )
        fam.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 0)
        reasons = {r: float(obs.finished.get(r, 0)) for r in ("stop", "length", "abort", "error")}
        fam.labelled_counter(
            "vllm:request_success", "Count of successfully processed requests.", "finished_reason", reasons
        )
        fam.histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", obs.ttft
        )
        fam.histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", obs.itl
        )
        fam.histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", obs.e2e
        )
        speculative = spec.perf.speculative
        if speculative is not None:
            # Registered at startup only when a speculative config is set: their presence is the signal.
            fam.counter(
                "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", stats.spec_drafts_total
            )
            fam.counter(
                "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", stats.spec_draft_tokens_total
            )
            fam.counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                stats.spec_accepted_tokens_total,
            )
            per_pos = list(stats.spec_accepted_per_pos) + [0] * speculative.k
            fam.labelled_counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                "position",
                {str(i): float(per_pos[i]) for i in range(speculative.k)},
            )
        return fam.render()


def _delta(piece: Piece | None) -> JSON:
    if piece is None:
        return {}
    if piece.role:
        return {"role": "assistant", "content": ""}
    if piece.tool is not None:
        return {"tool_calls": [_tool_delta(piece.tool)]}
    delta: JSON = {}
    if piece.reasoning:
        delta["reasoning"] = piece.reasoning
    if piece.content:
        delta["content"] = piece.content
    return delta


def _tool_delta(tool: ToolDelta) -> JSON:
    if tool.id is None:
        return {"index": 0, "function": {"arguments": tool.arguments}}
    return {"id": tool.id, "type": "function", "index": 0, "function": {"name": tool.name, "arguments": ""}}


def _tool_call(tool: ToolDelta) -> JSON:
    return {"id": tool.id, "type": "function", "function": {"name": tool.name, "arguments": tool.arguments}}
