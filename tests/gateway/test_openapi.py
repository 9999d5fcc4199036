"""GET /openapi.json describes the API a user really calls: the README's requests, tools and images
validate against it, every registered route is listed (and nothing else), and the gateway's own answers
validate against the response schemas it publishes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_fakes import settings_for
from jsonschema import Draft202012Validator
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.app import build_app, build_gateway
from gateway.commands.serve import settings_for_fleet
from gateway.sim.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
# The fleet `spark-gateway serve` runs with no arguments: the README's examples are written against it.
FLEET = load_fleet(REPO / "deploy/fleets/spark-duo-35b.yaml")
MODEL = FLEET.engines[0].served_model_name


def _readme_json(pattern: str) -> dict[str, Any]:
    match = re.search(pattern, README, re.DOTALL)
    assert match is not None, f"README example not found: {pattern}"
    body: dict[str, Any] = json.loads(match.group(1))
    return body


def _fleet_app() -> Starlette:
    urls = {engine.name: f"http://127.0.0.1:{i + 1}" for i, engine in enumerate(FLEET.engines)}
    return build_app(build_gateway(settings_for_fleet(FLEET, urls)))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The default fleet's gateway (policy router, so every /gateway/* route), in-process, never started:
    nothing is probed or sent upstream."""
    transport = httpx.ASGITransport(app=_fleet_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield http


@pytest.fixture
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document: dict[str, Any] = response.json()
    return document


def _validator(spec: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """OpenAPI 3.1 schemas are JSON Schema 2020-12; their `#/components/...` refs resolve in this root."""
    return Draft202012Validator({**schema, "components": spec["components"]})


def _request(spec: dict[str, Any], path: str) -> Draft202012Validator:
    return _validator(
        spec, spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )


def _response(spec: dict[str, Any], path: str, method: str, status: int) -> Draft202012Validator:
    responses = spec["paths"][path][method]["responses"]
    answer = responses.get(str(status), responses["default"])
    return _validator(spec, answer["content"]["application/json"]["schema"])


def _errors(validator: Draft202012Validator, body: dict[str, Any]) -> list[str]:
    return [error.message for error in validator.iter_errors(body)]


def test_the_readme_requests_validate(spec: dict[str, Any]) -> None:
    chat = _readme_json(r"-d '(\{.*?\})'")
    assert chat["model"] == MODEL and chat["max_tokens"] > 16  # beyond what the old fuzzing schema took
    assert _errors(_request(spec, "/v1/chat/completions"), chat) == []
    explained = _readme_json(r"echo '(\{.*?\})' \\\n\s*\| spark-gateway explain")
    assert _errors(_request(spec, "/gateway/explain"), explained) == []


def test_a_request_with_tools_and_an_image_validates(spec: dict[str, Any]) -> None:
    weather = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture, and what is the weather there?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": weather}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "max_completion_tokens": 2048,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.7,
        "top_p": 0.9,
        "stop": ["\n\n"],
        "n": 1,
        "seed": 7,
        "response_format": {"type": "json_object"},
        "top_k": 20,  # an engine's own field: passed through, so allowed
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert _errors(_request(spec, "/v1/chat/completions"), body) == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "image part without image_url",
        ),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "unknown role"),
        ({"messages": [{"role": "tool", "content": "sunny"}]}, "tool message without tool_call_id"),
        ({"messages": [{"role": "user", "content": 3}]}, "content neither text nor parts"),
        ({"model": "no-such-model"}, "a model this gateway does not serve"),
        ({"max_tokens": 0}, "an empty output budget"),
        ({"tool_choice": "sometimes"}, "an unknown tool_choice"),
    ],
)
def test_a_malformed_request_does_not_validate(
    spec: dict[str, Any], change: dict[str, Any], why: str
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change}
    assert _errors(_request(spec, "/v1/chat/completions"), body), why


def test_an_engine_specific_content_part_validates(spec: dict[str, Any]) -> None:
    video = {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}}
    body = {"model": MODEL, "messages": [{"role": "user", "content": [video]}]}
    assert _errors(_request(spec, "/v1/chat/completions"), body) == []
    completion = {"model": MODEL, "prompt": [[1, 2, 3]], "max_tokens": 4096, "echo": False}
    assert _errors(_request(spec, "/v1/completions"), completion) == []


def test_every_registered_route_is_listed_with_its_methods_and_nothing_else(spec: dict[str, Any]) -> None:
    app = _fleet_app()
    routes = {route.path: route.methods or set() for route in app.routes if isinstance(route, Route)}
    assert set(spec["paths"]) == set(routes)
    for path, methods in routes.items():
        assert set(spec["paths"][path]) == {m.lower() for m in methods if m != "HEAD"}, path
    gateway_routes = {"/gateway/backends", "/gateway/stats", "/gateway/explain", "/gateway/policy/reload"}
    assert gateway_routes <= set(spec["paths"])


async def test_a_gateway_without_a_policy_does_not_list_the_policy_routes() -> None:
    app = build_app(build_gateway(settings_for({"a": "http://127.0.0.1:1"})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:
        paths = set((await http.get("/openapi.json")).json()["paths"])
    assert "/gateway/backends" in paths and "/v1/chat/completions" in paths
    assert "/gateway/explain" not in paths and "/gateway/policy/reload" not in paths


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "/v1/models", None),
        ("get", "/health", None),
        ("get", "/ready", None),
        ("get", "/gateway/backends", None),
        ("get", "/gateway/stats", None),
        ("post", "/gateway/explain", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        ("post", "/gateway/explain", {"model": "nope", "messages": []}),
        ("post", "/gateway/policy/reload", None),
        ("post", "/v1/chat/completions", {"model": "nope", "messages": []}),
        ("post", "/v1/completions", {"model": MODEL}),
    ],
)
async def test_the_gateways_own_answers_match_the_published_schemas(
    client: httpx.AsyncClient, spec: dict[str, Any], method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = await client.request(method.upper(), path, json=body)
    assert response.headers["content-type"] == "application/json"
    errors = _errors(_response(spec, path, method, response.status_code), response.json())
    assert errors == [], (response.status_code, response.text[:300])
