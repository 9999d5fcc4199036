"""Admin routes for the policy: POST /gateway/explain and POST /gateway/policy/reload.

Built by `policy_admin_routes(...)` from the objects they need, so app.py mounts them with one line and
tests build them without a gateway. Neither route sends anything upstream. With an `outlook` (api/outlook.py)
the explanation ends with `outcome`: what the request would meet (served, refused, or a wait and how it
ends), since a router refusal can still mean a wait for a warming or busy backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.api.errors import error_body
from gateway.api.request_checks import DEFAULT_LIMITS, BodyLimits, check_body
from gateway.policy.load import ReloadResult
from gateway.records import BackendSnapshot

PoolResolver = Callable[[str], Sequence[BackendSnapshot] | None]  # model name -> its backends, None: unknown
# (model, explanation) -> what the request would meet
OutlookFn = Callable[[str, dict[str, Any]], dict[str, Any]]


class Explainer(Protocol):
    def explain(
        self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]
    ) -> dict[str, Any]: ...


class Reloader(Protocol):
    def reload(self) -> ReloadResult: ...


def policy_admin_routes(
    router: Explainer,
    watcher: Reloader,
    resolve_pool: PoolResolver,
    outlook: OutlookFn | None = None,
    body_limits: BodyLimits = DEFAULT_LIMITS,
) -> list[Route]:
    async def explain(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _json(400, error_body(400, f"request body is not valid JSON: {exc}", "invalid_json"))
        if not isinstance(body, dict):
            return _json(400, error_body(400, "the body must be a chat or completions request object"))
        problem = check_body(body, body_limits)
        if problem is not None:
            return _json(400, error_body(400, problem[0], "invalid_request", problem[1]))
        endpoint = str(body.pop("endpoint", "chat"))
        model = body.get("model")
        backends = resolve_pool(model) if isinstance(model, str) else None
        if backends is None:
            return _json(
                404, error_body(404, f"the model {model!r} is not served here", "model_not_found", "model")
            )
        explanation = router.explain(endpoint, body, backends)
        if outlook is not None:
            explanation["outcome"] = outlook(str(model), explanation)
        return _json(200, orjson.dumps(explanation))

    async def reload(request: Request) -> Response:
        return _json(*reload_response(watcher.reload()))

    return [
        Route("/gateway/explain", explain, methods=["POST"]),
        Route("/gateway/policy/reload", reload, methods=["POST"]),
    ]


def reload_response(result: ReloadResult) -> tuple[int, bytes]:
    """200 with the policy now in force and its warnings, or 400 with the problems (the policy in force is
    unchanged): invalid fields, or backend names the gateway's config does not define."""
    loaded = result.loaded
    in_force = {
        "source": loaded.source,
        "version": loaded.policy.version,
        "sha256": loaded.sha256,
        "profiles": [p.name for p in loaded.policy.profiles],
    }
    if result.ok:
        # Warnings (e.g. a backend no profile reaches) do not refuse a policy, but the caller should see them.
        answer = {"status": "ok", "changed": result.changed, "policy": in_force}
        return 200, orjson.dumps({**answer, "warnings": loaded.warning_lines()})
    error = {
        "message": "policy rejected; the previous policy stays in force: " + "; ".join(result.errors),
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_policy",
        "errors": list(result.errors),
    }
    return 400, orjson.dumps({"error": error, "policy": in_force})


def _json(status: int, body: bytes) -> Response:
    return Response(body, status_code=status, media_type="application/json")
