"""An engine's error answer in the gateway's one error shape, the engine's own message kept.

Engines answer errors in several shapes (reference/engines.md): vLLM >= 0.10.1 and llama-server nest
them (`{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`), SGLang and older vLLM
flatten them (`{"object": "error", "message", ...}`), FastAPI's own 404 for a path it has no route for
is `{"detail": "Not Found"}`, and a proxy in front may answer plain text or HTML. A client of the gateway
gets every one of them as the gateway's own errors are shaped (proxy/errors.py): the type is the
gateway's for that status, the message and param are the engine's, and the code says it came from the
engine. An Anthropic-shaped error (an engine serving /v1/messages itself) is already what its client
expects and passes untouched.

`unserved_route` tells an engine's "no such route" 404 from its 404 about the request (an unknown
model): the first says the engine does not serve that endpoint at all (a generation model's vLLM asked
for /v1/embeddings), which dispatch remembers for the backend.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.proxy.errors import error_body
from gateway.proxy.stream import split_frames

ENGINE_ERROR = "engine_error"  # the code of an engine's error that carried none of its own
UNSERVED_ENDPOINT = "endpoint_not_served"
MESSAGE_MAX = 2000  # an engine's message as the client gets it; a traceback dump is cut here
# What FastAPI (vLLM, SGLang) and llama-server answer for a path they have no route for.
_ROUTE_MISSES = frozenset({"not found", "file not found"})
# Error types that only restate the status: OpenAI's and Anthropic's generic ones.
_GENERIC = frozenset({
    "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
    "rate_limit_error", "server_error", "api_error", "overloaded_error", "error",
})  # fmt: skip
_SNAKE = re.compile(r"[a-z][a-z0-9_]*")
_STANDARD = frozenset({"message", "type", "param", "code", "detail", "object"})


def normalised(status: int, payload: bytes) -> bytes:
    """The engine's error answer `payload` (status >= 400) in the gateway's error shape."""
    parsed = _parsed(payload)
    if isinstance(parsed, dict) and parsed.get("type") == "error":
        return payload  # Anthropic's shape: a Messages client's own
    message, param, code = _fields(parsed, payload)
    body = error_body(status, message[:MESSAGE_MAX], code, param)
    extra = _extra_fields(parsed)
    if not extra:
        return body
    shaped = orjson.loads(body)
    shaped["error"] = {**shaped["error"], **extra}
    return orjson.dumps(shaped)


def normalised_frames(data: bytes) -> bytes:
    """Whole SSE frames with each engine error frame (`data: {"error": ...}`) in the gateway's shape, its
    numeric code taken as its status; every other frame as it was."""
    out: list[bytes] = []
    for frame, separator in split_frames(data):
        payload = frame[5:].strip() if frame.startswith(b"data:") else b""
        if payload.startswith(b"{") and b'"error"' in payload:
            error = _parsed(payload)
            inner = error.get("error") if isinstance(error, dict) else None
            code = inner.get("code") if isinstance(inner, dict) else None
            status = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 500
            if isinstance(inner, dict | str):
                frame = b"data: " + normalised(status, payload)
        out.append(frame + separator)
    return b"".join(out)


def unserved_route(status: int, payload: bytes) -> bool:
    """Whether a 404 says the engine has no such route (not that the request named something unknown)."""
    if status != 404:
        return False
    parsed = _parsed(payload)
    if isinstance(parsed, dict):
        message, param, _ = _fields(parsed, payload)
        return param is None and message.strip().lower() in _ROUTE_MISSES
    return payload.strip().lower() in (b"not found", b"404 not found", b"file not found")


def unserved_body(path: str, backend: str, payload: bytes) -> bytes:
    """The 404 a client gets when `backend` does not serve `path`, naming both and quoting the engine."""
    said, _, _ = _fields(_parsed(payload), payload)
    message = f"backend {backend} does not serve POST {path} (it answered 404: {said[:200]})"
    return error_body(404, message, UNSERVED_ENDPOINT)


def _parsed(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def _fields(parsed: Any, payload: bytes) -> tuple[str, str | None, str]:
    """(message, param, code) from any of the engines' error shapes; the raw text when none fits."""
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    if isinstance(error, str):
        return error, None, ENGINE_ERROR  # vLLM's 401: {"error": "Unauthorized"}
    if not isinstance(error, dict):
        return (
            payload.decode("utf-8", "replace").strip() or "the engine answered an empty error",
            None,
            ENGINE_ERROR,
        )
    message = error.get("message", error.get("detail"))
    if not isinstance(message, str):
        message = orjson.dumps(message).decode() if message is not None else "the engine gave no message"
    param = error.get("param")
    code = error.get("code")
    # A string code is the engine's own name for the error (model_not_found); a number only repeats the
    # status, which the client has. Without one, an engine's own error type is that name
    # (llama-server's exceed_context_size_error); a generic type or an exception class says nothing more.
    if not isinstance(code, str):
        kind = error.get("type")
        code = (
            kind
            if isinstance(kind, str) and _SNAKE.fullmatch(kind) and kind not in _GENERIC
            else ENGINE_ERROR
        )
    return message, param if isinstance(param, str) else None, code


def _extra_fields(parsed: Any) -> dict[str, Any]:
    """The engine's own scalar fields beside the standard ones (llama-server's n_ctx and
    n_prompt_tokens): figures a client may act on, kept as the engine gave them."""
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return {}
    return {
        key: value
        for key, value in error.items()
        if key not in _STANDARD and isinstance(value, int | float | str) and not isinstance(value, bool)
    }
