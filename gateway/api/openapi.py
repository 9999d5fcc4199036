"""GET /openapi.json: an OpenAPI 3.1 description of the routes this gateway serves.

The schemas come from the pydantic models in openai_models.py and admin_models.py (pydantic writes JSON
Schema 2020-12, which OpenAPI 3.1 takes as is), and only the routes app.py registered are listed: a
gateway without a policy has no /gateway/explain. Request bodies allow extra properties because they pass
through to the engine. The served model names, when given, become the `model` enum.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from http import HTTPStatus
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from gateway import __version__
from gateway.api import admin_models as admin
from gateway.api import agent_models as agent
from gateway.api import openai_models as oai
from gateway.api.asgi import Receive, Scope, Send, send_bytes

_REF = "#/components/schemas/{model}"
_MODELS: tuple[type[BaseModel], ...] = (
    oai.ChatCompletionRequest,
    oai.CompletionRequest,
    oai.ChatCompletion,
    oai.ChatCompletionChunk,
    oai.Completion,
    oai.ModelList,
    oai.ErrorResponse,
    admin.Health,
    admin.Ready,
    admin.BackendsDocument,
    admin.StatsDocument,
    admin.ChatExplainRequest,
    admin.CompletionExplainRequest,
    admin.Explanation,
    admin.ReloadAccepted,
    admin.ReloadRejected,
    agent.MessagesRequest,
    agent.CountTokensRequest,
    agent.ResponsesRequest,
    agent.EmbeddingsRequest,
    agent.RerankRequest,
    agent.TokenizeRequest,
    agent.DetokenizeRequest,
    agent.ApiAnswer,
)
# Request schemas whose `model` must name a served pool (or alias).
_MODEL_FIELDS = (
    "ChatCompletionRequest",
    "CompletionRequest",
    "ChatExplainRequest",
    "CompletionExplainRequest",
)

_DESCRIPTION = (
    "An OpenAI-compatible gateway: each generation request is classified into a workload profile and "
    "routed to the engine instance that serves it best. Fields not listed pass through to the engine. "
    "API keys, when configured, go in `Authorization: Bearer <key>`: a client key for /v1/* and "
    "/openapi.json, the admin key for /gateway/*; /health and /ready are always open."
)
_STRING = {"schema": {"type": "string"}}
_ANSWER_HEADERS = {
    "x-gateway-backend": {"description": "the backend that answered", **_STRING},
    "x-gateway-profile": {"description": "the workload profile the request matched", **_STRING},
    "x-gateway-overhead-ms": {
        "description": "the gateway's own time (parse, route, rewrite), queue wait excluded",
        **_STRING,
    },
    "x-gateway-queue-ms": {"description": "time spent waiting for a slot or a warming backend", **_STRING},
    "x-request-id": {"description": "the client's x-request-id, or a new one", **_STRING},
}
_ERROR_HEADERS = {
    "x-gateway-error-source": {
        "description": "gateway (it refused) or upstream (a backend failed)",
        **_STRING,
    },
    "x-request-id": _ANSWER_HEADERS["x-request-id"],
}


class _Schema(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # a title on every property is noise in generated docs and clients


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _responses(
    ok: dict[str, Any], errors: Sequence[int] = (), other: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """200, the `errors` statuses with the OpenAI error body, `other` statuses with a body of their own,
    then `default` for anything else (405 on a wrong method, 500 on a gateway bug, 503 while draining)."""
    error = {"content": _json(_ref(oai.ErrorResponse)), "headers": _ERROR_HEADERS}
    listed = {str(status): {"description": HTTPStatus(status).phrase, **error} for status in errors}
    return {"200": ok, **listed, **(other or {}), "default": {"description": "any other error", **error}}


def _ok(model: type[BaseModel]) -> dict[str, Any]:
    return {"description": "ok", "content": _json(_ref(model))}


def _operation(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    tag = "gateway" if op_id.startswith("gateway") else "openai"
    return {"operationId": op_id, "summary": summary, "tags": [tag], "responses": responses, **extra}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": _json(schema)}


def _generation(
    op_id: str, summary: str, request: type[BaseModel], answer: type[BaseModel], frame: type[BaseModel]
) -> dict[str, Any]:
    frames = f"`data: <{frame.__name__}>` frames"
    ok = {
        "description": "the completion, or with `stream: true` its server-sent events",
        "headers": _ANSWER_HEADERS,
        "content": {
            **_json(_ref(answer)),
            "text/event-stream": {
                "schema": {"type": "string", "description": frames + ", then `data: [DONE]`"}
            },
        },
    }
    responses = _responses(ok, (400, 401, 404, 413, 415, 429, 502, 503, 504))
    return {"post": _operation(op_id, summary, responses, requestBody=_body(_ref(request)))}


def _get(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"get": _operation(op_id, summary, responses, **extra)}


def _operations() -> dict[str, dict[str, Any]]:
    """Every route the gateway can serve, by path."""
    metrics_ok = {"description": "Prometheus text exposition", "content": {"text/plain": _STRING}}
    explain_body = _body({"anyOf": [_ref(admin.ChatExplainRequest), _ref(admin.CompletionExplainRequest)]})
    not_ready = {"description": "some pool has no ready backend", "content": _json(_ref(admin.Ready))}
    rejected = {"description": "the edit was refused", "content": _json(_ref(admin.ReloadRejected))}
    return {
        "/v1/chat/completions": _generation(
            "createChatCompletion",
            "Chat completion",
            oai.ChatCompletionRequest,
            oai.ChatCompletion,
            oai.ChatCompletionChunk,
        ),
        "/v1/completions": _generation(
            "createCompletion", "Text completion", oai.CompletionRequest, oai.Completion, oai.Completion
        ),
        "/v1/models": _get("listModels", "One card per model pool", _responses(_ok(oai.ModelList), (401,))),
        "/health": _get("health", "The process is alive", _responses(_ok(admin.Health)), security=[]),
        "/ready": _get(
            "ready",
            "Every pool has a ready backend",
            _responses(_ok(admin.Ready), other={"503": not_ready}),
            security=[],
        ),
        "/metrics": _get("metrics", "Prometheus metrics", _responses(metrics_ok, (401, 403))),
        "/openapi.json": _get(
            "openapi",
            "This document",
            _responses({"description": "OpenAPI 3.1", "content": _json({"type": "object"})}, (401,)),
        ),
        **_agent_operations(),
        "/gateway/backends": _get(
            "gatewayBackends",
            "Backends, pools, breakers and queues",
            _responses(_ok(admin.BackendsDocument), (401, 403)),
        ),
        "/gateway/stats": _get(
            "gatewayStats",
            "Live measurements per backend x profile",
            _responses(_ok(admin.StatsDocument), (401, 403)),
        ),
        "/gateway/explain": {
            "post": _operation(
                "gatewayExplain",
                "Why a request would go where it goes (nothing is sent upstream)",
                _responses(_ok(admin.Explanation), (400, 401, 403, 404)),
                requestBody=explain_body,
            )
        },
        "/gateway/policy/reload": {
            "post": _operation(
                "gatewayPolicyReload",
                "Re-read the policy file now; a bad edit leaves the policy in force",
                _responses(_ok(admin.ReloadAccepted), (401, 403), {"400": rejected}),
            )
        },
        **_engine_operations(),
        **_ui_operations(),
    }


def _engine_operations() -> dict[str, dict[str, Any]]:
    """Engine containers (api/engines_admin.py), served when engines are configured."""
    document = {"description": "engines and device budgets", "content": _json({"type": "object"})}
    acted = {"409": {"description": "it could not start (no room) or was still serving"}}
    name = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]

    def action(op_id: str, summary: str) -> dict[str, Any]:
        responses = _responses(document, (401, 403, 404), acted)
        return {"post": _operation(op_id, summary, responses, parameters=name)}

    return {
        "/gateway/engines": _get("gatewayEngines", "Engine containers", _responses(document, (401, 403))),
        "/gateway/engines/{name}/start": action("gatewayEngineStart", "Start an engine's container"),
        "/gateway/engines/{name}/stop": action("gatewayEngineStop", "Drain, then stop an engine"),
    }


def _ui_operations() -> dict[str, dict[str, Any]]:
    """The status page (api/ui.py): its files, open to all (no data in them), and the two admin routes it
    reads besides /gateway/backends, /gateway/stats and /gateway/engines."""
    html = {"description": "the status page", "content": {"text/html": _STRING}}
    asset = {
        "description": "one of the page's files",
        "content": {"text/javascript": _STRING, "text/css": _STRING},
    }
    name = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
    limits = [
        {"name": n, "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0}}
        for n in ("since", "limit")
    ]
    feed = {"description": "recent decisions as sent, newest first", "content": _json({"type": "object"})}
    policy = {"description": "the policy in force and its last reload", "content": _json({"type": "object"})}
    return {
        "/ui": _get("statusPage", "The status page", _responses(html), security=[]),
        "/ui/": _get("statusPageSlash", "The status page", _responses(html), security=[]),
        "/ui/{name}": _get(
            "statusPageFile",
            "A file of the status page",
            _responses(asset, (404,)),
            parameters=name,
            security=[],
        ),
        "/gateway/decisions": _get(
            "gatewayDecisions",
            "Recent routing decisions",
            _responses(feed, (400, 401, 403)),
            parameters=limits,
        ),
        "/gateway/policy": _get("gatewayPolicy", "The policy in force", _responses(policy, (401, 403))),
    }


def _agent_operations() -> dict[str, dict[str, Any]]:
    """The other client APIs, routed like chat; their bodies and answers are the engines' own."""
    answer = {"description": "the engine's answer, or with `stream: true` its server-sent events",
              "headers": _ANSWER_HEADERS, "content": _json(_ref(agent.ApiAnswer))}  # fmt: skip
    errors = (400, 401, 404, 413, 415, 429, 502, 503, 504)

    def post(op_id: str, summary: str, request: type[BaseModel]) -> dict[str, Any]:
        responses = _responses(answer, errors)
        return {"post": _operation(op_id, summary, responses, requestBody=_body(_ref(request)))}

    rerank = post("createRerank", "Rerank documents against a query", agent.RerankRequest)
    by_id = _responses(answer, (401, 404, 502))
    return {
        "/v1/messages": post("createMessage", "Anthropic Messages", agent.MessagesRequest),
        "/v1/messages/count_tokens": post(
            "countMessageTokens", "Anthropic Messages token count", agent.CountTokensRequest
        ),
        "/v1/responses": post("createResponse", "Responses API", agent.ResponsesRequest),
        "/v1/responses/{response_id}": {
            "get": _operation("getResponse", "A stored response, from the backend holding it", by_id),
            "delete": _operation("deleteResponse", "Forget where a stored response lives", by_id),
        },
        "/v1/embeddings": post("createEmbedding", "Embeddings", agent.EmbeddingsRequest),
        "/v1/rerank": rerank,
        "/rerank": {"post": {**rerank["post"], "operationId": "rerankAlias"}},
        "/v1/reranking": {"post": {**rerank["post"], "operationId": "rerankingAlias"}},
        "/tokenize": post("tokenize", "Prompt to token ids", agent.TokenizeRequest),
        "/detokenize": post("detokenize", "Token ids to text", agent.DetokenizeRequest),
    }


def _schemas(models: Sequence[str]) -> dict[str, Any]:
    _, document = models_json_schema(
        [(model, "validation") for model in _MODELS], ref_template=_REF, schema_generator=_Schema
    )
    schemas: dict[str, Any] = document["$defs"]
    if models:
        for name in _MODEL_FIELDS:
            schemas[name]["properties"]["model"]["enum"] = list(models)
    return schemas


def openapi_spec(paths: Collection[str] | None = None, models: Sequence[str] = ()) -> dict[str, Any]:
    """The description of `paths` (every known route when None); `models` restricts `model` to them."""
    served = {path: ops for path, ops in _operations().items() if paths is None or path in paths}
    return {
        "openapi": "3.1.0",
        "info": {"title": "spark-gateway", "version": __version__, "description": _DESCRIPTION},
        "security": [{"apiKey": []}],
        "paths": served,
        "components": {
            "schemas": _schemas(models),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
    }


class OpenApi:
    """The document is built on the first request, not at start-up: most gateways never serve it."""

    def __init__(self, paths: Collection[str], models: Sequence[str] = ()) -> None:
        self.paths = frozenset(paths)
        self.models = tuple(models)
        self._body: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._body is None:
            self._body = orjson.dumps(openapi_spec(self.paths, self.models))
        await send_bytes(send, 200, self._body, [(b"content-type", b"application/json")])
