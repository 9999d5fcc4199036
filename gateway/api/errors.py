"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` (the openai client shape).

Every error the gateway answers itself has this shape, Starlette's own 404 and 405 and any unhandled
exception included (`exception_handlers` and `ServerErrors`): the openai client shows only the status
code of an error whose body it cannot parse. The body and SSE-frame builders are proxy/errors.py's
(dispatch answers with them too), re-exported here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.asgi import REQUEST_ID, RESPONSE_STARTED, ASGIApp, Receive, Scope, Send, send_bytes
from gateway.proxy.errors import error_body as error_body
from gateway.proxy.errors import error_frame as error_frame


async def send_error(
    send: Send,
    status: int,
    message: str,
    code: str | None = None,
    param: str | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    body = error_body(status, message, code, param)
    await send_bytes(send, status, body, [(b"content-type", b"application/json"), *headers])


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's HTTPException (its 404 for an unknown path, 405 for a wrong method) as a JSON error."""
    assert isinstance(exc, HTTPException)
    status, method, path = exc.status_code, request.method, request.scope["path"][:200]
    headers = exc.headers or {}
    code: str | None = None
    if status == 404:
        message, code = f"Unknown URL ({method} {path}); GET /openapi.json lists the routes.", "unknown_url"
    elif status == 405:
        allowed = headers.get("Allow", "")
        message, code = f"Method {method} is not allowed on {path}; allowed: {allowed}.", "method_not_allowed"
    else:
        message = exc.detail
    body = error_body(status, message, code)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def exception_handlers() -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """For `Starlette(exception_handlers=...)`: JSON instead of Starlette's plain-text errors."""
    return {HTTPException: http_error}


class ServerErrors:
    """Pure-ASGI middleware: an exception escaping the app before the response started becomes a JSON 500
    instead of the server's plain-text one, then is re-raised so the server logs it with its traceback.

    It reads whether the response started from the flag RequestContext sets in the scope rather than
    wrapping `send` itself, which would add a Python call to every SSE frame: install it inside
    RequestContext. The message names the request id, never the exception (it may hold internal addresses).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception:
            if scope["type"] != "http" or scope.get(RESPONSE_STARTED):
                raise
            request_id = scope.get(REQUEST_ID, "-")
            message = f"Internal error in the gateway (request id {request_id}); its log has the details."
            await send_error(send, 500, message, "internal_error")
            raise
