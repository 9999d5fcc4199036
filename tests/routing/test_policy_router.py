"""PolicyRouter decisions for each shipped policy and each seed scenario shape.

Seed 003's scenarios: A 512 in / 512 out alone, B 8192 / 256 with 4 in flight, C 2048 / 512 with 16 in
flight, D 2048 / 256 with 2 in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy.load import load_policy, parse_policy
from gateway.records import BackendSnapshot, Candidate, Decision
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter

POLICIES = Path(__file__).parents[2] / "policies"
VISION = frozenset({"text", "image", "video"})
SCENARIOS = {"A": (512, 512, 0), "B": (8192, 256, 4), "C": (2048, 512, 16), "D": (2048, 256, 2)}


def router(policy: str) -> PolicyRouter:
    return PolicyRouter(FixedPolicy(load_policy(POLICIES / policy)))


def body(prompt_tokens: int, max_tokens: int, image: bool = False) -> dict[str, object]:
    content: object = "w" * (4 * prompt_tokens)
    if image:
        content = [{"type": "text", "text": content}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    return {"model": "qwen", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def spread(names: list[str], inflight: int, **caps: object) -> list[BackendSnapshot]:
    """The pool with `inflight` requests spread evenly over its backends."""
    return [
        BackendSnapshot(n, inflight=inflight // len(names) + (i < inflight % len(names)), **caps)  # type: ignore[arg-type]
        for i, n in enumerate(names)
    ]


def scenario(policy_router: PolicyRouter, name: str, backends_of: object) -> Decision:
    prompt, output, inflight = SCENARIOS[name]
    return policy_router.route("chat", body(prompt, output), backends_of(inflight))  # type: ignore[operator]


def duo(inflight: int) -> list[BackendSnapshot]:
    return spread(["fp8-base", "fp8-mtp"], inflight, context_length=131072, modalities=VISION)


@pytest.mark.parametrize(
    ("name", "profile", "chosen"),
    [
        ("A", "default", "fp8-mtp"),
        ("B", "long-prefill-concurrent", "fp8-base"),
        ("C", "concurrent-stress", "fp8-mtp"),
        ("D", "chat", "fp8-mtp"),
    ],
)
def test_mtp_split_follows_seed_003(name: str, profile: str, chosen: str) -> None:
    d = scenario(router("spark-mtp-split.yaml"), name, duo)
    assert (d.profile, d.ranked[0]) == (profile, chosen)
    assert len(d.ranked) == 2  # the other instance is the failover


def test_mtp_split_a_lone_long_prompt_stays_on_mtp() -> None:
    d = router("spark-mtp-split.yaml").route("chat", body(8192, 256), duo(0))
    assert (d.profile, d.ranked[0]) == ("default", "fp8-mtp")


def test_mtp_split_fails_over_to_the_other_instance_when_the_preferred_one_is_down() -> None:
    backends = duo(4)
    backends[0] = BackendSnapshot("fp8-base", breaker_open=True, context_length=131072, inflight=2)
    d = router("spark-mtp-split.yaml").route("chat", body(8192, 256), backends)
    assert d.profile == "long-prefill-concurrent" and d.ranked == ("fp8-mtp",)


def pair(inflight: int) -> list[BackendSnapshot]:
    return [
        BackendSnapshot("sglang-fp8-ngram", inflight=inflight // 2, context_length=131072),
        BackendSnapshot("vllm-nvfp4-mtp", inflight=inflight - inflight // 2, context_length=8192),
    ]


@pytest.mark.parametrize(
    ("name", "profile", "chosen"),
    [
        ("A", "default", "vllm-nvfp4-mtp"),
        ("B", "long-context", "sglang-fp8-ngram"),
        ("C", "default", "vllm-nvfp4-mtp"),
        ("D", "default", "vllm-nvfp4-mtp"),
    ],
)
def test_pair_follows_seed_001(name: str, profile: str, chosen: str) -> None:
    d = scenario(router("spark-pair.yaml"), name, pair)
    assert (d.profile, d.ranked[0]) == (profile, chosen)


def test_pair_keeps_long_prompts_off_the_8k_box_and_says_why() -> None:
    d = scenario(router("spark-pair.yaml"), "B", pair)
    assert d.ranked == ("sglang-fp8-ngram",)
    out = next(c for c in d.candidates if c.backend == "vllm-nvfp4-mtp")
    assert out == Candidate(
        "vllm-nvfp4-mtp", eligible=False, reason="context: needs about 8452 tokens, context is 8192"
    )


def test_pair_refuses_a_prompt_longer_than_any_context_with_a_400() -> None:
    d = router("spark-pair.yaml").route("chat", body(200_000, 256), pair(0))
    assert d.refusal is not None and d.refusal.status == 400 and d.refusal.code == "context_length_exceeded"
    assert "the largest context in pool qwen is 131072 (backend sglang-fp8-ngram)" in d.refusal.message


def home(inflight: int, vision_ready: bool = True, vision_starting: bool = False) -> list[BackendSnapshot]:
    return [
        BackendSnapshot("q475-dflash", inflight=inflight, context_length=65536),
        BackendSnapshot(
            "fp8-vision",
            ready=vision_ready,
            starting=vision_starting,
            context_length=65536,
            modalities=VISION,
        ),
    ]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_home_sends_text_to_the_dflash_quant_seed_000(name: str) -> None:
    d = scenario(router("spark-home.yaml"), name, home)
    assert (d.profile, d.ranked) == ("default", ("q475-dflash", "fp8-vision"))


def test_home_sends_images_to_the_vision_build_only() -> None:
    d = router("spark-home.yaml").route("chat", body(512, 256, image=True), home(0))
    assert (d.profile, d.ranked) == ("vision", ("fp8-vision",))
    assert [c.reason for c in d.candidates if not c.eligible] == ["modality: cannot take image input"]


def test_home_answers_503_for_images_while_the_vision_build_is_starting() -> None:
    d = router("spark-home.yaml").route(
        "chat", body(512, 256, image=True), home(0, vision_ready=False, vision_starting=True)
    )
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (503, "no_ready_backend")
    assert "fp8-vision still loading the model" in d.refusal.message


def test_home_answers_400_for_images_when_no_backend_can_see() -> None:
    d = router("spark-home.yaml").route("chat", body(512, 256, image=True), home(0)[:1])
    assert d.refusal is not None and (d.refusal.status, d.refusal.code) == (400, "unsupported_modality")


def test_load_breaks_ties_between_equally_preferred_backends() -> None:
    policy = parse_policy("version: 1\nprofiles:\n  - name: default\n")
    d = PolicyRouter(FixedPolicy(policy)).route(
        "chat", body(10, 10), [BackendSnapshot("busy", inflight=3), BackendSnapshot("idle")]
    )
    assert d.ranked == ("idle", "busy")


class Reloadable:
    def __init__(self, text: str) -> None:
        self.current = parse_policy(text)
        self.last_error: str | None = None


def test_a_new_policy_applies_to_the_next_request() -> None:
    source = Reloadable("version: 1\nprofiles:\n  - name: default\n    prefer: [a]\n")
    r = PolicyRouter(source)
    backends = [BackendSnapshot("a"), BackendSnapshot("b")]
    assert r.route("chat", body(10, 10), backends).ranked[0] == "a"
    source.current = parse_policy("version: 1\nprofiles:\n  - name: default\n    prefer: [b]\n")
    assert r.route("chat", body(10, 10), backends).ranked[0] == "b"


class FixedObjective:
    name = "objective"

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    def score(self, ctx: object, backends: object) -> dict[str, float]:
        return self.scores


def test_the_objective_scorer_counts_only_for_adaptive_profiles() -> None:
    text = (
        "version: 1\nweights: {preference: 1.0, load: 0.0, objective: 2.0}\nprofiles:\n"
        "  - name: adaptive\n    when: {stream: true}\n    routing: adaptive\n    prefer: [a]\n"
        "  - name: default\n    prefer: [a]\n"
    )
    r = PolicyRouter(FixedPolicy(parse_policy(text)), objective_scorer=FixedObjective({"a": 0.0, "b": 1.0}))
    backends = [BackendSnapshot("a"), BackendSnapshot("b")]
    assert r.route("chat", body(10, 10), backends).ranked[0] == "a"
    streamed = {**body(10, 10), "stream": True}
    assert r.route("chat", streamed, backends).ranked[0] == "b"


def test_observed_usage_teaches_the_estimator() -> None:
    r = router("spark-home.yaml")
    req = body(1000, 10)  # 4000 characters
    r.observe_prompt_tokens("q475-dflash", req, 2000)
    r.observe_prompt_tokens("fp8-vision", req, 2000)
    assert r.explain("chat", req, home(0))["features"]["prompt_tokens"] == 2000 + 4
