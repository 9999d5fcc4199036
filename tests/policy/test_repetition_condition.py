"""The `repetition` condition: a number condition on the share of the prompt's repeated 4-grams."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.policy.classify import classify, classify_explained
from gateway.policy.load import load_policy
from gateway.policy.schema import Policy
from gateway.records import BackendSnapshot, Features
from gateway.routing.request.features import TokenEstimator, extract_features

REPO = Path(__file__).resolve().parents[2]
POLICY = Policy.model_validate(
    {
        "version": 1,
        "profiles": [
            {"name": "repetitive", "when": {"repetition": {"gte": 0.3}}, "prefer": ["lookup"]},
            {"name": "default", "prefer": ["plain"]},
        ],
    }
)
NOVEL = " ".join(f"w{i}" for i in range(300))


def features(repetition: float) -> Features:
    return Features(
        model="m", endpoint="chat", prompt_tokens=100, max_output_tokens=64, repetition=repetition
    )


@pytest.mark.parametrize(
    ("repetition", "profile"),
    [(0.0, "default"), (0.29, "default"), (0.3, "repetitive"), (0.95, "repetitive")],
)
def test_repetition_bound_classifies(repetition: float, profile: str) -> None:
    assert classify(POLICY, features(repetition)).name == profile


def test_explain_names_the_repetition_condition() -> None:
    explained = classify_explained(POLICY, features(0.1))
    assert explained.profile.name == "default"
    assert explained.skipped == (("repetitive", "repetition=0.1 does not satisfy {gte: 0.3}"),)


def test_a_request_body_reaches_the_profile_through_its_features() -> None:
    backends = [BackendSnapshot(name="lookup"), BackendSnapshot(name="plain")]
    quoting = {
        "model": "m",
        "messages": [{"role": "user", "content": NOVEL}, {"role": "tool", "content": NOVEL}],
    }
    prose = {"model": "m", "messages": [{"role": "user", "content": NOVEL}]}
    estimator = TokenEstimator()
    assert classify(POLICY, extract_features("chat", quoting, backends, estimator)).name == "repetitive"
    assert classify(POLICY, extract_features("chat", prose, backends, estimator)).name == "default"


def test_a_misspelt_bound_is_refused() -> None:
    with pytest.raises(ValidationError, match="repetition"):
        Policy.model_validate(
            {
                "version": 1,
                "profiles": [{"name": "r", "when": {"repetition": {"atleast": 0.3}}}, {"name": "default"}],
            }
        )


def test_the_shipped_content_policy_uses_it() -> None:
    policy = load_policy(REPO / "policies/spark-pair-spec-content.yaml").policy
    assert classify(policy, features(0.8)).name == "repetitive"
    assert classify(policy, features(0.0)).name == "default"
