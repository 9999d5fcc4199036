"""PolicyRouter.explain: features, the matched profile and why, every candidate's fate, the choice."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.policy.load import load_policy
from gateway.records import BackendSnapshot
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter

POLICY = Path(__file__).parents[2] / "policies" / "spark-mtp-split.yaml"
BODY = {"model": "qwen", "messages": [{"role": "user", "content": "w" * 32768}], "max_tokens": 256}


def backends(mtp_starting: bool = False) -> list[BackendSnapshot]:
    return [
        BackendSnapshot("fp8-base", inflight=2, max_concurrency=8, context_length=131072),
        BackendSnapshot(
            "fp8-mtp", inflight=2, context_length=131072, ready=not mtp_starting, starting=mtp_starting
        ),
        BackendSnapshot("tiny", context_length=4096),
    ]


def test_explain_shows_features_profile_candidates_and_choice() -> None:
    router = PolicyRouter(FixedPolicy(load_policy(POLICY)))
    e = router.explain("chat", BODY, backends())
    assert e["features"]["prompt_tokens"] == 8196 and e["features"]["pool_inflight"] == 4
    assert e["profile"]["name"] == "long-prefill-concurrent"
    assert (
        e["profile"]["why"] == "prompt_tokens=8196 satisfies {gte: 6144}; pool_inflight=4 satisfies {gte: 2}"
    )
    by_name = {c["backend"]: c for c in e["candidates"]}
    assert by_name["tiny"]["eligible"] is False and by_name["tiny"]["reason"].startswith(
        "context: needs about"
    )
    assert by_name["fp8-base"]["scores"] == {"preference": 1.0, "load": 0.75}
    assert by_name["fp8-base"]["score"] == 1.0 + 0.3 * 0.75
    assert by_name["fp8-mtp"]["scores"] == {"preference": 0.5, "load": round(1 / 3, 6)}
    assert e["ranked"] == ["fp8-base", "fp8-mtp"] and e["chosen"] == "fp8-base"
    assert e["refusal"] is None
    assert e["scoring"]["weights"] == {"preference": 1.0, "load": 0.3}
    assert e["policy"]["sha256"] == router.policy.current.sha256
    json.dumps(e)  # JSON-able as is


def test_explain_agrees_with_route() -> None:
    router = PolicyRouter(FixedPolicy(load_policy(POLICY)))
    for pool in (backends(), backends(mtp_starting=True)):
        d = router.route("chat", BODY, pool)
        e = router.explain("chat", BODY, pool)
        assert (e["profile"]["name"], tuple(e["ranked"])) == (d.profile, d.ranked)


def test_explain_lists_skipped_profiles_and_a_refusal() -> None:
    router = PolicyRouter(FixedPolicy(load_policy(POLICY)))
    small = {"model": "qwen", "prompt": "hi", "max_tokens": 10}
    e = router.explain("completions", small, [BackendSnapshot("fp8-mtp", ready=False, starting=True)])
    assert e["profile"]["name"] == "default"
    assert [s["profile"] for s in e["profile"]["skipped"]] == [
        "long-prefill-concurrent",
        "concurrent-stress",
        "chat",
    ]
    assert e["chosen"] is None
    assert e["refusal"]["status"] == 503 and e["refusal"]["code"] == "no_ready_backend"


def test_explain_says_when_adaptive_routing_has_no_objective_scorer() -> None:
    from gateway.policy.load import parse_policy

    router = PolicyRouter(
        FixedPolicy(parse_policy("version: 1\nrouting: adaptive\nprofiles:\n  - name: default\n"))
    )
    e = router.explain("chat", BODY, [BackendSnapshot("a")])
    assert e["profile"]["routing"] == "adaptive"
    assert "no objective scorer is configured" in e["scoring"]["note"]
