"""Admin routes for engine containers: GET /gateway/engines, POST /gateway/engines/{name}/start|stop.

Behind the admin key like every /gateway/ route (api/auth.py). A start answers once the container runs
(its warm-up continues; GET shows when it is ready); a stop drains the engine first, bounded.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.api.errors import error_body
from gateway.engines.manager import EngineManager

_JSON = "application/json"


def engines_admin_routes(manager: EngineManager) -> list[Route]:
    async def listing(request: Request) -> Response:
        return Response(orjson.dumps(manager.describe()), media_type=_JSON)

    async def start(request: Request) -> Response:
        return await _act(request, "start")

    async def stop(request: Request) -> Response:
        return await _act(request, "stop")

    async def _act(request: Request, action: str) -> Response:
        name = request.path_params["name"]
        if name not in manager.engines:
            known = ", ".join(manager.engines) or "none"
            body = error_body(404, f"no engine named {name!r} (engines: {known})", "engine_not_found")
            return Response(body, status_code=404, media_type=_JSON)
        task = (
            manager.request_start(name, batch=False)
            if action == "start"
            else manager.request_stop(name, "admin")
        )
        done = await task
        engine = next(e for e in manager.describe()["engines"] if e["name"] == name)
        status = 200 if done else 409  # 409: it could not start (no room) or was still serving
        return Response(orjson.dumps({"ok": done, "engine": engine}), status_code=status, media_type=_JSON)

    return [
        Route("/gateway/engines", listing, methods=["GET"]),
        Route("/gateway/engines/{name}/start", start, methods=["POST"]),
        Route("/gateway/engines/{name}/stop", stop, methods=["POST"]),
    ]
