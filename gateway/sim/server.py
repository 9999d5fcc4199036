"""The aiohttp application of one simulated engine: routes, readiness gate, request handling and SSE.

Everything engine-specific (validation, JSON shapes, info endpoints, metrics) comes from the flavor; this
module only sequences it the way the engines do: validate before answering (errors before the stream
are plain JSON with a status), then stream one chunk per engine step, then the finish chunk, the usage
chunk when asked for, and [DONE]. A client that goes away cancels the request in the model at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.sim.flavors.base import JSON, Flavor, Piece, RunSummary
from gateway.sim.flavors.request import ApiError, Endpoint, RequestPlan, parse_request

if TYPE_CHECKING:
    from gateway.sim.engine import RequestRun, SimEngine

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_HEALTH_PATHS = frozenset({"/health", "/health_generate"})


def build_app(engine: SimEngine) -> web.Application:
    app = web.Application(middlewares=[_lifecycle(engine)], client_max_size=64 * 1024 * 1024)
    flavor = engine.flavor

    async def health(_: web.Request) -> web.StreamResponse:
        return flavor.health_ok()

    async def models(_: web.Request) -> web.StreamResponse:
        return json_response(flavor.models(engine))

    async def metrics(_: web.Request) -> web.StreamResponse:
        return web.Response(
            body=flavor.metrics(engine).encode(), headers={"Content-Type": flavor.metrics_content_type}
        )

    def generation(endpoint: Endpoint) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await _generate(engine, endpoint, request)

        return handler

    routes: dict[tuple[str, str], Handler] = {
        ("GET", "/health"): health,
        ("GET", "/v1/models"): models,
        ("GET", "/metrics"): metrics,
        ("POST", "/v1/chat/completions"): generation("chat"),
        ("POST", "/v1/completions"): generation("completions"),
    }
    for alias, target in flavor.route_aliases.items():
        for (method, path), handler in list(routes.items()):
            if path == target:
                routes[(method, alias)] = handler
    for method, path, handler in flavor.extra_routes(engine):
        routes[(method, path)] = handler
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    return app


def json_response(body: JSON, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def error_response(flavor: Flavor, err: ApiError) -> web.Response:
    return json_response(flavor.error_body(err), status=err.status)


def _lifecycle(engine: SimEngine) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def lifecycle(request: web.Request, handler: Handler) -> web.StreamResponse:
        if engine.phase == "hung":
            await engine.wait_awake()  # released only when the engine goes down and drops the connection
        if engine.phase == "loading":
            loading = engine.flavor.loading_response()
            if loading is not None:
                return loading
        if engine.phase == "warming" and request.path in _HEALTH_PATHS:
            return web.Response(status=503)
        engine.track(request.transport)
        try:
            return await handler(request)
        finally:
            engine.untrack(request.transport)

    return lifecycle


async def _generate(engine: SimEngine, endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    flavor = engine.flavor
    try:
        if flavor.requires_json_content_type and request.content_type != "application/json":
            raise ApiError(400, "Unsupported Media Type: Only 'application/json' is allowed")
        body = await _read_json(request)
        plan = flavor.plan(parse_request(endpoint, body), engine.spec, engine.rng)
    except ApiError as err:
        return error_response(flavor, err)
    if engine.should_fail():
        engine.observed.errors_total += 1
        return error_response(flavor, flavor.fault_error())
    run = engine.run(plan)
    if plan.request.stream:
        return await _stream(engine, plan, run, request)
    return await _complete(engine, plan, run)


async def _read_json(request: web.Request) -> object:
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None


async def _complete(engine: SimEngine, plan: RequestPlan, run: RequestRun) -> web.StreamResponse:
    flavor = engine.flavor
    try:
        async with contextlib.aclosing(run.steps_of()) as steps:
            async for _ in steps:
                pass
    except asyncio.CancelledError:
        run.finish("abort")
        raise
    summary = run.finish(plan.finish_reason)
    reasoning_n = min(plan.reasoning_tokens, run.tokens)
    reasoning = plan.output.span(0, reasoning_n) if reasoning_n else None
    content = plan.output.span(reasoning_n, run.tokens - reasoning_n)
    usage = flavor.usage(plan.prompt.tokens, run.tokens)
    body = flavor.response(plan, content, reasoning, plan.finish_reason, usage)
    body.update(flavor.last_chunk_extra(summary))
    return json_response(body)


async def _stream(
    engine: SimEngine, plan: RequestPlan, run: RequestRun, request: web.Request
) -> web.StreamResponse:
    flavor = engine.flavor
    writer = _SseWriter(
        web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    )
    fail_after_first = engine.should_fail_stream()
    continuous = flavor.continuous_usage(plan.request)
    prompt_tokens = plan.prompt.tokens
    try:
        await writer.response.prepare(request)
        if plan.request.endpoint == "chat":
            usage = flavor.usage(prompt_tokens, 0) if continuous else None
            await writer.send([flavor.chunk(plan, Piece(role=True), None, usage)])
        emitted = 0
        async with contextlib.aclosing(run.steps_of()) as steps:
            async for produced in steps:
                chunks: list[JSON] = []
                for start, count in _groups(emitted, produced, flavor.chunk_per_token):
                    usage = flavor.usage(prompt_tokens, start + count) if continuous else None
                    chunks.extend(
                        flavor.chunk(plan, piece, None, usage) for piece in _pieces(plan, start, count)
                    )
                emitted += produced
                await writer.send(chunks)
                if fail_after_first:
                    break
        if fail_after_first and emitted < plan.completion_tokens:
            run.finish("error")
            await writer.send([flavor.stream_error_body(flavor.fault_error())], done=flavor.done_after_error)
            return writer.response
        await writer.send(
            _closing_chunks(flavor, plan, run.finish(plan.finish_reason), continuous), done=True
        )
    except asyncio.CancelledError:
        run.finish("abort")
        raise
    except ConnectionResetError:
        run.finish("abort")
    return writer.response


def _closing_chunks(flavor: Flavor, plan: RequestPlan, summary: RunSummary, continuous: bool) -> list[JSON]:
    usage = flavor.usage(plan.prompt.tokens, summary.completion_tokens)
    finish = flavor.chunk(plan, None, plan.finish_reason, usage if continuous else None)
    extra = flavor.last_chunk_extra(summary)
    if plan.request.include_usage:
        return [finish, {**flavor.usage_chunk(plan, usage), **extra}]
    return [{**finish, **extra}]


def _groups(start: int, count: int, per_token: bool) -> list[tuple[int, int]]:
    if per_token:
        return [(i, 1) for i in range(start, start + count)]
    return [(start, count)]


def _pieces(plan: RequestPlan, start: int, count: int) -> list[Piece]:
    """The text of output positions [start, start+count), split into reasoning and content deltas."""
    end = start + count
    if plan.request.endpoint == "completions":
        return [Piece(content=plan.output.span(start, count))]
    boundary = plan.reasoning_tokens
    pieces: list[Piece] = []
    if start < boundary:
        pieces.append(Piece(reasoning=plan.output.span(start, min(end, boundary) - start)))
    if end > boundary:
        first = max(start, boundary)
        pieces.append(Piece(content=plan.output.span(first, end - first)))
    return pieces


class _SseWriter:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def send(self, chunks: list[JSON], done: bool = False) -> None:
        frames = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
        if done:
            frames.append(b"data: [DONE]\n\n")
        if frames:
            await self.response.write(b"".join(frames))
