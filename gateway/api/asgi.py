"""Small pure-ASGI pieces shared by the routes: type aliases and a bytes response (defined in
proxy/asgi.py, re-exported here), the request-context middleware. Never BaseHTTPMiddleware: it adds a
task group and a relay per chunk on the streaming path."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from starlette.applications import Starlette

from gateway.clock import monotonic
from gateway.proxy.asgi import ASGIApp as ASGIApp
from gateway.proxy.asgi import Message as Message
from gateway.proxy.asgi import Receive as Receive
from gateway.proxy.asgi import Scope as Scope
from gateway.proxy.asgi import Send as Send
from gateway.proxy.asgi import send_bytes as send_bytes

REQUEST_ID = "gateway.request_id"
STARTED = "gateway.started"  # monotonic() when the request reached the gateway
RESPONSE_STARTED = "gateway.response_started"  # set once the response head went out (errors.ServerErrors)


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


async def read_body(receive: Receive, limit: int, watch: Callable[[bytes], None] | None = None) -> bytes:
    """The whole request body, read once; BodyTooLarge past `limit` bytes, ClientGone on disconnect.
    `watch` sees each chunk as it arrives and may stop the read by raising."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        if watch is not None:
            watch(chunk)
        parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def drain_body(receive: Receive) -> None:
    """Read the rest of a request body and drop it: a response sent before the body is all read makes the
    server close the connection on a client still sending, which then never sees the response."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class RequestContext:
    """Pure-ASGI middleware: stamps arrival time and a request id (the client's `x-request-id` if it sent
    one) into the scope, echoes the id on every response and marks the scope once the response started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[STARTED] = monotonic()
        incoming = header(scope, b"x-request-id")
        request_id = incoming.decode("latin-1")[:128] if incoming else uuid.uuid4().hex
        scope[REQUEST_ID] = request_id
        id_header = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), id_header]
                scope[RESPONSE_STARTED] = True
            await send(message)

        await self.app(scope, receive, send_with_id)


class DirectRoutes(Starlette):
    """Starlette whose hot POST routes skip its own routing and exception layers.

    Starlette wraps every request in ServerErrorMiddleware, ExceptionMiddleware, the Router and the Route,
    and two of them wrap `send`: on a stream that is four extra Python calls per SSE chunk. For the paths
    in `direct` (pure-ASGI endpoints that never raise HTTPException) a POST goes through the same user
    middleware, in the same order, straight to the endpoint; every other request takes the full stack.
    An exception escaping the endpoint meets the user middleware's error guard (app.py installs
    errors.ServerErrors), as it would on the full stack.
    """

    def __init__(self, *, direct: Mapping[str, ASGIApp], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct = dict(direct)

    def build_middleware_stack(self) -> ASGIApp:
        full: ASGIApp = super().build_middleware_stack()
        direct: dict[str, ASGIApp] = {}
        for path, endpoint in self._direct.items():
            app = endpoint
            for cls, args, kwargs in reversed(self.user_middleware):
                app = cls(app, *args, **kwargs)
            direct[path] = app
        return _Switch(full, direct)


class _Switch:
    def __init__(self, full: ASGIApp, direct: dict[str, ASGIApp]) -> None:
        self.full = full
        self.direct = direct

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            app = self.direct.get(scope["path"])
            if app is not None:
                await app(scope, receive, send)
                return
        await self.full(scope, receive, send)


def http_scope(method: str, path: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> Scope:
    """The scope of one HTTP request from 127.0.0.1, for driving the app in-process (bench, tests)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
