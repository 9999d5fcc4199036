"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` (the openai client shape),
whole or as an SSE frame. Dispatch answers failures with them; api/errors.py uses the same builders for
every error the routes answer."""

from __future__ import annotations

import orjson

# One type per status, for the gateway's own errors and engines' errors passed on (proxy/engine_errors.py).
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    414: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    431: "invalid_request_error",
    501: "not_supported_error",
    502: "upstream_error",
    503: "service_unavailable_error",
    504: "upstream_timeout_error",
}


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> bytes:
    error = {"message": message, "type": _TYPES.get(status, "server_error"), "param": param, "code": code}
    return orjson.dumps({"error": error})


def error_frame(message: str, code: str, status: int = 502) -> bytes:
    """An SSE frame carrying an error, for failures after the stream has started (status already 200)."""
    return b"data: " + error_body(status, message, code) + b"\n\n"
