"""HTTP helpers every twin endpoint shares: JSON bodies in and out, errors in the flavor's shape, and
how a stream groups an engine step's tokens into frames."""

from __future__ import annotations

import json

import orjson
from aiohttp import web

from gateway.sim.flavors.base import JSON, Flavor
from gateway.sim.flavors.request import ApiError


def json_response(body: JSON | list[JSON], status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def error_response(flavor: Flavor, err: ApiError) -> web.Response:
    return json_response(flavor.error_body(err), status=err.status)


async def read_json(request: web.Request) -> object:
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None


async def read_body(flavor: Flavor, request: web.Request) -> object:
    """The request's JSON, after the content-type check of the engines that make it."""
    if flavor.requires_json_content_type and request.content_type != "application/json":
        raise ApiError(400, "Unsupported Media Type: Only 'application/json' is allowed")
    return await read_json(request)


def groups(start: int, count: int, per_token: bool) -> list[tuple[int, int]]:
    """One frame per token (llama.cpp) or one per engine step (vLLM, SGLang)."""
    if per_token:
        return [(i, 1) for i in range(start, start + count)]
    return [(start, count)]


def event_stream() -> web.StreamResponse:
    return web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
