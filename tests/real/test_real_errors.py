"""The real error shapes and statuses: context overflow and an image sent to a text-only model."""

from __future__ import annotations

import pytest
from engine_fleet import CONTEXT_SIZE
from engine_http import post
from llama_process import LlamaServer
from real_prompts import OVERFLOW_TEXT, chat, image_content

pytestmark = pytest.mark.real

IMAGE_REFUSAL = (
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
)


def _assert_overflow(status: int, error: dict[str, object]) -> None:
    assert status == 400
    assert set(error) == {"code", "message", "type", "n_prompt_tokens", "n_ctx"}
    assert error["code"] == 400
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == CONTEXT_SIZE
    n_prompt = error["n_prompt_tokens"]
    assert isinstance(n_prompt, int) and n_prompt > CONTEXT_SIZE
    assert error["message"] == (
        f"request ({n_prompt} tokens) exceeds the available context size ({CONTEXT_SIZE} tokens), "
        "try increasing it"
    )


def test_context_overflow_is_400_exceed_context_size_error(plain_engine: LlamaServer) -> None:
    response = post(plain_engine.port, "/v1/chat/completions", chat(OVERFLOW_TEXT, max_tokens=4))
    assert set(response.json()) == {"error"}
    _assert_overflow(response.status, response.json()["error"])


def test_streamed_context_overflow_is_a_plain_json_error_before_any_event(plain_engine: LlamaServer) -> None:
    response = post(plain_engine.port, "/v1/chat/completions", chat(OVERFLOW_TEXT, max_tokens=4, stream=True))
    assert response.headers["content-type"].startswith("application/json")
    _assert_overflow(response.status, response.json()["error"])


def test_image_to_text_only_model_is_500_server_error(plain_engine: LlamaServer) -> None:
    response = post(plain_engine.port, "/v1/chat/completions", chat(image_content("What is this?")))
    assert response.status == 500
    assert response.json() == {"error": {"code": 500, "message": IMAGE_REFUSAL, "type": "server_error"}}
