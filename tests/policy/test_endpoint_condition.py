"""Profiles matching on the client API (`endpoint:`), and the shipped agent policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy.classify import classify
from gateway.policy.load import PolicyError, load_policy, parse_policy
from gateway.records import BackendSnapshot
from gateway.routing.request.features import TokenEstimator, extract_features

AGENTS = Path(__file__).parents[2] / "policies" / "agents.yaml"
TOOLS = [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}]
POOL = [BackendSnapshot("sglang-fp8-ngram"), BackendSnapshot("vllm-nvfp4-mtp")]


def profile_of(endpoint: str, body: dict[str, object]) -> str:
    policy = load_policy(AGENTS).policy
    return classify(policy, extract_features(endpoint, {"model": "m", **body}, POOL, TokenEstimator())).name


def test_tool_using_messages_and_responses_turns_are_agent_traffic() -> None:
    turn = {"messages": [{"role": "user", "content": "fix the bug"}], "tools": TOOLS}
    assert profile_of("messages", turn) == "agent"
    assert profile_of("responses", {"input": "fix the bug", "tools": TOOLS}) == "agent"
    assert profile_of("chat", turn) == "default"  # the same body on chat is not an agent turn here
    assert profile_of("messages", {"messages": [{"role": "user", "content": "a title?"}]}) == "agent-short"


def test_a_plain_list_is_short_for_in_and_a_misspelt_api_fails_loudly() -> None:
    text = "version: 1\nprofiles:\n  - name: a\n    when:\n      endpoint: [messages, {}]\n"
    text += "  - name: default\n"
    assert parse_policy(text.format("responses"), "p.yaml").policy.profiles[0].when is not None
    with pytest.raises(PolicyError, match="unknown endpoint mesages"):
        parse_policy(text.format("mesages"), "p.yaml")
    with pytest.raises(PolicyError, match="unknown endpoint"):
        parse_policy(text.replace("[messages, {}]", "{not_in: [embedding]}"), "p.yaml")
