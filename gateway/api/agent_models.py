"""Request shapes of the APIs agent clients speak (Anthropic Messages, Responses, embeddings, rerank,
tokenize), for /openapi.json only: like openai_models.py, no body is validated with them and every
field not listed passes through to the engine."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.api.openai_models import Open


class MessagesRequest(Open):
    """Anthropic Messages: served natively, or translated to chat for engines without it."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    stream: bool | None = None


class CountTokensRequest(Open):
    model: str
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


class ResponsesRequest(Open):
    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(
        default=None, description="sent to the backend that created that response"
    )
    max_output_tokens: int | None = None
    stream: bool | None = None


class EmbeddingsRequest(Open):
    model: str
    input: str | list[str] | list[int] | list[list[int]]


class RerankRequest(Open):
    model: str
    query: str
    documents: list[str | dict[str, Any]]


class TokenizeRequest(Open):
    model: str | None = Field(default=None, description="optional when the gateway has one pool")
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None


class DetokenizeRequest(Open):
    model: str | None = Field(default=None, description="optional when the gateway has one pool")
    tokens: list[int]


class ApiAnswer(Open):
    """The engine's answer, passed through (a Messages answer from a chat engine is translated)."""
