"""Every error the gateway answers itself is OpenAI-style JSON: unknown routes, wrong methods and unhandled
exceptions, on the hot completion path and on the full Starlette stack, seen by the official openai
client and over raw HTTP."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import openai
import pytest
from gateway_fakes import running_gateway, settings_for

from gateway.records import BackendSnapshot, Decision

SETTINGS = settings_for({"a": "http://127.0.0.1:1"})  # nothing listens there: no request goes upstream


class BrokenRouter:
    """A router with a bug; its message holds an internal address that must not reach the client."""

    def route(self, endpoint: str, body: Mapping[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        raise RuntimeError("bug while routing to http://10.1.2.3:8000")


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)


async def test_an_unknown_route_reaches_the_openai_client_as_a_named_404() -> None:
    async with running_gateway(SETTINGS, wait_ready=False) as (url, _):
        with pytest.raises(openai.NotFoundError) as caught:
            await _client(url + "/nope/v1").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert "Unknown URL (POST /nope/v1/chat/completions)" in caught.value.message
    assert caught.value.code == "unknown_url"


async def test_a_wrong_method_reaches_the_openai_client_as_a_405_naming_the_allowed_one() -> None:
    async with running_gateway(SETTINGS, wait_ready=False) as (url, _):
        with pytest.raises(openai.APIStatusError) as caught:
            await _client(url + "/v1").get("/chat/completions", cast_to=object)
    error = caught.value
    assert error.status_code == 405 and error.response.headers["allow"] == "POST"
    assert "Method GET is not allowed on /v1/chat/completions; allowed: POST." in error.message
    assert error.code == "method_not_allowed"


async def test_a_bug_on_the_completion_path_is_a_json_500_naming_the_request_id_not_the_bug() -> None:
    async with running_gateway(SETTINGS, wait_ready=False, router=BrokenRouter()) as (url, _):
        client = _client(url + "/v1")
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        error = caught.value
        assert error.code == "internal_error"
        assert f"request id {error.response.headers['x-request-id']}" in error.message
        assert "10.1.2.3" not in error.response.text
        # The server lives on: the next request on the same gateway is answered.
        assert (await client.models.list()).data[0].id == "m"


async def _raw(url: str, method: str, path: str) -> tuple[int, Mapping[str, str], Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url + path, json={}) as response:
        return response.status, response.headers, await response.json(content_type=None)


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/v1/chat/completions", 405, {"POST"}),
        ("PUT", "/v1/completions", 405, {"POST"}),
        ("POST", "/v1/models", 405, {"GET", "HEAD"}),
        ("POST", "/v1/nope", 404, None),
        ("GET", "/nope", 404, None),
    ],
)
async def test_unknown_routes_and_methods_answer_json_over_raw_http(
    method: str, path: str, status: int, allow: set[str] | None
) -> None:
    async with running_gateway(SETTINGS, wait_ready=False) as (url, _):
        got, headers, body = await _raw(url, method, path)
    assert got == status and headers["content-type"] == "application/json"
    allowed = headers.get("allow")
    assert (None if allowed is None else set(allowed.split(", "))) == allow and "x-request-id" in headers
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert path in body["error"]["message"]


async def test_a_bug_on_the_full_stack_is_a_json_500(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_gateway(SETTINGS, wait_ready=False) as (url, gateway):

        def broken(pool: object) -> bool:
            raise RuntimeError("bug in readiness")

        monkeypatch.setattr(gateway.registry, "pool_ready", broken)
        status, headers, body = await _raw(url, "GET", "/ready")
        assert (await _raw(url, "GET", "/health"))[0] == 200  # still serving
    assert status == 500 and headers["content-type"] == "application/json"
    assert body["error"]["code"] == "internal_error" and "bug" not in body["error"]["message"]
