"""chat_to_messages_response: a chat answer becomes an Anthropic Message the SDK accepts."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from gateway.translate import chat_to_messages_response

MODEL = "claude-compatible"


def chat(message: dict[str, Any], finish: str = "stop", **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "Qwen/Qwen3-8B",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
    }


def test_reasoning_text_and_usage() -> None:
    body = chat({"role": "assistant", "content": "Hi!", "reasoning": "Greet back."})
    message = chat_to_messages_response(body, MODEL)
    assert message["id"] == "msg_abc123" and message["model"] == MODEL
    assert message["content"] == [
        {"type": "thinking", "thinking": "Greet back.", "signature": ""},
        {"type": "text", "text": "Hi!"},
    ]
    assert message["stop_reason"] == "end_turn" and message["stop_sequence"] is None
    assert message["usage"]["input_tokens"] == 30 and message["usage"]["output_tokens"] == 12
    anthropic.types.Message.model_validate(message)


def test_tool_calls_become_tool_use_blocks() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "x"}'},
    }
    message = chat_to_messages_response(
        chat(
            {"role": "assistant", "content": None, "reasoning_content": "Use it.", "tool_calls": [call]},
            "tool_calls",
        ),
        MODEL,
    )
    assert message["content"][1] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"city": "x"},
    }
    assert message["stop_reason"] == "tool_use"
    validated = anthropic.types.Message.model_validate(message)
    assert validated.content[1].type == "tool_use"


def test_malformed_arguments_become_an_empty_input() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"cut'}}
    message = chat_to_messages_response(chat({"role": "assistant", "tool_calls": [call]}, "length"), MODEL)
    assert message["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": {}}]
    assert message["stop_reason"] == "max_tokens"


@pytest.mark.parametrize(
    ("finish", "choice", "reason", "sequence"),
    [
        ("stop", {"stop_reason": None}, "end_turn", None),
        ("stop", {"stop_reason": 151645}, "end_turn", None),  # a stop token id is the natural end
        ("stop", {"stop_reason": "###"}, "stop_sequence", "###"),  # vLLM names the stop string
        ("stop", {"matched_stop": "END"}, "stop_sequence", "END"),  # SGLang does too
        ("length", {}, "max_tokens", None),
        ("tool_calls", {}, "tool_use", None),
    ],
)
def test_finish_reasons(finish: str, choice: dict[str, Any], reason: str, sequence: str | None) -> None:
    message = chat_to_messages_response(chat({"role": "assistant", "content": "x"}, finish, **choice), MODEL)
    assert (message["stop_reason"], message["stop_sequence"]) == (reason, sequence)
    anthropic.types.Message.model_validate(message)


def test_cached_prompt_tokens_are_reported_apart() -> None:
    body = chat({"role": "assistant", "content": "x"})
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 20}
    usage = chat_to_messages_response(body, MODEL)["usage"]
    assert usage["input_tokens"] == 10 and usage["cache_read_input_tokens"] == 20
