"""The policy models and their JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from gateway.cli import main
from gateway.policy.schema import Policy, policy_json_schema

POLICIES = sorted((Path(__file__).parents[2] / "policies").glob("*.yaml"))
MINIMAL = {"version": 1, "profiles": [{"name": "default"}]}


def test_three_policies_are_shipped() -> None:
    assert {p.name for p in POLICIES} >= {"spark-mtp-split.yaml", "spark-pair.yaml", "spark-home.yaml"}


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_printed_json_schema_validates_every_shipped_policy(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_json_schema_rejects_an_unknown_condition() -> None:
    doc = {
        "version": 1,
        "profiles": [{"name": "a", "when": {"prompt_token": {"gt": 1}}}, {"name": "default"}],
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, policy_json_schema())


def test_minimal_policy_defaults_to_static_routing() -> None:
    policy = Policy.model_validate(MINIMAL)
    assert policy.routing == "static"
    assert policy.routing_for(policy.profiles[0]) == "static"


def test_profile_routing_overrides_the_policy_default() -> None:
    policy = Policy.model_validate({"version": 1, "profiles": [{"name": "default", "routing": "adaptive"}]})
    assert policy.routing_for(policy.profiles[0]) == "adaptive"


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"version": 2, "profiles": [{"name": "default"}]}, "1"),
        ({"version": 1, "profiles": [{"name": "chat", "when": {"stream": True}}]}, "named default"),
        ({"version": 1, "profiles": [{"name": "a"}, {"name": "default"}]}, "add conditions to: a"),
        (
            {
                "version": 1,
                "profiles": [
                    {"name": "a", "when": {"tools": True}},
                    {"name": "a", "when": {"n": {"gt": 1}}},
                    {"name": "default"},
                ],
            },
            "repeated: a",
        ),
        ({"version": 1, "profiles": [{"name": "a", "when": {}}, {"name": "default"}]}, "empty `when`"),
        (
            {"version": 1, "profiles": [{"name": "a", "when": {"prompt_tokens": {}}}, {"name": "default"}]},
            "gt, gte",
        ),
        ({"version": 1, "profiles": [{"name": "default", "objective": "speed"}]}, "ttft"),
        ({"version": 1, "profiles": [{"name": "Default Profile"}]}, "pattern"),
        ({"version": 1, "profiles": [{"name": "default", "prefers": ["x"]}]}, "Extra inputs"),
    ],
)
def test_invalid_policies_are_rejected_with_a_helpful_message(doc: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        Policy.model_validate(doc)
    assert fragment in str(info.value)


def test_require_vision_is_shorthand_for_image_input() -> None:
    policy = Policy.model_validate(
        {"version": 1, "profiles": [{"name": "default", "require": {"vision": True}}]}
    )
    assert policy.profiles[0].require.needed_modalities() == {"image"}


def test_the_adaptive_knobs_have_their_defaults_and_bounds_in_the_printed_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    knobs = json.loads(capsys.readouterr().out)["$defs"]["Adaptive"]["properties"]
    assert {name: knobs[name]["default"] for name in knobs} == {
        "min_samples": 5,
        "explore_epsilon": 0.25,
        "tolerance": 0.25,
        "contended_share": 0.2,
        "refresh_requests": 40,
        "refresh_s": 120.0,
    }
    assert knobs["explore_epsilon"]["maximum"] == 0.5 and all(knobs[n]["description"] for n in knobs)
    policy = Policy.model_validate({**MINIMAL, "adaptive": {"min_samples": 8}})
    assert policy.adaptive.min_samples == 8 and policy.adaptive.explore_epsilon == 0.25
    with pytest.raises(ValidationError, match="less than or equal to 0.5"):
        Policy.model_validate({**MINIMAL, "adaptive": {"explore_epsilon": 0.6}})
    with pytest.raises(ValidationError, match="greater than 0"):
        Policy.model_validate({**MINIMAL, "adaptive": {"refresh_s": 0}})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Policy.model_validate({**MINIMAL, "adaptive": {"refresh_requests": 0}})
