"""`repetition`: the share of the prompt's word 4-grams that occur more than once, computed from the
request body with bounded work (gateway/repetition.py), and carried on Features."""

from __future__ import annotations

import time

import pytest

from gateway.records import BackendSnapshot
from gateway.repetition import MAX_CHARS, prompt_repetition
from gateway.routing.request.features import TokenEstimator, extract_features

NOVEL = " ".join(f"w{i}" for i in range(400))  # 397 distinct 4-grams


def test_novel_text_repeats_nothing() -> None:
    assert prompt_repetition(None, NOVEL) == 0.0


def test_text_given_twice_repeats_almost_entirely() -> None:
    # 800 words, 797 grams: each of the 397 grams of one copy occurs twice (794); the 3 that straddle the
    # join occur once.
    assert prompt_repetition(None, f"{NOVEL} {NOVEL}") == pytest.approx(794 / 797)


def test_the_share_counts_only_the_repeated_part() -> None:
    passage = " ".join(f"p{i}" for i in range(103))  # 100 grams
    fresh = " ".join(f"f{i}" for i in range(200))
    text = f"{passage} {fresh} {passage}"
    grams = 103 + 200 + 103 - 3
    assert prompt_repetition(None, text) == pytest.approx(200 / grams)


def test_chat_messages_and_tool_call_arguments_count() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": NOVEL}, {"type": "image_url"}]},
        {"role": "assistant", "tool_calls": [{"function": {"name": "read", "arguments": NOVEL}}]},
        {"role": "tool", "content": "done"},
    ]
    assert prompt_repetition(messages, None) > 0.9
    assert prompt_repetition([{"role": "user", "content": NOVEL}], None) == 0.0


def test_malformed_values_give_zero_not_an_error() -> None:
    assert prompt_repetition("not a list", 42) == 0.0
    assert prompt_repetition([None, {"content": {"x": 1}}, {"tool_calls": [1, {"function": 2}]}], None) == 0.0
    assert prompt_repetition(None, ["a b c d", 7, "a b c d"]) > 0


def test_only_the_tail_of_a_huge_prompt_is_read() -> None:
    # A repeated head beyond MAX_CHARS of novel tail is not seen: the figure is the tail's.
    head = f"{NOVEL} {NOVEL} " * 200
    tail = " ".join(f"t{i}" for i in range(MAX_CHARS // 4))
    assert len(tail) >= MAX_CHARS
    assert prompt_repetition(None, head + tail) == 0.0


def test_cost_is_bounded_for_huge_prompts() -> None:
    small = f"{NOVEL} {NOVEL}"
    huge = small * 2_000  # ~5 MB
    many = [{"role": "user", "content": small}] * 20_000

    def cost(messages: object, prompt: object) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            prompt_repetition(messages, prompt)
            best = min(best, time.process_time() - started)
        return best

    # Reading 5 MB or 20,000 messages costs what reading the 16 KB tail does, within a small factor
    # (a scan of the whole input would be hundreds of times dearer).
    reference = cost(None, huge[-MAX_CHARS:])
    assert cost(None, huge) < 10 * reference + 0.002
    assert cost(many, None) < 10 * reference + 0.002


def test_features_carry_the_repetition_of_the_body() -> None:
    backends = [BackendSnapshot(name="b")]
    body = {"model": "m", "messages": [{"role": "user", "content": f"{NOVEL} {NOVEL}"}]}
    features = extract_features("chat", body, backends, TokenEstimator())
    assert features.repetition == pytest.approx(794 / 797, abs=1e-4)
    novel = extract_features("completions", {"model": "m", "prompt": NOVEL}, backends, TokenEstimator())
    assert novel.repetition == 0.0
