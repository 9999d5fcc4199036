"""messages_to_chat: every Messages request field lands where the engines' chat endpoint reads it."""

from __future__ import annotations

import json

import pytest

from gateway.translate import messages_to_chat
from gateway.translate.messages_request import TranslationError

MODEL = "Qwen/Qwen3-8B"


def test_system_blocks_text_and_sampling_fields_map_to_chat() -> None:
    chat = messages_to_chat(
        {
            "model": MODEL,
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}],
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 20,
            "stop_sequences": ["###"],
            "metadata": {"user_id": "u-1"},
        }
    )
    assert chat == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief.\nAnswer in French."},
            {"role": "user", "content": "Hello"},
        ],
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 20,
        "stop": ["###"],
        "user": "u-1",
    }
    assert "stream" not in chat and "stream_options" not in chat  # vLLM refuses stream_options otherwise


def test_string_system_and_stream_ask_for_usage() -> None:
    chat = messages_to_chat(
        {"model": MODEL, "system": "S", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    assert chat["messages"][0] == {"role": "system", "content": "S"}
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_images_become_image_url_parts() -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.png"}},
    ]
    chat = messages_to_chat({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
            ],
        }
    ]


def test_tool_use_and_tool_result_round_of_a_tool_loop() -> None:
    body = {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18C"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        "tools": [
            {"name": "get_weather", "description": "Weather now", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},  # a server tool: no chat counterpart
        ],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    }
    chat = messages_to_chat(body)
    assistant, tool, user = chat["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Need the tool.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    # The tool answer comes right after the call, before the user's new text.
    assert tool == {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"}
    assert user == {"role": "user", "content": "And tomorrow?"}
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather now",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False


def test_a_turn_of_only_tool_results_adds_no_empty_user_message() -> None:
    body = {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
        ],
    }
    assert messages_to_chat(body)["messages"] == [{"role": "tool", "tool_call_id": "t", "content": "ok"}]


def test_assistant_turn_of_only_a_tool_call_has_null_content() -> None:
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    chat = messages_to_chat({"model": MODEL, "messages": [{"role": "assistant", "content": [block]}]})
    assert chat["messages"][0]["content"] is None


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")],
)
def test_tool_choice_kinds(choice: dict[str, str], expected: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tool_choice": choice}
    assert messages_to_chat(body)["tool_choice"] == expected


@pytest.mark.parametrize(("kind", "enabled"), [("enabled", True), ("adaptive", True), ("disabled", False)])
def test_thinking_switches_the_chat_template(kind: str, enabled: bool) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "thinking": {"type": kind, "budget_tokens": 1024},
    }
    assert messages_to_chat(body)["chat_template_kwargs"] == {"enable_thinking": enabled}


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": [{"role": "system", "content": "x"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": 3}]},
    ],
)
def test_malformed_requests_raise_translation_error(body: dict[str, object]) -> None:
    with pytest.raises(TranslationError):
        messages_to_chat(body)
