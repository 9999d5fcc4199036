"""SGLang's OpenAI server as of 0.5.x (reference/engines.md section 3): flat error objects, no model-name
check (the response echoes the request's model), images silently dropped by a text-only model, null fields
kept in stream chunks, continuous usage without include_usage, /model_info and /server_info, sglang:*
metrics. Readiness: connection refused while loading, then /health 503 during the warm-up request."""

from __future__ import annotations

import secrets

from aiohttp import web

from gateway.sim.flavors.base import JSON, EngineView, Flavor, Handler, Piece, unix_now
from gateway.sim.flavors.exposition import Families, kv_usage
from gateway.sim.flavors.request import ApiError, ParsedRequest, RequestPlan
from gateway.sim.flavors.shapes import EXCEPTION_ERROR_TYPES, envelope
from gateway.sim.fleet import EngineSpec
from gateway.sim.tools import ToolDelta

# Speculative method names as SGLang's --speculative-algorithm spells them.
_ALGORITHMS = {
    "ngram": "NGRAM",
    "mtp": "EAGLE",
    "nextn": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "dflash": "DFLASH",
    "standalone": "STANDALONE",
}
_EOS_TOKEN_ID = 151645  # <|im_end|> of the Qwen tokenizers, what matched_stop reports on a natural stop


class SglangFlavor(Flavor):
    name = "sglang"
    warming_fraction = 0.2

    def check_request(self, req: ParsedRequest, spec: EngineSpec) -> None:
        """Neither the model name nor images are checked: a text-only template drops image parts."""

    def image_error(self, spec: EngineSpec) -> ApiError:
        return ApiError(400, "image input is not supported for this model")

    def output_budget(self, req: ParsedRequest, prompt_tokens: int, spec: EngineSpec) -> int:
        limit = spec.context_length
        if prompt_tokens >= limit:
            raise ApiError(
                400,
                f"The input ({prompt_tokens} tokens) is longer than the model's context "
                f"length ({limit} tokens).",
                "context",
            )
        if req.max_tokens is not None and prompt_tokens + req.max_tokens > limit:
            raise ApiError(
                400,
                f"Requested token count exceeds the model's maximum context length of {limit} tokens. You "
                f"requested a total of {prompt_tokens + req.max_tokens} tokens: {prompt_tokens} tokens from "
                f"the input messages and {req.max_tokens} tokens for the completion. Please reduce the "
                "number of tokens in the input messages or the completion to fit within the limit.",
                "context",
            )
        return req.max_tokens or limit - prompt_tokens

    def response_model(self, req: ParsedRequest, spec: EngineSpec) -> str:
        return req.model or "default"

    def new_id(self, req: ParsedRequest) -> str:
        return secrets.token_hex(16)

    def tool_call_id(self) -> str:
        return "call_" + secrets.token_hex(12)

    def continuous_usage(self, req: ParsedRequest) -> bool:
        return req.continuous_usage

    def fault_error(self) -> ApiError:
        return ApiError(500, "Internal server error: the scheduler aborted the request.", "server")

    def error_body(self, err: ApiError) -> JSON:
        return {
            "object": "error",
            "message": err.message,
            "type": EXCEPTION_ERROR_TYPES[err.kind],
            "param": err.param,
            "code": err.status,
        }

    def stream_error_body(self, err: ApiError) -> JSON:
        return {"error": self.error_body(err)}

    def usage(self, prompt_tokens: int, completion_tokens: int) -> JSON:
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }

    def chunk(self, plan: RequestPlan, piece: Piece | None, finish: str | None, usage: JSON | None) -> JSON:
        matched = _EOS_TOKEN_ID if finish == "stop" else None
        if plan.request.endpoint == "chat":
            tool = piece.tool if piece else None
            delta = {
                "role": "assistant" if piece and piece.role else None,
                "content": "" if piece and piece.role else (piece.content if piece else None),
                "reasoning_content": piece.reasoning if piece else None,
                "tool_calls": [_tool_delta(tool)] if tool else None,
            }
            choice: JSON = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": matched,
            }
            kind = "chat.completion.chunk"
        else:
            choice = {
                "index": 0,
                "text": piece.content if piece and piece.content else "",
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": matched,
            }
            kind = "text_completion"
        return envelope(plan, kind, [choice], usage)

    def response(
        self,
        plan: RequestPlan,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: JSON,
        tool: ToolDelta | None = None,
    ) -> JSON:
        matched = _EOS_TOKEN_ID if finish == "stop" else None
        if plan.request.endpoint == "chat":
            choice: JSON = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if tool else content,
                    "reasoning_content": reasoning,
                    "tool_calls": [_tool_call(tool)] if tool else None,
                },
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": matched,
                "hidden_states": None,
            }
            kind = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": content,
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": matched,
                "hidden_states": None,
            }
            kind = "text_completion"
        return {**envelope(plan, kind, [choice], usage), "metadata": {"weight_version": "default"}}

    def models(self, engine: EngineView) -> JSON:
        return {"object": "list", "data": [_card(engine.spec)]}

    def extra_routes(self, engine: EngineView) -> list[tuple[str, str, Handler]]:
        async def model_info(_: web.Request) -> web.StreamResponse:
            return web.json_response(_model_info(engine.spec))

        async def server_info(_: web.Request) -> web.StreamResponse:
            return web.json_response(_server_info(engine))

        async def model_card(request: web.Request) -> web.StreamResponse:
            name = request.match_info["model"]
            if name != engine.spec.served_model_name:
                return web.json_response(
                    {
                        "error": {
                            "message": f"The model '{name}' does not exist",
                            "type": "invalid_request_error",
                            "param": "model",
                            "code": "model_not_found",
                        }
                    },
                    status=404,
                )
            return web.json_response(_card(engine.spec))

        async def ready(_: web.Request) -> web.StreamResponse:
            return web.Response(status=200)

        return [
            ("GET", "/model_info", model_info),
            ("GET", "/get_model_info", model_info),
            ("GET", "/server_info", server_info),
            ("GET", "/get_server_info", server_info),
            ("GET", "/v1/models/{model:.+}", model_card),
            ("GET", "/ready", ready),
            ("GET", "/health_generate", self.health_alias),
        ]

    def metrics(self, engine: EngineView) -> str:
        stats, obs, spec = engine.stats, engine.observed, engine.spec
        fam = Families(
            {"engine_type": "unified", "model_name": spec.served_model_name, "pp_rank": "0", "tp_rank": "0"}
        )
        fam.gauge("sglang:num_running_reqs", "The number of running requests.", stats.running)
        fam.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", stats.waiting)
        fam.gauge("sglang:num_used_tokens", "The number of used tokens.", stats.kv_used_tokens)
        fam.gauge(
            "sglang:token_usage",
            "The token usage.",
            kv_usage(stats),
        )
        fam.gauge("sglang:gen_throughput", "The generation throughput (token/s).", _gen_throughput(engine))
        fam.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
        fam.gauge(
            "sglang:spec_accept_length",
            "The average acceptance length of speculative decoding.",
            _accept_length(engine),
        )
        fam.gauge(
            "sglang:spec_accept_rate",
            "The average acceptance rate of speculative decoding.",
            stats.spec_accepted_tokens_total / stats.spec_draft_tokens_total
            if stats.spec_draft_tokens_total
            else 0.0,
        )
        fam.gauge(
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            stats.kv_capacity_tokens,
        )
        fam.gauge("sglang:context_len", "The context length.", spec.context_length)
        fam.counter("sglang:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total)
        fam.counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens_total,
        )
        fam.counter("sglang:num_requests", "The number of processed requests.", obs.requests_total)
        fam.counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", obs.finished.get("abort", 0)
        )
        fam.histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", obs.ttft
        )
        fam.histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", obs.itl
        )
        fam.histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            obs.e2e,
        )
        return fam.render()


def _card(spec: EngineSpec) -> JSON:
    return {
        "id": spec.served_model_name,
        "object": "model",
        "created": unix_now(),
        "owned_by": "sglang",
        "root": spec.served_model_name,
        "parent": None,
        "max_model_len": spec.context_length,
    }


def _model_info(spec: EngineSpec) -> JSON:
    return {
        "model_path": spec.model_path,
        "served_model_name": spec.served_model_name,
        "tokenizer_path": spec.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": "qwen3" if spec.reasoning else None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": spec.vision,
        "has_audio_understanding": False,
        "model_type": None,
        "architectures": None,
    }


def _server_info(engine: EngineView) -> JSON:
    spec, stats = engine.spec, engine.stats
    perf = spec.perf
    speculative = perf.speculative
    internal: JSON = {
        "last_gen_throughput": _gen_throughput(engine),
        "memory_usage": {"token_capacity": stats.kv_capacity_tokens},
        "effective_max_running_requests_per_dp": perf.max_num_seqs,
    }
    if speculative is not None:
        internal["avg_spec_accept_length"] = _accept_length(engine)
    return {
        "model_path": spec.model_path,
        "served_model_name": spec.served_model_name,
        "context_length": spec.context_length,
        "tp_size": 1,
        "dp_size": 1,
        "mem_fraction_static": 0.8,
        "max_running_requests": perf.max_num_seqs,
        "chunked_prefill_size": perf.max_num_batched_tokens,
        "enable_metrics": True,
        "port": 0,
        "speculative_algorithm": _ALGORITHMS.get(speculative.method.lower(), speculative.method.upper())
        if speculative
        else None,
        "speculative_num_steps": speculative.k if speculative else None,
        "speculative_eagle_topk": 1 if speculative else None,
        "speculative_num_draft_tokens": speculative.k + 1 if speculative else None,
        "reasoning_parser": "qwen3" if spec.reasoning else None,
        "tool_call_parser": None,
        "max_total_num_tokens": stats.kv_capacity_tokens,
        "max_req_input_len": spec.context_length - 1,
        "internal_states": [internal],
        "version": "0.5.23",
        "frontend": "python",
    }


def _accept_length(engine: EngineView) -> float:
    stats = engine.stats
    return (
        1.0 + stats.spec_accepted_tokens_total / stats.spec_drafts_total if stats.spec_drafts_total else 0.0
    )


def _gen_throughput(engine: EngineView) -> float:
    seconds = engine.observed.predicted_seconds_total
    return engine.stats.generation_tokens_total / seconds if seconds > 0 else 0.0


def _tool_delta(tool: ToolDelta) -> JSON:
    if tool.id is None:
        function: JSON = {"name": None, "arguments": tool.arguments}
    else:
        function = {"name": tool.name, "arguments": ""}
    return {"id": tool.id, "index": 0, "type": "function", "function": function}


def _tool_call(tool: ToolDelta) -> JSON:
    function = {"name": tool.name, "arguments": tool.arguments}
    return {"id": tool.id, "index": 0, "type": "function", "function": function}
