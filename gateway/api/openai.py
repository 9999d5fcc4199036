"""The client-facing OpenAI routes.

POST /v1/chat/completions and /v1/completions are pure-ASGI endpoints: the body is read once, parsed
once with orjson for the few fields the gateway needs, routed, and handed to dispatch with its original
bytes. Every request field passes through untouched; only `model` (alias -> the backend's served name)
and `stream_options.include_usage` (to meter streamed tokens) are ever rewritten.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from gateway.api.asgi import (
    REQUEST_ID,
    STARTED,
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    drain_body,
    header,
    read_body,
    send_bytes,
)
from gateway.api.body_parse import BadJson, BodyParser, TooManyValues
from gateway.api.errors import send_error
from gateway.api.request_checks import DEFAULT_LIMITS
from gateway.backends.registry import Registry
from gateway.clock import monotonic
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.records import BackendSnapshot, Decision

# Without settings (tests, benches): bodies of at least this size are parsed in steps (api/body_parse.py).
_OFFLOAD_BYTES = 256 * 1024


class Router(Protocol):
    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        """The one decision for a request: the ranking now, the fallback once back, the exploration plan."""
        ...


class CompletionsEndpoint:
    """One OpenAI generation route ("chat" or "completions") as a pure-ASGI app."""

    def __init__(
        self,
        endpoint: str,
        registry: Registry,
        router: Router,
        dispatcher: Dispatcher,
        max_body: int,
        can_wait: bool = False,
        parser: BodyParser | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
        self.registry = registry
        self.router = router
        self.dispatcher = dispatcher
        self.max_body = max_body
        self.can_wait = can_wait  # dispatch queues for a slot or a warming backend (admission is wired)
        self.parser = parser or BodyParser(DEFAULT_LIMITS, _OFFLOAD_BYTES, max_body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = scope.get(STARTED) or monotonic()
        if not _is_json(scope):
            message = "the body must be JSON, sent with `content-type: application/json`"
            await send_error(send, 415, message, "unsupported_media_type")
            return
        # A big body declared by its Content-Length is read and parsed under the parse budget; its values
        # are counted as it arrives, so a body of too many is refused without being joined or parsed.
        declared = _declared_length(scope)
        async with self.parser.reserved(declared):
            try:
                raw = await read_body(receive, self.max_body, self.parser.counter(declared or None))
            except BodyTooLarge:
                await send_error(send, 413, f"request body over {self.max_body} bytes", "request_too_large")
                return
            except TooManyValues as exc:
                message, param = exc.args[0]
                await drain_body(receive)  # dropped as it arrives: never joined, kept or parsed
                await send_error(send, 400, message, "invalid_request", param)
                return
            except ClientGone:
                return
            if len(raw) >= self.parser.offload_bytes:
                await asyncio.sleep(0)  # joining a big body's chunks was one copy: let the loop run
            body, problem = await self._parse(raw, counted=True)
        try:
            await self._handle(scope, receive, send, started, raw, body, problem)
        finally:
            await self.parser.dispose(body, len(raw))  # a big tree freed in steps, not all at once

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        started: float,
        raw: bytes,
        body: dict[str, Any] | None,
        problem: tuple[str, str | None] | None,
    ) -> None:
        if problem is not None:
            await send_error(send, 400, problem[0], "invalid_request", problem[1])
            return
        assert body is not None
        pool = self.registry.pool(body.get("model"))  # type: ignore[arg-type]
        if pool is None:
            models = ", ".join(self.registry.model_names())
            message = f"The model `{body.get('model')}` does not exist. Available models: {models}"
            await send_error(send, 404, message, "model_not_found", "model")
            return
        decision = self.router.route(self.endpoint, body, self.registry.snapshots(pool))
        ranked = decision.ranked
        may_wait = decision.refusal is None or decision.refusal.status == 503
        if self.can_wait and decision.fallback and may_wait:
            # Some backend is out for now (warming, full, breaker open): what could serve it once back is
            # the fallback, waited for in the pool's queue when nothing serves now or every attempt failed.
            ranked += decision.fallback
        elif decision.refusal is not None:
            ranked = ()
        if not ranked:
            await self._refuse(send, decision)
            return
        stream = body.get("stream") is True
        options = body.get("stream_options")
        asked_usage = isinstance(options, dict) and options.get("include_usage") is True
        job = Job(
            request_id=scope.get(REQUEST_ID, ""),
            endpoint=self.endpoint,
            path=self.path,
            pool=pool,
            body=body,
            raw=raw,
            started=started,
            profile=decision.profile,
            ranked=ranked,
            stream=stream,
            add_usage=stream and not asked_usage,
            exploration=decision.exploration,
            prompt_tokens=decision.prompt_tokens,
            decision=decision,
        )
        await self._dispatch(job, receive, send)

    async def _dispatch(self, job: Job, receive: Receive, send: Send) -> None:
        """Hand the job to dispatch; the other APIs' routes (api/shaped.py) adjust it first."""
        await self.dispatcher.run(job, receive, send)

    async def _parse(
        self, raw: bytes, counted: bool = False
    ) -> tuple[dict[str, Any] | None, tuple[str, str | None] | None]:
        try:
            parsed = await self.parser.parse(raw, counted)
        except BadJson as exc:
            return None, (str(exc), None)
        body = parsed.body
        if parsed.problem is not None:
            return None, parsed.problem
        if not isinstance(body, dict):
            return None, ("the body must be a JSON object", None)
        if not isinstance(body.get("model"), str):
            return None, ("`model` is required and must be a string", "model")
        if self.endpoint == "chat" and not isinstance(body.get("messages"), list):
            return None, ("`messages` must be a list of messages", "messages")
        if self.endpoint == "completions" and "prompt" not in body:
            return None, ("`prompt` is required", "prompt")
        problem = await self.parser.check(body, len(raw))
        return (None, problem) if problem is not None else (body, None)

    async def _refuse(self, send: Send, decision: Decision) -> None:
        refusal = decision.refusal
        status = refusal.status if refusal else 503
        message = refusal.message if refusal else "no backend can take this request"
        code = refusal.code if refusal else "no_ready_backend"
        headers = [(b"x-gateway-profile", decision.profile.encode())]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        await send_error(send, status, message, code, headers=headers)


def _declared_length(scope: Scope) -> int:
    """The body size the client declared, 0 when it did not (chunked) or declared nonsense."""
    value = header(scope, b"content-length")
    return int(value) if value is not None and value.isdigit() else 0


def _is_json(scope: Scope) -> bool:
    """The request says its body is JSON: `application/json`, with or without parameters (charset).

    Anything else, a missing content type included, is answered 415: a browser may post `text/plain` or
    a form to a local gateway from any web page without a CORS preflight, and the official clients always
    send `application/json`."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            media_type: bytes = value.split(b";", 1)[0].strip().lower()
            return media_type == b"application/json"
    return False


class ModelsEndpoint:
    """GET /v1/models: one card per pool, with the largest context any of its backends takes."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.created = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cards = [
            {
                "id": pool.model,
                "object": "model",
                "created": self.created,
                "owned_by": "spark-gateway",
                "max_model_len": self.registry.max_context(pool),
                "aliases": list(pool.aliases),
                "backends": list(pool.backends),
            }
            for pool in self.registry.pools
        ]
        body = orjson.dumps({"object": "list", "data": cards})
        await send_bytes(send, 200, body, [(b"content-type", b"application/json")])
