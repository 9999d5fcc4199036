"""A narrow OpenAPI description of the gateway's routes, for fuzzing only.

The gateway serves the real description at GET /openapi.json (gateway/api/openapi.py). This one keeps
generated requests cheap for the twin fleet behind the gateway: at most 16 output tokens, short text
messages, no tools, no images, and only the read-only operator routes besides the two generation routes.
Bodies still allow extra properties, so fuzzing also sends fields the gateway passes through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}
_ANY_OBJECT = {"type": "object", "additionalProperties": True}
_CONTENT = {"type": "string", "maxLength": 200}
_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {"role": {"type": "string", "enum": ["system", "user", "assistant"]}, "content": _CONTENT},
}
_GENERATION_FIELDS: dict[str, Any] = {
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 16},
    "stream": {"type": "boolean"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "stop": {"oneOf": [{"type": "string", "maxLength": 8}, {"type": "array", "items": {"type": "string"}}]},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
}


def _errors(*statuses: int) -> dict[str, Any]:
    return {
        str(s): {"description": "error", "content": {"application/json": {"schema": _ERROR}}}
        for s in statuses
    }


def _generation(summary: str, required: str, field: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": ["model", required],
        "properties": {"model": model, required: field, **_GENERATION_FIELDS},
        "additionalProperties": True,
    }
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": {
                "200": {
                    "description": "the completion (JSON) or its event stream",
                    "content": {"application/json": {"schema": _ANY_OBJECT}, "text/event-stream": {}},
                },
                **_errors(400, 401, 404, 413, 415, 429, 502, 503, 504),
            },
        }
    }


def _get(
    summary: str, statuses: Sequence[int] = (), content_type: str = "application/json"
) -> dict[str, Any]:
    ok_schema = {"type": "string"} if content_type.startswith("text/") else _ANY_OBJECT
    return {
        "get": {
            "summary": summary,
            "responses": {
                "200": {"description": "ok", "content": {content_type: {"schema": ok_schema}}},
                **_errors(*statuses),
            },
        }
    }


def fuzz_schema(models: Sequence[str] = ()) -> dict[str, Any]:
    """OpenAPI 3.0; `models` become the `model` enum so generated requests reach a backend."""
    model: dict[str, Any] = {"type": "string", "enum": list(models)} if models else {"type": "string"}
    return {
        "openapi": "3.0.3",
        "info": {"title": "spark-gateway (fuzzing subset)", "version": "0.1.0"},
        "paths": {
            "/v1/chat/completions": _generation(
                "Chat completion", "messages", {"type": "array", "minItems": 1, "items": _MESSAGE}, model
            ),
            "/v1/completions": _generation("Text completion", "prompt", _CONTENT, model),
            "/v1/models": _get("Model pools", (401,)),
            "/health": _get("Liveness"),
            "/ready": _get("Every pool has a ready backend", (503,)),
            "/metrics": _get("Prometheus metrics", (401, 403), "text/plain"),
            "/gateway/backends": _get("Backend, breaker and queue state", (401, 403)),
        },
    }
