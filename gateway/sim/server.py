"""The aiohttp application of one simulated engine: routes, readiness gate, request handling and SSE.

Everything engine-specific (validation, JSON shapes, info endpoints, metrics) comes from the flavor; this
module only sequences it the way the engines do: validate before answering (errors before the stream
are plain JSON with a status), then stream one chunk per engine step, then the finish chunk, the usage
chunk when asked for, and [DONE]. A client that goes away cancels the request in the model at once.
The agent APIs (Messages, Responses) and the non-generating endpoints come from agent_api.py and
utility_api.py; a path or method the engine does not serve is answered as the engine answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.sim.agent_api import agent_routes
from gateway.sim.flavors.base import JSON, Flavor, Piece, RunSummary
from gateway.sim.flavors.request import ApiError, Endpoint, RequestPlan, parse_request
from gateway.sim.generation import output_of, pieces
from gateway.sim.http import error_response, event_stream, groups, json_response, read_body
from gateway.sim.utility_api import utility_routes

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
    for method, path, handler in [*agent_routes(engine), *utility_routes(engine)]:
        routes[(method, path)] = handler
    for alias, target in flavor.route_aliases.items():
        for (method, path), handler in list(routes.items()):
            if path == target:
                routes[(method, alias)] = handler
    for method, path, handler in flavor.extra_routes(engine):
        routes[(method, path)] = handler
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    return app


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
        except web.HTTPNotFound:
            return engine.flavor.unknown_route(404)
        except web.HTTPMethodNotAllowed:
            return engine.flavor.unknown_route(405)
        finally:
            engine.untrack(request.transport)

    return lifecycle


async def _generate(engine: SimEngine, endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    flavor = engine.flavor
    try:
        body = await read_body(flavor, request)
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


async def _complete(engine: SimEngine, plan: RequestPlan, run: RequestRun) -> web.StreamResponse:
    flavor = engine.flavor
    summary = await run.to_end()
    out = output_of(plan, run.tokens)
    usage = flavor.usage(plan.prompt.tokens, run.tokens)
    body = flavor.response(plan, out.content, out.reasoning, plan.finish_reason, usage, out.tool)
    body.update(flavor.last_chunk_extra(summary))
    return json_response(body)


async def _stream(
    engine: SimEngine, plan: RequestPlan, run: RequestRun, request: web.Request
) -> web.StreamResponse:
    flavor = engine.flavor
    writer = _SseWriter(event_stream())
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
                for start, count in groups(emitted, produced, flavor.chunk_per_token):
                    usage = flavor.usage(prompt_tokens, start + count) if continuous else None
                    chunks.extend(
                        flavor.chunk(plan, piece, None, usage) for piece in pieces(plan, start, count)
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


class _SseWriter:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def send(self, chunks: list[JSON], done: bool = False) -> None:
        frames = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
        if done:
            frames.append(b"data: [DONE]\n\n")
        if frames:
            await self.response.write(b"".join(frames))
