"""DirectRoutes: the hot POST routes skip Starlette's routing layers but keep the user middleware;
everything else still takes the full stack. Also the keyless auth pass-through and the one-frame
fast path of the SSE meter, which must behave exactly like the general path."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route

from gateway.api.asgi import REQUEST_ID, DirectRoutes, RequestContext
from gateway.api.auth import AUTH_ROLE, ApiKeyAuth
from gateway.proxy.stream import SseMeter
from gateway.settings import AuthConfig

Sent = list[dict[str, Any]]


class _Hot:
    """A pure-ASGI endpoint object, as the gateway's routes are (Starlette calls those as ASGI apps)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(f"hot:{scope['method']}:{scope.get(REQUEST_ID) is not None}")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _app(seen: list[str]) -> DirectRoutes:
    hot = _Hot(seen)
    app = DirectRoutes(routes=[Route("/hot", hot, methods=["POST"])], direct={"/hot": hot})
    app.add_middleware(RequestContext)
    return app


async def _call(app: Any, method: str, path: str, root_path: str = "") -> Sent:
    sent: Sent = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": root_path,
        "headers": [],
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
    }
    await app(scope, receive, send)
    return sent


async def test_a_direct_post_runs_the_user_middleware_and_reaches_the_endpoint() -> None:
    seen: list[str] = []
    sent = await _call(_app(seen), "POST", "/hot")
    assert seen == ["hot:POST:True"]
    assert sent[0]["status"] == 200
    assert any(name == b"x-request-id" for name, _ in sent[0]["headers"])


async def test_other_methods_and_paths_keep_starlettes_answers() -> None:
    seen: list[str] = []
    app = _app(seen)
    assert (await _call(app, "GET", "/hot"))[0]["status"] == 405
    assert (await _call(app, "POST", "/elsewhere"))[0]["status"] == 404
    assert seen == []


async def test_a_mounted_app_with_a_root_path_takes_the_full_stack() -> None:
    seen: list[str] = []
    sent = await _call(_app(seen), "POST", "/api/hot", root_path="/api")
    assert sent[0]["status"] == 200 and seen == ["hot:POST:True"]


async def test_without_keys_every_request_passes_as_anonymous() -> None:
    roles: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        roles.append(scope[AUTH_ROLE])

    auth = ApiKeyAuth(app, AuthConfig(metrics="admin"))
    for path, headers in (("/gateway/x", []), ("/metrics", [(b"authorization", b"Bearer sk-any")])):
        await auth({"type": "http", "path": path, "headers": headers}, None, None)  # type: ignore[arg-type]
    assert roles == ["anonymous", "anonymous"]


@pytest.mark.parametrize(
    "chunks",
    [
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'] * 3 + [b"data: [DONE]\n\n"],
        [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', b"\n\n", b": ping\n\n"],
        [b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n', b"data: [DONE]\n\n"],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n\n', b"data: x\n\ndata: y\n\n"],
    ],
)
def test_the_one_frame_fast_path_forwards_and_measures_like_the_general_path(chunks: list[bytes]) -> None:
    fast = SseMeter(strip_usage=True)
    general = SseMeter(strip_usage=True)
    out_fast = [fast.feed(c) for c in chunks]
    out_general = [_general_feed(general, chunk) for chunk in chunks]
    assert out_fast == out_general
    assert (fast.content_frames, fast.usage, fast.done, len(fast.itl)) == (
        general.content_frames,
        general.usage,
        general.done,
        len(general.itl),
    )


def _general_feed(meter: SseMeter, chunk: bytes) -> bytes:
    """Feed through the general path by splitting the chunk so it never is one whole frame."""
    if len(chunk) < 2:
        return meter.feed(chunk)
    return meter.feed(chunk[:1]) + meter.feed(chunk[1:])
