"""JSON pieces that more than one engine sends the same way, so each flavor builds them from here."""

from __future__ import annotations

from typing import Any

from gateway.sim.flavors.request import ErrorKind, RequestPlan

# vLLM and SGLang both name an error's `type` after the Python exception class that carried it.
EXCEPTION_ERROR_TYPES: dict[ErrorKind, str] = {
    "bad_request": "BadRequestError",
    "context": "BadRequestError",
    "not_found": "NotFoundError",
    "server": "InternalServerError",
    "unavailable": "ServiceUnavailableError",
    "not_supported": "NotImplementedError",
}


def chunk_object(plan: RequestPlan) -> str:
    """The `object` of a stream chunk: completions chunks are named like completions replies."""
    return "chat.completion.chunk" if plan.request.endpoint == "chat" else "text_completion"


def envelope(plan: RequestPlan, kind: str, choices: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """The body around `choices` as vLLM and SGLang send it, keys in their order."""
    return {
        "id": plan.request_id,
        "object": kind,
        "created": plan.created,
        "model": plan.response_model,
        "choices": choices,
        "usage": usage,
    }
