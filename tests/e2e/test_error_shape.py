"""One error shape, as the official SDKs see it through a gateway over the built-in twin fleet
(spark-duo-35b, two generative vLLM engines): an error the gateway makes and an error an engine makes
reach an openai client as the same `{"message", "type", "param", "code"}` with the gateway's types, the
engine's message kept, and reach an anthropic client in Anthropic's shape on /v1/messages. An engine's
"no such route" 404 names the endpoint and the backend, and is remembered."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import openai
import pytest
from e2e_harness import Stack, gateway_over_fleet

OPENAI_KEYS = {"message", "type", "param", "code"}
GATEWAY_TYPES = {"invalid_request_error", "not_found_error"}
HI: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with gateway_over_fleet("spark-duo-35b") as s:
        yield s


def _error_of(exc: openai.APIStatusError) -> dict[str, object]:
    assert isinstance(exc.body, dict), exc.body  # the SDK parsed {"error": {...}} and kept the inside
    return exc.body


async def test_openai_sees_one_shape_for_gateway_and_engine_errors(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as gateway_made:  # the gateway's: no such model
        await stack.client.chat.completions.create(model="no-such-model", messages=[HI[0]])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError) as engine_made:  # the engine's: vLLM judges max_tokens
        await stack.client.chat.completions.create(model=stack.model, messages=[HI[0]], max_tokens=-5)  # type: ignore[list-item]
    ours, theirs = _error_of(gateway_made.value), _error_of(engine_made.value)
    assert set(ours) == set(theirs) == OPENAI_KEYS
    assert ours["type"] in GATEWAY_TYPES and theirs["type"] == "invalid_request_error"  # not BadRequestError
    assert "max_tokens must be at least 1" in str(theirs["message"])  # the engine's own words
    assert theirs["param"] == "max_tokens" and theirs["code"] == "engine_error"


@pytest.fixture
async def claude(stack: Stack) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=stack.url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


async def test_anthropic_sees_its_shape_for_gateway_and_engine_errors(
    stack: Stack, claude: anthropic.AsyncAnthropic
) -> None:
    client = claude
    with pytest.raises(anthropic.NotFoundError) as gateway_made:
        await client.messages.create(model="no-such-model", max_tokens=8, messages=HI)
    with pytest.raises(anthropic.BadRequestError) as engine_made:
        await client.messages.create(model=stack.model, max_tokens=-5, messages=HI)
    for exc, kind in ((gateway_made.value, "not_found_error"), (engine_made.value, "invalid_request_error")):
        assert exc.body == {"type": "error", "error": {"type": kind, "message": exc.body["error"]["message"]}}  # type: ignore[index]
    assert "max_tokens must be at least 1" in engine_made.value.body["error"]["message"]  # type: ignore[index]


async def test_messages_without_max_tokens_is_anthropics_400(
    stack: Stack, claude: anthropic.AsyncAnthropic
) -> None:
    client = claude
    before = stack.upstream_requests()
    # The SDK requires max_tokens; its low-level post sends the body as a client without that check would.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.post(
            "/v1/messages", body={"model": stack.model, "messages": HI}, cast_to=anthropic.types.Message
        )
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "max_tokens" in error["message"]
    assert stack.upstream_requests() == before  # refused at the door


async def test_an_engines_missing_route_is_named_and_remembered(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as first:
        await stack.client.embeddings.create(model=stack.model, input="hi")
    error = _error_of(first.value)
    assert set(error) == OPENAI_KEYS and error["code"] == "endpoint_not_served"
    assert "/v1/embeddings" in str(error["message"]) and any(
        name in str(error["message"]) for name in stack.fleet.names
    )
    backends = (await stack.http.get("/gateway/backends")).json()
    listed = backends["backends"] if isinstance(backends, dict) else backends
    assert all(b["unserved_endpoints"] == ["embeddings"] for b in listed)
    # Remembered: the next one is refused by the gateway itself, the engines not asked again.
    with pytest.raises(openai.BadRequestError) as second:
        await stack.client.embeddings.create(model=stack.model, input="hi")
    assert "/v1/embeddings" in str(_error_of(second.value)["message"])
    assert second.value.response.headers.get("x-gateway-backend", "") == ""
    # Chat, served by the same engines, is untouched.
    answer = await stack.client.chat.completions.create(model=stack.model, messages=[HI[0]], max_tokens=4)  # type: ignore[list-item]
    assert answer.choices
