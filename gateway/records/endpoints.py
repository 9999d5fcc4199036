"""The client APIs the gateway serves, by the name routing, policies and backend capabilities use.

One name per API, whatever path spells it (`/v1/rerank`, `/rerank` and `/v1/reranking` are all
"rerank"). GET and DELETE of a stored response belong to "responses": the backend that created it
serves them.
"""

from __future__ import annotations

from typing import Literal

Endpoint = Literal[
    "chat",
    "completions",
    "messages",
    "count_tokens",
    "responses",
    "embeddings",
    "rerank",
    "tokenize",
    "detokenize",
]
ENDPOINTS: tuple[str, ...] = Endpoint.__args__  # type: ignore[attr-defined]

# The client path that names each endpoint in messages (a refusal says which API no backend serves).
ENDPOINT_PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
    "tokenize": "/tokenize",
    "detokenize": "/detokenize",
}
