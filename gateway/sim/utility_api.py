"""The engines' non-generating endpoints: embeddings, rerank, tokenize/detokenize and Anthropic
count_tokens, each in its engine's shape and only where that engine serves it.

Sources: vLLM `entrypoints/openai/protocol.py` (EmbeddingResponse, RerankResponse, TokenizeResponse,
DetokenizeResponse) and `anthropic/serving_messages.py` (count_tokens); SGLang
`entrypoints/openai/protocol.py` and `http_server.py`; llama.cpp `tools/server/server-context.cpp`
(handle_embeddings, handle_rerank, handle_tokenize, handle_detokenize) and `server-common.cpp`.
Embeddings and rerank cost no simulated time: the twin models generation, not pooling.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.sim.agent_request import messages_chat_body
from gateway.sim.flavors.base import Handler, unix_now
from gateway.sim.flavors.request import ApiError, parse_request
from gateway.sim.http import error_response, json_response, read_body
from gateway.sim.text import count_text_tokens
from gateway.sim.tokens import TEMPLATE_TOKEN_ID, decode, encode
from gateway.sim.vectors import embedding, relevance

if TYPE_CHECKING:
    from gateway.sim.engine import SimEngine

JSON = dict[str, Any]
# SGLang's tokenizer manager, for a pooling request to a generation model.
_SGLANG_NOT_EMBEDDING = (
    "This model does not appear to be an embedding model by default. Please add `--is-embedding` when "
    "launching the server or try another model."
)


def utility_routes(engine: SimEngine) -> list[tuple[str, str, Handler]]:
    flavor = engine.flavor.name
    routes: list[tuple[str, str, Handler]] = [
        ("POST", "/v1/messages/count_tokens", _handler(engine, _count_tokens)),
        ("POST", "/tokenize", _handler(engine, _tokenize)),
        ("POST", "/detokenize", _handler(engine, _detokenize)),
    ]
    embed, rerank = _handler(engine, _embeddings), _handler(engine, _rerank)
    if flavor == "sglang":  # registered always; a generation model refuses them
        routes.append(("POST", "/v1/tokenize", _handler(engine, _tokenize)))
        routes.append(("POST", "/v1/detokenize", _handler(engine, _detokenize)))
        return [*routes, ("POST", "/v1/embeddings", embed), ("POST", "/v1/rerank", rerank)]
    if flavor == "llamacpp":  # registered always; 501 without --embeddings / --reranking
        embed_paths = ["/v1/embeddings", "/embeddings", "/embedding"]
        rerank_paths = ["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"]
        routes += [("POST", p, embed) for p in embed_paths]
        return routes + [("POST", p, rerank) for p in rerank_paths]
    # vLLM registers the pooling routes only for a pooling model
    if engine.spec.embeddings:
        routes.append(("POST", "/v1/embeddings", embed))
    if engine.spec.reranking:
        routes += [("POST", p, rerank) for p in ("/rerank", "/v1/rerank", "/v2/rerank")]
    return routes


def _handler(engine: SimEngine, answer: Any) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(engine.flavor, request)
            if not isinstance(body, dict):
                raise ApiError(400, "The request body must be a JSON object.")
            return json_response(answer(engine, body))
        except ApiError as err:
            return error_response(engine.flavor, err)

    return handle


def _count_tokens(engine: SimEngine, body: JSON) -> JSON:
    req = parse_request("chat", {**messages_chat_body(body), "stream": False})
    engine.flavor.check_request(req, engine.spec)
    tokens = engine.flavor.prompt_of(req, engine.spec).tokens
    if engine.flavor.name == "vllm":
        return {"input_tokens": tokens, "context_management": {"original_input_tokens": tokens}}
    return {"input_tokens": tokens}


def _prompt_ids(engine: SimEngine, body: JSON) -> list[int]:
    """A prompt's ids: a chat's template markers pad the text's ids up to the chat prompt's count."""
    if isinstance(body.get("messages"), list):
        req = parse_request("chat", {"messages": body["messages"]})
        prompt = engine.flavor.prompt_of(req, engine.spec)
        ids = encode(prompt.text)[: prompt.tokens]
        return ids + [TEMPLATE_TOKEN_ID] * (prompt.tokens - len(ids))
    text = body.get("content" if engine.flavor.name == "llamacpp" else "prompt")
    if not isinstance(text, str):
        field = "content" if engine.flavor.name == "llamacpp" else "prompt"
        raise ApiError(400, f"'{field}' must be a string.", param=field)
    return encode(text)


def _tokenize(engine: SimEngine, body: JSON) -> JSON:
    ids = _prompt_ids(engine, body)
    limit = engine.spec.context_length
    if engine.flavor.name == "llamacpp":
        if body.get("with_pieces"):
            return {"tokens": [{"id": i, "piece": decode([i])} for i in ids]}
        return {"tokens": ids}
    if engine.flavor.name == "sglang":
        return {"tokens": ids, "count": len(ids), "max_model_len": limit}
    return {"count": len(ids), "max_model_len": limit, "tokens": ids, "token_strs": None}


def _detokenize(engine: SimEngine, body: JSON) -> JSON:
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ApiError(400, "'tokens' must be a list of integers.", param="tokens")
    key = {"llamacpp": "content", "sglang": "text"}.get(engine.flavor.name, "prompt")
    return {key: decode(ids)}


def _texts(body: JSON, key: str) -> list[str]:
    value = body.get(key)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [decode(value)]
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return [decode([i for i in v if isinstance(i, int)]) for v in value]
    raise ApiError(400, f"'{key}' must be a string, a list of strings or token ids.", param=key)


def _refuse_pooling(engine: SimEngine, enabled: bool, what: str) -> None:
    if enabled:
        return
    if engine.flavor.name == "llamacpp":
        flag = "--embeddings" if what == "embeddings" else "--reranking"
        message = f"This server does not support {what}. Start it with `{flag}`"
        raise ApiError(501, message, "not_supported")
    raise ApiError(400, _SGLANG_NOT_EMBEDDING)


def _embeddings(engine: SimEngine, body: JSON) -> JSON:
    _refuse_pooling(engine, engine.spec.embeddings, "embeddings")
    texts = _texts(body, "input" if "input" in body or engine.flavor.name != "llamacpp" else "content")
    tokens = sum(count_text_tokens(t) for t in texts)
    data = [{"index": i, "object": "embedding", "embedding": embedding(t)} for i, t in enumerate(texts)]
    model = engine.spec.served_model_name
    if engine.flavor.name == "llamacpp":
        usage: JSON = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"model": model, "object": "list", "usage": usage, "data": data}
    usage = {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
    if engine.flavor.name == "sglang":
        return {"data": data, "model": body.get("model") or model, "object": "list", "usage": usage}
    embed_id = f"embd-{secrets.token_hex(16)}"
    return {
        "id": embed_id,
        "object": "list",
        "created": unix_now(),
        "model": model,
        "data": data,
        "usage": usage,
    }


def _rerank(engine: SimEngine, body: JSON) -> JSON:
    _refuse_pooling(engine, engine.spec.reranking, "reranking")
    query = body.get("query")
    if not isinstance(query, str):
        raise ApiError(400, "'query' must be a string.", param="query")
    documents = _texts(body, "documents")
    scores = sorted(((relevance(query, d), i) for i, d in enumerate(documents)), reverse=True)
    top_n = body.get("top_n")
    if isinstance(top_n, int) and top_n > 0:
        scores = scores[:top_n]
    tokens = count_text_tokens(query) * len(documents) + sum(count_text_tokens(d) for d in documents)
    model = engine.spec.served_model_name
    if engine.flavor.name == "llamacpp":
        ranked = [{"index": i, "relevance_score": s} for s, i in scores]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"model": model, "object": "list", "usage": usage, "results": ranked}
    if engine.flavor.name == "sglang":
        return {"results": [{"score": s, "document": documents[i], "index": i} for s, i in scores]}
    results: list[JSON] = [
        {"index": i, "document": {"text": documents[i]}, "relevance_score": s} for s, i in scores
    ]
    usage = {"total_tokens": tokens}
    return {"id": f"rerank-{secrets.token_hex(16)}", "model": model, "usage": usage, "results": results}
