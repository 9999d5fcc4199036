"""What no backend of the pool can serve is refused by the gateway itself, in the OpenAI error shape the
official client raises on, naming the limit, and nothing reaches an engine."""

from __future__ import annotations

import openai
import pytest
from e2e_harness import gateway_over_fleet, image_messages, send, text_messages


async def test_an_image_to_a_pool_without_vision_is_a_400_naming_the_missing_modality() -> None:
    async with gateway_over_fleet("spark-pair-27b") as stack:
        before = stack.upstream_requests()
        with pytest.raises(openai.BadRequestError) as caught:
            await send(stack, image_messages(), 16)
        assert stack.upstream_requests() == before
    error = caught.value
    assert error.status_code == 400
    assert error.code == "unsupported_modality"
    assert error.body == {
        "message": "no backend of pool Qwen3.6-27B accepts image input",
        "type": "invalid_request_error",
        "param": None,
        "code": "unsupported_modality",
    }
    assert error.response.headers["x-gateway-profile"] == "default"


async def test_a_context_no_backend_fits_is_a_400_naming_the_largest_context() -> None:
    async with gateway_over_fleet("spark-pair-27b") as stack:
        before = stack.upstream_requests()
        with pytest.raises(openai.BadRequestError) as caught:
            await send(stack, text_messages(140_000), 256)
        assert stack.upstream_requests() == before
    error = caught.value
    assert error.code == "context_length_exceeded"
    assert "the largest context in pool Qwen3.6-27B is 131072 (backend sglang-fp8-ngram)" in error.message
    assert error.response.headers["x-gateway-profile"] == "long-context"
