"""POST /gateway/explain and POST /gateway/policy/reload, driven through the ASGI interface."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette

from gateway.api.asgi import http_scope
from gateway.api.policy_admin import policy_admin_routes
from gateway.policy.load import PolicyWatcher
from gateway.records import BackendSnapshot
from gateway.routing.pipeline.router import PolicyRouter

GOOD = "version: 1\nprofiles:\n  - name: default\n    prefer: [b]\n"
POOL = [BackendSnapshot("a"), BackendSnapshot("b")]


async def post(app: Starlette, path: str, body: bytes) -> tuple[int, Any]:
    scope = http_scope("POST", path, [(b"content-type", b"application/json")])
    inbox = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0) if inbox else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, orjson.loads(payload)


def build(tmp_path: Path) -> tuple[Starlette, PolicyWatcher, Path]:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    watcher = PolicyWatcher(path)
    router = PolicyRouter(watcher)

    def resolve(model: str) -> Sequence[BackendSnapshot] | None:
        return POOL if model == "m" else None

    return Starlette(routes=policy_admin_routes(router, watcher, resolve)), watcher, path


async def test_explain_returns_the_decision_for_a_request_body(tmp_path: Path) -> None:
    app, _, _ = build(tmp_path)
    body = {"model": "m", "endpoint": "completions", "prompt": "hello", "max_tokens": 5}
    status, answer = await post(app, "/gateway/explain", orjson.dumps(body))
    assert status == 200
    assert answer["chosen"] == "b" and answer["features"]["endpoint"] == "completions"


async def test_explain_of_an_unknown_model_is_a_404_and_bad_json_a_400(tmp_path: Path) -> None:
    app, _, _ = build(tmp_path)
    status, answer = await post(app, "/gateway/explain", b'{"model": "nope", "messages": []}')
    assert status == 404 and answer["error"]["code"] == "model_not_found"
    status, answer = await post(app, "/gateway/explain", b"{not json")
    assert status == 400 and answer["error"]["type"] == "invalid_request_error"
    status, _ = await post(app, "/gateway/explain", b"[1, 2]")
    assert status == 400


async def test_reload_applies_a_valid_policy_and_returns_its_hash(tmp_path: Path) -> None:
    app, watcher, path = build(tmp_path)
    path.write_text(GOOD.replace("[b]", "[a]"))
    status, answer = await post(app, "/gateway/policy/reload", b"")
    assert status == 200 and answer["status"] == "ok" and answer["changed"] is True
    assert answer["policy"]["sha256"] == watcher.current.sha256 and answer["policy"]["version"] == 1
    _, explained = await post(app, "/gateway/explain", b'{"model": "m", "prompt": "x"}')
    assert explained["chosen"] == "a"


async def test_reload_of_a_broken_policy_is_a_400_and_the_old_policy_stays(tmp_path: Path) -> None:
    app, watcher, path = build(tmp_path)
    before = watcher.current.sha256
    path.write_text(GOOD.replace("prefer", "prefers"))
    status, answer = await post(app, "/gateway/policy/reload", b"")
    assert status == 400 and answer["error"]["code"] == "invalid_policy"
    assert answer["error"]["errors"] == [
        f"{path}:4: profiles.0.prefers: unknown field "
        "(check the spelling; `spark-gateway schema` lists the fields)"
    ]
    assert answer["policy"]["sha256"] == before == watcher.current.sha256
    _, explained = await post(app, "/gateway/explain", b'{"model": "m", "prompt": "x"}')
    assert explained["policy"]["last_reload_error"] is not None
