"""The status page: GET /ui (a static page and its script and style) and the two admin routes it reads
besides /gateway/backends, /gateway/stats and /gateway/engines: GET /gateway/decisions (the decision
feed, proxy/decision_feed.py) and GET /gateway/policy (the policy in force and its last reload).

The page's files ship in the package (gateway/api/ui_static/, package data) and are read once, when the
routes are built; nothing is fetched from the network, nothing is built. They carry no data: the page
asks the admin routes for it with the admin key it is given, so /ui itself is open (api/auth.py) and the
data stays behind the key like every /gateway/ route. The page polls at POLL_INTERVAL_S, and pauses while
hidden; PAGE_POLLS is what one round reads (the overhead bench replays it as a page client).
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.policy.load import PolicyWatcher
from gateway.proxy.decision_feed import DecisionFeed

POLL_INTERVAL_S = 2.0
# One round of the page's reads (the engines listing only when the gateway has engines).
PAGE_POLLS = ("/gateway/backends", "/gateway/stats", "/gateway/decisions?limit=25", "/gateway/policy")
PAGE_FILES = ("/ui", "/ui/style.css", "/ui/charts.js", "/ui/app.js")
_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# Only the page's own files: no inline script, no other origin, no framing.
_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
_JSON = "application/json"
_MAX_LIMIT = 500


def load_assets() -> dict[str, bytes]:
    """The page's files from the installed package."""
    folder = resources.files("gateway.api") / "ui_static"
    return {name: (folder / name).read_bytes() for name in _ASSETS}


def ui_routes(feed: DecisionFeed | None, policy: PolicyWatcher | None) -> list[Route]:
    assets = load_assets()

    async def page(request: Request) -> Response:
        return _asset(assets, "index.html")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            body = orjson.dumps({"error": {"message": f"no file {name!r} in /ui", "type": "not_found"}})
            return Response(body, status_code=404, media_type=_JSON)
        return _asset(assets, name)

    async def decisions(request: Request) -> Response:
        since, limit = _int_param(request, "since", 0), _int_param(request, "limit", 100)
        if since is None or limit is None:
            return _bad("`since` and `limit` must be non-negative integers")
        entries = [] if feed is None else feed.since(since, min(limit, _MAX_LIMIT))
        body = {"capacity": 0 if feed is None else feed.capacity, "decisions": entries}
        return Response(orjson.dumps(body), media_type=_JSON)

    async def policy_state(request: Request) -> Response:
        return Response(orjson.dumps(policy_document(policy)), media_type=_JSON)

    return [
        Route("/ui", page, methods=["GET"]),
        Route("/ui/", page, methods=["GET"]),
        Route("/ui/{name}", asset, methods=["GET"]),
        Route("/gateway/decisions", decisions, methods=["GET"]),
        Route("/gateway/policy", policy_state, methods=["GET"]),
    ]


def policy_document(watcher: PolicyWatcher | None) -> dict[str, Any]:
    """The policy in force: its file, hash and profiles; the last reload attempt and its result; the last
    error (its `file:line: location: message` lines) while the file on disk is rejected."""
    if watcher is None:
        return {"configured": False}
    loaded = watcher.current
    last = watcher.last_reload
    return {
        "configured": True,
        "source": loaded.source,
        "sha256": loaded.sha256,
        "version": loaded.policy.version,
        "profiles": [p.name for p in loaded.policy.profiles],
        "warnings": loaded.warning_lines(),
        "last_reload": None if last is None else {"at": round(last[0], 3), "result": last[1]},
        "reload_counts": watcher.reload_counts,
        "last_error": watcher.last_error,
        "now": round(time.time(), 3),
    }


def _asset(assets: dict[str, bytes], name: str) -> Response:
    return Response(assets[name], media_type=_ASSETS[name], headers=_HEADERS)


def _int_param(request: Request, name: str, default: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    return int(raw) if raw.isdigit() else None


def _bad(message: str) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return Response(orjson.dumps(body), status_code=400, media_type=_JSON)
