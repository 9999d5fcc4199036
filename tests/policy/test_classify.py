"""Classification: the first profile whose conditions all hold wins; default catches the rest."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.policy.classify import classify, classify_explained, matches
from gateway.policy.schema import Policy, When
from gateway.records import Features

POLICY = Policy.model_validate(
    {
        "version": 1,
        "profiles": [
            {"name": "vision", "when": {"modalities": {"contains": "image"}}},
            {"name": "long-busy", "when": {"prompt_tokens": {"gte": 6144}, "pool_inflight": {"gte": 2}}},
            {"name": "tools", "when": {"tools": True}},
            {"name": "default"},
        ],
    }
)
BASE = Features(model="m", endpoint="chat", prompt_tokens=100, max_output_tokens=256)


@pytest.mark.parametrize(
    ("features", "profile"),
    [
        (BASE, "default"),
        (
            replace(BASE, modalities=frozenset({"text", "image"}), prompt_tokens=9000, pool_inflight=5),
            "vision",
        ),
        (replace(BASE, prompt_tokens=8192, pool_inflight=3), "long-busy"),
        (replace(BASE, prompt_tokens=8192, pool_inflight=1), "default"),
        (replace(BASE, prompt_tokens=6143, pool_inflight=3), "default"),
        (replace(BASE, tools=True), "tools"),
    ],
)
def test_the_first_matching_profile_wins(features: Features, profile: str) -> None:
    assert classify(POLICY, features).name == profile
    assert classify_explained(POLICY, features).profile.name == profile


def when(**conditions: object) -> When:
    return When.model_validate(conditions)


@pytest.mark.parametrize(
    ("condition", "features", "expected"),
    [
        (when(prompt_tokens={"gt": 10, "lte": 100}), BASE, True),
        (when(prompt_tokens={"gt": 100}), BASE, False),
        (when(prompt_tokens={"eq": 100}), BASE, True),
        (when(prompt_tokens={"lt": 100}), BASE, False),
        (when(max_output_tokens={"gte": 1}), replace(BASE, max_output_tokens=None), False),
        (when(total_tokens={"eq": 356}), BASE, True),
        (when(total_tokens={"eq": 356}), replace(BASE, max_output_tokens=None), True),  # default output
        (when(temperature={"lt": 0.5}), replace(BASE, temperature=0.0), True),
        (when(temperature={"lt": 0.5}), BASE, False),
        (when(n={"gt": 1}), replace(BASE, n=4), True),
        (
            when(modalities={"contains": ["image", "video"]}),
            replace(BASE, modalities=frozenset({"text", "image"})),
            False,
        ),
        (
            when(modalities={"contains_any": ["image", "video"]}),
            replace(BASE, modalities=frozenset({"text", "video"})),
            True,
        ),
        (
            when(modalities={"excludes": "audio"}),
            replace(BASE, modalities=frozenset({"text", "audio"})),
            False,
        ),
        (when(modalities={"in": ["text"]}), BASE, True),
        (when(modalities={"in": ["text"]}), replace(BASE, modalities=frozenset({"text", "image"})), False),
        (when(model={"in": ["m", "x"]}), BASE, True),
        (when(model={"not_in": ["m"]}), BASE, False),
        (when(endpoint={"in": ["completions"]}), BASE, False),
        (when(response_format={"in": ["json_schema"]}), replace(BASE, response_format="json_schema"), True),
        (when(response_format={"in": ["none"]}), BASE, True),
        (when(stream=True), BASE, False),
        (when(stream=False), BASE, True),
    ],
)
def test_conditions(condition: When, features: Features, expected: bool) -> None:
    assert matches(condition, features) is expected


def test_explained_classification_says_why_and_what_was_skipped() -> None:
    result = classify_explained(POLICY, replace(BASE, prompt_tokens=8192, pool_inflight=1))
    assert result.profile.name == "default"
    assert result.skipped[0] == ("vision", "modalities=[text] does not satisfy {contains: image}")
    assert result.skipped[1] == ("long-busy", "pool_inflight=1 does not satisfy {gte: 2}")
    assert "default catches the rest" in result.why
    matched = classify_explained(POLICY, replace(BASE, prompt_tokens=8192, pool_inflight=4))
    assert matched.why == "prompt_tokens=8192 satisfies {gte: 6144}; pool_inflight=4 satisfies {gte: 2}"
