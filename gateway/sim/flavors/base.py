"""What every engine flavor provides: request validation with the engine's own limits and messages, the
JSON shapes of its responses, chunks and errors, its model/info endpoints, its /metrics, and its
readiness behaviour. The HTTP plumbing shared by all flavors lives in gateway/sim/server.py."""

from __future__ import annotations

import random
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from aiohttp import web

from gateway.sim.flavors.observed import Observations
from gateway.sim.flavors.request import ApiError, ParsedRequest, RequestPlan
from gateway.sim.flavors.shapes import chunk_object, envelope
from gateway.sim.fleet import EngineSpec
from gateway.sim.model import EngineStats
from gateway.sim.text import OutputText, Prompt, chat_prompt, completion_prompt
from gateway.sim.tools import ToolDelta, plan_tool_call

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class EngineView(Protocol):
    """The parts of a running engine a flavor reads to answer info and metrics endpoints."""

    @property
    def spec(self) -> EngineSpec: ...

    @property
    def stats(self) -> EngineStats: ...

    @property
    def observed(self) -> Observations: ...

    @property
    def started_unix(self) -> float: ...

    @property
    def busy(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Piece:
    """One stream delta: the assistant role (first chat chunk), content and/or reasoning text."""

    content: str | None = None
    reasoning: str | None = None
    role: bool = False
    tool: ToolDelta | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """How one request went, in simulated time; llama.cpp reports it as `timings`."""

    prompt_tokens: int
    completion_tokens: int
    prompt_s: float
    predicted_s: float
    draft_n: int
    draft_accepted: int


class Flavor(ABC):
    name: str
    reasoning_key = "reasoning_content"
    # Readiness: llama.cpp listens at once and answers 503 while loading; vLLM and SGLang refuse
    # connections until loaded, then SGLang answers /health 503 during its warm-up request.
    listens_while_loading = False
    warming_fraction = 0.0
    done_after_error = True  # llama.cpp ends a failed stream without [DONE]
    chunk_per_token = False  # llama.cpp sends one chunk per token, vLLM/SGLang one per engine step
    metrics_content_type = "text/plain; version=0.0.4; charset=utf-8"
    requires_json_content_type = True  # vLLM and SGLang reject other content types with a 400
    route_aliases: ClassVar[dict[str, str]] = {}  # extra path -> canonical path it serves

    # --- request planning -------------------------------------------------------------------------
    def plan(self, req: ParsedRequest, spec: EngineSpec, rng: random.Random) -> RequestPlan:
        self.check_request(req, spec)
        prompt = self.prompt_of(req, spec)
        if prompt.tokens < 1:
            raise ApiError(400, "The decoder prompt cannot be empty", param="prompt")
        max_tokens = self.output_budget(req, prompt.tokens, spec)
        seed = req.seed if req.seed is not None else rng.getrandbits(32)
        output = OutputText(spec.served_model_name, prompt.text, seed, req.temperature)
        tool_call = plan_tool_call(req.messages, req.tools, req.tool_choice, self.tool_call_id())
        # max_tokens is already capped by the context: running into it ends on "length", like the engines.
        natural = tool_call.tokens if tool_call else output.natural_length
        if (req.ignore_eos and not tool_call) or max_tokens < natural:
            completion, finish = max_tokens, "length"
        else:
            completion, finish = natural, "tool_calls" if tool_call else "stop"
        thinking = spec.reasoning and req.endpoint == "chat" and req.enable_thinking and not tool_call
        return RequestPlan(
            request=req,
            request_id=self.new_id(req),
            created=int(time.time()),
            response_model=self.response_model(req, spec),
            prompt=prompt,
            output=output,
            completion_tokens=completion,
            finish_reason=finish,
            reasoning_tokens=min(completion // 4, 64) if thinking else 0,
            tool_call=tool_call,
        )

    def check_request(self, req: ParsedRequest, spec: EngineSpec) -> None:
        """Model name, option and modality checks that come before tokenization."""
        if req.images and not spec.vision:
            raise self.image_error(spec)

    def prompt_of(self, req: ParsedRequest, spec: EngineSpec) -> Prompt:
        if req.endpoint == "chat":
            return chat_prompt(req.messages, count_images=spec.vision)
        return completion_prompt(req.prompt)

    def response_model(self, req: ParsedRequest, spec: EngineSpec) -> str:
        return spec.served_model_name

    def new_id(self, req: ParsedRequest) -> str:
        return ("chatcmpl-" if req.endpoint == "chat" else "cmpl-") + secrets.token_hex(16)

    def tool_call_id(self) -> str:
        return "call_" + secrets.token_hex(12)

    @abstractmethod
    def image_error(self, spec: EngineSpec) -> ApiError: ...

    @abstractmethod
    def output_budget(self, req: ParsedRequest, prompt_tokens: int, spec: EngineSpec) -> int:
        """Tokens the request may generate; raises the flavor's context-length error."""

    # --- response shapes --------------------------------------------------------------------------
    @abstractmethod
    def error_body(self, err: ApiError) -> JSON: ...

    def stream_error_body(self, err: ApiError) -> JSON:
        return self.error_body(err)

    @abstractmethod
    def usage(self, prompt_tokens: int, completion_tokens: int) -> JSON: ...

    @abstractmethod
    def chunk(self, plan: RequestPlan, piece: Piece | None, finish: str | None, usage: JSON | None) -> JSON:
        """One stream chunk: a delta (chat) or text (completions), or the finish chunk when `finish`."""

    def usage_chunk(self, plan: RequestPlan, usage: JSON) -> JSON:
        """The usage-only chunk after the finish chunk (include_usage), as vLLM and SGLang send it."""
        return envelope(plan, chunk_object(plan), [], usage)

    @abstractmethod
    def response(
        self,
        plan: RequestPlan,
        content: str,
        reasoning: str | None,
        finish: str,
        usage: JSON,
        tool: ToolDelta | None = None,
    ) -> JSON:
        """The non-stream response body; `tool` is the tool call the answer is instead of text."""

    def continuous_usage(self, req: ParsedRequest) -> bool:
        """Whether every stream chunk carries running usage (vLLM: only together with include_usage)."""
        return req.include_usage and req.continuous_usage

    def fault_error(self) -> ApiError:
        """The 500 an engine answers when generation itself fails."""
        return ApiError(
            500, "EngineCore encountered an issue. See stack trace (above) for the root cause.", "server"
        )

    def last_chunk_extra(self, summary: RunSummary) -> JSON:
        """Keys added to the last stream chunk and to the non-stream body (llama.cpp `timings`)."""
        return {}

    # --- other endpoints --------------------------------------------------------------------------
    @abstractmethod
    def models(self, engine: EngineView) -> JSON: ...

    def extra_routes(self, engine: EngineView) -> list[tuple[str, str, Handler]]:
        """(method, path, handler) for the flavor's own info endpoints."""
        return []

    def health_ok(self) -> web.Response:
        return web.Response(status=200)

    async def health_alias(self, _: web.Request) -> web.StreamResponse:
        """A handler for the flavor's other liveness paths, which answer exactly as /health does."""
        return self.health_ok()

    def unknown_route(self, status: int) -> web.Response:
        """A path the engine does not serve (404), or a method it does not take there (405): FastAPI's
        answer, which vLLM and SGLang give."""
        detail = "Method Not Allowed" if status == 405 else "Not Found"
        return web.json_response({"detail": detail}, status=status)

    def loading_response(self) -> web.Response | None:
        """What every path answers while the model loads, or None when the engine does not listen yet."""
        return None

    @abstractmethod
    def metrics(self, engine: EngineView) -> str: ...


def unix_now() -> int:
    return int(time.time())
