"""The client APIs beyond chat and completions: Anthropic Messages (and count_tokens), Responses,
embeddings, rerank, tokenize and detokenize. Each is routed, dispatched and measured like chat (the same
`CompletionsEndpoint` flow: one parse, one decision, failover before the first content byte), with:

- its own upstream path, and its required field checked at the door;
- only backends serving the API as candidates (`CapableRouter`, for either router; the policy router's
  endpoint filter says the same in explain): none in the pool is a 400 naming the API;
- Messages: errors in the Anthropic shape; a backend that serves chat but not Messages is sent the
  request translated to chat and its answer translated back (gateway/translate). The first-ranked
  backend decides which: failover stays among backends of the same kind, since the body differs;
- Responses: a request naming `previous_response_id` goes to the backend that created that response
  (api/response_ids.py), and the id of every new response is noted;
- tokenize and detokenize may omit `model` (the engines allow it) when the gateway has a single pool.

Usage is never injected here: Messages and Responses streams carry theirs, and a translated Messages
request asks for chat usage itself (the stream translation needs it for its final `message_delta`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.asgi import Receive, Scope, Send, send_bytes
from gateway.api.body_parse import BodyParser
from gateway.api.openai import CompletionsEndpoint, Router
from gateway.api.reshape import AnthropicErrors, MessagesFromChat, ResponseIdSniffer
from gateway.api.response_ids import ResponseIds
from gateway.backends.registry import Registry
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.proxy.errors import error_body
from gateway.records import BackendSnapshot, Decision, Refusal
from gateway.records.endpoints import ENDPOINT_PATHS
from gateway.routing.request.features import DEFAULT_CHARS_PER_TOKEN, content_size
from gateway.translate import messages_to_chat
from gateway.translate.messages_request import TranslationError

Problem = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Shape:
    """One client API: its endpoint name, the path engines serve it at, the fields it cannot do without."""

    kind: str
    upstream_path: str
    required: tuple[str, ...] = ()  # fields the body must have (their types are the engine's to judge)
    model_optional: bool = False  # the engines allow no `model`: the single pool is meant


SHAPES: dict[str, Shape] = {
    # Anthropic's API answers 400 to Messages without max_tokens; vLLM and llama-server would default it.
    "messages": Shape("messages", "/v1/messages", ("messages", "max_tokens")),
    "count_tokens": Shape("count_tokens", "/v1/messages/count_tokens", ("messages",)),
    "responses": Shape("responses", "/v1/responses"),
    "embeddings": Shape("embeddings", "/v1/embeddings", ("input",)),
    "rerank": Shape("rerank", "/v1/rerank", ("query",)),
    "tokenize": Shape("tokenize", "/tokenize", model_optional=True),
    "detokenize": Shape("detokenize", "/detokenize", ("tokens",), model_optional=True),
}
# Client paths -> the API they name (engines spell rerank three ways; all serve /v1/rerank).
CLIENT_PATHS: dict[str, str] = {
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v1/reranking": "rerank",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
}


def serves(snapshot: BackendSnapshot, endpoint: str) -> bool:
    return snapshot.endpoints is None or endpoint in snapshot.endpoints


class CapableRouter:
    """A router that is only shown the backends serving the request's API; none: a 400 naming it."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        capable = [b for b in backends if serves(b, endpoint)]
        if capable or not backends:
            return self.router.route(endpoint, body, capable)
        path = ENDPOINT_PATHS.get(endpoint, endpoint)
        message = f"no backend of model {body.get('model')!r} serves {path} (see `endpoints:` in the config)"
        return Decision("default", (), (), Refusal(400, "unsupported_endpoint", message))


class ShapedEndpoint(CompletionsEndpoint):
    def __init__(
        self,
        shape: Shape,
        registry: Registry,
        router: Router,
        dispatcher: Dispatcher,
        max_body: int,
        can_wait: bool = False,
        parser: BodyParser | None = None,
        response_ids: ResponseIds | None = None,
    ) -> None:
        super().__init__(shape.kind, registry, CapableRouter(router), dispatcher, max_body, can_wait, parser)
        self.shape = shape
        self.path = shape.upstream_path
        self.response_ids = response_ids

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.shape.kind in ("messages", "count_tokens"):
            send = AnthropicErrors(send)
        await super().__call__(scope, receive, send)

    async def _parse(self, raw: bytes, counted: bool = False) -> tuple[dict[str, Any] | None, Problem | None]:
        if self.shape.model_optional:
            raw = self._with_single_model(raw)
        body, problem = await super()._parse(raw, counted)
        missing = [field for field in self.shape.required if body is not None and field not in body]
        if missing:
            return None, (f"`{missing[0]}` is required", missing[0])
        return body, problem

    def _with_single_model(self, raw: bytes) -> bytes:
        """tokenize/detokenize without `model` mean the only pool (the engines default to their model)."""
        pools = self.registry.pools
        if len(pools) != 1 or b'"model"' in raw:
            return raw
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        return orjson.dumps({**body, "model": pools[0].model}) if isinstance(body, dict) else raw

    async def _dispatch(self, job: Job, receive: Receive, send: Send) -> None:
        if job.add_usage:  # chat's stream_options mean nothing to these APIs
            job = dataclasses.replace(job, add_usage=False)
        if self.shape.model_optional and b'"model"' not in job.raw:
            job = dataclasses.replace(job, raw=orjson.dumps(job.body))  # the model the pool was chosen by
        if self.shape.kind == "messages":
            await self._messages(job, receive, send)
            return
        if self.shape.kind == "responses" and self.response_ids is not None:
            job = self._pinned(job)
            send = ResponseIdSniffer(send, self.response_ids.remember)
        await self.dispatcher.run(job, receive, send)

    def _pinned(self, job: Job) -> Job:
        """A follow-up goes where its previous response lives (that backend only: nowhere else has it)."""
        assert self.response_ids is not None
        previous = job.body.get("previous_response_id")
        backend = self.response_ids.backend(previous) if isinstance(previous, str) else None
        if backend is None or backend not in job.pool.backends:
            return job
        return dataclasses.replace(job, ranked=(backend,))

    async def _messages(self, job: Job, receive: Receive, send: Send) -> None:
        translated = [b for b in job.ranked if self.registry.backends[b].translates_messages]
        if not translated or job.ranked[0] not in translated:
            native = tuple(b for b in job.ranked if b not in translated)
            await self.dispatcher.run(dataclasses.replace(job, ranked=native), receive, send)
            return
        try:
            chat = messages_to_chat(job.body)
        except TranslationError as exc:
            body = error_body(
                400, f"cannot translate this Messages request to chat: {exc}", "invalid_request"
            )
            await send_bytes(send, 400, body, [(b"content-type", b"application/json")])
            return
        chat_job = dataclasses.replace(
            job,
            path=ENDPOINT_PATHS["chat"],
            body=chat,
            raw=orjson.dumps(chat),
            ranked=tuple(translated),
            _bodies={},
        )
        model = str(job.body.get("model", ""))
        # message_start goes out before the engine's usage: it carries the estimate, message_delta the count.
        estimate = int(content_size(job.body)[0] / DEFAULT_CHARS_PER_TOKEN)
        await self.dispatcher.run(chat_job, receive, MessagesFromChat(send, model, estimate))


class ResponseById:
    """GET /v1/responses/{response_id}: the stored response, from the backend that created it.
    DELETE: the gateway forgets where it lives (the engines have no DELETE route: vLLM, SGLang and
    llama-server keep stored responses in memory until they restart), so no follow-up reaches it."""

    def __init__(self, registry: Registry, response_ids: ResponseIds, get: Any, timeout_s: float) -> None:
        self.registry = registry
        self.response_ids = response_ids
        self.get = get  # the transport's GET: (url, headers, timeout_s) -> (status, body)
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response_id = str(scope.get("path_params", {}).get("response_id", ""))
        backend = self.response_ids.backend(response_id)
        json_type = [(b"content-type", b"application/json")]
        if backend is None or backend not in self.registry.backends:
            message = f"no response with id {response_id!r} is known to this gateway"
            await send_bytes(
                send, 404, error_body(404, message, "response_not_found", "response_id"), json_type
            )
            return
        if scope["method"] == "DELETE":
            self.response_ids.forget(response_id)
            body = orjson.dumps({"id": response_id, "object": "response", "deleted": True})
            await send_bytes(send, 200, body, json_type)
            return
        config = self.registry.backends[backend].config
        headers = config.auth_headers()
        try:
            status, body = await self.get(f"{config.url}/v1/responses/{response_id}", headers, self.timeout_s)
        except (OSError, TimeoutError) as exc:
            message = f"backend {backend} holding this response did not answer: {type(exc).__name__}"
            await send_bytes(send, 502, error_body(502, message, "upstream_unavailable"), json_type)
            return
        await send_bytes(send, status, body, [*json_type, (b"x-gateway-backend", backend.encode())])
